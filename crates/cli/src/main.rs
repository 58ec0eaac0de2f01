//! `kshard`: the one binary. It parses the command line and wires the
//! libraries together; the work is theirs.
//!
//! - `kshard serve`: the lag monitor (`serve.rs`, `serve_config.rs`; with
//!   `--etcd`, a member of a lag cluster, `cluster.rs`);
//! - `kshard lag`: every group's lag now, asked of the brokers (`lag.rs`);
//! - `kshard shards list|apply`: a runtime application's shards (`shards.rs`);
//! - `kshard example sum produce|run|verify`: the runtime's first
//!   application, streams summed exactly once (`example_sum/`), and words
//!   counted exactly once in two stages (`example_wordcount/`);
//! - `kshard offsets decode|dump`: `__consumer_offsets` records as JSON
//!   (`offsets_dump.rs`, `offsets_json.rs`);
//! - `kshard demo`: live demo groups of every kind (`demo.rs`);
//! - `kshard loadgen`: a realistic load of commits, or a synthetic offsets
//!   topic (`loadgen.rs`, `loadgen_write.rs`);
//! - `kshard bench …`: the README's figures (`bench/`).

mod bench;
mod cluster;
mod connection;
mod demo;
mod etcd_access;
mod example_sum;
mod example_wordcount;
mod lag;
mod loadgen;
mod loadgen_write;
mod member_identity;
mod objectives;
mod offsets_dump;
mod offsets_json;
mod process_runtime;
mod serve;
mod serve_clusters;
mod serve_config;
mod serve_end_to_end;
mod serve_notifiers;
mod serve_objectives;
mod serve_otlp;
#[cfg(test)]
mod settings_docs;
mod settings_file;
mod shards;
mod shards_file;

use std::io::Write;
use std::process::ExitCode;

use anyhow::{Context, Result};
use clap::{Parser, Subcommand};

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
    /// Applications of the runtime (shards with a primary and hot standbys).
    Example {
        #[command(subcommand)]
        command: Box<ExampleCommand>,
    },
    /// The Prometheus rule file of the configuration's lag objectives
    /// (recording rules and multi-window burn-rate alerts).
    Objectives {
        #[command(flatten)]
        args: objectives::ObjectivesArgs,
    },
    /// Every group's lag now (committed offset, end offset, lag, records
    /// lost, status per partition), asked of the brokers: a table or --json.
    Lag {
        #[command(flatten)]
        args: lag::LagArgs,
    },
    /// The shards of a runtime application, their replicas and status.
    Shards {
        #[command(subcommand)]
        command: shards::ShardsCommand,
    },
    /// Work with `__consumer_offsets` records.
    Offsets {
        #[command(subcommand)]
        command: OffsetsCommand,
    },
    /// Run live demo consumer groups of every kind (classic, KIP-848,
    /// transactional, stalled) with producers, until killed or for --seconds.
    Demo {
        #[command(flatten)]
        brokers: serve_config::KafkaArgs,
        /// Stop after this many seconds (default: run until killed).
        #[arg(long)]
        seconds: Option<u64>,
    },
    /// Write a realistic load into a broker: commits of many groups through the
    /// group coordinator (Kafka writes __consumer_offsets), or with
    /// `--offsets-topic` a synthetic stream of every record kind into that topic
    /// (created compacted when missing).
    Loadgen {
        #[command(flatten)]
        brokers: serve_config::KafkaArgs,
        #[command(flatten)]
        shape: loadgen::LoadShape,
        /// Partitions of a synthetic offsets topic loadgen creates.
        #[arg(long, default_value_t = 50)]
        offsets_partitions: i32,
    },
}

#[derive(Debug, Subcommand)]
enum ExampleCommand {
    /// Streams of increments summed exactly once: `produce`, `run` members,
    /// `verify` the sums.
    Sum {
        #[command(subcommand)]
        command: Box<example_sum::SumCommand>,
    },
    /// Words counted exactly once in two stages (split, then count):
    /// `produce` lines, `run` members, `verify` every count's update.
    Wordcount {
        #[command(subcommand)]
        command: Box<example_wordcount::WordCountCommand>,
    },
}

#[derive(Debug, Subcommand)]
enum BenchCommand {
    /// Read __consumer_offsets to the end doing nothing else; prints the record count.
    Drain {
        #[command(flatten)]
        brokers: serve_config::KafkaArgs,
        /// Also apply every record to the lag monitor's state, as serve does.
        #[arg(long)]
        apply: bool,
    },
    /// In one run on the same broker and data: the raw drain, then `kshard serve`
    /// to ready; time, CPU-seconds and peak RSS of each (medians).
    CatchUp {
        #[command(flatten)]
        brokers: serve_config::KafkaArgs,
        /// Runs of each.
        #[arg(long, default_value_t = 3)]
        runs: usize,
        /// A kminion binary (built from its source: see the README) to run
        /// beside kshard in the same run, in `offsetsTopic` mode, to its `/ready`.
        #[arg(long)]
        kminion: Option<std::path::PathBuf>,
    },
    /// A caught-up `kshard serve` (each reader): percent of a core over a
    /// window with `/metrics` scraped every few seconds, and one without.
    Idle {
        #[command(flatten)]
        brokers: serve_config::KafkaArgs,
        /// Seconds each window lasts.
        #[arg(long, default_value_t = 60)]
        seconds: u64,
        /// Seconds between scrapes.
        #[arg(long, default_value_t = 5)]
        scrape_seconds: u64,
    },
    /// KEDA's external scaler of a caught-up `kshard serve`: scaled objects
    /// polling IsActive and GetMetrics; latency p50/p99, and the Kafka
    /// requests sent with them beside an idle window.
    Keda {
        #[command(flatten)]
        brokers: serve_config::KafkaArgs,
        /// Scaled objects.
        #[arg(long, default_value_t = 1000)]
        objects: usize,
        /// Seconds between one object's polls (KEDA's pollingInterval).
        #[arg(long, default_value_t = 5)]
        interval: u64,
        /// Seconds each window lasts.
        #[arg(long, default_value_t = 60)]
        seconds: u64,
    },
    /// `serve --data-dir` on the offsets topic as it is: a cold start, then
    /// restarts after kill -9 on the data directory, next to the catch-up
    /// without one.
    Restart {
        #[command(flatten)]
        brokers: serve_config::KafkaArgs,
        /// Restarts.
        #[arg(long, default_value_t = 3)]
        runs: usize,
    },
    /// Three `serve --etcd` members on the offsets topic as it is; SIGKILL of
    /// the member holding the most primaries, timed until every shard is
    /// PRIMARY on a survivor (lag series counted meanwhile); medians.
    Failover {
        #[command(flatten)]
        brokers: serve_config::KafkaArgs,
        /// etcd endpoints.
        #[arg(long, env = "KSHARD_ETCD", value_delimiter = ',')]
        etcd: Vec<String>,
        /// Kills.
        #[arg(long, default_value_t = 3)]
        runs: usize,
        /// The members' lease, in seconds.
        #[arg(long, default_value_t = 10)]
        lease_ttl: u64,
    },
    /// The runtime beside Kafka Streams (with --streams-app), on the same
    /// broker and data: `example sum` and `example wordcount` at steady state
    /// (records/s, CPU-s per million, peak RSS, end-to-end latency), restart
    /// on kept state, and (with --etcd) fail-over after kill -9; medians.
    Runtime(Box<bench::runtime::RuntimeBench>),
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
        /// Render /metrics with this `max_partition_series` (default: all).
        #[arg(long)]
        max_partition_series: Option<usize>,
    },
    /// What lag in seconds costs on a real broker: one refresh's read of the
    /// records at N lagging partitions' committed offsets (N = topics ×
    /// partitions); wall time, CPU time and how many were answered (medians).
    RecordTimes {
        #[command(flatten)]
        brokers: serve_config::KafkaArgs,
        /// Topics created (once, reused).
        #[arg(long, default_value_t = 100)]
        topics: u32,
        /// Partitions per topic.
        #[arg(long, default_value_t = 100)]
        partitions: i32,
        /// The size of each record's value: 20 records of 1 byte make a
        /// partition one batch of 271 bytes; of 1,000 bytes, one of about 20 KB.
        #[arg(long, default_value_t = 1)]
        value_bytes: usize,
        /// Measured calls.
        #[arg(long, default_value_t = 5)]
        runs: usize,
        /// How long a round may wait for answers, in ms (the refresher's: 500).
        #[arg(long, default_value_t = 500)]
        round_ms: u64,
        /// Read through librdkafka even where serve would use kshard's own
        /// Fetch requests.
        #[arg(long)]
        librdkafka: bool,
        /// The broker's PID, to measure its CPU time too.
        #[arg(long)]
        broker_pid: Option<u32>,
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
        Command::Loadgen { brokers, shape, offsets_partitions } => {
            brokers.target().and_then(|t| loadgen_write::run(&t, &shape, offsets_partitions))
        }
        Command::Serve { args } => serve::serve(&args),
        Command::Example { command } => match *command {
            ExampleCommand::Sum { command } => example_sum::run(*command),
            ExampleCommand::Wordcount { command } => example_wordcount::run(*command),
        },
        Command::Shards { command } => shards::run(&command),
        Command::Lag { args } => lag::run(&args),
        Command::Objectives { args } => objectives::run(&args),
        Command::Demo { brokers, seconds } => brokers.target().and_then(|t| demo::run(&t.kafka, seconds)),
        Command::Bench { command: BenchCommand::Drain { brokers, apply } } => {
            brokers.target().and_then(|t| bench::drain::drain(&t, apply)).map(|n| println!("{n}"))
        }
        Command::Bench { command: BenchCommand::Restart { brokers, runs } } => bench::restart::restart(&brokers, runs),
        Command::Bench { command: BenchCommand::Failover { brokers, etcd, runs, lease_ttl } } => {
            bench::failover::failover(&bench::failover::FailoverBench { kafka: &brokers, etcd: &etcd, runs, lease_ttl })
        }
        Command::Bench { command: BenchCommand::Keda { brokers, objects, interval, seconds } } => {
            bench::keda::keda(&bench::keda::KedaBench { kafka: &brokers, objects, interval, seconds })
        }
        Command::Bench { command: BenchCommand::Idle { brokers, seconds, scrape_seconds } } => {
            bench::idle::idle(&bench::idle::IdleBench { kafka: &brokers, seconds, scrape_seconds })
        }
        Command::Bench { command: BenchCommand::CatchUp { brokers, runs, kminion } } => {
            bench::catch_up::catch_up(&brokers, runs, kminion.as_deref())
        }
        Command::Bench { command: BenchCommand::Runtime(bench) } => bench::runtime::runtime(&bench),
        Command::Bench { command: BenchCommand::State { groups, partitions, topics, max_partition_series } } => {
            bench::state::state(groups, partitions, topics, max_partition_series)
        }
        Command::Bench {
            command:
                BenchCommand::RecordTimes {
                    brokers,
                    topics,
                    partitions,
                    value_bytes,
                    runs,
                    round_ms,
                    librdkafka,
                    broker_pid,
                },
        } => bench::record_times::record_times(&bench::record_times::RecordTimesBench {
            kafka: &brokers,
            topics,
            partitions,
            value_bytes,
            runs,
            round: std::time::Duration::from_millis(round_ms),
            librdkafka,
            broker_pid,
        }),
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
    let target = brokers.target()?;
    let mut stdout = std::io::BufWriter::new(std::io::stdout().lock());
    let summary = offsets_dump::dump(&target, partitions, &mut stdout)?;
    stdout.flush().context("writing the output")?;
    eprintln!("kshard: {} records, {} malformed", summary.records, summary.malformed);
    Ok(())
}

/// An admin client that reached the brokers (or said why not), and the
/// partition count of the offsets topic.
pub(crate) fn offsets_topic(target: &serve_config::KafkaTarget) -> Result<(kshard_kafka::Admin, i32)> {
    let (kafka, topic) = (&target.kafka, target.offsets_topic.as_str());
    let admin = kshard_kafka::Admin::connect(kafka, std::time::Duration::from_secs(30))?;
    let count = admin
        .partition_count(topic)
        .map_err(|e| explain(kafka, e))?
        .with_context(|| format!("{topic} does not exist on {}", kafka.brokers()))?;
    Ok((admin, count))
}

/// A Kafka error with what the user can do about it: the ACLs behind an
/// authorization error, or the TLS or authentication failure behind a timeout
/// (librdkafka reports those only to its error callback).
pub(crate) fn explain(kafka: &kshard_kafka::Client, e: kshard_kafka::Error) -> anyhow::Error {
    if e.is_authorization() {
        anyhow::anyhow!(
            "{e}: this principal lacks an ACL; reading the offsets topic needs Describe and Read on it \
             (or use `kshard serve --scrape-mode admin_api`, which needs Describe on groups and topics only)"
        )
    } else {
        anyhow::anyhow!(kafka.with_access_problem(e))
    }
}
