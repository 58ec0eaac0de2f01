//! kminion's end-to-end probe against the real broker: it creates its topic
//! (a partition per broker), produces to it every 100 ms, reads its
//! messages back in a group of its own and commits; `/metrics` has every
//! `end_to_end_*` family with kminion's names, labels and buckets (promtool
//! accepts them). With the broker killed, messages are lost and produces
//! fail; once it is back, messages arrive again by themselves; killed again,
//! commits fail past their SLA and the service still stops.

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::*;
use kshard_kafka::{Admin, Client};
use kshard_lag::service::{ProcessOptions, ServeOptions};
use kshard_lag::{EndToEndSettings, ProbeSlas, Profile};
use kshard_testkit::{Broker, unique_name};

/// The service under kminion's names.
fn kminion(options: ServeOptions) -> TestService {
    TestService::start_as(ProcessOptions::new(Profile::Kminion), vec![options])
}

fn options(settings: &Client, prefix: &str, slas: ProbeSlas) -> ServeOptions {
    ServeOptions {
        watermark_interval: Duration::from_millis(200),
        monitor: only(prefix),
        end_to_end: EndToEndSettings {
            enabled: true,
            topic: format!("{prefix}-e2e"),
            group_prefix: format!("{prefix}-probe"),
            slas,
            ..EndToEndSettings::default()
        },
        ..ServeOptions::new(settings.settings().clone())
    }
}

fn value(m: &BTreeMap<String, f64>, series: &str) -> f64 {
    m.get(series).copied().unwrap_or(0.0)
}

/// The label sets of `family`'s series (without `le`), sorted.
fn label_names(m: &BTreeMap<String, f64>, family: &str) -> Vec<String> {
    let mut names: Vec<String> = m
        .keys()
        .map(|k| parse_series(k))
        .filter(|(name, labels)| name == family && !labels.is_empty())
        .map(|(_, labels)| labels.into_keys().filter(|k| k != "le").collect::<Vec<_>>().join(","))
        .collect();
    names.sort();
    names.dedup();
    names
}

#[test]
#[ignore = "needs the real broker or etcd: scripts/test.sh runs it (or cargo test -- --include-ignored)"]
fn the_probe_round_trips_commits_and_exports_kminions_families() {
    let broker = Broker::from_env_or_start();
    let settings = Client::to_brokers(broker.brokers());
    let p = unique_name("e2e");
    let slas = EndToEndSettings::default().slas;
    let mut service = kminion(options(&settings, &p, slas));
    service.wait_ready();
    let received = "kminion_end_to_end_messages_received_total{partition_id=\"0\"}";
    service.eventually("probe messages read back and a commit", |m| {
        value(m, received) >= 20.0 && m.keys().any(|k| k.starts_with("kminion_end_to_end_offset_commits_total{"))
    });
    let m = service.metrics();
    for (family, labels) in [
        ("kminion_end_to_end_messages_produced_in_flight", "partition_id"),
        ("kminion_end_to_end_messages_produced_total", "partition_id"),
        ("kminion_end_to_end_messages_produced_failed_total", "partition_id"),
        ("kminion_end_to_end_messages_received_total", "partition_id"),
        ("kminion_end_to_end_messages_lost_total", "partition_id"),
        ("kminion_end_to_end_offset_commits_total", "coordinator_id"),
        ("kminion_end_to_end_produce_latency_seconds_bucket", "partition_id"),
        ("kminion_end_to_end_roundtrip_latency_seconds_bucket", "partition_id"),
        ("kminion_end_to_end_offset_commit_latency_seconds_bucket", "coordinator_id"),
    ] {
        assert_eq!(label_names(&m, family), [labels], "{family}'s labels");
    }
    // One broker: one partition, and it is the coordinator.
    let admin = Admin::new(&settings, Duration::from_secs(10)).expect("admin");
    assert_eq!(admin.partition_count(&format!("{p}-e2e")).expect("metadata"), Some(1), "a partition per broker");
    let node = admin.broker_ids().expect("brokers")[0];
    let commits = format!("kminion_end_to_end_offset_commits_total{{coordinator_id=\"{node}\"}}");
    assert!(value(&m, &commits) >= 1.0, "commits answered by broker {node}: {m:#?}");
    assert_eq!(value(&m, "kminion_end_to_end_messages_lost_total{partition_id=\"0\"}"), 0.0);
    assert_eq!(value(&m, "kminion_end_to_end_messages_produced_failed_total{partition_id=\"0\"}"), 0.0);
    // Every message read back was sent: answered, or still counted in flight
    // (its acknowledgement can be handled after it is read back).
    let sent = value(&m, "kminion_end_to_end_messages_produced_total{partition_id=\"0\"}")
        + value(&m, "kminion_end_to_end_messages_produced_in_flight{partition_id=\"0\"}");
    assert!(sent >= value(&m, received), "read back more than was sent: {m:#?}");
    // kminion's buckets: 0.005 doubling, 13 up to 20.48 for the 20 s round trip.
    let roundtrip = "kminion_end_to_end_roundtrip_latency_seconds";
    let bucket = |le: &str| value(&m, &format!("{roundtrip}_bucket{{partition_id=\"0\",le=\"{le}\"}}"));
    let count = value(&m, &format!("{roundtrip}_count{{partition_id=\"0\"}}"));
    assert_eq!(bucket("+Inf"), count);
    assert_eq!(bucket("20.48"), count, "all within the SLA");
    assert!(bucket("0.005") <= bucket("0.01"), "cumulative");
    assert!(!m.keys().any(|k| k.contains("le=\"40.96\"")), "no bucket past the SLA's");
    assert!(count >= value(&m, received), "every received message timed");
    let sum = value(&m, &format!("{roundtrip}_sum{{partition_id=\"0\"}}"));
    assert!(sum > 0.0 && sum / count < 1.0, "a round trip on loopback takes milliseconds: {}", sum / count);
    let (_, text) = service.get("/metrics");
    kshard_testkit::promtool_check_metrics(&text, "the probe's histograms").expect("promtool accepts the histograms");
    // The probe's group is a consumer group like any: kshard's lag sees it.
    service.eventually("the probe's group in kshard's own families", |m| {
        m.keys().any(|k| k.starts_with("kminion_kafka_consumer_group_info{") && k.contains(&format!("{p}-probe-")))
    });
}

#[test]
#[ignore = "needs the real broker or etcd: scripts/test.sh runs it (or cargo test -- --include-ignored)"]
fn a_killed_broker_shows_as_lost_messages_and_the_probe_recovers() {
    let broker = Broker::start_private(&[]);
    let settings = Client::to_brokers(broker.brokers());
    let p = unique_name("e2e-kill");
    // Short SLAs, so the outage counts within the test.
    let slas =
        ProbeSlas { ack: Duration::from_secs(1), roundtrip: Duration::from_secs(2), commit: Duration::from_secs(2) };
    let mut service = kminion(options(&settings, &p, slas));
    let received = "kminion_end_to_end_messages_received_total{partition_id=\"0\"}";
    let lost = "kminion_end_to_end_messages_lost_total{partition_id=\"0\"}";
    service.eventually("probe messages read back", |m| value(m, received) >= 10.0);
    broker.kill();
    let failed = "kminion_end_to_end_messages_produced_failed_total{partition_id=\"0\"}";
    // Unanswered past the round-trip SLA: lost; past ack SLA + 2 s: failed.
    service.eventually("lost messages and failed produces while the broker is down", |m| {
        value(m, lost) >= 1.0 && value(m, failed) >= 1.0
    });
    broker.resume();
    let before = value(&service.metrics(), received);
    service.eventually("messages read back again after the restart", |m| value(m, received) >= before + 10.0);

    // Stopping while the broker is down: the probe's commit waits for a
    // coordinator that is gone, and must not hold the shutdown.
    broker.kill();
    let sla_exceeded = "kminion_end_to_end_offset_commits_failed_total";
    service.eventually("a commit past its SLA", |m| {
        m.iter().any(|(k, v)| k.starts_with(sla_exceeded) && k.contains("OFFSET_COMMIT_SLA_EXCEEDED") && *v >= 1.0)
    });
    let (done, stopped) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        drop(service);
        let _ = done.send(());
    });
    assert!(
        stopped.recv_timeout(Duration::from_secs(60)).is_ok(),
        "the service did not stop within a minute of SIGTERM with its broker down"
    );
}

/// A probe group that a killed kshard (or kminion) left behind, empty, is
/// deleted when a probe starts; a group of the prefix that has a member,
/// and groups of other prefixes, are left alone.
#[test]
#[ignore = "needs the real broker or etcd: scripts/test.sh runs it (or cargo test -- --include-ignored)"]
fn a_probe_group_left_behind_is_deleted_at_the_next_start() {
    let broker = Broker::from_env_or_start();
    let settings = Client::to_brokers(broker.brokers());
    let p = unique_name("e2e-orphan");
    let prefix = format!("{p}-probe");
    let topic = format!("{p}-t");
    create_and_fill(&settings, &topic, &[5]);
    // Left behind: a group of the prefix that committed and has no member.
    let (orphan, other) = (format!("{prefix}-dead"), format!("{p}-other"));
    for group in [&orphan, &other] {
        let committer = kshard_kafka::OffsetCommitter::new(&settings, group).expect("committer");
        committer.commit(&[(&topic, 0, 3)]).expect("commit");
    }
    let admin = Admin::new(&settings, Duration::from_secs(30)).expect("admin");
    let listed = |admin: &Admin| -> Vec<String> {
        admin.list_groups().expect("groups").into_iter().map(|g| g.group_id).filter(|g| g.starts_with(&p)).collect()
    };
    assert!(listed(&admin).contains(&orphan));
    let mut service = kminion(options(&settings, &p, EndToEndSettings::default().slas));
    service.wait_ready();
    let groups = until(
        "the orphan is deleted and the probe's own group joined",
        Duration::from_secs(60),
        Duration::from_millis(500),
        || {
            let groups = listed(&admin);
            let own = groups.iter().any(|g| g.starts_with(&format!("{prefix}-")) && *g != orphan);
            if !groups.contains(&orphan) && own { Ok(groups) } else { Err(format!("{groups:?}")) }
        },
    );
    assert!(groups.contains(&other), "another prefix's group is left alone: {groups:?}");
}
