//! The metric profiles against the real broker: each exports the names,
//! labels and values of the tool it stands in for, as that tool's source
//! defines them (danielqsj/kafka_exporter's `kafka_exporter.go`,
//! seglo/kafka-lag-exporter's `Metrics.scala`, linkedin/Burrow's
//! `httpserver/prometheus.go`): a group with a live member and a group that
//! only commits, with a partition it never committed.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use common::*;
use kshard_kafka::{Client, GroupConsumer, OffsetCommitter};
use kshard_lag::Profile;
use kshard_lag::service::{ProcessOptions, ServeOptions};
use kshard_testkit::{Broker, unique_name};

/// Each family the profile must export, with its labels (kshard's
/// `cluster` or `cluster_name` included where the tool always has it).
fn documented(profile: Profile) -> Vec<(&'static str, &'static [&'static str])> {
    const GTP: &[&str] = &["consumergroup", "partition", "topic"];
    const KLE: &[&str] = &["client_id", "cluster_name", "consumer_id", "group", "member_host", "partition", "topic"];
    const BURROW_GTP: &[&str] = &["cluster", "consumer_group", "partition", "topic"];
    match profile {
        Profile::KafkaExporter => vec![
            ("kafka_topic_partitions", &["topic"]),
            ("kafka_topic_partition_current_offset", &["partition", "topic"]),
            ("kafka_topic_partition_oldest_offset", &["partition", "topic"]),
            ("kafka_consumergroup_current_offset", GTP),
            ("kafka_consumergroup_current_offset_sum", &["consumergroup", "topic"]),
            ("kafka_consumergroup_lag", GTP),
            ("kafka_consumergroup_lag_sum", &["consumergroup", "topic"]),
            ("kafka_consumergroup_members", &["consumergroup"]),
            ("kafka_exporter_build_info", &["branch", "goarch", "goos", "goversion", "revision", "tags", "version"]),
        ],
        Profile::KafkaLagExporter => vec![
            ("kafka_partition_latest_offset", &["cluster_name", "partition", "topic"]),
            ("kafka_partition_earliest_offset", &["cluster_name", "partition", "topic"]),
            ("kafka_consumergroup_group_offset", KLE),
            ("kafka_consumergroup_group_lag", KLE),
            ("kafka_consumergroup_group_lag_seconds", KLE),
            ("kafka_consumergroup_group_max_lag", &["cluster_name", "group"]),
            ("kafka_consumergroup_group_max_lag_seconds", &["cluster_name", "group"]),
            ("kafka_consumergroup_group_sum_lag", &["cluster_name", "group"]),
            ("kafka_consumergroup_group_topic_sum_lag", &["cluster_name", "group", "topic"]),
            ("kafka_consumergroup_poll_time_ms", &["cluster_name"]),
        ],
        Profile::Burrow => vec![
            ("burrow_kafka_consumer_lag_total", &["cluster", "consumer_group"]),
            ("burrow_kafka_consumer_status", &["cluster", "consumer_group"]),
            ("burrow_kafka_topic_partition_status", BURROW_GTP),
            ("burrow_kafka_consumer_current_offset", BURROW_GTP),
            ("burrow_kafka_consumer_partition_lag", BURROW_GTP),
            ("burrow_kafka_topic_partition_offset", &["cluster", "partition", "topic"]),
        ],
        Profile::Kshard | Profile::Kminion => vec![],
    }
}

/// The value of the series of `family` whose labels include `want`.
fn value(m: &BTreeMap<String, f64>, family: &str, want: &[(&str, &str)]) -> Option<f64> {
    m.iter().find_map(|(series, v)| {
        let (name, labels) = parse_series(series);
        (name == family && want.iter().all(|(k, w)| labels.get(*k).map(String::as_str) == Some(*w))).then_some(*v)
    })
}

#[test]
#[ignore = "needs the real broker or etcd: scripts/test.sh runs it (or cargo test -- --include-ignored)"]
fn each_profile_exports_its_tools_names_labels_and_values() {
    let broker = Broker::from_env_or_start();
    let settings = Client::to_brokers(broker.brokers());
    let p = unique_name("profiles");
    let topic = format!("{p}-t");
    create_and_fill(&settings, &topic, &[10, 10, 10]);
    // A topic no group reads: kafka_exporter's topic families have it too.
    let idle = format!("{p}-idle");
    create_and_fill(&settings, &idle, &[4, 2]);
    // A group that only commits: partitions 0 and 1, never 2.
    let simple = format!("{p}-simple");
    OffsetCommitter::new(&settings, &simple)
        .expect("committer")
        .commit(&[(&topic, 0, 4), (&topic, 1, 10)])
        .expect("commit");
    // A group with a live member that read everything.
    let live = format!("{p}-live");
    let member = GroupConsumer::new(&settings, &live, &[&topic]).expect("consumer");
    assert_eq!(member.consume(30, Duration::from_secs(60)).expect("consume"), 30);
    member.commit().expect("commit");

    for profile in [Profile::KafkaExporter, Profile::KafkaLagExporter, Profile::Burrow] {
        let mut service = TestService::start_as(
            ProcessOptions::new(profile),
            vec![ServeOptions {
                watermark_interval: Duration::from_millis(200),
                monitor: only(&p),
                ..ServeOptions::new(settings.settings().clone())
            }],
        );
        service.wait_ready();
        let what = profile.name();
        // The live member's assignment is read from the log once it is written.
        service.eventually(&format!("{what}: the live group"), |m| {
            m.keys().any(|k| k.contains(&live)) && m.keys().any(|k| k.contains(&simple))
        });
        let m = service.metrics();
        let mut families: BTreeMap<String, BTreeSet<Vec<String>>> = BTreeMap::new();
        for series in m.keys() {
            let (name, labels) = parse_series(series);
            families.entry(name).or_default().insert(labels.into_keys().collect());
        }
        for (family, labels) in documented(profile) {
            let seen = families.get(family).unwrap_or_else(|| panic!("{what}: no {family}: {families:#?}"));
            let want: Vec<String> = labels.iter().map(|l| (*l).to_owned()).collect();
            assert_eq!(seen, &BTreeSet::from([want]), "{what}: the labels of {family}");
        }
        // kshard's health beside the tool's names, and nothing else of kshard's.
        assert!(m.keys().any(|k| k.starts_with("kshard_catchup_ready")), "{what}: kshard's health");
        assert!(!m.keys().any(|k| k.starts_with("kshard_kafka_consumer_group")), "{what}: no native families");

        let t = topic.as_str();
        match profile {
            Profile::KafkaExporter => {
                let lag = |g: &str, part: &str| {
                    value(&m, "kafka_consumergroup_lag", &[("consumergroup", g), ("topic", t), ("partition", part)])
                };
                assert_eq!(lag(&simple, "0"), Some(6.0));
                assert_eq!(lag(&simple, "2"), Some(-1.0), "uncommitted, as kafka_exporter shows it");
                assert_eq!(lag(&live, "1"), Some(0.0));
                let sum = |f: &str| value(&m, f, &[("consumergroup", &simple), ("topic", t)]);
                assert_eq!(sum("kafka_consumergroup_lag_sum"), Some(6.0), "without the -1");
                assert_eq!(sum("kafka_consumergroup_current_offset_sum"), Some(13.0), "4 + 10 - 1");
                let members = |g: &str| value(&m, "kafka_consumergroup_members", &[("consumergroup", g)]);
                assert_eq!((members(&live), members(&simple)), (Some(1.0), Some(0.0)));
                assert_eq!(value(&m, "kafka_topic_partitions", &[("topic", t)]), Some(3.0));
                assert_eq!(
                    value(&m, "kafka_topic_partition_current_offset", &[("topic", t), ("partition", "2")]),
                    Some(10.0)
                );
                let idle = idle.as_str();
                assert_eq!(
                    value(&m, "kafka_topic_partitions", &[("topic", idle)]),
                    Some(2.0),
                    "a topic no group reads"
                );
                assert_eq!(
                    value(&m, "kafka_topic_partition_current_offset", &[("topic", idle), ("partition", "0")]),
                    Some(4.0)
                );
                assert_eq!(
                    value(&m, "kafka_topic_partition_oldest_offset", &[("topic", idle), ("partition", "1")]),
                    Some(0.0)
                );
            }
            Profile::KafkaLagExporter => {
                let lag = |g: &str, part: &str| {
                    value(
                        &m,
                        "kafka_consumergroup_group_lag",
                        &[("cluster_name", "local"), ("group", g), ("topic", t), ("partition", part)],
                    )
                };
                assert_eq!(lag(&simple, "0"), Some(6.0));
                assert_eq!(lag(&simple, "2"), None, "no commit, no series");
                let unknown = value(
                    &m,
                    "kafka_consumergroup_group_offset",
                    &[
                        ("group", &simple),
                        ("partition", "0"),
                        ("member_host", "unknown"),
                        ("consumer_id", "unknown"),
                        ("client_id", "unknown"),
                    ],
                );
                assert_eq!(unknown, Some(4.0), "a group without members: unknown member labels");
                let owned = m
                    .keys()
                    .find(|k| k.starts_with("kafka_consumergroup_group_lag{") && k.contains(&live))
                    .expect("live");
                assert!(!owned.contains("member_host=\"unknown\""), "the member's host: {owned}");
                assert_eq!(value(&m, "kafka_consumergroup_group_sum_lag", &[("group", &simple)]), Some(6.0));
                assert_eq!(value(&m, "kafka_consumergroup_group_max_lag", &[("group", &simple)]), Some(6.0));
                assert_eq!(
                    value(&m, "kafka_consumergroup_group_lag_seconds", &[("group", &live), ("partition", "0")]),
                    Some(0.0),
                    "caught up"
                );
            }
            Profile::Burrow => {
                let lag = |part: &str| {
                    value(
                        &m,
                        "burrow_kafka_consumer_partition_lag",
                        &[("cluster", "local"), ("consumer_group", &simple), ("topic", t), ("partition", part)],
                    )
                };
                assert_eq!(
                    (lag("0"), lag("1"), lag("2")),
                    (Some(6.0), Some(0.0), Some(0.0)),
                    "uncommitted: 0, as Burrow"
                );
                assert_eq!(value(&m, "burrow_kafka_consumer_lag_total", &[("consumer_group", &simple)]), Some(6.0));
                assert_eq!(value(&m, "burrow_kafka_consumer_status", &[("consumer_group", &live)]), Some(1.0), "OK");
                assert_eq!(
                    value(&m, "burrow_kafka_topic_partition_offset", &[("topic", t), ("partition", "1")]),
                    Some(10.0)
                );
            }
            Profile::Kshard | Profile::Kminion => unreachable!(),
        }
        if let Err(e) = kshard_testkit::promtool_check_metrics(&service.get("/metrics").1, "the profiles' text") {
            panic!("{what}: promtool check metrics: {e}");
        }
    }
    drop(member);
}
