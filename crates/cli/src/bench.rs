//! `kshard bench …`: figures for the README, measured on a real broker.
//!
//! - `bench drain`: read `__consumer_offsets` to its end doing nothing else —
//!   the broker's and the client's limit;
//! - `bench catch-up`: in one run on the same broker and data, the raw drain and
//!   `kshard serve` (each its own process): time to done/ready, CPU-seconds and
//!   peak RSS, medians over several runs;
//! - `bench state`: memory per tracked group-partition and `/metrics` render time.
//!
//! CPU and memory come from `/proc/<pid>/stat` (utime + stime, in USER_HZ = 100
//! ticks per second on Linux) and `/proc/<pid>/status` (`VmHWM`, the peak RSS).

use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::serve_config::{KafkaArgs, KafkaTarget};
use anyhow::{Context, Result, bail};
use kshard_kafka::{PartitionReader, ReadEvent};
use kshard_lag::{CatchUp, Metrics, Monitor, MonitorSettings, SelfTimings, Watermark, Watermarks};

/// CPU time and peak memory of a process, from `/proc`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ProcessStats {
    pub(crate) cpu_seconds: f64,
    pub(crate) peak_rss_mb: f64,
}

pub(crate) fn process_stats(pid: u32) -> Result<ProcessStats> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).context("reading /proc/PID/stat")?;
    // Fields after the command name (which is in parentheses and may hold spaces).
    let after = stat.rsplit_once(')').map(|(_, rest)| rest).context("malformed /proc/PID/stat")?;
    let fields: Vec<&str> = after.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of the whole line: 12 and 13 here.
    let ticks: f64 = fields.get(11).and_then(|s| s.parse::<f64>().ok()).unwrap_or(0.0)
        + fields.get(12).and_then(|s| s.parse::<f64>().ok()).unwrap_or(0.0);
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).context("reading /proc/PID/status")?;
    let hwm_kb: f64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0);
    Ok(ProcessStats { cpu_seconds: ticks / 100.0, peak_rss_mb: hwm_kb / 1024.0 })
}

/// Reads the offsets topic to the end of every partition, counting records.
/// With `apply`, every record is also applied to the lag monitor's state, as
/// `serve` does: the difference between the two is the cost of applying.
pub(crate) fn drain(target: &KafkaTarget, apply: bool) -> Result<u64> {
    let (settings, topic) = (&target.settings, target.offsets_topic.as_str());
    let (admin, count) = crate::offsets_topic(target)?;
    let partitions: Vec<(String, i32)> = (0..count).map(|p| (topic.to_owned(), p)).collect();
    let watermarks = admin.watermarks(&partitions)?;
    let mut catch_up = CatchUp::default();
    for key in &partitions {
        let (low, high) = watermarks.get(key).copied().unwrap_or((0, 0));
        catch_up.track(key.1, low, high);
    }
    catch_up.start();
    let start: Vec<(i32, Option<i64>)> = (0..count).map(|p| (p, None)).collect();
    let reader = PartitionReader::new(settings, topic, &start)?;
    let monitor = Monitor::new(MonitorSettings::default());
    let mut records = 0u64;
    while !catch_up.is_ready() {
        match reader.poll(Duration::from_millis(100)).map_err(|e| crate::explain(settings, e))? {
            ReadEvent::Record(r) => {
                records += 1;
                catch_up.on_record(r.partition(), r.offset());
                if apply {
                    // Malformed records are counted by the monitor; nothing to do here.
                    let _ = monitor.apply(r.partition(), r.offset(), r.key(), r.value());
                }
            }
            ReadEvent::EndOfPartition { partition, next_offset } => {
                catch_up.on_end_of_partition(partition, next_offset)
            }
            ReadEvent::Idle => {}
        }
    }
    Ok(records)
}

/// One measured run of a child process.
#[derive(Debug, Clone, Copy)]
struct Run {
    seconds: f64,
    stats: ProcessStats,
    records: u64,
}

pub(crate) fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    if v.is_empty() { 0.0 } else { v[v.len() / 2] }
}

/// Runs `kshard bench drain` as a child and measures it.
fn run_drain(kafka: &KafkaArgs) -> Result<Run> {
    let exe = std::env::current_exe()?;
    let started = Instant::now();
    let mut command = Command::new(exe);
    command.args(["bench", "drain"]);
    kafka.pass_to(&mut command);
    let mut child = command.stdout(Stdio::piped()).stderr(Stdio::inherit()).spawn().context("starting the drain")?;
    let pid = child.id();
    // Sample the stats just before the child exits: poll until it prints its result.
    let mut last = process_stats(pid)?;
    loop {
        if let Some(status) = child.try_wait()? {
            if !status.success() {
                bail!("the drain failed: {status}");
            }
            break;
        }
        // A process that has exited but not been reaped has no VmHWM any more:
        // keep the highest figures seen while it ran.
        if let Ok(s) = process_stats(pid) {
            last.cpu_seconds = last.cpu_seconds.max(s.cpu_seconds);
            last.peak_rss_mb = last.peak_rss_mb.max(s.peak_rss_mb);
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let seconds = started.elapsed().as_secs_f64();
    let mut out = String::new();
    std::io::Read::read_to_string(child.stdout.as_mut().context("drain stdout")?, &mut out)?;
    let records = out.trim().parse().with_context(|| format!("drain printed {out:?}"))?;
    Ok(Run { seconds, stats: last, records })
}

pub(crate) struct KillOnDrop(pub(crate) Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts `kshard serve` as a child, measures time to a 200 on `/ready`, and the
/// child's CPU and peak RSS at that moment.
fn run_serve(kafka: &KafkaArgs) -> Result<Run> {
    let port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
    let addr = format!("127.0.0.1:{port}");
    let exe = std::env::current_exe()?;
    let started = Instant::now();
    let mut command = Command::new(exe);
    command.args(["serve", "--listen", &addr]);
    kafka.pass_to(&mut command);
    let child = KillOnDrop(
        command
            .env("KSHARD_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .context("starting kshard serve")?,
    );
    let pid = child.0.id();
    loop {
        if started.elapsed() > Duration::from_secs(600) {
            bail!("kshard serve was not ready after 600 s");
        }
        if let Ok((200, body)) = http_get(&addr, "/ready") {
            let seconds = started.elapsed().as_secs_f64();
            let stats = process_stats(pid)?;
            let records = serde_json::from_str::<serde_json::Value>(&body)?["records"].as_u64().unwrap_or(0);
            return Ok(Run { seconds, stats, records });
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

pub(crate) fn http_get(addr: &str, path: &str) -> std::io::Result<(u16, String)> {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(addr)?;
    write!(stream, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n")?;
    let mut response = String::new();
    stream.read_to_string(&mut response)?;
    let status = response.split_whitespace().nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
    let body = response.split_once("\r\n\r\n").map(|(_, b)| b.to_owned()).unwrap_or_default();
    Ok((status, body))
}

/// `bench catch-up`: drain and serve, alternating, `runs` times each.
pub(crate) fn catch_up(kafka: &KafkaArgs, runs: usize) -> Result<()> {
    // Fail here, with the reason, rather than in a child.
    kafka.target()?;
    let mut drains = Vec::new();
    let mut serves = Vec::new();
    for i in 0..runs {
        let d = run_drain(kafka)?;
        eprintln!(
            "run {}: drain  {:>8} records in {:.2} s, {:.2} CPU-s, peak RSS {:.1} MB",
            i + 1,
            d.records,
            d.seconds,
            d.stats.cpu_seconds,
            d.stats.peak_rss_mb
        );
        let s = run_serve(kafka)?;
        eprintln!(
            "run {}: serve  {:>8} records in {:.2} s, {:.2} CPU-s, peak RSS {:.1} MB",
            i + 1,
            s.records,
            s.seconds,
            s.stats.cpu_seconds,
            s.stats.peak_rss_mb
        );
        drains.push(d);
        serves.push(s);
    }
    let records = serves.iter().map(|r| r.records).max().unwrap_or(0).max(1);
    let m = |runs: &[Run], f: fn(&Run) -> f64| median(runs.iter().map(f).collect());
    let (ds, ss) = (m(&drains, |r| r.seconds), m(&serves, |r| r.seconds));
    let (dc, sc) = (m(&drains, |r| r.stats.cpu_seconds), m(&serves, |r| r.stats.cpu_seconds));
    let (dr, sr) = (m(&drains, |r| r.stats.peak_rss_mb), m(&serves, |r| r.stats.peak_rss_mb));
    let per_million = |cpu: f64| cpu / records as f64 * 1e6;
    println!("records in __consumer_offsets: {records}");
    println!("medians over {runs} runs    time      CPU-s   CPU-s/M records  peak RSS");
    println!("raw drain             {ds:>7.2} s  {dc:>7.2}   {:>13.2}  {dr:>7.1} MB", per_million(dc));
    println!("kshard serve (ready)  {ss:>7.2} s  {sc:>7.2}   {:>13.2}  {sr:>7.1} MB", per_million(sc));
    println!("time to ready / raw drain: {:.2}", ss / ds.max(1e-9));
    Ok(())
}

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
    monitor.sweep_names();
    let tracked = u64::from(groups) * u64::from(partitions);
    monitor.set_watermarks(watermarks, true);
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
    println!("/metrics render: median {:.1} ms over 7 renders ({:.1} MB of text)", median(times), size as f64 / 1e6);
    Ok(())
}

fn bench_commit(group: &str, topic: &str, partition: i32, offset: i64) -> (Vec<u8>, Option<Vec<u8>>) {
    use kshard_offsets::{OffsetCommitValue, Record};
    let value = OffsetCommitValue::new(3, offset, 1_758_335_260_726);
    Record::offset_commit(group, topic, partition, Some(value)).encode()
}
