//! Metrics rendered from a monitor fed by hand (no broker), on a clock the
//! test moves: series appear and disappear with the watermarks, nothing about
//! groups shows before ready, and stale watermarks take lag away.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use kshard_lag::{
    Clock, Granularity, Log, Metrics, Monitor, MonitorSettings, NameFilter, RecordAt, SelfTimings, Watermark,
    Watermarks,
};
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
    monitor.track(Log::Offsets, 0, 0, 2);
    monitor.start_log(Log::Offsets);
    for (offset, (k, v)) in [commit("g", "kept", 0, 3), commit("g", "doomed", 0, 4)].into_iter().enumerate() {
        monitor.apply(0, offset as i64, Some(&k), v.as_deref()).expect("applies");
    }
    assert!(monitor.is_caught_up());
    assert!(!monitor.is_ready(), "ready waits for watermarks taken after catch-up");
    monitor.set_watermarks(watermarks(&[("kept", 10), ("doomed", 9)]), true, monitor.now());
    let m = parse_metrics(&metrics.render().expect("renders"));
    let lag = |t: &str| {
        format!(
            "kshard_kafka_consumer_group_topic_partition_lag{{group_id=\"g\",topic_name=\"{t}\",partition_id=\"0\"}}"
        )
    };
    assert_eq!(m.get(&lag("kept")), Some(&7.0));
    assert_eq!(m.get(&lag("doomed")), Some(&5.0));

    // The topic was deleted: the next refresh no longer lists it.
    monitor.set_watermarks(watermarks(&[("kept", 12)]), true, monitor.now());
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
        ..MonitorSettings::default()
    };
    let monitor = Arc::new(Monitor::new(settings));
    let metrics = Metrics::new("kshard", Arc::clone(&monitor), Arc::new(SelfTimings::default()));
    monitor.track(Log::Offsets, 0, 0, 1);
    monitor.start_log(Log::Offsets);
    let (k, v) = commit("g", "t", 0, 50);
    monitor.apply(0, 0, Some(&k), v.as_deref()).expect("applies");
    monitor.set_watermarks(watermarks(&[("t", 40)]), true, monitor.now());
    let m = parse_metrics(&metrics.render().expect("renders"));
    assert_eq!(
        m.get("kshard_kafka_consumer_group_topic_partition_lag{group_id=\"g\",topic_name=\"t\",partition_id=\"0\"}"),
        Some(&0.0)
    );
}

/// A clock that moves only when the test says (its wall clock starts at
/// 1,000,000 s after the epoch).
#[derive(Debug)]
struct ManualClock(Mutex<(Instant, i64)>);

impl ManualClock {
    fn new() -> Self {
        ManualClock(Mutex::new((Instant::now(), 1_000_000_000)))
    }

    fn advance(&self, by: Duration) {
        let mut t = self.0.lock().expect("clock");
        t.0 += by;
        t.1 += by.as_millis() as i64;
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Instant {
        self.0.lock().expect("clock").0
    }

    fn epoch_ms(&self) -> i64 {
        self.0.lock().expect("clock").1
    }
}

#[test]
fn nothing_of_groups_before_ready_and_no_lag_on_stale_watermarks() {
    let clock = Arc::new(ManualClock::new());
    let stale_after = Duration::from_secs(15);
    let monitor = Arc::new(Monitor::with_clock(MonitorSettings::default(), stale_after, clock.clone()));
    let metrics = Metrics::new("kshard", Arc::clone(&monitor), Arc::new(SelfTimings::default()));
    let lag = "kshard_kafka_consumer_group_topic_partition_lag{group_id=\"g\",topic_name=\"t\",partition_id=\"0\"}";
    monitor.track(Log::Offsets, 0, 0, 2);
    monitor.track(Log::Offsets, 1, 0, 5);
    monitor.start_log(Log::Offsets);
    let (k, v) = commit("g", "t", 0, 3);
    monitor.apply(0, 0, Some(&k), v.as_deref()).expect("applies");
    monitor.set_watermarks(watermarks(&[("t", 10)]), monitor.is_caught_up(), clock.now());
    // Partition 1 is not read yet: not ready, and nothing about groups.
    let m = parse_metrics(&metrics.render().expect("renders"));
    assert_eq!(m.get("kshard_catchup_ready"), Some(&0.0));
    assert_eq!(m.get("kshard_catchup_offsets_remaining"), Some(&6.0));
    assert!(!m.keys().any(|k| k.contains("group_id")), "no group series before catch-up: {m:#?}");
    assert!(monitor.verdict().reason.is_some_and(|r| r.contains("catching up")));

    monitor.end_of(Log::Offsets, 0, Some(2));
    monitor.end_of(Log::Offsets, 1, Some(5));
    assert!(monitor.is_caught_up() && !monitor.is_ready(), "waits for a refresh begun after catching up");
    clock.advance(Duration::from_secs(1));
    monitor.set_watermarks(watermarks(&[("t", 10)]), true, clock.now());
    let m = parse_metrics(&metrics.render().expect("renders"));
    assert_eq!(m.get(lag), Some(&7.0));
    assert_eq!(m.get("kshard_data_current"), Some(&1.0));

    // The brokers stop answering: past the limit, lag goes (it is not frozen).
    clock.advance(Duration::from_secs(16));
    let m = parse_metrics(&metrics.render().expect("renders"));
    assert_eq!(m.get("kshard_data_current"), Some(&0.0));
    assert_eq!(m.get(lag), None, "no stale lag");
    assert!(monitor.verdict().reason.is_some_and(|r| r.contains("watermarks are 16 s old")));
    monitor.set_watermarks(watermarks(&[("t", 11)]), true, clock.now());
    let m = parse_metrics(&metrics.render().expect("renders"));
    assert_eq!(m.get(lag), Some(&8.0));
}

fn watermark(low: i64, high: i64) -> Watermarks {
    let mut w = Watermarks::default();
    w.insert("t", 0, Watermark { low, high });
    w
}

#[test]
fn status_by_burrows_rules_and_records_lost_to_retention() {
    let clock = Arc::new(ManualClock::new());
    let monitor = Arc::new(Monitor::with_clock(MonitorSettings::default(), Duration::from_secs(60), clock.clone()));
    let metrics = Metrics::new("kshard", Arc::clone(&monitor), Arc::new(SelfTimings::default()));
    monitor.track(Log::Offsets, 0, 0, 0);
    monitor.start_log(Log::Offsets);
    let status = |m: &std::collections::BTreeMap<String, f64>| -> Vec<(String, f64)> {
        m.iter()
            .filter(|(k, _)| k.starts_with("kshard_kafka_consumer_group_status{"))
            .map(|(k, v)| (k.clone(), *v))
            .collect()
    };
    // Every 10 s the group commits 10 more, while the topic grows by 15: lag
    // never decreases.
    for (i, (offset, high)) in [(10, 100), (20, 115), (30, 130)].into_iter().enumerate() {
        let now_ms = clock.epoch_ms();
        let (k, v) = Record::offset_commit("g", "t", 0, Some(OffsetCommitValue::new(3, offset, now_ms))).encode();
        monitor.apply(0, i as i64, Some(&k), v.as_deref()).expect("applies");
        monitor.set_watermarks(watermark(0, high), true, clock.now());
        clock.advance(Duration::from_secs(10));
    }
    let m = parse_metrics(&metrics.render().expect("renders"));
    assert_eq!(status(&m), [("kshard_kafka_consumer_group_status{group_id=\"g\",status=\"WARN\"}".to_owned(), 2.0)]);
    let groups: serde_json::Value = serde_json::from_str(&monitor_json(&monitor)).expect("JSON");
    assert_eq!(groups[0]["status"], "WARN");
    assert_eq!(groups[0]["topics"][0]["partitions"][0]["status"], "WARN");

    // No commit for a minute (more than the 20 s the window spans): STOP, and
    // the group ERR. Retention deletes up to offset 50 meanwhile: 20 records
    // the group never read.
    clock.advance(Duration::from_secs(50));
    monitor.set_watermarks(watermark(50, 140), true, clock.now());
    let m = parse_metrics(&metrics.render().expect("renders"));
    assert_eq!(status(&m), [("kshard_kafka_consumer_group_status{group_id=\"g\",status=\"ERR\"}".to_owned(), 3.0)]);
    let lost =
        "kshard_kafka_consumer_group_topic_partition_records_lost{group_id=\"g\",topic_name=\"t\",partition_id=\"0\"}";
    assert_eq!(m.get(lost), Some(&20.0));
    let groups: serde_json::Value = serde_json::from_str(&monitor_json(&monitor)).expect("JSON");
    assert_eq!(groups[0]["status"], "ERR");
    assert_eq!(groups[0]["topics"][0]["partitions"][0]["status"], "STOP");
    assert_eq!(groups[0]["topics"][0]["partitions"][0]["records_lost"], 20);

    // The consumer comes back and catches up: OK, nothing lost.
    let (k, v) = Record::offset_commit("g", "t", 0, Some(OffsetCommitValue::new(3, 140, clock.epoch_ms()))).encode();
    monitor.apply(0, 3, Some(&k), v.as_deref()).expect("applies");
    monitor.set_watermarks(watermark(50, 140), true, clock.now());
    let m = parse_metrics(&metrics.render().expect("renders"));
    assert_eq!(status(&m), [("kshard_kafka_consumer_group_status{group_id=\"g\",status=\"OK\"}".to_owned(), 1.0)]);
    assert_eq!(m.get(lost), None);
}

/// `/api/groups` as JSON.
fn monitor_json(monitor: &Monitor) -> String {
    serde_json::to_string(&kshard_lag::group_views(monitor)).expect("serializes")
}

/// A consumer slowed down, then sped up, on a topic produced at 10 records a
/// second: commit age, both rates and the time to catch up follow it.
#[test]
fn commit_age_rates_and_time_to_catch_up_follow_a_consumer() {
    let clock = Arc::new(ManualClock::new());
    let settings = MonitorSettings { granularity: Granularity::Partition, ..MonitorSettings::default() };
    let monitor = Arc::new(Monitor::with_clock(settings, Duration::from_secs(60), clock.clone()));
    let metrics = Metrics::new("kshard", Arc::clone(&monitor), Arc::new(SelfTimings::default()));
    monitor.track(Log::Offsets, 0, 0, 0);
    monitor.start_log(Log::Offsets);
    let series = |name: &str| format!("kshard_{name}{{group_id=\"g\",topic_name=\"t\",partition_id=\"0\"}}");
    let (mut offset, mut high, mut at) = (0i64, 1000i64, 0i64);
    let mut step = |consumed: i64, clock: &ManualClock| {
        offset += consumed;
        high += 100;
        let (k, v) =
            Record::offset_commit("g", "t", 0, Some(OffsetCommitValue::new(3, offset, clock.epoch_ms()))).encode();
        monitor.apply(0, at, Some(&k), v.as_deref()).expect("applies");
        at += 1;
        // The refresh 10 s after the commit: what /metrics shows until the next.
        clock.advance(Duration::from_secs(10));
        monitor.set_watermarks(watermark(0, high), true, clock.now());
    };
    // Slow: 5 records a second for ten commits, 10 s apart. The lag grows.
    for _ in 0..10 {
        step(50, &clock);
    }
    let m = parse_metrics(&metrics.render().expect("renders"));
    assert_eq!(m.get(&series("kafka_consumer_group_topic_partition_consume_rate")), Some(&5.0));
    assert_eq!(m.get(&series("kafka_consumer_group_topic_partition_produce_rate")), Some(&10.0));
    assert_eq!(m.get(&series("kafka_consumer_group_topic_partition_catch_up_seconds")), None, "not shrinking");
    assert_eq!(m.get(&series("kafka_consumer_group_topic_partition_commit_age_seconds")), Some(&10.0));

    // Fast: 20 records a second. Once the window holds only fast commits,
    // the lag shrinks at 10 a second.
    for _ in 0..10 {
        step(200, &clock);
    }
    let m = parse_metrics(&metrics.render().expect("renders"));
    assert_eq!(m.get(&series("kafka_consumer_group_topic_partition_consume_rate")), Some(&20.0));
    assert_eq!(m.get(&series("kafka_consumer_group_topic_partition_produce_rate")), Some(&10.0));
    let lag = high - offset;
    assert_eq!(lag, 500);
    let eta = m.get(&series("kafka_consumer_group_topic_partition_catch_up_seconds")).copied();
    assert_eq!(eta, Some(lag as f64 / 10.0));
    let groups: serde_json::Value = serde_json::from_str(&monitor_json(&monitor)).expect("JSON");
    let p = &groups[0]["topics"][0]["partitions"][0];
    assert_eq!((p["consumed_per_second"].as_f64(), p["produced_per_second"].as_f64()), (Some(20.0), Some(10.0)));
    assert_eq!(p["catch_up_seconds"].as_f64(), Some(lag as f64 / 10.0));
    assert_eq!(p["rate_window_seconds"].as_f64(), Some(90.0));

    // The consumer dies: no commit for five minutes. Its commit age grows
    // while the rates stay those of its last window.
    clock.advance(Duration::from_secs(290));
    monitor.set_watermarks(watermark(0, high), true, clock.now());
    let m = parse_metrics(&metrics.render().expect("renders"));
    assert_eq!(m.get(&series("kafka_consumer_group_topic_partition_commit_age_seconds")), Some(&300.0));
    let topic_age = "kshard_kafka_consumer_group_topic_max_commit_age_seconds{group_id=\"g\",topic_name=\"t\"}";
    assert_eq!(m.get(topic_age), Some(&300.0));
}

/// `motion_granularity: topic`: the four per-partition motion families go
/// (a cluster's series count back to what it was before them), the per-topic
/// commit age, the partition lag and the API's rates stay.
#[test]
fn motion_per_topic_only_leaves_out_the_four_partition_families() {
    let clock = Arc::new(ManualClock::new());
    let settings = MonitorSettings {
        granularity: Granularity::Partition,
        motion_granularity: Granularity::Topic,
        ..MonitorSettings::default()
    };
    let monitor = Arc::new(Monitor::with_clock(settings, Duration::from_secs(60), clock.clone()));
    let metrics = Metrics::new("kshard", Arc::clone(&monitor), Arc::new(SelfTimings::default()));
    monitor.track(Log::Offsets, 0, 0, 0);
    monitor.start_log(Log::Offsets);
    for i in 0..4 {
        let v = OffsetCommitValue::new(3, 100 * (i + 1), clock.epoch_ms());
        let (k, v) = Record::offset_commit("g", "t", 0, Some(v)).encode();
        monitor.apply(0, i, Some(&k), v.as_deref()).expect("applies");
        clock.advance(Duration::from_secs(10));
        monitor.set_watermarks(watermark(0, 1000 + 50 * i), true, clock.now());
    }
    let m = parse_metrics(&metrics.render().expect("renders"));
    let partition_motion = m.keys().filter(|k| {
        ["commit_age_seconds", "consume_rate", "produce_rate", "catch_up_seconds"]
            .iter()
            .any(|f| k.starts_with(&format!("kshard_kafka_consumer_group_topic_partition_{f}")))
    });
    assert_eq!(partition_motion.count(), 0, "{m:#?}");
    let topic_age = "kshard_kafka_consumer_group_topic_max_commit_age_seconds{group_id=\"g\",topic_name=\"t\"}";
    assert_eq!(m.get(topic_age), Some(&10.0));
    let lag = "kshard_kafka_consumer_group_topic_partition_lag{group_id=\"g\",topic_name=\"t\",partition_id=\"0\"}";
    assert_eq!(m.get(lag), Some(&750.0));
    let groups: serde_json::Value = serde_json::from_str(&monitor_json(&monitor)).expect("JSON");
    let p = &groups[0]["topics"][0]["partitions"][0];
    assert_eq!(p["consumed_per_second"].as_f64(), Some(10.0), "the API keeps the rates: {p}");
}

/// A monitor capped at 2 partition series whose unit 0 (of `records`
/// offsets) holds group g's commits on partitions p = 0..5 of topic t at
/// 10 × p, against a high watermark of 100: lags 100, 90, 80, 70, 60.
fn five_lagging_partitions(records: i64) -> (Arc<Monitor>, Metrics, Watermarks) {
    let settings = MonitorSettings {
        granularity: Granularity::Partition,
        max_partition_series: Some(2),
        ..MonitorSettings::default()
    };
    let monitor = Arc::new(Monitor::new(settings));
    let metrics = Metrics::new("kshard", Arc::clone(&monitor), Arc::new(SelfTimings::default()));
    monitor.track(Log::Offsets, 0, 0, records);
    monitor.start_log(Log::Offsets);
    let mut w = Watermarks::default();
    for p in 0..5 {
        let (k, v) = Record::offset_commit("g", "t", p, Some(OffsetCommitValue::new(3, 10 * i64::from(p), 0))).encode();
        monitor.apply(0, i64::from(p), Some(&k), v.as_deref()).expect("applies");
        w.insert("t", p, Watermark { low: 0, high: 100 });
    }
    (monitor, metrics, w)
}

/// With `max_partition_series`, the group-partitions with the most lag keep
/// their series; the roll-ups still count every one, and the number left out
/// is itself a series.
#[test]
fn max_partition_series_keeps_the_most_lagging_and_every_roll_up() {
    let (monitor, metrics, w) = five_lagging_partitions(5);
    monitor.set_watermarks(w, true, monitor.now());
    let m = parse_metrics(&metrics.render().expect("renders"));
    let kept: Vec<&String> =
        m.keys().filter(|k| k.starts_with("kshard_kafka_consumer_group_topic_partition_lag{")).collect();
    assert_eq!(
        kept,
        [
            "kshard_kafka_consumer_group_topic_partition_lag{group_id=\"g\",topic_name=\"t\",partition_id=\"0\"}",
            "kshard_kafka_consumer_group_topic_partition_lag{group_id=\"g\",topic_name=\"t\",partition_id=\"1\"}",
        ]
    );
    assert_eq!(m.get("kshard_kafka_consumer_group_topic_lag{group_id=\"g\",topic_name=\"t\"}"), Some(&400.0));
    assert_eq!(m.get("kshard_partition_series_dropped"), Some(&3.0));
}

#[test]
fn max_partition_series_ranks_share_partitions_with_the_others() {
    use kshard_offsets::{
        GroupIdKey, NamedTopicPartitions, RecordKey, RecordValue, ShareGroupStatePartitionMetadataValue,
        SharePartitionKey, ShareSnapshotValue, ShareStateKey, ShareStateRecord, ShareStateValue, Uuid,
    };
    let (monitor, metrics, mut w) = five_lagging_partitions(6);
    // Share group "sg" on topic "s": start offset 5, nothing done after it,
    // against a high watermark of 100: lag 95, second only to g's 100.
    let id = Uuid([5; 16]);
    let named = Record {
        key: RecordKey::ShareGroupStatePartitionMetadata(GroupIdKey { group_id: "sg".into() }),
        value: Some(RecordValue::ShareGroupStatePartitionMetadata(ShareGroupStatePartitionMetadataValue {
            version: 0,
            initializing_topics: vec![],
            initialized_topics: vec![NamedTopicPartitions {
                topic_id: id,
                topic_name: "s".into(),
                partitions: vec![0],
            }],
            deleting_topics: vec![],
        })),
    };
    let (k, v) = named.encode();
    monitor.apply(0, 5, Some(&k), v.as_deref()).expect("applies");
    let snapshot = ShareSnapshotValue {
        version: 0,
        snapshot_epoch: 0,
        state_epoch: 0,
        leader_epoch: 0,
        start_offset: 5,
        delivery_complete_count: 0,
        create_timestamp: 0,
        write_timestamp: 0,
        state_batches: vec![],
    };
    let key = SharePartitionKey { group_id: "sg".into(), topic_id: id, partition: 0 };
    let (k, v) =
        ShareStateRecord { key: ShareStateKey::Snapshot(key), value: Some(ShareStateValue::Snapshot(snapshot)) }
            .encode();
    let record = RecordAt { partition: 0, offset: 0, transactional: None, key: Some(&k), value: v.as_deref() };
    monitor.share_units().apply_then(record, |_| ()).0.expect("applies");
    w.insert("s", 0, Watermark { low: 0, high: 100 });
    monitor.set_watermarks(w, true, monitor.now());
    let m = parse_metrics(&metrics.render().expect("renders"));
    let kept = |family: &str| -> Vec<String> {
        m.keys().filter(|k| k.starts_with(&format!("kshard_kafka_{family}{{"))).cloned().collect()
    };
    assert_eq!(
        kept("consumer_group_topic_partition_lag"),
        ["kshard_kafka_consumer_group_topic_partition_lag{group_id=\"g\",topic_name=\"t\",partition_id=\"0\"}"]
    );
    assert_eq!(
        kept("share_group_topic_partition_lag"),
        ["kshard_kafka_share_group_topic_partition_lag{group_id=\"sg\",topic_name=\"s\",partition_id=\"0\"}"]
    );
    assert_eq!(m.get("kshard_partition_series_dropped"), Some(&4.0));
    assert_eq!(m.get("kshard_kafka_share_group_topic_lag{group_id=\"sg\",topic_name=\"s\"}"), Some(&95.0));
}

/// A group's lag objective on its page, refresh by refresh: a minute under
/// the bound (caught up), then 20 s over it (10 records written a minute
/// before), each interval counted as the refresh that began it.
#[test]
fn a_groups_objective_is_measured_refresh_by_refresh() {
    let clock = Arc::new(ManualClock::new());
    let fresh = kshard_lag::Objective {
        name: "fresh".into(),
        selector: Vec::new(),
        lag_seconds: 30.0,
        target: 0.99,
        window: Duration::from_secs(3600),
    };
    let settings = MonitorSettings { objectives: Arc::from([fresh]), ..MonitorSettings::default() };
    let monitor = Monitor::with_clock(settings, Duration::from_secs(60), clock.clone());
    monitor.track(Log::Offsets, 0, 0, 0);
    monitor.start_log(Log::Offsets);
    let (k, v) = commit("g", "t", 0, 10);
    monitor.apply(0, 0, Some(&k), v.as_deref()).expect("applies");
    let written_ms = clock.epoch_ms();
    let refresh = |high| {
        monitor.refresh(watermark(0, high), true, clock.now(), |m, wanted| {
            m.times_found(wanted.iter().map(|w| (w.clone(), (w.offset, written_ms))));
        });
    };
    let budget = || {
        let detail = kshard_lag::group_detail(&monitor, "g").expect("g is known");
        let [b] = &detail.objectives[..] else { panic!("one objective: {:?}", detail.objectives) };
        b.clone()
    };
    for _ in 0..6 {
        refresh(10);
        clock.advance(Duration::from_secs(10));
    }
    refresh(20);
    let b = budget();
    assert_eq!((b.good_now, b.measured_seconds, b.over_seconds, b.budget_remaining), (Some(false), 60.0, 0.0, 1.0));
    for _ in 0..2 {
        clock.advance(Duration::from_secs(10));
        refresh(20);
    }
    let b = budget();
    assert_eq!((b.measured_seconds, b.over_seconds, b.good_ratio), (80.0, 20.0, Some(0.75)));
    // 20 s over of the 36 s an hour allows at 99%; a quarter of the time
    // over is 25 times as fast as allowed.
    assert_eq!(b.allowed_over_seconds, 36.0);
    assert!((b.budget_remaining - (1.0 - 20.0 / 36.0)).abs() < 1e-9, "{b:?}");
    assert!(b.burn_rate.is_some_and(|r| (r - 25.0).abs() < 1e-9), "{b:?}");
    assert_eq!(b.since_ms, Some(written_ms));
}
