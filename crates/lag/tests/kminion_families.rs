//! kshard under kminion's names (`metrics_profile: kminion`) against the
//! real broker exports every family kminion exports, each with exactly
//! kminion's labels. The list is what kminion (redpanda-data/kminion at
//! 4f3867a, built from its source with Go) exported beside kshard on one
//! broker with its end-to-end probe on, and what its `docs/metrics.md`
//! adds (`kafka_consumer_group_empty_members`): kminion's own Kafka
//! client's traffic and its log messages included. The test suite cannot
//! build kminion (the Go module proxy does not serve it), so the list is
//! kept here; docs/metrics.md says how it was taken.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use common::*;
use kshard_kafka::{Client, GroupConsumer};
use kshard_lag::Profile;
use kshard_lag::service::{ProcessOptions, ServeOptions};
use kshard_testkit::{Broker, unique_name};

/// kminion's sample names and their labels, sorted.
const KMINION: [(&str, &[&str]); 40] = [
    ("kminion_exporter_up", &["version"]),
    ("kminion_exporter_offset_consumer_records_consumed_total", &[]),
    ("kminion_log_messages_total", &["level"]),
    ("kminion_kafka_requests_sent_total", &[]),
    ("kminion_kafka_sent_bytes", &[]),
    ("kminion_kafka_requests_received_total", &[]),
    ("kminion_kafka_received_bytes", &[]),
    ("kminion_kafka_broker_info", &["address", "broker_id", "is_controller", "port", "rack_id"]),
    ("kminion_kafka_cluster_info", &["broker_count", "cluster_id", "cluster_version", "controller_id"]),
    ("kminion_kafka_broker_log_dir_size_total_bytes", &["address", "broker_id", "port", "rack_id"]),
    ("kminion_kafka_topic_log_dir_size_total_bytes", &["topic_name"]),
    ("kminion_kafka_topic_info", &["cleanup_policy", "partition_count", "replication_factor", "topic_name"]),
    ("kminion_kafka_topic_partition_low_water_mark", &["partition_id", "topic_name"]),
    ("kminion_kafka_topic_low_water_mark_sum", &["topic_name"]),
    ("kminion_kafka_topic_partition_high_water_mark", &["partition_id", "topic_name"]),
    ("kminion_kafka_topic_high_water_mark_sum", &["topic_name"]),
    ("kminion_kafka_consumer_group_info", &["coordinator_id", "group_id", "protocol", "protocol_type", "state"]),
    ("kminion_kafka_consumer_group_members", &["group_id"]),
    ("kminion_kafka_consumer_group_empty_members", &["group_id"]),
    ("kminion_kafka_consumer_group_topic_members", &["group_id", "topic_name"]),
    ("kminion_kafka_consumer_group_topic_assigned_partitions", &["group_id", "topic_name"]),
    ("kminion_kafka_consumer_group_topic_offset_sum", &["group_id", "topic_name"]),
    ("kminion_kafka_consumer_group_topic_partition_lag", &["group_id", "partition_id", "topic_name"]),
    ("kminion_kafka_consumer_group_topic_lag", &["group_id", "topic_name"]),
    ("kminion_kafka_consumer_group_offset_commits_total", &["group_id"]),
    ("kminion_end_to_end_messages_produced_in_flight", &["partition_id"]),
    ("kminion_end_to_end_messages_produced_total", &["partition_id"]),
    ("kminion_end_to_end_messages_produced_failed_total", &["partition_id"]),
    ("kminion_end_to_end_messages_received_total", &["partition_id"]),
    ("kminion_end_to_end_messages_lost_total", &["partition_id"]),
    ("kminion_end_to_end_offset_commits_total", &["coordinator_id"]),
    ("kminion_end_to_end_produce_latency_seconds_bucket", &["le", "partition_id"]),
    ("kminion_end_to_end_produce_latency_seconds_sum", &["partition_id"]),
    ("kminion_end_to_end_produce_latency_seconds_count", &["partition_id"]),
    ("kminion_end_to_end_roundtrip_latency_seconds_bucket", &["le", "partition_id"]),
    ("kminion_end_to_end_roundtrip_latency_seconds_sum", &["partition_id"]),
    ("kminion_end_to_end_roundtrip_latency_seconds_count", &["partition_id"]),
    ("kminion_end_to_end_offset_commit_latency_seconds_bucket", &["coordinator_id", "le"]),
    ("kminion_end_to_end_offset_commit_latency_seconds_sum", &["coordinator_id"]),
    ("kminion_end_to_end_offset_commit_latency_seconds_count", &["coordinator_id"]),
];

/// Each family's label sets in an exposition.
fn families(text: &str) -> BTreeMap<String, BTreeSet<Vec<String>>> {
    let mut out: BTreeMap<String, BTreeSet<Vec<String>>> = BTreeMap::new();
    for line in text.lines().filter(|l| !l.starts_with('#') && !l.trim().is_empty()) {
        let series = line.rsplit_once(' ').map_or(line, |(s, _)| s);
        let (name, labels) = parse_series(series);
        out.entry(name).or_default().insert(labels.into_keys().collect());
    }
    out
}

#[test]
#[ignore = "needs the real broker or etcd: scripts/test.sh runs it (or cargo test -- --include-ignored)"]
fn every_family_kminion_exports_with_its_labels() {
    let broker = Broker::from_env_or_start();
    let settings = Client::to_brokers(broker.brokers());
    let p = unique_name("kminion-families");
    let topic = format!("{p}-t");
    create_and_fill(&settings, &topic, &[10, 10]);
    let group = format!("{p}-g");
    let member = GroupConsumer::new(&settings, &group, &[&topic]).expect("consumer");
    assert_eq!(member.consume(5, Duration::from_secs(60)).expect("consume"), 5);
    member.commit().expect("commit");

    let process = ProcessOptions {
        log_counts: Some(std::sync::Arc::new(kshard_lag::LogCounts::default())),
        ..ProcessOptions::new(Profile::Kminion)
    };
    let mut service = TestService::start_as(
        process,
        vec![ServeOptions {
            watermark_interval: Duration::from_millis(200),
            monitor: only(&p),
            end_to_end: kshard_lag::EndToEndSettings {
                enabled: true,
                topic: format!("{p}-e2e"),
                group_prefix: format!("{p}-probe"),
                ..kshard_lag::EndToEndSettings::default()
            },
            ..ServeOptions::new(settings.settings().clone())
        }],
    );
    service.wait_ready();
    let members = format!("kminion_kafka_consumer_group_topic_members{{group_id=\"{group}\"");
    let sizes = "kminion_kafka_topic_log_dir_size_total_bytes{";
    service.eventually("the member's assignment, the log dirs and the probe's commits", |m| {
        m.keys().any(|k| k.starts_with(&members))
            && m.keys().any(|k| k.starts_with(sizes))
            && m.keys().any(|k| k.starts_with("kminion_end_to_end_offset_commits_total{"))
    });
    let seen = families(&service.get("/metrics").1);
    let mut missing = Vec::new();
    for (family, labels) in KMINION {
        let want: Vec<String> = labels.iter().map(|l| (*l).to_owned()).collect();
        match seen.get(family) {
            None => missing.push(format!("{family}: absent")),
            Some(sets) if !sets.contains(&want) => {
                missing.push(format!("{family}: labels {sets:?}, kminion's {want:?}"))
            }
            Some(_) => {}
        }
    }
    assert!(missing.is_empty(), "families kminion has and kshard lacks:\n{}", missing.join("\n"));
    // The traffic counters count: kshard read the offsets topic, at least.
    let m = service.metrics();
    for counter in ["kminion_kafka_requests_sent_total", "kminion_kafka_received_bytes"] {
        assert!(m.get(counter).is_some_and(|n| *n > 0.0), "{counter}: {m:#?}");
    }
    drop(member);
}
