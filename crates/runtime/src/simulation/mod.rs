//! Your application through faults, in simulation (feature `testing`):
//! [`Simulation`] runs it as a cluster of members over the embedded
//! keyspace and an in-memory log with Kafka's transactions, on a paused
//! tokio clock, through seeded schedules of faults — crashes (kill -9) and
//! restarts, orderly stops, pauses past the lease, a member cut off from the
//! keyspace, from the log or from its writes, the keyspace or the log down
//! for everyone, retention cutting a recovery log — while the input is
//! appended step by step. After every step, and in the middle of each
//! fault, it checks:
//! - at most one primary assignment per shard;
//! - every store on every member's disk is a state of its recovery log's
//!   one chain, and a replica serving holds all of that state;
//! - what a reader of committed records reads of the output topics is, for
//!   each key of each partition, the first records of what a run without
//!   faults published: none twice, none out of order;
//!
//! and once the faults heal and the whole input is in, that every shard's
//! one primary holds what the run without faults ended with, and the
//! outputs are that run's, record for record. A failure names its seed;
//! `KSHARD_SIM_SEED=N` runs that schedule alone, with logs as `RUST_LOG`
//! says (the faults are the seed's; how tokio interleaves tasks within a
//! step may differ between runs). `KSHARD_SIM_SCHEDULES` sets how many run.
//!
//! Outputs are compared per key, in the order Kafka keeps (a partition's):
//! an application whose one key gets records of one partition from two
//! shards, in no fixed order, sees a difference where there is none.
//!
//! ```
//! use kshard_runtime::simulation::{Input, Simulation};
//! use kshard_runtime::{AppError, Application, Message, OutRecord, RecoveryLog, ShardApp, ShardSpec, Source, Transaction};
//!
//! /// Counts each key's records, publishing every count.
//! struct Count;
//! impl Application for Count {
//!     fn shard(&self, _: &ShardSpec) -> Result<Box<dyn ShardApp>, AppError> {
//!         Ok(Box::new(Count))
//!     }
//! }
//! impl ShardApp for Count {
//!     fn consume(&mut self, txn: &mut Transaction<'_>, m: &Message<'_>) -> Result<(), AppError> {
//!         let key = m.key.unwrap_or_default();
//!         let n = txn.get(key)?.map_or(0, |v| v[0]) + 1;
//!         txn.put(key, [n]);
//!         txn.publish("counts", m.partition, OutRecord::new(Some(key), Some(&[n])));
//!         Ok(())
//!     }
//! }
//!
//! let shard = |p: i32| {
//!     let source = Source { topic: "in".into(), partition: p, min_offset: 0 };
//!     ShardSpec::new(format!("count-{p}"), vec![source], RecoveryLog { topic: "log".into(), partition: p })
//! };
//! let input = (0..40).map(|i| Input::new("in", i % 2, format!("k{}", i % 3), "x"));
//! let report = Simulation::new(Count, vec![shard(0), shard(1)])
//!     .input(input)
//!     .outputs(["counts"])
//!     .schedules(20)
//!     .run()
//!     .unwrap_or_else(|failed| panic!("{failed}"));
//! assert_eq!((report.schedules, report.outputs), (20, 40));
//! ```

mod failure;
mod reference;
mod schedule;
mod world;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::application::Application;
use crate::model::ShardSpec;
use failure::ScheduleFailure;

/// A record of the input, appended to `topic`/`partition` (a null key is
/// appended as an empty one).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Input {
    /// The topic.
    pub topic: String,
    /// The partition.
    pub partition: i32,
    /// The key.
    pub key: Option<Vec<u8>>,
    /// The value (`None`: null).
    pub value: Option<Vec<u8>>,
}

impl Input {
    /// A record of `key` and `value`.
    pub fn new(topic: &str, partition: i32, key: impl Into<Vec<u8>>, value: impl Into<Vec<u8>>) -> Self {
        Input { topic: topic.to_owned(), partition, key: Some(key.into()), value: Some(value.into()) }
    }
}

/// Committed output records by (topic, partition, key), each key's values in order.
pub(crate) type Outputs = BTreeMap<(String, i32, Option<Vec<u8>>), Vec<Option<Vec<u8>>>>;

/// A store's entries.
pub(crate) type Contents = BTreeMap<Vec<u8>, Vec<u8>>;

/// What the run without faults ended with: each shard's store, and the outputs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Reference {
    stores: Vec<Contents>,
    outputs: Outputs,
}

/// Makes the application of a member's process, each time one starts.
pub(crate) type MakeApp = Arc<dyn Fn() -> Arc<dyn Application> + Send + Sync>;

/// An application, its shards and its input, to run through faults.
pub struct Simulation {
    app: MakeApp,
    shards: Vec<ShardSpec>,
    input: Arc<[Input]>,
    outputs: Vec<String>,
    members: usize,
    schedules: u64,
}

impl std::fmt::Debug for Simulation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Simulation")
            .field("shards", &self.shards.len())
            .field("input", &self.input.len())
            .field("outputs", &self.outputs)
            .field("members", &self.members)
            .field("schedules", &self.schedules)
            .finish_non_exhaustive()
    }
}

/// The schedules run, all passed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Report {
    /// How many.
    pub schedules: u64,
    /// How long they took (the machine's time).
    pub elapsed: Duration,
    /// Records the run without faults published to the output topics:
    /// what every schedule was held to.
    pub outputs: usize,
}

/// The schedules that broke an invariant: (seed, why), and how many ran.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failed {
    /// Each failing schedule's seed and what it broke.
    pub failures: Vec<(u64, String)>,
    /// How many schedules ran.
    pub schedules: u64,
}

impl std::fmt::Display for Failed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} of {} schedules broke an invariant:", self.failures.len(), self.schedules)?;
        for (seed, why) in self.failures.iter().take(5) {
            write!(f, "\nKSHARD_SIM_SEED={seed}: {why}")?;
        }
        Ok(())
    }
}

impl std::error::Error for Failed {}

impl Simulation {
    /// `app` with `shards` (their hot standbys, transaction durations and
    /// snapshot settings as given), three members, 1,000 schedules. Every
    /// member of every schedule runs this one `app`: what it holds outside
    /// its shards' stores is shared by all of them, and outlives a crash.
    /// An application that keeps state of its own beside its stores (a
    /// cache, a view of every shard) is run with [`Simulation::per_process`].
    pub fn new(app: impl Application, shards: Vec<ShardSpec>) -> Self {
        let app: Arc<dyn Application> = Arc::new(app);
        Self::made(Arc::new(move || Arc::clone(&app)), shards)
    }

    /// [`Simulation::new`] with an application made by `make` each time a
    /// member's process starts, as a real process makes its own: what one
    /// holds in memory is its member's alone, and is lost when the member
    /// crashes or stops.
    pub fn per_process<A: Application>(make: impl Fn() -> A + Send + Sync + 'static, shards: Vec<ShardSpec>) -> Self {
        Self::made(Arc::new(move || Arc::new(make()) as Arc<dyn Application>), shards)
    }

    fn made(app: MakeApp, shards: Vec<ShardSpec>) -> Self {
        Simulation { app, shards, input: Arc::from([]), outputs: Vec::new(), members: 3, schedules: 1_000 }
    }

    /// The input, appended in order over each schedule's steps.
    #[must_use]
    pub fn input(mut self, records: impl IntoIterator<Item = Input>) -> Self {
        self.input = records.into_iter().collect();
        self
    }

    /// The topics the application publishes to, whose committed records are checked.
    #[must_use]
    pub fn outputs<S: Into<String>>(mut self, topics: impl IntoIterator<Item = S>) -> Self {
        self.outputs = topics.into_iter().map(Into::into).collect();
        self
    }

    /// Members in the cluster (at least 1).
    #[must_use]
    pub fn members(mut self, members: usize) -> Self {
        self.members = members.max(1);
        self
    }

    /// Schedules to run (`KSHARD_SIM_SCHEDULES` overrides it).
    #[must_use]
    pub fn schedules(mut self, schedules: u64) -> Self {
        self.schedules = schedules;
        self
    }

    /// Runs the schedules (seeds 1 to N, or `KSHARD_SIM_SEED` alone), on
    /// up to two threads, after the run without faults they are held to.
    pub fn run(&self) -> Result<Report, Failed> {
        let env = |name: &str| std::env::var(name).ok().and_then(|v| v.parse::<u64>().ok());
        let seeds: Vec<u64> = match env("KSHARD_SIM_SEED") {
            Some(seed) => vec![seed],
            None => (1..=env("KSHARD_SIM_SCHEDULES").unwrap_or(self.schedules)).collect(),
        };
        let started = Instant::now();
        let count = seeds.len() as u64;
        let reference = on_paused_clock(schedule::reference(self))
            .map_err(|why| Failed { failures: vec![(0, why.to_string())], schedules: count })?;
        let threads = std::thread::available_parallelism().map_or(2, |n| n.get()).min(2);
        let failures: Vec<(u64, String)> = std::thread::scope(|scope| {
            let workers: Vec<_> = (0..threads)
                .map(|t| {
                    let (seeds, reference) = (&seeds, &reference);
                    scope.spawn(move || {
                        seeds
                            .iter()
                            .skip(t)
                            .step_by(threads)
                            .filter_map(|&s| {
                                on_paused_clock(schedule::schedule(self, reference, s))
                                    .err()
                                    .map(|e| (s, e.to_string()))
                            })
                            .collect::<Vec<_>>()
                    })
                })
                .collect();
            workers
                .into_iter()
                .enumerate()
                .flat_map(|(t, w)| {
                    // A worker that panicked outside a schedule: its seeds unchecked, a failure.
                    w.join()
                        .unwrap_or_else(|_| vec![(0, format!("worker {t} panicked: its schedules did not all run"))])
                })
                .collect()
        });
        if failures.is_empty() {
            let outputs = reference.outputs.values().map(Vec::len).sum();
            Ok(Report { schedules: count, elapsed: started.elapsed(), outputs })
        } else {
            Err(Failed { failures, schedules: count })
        }
    }
}

/// Runs `run` on a tokio runtime of its own, its clock paused; a panic is
/// an error saying so.
fn on_paused_clock<T>(
    run: impl std::future::Future<Output = Result<T, ScheduleFailure>>,
) -> Result<T, ScheduleFailure> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .map_err(ScheduleFailure::Runtime)?;
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| runtime.block_on(run)));
    outcome.unwrap_or_else(|panic| {
        let what =
            panic.downcast_ref::<String>().cloned().or_else(|| panic.downcast_ref::<&str>().map(|s| (*s).to_owned()));
        Err(ScheduleFailure::Panicked(what.unwrap_or_default()))
    })
}
