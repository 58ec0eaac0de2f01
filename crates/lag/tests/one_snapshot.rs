//! Every output reads one snapshot per refresh: `/metrics` under each
//! profile's names, its OTLP export, `/api/groups`, the page's overview and
//! Burrow's API show the same lag for every group-partition, and none of
//! them shows a commit applied after the refresh until the next one.

use std::collections::BTreeMap;
use std::sync::Arc;

use kshard_lag::{Granularity, LocalMember, Log, Metrics, Monitor, MonitorSettings, Profile, SelfTimings};
use kshard_lag::{Watermark, Watermarks};
use kshard_offsets::{OffsetCommitValue, Record};
use kshard_testkit::parse_metrics;

/// (group, topic, partition) → lag.
type Lags = BTreeMap<(String, String, i32), i64>;

fn commit(monitor: &Monitor, at: i64, group: &str, topic: &str, partition: i32, offset: i64) {
    let (k, v) = Record::offset_commit(group, topic, partition, Some(OffsetCommitValue::new(3, offset, 0))).encode();
    monitor.apply(0, at, Some(&k), v.as_deref()).expect("applies");
}

/// The samples of `family` as lags, by its group, topic and partition labels.
fn family(text: &str, family: &str, [group, topic, partition]: [&str; 3]) -> Lags {
    let mut out = Lags::new();
    for (series, value) in parse_metrics(text) {
        let Some(labels) = series.strip_prefix(family).and_then(|l| l.strip_prefix('{')) else { continue };
        let labels: BTreeMap<&str, &str> = labels
            .trim_end_matches('}')
            .split("\",")
            .filter_map(|kv| kv.split_once("=\""))
            .map(|(k, v)| (k, v.trim_end_matches('"')))
            .collect();
        let key = (labels[group].to_owned(), labels[topic].to_owned(), labels[partition].parse().expect("a partition"));
        out.insert(key, value as i64);
    }
    out
}

fn render(profile: Profile, monitor: &Arc<Monitor>) -> String {
    let timings = Arc::new(SelfTimings::default());
    let member = LocalMember::default();
    let metrics = Metrics::with_profile(profile, "kshard", Arc::clone(monitor), member, timings, None, None);
    metrics.render().expect("renders")
}

/// What every output shows of the lag, each as (group, topic, partition) → lag.
fn every_output(monitor: &Arc<Monitor>) -> Vec<(&'static str, Lags)> {
    let native = render(Profile::Kshard, monitor);
    // Each profile's lag family, by its own label names.
    let profiles: [(&str, Profile, &str, [&str; 3]); 4] = [
        (
            "/metrics",
            Profile::Kshard,
            "kshard_kafka_consumer_group_topic_partition_lag",
            ["group_id", "topic_name", "partition_id"],
        ),
        ("kafka_exporter", Profile::KafkaExporter, "kafka_consumergroup_lag", ["consumergroup", "topic", "partition"]),
        (
            "kafka_lag_exporter",
            Profile::KafkaLagExporter,
            "kafka_consumergroup_group_lag",
            ["group", "topic", "partition"],
        ),
        (
            "burrow names",
            Profile::Burrow,
            "burrow_kafka_consumer_partition_lag",
            ["consumer_group", "topic", "partition"],
        ),
    ];
    let mut outputs: Vec<(&'static str, Lags)> = profiles
        .into_iter()
        .map(|(output, profile, name, labels)| {
            let text = if profile == Profile::Kshard { native.clone() } else { render(profile, monitor) };
            (output, family(&text, name, labels))
        })
        .collect();
    // OTLP: the native text as the collector gets it, each body decodable.
    let bodies = kshard_lag::otlp_export_bodies(&native, 10_000).expect("maps");
    assert!(!bodies.is_empty() && bodies.iter().all(|b| !b.is_empty()));
    let api: Lags = kshard_lag::group_views(monitor)
        .into_iter()
        .flat_map(|g| {
            g.topics.into_iter().flat_map(move |t| {
                let group = g.group_id.clone();
                t.partitions
                    .into_iter()
                    .filter_map(move |p| Some(((group.clone(), t.topic.clone(), p.partition), p.lag?)))
            })
        })
        .collect();
    outputs.push(("/api/groups", api));
    let burrow: Lags = kshard_lag::burrow::consumers(monitor)
        .consumers
        .iter()
        .flat_map(|g| {
            let status = kshard_lag::burrow::group_status(monitor, "local", g, true);
            status.partitions.into_iter().map(move |p| ((g.clone(), p.topic, p.partition), p.current_lag))
        })
        .collect();
    outputs.push(("Burrow's API", burrow));
    outputs
}

/// Holds each output to `expected`. kafka_exporter's and Burrow's names
/// also show a group's partitions without a commit of a topic it committed
/// on (at -1 and 0, as those tools do): only those may be extra.
fn assert_every_output(monitor: &Arc<Monitor>, expected: &Lags, when: &str) {
    let uncommitted = [("audit", "orders", 1), ("audit", "orders", 2)].map(|(g, t, p)| (g.to_owned(), t.to_owned(), p));
    for (output, mut lags) in every_output(monitor) {
        let extra: Vec<_> = lags.keys().filter(|k| !expected.contains_key(*k)).cloned().collect();
        assert!(extra.iter().all(|k| uncommitted.contains(k)), "{output} {when}: {extra:?}");
        lags.retain(|k, _| expected.contains_key(k));
        assert_eq!(&lags, expected, "{output} {when}");
    }
}

#[test]
fn every_output_shows_the_lag_of_one_refresh() {
    let settings = MonitorSettings { granularity: Granularity::Partition, ..MonitorSettings::default() };
    let monitor = Arc::new(Monitor::new(settings));
    monitor.track(Log::Offsets, 0, 0, 5);
    monitor.start_log(Log::Offsets);
    commit(&monitor, 0, "orders-app", "orders", 0, 40);
    commit(&monitor, 1, "orders-app", "orders", 1, 95);
    commit(&monitor, 2, "orders-app", "orders", 2, 3);
    commit(&monitor, 3, "audit", "orders", 0, 100);
    commit(&monitor, 4, "audit", "payments", 0, 7);
    monitor.end_of(Log::Offsets, 0, Some(5));
    let mut w = Watermarks::default();
    for (topic, partition, low, high) in [("orders", 0, 0, 100), ("orders", 1, 0, 100), ("orders", 2, 10, 60)] {
        w.insert(topic, partition, Watermark { low, high });
    }
    w.insert("payments", 0, Watermark { low: 0, high: 7 });
    monitor.set_watermarks(w.clone(), true, monitor.now());
    assert!(monitor.is_ready());

    let expected: Lags = [
        (("audit", "orders", 0), 0),
        (("audit", "payments", 0), 0),
        (("orders-app", "orders", 0), 60),
        (("orders-app", "orders", 1), 5),
        // Below the low watermark: lag counts from the commit, as Kafka's tools.
        (("orders-app", "orders", 2), 57),
    ]
    .into_iter()
    .map(|((g, t, p), lag)| ((g.to_owned(), t.to_owned(), p), lag))
    .collect();
    assert_every_output(&monitor, &expected, "at the first refresh");
    let overview: BTreeMap<String, i64> =
        kshard_lag::group_overview(&monitor).into_iter().map(|g| (g.group_id, g.lag)).collect();
    assert_eq!(overview, BTreeMap::from([("audit".into(), 0), ("orders-app".into(), 122)]));

    // A commit after the refresh: no output shows it before the next one.
    commit(&monitor, 5, "orders-app", "orders", 0, 100);
    assert_every_output(&monitor, &expected, "with a commit the refresh has not seen");
    monitor.set_watermarks(w, true, monitor.now());
    let mut next = expected.clone();
    next.insert(("orders-app".into(), "orders".into(), 0), 0);
    assert_every_output(&monitor, &next, "after the next refresh");
}
