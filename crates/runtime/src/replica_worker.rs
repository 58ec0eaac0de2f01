//! The I/O of one replica, on a thread of its own (the Kafka clients block):
//! it opens the replica's store, plays the recovery log to its head and tails
//! it, and on command hands off, recovers and runs consumer transactions over
//! the shard's sources. It reports [`Event`]s to the replica's state machine
//! and takes its [`Command`]s; the state machine decides.
//!
//! The store is the replica's own file, `{data_dir}/{shard}.redb`: a replica
//! assigned again on the same member (a restart on its data directory) goes on
//! from the store's checkpoint and plays only what the log holds after it.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::mpsc::{Receiver, TryRecvError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use kshard_kafka::{Admin, ClientSettings, PartitionReader, ReadEvent, RecordWriter};

use crate::application::{Application, Message, Transaction};
use crate::metrics::Metrics;
use crate::model::ShardSpec;
use crate::recovery_log::kafka::{LogClients, LogError, commit, hand_off};
use crate::recovery_log::player::{Played, Player};
use crate::recovery_log::record::{Mutation, SourceOffset};
use crate::replica::Event;
use crate::store::{Checkpoint, RedbStore, Store, StoreError};

/// What the state machine tells the worker to do next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Command {
    AppendHandOff,
    OpenStore,
    StartSources,
    TearDown,
}

/// Where a replica stands in its log, for operators.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Progress {
    /// The next log offset the replica reads.
    pub next_offset: i64,
    /// The log's end when last asked.
    pub log_end: i64,
}

/// The replicas' progress on this member, by shard.
pub type ProgressMap = Arc<Mutex<BTreeMap<String, Progress>>>;

/// What a worker needs, shared by all the member's replicas.
pub(crate) struct WorkerContext {
    pub(crate) settings: ClientSettings,
    pub(crate) data_dir: PathBuf,
    pub(crate) app: Arc<dyn Application>,
    pub(crate) metrics: Arc<Metrics>,
    pub(crate) progress: ProgressMap,
    /// Store applies to fail on purpose, by shard (fault injection for tests).
    pub(crate) store_faults: BTreeMap<String, Arc<AtomicU32>>,
}

const KAFKA_TIMEOUT: Duration = Duration::from_secs(30);
/// How often a tailing replica asks where the log ends.
const END_EVERY: Duration = Duration::from_secs(1);

/// The replica's store: its redb file, failing on purpose when told to.
struct ReplicaStore {
    inner: RedbStore,
    faults: Option<Arc<AtomicU32>>,
}

impl Store for ReplicaStore {
    fn apply(&mut self, mutations: &[Mutation], checkpoint: &Checkpoint) -> Result<(), StoreError> {
        if let Some(left) = &self.faults
            && left.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1)).is_ok()
        {
            return Err(StoreError { step: "applying a transaction", message: "injected fault".into() });
        }
        self.inner.apply(mutations, checkpoint)
    }

    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>, StoreError> {
        self.inner.get(key)
    }

    fn checkpoint(&self) -> Result<Option<Checkpoint>, StoreError> {
        self.inner.checkpoint()
    }
}

/// Why a replica failed.
#[derive(Debug, thiserror::Error)]
enum ReplicaError {
    #[error(transparent)]
    Log(#[from] LogError),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("consuming {at}: {error}")]
    Application { at: String, error: String },
    #[error("the shard has no sources")]
    NoSources,
}

fn kafka(step: &'static str) -> impl FnOnce(kshard_kafka::Error) -> LogError {
    move |source| LogError::Kafka { step, source }
}

/// A fresh author id: unique per hand-off across processes and restarts.
fn random_author() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_nanos());
    h.write_u32(std::process::id());
    h.finish() | 1
}

/// Runs one replica's I/O until torn down; reports through `report`, the last
/// report being [`Event::TornDown`].
pub(crate) fn run(ctx: &WorkerContext, spec: &ShardSpec, commands: &Receiver<Command>, report: &dyn Fn(Event)) {
    if let Err(e) = serve(ctx, spec, commands, report) {
        tracing::error!(shard = %spec.id, error = %e, "replica failed");
        report(Event::Failed(e.to_string()));
    }
    ctx.progress.lock().unwrap_or_else(std::sync::PoisonError::into_inner).remove(&spec.id);
    report(Event::TornDown);
}

/// The clients of a replica's log.
struct LogIo {
    reader: PartitionReader,
    writer: RecordWriter,
    admin: Admin,
}

impl LogIo {
    fn clients<'a>(&'a self, spec: &'a ShardSpec) -> LogClients<'a> {
        LogClients {
            topic: &spec.recovery_log.topic,
            partition: spec.recovery_log.partition,
            reader: &self.reader,
            writer: &self.writer,
            admin: &self.admin,
        }
    }
}

/// The log, its clients and the player, with what a replica tracks of them.
struct Log<'a> {
    ctx: &'a WorkerContext,
    spec: &'a ShardSpec,
    io: LogIo,
    player: Player<ReplicaStore>,
    end: i64,
    end_asked: Option<Instant>,
}

impl<'a> Log<'a> {
    fn open(ctx: &'a WorkerContext, spec: &'a ShardSpec) -> Result<Self, ReplicaError> {
        std::fs::create_dir_all(&ctx.data_dir).map_err(|e| StoreError {
            step: "creating the data directory",
            message: format!("{}: {e}", ctx.data_dir.display()),
        })?;
        let store = ReplicaStore {
            inner: RedbStore::open(&ctx.data_dir.join(format!("{}.redb", spec.id)))?,
            faults: ctx.store_faults.get(&spec.id).cloned(),
        };
        let player = Player::open(store)?;
        let log = &spec.recovery_log;
        let reader = PartitionReader::new(&ctx.settings, &log.topic, &[(log.partition, Some(player.next_offset()))])
            .map_err(kafka("opening a reader"))?;
        let writer = RecordWriter::new(&ctx.settings).map_err(kafka("opening a writer"))?;
        let admin = Admin::new(&ctx.settings, KAFKA_TIMEOUT).map_err(kafka("opening an admin client"))?;
        Ok(Log { ctx, spec, io: LogIo { reader, writer, admin }, player, end: 0, end_asked: None })
    }

    /// Asks where the log ends when last asked long enough ago.
    fn refresh_end(&mut self, force: bool) -> Result<(), LogError> {
        if !force && self.end_asked.is_some_and(|t| t.elapsed() < END_EVERY) {
            return Ok(());
        }
        let key = (self.spec.recovery_log.topic.clone(), self.spec.recovery_log.partition);
        let marks = self.io.admin.watermarks(std::slice::from_ref(&key)).map_err(kafka("finding the end"))?;
        self.end = marks.get(&key).map_or(0, |(_, high)| *high);
        self.end_asked = Some(Instant::now());
        self.publish();
        Ok(())
    }

    fn publish(&self) {
        let next_offset = self.player.next_offset();
        let progress = Progress { next_offset, log_end: self.end.max(next_offset) };
        self.ctx.metrics.behind(&self.spec.id, progress.log_end - next_offset);
        self.ctx
            .progress
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(self.spec.id.clone(), progress);
    }

    /// Reads what arrives within `wait` and plays it.
    fn tail(&mut self, wait: Duration) -> Result<(), LogError> {
        let event = self.io.reader.poll(wait).map_err(kafka("reading"))?;
        if let ReadEvent::Record(r) = event {
            let offset = r.offset();
            let bytes = r.value().unwrap_or_default();
            let played = self.player.offer(offset, bytes)?;
            self.ctx.metrics.played(&self.spec.id, bytes.len());
            match played {
                Some(Played::Malformed(e)) => {
                    tracing::warn!(shard = %self.spec.id, offset, error = %e, "skipping a malformed recovery-log record");
                }
                Some(Played::Skipped(skip)) => {
                    tracing::info!(shard = %self.spec.id, offset, ?skip, "skipping a record off the chain (a fenced writer's)");
                }
                _ => {}
            }
        }
        self.refresh_end(false)
    }

    /// Plays to the end the log has now, watching for a tear-down.
    fn play_to_head(&mut self, commands: &Receiver<Command>) -> Result<bool, LogError> {
        self.refresh_end(true)?;
        while self.player.next_offset() < self.end {
            if torn_down(commands) {
                return Ok(false);
            }
            self.tail(Duration::from_millis(100))?;
        }
        self.publish();
        Ok(true)
    }
}

/// True when a tear-down was asked for (or the state machine is gone).
fn torn_down(commands: &Receiver<Command>) -> bool {
    matches!(commands.try_recv(), Ok(Command::TearDown) | Err(TryRecvError::Disconnected))
}

fn serve(
    ctx: &WorkerContext,
    spec: &ShardSpec,
    commands: &Receiver<Command>,
    report: &dyn Fn(Event),
) -> Result<(), ReplicaError> {
    let mut log = Log::open(ctx, spec)?;
    if !log.play_to_head(commands)? {
        return Ok(());
    }
    report(Event::PlayedToHead);
    let mut author = None;
    let mut sources: Option<Sources> = None;
    loop {
        match commands.try_recv() {
            Ok(Command::TearDown) | Err(TryRecvError::Disconnected) => return Ok(()),
            Ok(Command::AppendHandOff) => {
                let me = random_author();
                let attempts = hand_off(&log.io.clients(spec), &mut log.player, me, KAFKA_TIMEOUT)?;
                tracing::info!(shard = %spec.id, author = me, attempts, "took the recovery log over");
                author = Some(me);
                log.publish();
                report(Event::HandOffReadBack { ours: true });
            }
            // The store is the one playback filled; its checkpoint is the player's.
            Ok(Command::OpenStore) => report(Event::Recovered),
            Ok(Command::StartSources) => sources = Some(Sources::open(ctx, spec, log.player.offsets())?),
            Err(TryRecvError::Empty) => {}
        }
        match (&mut sources, author) {
            (Some(s), Some(author)) => s.transaction(&mut log, author)?,
            _ => log.tail(Duration::from_millis(100))?,
        }
    }
}

/// A primary's readers of its sources, and their next offsets.
struct Sources {
    reader: PartitionReader,
    next: BTreeMap<(String, i32), i64>,
}

impl Sources {
    /// Reads every source from its checkpointed offset (or its minimum offset).
    fn open(ctx: &WorkerContext, spec: &ShardSpec, checkpoint: &[SourceOffset]) -> Result<Self, ReplicaError> {
        let mut next = BTreeMap::new();
        for s in &spec.sources {
            let from = checkpoint
                .iter()
                .find(|c| c.topic == s.topic && c.partition == s.partition)
                .map_or(s.min_offset, |c| c.offset.max(s.min_offset));
            next.insert((s.topic.clone(), s.partition), from);
        }
        let mut by_topic: BTreeMap<&str, Vec<(i32, Option<i64>)>> = BTreeMap::new();
        for ((topic, partition), from) in &next {
            by_topic.entry(topic).or_default().push((*partition, Some(*from)));
        }
        let mut topics = by_topic.into_iter();
        let Some((first, start)) = topics.next() else {
            return Err(ReplicaError::NoSources);
        };
        let reader = PartitionReader::new(&ctx.settings, first, &start).map_err(kafka("opening a source reader"))?;
        for (topic, start) in topics {
            reader.add_partitions(topic, &start).map_err(kafka("opening a source reader"))?;
        }
        Ok(Sources { reader, next })
    }

    /// Runs one consumer transaction: takes messages for at least the shard's
    /// minimum transaction duration and at most its maximum (ending early once
    /// the minimum has passed and nothing more is ready), then commits them
    /// through the log. Nothing is committed when no message came.
    fn transaction(&mut self, log: &mut Log<'_>, author: u64) -> Result<(), ReplicaError> {
        let spec = log.spec;
        let (min, max) =
            (Duration::from_millis(spec.min_txn_duration_ms), Duration::from_millis(spec.max_txn_duration_ms.max(1)));
        let started = Instant::now();
        let mut txn = Transaction::new(log.player.store());
        loop {
            let elapsed = started.elapsed();
            if elapsed >= max {
                break;
            }
            let wait = (max - elapsed).min(Duration::from_millis(100));
            match self.reader.poll(wait).map_err(kafka("reading a source"))? {
                ReadEvent::Record(r) => {
                    let message = Message {
                        topic: r.topic(),
                        partition: r.partition(),
                        offset: r.offset(),
                        key: r.key(),
                        value: r.value(),
                    };
                    spec_consume(log.ctx, spec, &mut txn, &message)?;
                    self.next.insert((message.topic.to_owned(), message.partition), message.offset + 1);
                }
                ReadEvent::EndOfPartition { .. } | ReadEvent::Idle if elapsed >= min => break,
                ReadEvent::EndOfPartition { .. } | ReadEvent::Idle => {}
            }
        }
        let messages = txn.messages();
        if messages == 0 {
            return Ok(log.refresh_end(false)?);
        }
        let mutations = txn.into_mutations();
        let offsets = self
            .next
            .iter()
            .map(|((topic, partition), offset)| SourceOffset {
                topic: topic.clone(),
                partition: *partition,
                offset: *offset,
            })
            .collect();
        commit(&log.io.clients(spec), &mut log.player, author, mutations, offsets, KAFKA_TIMEOUT)?;
        log.ctx.metrics.transaction(&spec.id, messages);
        log.publish();
        Ok(())
    }
}

fn spec_consume(
    ctx: &WorkerContext,
    spec: &ShardSpec,
    txn: &mut Transaction<'_>,
    message: &Message<'_>,
) -> Result<(), ReplicaError> {
    ctx.app.consume(spec, txn, message).map_err(|error| ReplicaError::Application {
        at: format!("{}/{} offset {}", message.topic, message.partition, message.offset),
        error,
    })?;
    txn.count_message();
    Ok(())
}
