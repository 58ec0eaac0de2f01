//! Faults a real cluster has, against the real broker: the broker killed with
//! SIGKILL and started again while kshard serves and while it catches up, a
//! topic deleted live, a group deleted live (DeleteGroups), offsets expired by
//! the broker, and the log cleaner compacting `__consumer_offsets` under a
//! running kshard. kshard recovers by itself, says so on `/ready` while it
//! cannot know, and ends with the lag Kafka's own tool reports.

mod common;

use std::time::{Duration, Instant};

use common::*;
use kshard_kafka::{Admin, Client, OffsetCommitter, RecordWriter, TopicSpec};
use kshard_lag::service::ServeOptions;
use kshard_testkit::{Broker, kafka_consumer_groups, unique_name};

fn fill(settings: &Client, topic: &str, partitions: i32, records: u32) {
    let admin = Admin::new(settings, Duration::from_secs(30)).expect("admin");
    admin.create_topic(&TopicSpec { name: topic.into(), partitions, replication: 1, configs: vec![] }).expect("topic");
    produce(settings, topic, partitions, records);
}

fn produce(settings: &Client, topic: &str, partitions: i32, records: u32) {
    let writer = RecordWriter::new(settings).expect("producer");
    for p in 0..partitions {
        for i in 0..records {
            writer.send(topic, p, format!("k{i}").as_bytes(), Some(b"v")).expect("send");
        }
    }
    writer.flush(Duration::from_secs(60)).expect("flush");
}

fn service(settings: &Client, prefix: &str) -> TestService {
    // Stale after one interval plus the request timeout: about 5 s.
    let options = ServeOptions {
        watermark_interval: Duration::from_millis(200),
        request_timeout: Duration::from_secs(5),
        // The cluster families (a deleted topic's log-directory size among
        // them) asked every second, not every 30 s: a wait of 30 s for a
        // deleted topic's series to go passed or failed by the phase of
        // that refresh.
        cluster_info: kshard_lag::ClusterInfoSettings {
            interval: Duration::from_secs(1),
            ..kshard_lag::ClusterInfoSettings::default()
        },
        monitor: only(prefix),
        ..ServeOptions::new(settings.settings().clone())
    };
    TestService::start(options)
}

/// Waits until `/ready` answers `status`; returns the body.
fn wait_status(service: &mut TestService, status: u16, what: &str, within: Duration) -> String {
    until(what, within, Duration::from_millis(200), || match service.get("/ready") {
        (s, body) if s == status => Ok(body),
        (_, body) => Err(format!("/ready did not answer {status}: {body}")),
    })
}

/// Waits until kshard's lag equals what `kafka-consumer-groups` reports.
fn agrees_with_kafka(service: &mut TestService, brokers: &str, prefix: &str, what: &str) {
    until(what, Duration::from_secs(60), Duration::from_millis(500), || {
        let kafka = kafka_consumer_groups(brokers, prefix);
        let ours = kshard_api_lag(service, prefix);
        if !kafka.is_empty() && ours == kafka { Ok(()) } else { Err(format!("kshard {ours:#?} != kafka {kafka:#?}")) }
    });
}

/// The broker killed under a service that serves: `/ready` turns 503 once
/// the watermarks are older than the staleness limit (5.2 s here; allowed 5 s
/// more for a slow machine), saying why, and no lag is exported or served as
/// current. A second service started while the broker is down says it waits
/// for the brokers and is not ready until they are back. Both serve Kafka's
/// lag once the broker is back.
#[test]
#[ignore = "needs the real broker or etcd: scripts/test.sh runs it (or cargo test -- --include-ignored)"]
fn broker_killed_while_serving_and_a_service_started_while_it_is_down() {
    let broker = Broker::start_private(&[]);
    let settings = Client::to_brokers(broker.brokers());
    let p = unique_name("fault-kill");
    let topic = format!("{p}-t");
    fill(&settings, &topic, 2, 30);
    let group = format!("{p}-g");
    let committer = OffsetCommitter::new(&settings, &group).expect("committer");
    committer.commit(&[(&topic, 0, 10), (&topic, 1, 20)]).expect("commit");

    let mut serving = service(&settings, &p);
    serving.wait_ready();
    agrees_with_kafka(&mut serving, broker.brokers(), &p, "before the kill");

    // Killed while serving: within the staleness limit /ready says why, and
    // no lag is exported as current.
    broker.kill();
    let killed = Instant::now();
    let body = wait_status(&mut serving, 503, "after SIGKILL", Duration::from_secs(60));
    let told = killed.elapsed();
    eprintln!("/ready 503 {:.1} s after the broker was killed (stale after 5.2 s)", told.as_secs_f64());
    assert!(told <= Duration::from_millis(5_200) + Duration::from_secs(5), "/ready said so after {told:?}");
    assert!(body.contains("watermarks are"), "the reason is stale watermarks: {body}");
    let m = serving.metrics();
    assert_eq!(m.get("kshard_data_current"), Some(&0.0));
    assert!(!m.keys().any(|k| k.contains(&group)), "no stale lag series: {m:#?}");
    let (status, _) = serving.get("/api/groups");
    assert_eq!(status, 503, "the API does not serve stale lag");

    // Another service starts while the broker is down: not caught up, and
    // it says why.
    let mut catching_up = service(&settings, &p);
    let body = wait_status(&mut catching_up, 503, "the new service's /ready", Duration::from_secs(30));
    let ready: serde_json::Value = serde_json::from_str(&body).expect("JSON");
    assert_eq!(ready["caught_up"], false, "{body}");
    // It names what it waits for: the brokers, or the one it cannot reach.
    let reason = ready["reason"].as_str().unwrap_or_default();
    assert!(reason.contains("brokers") || reason.contains(broker.brokers()), "the brokers named: {body}");

    broker.resume();
    committer.commit(&[(&topic, 0, 25)]).expect("commit after the restart");
    for (s, what) in [(&mut serving, "serving"), (&mut catching_up, "catching up")] {
        wait_status(s, 200, what, Duration::from_secs(90));
        agrees_with_kafka(s, broker.brokers(), &p, what);
    }
}

#[test]
#[ignore = "needs the real broker or etcd: scripts/test.sh runs it (or cargo test -- --include-ignored)"]
fn deleted_topics_and_groups_disappear() {
    let broker = Broker::from_env_or_start();
    let settings = Client::to_brokers(broker.brokers());
    let p = unique_name("fault-delete");
    let kept = format!("{p}-kept");
    let doomed = format!("{p}-doomed");
    fill(&settings, &kept, 1, 10);
    fill(&settings, &doomed, 1, 10);
    let reader = format!("{p}-reader");
    let gone = format!("{p}-gone");
    OffsetCommitter::new(&settings, &reader)
        .expect("committer")
        .commit(&[(&kept, 0, 3), (&doomed, 0, 4)])
        .expect("commit");
    OffsetCommitter::new(&settings, &gone).expect("committer").commit(&[(&kept, 0, 1)]).expect("commit");

    let mut s = service(&settings, &p);
    s.wait_ready();
    let lag_of = |group: &str, topic: &str| {
        format!(
            "kshard_kafka_consumer_group_topic_partition_lag{{group_id=\"{group}\",topic_name=\"{topic}\",partition_id=\"0\"}}"
        )
    };
    s.eventually("every series", |m| {
        m.get(&lag_of(&reader, &doomed)) == Some(&6.0) && m.get(&lag_of(&gone, &kept)) == Some(&9.0)
    });

    let admin = Admin::new(&settings, Duration::from_secs(30)).expect("admin");
    assert!(admin.delete_topic(&doomed).expect("delete topic"));
    s.eventually("the deleted topic's series disappear", |m| {
        !m.keys().any(|k| k.contains(&format!("\"{doomed}\""))) && m.get(&lag_of(&reader, &kept)) == Some(&7.0)
    });
    admin.delete_group(&gone).expect("DeleteGroups");
    s.eventually("the deleted group disappears", |m| !m.keys().any(|k| k.contains(&format!("\"{gone}\""))));
    let (_, body) = s.get("/api/groups");
    assert!(!body.contains(&format!("\"{gone}\"")), "nor is it in the API: {body}");
}

#[test]
#[ignore = "needs the real broker or etcd: scripts/test.sh runs it (or cargo test -- --include-ignored)"]
fn offsets_the_broker_expires_are_removed() {
    // Kafka expires the offsets of a group without members once they are older
    // than offsets.retention.minutes, writing tombstones.
    let broker = Broker::start_private(&["offsets.retention.minutes=1", "offsets.retention.check.interval.ms=1000"]);
    let settings = Client::to_brokers(broker.brokers());
    let p = unique_name("fault-expiry");
    let topic = format!("{p}-t");
    fill(&settings, &topic, 1, 10);
    let group = format!("{p}-g");
    OffsetCommitter::new(&settings, &group).expect("committer").commit(&[(&topic, 0, 2)]).expect("commit");
    let mut s = service(&settings, &p);
    s.wait_ready();
    let lag = format!(
        "kshard_kafka_consumer_group_topic_partition_lag{{group_id=\"{group}\",topic_name=\"{topic}\",partition_id=\"0\"}}"
    );
    s.eventually("the group's lag", |m| m.get(&lag) == Some(&8.0));
    let deadline = Instant::now() + Duration::from_secs(150);
    loop {
        let m = s.metrics();
        if !m.keys().any(|k| k.contains(&group)) {
            break;
        }
        assert!(Instant::now() < deadline, "the expired offsets are still reported: {m:#?}");
        std::thread::sleep(Duration::from_secs(1));
    }
    assert!(kafka_consumer_groups(broker.brokers(), &p).is_empty(), "Kafka forgot the group too");
}

#[test]
#[ignore = "needs the real broker or etcd: scripts/test.sh runs it (or cargo test -- --include-ignored)"]
fn compaction_of_consumer_offsets_changes_no_lag() {
    // Segments of __consumer_offsets roll every 10 s (scripts/broker.sh), and
    // the cleaner runs every second: keep committing for long enough that it
    // compacts what kshard reads while kshard runs.
    let broker = Broker::start_private(&["log.roll.ms=2000"]);
    let settings = Client::to_brokers(broker.brokers());
    let p = unique_name("fault-compact");
    let topic = format!("{p}-t");
    fill(&settings, &topic, 4, 1000);
    let groups: Vec<String> = (0..5).map(|g| format!("{p}-g{g}")).collect();
    let committers: Vec<OffsetCommitter> =
        groups.iter().map(|g| OffsetCommitter::new(&settings, g).expect("committer")).collect();
    let mut s = service(&settings, &p);
    s.wait_ready();
    let started = Instant::now();
    let mut round = 0i64;
    while started.elapsed() < Duration::from_secs(12) {
        for c in &committers {
            let offsets: Vec<(&str, i32, i64)> = (0..4).map(|part| (topic.as_str(), part, round % 1000)).collect();
            c.commit(&offsets).expect("commit");
        }
        round += 1;
    }
    let written = round * 5 * 4;
    agrees_with_kafka(&mut s, broker.brokers(), &p, "after the commits");
    // The cleaner did remove superseded commits: a fresh read sees fewer records.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let fresh = service(&settings, &p);
        let mut fresh = fresh;
        fresh.wait_ready();
        agrees_with_kafka(&mut fresh, broker.brokers(), &p, "a fresh read of the compacted log");
        let m = fresh.metrics();
        let read = m.get("kshard_exporter_offset_consumer_records_consumed_total").copied().unwrap_or(f64::MAX);
        if read < written as f64 {
            break;
        }
        assert!(Instant::now() < deadline, "the cleaner never compacted: {read} records read of {written} written");
        std::thread::sleep(Duration::from_secs(2));
    }
    // Compaction shown: the service that read the log as it was written,
    // before the cleaner ran, still agrees with Kafka, and goes on agreeing
    // as commits land on the compacted log.
    agrees_with_kafka(&mut s, broker.brokers(), &p, "the running service, after compaction");
    for c in &committers {
        let offsets: Vec<(&str, i32, i64)> = (0..4).map(|part| (topic.as_str(), part, 999 - part as i64)).collect();
        c.commit(&offsets).expect("commit");
    }
    agrees_with_kafka(&mut s, broker.brokers(), &p, "the running service, commits after compaction");
}
