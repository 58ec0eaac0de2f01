//! `kshard example sum produce|run|verify`: the runtime's first application
//! and its exactly-once check (see [`app`]).
//!
//! The source topic (default `kshard-sum`) has one shard per partition; shard
//! `sum-<p>` reads partition p and writes its recovery log to partition p of
//! `<topic>-log` (`cleanup.policy=delete`, unlimited retention: the runtime,
//! not the broker, decides what goes).

mod app;
mod produce;
mod verify;

pub(crate) use app::StreamSum;
pub(crate) use produce::{ExpectedFile, Increments, Rng, stream_index};

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use kshard_kafka::{Admin, Client, TopicSpec};
use kshard_runtime::{RecoveryLog, ShardSpec, Source};

use crate::cluster::{ClusterArgs, MemberRun, run_member};
use crate::serve_config::KafkaArgs;

/// The sum application's commands.
#[derive(Debug, clap::Subcommand)]
pub(crate) enum SumCommand {
    /// Write increments of many streams to the source topic and record the
    /// true sums in --expected (a later run goes on from that file).
    Produce {
        #[command(flatten)]
        kafka: KafkaArgs,
        #[command(flatten)]
        topic: TopicArgs,
        /// Streams (each with its own sequence and sum).
        #[arg(long, default_value_t = 100)]
        streams: u32,
        /// Records to write, over all streams.
        #[arg(long, default_value_t = 10_000)]
        records: u64,
        /// The file of true sums (JSON).
        #[arg(long)]
        expected: PathBuf,
    },
    /// Run a member of the application: its share of the shards, each a
    /// primary or a hot standby.
    Run {
        #[command(flatten)]
        kafka: KafkaArgs,
        #[command(flatten)]
        topic: TopicArgs,
        #[command(flatten)]
        cluster: ClusterArgs,
        #[command(flatten)]
        shard: ShardFlags,
    },
    /// Wait until the shards have consumed everything produced (read from
    /// their recovery logs), compare every stream's sum with --expected, and
    /// exit non-zero on any difference.
    Verify {
        #[command(flatten)]
        kafka: KafkaArgs,
        #[command(flatten)]
        topic: TopicArgs,
        #[command(flatten)]
        cluster: ClusterArgs,
        /// The file of true sums `produce` wrote.
        #[arg(long)]
        expected: PathBuf,
        /// Give up waiting for the shards after this many seconds.
        #[arg(long, default_value_t = 120)]
        timeout: u64,
        /// The recovery log was deleted since the sums were first published
        /// (an operator's act, not a fault): its record of what was
        /// published went with it, and the shards publish again as they read
        /// their sources from the start. Only the last sum published per
        /// stream is checked then.
        #[arg(long)]
        replayed_outputs: bool,
    },
}

/// How the application's shards are served (written into their specs when the
/// first member creates them).
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct ShardFlags {
    /// Standbys per shard besides the primary.
    #[arg(long, default_value_t = 1)]
    pub(crate) hot_standbys: u32,
    /// A transaction lasts at least this long (ms).
    #[arg(long, default_value_t = 0)]
    pub(crate) min_txn_ms: u64,
    /// and at most this long (ms).
    #[arg(long, default_value_t = 500)]
    pub(crate) max_txn_ms: u64,
    /// Snapshot a shard's store when the log written since its last snapshot
    /// exceeds this multiple of the snapshot's size …
    #[arg(long, default_value_t = 2)]
    pub(crate) snapshot_factor: u32,
    /// … and this many bytes.
    #[arg(long, default_value_t = 8 << 20)]
    pub(crate) snapshot_min_bytes: u64,
}

impl ShardFlags {
    /// Refuses flags no shard can run with, naming the flag.
    pub(crate) fn check(&self) -> Result<()> {
        if self.max_txn_ms == 0 || self.min_txn_ms > self.max_txn_ms {
            bail!("invalid max_txn_ms: must be at least 1 and at least min_txn_ms ({})", self.min_txn_ms);
        }
        if self.snapshot_factor == 0 {
            bail!("invalid snapshot_factor: at least 1");
        }
        Ok(())
    }

    /// `spec` served as these flags say, labelled `app`.
    pub(crate) fn apply(&self, app: &str, spec: ShardSpec) -> ShardSpec {
        ShardSpec {
            hot_standbys: self.hot_standbys,
            min_txn_duration_ms: self.min_txn_ms,
            max_txn_duration_ms: self.max_txn_ms,
            labels: [("app".to_owned(), app.to_owned())].into(),
            snapshot_factor: self.snapshot_factor,
            snapshot_min_bytes: self.snapshot_min_bytes,
            ..spec
        }
    }
}

/// The source topic.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct TopicArgs {
    /// The source topic (its recovery logs go to `<topic>-log`).
    #[arg(long, default_value = "kshard-sum")]
    pub(crate) topic: String,
    /// Partitions (= shards) when the topic is created.
    #[arg(long, default_value_t = 4)]
    pub(crate) partitions: i32,
}

impl TopicArgs {
    fn log_topic(&self) -> String {
        format!("{}-log", self.topic)
    }
}

pub(crate) const TIMEOUT: Duration = Duration::from_secs(30);

/// The shard of source partition `p`.
pub(crate) fn shard_id(p: i32) -> String {
    format!("sum-{p:03}")
}

/// Creates the source and log topics when missing; returns the source's
/// partition count.
fn ensure_topics(kafka: &Client, topic: &TopicArgs) -> Result<i32> {
    let admin = Admin::new(kafka, TIMEOUT).context("connecting to Kafka")?;
    let partitions = ensure_source(&admin, topic)?;
    kshard_runtime::partitions::ensure_log_topic(&admin, &topic.log_topic(), partitions, &[])?;
    // The sums: a partition per source partition, as durable as the log.
    kshard_runtime::partitions::ensure_output_topic(&admin, &app::sums_topic(&topic.topic), partitions)?;
    Ok(partitions)
}

/// Creates the source topic when missing; returns its partition count. All
/// a producer needs: the log topic is the members' (checking its
/// configuration asks DescribeConfigs of a broker that may be the one down).
fn ensure_source(admin: &Admin, topic: &TopicArgs) -> Result<i32> {
    if topic.partitions < 1 {
        bail!("invalid partitions: {} (at least 1)", topic.partitions);
    }
    // Created only when missing: a topic that exists is looked up on any
    // live broker, so that a broker down (the controller, say) stops no
    // producer or member from starting.
    if admin.partition_count(&topic.topic).context("looking up the source topic")?.is_none() {
        let source =
            TopicSpec { name: topic.topic.clone(), partitions: topic.partitions, replication: -1, configs: vec![] };
        admin.create_topic(&source).with_context(|| format!("creating {}", topic.topic))?;
    }
    let partitions = admin
        .partition_count(&topic.topic)
        .context("reading the source topic")?
        .with_context(|| format!("the topic {} does not exist", topic.topic))?;
    Ok(partitions)
}

fn shards(topic: &TopicArgs, partitions: i32, flags: &ShardFlags) -> Vec<ShardSpec> {
    (0..partitions)
        .map(|p| {
            flags.apply(
                "sum",
                ShardSpec::new(
                    shard_id(p),
                    vec![Source { topic: topic.topic.clone(), partition: p, min_offset: 0 }],
                    RecoveryLog { topic: topic.log_topic(), partition: p },
                ),
            )
        })
        .collect()
}

/// Runs one command.
pub(crate) fn run(command: SumCommand) -> Result<()> {
    match command {
        SumCommand::Produce { kafka, topic, streams, records, expected } => {
            let client = kafka.target()?.kafka;
            let admin = Admin::new(&client, TIMEOUT).context("connecting to Kafka")?;
            let partitions = ensure_source(&admin, &topic)?;
            produce::produce(&client, &topic.topic, partitions, streams, records, &expected)
        }
        SumCommand::Run { kafka, topic, cluster, shard } => {
            let _ = crate::serve::init_logging(crate::serve_config::LogFormat::Text);
            shard.check()?;
            let client = kafka.target()?.kafka;
            let partitions = ensure_topics(&client, &topic)?;
            let run = MemberRun {
                app_name: "sum",
                app: Arc::new(app::Sum { sums: app::sums_topic(&topic.topic) }),
                shards: shards(&topic, partitions, &shard),
                kafka: client,
            };
            run_member(&cluster, run)
        }
        SumCommand::Verify { kafka, topic, cluster: _, expected, timeout, replayed_outputs } => {
            let client = kafka.target()?.kafka;
            verify::verify(&client, &topic, &expected, Duration::from_secs(timeout), replayed_outputs)
        }
    }
}
