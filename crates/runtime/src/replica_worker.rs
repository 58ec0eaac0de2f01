//! The I/O of one replica, as an async task of the member's runtime (a
//! member with hundreds of replicas runs them on a few threads, and a
//! replica with nothing to read costs nothing until its reader says it is
//! readable): it opens the replica's store, plays the recovery log to its
//! head and tails it, and on command hands off, recovers and runs consumer
//! transactions over the shard's sources. It reports [`Event`]s to the
//! replica's state machine and takes its [`Command`]s; the state machine
//! decides. Every wait is on tokio's clock. The store's writes (redb) and
//! the application's callbacks run on the task: they are short and do not
//! wait on the network.
//!
//! The store is the replica's own, named `{shard}@{log topic}-{log
//! partition}` on the member's [`Disk`] (a redb file in its data directory): a replica assigned again on the same member (a restart on
//! its data directory) goes on from the store's checkpoint and plays only what
//! the log holds after it — unless a newer snapshot is closer, or the log no
//! longer holds what follows the checkpoint (see [`crate::recovery_log::replica`]).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::sync::mpsc::UnboundedReceiver;
use tokio::sync::mpsc::error::TryRecvError;
use tokio::time::Instant;

use crate::application::{Application, Message, OutRecord, ShardApp, Transaction};
use crate::disk::Disk;
use crate::metrics::Metrics;
use crate::model::Refusals;
use crate::model::ShardSpec;
use crate::partitions::{PartitionRead, Partitions, Polled, next_event};
use crate::recovery_log::io::hand_off;
use crate::recovery_log::policy::{self, Timing};
use crate::recovery_log::record::SourceOffset;
use crate::recovery_log::replica::{Done, HintBoard, InFlight, KAFKA_TIMEOUT, Log, ReplicaError, kafka};
use crate::replica::Event;

/// What the state machine tells the worker to do next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Command {
    AppendHandOff,
    Follow,
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
    /// When the replica last said so (every second at least while it
    /// tails): an old one is a replica stuck somewhere.
    #[serde(skip)]
    pub published: Option<std::time::Instant>,
    /// When the replica last applied a record of its log. A primary commits
    /// about every [`policy::HEARTBEAT`] while it runs (an empty transaction when
    /// its sources are idle), so this is the age of the state served here,
    /// and an old one means the primary is gone or stuck — seen before its
    /// lease runs out.
    #[serde(skip)]
    pub applied: Option<std::time::Instant>,
}

impl Progress {
    /// Records between the replica's position and its log's end.
    pub fn behind(&self) -> i64 {
        self.log_end.saturating_sub(self.next_offset)
    }
}

/// The replicas' progress on this member, by shard.
pub type ProgressMap = Arc<Mutex<BTreeMap<String, Progress>>>;

/// What a worker needs, shared by all the member's replicas.
pub(crate) struct WorkerContext {
    /// Where the recovery logs are and the sources come from (Kafka, or
    /// memory), shared by the member's replicas.
    pub(crate) partitions: Arc<dyn Partitions>,
    /// Where the replicas' stores are.
    pub(crate) disk: Arc<dyn Disk>,
    pub(crate) app: Arc<dyn Application>,
    pub(crate) metrics: Arc<Metrics>,
    pub(crate) progress: ProgressMap,
    /// The replicas' store views, for readers.
    pub(crate) views: crate::node::StoreViewsMap,
    /// The shards' hints.
    pub(crate) hints: Arc<dyn HintBoard>,
}

/// The fetch queue of each replica's readers (its log's, and a primary's
/// sources'): a member runs two per shard it is primary of, one per standby.
pub(crate) const READER_QUEUE_KBYTES: u32 = 256;

/// A fresh author id: unique per hand-off across processes and restarts.
fn random_author() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_nanos());
    h.write_u32(std::process::id());
    h.finish() | 1
}

/// How long an idle replica waits before it publishes its progress again.
const IDLE_WAIT: Duration = Duration::from_secs(1);

/// Where a replica's reports go.
pub(crate) type Report = Arc<dyn Fn(Event) + Send + Sync>;

/// Runs one replica's I/O as a task until torn down; reports through
/// `report`, the last report being [`Event::TornDown`].
pub(crate) fn spawn(ctx: Arc<WorkerContext>, spec: ShardSpec, commands: UnboundedReceiver<Command>, report: Report) {
    tokio::spawn(async move {
        // The replica's own task, so that one that panics (an application's
        // panic) fails its replica, like one that returns an error.
        let (c, s, r) = (Arc::clone(&ctx), spec.clone(), Arc::clone(&report));
        let served = tokio::spawn(async move { serve(&c, &s, commands, &*r).await }).await;
        let failure = match served {
            Ok(Ok(())) => None,
            Ok(Err(e)) => Some(e.to_string()),
            Err(e) => match e.try_into_panic() {
                Ok(panic) => {
                    let what = panic
                        .downcast_ref::<&str>()
                        .map(|s| (*s).to_owned())
                        .or_else(|| panic.downcast_ref::<String>().cloned())
                        .unwrap_or_default();
                    Some(format!("panicked: {what}"))
                }
                Err(e) => Some(format!("its task ended: {e}")),
            },
        };
        if let Some(e) = failure {
            tracing::error!(shard = %spec.id, error = %e, "replica failed");
            report(Event::Failed(e));
        }
        ctx.progress.lock().unwrap_or_else(std::sync::PoisonError::into_inner).remove(&spec.id);
        report(Event::TornDown);
    });
}

/// True when a tear-down was asked for (or the state machine is gone).
fn torn_down(commands: &mut UnboundedReceiver<Command>) -> bool {
    matches!(commands.try_recv(), Ok(Command::TearDown) | Err(TryRecvError::Disconnected))
}

async fn serve(
    ctx: &WorkerContext,
    spec: &ShardSpec,
    commands: UnboundedReceiver<Command>,
    report: &(dyn Fn(Event) + Send + Sync),
) -> Result<(), ReplicaError> {
    let mut log = Log::open(ctx, spec).await?;
    // Readers view the store from here on (a store replaced later, played
    // again from a snapshot, is the same store to them).
    let views = log.player.store().views();
    if let Some(v) = &views {
        ctx.views.insert(&spec.id, Arc::clone(v));
    }
    let served = run(ctx, spec, &mut log, commands, report).await;
    if let Some(v) = &views {
        ctx.views.remove(&spec.id, v);
    }
    log.app.get_mut().unwrap_or_else(PoisonError::into_inner).stopped();
    served
}

/// The replica's life once its log is open (see [`serve`]).
async fn run(
    ctx: &WorkerContext,
    spec: &ShardSpec,
    log: &mut Log<'_>,
    mut commands: UnboundedReceiver<Command>,
    report: &(dyn Fn(Event) + Send + Sync),
) -> Result<(), ReplicaError> {
    if !log.play_to_head(|| torn_down(&mut commands)).await? {
        return Ok(());
    }
    report(Event::PlayedToHead);
    let mut author = None;
    let mut sources: Option<Sources> = None;
    // A command taken while waiting, handled first.
    let mut taken: Option<Command> = None;
    loop {
        let command = match taken.take() {
            Some(c) => Ok(c),
            None => commands.try_recv(),
        };
        match command {
            // The transaction in flight is committed and in the store first.
            Ok(Command::TearDown) | Err(TryRecvError::Disconnected) => return log.finish_commit().await,
            Ok(Command::Follow) => {
                let app = log.app.get_mut().unwrap_or_else(PoisonError::into_inner);
                app.following(log.player.store(), log.player.offsets()).map_err(|error| ReplicaError::Application {
                    at: "following the shard as a standby".into(),
                    error,
                })?;
                log.follow = true;
            }
            Ok(Command::AppendHandOff) => {
                // What is played from here on is read back as the primary's.
                log.follow = false;
                let me = random_author();
                log.io.fence(spec).await?;
                let attempts = hand_off(&log.io.clients(spec), &mut log.player, me, KAFKA_TIMEOUT).await?;
                log.mark_applied();
                tracing::info!(shard = %spec.id, author = me, attempts, "took the recovery log over");
                author = Some(me);
                log.refresh_hint().await;
                log.publish();
                report(Event::HandedOff);
            }
            // The store is the one playback filled; its checkpoint is the player's.
            Ok(Command::OpenStore) => {
                let app = log.app.get_mut().unwrap_or_else(PoisonError::into_inner);
                app.recovered(log.player.store(), log.player.offsets()).map_err(|error| ReplicaError::Application {
                    at: "recovering the application's state".into(),
                    error,
                })?;
                report(Event::Recovered);
            }
            Ok(Command::StartSources) => {
                log.follow = false;
                sources = Some(Sources::open(ctx, spec, log.player.offsets())?);
            }
            Err(TryRecvError::Empty) => {}
        }
        // Wait for records or a command; a command ends the wait (the
        // waits are cancel-safe), never a transaction or a record's play.
        match (&mut sources, author) {
            (Some(s), Some(author)) => {
                if s.drained {
                    // Nothing to take meanwhile: the last commit is waited for now.
                    log.finish_commit().await?;
                    tokio::select! {
                        command = commands.recv() => {
                            taken = Some(command.unwrap_or(Command::TearDown));
                            continue;
                        }
                        _ = tokio::time::timeout(IDLE_WAIT, s.reader.readable()) => {}
                    }
                }
                s.transaction(log, author).await?;
            }
            _ => tokio::select! {
                command = commands.recv() => taken = Some(command.unwrap_or(Command::TearDown)),
                tailed = log.tail(IDLE_WAIT) => tailed?,
            },
        }
    }
}

/// A primary's readers of its sources, and their next offsets (topic →
/// partition → offset: looked up per message without allocating).
struct Sources {
    reader: Box<dyn PartitionRead>,
    next: BTreeMap<String, BTreeMap<i32, i64>>,
    /// The last transaction read everything the reader had: the next one
    /// waits until it is readable.
    drained: bool,
    /// When the last transaction was committed (or the sources opened).
    committed: Instant,
}

impl Sources {
    /// Reads every source from its checkpointed offset (or its minimum offset).
    fn open(ctx: &WorkerContext, spec: &ShardSpec, checkpoint: &[SourceOffset]) -> Result<Self, ReplicaError> {
        let mut next: BTreeMap<String, BTreeMap<i32, i64>> = BTreeMap::new();
        for s in &spec.sources {
            let from = checkpoint
                .iter()
                .find(|c| c.topic == s.topic && c.partition == s.partition)
                .map_or(s.min_offset, |c| c.offset.max(s.min_offset));
            next.entry(s.topic.clone()).or_default().insert(s.partition, from);
        }
        let mut topics = next.iter();
        let Some((first, start)) = topics.next() else {
            return Err(ReplicaError::NoSources);
        };
        let from = |partitions: &BTreeMap<i32, i64>| -> Vec<(i32, Option<i64>)> {
            partitions.iter().map(|(p, o)| (*p, Some(*o))).collect()
        };
        let reader = ctx
            .partitions
            .reader(first, &from(start), READER_QUEUE_KBYTES, ctx.app.isolation())
            .map_err(kafka("opening a source reader"))?;
        for (topic, start) in topics {
            reader.add_partitions(topic, &from(start)).map_err(kafka("opening a source reader"))?;
        }
        Ok(Sources { reader, next, drained: false, committed: Instant::now() })
    }

    /// Every source's next offset.
    fn offsets(&self) -> Vec<SourceOffset> {
        self.next
            .iter()
            .flat_map(|(topic, partitions)| {
                partitions.iter().map(|(partition, offset)| SourceOffset {
                    topic: topic.clone(),
                    partition: *partition,
                    offset: *offset,
                })
            })
            .collect()
    }

    /// Runs one consumer transaction: takes messages for at least the shard's
    /// minimum transaction duration and at most its maximum (ending early once
    /// the minimum has passed and nothing more is ready), then commits them
    /// through the log. Nothing is committed when no message came and no
    /// source position moved, unless the last commit is a [`policy::HEARTBEAT`] old.
    async fn transaction(&mut self, log: &mut Log<'_>, author: u64) -> Result<(), ReplicaError> {
        let spec = log.spec;
        let timing = Timing::of(spec);
        let started = Instant::now();
        // Over the transaction before, while Kafka commits it.
        let mut txn = Transaction::over(log.player.store(), log.in_flight.as_ref().map(|f| &f.overlay));
        let app = log.app.get_mut().unwrap_or_else(PoisonError::into_inner);
        let mut moved = false;
        let mut refused = Refused::default();
        // A message for an application that awaits, taken out of the reader.
        let mut awaiting: Option<OwnedMessage> = None;
        // Begun at the first message: a heartbeat is no transaction of the application's.
        let mut begun = false;
        self.drained = false;
        // The transaction's age, as last read (see `policy::ClockReads`).
        let (mut elapsed, mut clock) = (Duration::ZERO, policy::ClockReads::default());
        loop {
            if clock.due() {
                elapsed = started.elapsed();
                clock.read(elapsed);
            }
            let committing = log.in_flight.as_ref().is_some_and(InFlight::committing);
            let Some(wait) = timing.before_poll(elapsed, committing) else { break };
            let polled = match next_event(self.reader.as_ref(), wait).await.map_err(kafka("reading a source"))? {
                Polled::Record(r) => {
                    // Not a source, or before the position (a re-read after a
                    // reset): taking it would count a message twice.
                    let next = self.next.get_mut(r.topic()).and_then(|p| p.get_mut(&r.partition()));
                    // (Counted as one taken for the clock: a long re-read
                    // reads it too.)
                    let Some(next) = next else {
                        clock.polled(policy::Polled::Message { bytes: 0 });
                        continue;
                    };
                    if r.offset() < *next {
                        clock.polled(policy::Polled::Message { bytes: 0 });
                        continue;
                    }
                    *next = r.offset() + 1;
                    if !begun {
                        app.begin(&mut txn).map_err(application("beginning a transaction"))?;
                        begun = true;
                    }
                    if app.awaits() {
                        // Owned, and awaited below once the record's borrow
                        // of the reader is gone.
                        awaiting = Some(OwnedMessage::of(&r));
                    } else {
                        let headers = r.headers();
                        let (timestamp_ms, log_append_time) = r.timestamp();
                        let message = Message {
                            topic: r.topic(),
                            partition: r.partition(),
                            offset: r.offset(),
                            timestamp_ms,
                            log_append_time,
                            headers: &headers,
                            key: r.key(),
                            value: r.value(),
                            transactional: r.transactional(),
                        };
                        txn.count_message();
                        consume_now(app.as_mut(), spec, &mut txn, &message, &mut refused)?;
                    }
                    policy::Polled::Message { bytes: txn.bytes() }
                }
                Polled::EndOfPartition { partition, next_offset } => {
                    // The event names the partition only: a number two source
                    // topics share cannot be told apart, and moves nothing.
                    let mut candidates = spec.sources.iter().filter(|s| s.partition == partition);
                    let topic = match (candidates.next(), candidates.next()) {
                        (Some(s), None) => Some(s.topic.as_str()),
                        _ => None,
                    };
                    if let Some(topic) = topic {
                        // Past the last message there may be transaction
                        // markers, never delivered: the position moves past
                        // them, and is committed (replicas, and the next
                        // primary, then know the source was read to its end).
                        let next = self.next.get_mut(topic).and_then(|p| p.get_mut(&partition));
                        if let (Some(next), Some(end)) = (next, next_offset)
                            && end > *next
                        {
                            *next = end;
                            moved = true;
                        }
                        app.end_of_source(topic, partition, next_offset);
                    }
                    policy::Polled::EndOfSource
                }
                Polled::Idle => policy::Polled::Idle,
            };
            if let Some(owned) = awaiting.take() {
                let headers = owned.headers();
                let message = owned.message(&headers);
                txn.count_message();
                consume(app.as_mut(), spec, &mut txn, &message, &mut refused).await?;
            }
            let polled = match polled {
                policy::Polled::Message { .. } => policy::Polled::Message { bytes: txn.bytes() },
                other => other,
            };
            clock.polled(polled);
            if let Some(end) = timing.after_poll(elapsed, polled, committing) {
                self.drained = end.drained;
                break;
            }
        }
        if begun {
            app.finalize(&mut txn).map_err(application("finalizing a transaction"))?;
        }
        let messages = txn.messages();
        if !policy::commits(messages, moved, self.committed.elapsed()) {
            return log.refresh_end(false).await;
        }
        let (mutations, outputs) = txn.into_parts();
        let offsets = self.offsets();
        let done = Done {
            begun: begun.then(|| offsets.clone()),
            messages,
            moved,
            refused: (refused.skipped, refused.dead_lettered),
        };
        // Committed while the next transaction is taken (the one before it
        // is committed and in the store first).
        log.start_commit(author, (mutations, offsets), outputs, done).await?;
        self.committed = Instant::now();
        if log.snapshot_due() {
            log.snapshot(author, &self.offsets()).await?;
        }
        log.publish();
        Ok(())
    }
}

/// Messages a transaction refused, by what became of them.
#[derive(Debug, Default)]
struct Refused {
    skipped: u64,
    dead_lettered: u64,
}

/// An application's error at `at`, failing the replica.
fn application(at: &'static str) -> impl FnOnce(crate::application::AppError) -> ReplicaError {
    move |error| ReplicaError::Application { at: at.to_owned(), error }
}

/// Where a message is, for errors and logs.
fn at(message: &Message<'_>) -> String {
    format!("{}/{} offset {}", message.topic, message.partition, message.offset)
}

/// Takes `message` into `txn` through the application's `consume`,
/// handling a refusal as the shard's policy says.
fn consume_now(
    app: &mut dyn ShardApp,
    spec: &ShardSpec,
    txn: &mut Transaction<'_>,
    message: &Message<'_>,
    refused: &mut Refused,
) -> Result<(), ReplicaError> {
    mark_undoable(spec, txn);
    let consumed = app.consume(txn, message);
    settle(spec, txn, message, consumed, refused)
}

/// [`consume_now`] through the application's `consume_async`, awaited.
async fn consume(
    app: &mut dyn ShardApp,
    spec: &ShardSpec,
    txn: &mut Transaction<'_>,
    message: &Message<'_>,
    refused: &mut Refused,
) -> Result<(), ReplicaError> {
    mark_undoable(spec, txn);
    let consumed = app.consume_async(txn, message).await;
    settle(spec, txn, message, consumed, refused)
}

/// Keeps what the next message changes, so that a refusal can undo it —
/// only where a refusal is not the replica's end.
fn mark_undoable(spec: &ShardSpec, txn: &mut Transaction<'_>) {
    if spec.refusals != Refusals::Fail {
        txn.mark();
    }
}

/// What the application's answer to `message` makes of it: taken, refused
/// (undone, then skipped or dead-lettered), or the replica's failure.
fn settle(
    spec: &ShardSpec,
    txn: &mut Transaction<'_>,
    message: &Message<'_>,
    consumed: Result<(), crate::application::AppError>,
    refused: &mut Refused,
) -> Result<(), ReplicaError> {
    let error = match consumed {
        Ok(()) => return Ok(()),
        Err(error) => error,
    };
    match &spec.refusals {
        _ if !error.is_refusal() => Err(ReplicaError::Application { at: at(message), error }),
        Refusals::Fail => Err(ReplicaError::Application { at: format!("{} (refused)", at(message)), error }),
        Refusals::Skip => {
            txn.undo();
            tracing::warn!(shard = %spec.id, topic = message.topic, partition = message.partition, offset = message.offset, reason = %error, "skipping a message the application refused");
            refused.skipped += 1;
            Ok(())
        }
        Refusals::DeadLetter { topic, partition } => {
            txn.undo();
            tracing::warn!(shard = %spec.id, topic = message.topic, partition = message.partition, offset = message.offset, reason = %error, dead_letter = %topic, "publishing a message the application refused to the dead-letter topic");
            let bytes = |b: Option<&[u8]>| b.map(bytes::Bytes::copy_from_slice);
            let mut headers: Vec<(String, Option<bytes::Bytes>)> =
                message.headers.iter().map(|(k, v)| ((*k).to_owned(), bytes(*v))).collect();
            for (name, value) in [
                ("kshard.refused", error.to_string()),
                ("kshard.source.topic", message.topic.to_owned()),
                ("kshard.source.partition", message.partition.to_string()),
                ("kshard.source.offset", message.offset.to_string()),
                ("kshard.shard", spec.id.clone()),
            ] {
                headers.push((name.to_owned(), Some(bytes::Bytes::from(value))));
            }
            let record = OutRecord {
                key: bytes(message.key),
                value: bytes(message.value),
                headers,
                timestamp_ms: message.timestamp_ms,
            };
            txn.publish(topic, partition.unwrap_or(message.partition), record);
            refused.dead_lettered += 1;
            Ok(())
        }
    }
}

/// A message copied out of its reader's buffer, for an application that awaits.
struct OwnedMessage {
    topic: String,
    partition: i32,
    offset: i64,
    timestamp: (i64, bool),
    headers: Vec<(String, Option<Vec<u8>>)>,
    key: Option<Vec<u8>>,
    value: Option<Vec<u8>>,
    transactional: Option<crate::application::Transactional>,
}

impl OwnedMessage {
    fn of(r: &crate::partitions::LogRecord<'_>) -> Self {
        OwnedMessage {
            topic: r.topic().to_owned(),
            partition: r.partition(),
            offset: r.offset(),
            timestamp: r.timestamp(),
            headers: r.headers().into_iter().map(|(k, v)| (k.to_owned(), v.map(<[u8]>::to_vec))).collect(),
            key: r.key().map(<[u8]>::to_vec),
            value: r.value().map(<[u8]>::to_vec),
            transactional: r.transactional(),
        }
    }

    fn headers(&self) -> Vec<(&str, Option<&[u8]>)> {
        self.headers.iter().map(|(k, v)| (k.as_str(), v.as_deref())).collect()
    }

    fn message<'a>(&'a self, headers: &'a [(&'a str, Option<&'a [u8]>)]) -> Message<'a> {
        Message {
            topic: &self.topic,
            partition: self.partition,
            offset: self.offset,
            timestamp_ms: self.timestamp.0,
            log_append_time: self.timestamp.1,
            headers,
            key: self.key.as_deref(),
            value: self.value.as_deref(),
            transactional: self.transactional,
        }
    }
}
