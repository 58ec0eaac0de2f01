//! `kshard example wordcount produce|run|verify`: words counted exactly
//! once, in two stages (see [`app`]), after Gazette's and Kafka Streams'
//! word counts.
//!
//! Topics, each of the lines topic's partition count P (default
//! `kshard-lines`, 4): the lines, `<topic>-words` (the repartition),
//! `<topic>-counts` (every count's update), and `<topic>-log` of 2P
//! partitions: `split-<p>` logs to p, `count-<p>` to P + p.

mod app;
mod check;

pub(crate) use app::decode_count;
pub(crate) use check::{Counts, Lines};

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use kshard_kafka::{Admin, Client, TopicSpec};
use kshard_runtime::{RecoveryLog, ShardSpec, Source};

use crate::cluster::{ClusterArgs, MemberRun, run_member};
use crate::example_sum::{ShardFlags, TIMEOUT};
use crate::serve_config::KafkaArgs;

/// The lines topic.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct LinesArgs {
    /// The lines topic (the others are named after it).
    #[arg(long, default_value = "kshard-lines")]
    topic: String,
    /// Partitions (of each topic; shards per stage) when the topics are created.
    #[arg(long, default_value_t = 4)]
    partitions: i32,
}

/// The word-count application's commands.
#[derive(Debug, clap::Subcommand)]
pub(crate) enum WordCountCommand {
    /// Write lines of random words to the lines topic and record the true
    /// counts in --expected (a later run goes on from that file).
    Produce {
        #[command(flatten)]
        kafka: KafkaArgs,
        #[command(flatten)]
        topic: LinesArgs,
        /// Words to draw from.
        #[arg(long, default_value_t = 500)]
        vocabulary: u32,
        /// Lines to write.
        #[arg(long, default_value_t = 10_000)]
        lines: u64,
        /// The file of true counts (JSON).
        #[arg(long)]
        expected: PathBuf,
    },
    /// Run a member: its share of both stages' shards, each a primary or a hot standby.
    Run {
        #[command(flatten)]
        kafka: KafkaArgs,
        #[command(flatten)]
        topic: LinesArgs,
        /// (Boxed: the largest variant by far.)
        #[command(flatten)]
        cluster: Box<ClusterArgs>,
        #[command(flatten)]
        shard: ShardFlags,
    },
    /// Read every count's update as a consumer of committed records, until
    /// each word reaches its true count: each update exactly once and in
    /// order, or a non-zero exit naming the first that is not.
    Verify {
        #[command(flatten)]
        kafka: KafkaArgs,
        #[command(flatten)]
        topic: LinesArgs,
        /// The file of true counts `produce` wrote.
        #[arg(long)]
        expected: PathBuf,
        /// Give up after this many seconds.
        #[arg(long, default_value_t = 120)]
        timeout: u64,
    },
}

/// Runs one command.
pub(crate) fn run(command: WordCountCommand) -> Result<()> {
    match command {
        WordCountCommand::Produce { kafka, topic, vocabulary, lines, expected } => {
            let client = kafka.target()?.kafka;
            let partitions = ensure_topics(&client, &topic, false)?;
            check::produce(&client, &topic.topic, partitions, vocabulary, lines, &expected)
        }
        WordCountCommand::Run { kafka, topic, cluster, shard } => {
            let _ = crate::serve::init_logging(crate::serve_config::LogFormat::Text);
            shard.check()?;
            let client = kafka.target()?.kafka;
            let partitions = ensure_topics(&client, &topic, true)?;
            let run = MemberRun {
                app_name: "wordcount",
                app: Arc::new(app::WordCount { topic: topic.topic.clone(), partitions }),
                shards: shards(&topic.topic, partitions, &shard),
                kafka: client,
            };
            run_member(&cluster, run)
        }
        WordCountCommand::Verify { kafka, topic, expected, timeout } => {
            let client = kafka.target()?.kafka;
            let partitions = ensure_topics(&client, &topic, false)?;
            check::verify(&client, &topic.topic, partitions, &expected, Duration::from_secs(timeout))
        }
    }
}

/// Creates the topics that are missing (the log's only for a member);
/// returns the lines topic's partition count.
fn ensure_topics(kafka: &Client, topic: &LinesArgs, log: bool) -> Result<i32> {
    if topic.partitions < 1 {
        bail!("invalid partitions: {} (at least 1)", topic.partitions);
    }
    let admin = Admin::new(kafka, TIMEOUT).context("connecting to Kafka")?;
    let made = |name: &str, partitions: i32| -> Result<i32> {
        if let Some(n) = admin.partition_count(name).with_context(|| format!("looking up {name}"))? {
            return Ok(n);
        }
        let spec = TopicSpec { name: name.to_owned(), partitions, replication: -1, configs: vec![] };
        admin.create_topic(&spec).with_context(|| format!("creating {name}"))?;
        admin.partition_count(name)?.with_context(|| format!("{name} does not exist"))
    };
    let partitions = made(&topic.topic, topic.partitions)?;
    // The outputs, as durable as the log (their records commit with its).
    for name in [app::words_topic(&topic.topic), app::counts_topic(&topic.topic)] {
        let n = kshard_runtime::partitions::ensure_output_topic(&admin, &name, partitions)?;
        if n != partitions {
            bail!("{name} has {n} partitions, the lines topic {partitions}: they must match");
        }
    }
    if log {
        kshard_runtime::partitions::ensure_log_topic(&admin, &format!("{}-log", topic.topic), 2 * partitions, &[])?;
    }
    Ok(partitions)
}

/// Both stages' shards.
fn shards(topic: &str, partitions: i32, flags: &ShardFlags) -> Vec<ShardSpec> {
    let log = format!("{topic}-log");
    let words = app::words_topic(topic);
    (0..partitions)
        .flat_map(|p| {
            let split = ShardSpec::new(
                format!("split-{p:03}"),
                vec![Source { topic: topic.to_owned(), partition: p, min_offset: 0 }],
                RecoveryLog { topic: log.clone(), partition: p },
            );
            let count = ShardSpec::new(
                format!("count-{p:03}"),
                vec![Source { topic: words.clone(), partition: p, min_offset: 0 }],
                RecoveryLog { topic: log.clone(), partition: partitions + p },
            );
            [flags.apply("wordcount", split), flags.apply("wordcount", count)]
        })
        .collect()
}

#[cfg(test)]
mod simulation {
    use kshard_runtime::simulation::{Input, Simulation};

    use super::*;
    use crate::example_sum::ShardFlags;

    /// Both stages through seeded schedules of faults (crashes, pauses past
    /// the lease, the keyspace or the log cut off or down, retention), two
    /// partitions of lines: after every step the words and every count's
    /// update are a prefix of a run without faults' (each key's, in order),
    /// and once healed every store and output is that run's.
    #[test]
    fn word_count_keeps_every_count_exact_through_a_thousand_schedules_of_faults() {
        let flags =
            ShardFlags { hot_standbys: 1, min_txn_ms: 0, max_txn_ms: 50, snapshot_factor: 2, snapshot_min_bytes: 300 };
        let mut lines = check::Lines::new(check::Counts::default(), 2, 12, 7).expect("a generator");
        let input: Vec<Input> = (0..24)
            .map(|_| {
                let (partition, line) = lines.next();
                Input { topic: "lines".into(), partition, key: None, value: Some(line.into_bytes()) }
            })
            .collect();
        let report =
            Simulation::new(app::WordCount { topic: "lines".into(), partitions: 2 }, shards("lines", 2, &flags))
                .input(input)
                .outputs([app::words_topic("lines"), app::counts_topic("lines")])
                .schedules(1_000)
                .run()
                .unwrap_or_else(|failed| panic!("{failed}"));
        let words: usize = lines.counts().counts.values().map(|&n| usize::try_from(n).unwrap_or(0)).sum();
        assert_eq!(report.outputs, 2 * words, "each word once to the words topic, each count once");
        eprintln!("{} schedules in {:.1} s", report.schedules, report.elapsed.as_secs_f64());
    }
}
