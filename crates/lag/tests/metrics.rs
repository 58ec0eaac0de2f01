//! Metrics rendered from a monitor fed by hand (no broker): series appear and
//! disappear with the watermarks, and nothing about groups shows before ready.

use std::sync::Arc;

use kshard_lag::{Granularity, Metrics, Monitor, MonitorSettings, NameFilter, SelfTimings, Watermark, Watermarks};
use kshard_offsets::{OffsetCommitValue, Record};
use kshard_testkit::parse_metrics;

fn commit(group: &str, topic: &str, partition: i32, offset: i64) -> (Vec<u8>, Option<Vec<u8>>) {
    Record::offset_commit(group, topic, partition, Some(OffsetCommitValue::new(3, offset, 0))).encode()
}

fn watermarks(topics: &[(&str, i64)]) -> Watermarks {
    let mut w = Watermarks::default();
    for (t, high) in topics {
        w.insert(t, 0, Watermark { low: 0, high: *high });
    }
    w
}

#[test]
fn a_topic_missing_from_the_watermarks_has_no_series() {
    let monitor = Arc::new(Monitor::new(MonitorSettings::default()));
    let metrics = Metrics::new("kshard", Arc::clone(&monitor), Arc::new(SelfTimings::default()));
    monitor.track_partition(0, 0, 2);
    monitor.start();
    for (offset, (k, v)) in [commit("g", "kept", 0, 3), commit("g", "doomed", 0, 4)].into_iter().enumerate() {
        monitor.apply(0, offset as i64, Some(&k), v.as_deref()).expect("applies");
    }
    assert!(monitor.is_caught_up());
    assert!(!monitor.is_ready(), "ready waits for watermarks taken after catch-up");
    monitor.set_watermarks(watermarks(&[("kept", 10), ("doomed", 9)]), true);
    let m = parse_metrics(&metrics.render().expect("renders"));
    let lag = |t: &str| {
        format!(
            "kshard_kafka_consumer_group_topic_partition_lag{{group_id=\"g\",topic_name=\"{t}\",partition_id=\"0\"}}"
        )
    };
    assert_eq!(m.get(&lag("kept")), Some(&7.0));
    assert_eq!(m.get(&lag("doomed")), Some(&5.0));

    // The topic was deleted: the next refresh no longer lists it.
    monitor.set_watermarks(watermarks(&[("kept", 12)]), true);
    let m = parse_metrics(&metrics.render().expect("renders"));
    assert_eq!(m.get(&lag("kept")), Some(&9.0));
    assert!(!m.keys().any(|k| k.contains("doomed")), "{m:#?}");
}

#[test]
fn commits_ahead_of_the_watermark_have_zero_lag() {
    let settings = MonitorSettings {
        granularity: Granularity::Partition,
        groups: NameFilter::default(),
        topics: NameFilter::default(),
    };
    let monitor = Arc::new(Monitor::new(settings));
    let metrics = Metrics::new("kshard", Arc::clone(&monitor), Arc::new(SelfTimings::default()));
    monitor.track_partition(0, 0, 1);
    monitor.start();
    let (k, v) = commit("g", "t", 0, 50);
    monitor.apply(0, 0, Some(&k), v.as_deref()).expect("applies");
    monitor.set_watermarks(watermarks(&[("t", 40)]), true);
    let m = parse_metrics(&metrics.render().expect("renders"));
    assert_eq!(
        m.get("kshard_kafka_consumer_group_topic_partition_lag{group_id=\"g\",topic_name=\"t\",partition_id=\"0\"}"),
        Some(&0.0)
    );
}
