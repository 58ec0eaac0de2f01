//! `kshard`: the one binary.
//!
//! - `kshard offsets decode`: decode one `__consumer_offsets` record to JSON;
//! - `kshard offsets dump`: read `__consumer_offsets` from a broker and print
//!   every record as JSON lines;
//! - `kshard loadgen`: write a realistic `__consumer_offsets` stream into a broker;
//! - `kshard serve`: the lag monitor.

mod bench;
mod loadgen;
mod offsets_dump;
mod offsets_json;
mod serve;
mod serve_config;

use std::io::Write;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use clap::{Parser, Subcommand};
use kshard_kafka::{Admin, CONSUMER_OFFSETS_TOPIC, RecordWriter, TopicSpec};

/// Kafka consumer-lag monitor and runtime for stateful, highly-available consumers.
#[derive(Debug, Parser)]
#[command(name = "kshard", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Measure kshard on a real broker (figures for the README).
    Bench {
        #[command(subcommand)]
        command: BenchCommand,
    },
    /// Run the lag monitor: read __consumer_offsets, export lag on /metrics,
    /// readiness on /ready, JSON on /api/groups and a web page on /.
    Serve {
        #[command(flatten)]
        args: Box<serve_config::ServeArgs>,
    },
    /// Work with `__consumer_offsets` records.
    Offsets {
        #[command(subcommand)]
        command: OffsetsCommand,
    },
    /// Write a realistic `__consumer_offsets` stream into a broker (creating the
    /// topic, 50 partitions and compacted, when it is missing).
    Loadgen {
        #[command(flatten)]
        brokers: serve_config::KafkaArgs,
        #[command(flatten)]
        shape: loadgen::LoadShape,
    },
}

#[derive(Debug, Subcommand)]
enum BenchCommand {
    /// Read __consumer_offsets to the end doing nothing else; prints the record count.
    Drain {
        #[command(flatten)]
        brokers: serve_config::KafkaArgs,
    },
    /// In one run on the same broker and data: the raw drain, then `kshard serve`
    /// to ready; time, CPU-seconds and peak RSS of each (medians).
    CatchUp {
        #[command(flatten)]
        brokers: serve_config::KafkaArgs,
        /// Runs of each.
        #[arg(long, default_value_t = 3)]
        runs: usize,
    },
    /// Memory per tracked group-partition and /metrics render time, without a broker.
    State {
        /// Groups.
        #[arg(long, default_value_t = 33_334)]
        groups: u32,
        /// Partitions per group.
        #[arg(long, default_value_t = 3)]
        partitions: u32,
        /// Distinct topics.
        #[arg(long, default_value_t = 1000)]
        topics: u32,
    },
}

#[derive(Debug, Subcommand)]
enum OffsetsCommand {
    /// Decode one record (key and value as hex) and print it as one JSON object.
    ///
    /// Exit status: 0 when decoded (an unknown record type included), 2 when the
    /// bytes are malformed.
    Decode {
        /// The record key, in hex.
        #[arg(long)]
        key: String,
        /// The record value, in hex; omit it for a tombstone (null value).
        #[arg(long)]
        value: Option<String>,
    },
    /// Read `__consumer_offsets` from the earliest offset to the end of every
    /// partition and print each record as a JSON line (with `log_partition` and
    /// `log_offset`; malformed records with `error`).
    Dump {
        #[command(flatten)]
        brokers: serve_config::KafkaArgs,
        /// Only these partitions (comma-separated); all by default.
        #[arg(long, value_delimiter = ',')]
        partitions: Vec<i32>,
    },
}

/// Exit status for input that could not be decoded (the same as a usage error).
const EXIT_MALFORMED: u8 = 2;

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Offsets { command: OffsetsCommand::Decode { key, value } } => return decode(&key, value.as_deref()),
        Command::Offsets { command: OffsetsCommand::Dump { brokers, partitions } } => dump(&brokers, &partitions),
        Command::Loadgen { brokers, shape } => run_loadgen(&brokers, &shape),
        Command::Serve { args } => serve::serve(&args),
        Command::Bench { command: BenchCommand::Drain { brokers } } => {
            brokers.settings().and_then(|s| bench::drain(&s)).map(|n| println!("{n}"))
        }
        Command::Bench { command: BenchCommand::CatchUp { brokers, runs } } => {
            brokers.settings().and_then(|s| bench::catch_up(&s.brokers, runs))
        }
        Command::Bench { command: BenchCommand::State { groups, partitions, topics } } => {
            bench::state(groups, partitions, topics)
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("kshard: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn decode(key: &str, value: Option<&str>) -> ExitCode {
    match offsets_json::decode_hex(key, value) {
        Ok(json) => match writeln!(std::io::stdout().lock(), "{json}") {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("kshard: writing the output failed: {e}");
                ExitCode::FAILURE
            }
        },
        Err(e) => {
            eprintln!("kshard: {e:#}");
            ExitCode::from(EXIT_MALFORMED)
        }
    }
}

fn dump(brokers: &serve_config::KafkaArgs, partitions: &[i32]) -> Result<()> {
    let settings = brokers.settings()?;
    let mut stdout = std::io::BufWriter::new(std::io::stdout().lock());
    let summary = offsets_dump::dump(&settings, partitions, &mut stdout)?;
    stdout.flush().context("writing the output")?;
    eprintln!("kshard: {} records, {} malformed", summary.records, summary.malformed);
    Ok(())
}

fn run_loadgen(brokers: &serve_config::KafkaArgs, shape: &loadgen::LoadShape) -> Result<()> {
    let settings = brokers.settings()?;
    let admin = Admin::new(&settings, Duration::from_secs(30))?;
    if admin.create_topic(&TopicSpec::consumer_offsets())? {
        eprintln!("kshard: created {CONSUMER_OFFSETS_TOPIC} (50 partitions, compacted)");
    }
    let partitions = admin
        .partition_count(CONSUMER_OFFSETS_TOPIC)?
        .with_context(|| format!("{CONSUMER_OFFSETS_TOPIC} is missing on {}", settings.brokers))?;
    let writer = RecordWriter::new(&settings)?;
    let per_partition = shape.records_per_topic_partition();
    if per_partition > 0 {
        let topics = shape.topic_names();
        for topic in &topics {
            let spec =
                TopicSpec { name: topic.clone(), partitions: shape.partitions as i32, replication: 1, configs: vec![] };
            admin.create_topic(&spec)?;
            for p in 0..shape.partitions as i32 {
                for i in 0..per_partition {
                    writer.send(topic, p, format!("key-{i}").as_bytes(), Some(b"loadgen"))?;
                }
            }
        }
        writer.flush(Duration::from_secs(300))?;
        eprintln!("kshard: produced {per_partition} records into each partition of {} topics", topics.len());
    }
    let started = Instant::now();
    let mut counts = std::collections::BTreeMap::new();
    let mut bytes = 0usize;
    for record in shape.records() {
        let partition = kshard_kafka::offsets_partition_for(&record.group, partitions);
        writer.send(CONSUMER_OFFSETS_TOPIC, partition, &record.key, record.value.as_deref())?;
        *counts.entry(record.kind).or_insert(0u64) += 1;
        bytes += record.key.len() + record.value.as_ref().map_or(0, Vec::len);
    }
    writer.flush(Duration::from_secs(300))?;
    for i in 0..shape.real_groups {
        let topics = shape.topic_names();
        let topic = &topics[i as usize % topics.len()];
        let group = format!("{}-real-group-{i:03}", shape.prefix);
        let member = kshard_kafka::GroupConsumer::new(&settings, &group, &[topic])?;
        // Each real group reads part of its topic, so that it has lag.
        let target = (per_partition as usize * shape.partitions as usize) / 2;
        let read = member.consume(target, Duration::from_secs(60))?;
        member.commit()?;
        eprintln!("kshard: real group {group} read {read} records of {topic} and committed");
    }
    let total: u64 = counts.values().sum();
    let secs = started.elapsed().as_secs_f64();
    eprintln!(
        "kshard: wrote {total} records ({:.1} MB) in {secs:.1} s ({:.0} records/s): {counts:?}",
        bytes as f64 / 1e6,
        total as f64 / secs.max(1e-9)
    );
    Ok(())
}
