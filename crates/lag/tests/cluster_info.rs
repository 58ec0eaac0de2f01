//! kminion's cluster, broker and topic families against the real broker:
//! `kafka_cluster_info`, `kafka_broker_info`, `kafka_topic_info` (with
//! `cleanup_policy`), and the log directories' sizes per broker and per topic,
//! with kminion's labels and the values the broker gives; kafka_exporter's
//! broker families and partitions' leader and replica families in its
//! profile; none of them when `cluster_info` is off.

mod common;

use std::time::Duration;

use common::*;
use kshard_kafka::Client;
use kshard_lag::service::{ProcessOptions, ServeOptions};
use kshard_lag::{ClusterInfoSettings, Profile};
use kshard_testkit::{Broker, unique_name};

fn options(settings: &Client, prefix: &str, enabled: bool) -> ServeOptions {
    ServeOptions {
        watermark_interval: Duration::from_millis(200),
        monitor: only(prefix),
        cluster_info: ClusterInfoSettings {
            enabled,
            interval: Duration::from_secs(1),
            ..ClusterInfoSettings::default()
        },
        ..ServeOptions::new(settings.settings().clone())
    }
}

/// The one series of `family` in `m`, with its value.
fn one<'a>(m: &'a std::collections::BTreeMap<String, f64>, head: &str) -> (&'a str, f64) {
    let found: Vec<_> = m.iter().filter(|(k, _)| k.starts_with(head)).collect();
    assert_eq!(found.len(), 1, "one series starting {head}: {found:#?}");
    (found[0].0, *found[0].1)
}

#[test]
#[ignore = "needs the real broker or etcd: scripts/test.sh runs it (or cargo test -- --include-ignored)"]
fn cluster_broker_and_topic_families_as_kminion_gives_them() {
    let broker = Broker::from_env_or_start();
    let settings = Client::to_brokers(broker.brokers());
    let p = unique_name("cluster-info");
    let topic = format!("{p}-t");
    create_and_fill(&settings, &topic, &[20, 20]);
    // __consumer_offsets exists once some group has committed.
    kshard_kafka::OffsetCommitter::new(&settings, &format!("{p}-g"))
        .expect("committer")
        .commit(&[(&topic, 0, 5)])
        .expect("commit");
    let port = broker.brokers().rsplit(':').next().expect("port").to_owned();

    let mut service = TestService::start(options(&settings, &p, true));
    service.wait_ready();
    let topic_info = format!("kshard_kafka_topic_info{{topic_name=\"{topic}\",");
    let topic_size = format!("kshard_kafka_topic_log_dir_size_total_bytes{{topic_name=\"{topic}\"}}");
    service.eventually("the cluster's families", |m| {
        m.keys().any(|k| k.starts_with(&topic_info)) && m.get(&topic_size).is_some_and(|v| *v > 0.0)
    });
    let m = service.metrics();
    let (cluster, v) = one(&m, "kshard_kafka_cluster_info{");
    assert_eq!(v, 1.0);
    assert!(cluster.contains("broker_count=\"1\"") && cluster.contains("cluster_version=\"unknown\""), "{cluster}");
    assert!(!cluster.contains("cluster_id=\"\""), "the cluster id: {cluster}");
    let (broker_info, v) = one(&m, "kshard_kafka_broker_info{");
    assert_eq!(v, 1.0);
    assert!(broker_info.contains(&format!("address=\"127.0.0.1\",port=\"{port}\",rack_id=\"\"")), "{broker_info}");
    let (info, v) = one(&m, &topic_info);
    assert_eq!(v, 1.0);
    assert!(
        info.ends_with("partition_count=\"2\",replication_factor=\"1\",cleanup_policy=\"delete\"}"),
        "kminion's labels, the topic's policy: {info}"
    );
    let (offsets, _) = one(&m, "kshard_kafka_topic_info{topic_name=\"__consumer_offsets\",");
    assert!(offsets.contains("cleanup_policy=\"compact\""), "{offsets}");
    let (broker_size, size) = one(&m, "kshard_kafka_broker_log_dir_size_total_bytes{");
    assert!(broker_size.contains(&format!("port=\"{port}\"")), "{broker_size}");
    assert!(size >= m[&topic_size], "the broker holds at least the topic: {size}");
    drop(service);

    // In kafka_exporter's names: its broker families.
    let mut service =
        TestService::start_as(ProcessOptions::new(Profile::KafkaExporter), vec![options(&settings, &p, true)]);
    service.wait_ready();
    service.eventually("kafka_brokers", |m| m.get("kafka_brokers") == Some(&1.0));
    let m = service.metrics();
    let (info, _) = one(&m, "kafka_broker_info{");
    assert!(info.contains(&format!("address=\"127.0.0.1:{port}\"")), "{info}");
    let id: f64 =
        info.split("id=\"").nth(1).and_then(|r| r.split('"').next()).and_then(|v| v.parse().ok()).expect("id");
    let partition = |family: &str| m.get(&format!("{family}{{topic=\"{topic}\",partition=\"1\"}}")).copied();
    assert_eq!(partition("kafka_topic_partition_leader"), Some(id), "the one broker leads");
    assert_eq!(partition("kafka_topic_partition_replicas"), Some(1.0));
    assert_eq!(partition("kafka_topic_partition_in_sync_replica"), Some(1.0));
    assert_eq!(partition("kafka_topic_partition_leader_is_preferred"), Some(1.0));
    assert_eq!(partition("kafka_topic_partition_under_replicated_partition"), Some(0.0));
    drop(service);

    // Off: none of them.
    let mut service = TestService::start(options(&settings, &p, false));
    service.wait_ready();
    std::thread::sleep(Duration::from_millis(1500));
    let m = service.metrics();
    assert!(!m.keys().any(|k| k.contains("broker_info") || k.contains("log_dir_size")), "{m:#?}");
}
