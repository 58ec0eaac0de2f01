//! `kshard bench record-times`: what lag in seconds costs on a real broker —
//! one refresh's read of the records at the committed offsets of N lagging
//! partitions (one [`FetchTimes`] call, or [`TimestampReader`] with
//! `--librdkafka`, as the refresher makes it, given 500 ms by default): wall
//! time, kshard's CPU time (`getrusage`), the broker's CPU time when its PID
//! is given, and how many of the N were answered. Topics named
//! `kshard-bench-times-…` are created and filled once and reused.

use kshard_kafka::TopicPartitionOffset;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use kshard_kafka::{Admin, FetchTimes, RecordWriter, TimestampReader, TopicPartition, TopicSpec};

use super::{median, own_cpu_seconds, process_stats, threads_cpu_seconds};
use crate::serve_config::KafkaArgs;

/// What to measure.
pub(crate) struct RecordTimesBench<'a> {
    pub(crate) kafka: &'a KafkaArgs,
    /// Topics of `partitions` partitions each: N = topics × partitions.
    pub(crate) topics: u32,
    pub(crate) partitions: i32,
    /// Each record's value size.
    pub(crate) value_bytes: usize,
    pub(crate) runs: usize,
    /// How long a round may wait for answers (the refresher's: 500 ms).
    pub(crate) round: Duration,
    /// Read through librdkafka even when kshard's own Fetch could be used.
    pub(crate) librdkafka: bool,
    /// The broker's process, to count its CPU time too.
    pub(crate) broker_pid: Option<u32>,
}

/// Records per partition; the committed offsets are spread over them.
const RECORDS: u32 = 20;

/// The benchmark's topics, each partition with its records (written once:
/// a later run finds them there), and their partitions.
fn prepared(b: &RecordTimesBench<'_>, kafka: &kshard_kafka::Client, admin: &Admin) -> Result<Vec<TopicPartition>> {
    let writer = RecordWriter::new(kafka)?;
    let values = if b.value_bytes == 1 { String::new() } else { format!("-v{}", b.value_bytes) };
    let names: Vec<String> =
        (0..b.topics).map(|t| format!("kshard-bench-times-{}x{}{values}-{t:04}", b.topics, b.partitions)).collect();
    let value = vec![b'v'; b.value_bytes];
    let started = Instant::now();
    for name in &names {
        let spec = TopicSpec { name: name.clone(), partitions: b.partitions, replication: 1, configs: vec![] };
        if admin.create_topic(&spec)? {
            for p in 0..b.partitions {
                for i in 0..RECORDS {
                    writer.send(name, p, format!("k{i}").as_bytes(), Some(&value))?;
                }
            }
        }
    }
    writer.flush(Duration::from_secs(300))?;
    let partitions: Vec<TopicPartition> =
        names.iter().flat_map(|t| (0..b.partitions).map(move |p| TopicPartition::new(t.clone(), p))).collect();
    let ends = admin.watermarks(&partitions)?;
    anyhow::ensure!(
        ends.values().all(|&(_, high)| high >= i64::from(RECORDS)),
        "some benchmark partitions hold fewer than {RECORDS} records"
    );
    eprintln!("{} partitions ready in {:.1} s", partitions.len(), started.elapsed().as_secs_f64());
    Ok(partitions)
}

pub(crate) fn record_times(b: &RecordTimesBench<'_>) -> Result<()> {
    let target = b.kafka.target()?;
    let admin = Admin::new(&target.kafka, Duration::from_secs(120))?;
    let partitions = prepared(b, &target.kafka, &admin)?;
    // Each partition's "committed offset" somewhere in its records.
    let wanted: Vec<TopicPartitionOffset> = partitions
        .iter()
        .enumerate()
        .map(|(i, tp)| TopicPartitionOffset::new(tp.topic.clone(), tp.partition, (i as i64 * 7) % i64::from(RECORDS)))
        .collect();
    // What `serve` uses: kshard's own Fetch where it can (PLAINTEXT, TLS, SASL PLAIN and SCRAM), librdkafka else.
    let fetch = if b.librdkafka { None } else { FetchTimes::new(&target.kafka)? };
    let reader = TimestampReader::new(&target.kafka)?;
    let which = if fetch.is_some() { "kshard's own Fetch requests" } else { "librdkafka" };
    let me = std::process::id();
    let (mut wall, mut cpu, mut system, mut broker_cpu, mut answered) = (vec![], vec![], vec![], vec![], vec![]);
    // The first call connects and learns the leaders: not counted.
    for run in 0..=b.runs {
        let cpu_before = own_cpu_seconds();
        let broker_before = b.broker_pid.map(threads_cpu_seconds).transpose()?;
        let t = Instant::now();
        let read = match &fetch {
            Some(fetch) => fetch.read(&wanted, b.round),
            None => reader.read(&wanted, b.round),
        }
        .context("reading record times")?;
        let elapsed = t.elapsed().as_secs_f64() * 1000.0;
        if run == 0 {
            continue;
        }
        wall.push(elapsed);
        let cpu_after = own_cpu_seconds();
        cpu.push((cpu_after.0 + cpu_after.1 - cpu_before.0 - cpu_before.1) * 1000.0);
        system.push((cpu_after.1 - cpu_before.1) * 1000.0);
        if let (Some(pid), Some(before)) = (b.broker_pid, broker_before) {
            broker_cpu.push((threads_cpu_seconds(pid)? - before) * 1000.0);
        }
        answered.push(read.found.len() as f64);
    }
    let n = wanted.len() as f64;
    let per_10k = |ms: f64| ms / (n / 10_000.0);
    println!(
        "lagging partitions: {} ({} topics × {} partitions, values of {} bytes), {} runs, read through {which}",
        wanted.len(),
        b.topics,
        b.partitions,
        b.value_bytes,
        b.runs
    );
    println!(
        "answered: median {:.0} of {} ({:.1}%) in one call",
        median(answered.clone()),
        wanted.len(),
        100.0 * median(answered) / n
    );
    println!(
        "wall time: median {:.0} ms ({:.0} ms per 10,000 partitions)",
        median(wall.clone()),
        per_10k(median(wall))
    );
    println!(
        "kshard CPU: median {:.1} ms ({:.1} ms per 10,000 partitions), of which the kernel's {:.1} ms",
        median(cpu.clone()),
        per_10k(median(cpu)),
        median(system)
    );
    println!("kshard peak RSS: {:.0} MB", process_stats(me)?.peak_rss_mb);
    if !broker_cpu.is_empty() {
        println!(
            "broker CPU: median {:.0} ms ({:.0} ms per 10,000 partitions)",
            median(broker_cpu.clone()),
            per_10k(median(broker_cpu))
        );
    }
    Ok(())
}
