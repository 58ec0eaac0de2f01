//! The lag monitor as an application of `kshard-runtime`: one shard per
//! partition of a log kshard reads (`__consumer_offsets`, and
//! `__share_group_state` for share groups), its store what the service needs
//! of that partition, so that a restart on the data directory reads only
//! what was written since it stopped.
//!
//! What a store holds, and how a unit is rebuilt from it or follows a played
//! transaction, is the log's [`Layout`] ([`crate::offsets_layout`],
//! [`crate::share_layout`]; the pure rules live in `state/shard_store.rs`
//! and `state/share_store.rs`). A primary applies each record to the
//! monitor's unit as it consumes it; when a replica becomes primary, its
//! unit is rebuilt from the store, then positioned at the store's checkpoint.
//!
//! Every member holds a replica of every shard (more hot standbys are wanted
//! than there are members), and a standby's unit follows the transactions it
//! plays: each member serves the whole cluster's lag from its own memory, a
//! scrape never waits on another member, and when a member dies the
//! survivors already hold its partitions' state. A partition with no replica
//! here, or with no primary anywhere, is normal for a moment (a shard moving,
//! a fail-over) and a problem on `/ready` once it lasts (see [`Event::Hold`]).

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use kshard_runtime::Progress;
use kshard_runtime::ReplicaCode;
use kshard_runtime::ShardSpec;
use kshard_runtime::Store;
use kshard_runtime::recovery_log::{Mutation, SourceOffset};
use kshard_runtime::{AppError, Isolation, Message, ShardApp, Transaction};
use tracing::info;

use crate::catch_up::Log;
use crate::monitor::Monitor;
use crate::readiness::Event;
use crate::units::{RecordAt, Unit, Units};

/// What the shards of one log keep in their stores, and how their units are
/// made from them: the part of the application that differs between logs.
pub(crate) trait Layout: Send + Sync + 'static {
    /// The unit of one partition of the log.
    type Unit: Unit;
    /// The log the shards read.
    const LOG: Log;
    /// The monitor's units of the log.
    fn units(monitor: &Monitor) -> &Units<Self::Unit>;
    /// What a replica's transaction sets aside until it ends, to write it
    /// once ([`Layout::finalize`]) rather than per record.
    type Pending: Default + Send + 'static;
    /// Applies `m` to its unit, and to the store (or to `pending`) what it
    /// keeps of it.
    fn consume(
        &self,
        monitor: &Monitor,
        pending: &mut Self::Pending,
        txn: &mut Transaction<'_>,
        m: &Message<'_>,
    ) -> Result<(), AppError>;
    /// Applies `m` to `unit` (its partition's, of [`Units::unit`]) alone:
    /// shards whose stores are in memory keep nothing else (the units are
    /// the state).
    fn apply(&self, monitor: &Monitor, unit: &std::sync::Mutex<Self::Unit>, m: &Message<'_>);
    /// The transaction ends: what `pending` holds goes to the store, and
    /// `pending` is empty again.
    fn finalize(pending: &mut Self::Pending, txn: &mut Transaction<'_>);
    /// The unit of `partition` rebuilt from its store, at `next` (the store's
    /// checkpoint).
    fn rebuild(&self, store: &dyn Store, next: Option<i64>, partition: i32) -> Result<Self::Unit, AppError>;
    /// Moves a standby's unit by one played transaction.
    fn follow(unit: &mut Self::Unit, mutations: &[Mutation], next: Option<i64>);
    /// How the sources are read.
    fn isolation(&self) -> Isolation;
    /// How many entries a unit holds (offsets, share-partitions), for logs.
    fn size(unit: &Self::Unit) -> usize;
}

/// The lag application over the shards of one log.
pub(crate) struct LogShards<L> {
    pub(crate) layout: L,
    pub(crate) monitor: Arc<Monitor>,
    /// Partitions of the log (it may grow).
    pub(crate) partitions: AtomicI32,
    /// Partitions whose shard is primary here.
    primaries: Mutex<BTreeSet<i32>>,
    /// Partitions whose shard has a standby here that follows its log.
    standbys: Mutex<BTreeSet<i32>>,
    /// How long a partition may have no replica here before that is a problem.
    pub(crate) grace: Duration,
    /// Partitions restored from their store after the service had caught up,
    /// until they read to the end again: their state is older than what was
    /// shown before, so `/ready` waits for them.
    recovering: Mutex<BTreeSet<i32>>,
    /// Set when the service stops: shards stopping then are no failure.
    pub(crate) stopping: crate::shutdown::Shutdown,
    /// The shards have no recovery log and their stores are in memory: the
    /// monitor's units are the state (see [`crate::memory_shard`]).
    pub(crate) in_memory: bool,
}

impl<L: Layout> LogShards<L> {
    pub(crate) fn new(layout: L, monitor: Arc<Monitor>, partitions: i32, stopping: crate::shutdown::Shutdown) -> Self {
        LogShards {
            layout,
            monitor,
            partitions: AtomicI32::new(partitions),
            primaries: Mutex::new(BTreeSet::new()),
            standbys: Mutex::new(BTreeSet::new()),
            grace: Duration::from_secs(30),
            recovering: Mutex::new(BTreeSet::new()),
            stopping,
            in_memory: false,
        }
    }

    /// Says on `/ready` that reading works once every partition's shard has
    /// a replica here (primary, or a standby following it). A partition
    /// reading again after a recovery is a condition of its own (see
    /// [`recovering_key`]), not a failure of the reader.
    pub(crate) fn settle(&self) {
        let primaries = self.primaries.lock().unwrap_or_else(PoisonError::into_inner).clone();
        let standbys = self.standbys.lock().unwrap_or_else(PoisonError::into_inner).clone();
        let held = primaries.union(&standbys).count() as i32;
        if held >= self.partitions.load(Ordering::Acquire) {
            self.monitor.step(Event::WorkerRunning(crate::log_reader::worker(L::LOG)));
        }
    }

    /// `partition` was cut under its reader at `position`: what was read
    /// of it goes, and it is read again from `log_start` (not ready until done).
    pub(crate) fn cut(&self, partition: i32, position: i64, log_start: i64) {
        self.monitor.rebuild(L::LOG, partition, position, log_start);
    }

    /// A source batch that failed its checksum was skipped: counted.
    pub(crate) fn batch_skipped(&self) {
        self.monitor.log(L::LOG).counters().corrupt_batch.fetch_add(1, Ordering::Relaxed);
    }

    /// Partition `partition`'s shard is primary here.
    pub(crate) fn primary_here(&self, partition: i32) {
        self.standbys.lock().unwrap_or_else(PoisonError::into_inner).remove(&partition);
        self.primaries.lock().unwrap_or_else(PoisonError::into_inner).insert(partition);
        self.held(partition);
    }

    /// Partition `partition` has a replica here again.
    pub(crate) fn held(&self, partition: i32) {
        self.monitor.step(Event::Release(held_key(L::LOG, partition)));
    }
}

/// How conditions and reasons name partition `p` of `log`: the offsets
/// topic's plainly (as before share groups), others with their topic.
pub(crate) fn named(log: Log, p: i32) -> String {
    match log {
        Log::Offsets => format!("partition {p}"),
        Log::ShareState => format!("{} partition {p}", log.topic()),
    }
}

/// The condition ([`Event::Hold`]) of a partition read again from its
/// store's checkpoint after it was served further.
fn recovering_key(log: Log, partition: i32) -> String {
    format!("{} reading again", named(log, partition))
}

/// The condition ([`Event::Hold`]) of a partition without a replica here.
fn held_key(log: Log, partition: i32) -> String {
    format!("no replica here of {}", named(log, partition))
}

/// `m` as a record for its unit, with `key` and `value` (a marker's are not
/// the unit's to decode).
pub(crate) fn record_at<'a>(m: &Message<'_>, key: Option<&'a [u8]>, value: Option<&'a [u8]>) -> RecordAt<'a> {
    RecordAt { partition: m.partition, offset: m.offset, transactional: m.transactional, key, value }
}

pub(crate) fn partition_of(shard: &ShardSpec) -> Result<i32, AppError> {
    shard.sources.first().map(|s| s.partition).ok_or_else(|| format!("shard {} has no source", shard.id).into())
}

/// One replica's object: its shard, and the monitor's shared state.
pub(crate) struct LogShard<L: Layout> {
    shards: Arc<LogShards<L>>,
    spec: ShardSpec,
    /// What the transaction under way set aside (see [`Layout::Pending`]).
    pending: L::Pending,
}

impl<L: Layout> LogShard<L> {
    /// The replica of `spec` on `shards`.
    pub(crate) fn new(shards: Arc<LogShards<L>>, spec: &ShardSpec) -> Self {
        LogShard { shards, spec: spec.clone(), pending: L::Pending::default() }
    }
}

impl<L: Layout> ShardApp for LogShard<L> {
    fn begin(&mut self, _: &mut Transaction<'_>) -> Result<(), AppError> {
        // Nothing of a transaction that was not committed (the replica
        // failed before) is written by the next.
        self.pending = L::Pending::default();
        Ok(())
    }

    fn consume(&mut self, txn: &mut Transaction<'_>, m: &Message<'_>) -> Result<(), AppError> {
        self.shards.consume(&mut self.pending, txn, m)
    }

    fn finalize(&mut self, txn: &mut Transaction<'_>) -> Result<(), AppError> {
        L::finalize(&mut self.pending, txn);
        Ok(())
    }

    fn recovered(&mut self, store: &dyn Store, offsets: &[SourceOffset]) -> Result<(), AppError> {
        self.shards.recovered(&self.spec, store, offsets)
    }

    fn following(&mut self, store: &dyn Store, offsets: &[SourceOffset]) -> Result<(), AppError> {
        self.shards.following(&self.spec, store, offsets)
    }

    fn followed(&mut self, mutations: &[Mutation], offsets: &[SourceOffset]) {
        self.shards.followed(&self.spec, mutations, offsets);
    }

    fn end_of_source(&mut self, _: &str, partition: i32, next_offset: Option<i64>) {
        self.shards.end_of_source(partition, next_offset);
    }

    /// The partition was cut under the reader (an unclean leader election):
    /// what was read of it is dropped, from the store too, and it is read
    /// again from its start (not ready until done).
    fn source_reset(
        &mut self,
        txn: &mut Transaction<'_>,
        _: &str,
        partition: i32,
        position: i64,
        log_start: i64,
    ) -> Result<(), AppError> {
        self.pending = L::Pending::default();
        for (key, _) in txn.scan_prefix(b"")? {
            txn.delete(key);
        }
        self.shards.cut(partition, position, log_start);
        Ok(())
    }

    /// A batch that does not add up was skipped, the next one read:
    /// counted (the runtime logs it), not a failing read.
    fn source_skipped(&mut self, _: &str, _: i32, _: i64, _: &str) {
        self.shards.batch_skipped();
    }

    fn stopped(&mut self) {
        self.shards.stopped(&self.spec);
    }
}

impl<L: Layout> LogShards<L> {
    /// Takes one record of the log into the transaction, setting aside in
    /// `pending` what is written once at its end ([`Layout::finalize`]).
    pub(crate) fn consume(
        &self,
        pending: &mut L::Pending,
        txn: &mut Transaction<'_>,
        m: &Message<'_>,
    ) -> Result<(), AppError> {
        self.layout.consume(&self.monitor, pending, txn, m)
    }

    fn recovered(&self, shard: &ShardSpec, store: &dyn Store, offsets: &[SourceOffset]) -> Result<(), AppError> {
        let partition = partition_of(shard)?;
        let started = Instant::now();
        let next = offsets.iter().find(|o| o.partition == partition).map(|o| o.offset);
        let unit = self.layout.rebuild(store, next, partition)?;
        let entries = L::size(&unit);
        // A unit ahead of the store held records a primary here applied but
        // never committed (it failed): what was shown goes back until read again.
        let units = L::units(&self.monitor);
        let behind_shown = units.position(partition).is_some_and(|shown| shown > next.unwrap_or(0));
        units.replace(partition, unit);
        info!(shard = %shard.id, partition, entries, next_offset = ?next, ms = started.elapsed().as_millis() as u64, "restored the partition's state from the store");
        self.primary_here(partition);
        if behind_shown && self.monitor.is_caught_up() {
            // Serving already: this partition's lag goes back to its checkpoint
            // until it has read to the end again.
            self.recovering.lock().unwrap_or_else(PoisonError::into_inner).insert(partition);
            // Not a failure (nothing to restart, no backoff): a condition,
            // not current at once, released at the partition's end.
            let why = format!("{} is reading again from its store's checkpoint", named(L::LOG, partition));
            let at = self.monitor.now();
            let key = recovering_key(L::LOG, partition);
            self.monitor.step(Event::Hold { key, why, grace: Duration::ZERO, at });
        }
        self.settle();
        Ok(())
    }

    fn following(&self, shard: &ShardSpec, store: &dyn Store, offsets: &[SourceOffset]) -> Result<(), AppError> {
        let partition = partition_of(shard)?;
        let next = offsets.iter().find(|o| o.partition == partition).map(|o| o.offset);
        let unit = self.layout.rebuild(store, next, partition)?;
        // A standby never shows less than this member showed already.
        let units = L::units(&self.monitor);
        if units.position(partition).is_none_or(|shown| next.is_some_and(|n| n >= shown)) {
            units.replace(partition, unit);
        }
        info!(shard = %shard.id, partition, next_offset = ?next, "following the partition's shard as a standby");
        self.standbys.lock().unwrap_or_else(PoisonError::into_inner).insert(partition);
        self.held(partition);
        self.settle();
        Ok(())
    }

    fn followed(&self, shard: &ShardSpec, mutations: &[Mutation], offsets: &[SourceOffset]) {
        let Ok(partition) = partition_of(shard) else { return };
        let next = offsets.iter().find(|o| o.partition == partition).map(|o| o.offset);
        L::units(&self.monitor).update(partition, |unit| L::follow(unit, mutations, next));
    }

    pub(crate) fn end_of_source(&self, partition: i32, next_offset: Option<i64>) {
        self.monitor.end_of(L::LOG, partition, next_offset);
        if self.recovering.lock().unwrap_or_else(PoisonError::into_inner).remove(&partition) {
            self.monitor.step(Event::Release(recovering_key(L::LOG, partition)));
        }
    }

    pub(crate) fn stopped(&self, shard: &ShardSpec) {
        let Ok(partition) = partition_of(shard) else { return };
        let was_primary = self.primaries.lock().unwrap_or_else(PoisonError::into_inner).remove(&partition);
        let was_standby = self.standbys.lock().unwrap_or_else(PoisonError::into_inner).remove(&partition);
        if self.recovering.lock().unwrap_or_else(PoisonError::into_inner).remove(&partition) {
            self.monitor.step(Event::Release(recovering_key(L::LOG, partition)));
        }
        if (was_primary || was_standby) && !self.stopping.is_set() {
            // Its state here stays, and is served, until the grace runs out:
            // the shard is moving, or restarting after a failure.
            let why = format!("the shard of {} has no replica on this member", named(L::LOG, partition));
            let (key, grace, at) = (held_key(L::LOG, partition), self.grace, self.monitor.now());
            self.monitor.step(Event::Hold { key, why, grace, at });
        }
    }
}

/// Holds a condition ([`Event::Hold`]) for each partition whose shard has no
/// primary anywhere in the cluster (a fail-over under way), so that one that
/// lasts past `grace` turns `/ready` 503; returns those partitions.
pub(crate) fn watch_primaries(
    log: Log,
    monitor: &Monitor,
    cluster: &kshard_runtime::ClusterView,
    partitions: i32,
    grace: Duration,
) -> Vec<i32> {
    hold_each(log, monitor, partitions, grace, |p, shard| {
        let key = format!("no primary for {}", named(log, p));
        let why = cluster.primary(shard).is_none().then(|| format!("shard {shard} ({}) has no primary", named(log, p)));
        (key, why)
    })
}

/// How long a shard taken over by another writer while this member is its
/// deployment's only one keeps `/ready` 503 after it was last seen so: two
/// deployments on one recovery-log topic take turns, each failing for a
/// moment now and then.
pub(crate) const FOREIGN_WRITER_HOLD: Duration = Duration::from_secs(300);

/// Holds a condition ([`Event::Hold`]), at once a problem, for each
/// partition whose shard was fenced ([`kshard_runtime::recovery_log::FENCED`])
/// in the last [`FOREIGN_WRITER_HOLD`] while the cluster has one member: no
/// member of this deployment took it over, so another deployment writes to
/// the same recovery-log topic. `seen` keeps when each was last seen so;
/// returns the partitions held.
pub(crate) fn watch_foreign_writers(
    log: Log,
    monitor: &Monitor,
    cluster: &kshard_runtime::ClusterView,
    partitions: i32,
    seen: &mut std::collections::BTreeMap<i32, Instant>,
) -> Vec<i32> {
    let now = monitor.now();
    if cluster.members().len() <= 1 {
        for p in 0..partitions {
            let shard = crate::log_reader::shard_id(log, p);
            let fenced = cluster.replicas(&shard).is_some_and(|replicas| {
                replicas.values().any(|r| {
                    r.status.code == ReplicaCode::Failed
                        && r.status.errors.iter().any(|e| e.contains(kshard_runtime::recovery_log::FENCED))
                })
            });
            if fenced {
                seen.insert(p, now);
            }
        }
    }
    seen.retain(|_, at| now.saturating_duration_since(*at) < FOREIGN_WRITER_HOLD);
    hold_each(log, monitor, partitions, Duration::ZERO, |p, shard| {
        let key = format!("another writer of {}", named(log, p));
        let why = seen.contains_key(&p).then(|| {
            format!(
                "shard {shard} ({}) was taken over by another writer, and this member is its deployment's only one: \
                 another kshard deployment writes to the same recovery-log topic (give each its own \
                 `recovery_log_topic`)",
                named(log, p)
            )
        });
        (key, why)
    })
}

/// For each partition (and its shard), holds the condition `check` names
/// when it says why, and releases it otherwise; returns the partitions held.
fn hold_each(
    log: Log,
    monitor: &Monitor,
    partitions: i32,
    grace: Duration,
    check: impl Fn(i32, &str) -> (String, Option<String>),
) -> Vec<i32> {
    let at = monitor.now();
    let mut held = Vec::new();
    for p in 0..partitions {
        let (key, why) = check(p, &crate::log_reader::shard_id(log, p));
        match why {
            Some(why) => {
                monitor.step(Event::Hold { key, why, grace, at });
                held.push(p);
            }
            None => monitor.step(Event::Release(key)),
        }
    }
    held
}

/// How many records a standby here may be behind its recovery log before
/// that is a condition: held past the grace, `/ready` turns 503 naming the
/// partition (a standby's state is what this member serves).
pub(crate) const STANDBY_BEHIND: i64 = 1_000;

/// How long a standby here may go without saying where it is (it does every
/// second while it tails) before that is a condition: a replica stuck
/// somewhere keeps its last, small, distance to the log's end.
pub(crate) const STANDBY_SILENT: Duration = Duration::from_secs(10);

/// Holds a condition ([`Event::Hold`]) for each partition whose standby here
/// is more than [`STANDBY_BEHIND`] records behind its log, or has not said
/// where it is for [`STANDBY_SILENT`], so that one that stays so past `grace`
/// (frozen, or too slow) turns `/ready` 503;
/// returns those partitions.
pub(crate) fn watch_standbys(
    log: Log,
    monitor: &Monitor,
    statuses: &std::collections::BTreeMap<String, ReplicaCode>,
    progress: &std::collections::BTreeMap<String, Progress>,
    partitions: i32,
    grace: Duration,
) -> Vec<i32> {
    let at = monitor.now();
    hold_each(log, monitor, partitions, grace, |p, shard| {
        let key = format!("standby of {} behind", named(log, p));
        let standby = statuses.get(shard) == Some(&ReplicaCode::Standby);
        let why = progress.get(shard).filter(|_| standby).and_then(|progress| {
            let silent = progress.published.map(|t| at.saturating_duration_since(t)).filter(|d| *d > STANDBY_SILENT);
            match (silent, progress.behind()) {
                (Some(d), _) => Some(format!(
                    "the standby here of shard {shard} ({}) has not said where it is for {} s",
                    named(log, p),
                    d.as_secs()
                )),
                (None, n) if n > STANDBY_BEHIND => {
                    Some(format!("the standby here of shard {shard} ({}) is {n} records behind its log", named(log, p)))
                }
                _ => None,
            }
        });
        (key, why)
    })
}

/// How old the state a replica here serves may be — the time since it last
/// applied a record of its log — before that is a condition. Its primary
/// commits about every [`kshard_runtime::recovery_log::HEARTBEAT`] (a
/// heartbeat goes with the first transaction to end past it: 2 s and at most
/// the idle wait, a second, more), so
/// an older state means the primary is gone or stuck, which this tells
/// before the primary's lease runs out.
pub(crate) const STATE_OLD: Duration = Duration::from_secs(3 * kshard_runtime::recovery_log::HEARTBEAT.as_secs());

/// Holds a condition ([`Event::Hold`]) for each partition whose replica here
/// (PRIMARY or STANDBY) serves state older than [`STATE_OLD`], so that one
/// that stays so past `grace` turns `/ready` 503; returns those partitions.
pub(crate) fn watch_ages(
    log: Log,
    monitor: &Monitor,
    statuses: &std::collections::BTreeMap<String, ReplicaCode>,
    progress: &std::collections::BTreeMap<String, Progress>,
    partitions: i32,
    grace: Duration,
) -> Vec<i32> {
    let at = monitor.now();
    hold_each(log, monitor, partitions, grace, |p, shard| {
        let key = format!("state of {} old", named(log, p));
        let serving = matches!(statuses.get(shard), Some(ReplicaCode::Standby | ReplicaCode::Primary));
        let why = progress.get(shard).filter(|_| serving).and_then(|progress| {
            let age = at.saturating_duration_since(progress.applied?);
            (age > STATE_OLD).then(|| {
                format!(
                    "the state here of shard {shard} ({}) is {} s old: its primary has committed nothing since (gone, or stuck)",
                    named(log, p),
                    age.as_secs()
                )
            })
        });
        (key, why)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_standby_behind_past_the_grace_makes_ready_say_so() {
        let monitor = Monitor::new(crate::MonitorSettings::default());
        let shard = crate::log_reader::shard_id(Log::Offsets, 2);
        let statuses = [(shard.clone(), ReplicaCode::Standby)].into();
        let now = Some(std::time::Instant::now());
        let far = [(shard.clone(), Progress { next_offset: 10, log_end: 5_000, published: now, applied: now })].into();
        assert_eq!(watch_standbys(Log::Offsets, &monitor, &statuses, &far, 4, Duration::ZERO), [2]);
        let why = monitor.verdict().reason.unwrap_or_default();
        assert!(why.contains("partition 2") && why.contains("4990 records behind"), "{why}");
        let near =
            [(shard.clone(), Progress { next_offset: 4_500, log_end: 5_000, published: now, applied: now })].into();
        assert_eq!(watch_standbys(Log::Offsets, &monitor, &statuses, &near, 4, Duration::ZERO), Vec::<i32>::new());
        let why = monitor.verdict().reason.unwrap_or_default();
        assert!(!why.contains("behind"), "released once within the bound: {why}");
        // Stuck: near the end when it last said, 20 s ago.
        let long_ago = std::time::Instant::now().checked_sub(Duration::from_secs(20));
        let stuck =
            [(shard, Progress { next_offset: 4_999, log_end: 5_000, published: long_ago, applied: long_ago })].into();
        assert_eq!(watch_standbys(Log::Offsets, &monitor, &statuses, &stuck, 4, Duration::ZERO), [2]);
        let why = monitor.verdict().reason.unwrap_or_default();
        assert!(why.contains("partition 2") && why.contains("has not said where it is"), "{why}");
    }

    #[test]
    fn state_whose_primary_committed_nothing_for_long_is_named_with_its_age() {
        let monitor = Monitor::new(crate::MonitorSettings::default());
        let (standby, primary) =
            (crate::log_reader::shard_id(Log::Offsets, 1), crate::log_reader::shard_id(Log::Offsets, 3));
        let statuses = [(standby.clone(), ReplicaCode::Standby), (primary.clone(), ReplicaCode::Primary)].into();
        let now = Some(std::time::Instant::now());
        let long_ago = std::time::Instant::now().checked_sub(Duration::from_secs(20));
        // Both say where they are, at their log's end; the standby's primary
        // (elsewhere) has written nothing for 20 s.
        let progress = [
            (standby.clone(), Progress { next_offset: 50, log_end: 50, published: now, applied: long_ago }),
            (primary.clone(), Progress { next_offset: 70, log_end: 70, published: now, applied: now }),
        ]
        .into();
        assert_eq!(watch_ages(Log::Offsets, &monitor, &statuses, &progress, 4, Duration::ZERO), [1]);
        let why = monitor.verdict().reason.unwrap_or_default();
        assert!(why.contains("partition 1") && why.contains("20 s old"), "{why}");
        // A record arrives: released.
        let progress = [(standby, Progress { next_offset: 51, log_end: 51, published: now, applied: now })].into();
        assert_eq!(watch_ages(Log::Offsets, &monitor, &statuses, &progress, 4, Duration::ZERO), Vec::<i32>::new());
        assert!(monitor.verdict().ready || !monitor.verdict().reason.unwrap_or_default().contains("old"));
    }
}
