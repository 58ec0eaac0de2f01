//! `kshard bench state`: memory per tracked group-partition, apply rate and
//! `/metrics` render time, without a broker.

use std::sync::Arc;
use std::time::Instant;

use anyhow::Result;
use kshard_lag::{Log, Metrics, Monitor, MonitorSettings, SelfTimings, Watermark, Watermarks};

use super::median;

/// The commits of the bench: `groups` groups over `topics` topics, each
/// committing to `partitions` partitions, spread over `UNITS` units.
#[derive(Debug, Clone, Copy)]
struct Shape {
    groups: u32,
    partitions: u32,
    topics: u32,
}

/// A record's key and value, encoded.
type Encoded = (Vec<u8>, Option<Vec<u8>>);

/// The offsets topic's partitions the bench's groups are spread over.
const UNITS: i32 = 50;

impl Shape {
    fn tracked(self) -> u64 {
        u64::from(self.groups) * u64::from(self.partitions)
    }

    /// Every group-partition as (unit, group, topic, partition, group number).
    fn each(self, groups: u32) -> impl Iterator<Item = (i32, String, String, i32, u32)> {
        (0..groups).flat_map(move |g| {
            let group = format!("consumer-group-{g:06}");
            let topic = format!("topic-{:04}", g % self.topics.max(1));
            let unit = kshard_kafka::offsets_partition_for(&group, UNITS);
            (0..self.partitions).map(move |p| (unit, group.clone(), topic.clone(), p as i32, g))
        })
    }
}

/// This process's resident memory, in bytes.
fn rss() -> Result<f64> {
    let status = std::fs::read_to_string("/proc/self/status")?;
    Ok(status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse::<f64>().ok())
        .unwrap_or(0.0)
        * 1024.0)
}

/// `f` run `n` times: the milliseconds of each run, and the last result.
fn timed_ms<T>(n: usize, mut f: impl FnMut() -> Result<T>) -> Result<(Vec<f64>, T)> {
    let mut times = Vec::with_capacity(n);
    let mut last = None;
    for _ in 0..n {
        let started = Instant::now();
        last = Some(f()?);
        times.push(started.elapsed().as_secs_f64() * 1000.0);
    }
    last.map(|l| (times, l)).ok_or_else(|| anyhow::anyhow!("no runs"))
}

fn apply(monitor: &Monitor, unit: i32, offset: i64, (key, value): &Encoded) -> Result<()> {
    monitor.apply(unit, offset, Some(key), value.as_deref()).map(|_| ()).map_err(|e| anyhow::anyhow!("{e:?}"))
}

/// `bench state`: memory per tracked group-partition and `/metrics` render time.
pub(crate) fn state(groups: u32, partitions: u32, topics: u32, max_partition_series: Option<usize>) -> Result<()> {
    let shape = Shape { groups, partitions, topics };
    // Measured first (on memory no earlier step freed) and kept to the end.
    let (history, history_per_group) = hour_of_history(groups)?;
    let rss_before = rss()?;
    let monitor = Arc::new(Monitor::new(MonitorSettings { max_partition_series, ..MonitorSettings::default() }));
    for p in 0..UNITS {
        monitor.track(Log::Offsets, p, 0, 0);
    }
    monitor.start_log(Log::Offsets);
    let mut watermarks = Watermarks::default();
    let mut offset = 0i64;
    for (unit, group, topic, p, g) in shape.each(groups) {
        apply(&monitor, unit, offset, &bench_commit(&group, &topic, p, i64::from(g)))?;
        offset += 1;
        watermarks.insert(&topic, p, Watermark { low: 0, high: 1_000_000 });
    }
    let rss_after = rss()?;
    let apply_rate = steady_apply_rate(&monitor, shape, &mut offset)?;
    monitor.units().sweep_names();
    let tracked = shape.tracked();
    // The first refresh: status windows made, record times wanted, the
    // snapshot taken (held until the next), the lag history begun.
    let rss_before_refresh = rss()?;
    monitor.set_watermarks(watermarks, true, monitor.now());
    let first_refresh_per = (rss()? - rss_before_refresh) / tracked as f64;
    let snapshot_per = monitor.snapshot_bytes() as f64 / tracked as f64;
    let rss_before_windows = rss()?;
    let (busy, wanted_count) = busy_refreshes(&monitor, shape, &mut offset)?;
    let windows_per = (rss()? - rss_before_windows) / tracked as f64;
    let (steady, _) = timed_ms(5, || {
        anyhow::ensure!(monitor.sample().is_empty(), "known record times were wanted again");
        Ok(())
    })?;
    let renders = Renders::measure(&monitor)?;
    let per = (rss_after - rss_before) / tracked as f64;
    println!("tracked group-partitions: {tracked} ({groups} groups × {partitions} partitions, {topics} topics)");
    println!("apply: {:.2} million offset commits/s (decode and update, one thread)", apply_rate / 1e6);
    println!("state memory: {:.1} MB RSS, {per:.0} bytes per tracked group-partition", (rss_after - rss_before) / 1e6);
    println!(
        "the first refresh (status windows made, record times wanted, the snapshot, the lag history begun): {first_refresh_per:.0} more bytes per tracked group-partition, of which the snapshot holds {snapshot_per:.0}"
    );
    println!(
        "status windows (10 commits each) and record times: {windows_per:.0} more bytes per tracked group-partition"
    );
    println!(
        "a refresh's pass (windows, high watermarks, record times wanted): median {:.1} ms when every group-partition committed ({wanted_count} record times wanted), {:.1} ms with nothing new ({:.2} ms per 10,000 lagging group-partitions)",
        median(busy),
        median(steady.clone()),
        median(steady) / (tracked as f64 / 10_000.0)
    );
    let cap = max_partition_series.map_or("all".to_owned(), |n| n.to_string());
    drop(history);
    renders.print(&cap, history_per_group, groups);
    Ok(())
}

/// An hour of lag history by the minute for every one of `groups`, and
/// the memory it took per group.
fn hour_of_history(groups: u32) -> Result<(kshard_lag::LagHistory, f64)> {
    let rss_before = rss()?;
    let mut history = kshard_lag::LagHistory::new(kshard_lag::HistorySettings::default());
    let names: Vec<Arc<str>> = (0..groups).map(|g| Arc::from(format!("consumer-group-{g:06}"))).collect();
    for minute in 0..60 {
        history.record(minute * 60_000, names.iter().map(|g| (Arc::clone(g), 1000 + minute, Some(12.5))));
    }
    Ok((history, (rss()? - rss_before) / f64::from(groups)))
}

/// What every refresh and scrape renders from the state, timed.
struct Renders {
    snapshot_pass: Vec<f64>,
    overview_ms: Vec<f64>,
    overview_bytes: usize,
    times: Vec<f64>,
    size: usize,
    otlp_times: Vec<f64>,
    requests: usize,
    otlp_bytes: usize,
}

impl Renders {
    fn measure(monitor: &Arc<Monitor>) -> Result<Self> {
        // The snapshot every output reads (a pass per refresh, each group's lag
        // into its history with it), the page's overview, and the memory of an
        // hour of history by the minute.
        let (snapshot_pass, ()) = timed_ms(5, || {
            monitor.take_snapshot();
            Ok(())
        })?;
        let (overview_ms, overview_bytes) =
            timed_ms(5, || Ok(serde_json::to_vec(&kshard_lag::group_overview(monitor))?.len()))?;
        let metrics = Metrics::new("kshard", Arc::clone(monitor), Arc::new(SelfTimings::default()));
        let (times, size) = timed_ms(7, || Ok(metrics.render().map_err(|_| anyhow::anyhow!("render failed"))?.len()))?;
        // What the OTLP export does with that text each interval: read it back,
        // map it, encode its requests (8,192 data points each, the default).
        let text = metrics.render().map_err(|_| anyhow::anyhow!("render failed"))?;
        let (otlp_times, (requests, otlp_bytes)) = timed_ms(5, || {
            let bodies = kshard_lag::otlp_export_bodies(&text, 8192).map_err(|e| anyhow::anyhow!(e))?;
            Ok((bodies.len(), bodies.iter().map(Vec::len).sum::<usize>()))
        })?;
        drop(text);
        Ok(Renders { snapshot_pass, overview_ms, overview_bytes, times, size, otlp_times, requests, otlp_bytes })
    }

    fn print(self, cap: &str, history_per_group: f64, groups: u32) {
        println!(
            "/metrics render: median {:.1} ms over 7 renders ({:.1} MB of text; per-partition series: {cap})",
            median(self.times),
            self.size as f64 / 1e6
        );
        println!(
            "OTLP export of that text: median {:.1} ms over 5 (read back, mapped, encoded: {} requests, {:.1} MB of protobuf)",
            median(self.otlp_times),
            self.requests,
            self.otlp_bytes as f64 / 1e6
        );
        println!(
            "the snapshot every output reads, with the page's lag history: median {:.1} ms per refresh; an hour by the minute {history_per_group:.0} bytes per group (names included); /api/overview median {:.1} ms ({:.1} MB of JSON for {groups} groups)",
            median(self.snapshot_pass),
            median(self.overview_ms),
            self.overview_bytes as f64 / 1e6
        );
    }
}

/// The steady state of a monitor following commits: existing offsets
/// updated, five times over (at most 60,000 groups); commits per second.
fn steady_apply_rate(monitor: &Monitor, shape: Shape, offset: &mut i64) -> Result<f64> {
    let records: Vec<(i32, Encoded)> = shape
        .each(shape.groups.min(60_000))
        .map(|(unit, group, topic, p, g)| (unit, bench_commit(&group, &topic, p, i64::from(g) + 1)))
        .collect();
    let started = Instant::now();
    let mut applied = 0u64;
    for _ in 0..5 {
        for (unit, record) in &records {
            apply(monitor, *unit, *offset, record)?;
            *offset += 1;
            applied += 1;
        }
    }
    Ok(applied as f64 / started.elapsed().as_secs_f64())
}

/// Ten refreshes that each saw a new commit of every group-partition (all
/// lagging here): status windows fill, and every record time is wanted and
/// read (faked). The milliseconds of each refresh's pass, and how many
/// record times the last one wanted.
fn busy_refreshes(monitor: &Monitor, shape: Shape, offset: &mut i64) -> Result<(Vec<f64>, usize)> {
    let mut busy = Vec::new();
    let mut wanted_count = 0;
    for round in 0..10 {
        let started = Instant::now();
        let wanted = monitor.sample();
        busy.push(started.elapsed().as_secs_f64() * 1000.0);
        wanted_count = wanted.len();
        monitor.times_found(wanted.into_iter().map(|at| {
            let o = at.offset;
            (at, (o, 1_758_335_000_000))
        }));
        for (g, (unit, record)) in recommits(shape, round).enumerate() {
            apply(monitor, unit, *offset + g as i64, &record)?;
        }
        *offset += i64::try_from(shape.tracked()).unwrap_or(i64::MAX);
    }
    monitor.times_found(monitor.sample().into_iter().map(|at| {
        let o = at.offset;
        (at, (o, 1_758_335_000_000))
    }));
    Ok((busy, wanted_count))
}

/// A new commit of every group-partition, with a commit time of its own (`round`).
fn recommits(shape: Shape, round: i64) -> impl Iterator<Item = (i32, Encoded)> {
    use kshard_offsets::{OffsetCommitValue, Record};
    shape.each(shape.groups).map(move |(unit, group, topic, p, g)| {
        let value = OffsetCommitValue::new(3, i64::from(g) + round + 2, 1_758_335_260_726 + round * 5000);
        (unit, Record::offset_commit(&group, &topic, p, Some(value)).encode())
    })
}

fn bench_commit(group: &str, topic: &str, partition: i32, offset: i64) -> Encoded {
    use kshard_offsets::{OffsetCommitValue, Record};
    let value = OffsetCommitValue::new(3, offset, 1_758_335_260_726);
    Record::offset_commit(group, topic, partition, Some(value)).encode()
}
