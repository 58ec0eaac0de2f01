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
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::mpsc::UnboundedReceiver;
use tokio::sync::mpsc::error::TryRecvError;
use tokio::time::Instant;

use crate::application::{Application, Message, Transaction};
use crate::disk::Disk;
use crate::metrics::Metrics;
use crate::model::ShardSpec;
use crate::partitions::{PartitionRead, Partitions, Polled, next_event};
use crate::recovery_log::io::hand_off;
use crate::recovery_log::policy::{self, Timing};
use crate::recovery_log::record::SourceOffset;
use crate::recovery_log::replica::{HintBoard, KAFKA_TIMEOUT, Log, ReplicaError, kafka};
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
        ctx.app.stopped(&spec);
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
    mut commands: UnboundedReceiver<Command>,
    report: &(dyn Fn(Event) + Send + Sync),
) -> Result<(), ReplicaError> {
    let mut log = Log::open(ctx, spec).await?;
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
            Ok(Command::TearDown) | Err(TryRecvError::Disconnected) => return Ok(()),
            Ok(Command::Follow) => {
                ctx.app.following(spec, log.player.store(), log.player.offsets()).map_err(|error| {
                    ReplicaError::Application { at: "following the shard as a standby".into(), error }
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
                ctx.app.recovered(spec, log.player.store(), log.player.offsets()).map_err(|error| {
                    ReplicaError::Application { at: "recovering the application's state".into(), error }
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
                    tokio::select! {
                        command = commands.recv() => {
                            taken = Some(command.unwrap_or(Command::TearDown));
                            continue;
                        }
                        _ = tokio::time::timeout(IDLE_WAIT, s.reader.readable()) => {}
                    }
                }
                s.transaction(&mut log, author).await?;
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
        let mut txn = Transaction::new(log.player.store());
        let mut moved = false;
        self.drained = false;
        loop {
            let elapsed = started.elapsed();
            let Some(wait) = timing.before_poll(elapsed) else { break };
            let polled = match next_event(self.reader.as_ref(), wait).await.map_err(kafka("reading a source"))? {
                Polled::Record(r) => {
                    // Not a source, or before the position (a re-read after a
                    // reset): taking it would count a message twice.
                    let next = self.next.get_mut(r.topic()).and_then(|p| p.get_mut(&r.partition()));
                    let Some(next) = next else { continue };
                    if r.offset() < *next {
                        continue;
                    }
                    *next = r.offset() + 1;
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
                    spec_consume(log.ctx, spec, &mut txn, &message)?;
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
                        log.ctx.app.end_of_source(spec, topic, partition, next_offset);
                    }
                    policy::Polled::EndOfSource
                }
                Polled::Idle => policy::Polled::Idle,
            };
            if let Some(end) = timing.after_poll(elapsed, polled) {
                self.drained = end.drained;
                break;
            }
        }
        let messages = txn.messages();
        if !policy::commits(messages, moved, self.committed.elapsed()) {
            return log.refresh_end(false).await;
        }
        let (mutations, outputs) = txn.into_parts();
        let offsets = self.offsets();
        log.commit(author, mutations, offsets, outputs).await?;
        self.committed = Instant::now();
        // A heartbeat is not a consumer transaction.
        if messages > 0 || moved {
            log.ctx.metrics.transaction(&spec.id, messages);
        }
        if log.snapshot_due() {
            log.snapshot(author, &self.offsets()).await?;
        }
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
