//! `kshard bench state`: memory per tracked group-partition, apply rate and
//! `/metrics` render time, without a broker.

use std::sync::Arc;
use std::time::Instant;

use anyhow::Result;
use kshard_lag::{Metrics, Monitor, MonitorSettings, SelfTimings, Watermark, Watermarks};

use super::median;

/// `bench state`: memory per tracked group-partition and `/metrics` render time.
pub(crate) fn state(groups: u32, partitions: u32, topics: u32) -> Result<()> {
    let rss = || -> Result<f64> {
        let status = std::fs::read_to_string("/proc/self/status")?;
        Ok(status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(0.0)
            * 1024.0)
    };
    // An hour of history by the minute for every group, measured first (on
    // memory no earlier step freed) and kept to the end.
    let rss_before_history = rss()?;
    let mut history = kshard_lag::LagHistory::new(kshard_lag::HistorySettings::default());
    let names: Vec<Arc<str>> = (0..groups).map(|g| Arc::from(format!("consumer-group-{g:06}"))).collect();
    for minute in 0..60 {
        history.record(minute * 60_000, names.iter().map(|g| (Arc::clone(g), 1000 + minute, Some(12.5))));
    }
    let history_per_group = (rss()? - rss_before_history) / f64::from(groups);
    let rss_before = rss()?;
    let monitor = Arc::new(Monitor::new(MonitorSettings::default()));
    let units = 50;
    for p in 0..units {
        monitor.track_partition(p, 0, 0);
    }
    monitor.start();
    let mut watermarks = Watermarks::default();
    let mut offset = 0i64;
    let mut records = Vec::new();
    for g in 0..groups {
        let group = format!("consumer-group-{g:06}");
        let topic = format!("topic-{:04}", g % topics.max(1));
        let unit = kshard_kafka::offsets_partition_for(&group, units);
        for p in 0..partitions {
            let (key, value) = bench_commit(&group, &topic, p as i32, i64::from(g));
            monitor.apply(unit, offset, Some(&key), value.as_deref()).map_err(|e| anyhow::anyhow!("{e:?}"))?;
            offset += 1;
            watermarks.insert(&topic, p as i32, Watermark { low: 0, high: 1_000_000 });
        }
    }
    let rss_after = rss()?;
    // The steady state of a monitor following commits: existing offsets updated.
    for g in 0..groups.min(60_000) {
        let group = format!("consumer-group-{g:06}");
        let topic = format!("topic-{:04}", g % topics.max(1));
        let unit = kshard_kafka::offsets_partition_for(&group, units);
        for p in 0..partitions {
            records.push((unit, bench_commit(&group, &topic, p as i32, i64::from(g) + 1)));
        }
    }
    let started = Instant::now();
    let mut applied = 0u64;
    for _ in 0..5 {
        for (unit, (key, value)) in &records {
            monitor.apply(*unit, offset, Some(key), value.as_deref()).map_err(|e| anyhow::anyhow!("{e:?}"))?;
            offset += 1;
            applied += 1;
        }
    }
    let apply_rate = applied as f64 / started.elapsed().as_secs_f64();
    drop(records);
    monitor.units().sweep_names();
    let tracked = u64::from(groups) * u64::from(partitions);
    monitor.set_watermarks(watermarks, true, monitor.now());
    // Ten refreshes that each saw a new commit of every group-partition (all
    // lagging here): status windows fill, and every record time is wanted and
    // read (faked). Then refreshes with nothing new.
    let rss_before_windows = rss()?;
    let mut busy = Vec::new();
    let mut wanted_count = 0;
    for round in 0..10 {
        let started = Instant::now();
        let wanted = monitor.sample();
        busy.push(started.elapsed().as_secs_f64() * 1000.0);
        wanted_count = wanted.len();
        monitor.times_found(wanted.into_iter().map(|(t, p, o)| ((t, p, o), (o, 1_758_335_000_000))));
        for (g, (unit, (key, value))) in recommits(groups, partitions, topics, units, round).enumerate() {
            monitor
                .apply(unit, offset + g as i64, Some(&key), value.as_deref())
                .map_err(|e| anyhow::anyhow!("{e:?}"))?;
        }
        offset += i64::from(groups) * i64::from(partitions);
    }
    monitor.times_found(monitor.sample().into_iter().map(|(t, p, o)| ((t, p, o), (o, 1_758_335_000_000))));
    let windows_per = (rss()? - rss_before_windows) / tracked as f64;
    let mut steady = Vec::new();
    for _ in 0..5 {
        let started = Instant::now();
        let again = monitor.sample();
        steady.push(started.elapsed().as_secs_f64() * 1000.0);
        anyhow::ensure!(again.is_empty(), "known record times were wanted again");
    }
    // The page: each group's lag into its history (a pass per refresh), the
    // overview it fetches, and the memory of an hour of history by the minute.
    let mut history_pass = Vec::new();
    for _ in 0..5 {
        let started = Instant::now();
        monitor.record_history();
        history_pass.push(started.elapsed().as_secs_f64() * 1000.0);
    }
    let (mut overview_ms, mut overview_bytes) = (Vec::new(), 0);
    for _ in 0..5 {
        let started = Instant::now();
        let overview = kshard_lag::group_overview(&monitor);
        overview_bytes = serde_json::to_vec(&overview)?.len();
        overview_ms.push(started.elapsed().as_secs_f64() * 1000.0);
    }
    let metrics = Metrics::new("kshard", Arc::clone(&monitor), Arc::new(SelfTimings::default()));
    let mut times = Vec::new();
    let mut size = 0;
    for _ in 0..7 {
        let started = Instant::now();
        size = metrics.render().map_err(|_| anyhow::anyhow!("render failed"))?.len();
        times.push(started.elapsed().as_secs_f64() * 1000.0);
    }
    let per = (rss_after - rss_before) / tracked as f64;
    println!("tracked group-partitions: {tracked} ({groups} groups × {partitions} partitions, {topics} topics)");
    println!("apply: {:.2} million offset commits/s (decode and update, one thread)", apply_rate / 1e6);
    println!("state memory: {:.1} MB RSS, {per:.0} bytes per tracked group-partition", (rss_after - rss_before) / 1e6);
    println!(
        "status windows (10 commits each) and record times: {windows_per:.0} more bytes per tracked group-partition"
    );
    println!(
        "a refresh's pass (windows, high watermarks, record times wanted): median {:.1} ms when every group-partition committed ({wanted_count} record times wanted), {:.1} ms with nothing new ({:.2} ms per 10,000 lagging group-partitions)",
        median(busy),
        median(steady.clone()),
        median(steady) / (tracked as f64 / 10_000.0)
    );
    println!("/metrics render: median {:.1} ms over 7 renders ({:.1} MB of text)", median(times), size as f64 / 1e6);
    drop(history);
    println!(
        "the page: lag history pass median {:.1} ms per refresh; an hour by the minute {history_per_group:.0} bytes per group (names included); /api/overview median {:.1} ms ({:.1} MB of JSON for {groups} groups)",
        median(history_pass),
        median(overview_ms),
        overview_bytes as f64 / 1e6
    );
    Ok(())
}

/// A new commit of every group-partition, with a commit time of its own (`round`).
fn recommits(
    groups: u32,
    partitions: u32,
    topics: u32,
    units: i32,
    round: i64,
) -> impl Iterator<Item = (i32, (Vec<u8>, Option<Vec<u8>>))> {
    use kshard_offsets::{OffsetCommitValue, Record};
    (0..groups).flat_map(move |g| {
        let group = format!("consumer-group-{g:06}");
        let topic = format!("topic-{:04}", g % topics.max(1));
        let unit = kshard_kafka::offsets_partition_for(&group, units);
        (0..partitions).map(move |p| {
            let value = OffsetCommitValue::new(3, i64::from(g) + round + 2, 1_758_335_260_726 + round * 5000);
            (unit, Record::offset_commit(&group, &topic, p as i32, Some(value)).encode())
        })
    })
}

fn bench_commit(group: &str, topic: &str, partition: i32, offset: i64) -> (Vec<u8>, Option<Vec<u8>>) {
    use kshard_offsets::{OffsetCommitValue, Record};
    let value = OffsetCommitValue::new(3, offset, 1_758_335_260_726);
    Record::offset_commit(group, topic, partition, Some(value)).encode()
}
