//! `kshard serve` exports share groups: Kafka's console share consumer
//! accepts, rejects and releases records of a topic until Kafka archives
//! them; the service, reading `__share_group_state` beside
//! `__consumer_offsets`, serves each share-partition's start offset and lag
//! equal to `kafka-share-groups --describe --offsets`, the share group with its
//! kind, lag in seconds within a second of the records' produce time, and the
//! rejected and poison records, in `/api/groups`, `/api/group` and `/metrics`.

mod common;

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use common::{TestService, create_and_fill, only, until};
use kshard_kafka::Client;
use kshard_lag::service::{ScrapeMode, ServeOptions};
use kshard_testkit::{Broker, kafka_share_groups, share_consume, share_from_earliest, unique_name};

/// Kafka's default `group.share.delivery.count.limit`.
const DELIVERY_LIMIT: u32 = 5;

/// A share-partition as `kafka-share-groups --describe` prints it: topic,
/// partition, start offset, lag.
type Described = (String, i32, i64, i64);

fn now_s() -> f64 {
    SystemTime::now().duration_since(UNIX_EPOCH).expect("after 1970").as_secs_f64()
}

/// (topic, partition, start offset, lag) of `group` in `/api/groups`, with
/// the group's protocol type.
fn served(service: &mut TestService, group: &str) -> (Option<String>, Vec<Described>) {
    let (status, body) = service.get("/api/groups");
    assert_eq!(status, 200, "{body}");
    let groups: serde_json::Value = serde_json::from_str(&body).expect("JSON");
    let Some(g) = groups.as_array().expect("array").iter().find(|g| g["group_id"] == group) else {
        return (None, Vec::new());
    };
    let mut rows = Vec::new();
    for t in g["topics"].as_array().expect("topics") {
        for p in t["partitions"].as_array().expect("partitions") {
            let Some(lag) = p["lag"].as_i64() else { continue };
            let topic = t["topic"].as_str().expect("topic").to_owned();
            let partition = p["partition"].as_i64().expect("partition") as i32;
            rows.push((topic, partition, p["committed_offset"].as_i64().expect("start offset"), lag));
        }
    }
    rows.sort();
    (g["protocol_type"].as_str().map(str::to_owned), rows)
}

/// Kafka's own rows for `group`.
fn described(brokers: &str, group: &str) -> Vec<Described> {
    let mut rows: Vec<_> = kafka_share_groups(brokers, group)
        .into_iter()
        .filter_map(|r| Some((r.topic, r.partition, r.start_offset?, r.lag?)))
        .collect();
    rows.sort();
    rows
}

#[test]
#[ignore = "needs the real broker or etcd: scripts/test.sh runs it (or cargo test -- --include-ignored)"]
fn serve_exports_share_groups_as_kafka_describes_them() {
    let broker = Broker::from_env_or_start();
    let settings = Client::to_brokers(broker.brokers());
    let prefix = unique_name("share-serve");
    let (topic, group) = (format!("{prefix}-orders"), format!("{prefix}-workers"));
    let produced_from = now_s();
    create_and_fill(&settings, &topic, &[30]);
    let produced_to = now_s();
    share_from_earliest(broker.brokers(), &group);

    // 0–4 accepted (on a fresh broker, this makes the offsets topic and the
    // state topic), then the service starts: it catches up with that state
    // and reads the rest as it comes. 5–7 rejected, then 8–10 released until
    // Kafka archives them.
    share_consume(broker.brokers(), &group, &topic, 5, None);
    let mut service = TestService::start(ServeOptions {
        watermark_interval: Duration::from_millis(500),
        monitor: only(&prefix),
        ..ServeOptions::new(settings.settings().clone())
    });
    service.wait_ready();
    share_consume(broker.brokers(), &group, &topic, 3, Some("--reject"));
    for _ in 0..DELIVERY_LIMIT {
        share_consume(broker.brokers(), &group, &topic, 3, Some("--release"));
    }

    let kafka =
        until("kshard's share lag to equal Kafka's", Duration::from_secs(60), Duration::from_millis(500), || {
            let kafka = described(broker.brokers(), &group);
            let (kind, ours) = served(&mut service, &group);
            if !kafka.is_empty() && ours == kafka && kind.as_deref() == Some("share") {
                Ok(kafka)
            } else {
                Err(format!("kafka-share-groups: {kafka:?}, kshard ({kind:?}): {ours:?}"))
            }
        });
    let (_, _, start, lag) = kafka[0].clone();
    assert!(start >= 8 && lag > 0, "the released records were archived, more are left: {kafka:?}");

    // The group page: the delivery state, its members, lag in seconds.
    let (status, body) = service.get(&format!("/api/group?id={group}"));
    assert_eq!(status, 200, "{body}");
    let detail: serde_json::Value = serde_json::from_str(&body).expect("JSON");
    let p = &detail["topics"][0]["partitions"][0];
    let share = &p["share"];
    let (archived, poison) = (share["archived"].as_u64().expect("archived"), share["poison"].as_u64().expect("poison"));
    assert!(poison >= 3, "three or more archived at the delivery limit: {share}");
    assert!(archived - poison >= 3, "three or more rejected: {share}");
    let batches = share["batches"].as_array().expect("the state batches");
    assert!(batches.iter().all(|b| b["first_offset"].as_i64() >= Some(start)), "{share}");
    let seconds = p["lag_seconds"].as_f64().expect("lag in seconds");
    let asked = now_s();
    let (oldest, newest) = (asked - produced_from, asked - produced_to);
    assert!(
        seconds >= newest - 1.0 && seconds <= oldest + 1.0,
        "lag in seconds {seconds} within 1 s of the records' age ({newest:.1}–{oldest:.1} s)"
    );
    assert_eq!(p["lag_seconds_method"], "record", "{p}");
    let points = detail["history"]["points"].as_array().expect("history");
    assert!(points.iter().any(|pt| pt["lag"].as_i64() > Some(0)), "the chart has the share lag: {points:?}");

    // The same in /metrics.
    let series = |family: &str| {
        format!(
            "kshard_kafka_share_group_topic_partition_{family}{{group_id=\"{group}\",topic_name=\"{topic}\",partition_id=\"0\"}}"
        )
    };
    let metrics = service.metrics();
    let lag_now = metrics.get(&series("lag")).copied();
    let kafka_now = described(broker.brokers(), &group);
    assert_eq!(lag_now, Some(kafka_now[0].3 as f64), "{metrics:#?}");
    assert_eq!(metrics.get(&series("start_offset")), Some(&(kafka_now[0].2 as f64)));
    assert!(metrics.get(&series("poison_records_total")).is_some_and(|n| *n >= 3.0), "{metrics:#?}");
    let info = format!("kshard_kafka_consumer_group_info{{group_id=\"{group}\",protocol=\"\",protocol_type=\"share\"");
    assert!(metrics.keys().any(|k| k.starts_with(&info)), "the share group's info: {metrics:#?}");

    // Burrow's API: the share-partition with Kafka's lag.
    let (status, body) = service.get(&format!("/v3/kafka/local/consumer/{group}/lag"));
    assert_eq!(status, 200, "{body}");
    let burrow: serde_json::Value = serde_json::from_str(&body).expect("JSON");
    let partition = &burrow["status"]["partitions"][0];
    assert_eq!(partition["current_lag"].as_i64(), Some(kafka_now[0].3), "{body}");
    assert_eq!(burrow["status"]["status"], "OK", "{body}");
}

#[test]
#[ignore = "needs the real broker or etcd: scripts/test.sh runs it (or cargo test -- --include-ignored)"]
fn admin_api_mode_serves_share_groups_from_describe_share_group_offsets() {
    let broker = Broker::from_env_or_start();
    let settings = Client::to_brokers(broker.brokers());
    let prefix = unique_name("share-admin-api");
    let (topic, group) = (format!("{prefix}-jobs"), format!("{prefix}-workers"));
    create_and_fill(&settings, &topic, &[10, 10]);
    share_from_earliest(broker.brokers(), &group);
    share_consume(broker.brokers(), &group, &topic, 4, None);
    share_consume(broker.brokers(), &group, &topic, 2, Some("--release"));

    let mut service = TestService::start(ServeOptions {
        mode: ScrapeMode::AdminApi,
        watermark_interval: Duration::from_millis(500),
        monitor: only(&prefix),
        ..ServeOptions::new(settings.settings().clone())
    });
    service.wait_ready();
    until("the admin-API share lag to equal Kafka's", Duration::from_secs(30), Duration::from_millis(500), || {
        let kafka = described(broker.brokers(), &group);
        let (kind, ours) = served(&mut service, &group);
        if !kafka.is_empty() && ours == kafka && kind.as_deref() == Some("share") {
            Ok(())
        } else {
            Err(format!("kafka-share-groups: {kafka:?}, kshard ({kind:?}): {ours:?}"))
        }
    });
}

/// The share-state topic's high watermarks, summed: how many records it has
/// had (the share coordinator deletes old ones; the ends stay).
fn share_state_end(settings: &Client) -> i64 {
    let admin = kshard_kafka::Admin::connect(settings, Duration::from_secs(30)).expect("admin");
    let topic = "__share_group_state";
    let count = admin.partition_count(topic).expect("asks").expect("the topic exists");
    let partitions: Vec<_> = (0..count).map(|p| kshard_kafka::TopicPartition::new(topic, p)).collect();
    admin.watermarks(&partitions).expect("watermarks").values().map(|(_, high)| high).sum()
}

/// What the service shows of `group`'s one share-partition: start offset,
/// lag, archived and poison records, and the state batches.
fn share_view(service: &mut TestService, group: &str) -> serde_json::Value {
    let (status, body) = service.get(&format!("/api/group?id={group}"));
    assert_eq!(status, 200, "{body}");
    let detail: serde_json::Value = serde_json::from_str(&body).expect("JSON");
    let p = &detail["topics"][0]["partitions"][0];
    serde_json::json!({
        "start_offset": p["committed_offset"],
        "lag": p["lag"],
        "archived": p["share"]["archived"],
        "poison": p["share"]["poison"],
        "batches": p["share"]["batches"],
    })
}

#[test]
#[ignore = "needs the real broker or etcd: scripts/test.sh runs it (or cargo test -- --include-ignored)"]
fn a_restart_on_the_data_directory_keeps_share_state_and_its_counts() {
    let broker = Broker::from_env_or_start();
    let settings = Client::to_brokers(broker.brokers());
    let prefix = unique_name("share-restart");
    let (topic, group) = (format!("{prefix}-tasks"), format!("{prefix}-workers"));
    create_and_fill(&settings, &topic, &[20]);
    share_from_earliest(broker.brokers(), &group);
    share_consume(broker.brokers(), &group, &topic, 4, None);
    let dir = std::env::temp_dir().join(unique_name("kshard-share-data"));
    let options = || ServeOptions {
        watermark_interval: Duration::from_millis(500),
        monitor: only(&prefix),
        data_dir: Some(dir.clone()),
        recovery_log_topic: Some(format!("{prefix}-log")),
        ..ServeOptions::new(settings.settings().clone())
    };

    // Read through shards: 4 accepted, 3 rejected, 3 archived at the
    // delivery limit.
    let mut first = TestService::start(options());
    first.wait_ready();
    share_consume(broker.brokers(), &group, &topic, 3, Some("--reject"));
    for _ in 0..DELIVERY_LIMIT {
        share_consume(broker.brokers(), &group, &topic, 3, Some("--release"));
    }
    until("kshard's share lag to equal Kafka's", Duration::from_secs(60), Duration::from_millis(500), || {
        let (kafka, (_, ours)) = (described(broker.brokers(), &group), served(&mut first, &group));
        let poison = share_view(&mut first, &group)["poison"].as_u64();
        if !kafka.is_empty() && ours == kafka && poison >= Some(3) {
            Ok(())
        } else {
            Err(format!("kafka-share-groups: {kafka:?}, kshard: {ours:?}, poison {poison:?}"))
        }
    });
    let before = share_view(&mut first, &group);
    assert!(before["archived"].as_u64() >= Some(6), "{before}");
    let poison_series = format!(
        "kshard_kafka_share_group_topic_partition_poison_records_total{{group_id=\"{group}\",topic_name=\"{topic}\",partition_id=\"0\"}}"
    );
    let poison_before = first.metrics().get(&poison_series).copied();
    assert!(poison_before >= Some(3.0), "{poison_before:?}");
    let end_at_stop = share_state_end(&settings);
    drop(first);

    // Restarted on its data directory: the state and its counts come back
    // from the stores, and only what the coordinator wrote since is read.
    let mut second = TestService::start(options());
    second.wait_ready();
    let written_since = share_state_end(&settings) - end_at_stop;
    let read = second
        .metrics()
        .get("kshard_share_state_records_consumed_total")
        .copied()
        .expect("the share state's records-read series (a bound on a missing one checks nothing)");
    assert!(read <= written_since as f64, "read {read} records of the share state, {written_since} written since");
    assert_eq!(share_view(&mut second, &group), before, "the share-partition as before the restart");
    assert_eq!(second.metrics().get(&poison_series).copied(), poison_before, "the poison counter goes on");
    let (kafka, (kind, ours)) = (described(broker.brokers(), &group), served(&mut second, &group));
    assert_eq!((kind.as_deref(), &ours), (Some("share"), &kafka));

    // The same once the data directory is lost: rebuilt from the recovery logs.
    drop(second);
    std::fs::remove_dir_all(&dir).expect("deletes the data directory");
    let mut third = TestService::start(options());
    third.wait_ready();
    assert_eq!(share_view(&mut third, &group), before, "rebuilt from the share state's recovery log");
    drop(third);
    let _ = std::fs::remove_dir_all(&dir);
}
