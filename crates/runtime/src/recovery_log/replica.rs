//! A replica's store and recovery log, as its worker uses them: opening the
//! store at the right place in the log (its checkpoint; the newest snapshot
//! when that is further on; the log's start when records it needed were
//! deleted), playing and tailing, and — for a primary — snapshots that bound
//! replay, with the log's records before the previous snapshot deleted.
//!
//! Replay is bounded so: a primary snapshots its store (a snapshot-start
//! record, transactions putting every live key, a snapshot-end record) once the log written
//! since the last snapshot exceeds `snapshot_factor` times that snapshot's
//! size and `snapshot_min_bytes`; it then records the snapshot as the shard's
//! hint, keeps the previous one as a backup, and deletes the log before the
//! previous one (Kafka's DeleteRecords). A replica whose store is behind the
//! newest hint starts from that hint with an empty store, so it replays at most
//! the snapshot plus `snapshot_factor` times its size (or `snapshot_min_bytes`).

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::hints::HintsError;
use super::io::{
    LogClients, LogError, WriterSlot, append, commit, commit_with, ends, offer, read_back, records_keeping,
    write_transaction,
};
use super::lineage::{applied_last, holds_snapshot, record_at, usable_hint};
use super::player::{Played, Player};
use super::record::{Body, Mutation, SourceOffset};
use super::start::{Found, Start, choose, why};
use crate::model::{Hint, Hints, RecoveryLog, ShardSpec};
use crate::partitions::{PartitionRead, Partitions, Polled, next_event};
use crate::progress::Progress;
use crate::replica_failure::FailureKind;
use crate::store::{Store, StoreError};
use crate::worker_context::{READER_QUEUE_KBYTES, WorkerContext};

pub(crate) const KAFKA_TIMEOUT: Duration = Duration::from_secs(30);
/// How often a tailing replica asks where the log ends.
const END_EVERY: Duration = Duration::from_secs(1);
/// Keys and values per snapshot record: well under Kafka's 1 MiB record limit.
const SNAPSHOT_CHUNK: usize = 256 << 10;

/// Why a replica failed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ReplicaError {
    #[error(transparent)]
    Log(#[from] LogError),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("consuming {at}: {error}")]
    Application { at: String, error: crate::application::AppError },
    #[error("the shard has no sources")]
    NoSources,
    #[error("reading the shard's hints: {0}")]
    Hints(#[from] HintsError),
    #[error("the recovery log was truncated to offset {low}, past this replica's position {position}")]
    Truncated { position: i64, low: i64 },
    #[error("the recovery log starts at offset {0} and holds no complete snapshot to play from (yet)")]
    NoSnapshotAtStart(i64),
    #[error("the shard has no recovery log, and {0}")]
    Unlogged(&'static str),
}

impl ReplicaError {
    /// What the replica failed of.
    pub(crate) fn kind(&self) -> FailureKind {
        match self {
            ReplicaError::Log(LogError::Kafka { .. }) => FailureKind::Kafka,
            ReplicaError::Log(LogError::Fenced { .. }) => FailureKind::Fenced,
            ReplicaError::Log(LogError::Store(_)) | ReplicaError::Store(_) => FailureKind::Store,
            ReplicaError::Log(_) | ReplicaError::Truncated { .. } | ReplicaError::NoSnapshotAtStart(_) => {
                FailureKind::RecoveryLog
            }
            ReplicaError::Application { .. } => FailureKind::Application,
            ReplicaError::Hints(_) => FailureKind::Keyspace,
            ReplicaError::NoSources | ReplicaError::Unlogged(_) => FailureKind::Spec,
        }
    }
}

pub(crate) fn kafka(step: &'static str) -> impl FnOnce(kshard_kafka::Error) -> LogError {
    move |source| LogError::Kafka { step, source }
}

/// The replica's store on its member's disk (faults are injected through
/// the disk: see [`crate::faults::GatedDisk`]).
pub(crate) type ReplicaStore = Box<dyn Store>;

/// A transaction being committed while the next is taken.
pub(crate) struct InFlight {
    /// Writes it to Kafka: the last record's offset.
    task: tokio::task::JoinHandle<Result<i64, LogError>>,
    author: u64,
    /// Its last record's sequence number.
    seq: u64,
    /// Its writes, by key (`None`: deleted): what the next transaction
    /// reads over the store until this one is in it.
    pub(crate) overlay: std::collections::BTreeMap<Vec<u8>, Option<Vec<u8>>>,
    size: usize,
    done: Done,
}

impl InFlight {
    /// Whether Kafka is still committing it.
    pub(crate) fn committing(&self) -> bool {
        !self.task.is_finished()
    }
}

/// What to do once a transaction is committed.
#[derive(Debug, Default)]
pub(crate) struct Done {
    /// The application began it: its hook gets these source offsets.
    pub(crate) begun: Option<Vec<SourceOffset>>,
    /// Messages it took.
    pub(crate) messages: usize,
    /// A source's position moved past markers.
    pub(crate) moved: bool,
    /// Messages refused: skipped, dead-lettered.
    pub(crate) refused: (u64, u64),
}

impl Done {
    /// Tells `app` the transaction it began is committed, and counts it
    /// for `shard` (a heartbeat is not a consumer transaction).
    pub(crate) fn report(
        self,
        app: &mut dyn crate::application::ShardApp,
        metrics: &crate::metrics::Metrics,
        shard: &str,
    ) {
        if let Some(offsets) = &self.begun {
            app.committed(offsets);
        }
        if self.messages > 0 || self.moved {
            metrics.transaction(shard, self.messages);
            metrics.refused(shard, self.refused.0, self.refused.1);
        }
    }
}

/// Why one record could not be played: its chain broken (records missing
/// from `position` on), or anything else.
enum PlayError {
    Broken(LogError, i64),
    Other(ReplicaError),
}
use PlayError::{Broken, Other};

/// The clients of a replica's log.
pub(crate) struct LogIo {
    reader: Box<dyn PartitionRead>,
    /// The member's, shared by its replicas.
    partitions: Arc<dyn Partitions>,
    /// The shard's transactional writer, once primary (shared with the
    /// task writing a transaction in flight).
    writer: Option<Arc<WriterSlot>>,
}

impl LogIo {
    pub(crate) fn clients<'a>(&'a self, log: &'a RecoveryLog) -> LogClients<'a> {
        LogClients {
            topic: &log.topic,
            partition: log.partition,
            reader: self.reader.as_ref(),
            partitions: self.partitions.as_ref(),
            writer: self.writer.as_deref(),
        }
    }

    /// Becomes the writer of `spec`'s log: its transactional id's writer
    /// is made, which fences every earlier one at the broker (a zombie
    /// primary's open transaction aborted, its writes refused from now on).
    pub(crate) async fn fence(&mut self, log: &RecoveryLog) -> Result<(), ReplicaError> {
        let id = transactional_id(log);
        let writer = self.partitions.transactional(&id).await.map_err(|source| {
            if source.is_fenced() {
                ReplicaError::Log(LogError::Fenced { current: None })
            } else {
                ReplicaError::Log(LogError::Kafka { step: "becoming the log's transactional writer", source })
            }
        })?;
        self.writer = Some(Arc::new(tokio::sync::Mutex::new(writer)));
        Ok(())
    }
}

/// The name of a replica's store on its member's disk: a store is only ever
/// played from its own log (a shard of the same id logging elsewhere gets a
/// store of its own), and a shard without a log has a store of its own too.
pub(crate) fn store_name(spec: &ShardSpec) -> String {
    match &spec.recovery_log {
        Some(log) => format!("{}@{}-{}", spec.id, log.topic, log.partition),
        None => format!("{}@unlogged", spec.id),
    }
}

/// The transactional id of the writer of `log`: one per recovery log, so
/// that whoever writes it fences whoever wrote it before (needs Write on
/// the transactional ids `kshard/<topic>/` begins: see docs/security.md).
pub fn transactional_id(log: &crate::model::RecoveryLog) -> String {
    format!("kshard/{}/{}", log.topic, log.partition)
}

/// The log, its clients and the player, with what a replica tracks of them.
pub(crate) struct Log<'a> {
    pub(crate) ctx: &'a WorkerContext,
    pub(crate) spec: &'a ShardSpec,
    /// The shard's recovery log.
    pub(crate) log: &'a RecoveryLog,
    pub(crate) io: LogIo,
    pub(crate) player: Player<ReplicaStore>,
    end: i64,
    end_asked: Option<Instant>,
    /// The newest snapshot known, and the log bytes after it.
    hint: Option<Hint>,
    playback: crate::metrics::Playback,
    since_snapshot: u64,
    /// When a record was last applied (played, or appended and read back;
    /// the opening counts as one, so a replica that applies nothing ages
    /// from then): on tokio's clock, stepped in the simulation.
    applied: Option<std::time::Instant>,
    /// A standby the application follows: transactions played go to
    /// [`crate::application::ShardApp::followed`].
    pub(crate) follow: bool,
    /// The primary's last transaction, while Kafka commits it (the next one
    /// is taken meanwhile: see [`Log::start_commit`]).
    pub(crate) in_flight: Option<InFlight>,
    /// The application's object for this replica: only ever reached with
    /// `&mut` (`Mutex::get_mut`, no lock taken), the mutex making the log
    /// `Sync` without asking it of the application.
    pub(crate) app: std::sync::Mutex<Box<dyn crate::application::ShardApp>>,
}

impl<'a> Log<'a> {
    /// The store's name, for the shard and its log: a store is only ever
    /// played from its own log (a shard of the same id logging elsewhere gets
    /// a store of its own).
    fn open_store(ctx: &WorkerContext, spec: &ShardSpec, fresh: bool) -> Result<ReplicaStore, ReplicaError> {
        let name = store_name(spec);
        let (inner, replaced) = ctx.disk.open(&name, fresh)?;
        if let Some(why) = replaced {
            tracing::warn!(shard = %spec.id, store = name, error = %why, "the store was not readable: set aside, rebuilding it from the recovery log");
        }
        Ok(inner)
    }

    /// Opens the replica's store and its log where playback goes on.
    pub(crate) async fn open(
        ctx: &'a WorkerContext,
        spec: &'a ShardSpec,
        log: &'a RecoveryLog,
    ) -> Result<Self, ReplicaError> {
        let partitions = Arc::clone(&ctx.partitions);
        let app = ctx.app.shard(spec).map_err(|error| ReplicaError::Application {
            at: "starting the application's object for the replica".into(),
            error,
        })?;
        let hints = ctx.hints.read(&spec.id).await?.map(|(h, _)| h);
        let store = Self::open_store(ctx, spec, false)?;
        let checkpoint = store.checkpoint()?.map(|c| c.log);
        let (low, high) = watermarks(partitions.as_ref(), log).await?;
        // The record the store applied last, when the log still has it: is
        // it there (not another log's record in its place)?
        let store_of_this_log = match &checkpoint {
            // The record it applied last is deleted: nothing tells which log
            // the store is of. Everything from the log's start is played
            // again anyway: from a snapshot, not on from the store.
            Some(c) if low > 0 && c.next_offset <= low => false,
            Some(c) if c.next_offset <= high => {
                let at = c.next_offset - 1;
                let bytes = record_at(partitions.as_ref(), &log.topic, log.partition, at, KAFKA_TIMEOUT)
                    .await
                    .map_err(kafka("reading the store's last record back"))?;
                bytes.is_some_and(|b| applied_last(&b, c))
            }
            _ => true,
        };
        // A hint counts when the log holds the snapshot it names.
        let hint = usable_hint(partitions.as_ref(), log, hints.map(|h| h.current), (low, high), KAFKA_TIMEOUT)
            .await
            .map_err(kafka("reading the newest snapshot's start"))?;
        let found = Found { position: checkpoint.map(|c| c.next_offset), store_of_this_log, hint, low, high };
        let start = choose(&found);
        if let Some(why) = why(&start, &found) {
            tracing::info!(shard = %spec.id, position = ?found.position, low, high, snapshot = ?hint.map(|h| h.offset), "{why}");
        }
        let player = match start {
            Start::Store => Player::open(store)?,
            Start::Snapshot(h) => {
                drop(store);
                Player::open_at(Self::open_store(ctx, spec, true)?, &h)
            }
            Start::Bootstrap(low) => {
                drop(store);
                Player::bootstrap(Self::open_store(ctx, spec, true)?, low)
            }
            Start::Fresh => {
                drop(store);
                Player::open(Self::open_store(ctx, spec, true)?)?
            }
        };
        let start = [(log.partition, Some(player.next_offset()))];
        // Committed records only: a zombie's transaction aborted when a new
        // primary fenced it must never be played.
        let queue = READER_QUEUE_KBYTES;
        let reader = partitions
            .reader(&log.topic, &start, queue, kshard_kafka::Isolation::Committed)
            .map_err(kafka("opening a reader"))?;
        Ok(Log {
            ctx,
            spec,
            log,
            io: LogIo { reader, partitions, writer: None },
            player,
            end: 0,
            end_asked: None,
            hint,
            playback: ctx.metrics.playback(&spec.id),
            since_snapshot: 0,
            applied: Some(Instant::now().into_std()),
            follow: false,
            in_flight: None,
            app: std::sync::Mutex::new(app),
        })
    }

    /// Asks where the log ends when last asked long enough ago.
    pub(crate) async fn refresh_end(&mut self, force: bool) -> Result<(), ReplicaError> {
        if !force && self.end_asked.is_some_and(|t| t.elapsed() < END_EVERY) {
            return Ok(());
        }
        // A tailing replica's reader knows the end from its fetches: no
        // ListOffsets request a second per replica. Playing to the head asks
        // the broker (an end heard up to a long poll ago may miss a write
        // made just before).
        let known = if force { None } else { self.io.reader.known_end(&self.log.topic, self.log.partition) };
        self.end = match known {
            // Never below an end the broker gave: an answer heard before it
            // may be older.
            Some(end) => end.max(self.end),
            // Where committed readers end: a transaction a crashed primary
            // left open is not waited for (the next primary aborts it).
            None => stable_end(self.io.partitions.as_ref(), self.log).await?,
        };
        self.end_asked = Some(Instant::now());
        self.publish();
        Ok(())
    }

    /// Notes that a record was just applied (see [`Progress::applied`]).
    pub(crate) fn mark_applied(&mut self) {
        self.applied = Some(Instant::now().into_std());
    }

    pub(crate) fn publish(&self) {
        let next_offset = self.player.next_offset();
        let progress = Progress {
            next_offset,
            log_end: self.end.max(next_offset),
            published: Some(std::time::Instant::now()),
            applied: self.applied,
        };
        self.ctx.metrics.behind(&self.spec.id, progress.behind());
        self.ctx
            .progress
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(self.spec.id.clone(), progress);
    }

    /// Reads what arrives within `wait` and plays it. Cancel-safe: a record
    /// taken from the reader is played before anything is awaited.
    pub(crate) async fn tail(&mut self, wait: Duration) -> Result<(), ReplicaError> {
        let before = self.player.next_offset();
        if let Some(position) = self.play_next(wait).await? {
            let (low, _) = watermarks(self.io.partitions.as_ref(), self.log).await?;
            return Err(ReplicaError::Truncated { position, low });
        }
        // Caught up with the end it knows (past the last commit marker):
        // said at once, for readers that accept a standby's state if it is
        // caught up. (Not per record while behind: a backfill plays millions.)
        if self.player.next_offset() != before && self.player.next_offset() >= self.end {
            self.publish();
        }
        self.refresh_end(false).await
    }

    /// Plays the next record arriving within `wait`, if any; the player's
    /// position when the record was past it (a gap).
    async fn play_next(&mut self, wait: Duration) -> Result<Option<i64>, ReplicaError> {
        let broken = match self.play_one(wait).await {
            Ok(()) => return Ok(None),
            Err(Other(e)) => return Err(e),
            Err(Broken(e, position)) => (e, position),
        };
        let (e, position) = broken;
        let (low, _) = watermarks(self.io.partitions.as_ref(), self.log).await?;
        if low > position { Ok(Some(position)) } else { Err(e.into()) }
    }

    /// Plays the next record arriving within `wait`, if any (see [`Log::play_next`]).
    async fn play_one(&mut self, wait: Duration) -> Result<(), PlayError> {
        // The record borrows the reader until it is dropped, below.
        let reading = |e| Other(kafka("reading")(e).into());
        let event = next_event(self.io.reader.as_ref(), wait).await.map_err(reading)?;
        if let Polled::EndOfPartition { next_offset: Some(next), .. } = event {
            // Past the markers after the last record.
            self.player.skip_to(next);
        }
        // One record of the run; the rest are the next poll's.
        let mut run = match event {
            Polled::Records(run) => run,
            _ => return Ok(()),
        };
        if let Some(r) = run.next_record().map_err(reading)? {
            let (offset, size) = (r.offset(), r.value().map_or(0, <[u8]>::len));
            let (app, follow) = (self.app.get_mut().unwrap_or_else(std::sync::PoisonError::into_inner), self.follow);
            let position = self.player.next_offset();
            let played = offer(&mut self.player, &r, |mutations, offsets| {
                if follow {
                    app.followed(mutations, offsets);
                }
            });
            let played = match played {
                // Records of the chain are missing: deleted before this
                // replica read them (it was further behind than the
                // previous snapshot) when the log starts past its position.
                Err(e @ LogError::ChainBroken { .. }) => return Err(Broken(e, position)),
                played => played.map_err(|e| Other(e.into()))?,
            };
            if played.is_some() {
                self.playback.played(size);
                self.since_snapshot += size as u64;
            }
            if matches!(
                played,
                Some(Played::Transaction | Played::HandOff { .. } | Played::SnapshotStart | Played::SnapshotEnd)
            ) {
                // (The record borrows the reader: the field, not `mark_applied`.)
                self.applied = Some(Instant::now().into_std());
            }
            match played {
                // A snapshot by the primary: the log to replay starts over.
                Some(Played::SnapshotStart) => self.since_snapshot = 0,
                Some(Played::Malformed(e)) => {
                    tracing::warn!(shard = %self.spec.id, offset, error = %e, "skipping a malformed recovery-log record");
                }
                Some(Played::Skipped(skip)) => {
                    tracing::info!(shard = %self.spec.id, offset, ?skip, "skipping a record off the chain (a fenced writer's)");
                }
                _ => {}
            }
        }
        Ok(())
    }

    /// Plays to the end the log has now; `false` when `stop` said to stop first.
    pub(crate) async fn play_to_head(&mut self, mut stop: impl FnMut() -> bool) -> Result<bool, ReplicaError> {
        self.refresh_end(true).await?;
        while self.player.next_offset() < self.end {
            if stop() {
                return Ok(false);
            }
            self.tail(Duration::from_millis(100)).await?;
        }
        if self.player.bootstrapping() {
            let (low, _) = watermarks(self.io.partitions.as_ref(), self.log).await?;
            return Err(ReplicaError::NoSnapshotAtStart(low));
        }
        self.publish();
        Ok(true)
    }

    /// Starts committing one transaction as `author`: its records (and
    /// `outputs`) go to Kafka in one Kafka transaction on a task of their
    /// own, while the caller takes the next transaction, reading through
    /// [`InFlight::overlay`]. [`Log::finish_commit`] waits for it, reads it
    /// back into the store (fenced if it was not applied) and runs `done`.
    /// Without a transactional writer (a test's log), it commits here.
    pub(crate) async fn start_commit(
        &mut self,
        author: u64,
        (mutations, offsets): (Vec<Mutation>, Vec<SourceOffset>),
        outputs: Vec<crate::application::Output>,
        done: Done,
    ) -> Result<(), ReplicaError> {
        self.finish_commit().await?;
        // The record's size: an idle primary's empty transactions count too,
        // so that they are truncated behind snapshots like any other.
        let size: usize = mutations
            .iter()
            .map(|m| match m {
                Mutation::Put { key, value } => 9 + key.len() + value.len(),
                Mutation::Delete { key } => 5 + key.len(),
            })
            .chain(offsets.iter().map(|o| 14 + o.topic.len()))
            .sum::<usize>()
            + 38;
        let Some(writer) = self.io.writer.clone() else {
            let clients = self.io.clients(self.log);
            commit_with(&clients, &mut self.player, author, (mutations, offsets), outputs, KAFKA_TIMEOUT).await?;
            self.applied_commit(size, done);
            return Ok(());
        };
        let body = Body::Transaction { mutations, offsets };
        let super::io::Encoded { records, seq, mutations } = records_keeping(self.player.chain(), author, body)?;
        // The mutations themselves, once encoded: a copy of each key and
        // value was a measurable share of a cold start.
        let overlay = mutations
            .into_iter()
            .map(|m| match m {
                Mutation::Put { key, value } => (key, Some(value)),
                Mutation::Delete { key } => (key, None),
            })
            .collect();
        let (topic, partition) = (self.log.topic.clone(), self.log.partition);
        let task = tokio::spawn(async move {
            let written = write_transaction(&writer, &topic, partition, &records, outputs, "appending");
            tokio::time::timeout(KAFKA_TIMEOUT, written).await.unwrap_or(Err(LogError::Timeout(KAFKA_TIMEOUT)))
        });
        self.in_flight = Some(InFlight { task, author, seq, overlay, size, done });
        Ok(())
    }

    /// Waits for the transaction in flight, if any, to be committed, reads
    /// it back into the store and runs what follows a commit.
    pub(crate) async fn finish_commit(&mut self) -> Result<(), ReplicaError> {
        let Some(f) = self.in_flight.take() else { return Ok(()) };
        let offset = f.task.await.map_err(|e| {
            ReplicaError::Log(LogError::Kafka {
                step: "committing",
                source: kshard_kafka::Error::Refused { step: "committing".into(), message: e.to_string() },
            })
        })??;
        let clients = self.io.clients(self.log);
        read_back(&clients, &mut self.player, f.author, f.seq, offset, KAFKA_TIMEOUT).await?;
        self.applied_commit(f.size, f.done);
        Ok(())
    }

    /// What follows a transaction's commit: its age, its share of the log
    /// since the snapshot, the application's hook and the metrics.
    fn applied_commit(&mut self, size: usize, done: Done) {
        self.mark_applied();
        self.since_snapshot += size as u64;
        let app = self.app.get_mut().unwrap_or_else(std::sync::PoisonError::into_inner);
        done.report(app.as_mut(), &self.ctx.metrics, &self.spec.id);
    }
}

/// The log partition's (low, high) watermarks (see [`ends`]). Retried for up
/// to 30 s: a log topic just created, or in a leader election, answers "not
/// leader" for a moment.
/// The log's last stable offset (see [`Partitions::stable_end`]), asked
/// again for 30 s while the broker cannot tell.
async fn stable_end(partitions: &dyn Partitions, log: &RecoveryLog) -> Result<i64, ReplicaError> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match partitions.stable_end(&log.topic, log.partition).await {
            Ok(end) => return Ok(end),
            Err(_) if Instant::now() < deadline => tokio::time::sleep(Duration::from_millis(200)).await,
            Err(source) => return Err(LogError::Kafka { step: "finding the log's last stable offset", source }.into()),
        }
    }
}

async fn watermarks(partitions: &dyn Partitions, log: &RecoveryLog) -> Result<(i64, i64), ReplicaError> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match ends(partitions, &log.topic, log.partition).await {
            Ok(ends) => return Ok(ends),
            Err(_) if Instant::now() < deadline => tokio::time::sleep(Duration::from_millis(200)).await,
            Err(e) => return Err(e.into()),
        }
    }
}

mod snapshots;

#[cfg(test)]
mod tests;

#[cfg(test)]
mod overlay_tests;
