//! The lag monitor as an application of `kshard-runtime`: one shard per
//! partition of the offsets topic, its store a compacted copy of that
//! partition, so that a restart on the data directory reads only what was
//! committed since it stopped.
//!
//! The store's layout, and how a unit is rebuilt from it or follows a
//! played transaction, are pure and live in `state/shard_store.rs`. A
//! primary applies each record to the monitor's unit as it consumes it;
//! when a replica becomes primary, its unit is rebuilt from the store, then
//! positioned at the store's checkpoint. A primary reads every record
//! (`read_uncommitted`) and applies a transaction's commits at its COMMIT
//! marker, as Kafka's coordinator does, so that a transaction left open
//! holds back nothing else of its partition.
//!
//! Every member holds a replica of every shard (more hot standbys are wanted
//! than there are members), and a standby's unit follows the transactions it
//! plays: each member serves the whole cluster's lag from its own memory, a
//! scrape never waits on another member, and when a member dies the
//! survivors already hold its partitions' state. A partition with no replica
//! here, or with no primary anywhere, is normal for a moment (a shard moving,
//! a fail-over) and a problem on `/ready` once it lasts (see [`Event::Hold`]).

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use kshard_runtime::Progress;
use kshard_runtime::ReplicaCode;
use kshard_runtime::ShardSpec;
use kshard_runtime::Store;
use kshard_runtime::recovery_log::{Mutation, SourceOffset};
use kshard_runtime::{AppError, Application, Isolation, Message, Transaction, Transactional};
use tracing::{info, warn};

use crate::group_offsets::{Applied, GroupOffsets};
use crate::monitor::Monitor;
use crate::readiness::Event;
use crate::shard_store::{commits_key, follow_transaction, pending, split_stored, stored_value, unit_from_store};
use crate::units::RecordAt;

/// The worker's name in logs and on `/ready` while a shard is not served.
pub(crate) const WORKER: &str = crate::offsets_reader::WORKER;

/// The lag application.
pub(crate) struct OffsetsShards {
    pub(crate) monitor: Arc<Monitor>,
    /// Partitions of the offsets topic (it may grow).
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
    pub(crate) stopping: Arc<AtomicBool>,
    /// What the sources are read for: every record (kshard's reader; open
    /// transactions are set aside here), or committed ones (librdkafka).
    pub(crate) isolation: Isolation,
}

impl OffsetsShards {
    pub(crate) fn new(monitor: Arc<Monitor>, partitions: i32, stopping: Arc<AtomicBool>) -> Self {
        OffsetsShards {
            monitor,
            partitions: AtomicI32::new(partitions),
            primaries: Mutex::new(BTreeSet::new()),
            standbys: Mutex::new(BTreeSet::new()),
            grace: Duration::from_secs(30),
            recovering: Mutex::new(BTreeSet::new()),
            stopping,
            isolation: Isolation::Uncommitted,
        }
    }
}

impl OffsetsShards {
    /// Says on `/ready` that reading works once every partition's shard has
    /// a replica here (primary, or a standby following it). A partition
    /// reading again after a recovery is a condition of its own (see
    /// [`recovering_key`]), not a failure of the reader.
    pub(crate) fn settle(&self) {
        let primaries = self.primaries.lock().unwrap_or_else(PoisonError::into_inner).clone();
        let standbys = self.standbys.lock().unwrap_or_else(PoisonError::into_inner).clone();
        let held = primaries.union(&standbys).count() as i32;
        if held >= self.partitions.load(Ordering::Acquire) {
            self.monitor.step(Event::WorkerRunning(WORKER));
        }
    }

    /// Partition `partition` has a replica here again.
    fn held(&self, partition: i32) {
        self.monitor.step(Event::Release(held_key(partition)));
    }
}

/// The condition ([`Event::Hold`]) of a partition read again from its
/// store's checkpoint after it was served further.
fn recovering_key(partition: i32) -> String {
    format!("partition {partition} reading again")
}

/// The condition ([`Event::Hold`]) of a partition without a replica here.
fn held_key(partition: i32) -> String {
    format!("no replica here of partition {partition}")
}

impl OffsetsShards {
    /// A store written by kshard's reader (every record) holds open
    /// transactions whose markers a reader of committed records never
    /// hands out (librdkafka now reads): they are dropped, said, not kept
    /// open forever. A transaction among them that commits later is then
    /// shown from the group's next commit on.
    fn without_stranded_transactions(&self, unit: &mut GroupOffsets, partition: i32) {
        if self.isolation == Isolation::Uncommitted || unit.open_transactions().is_empty() {
            return;
        }
        let producers: Vec<i64> = unit.open_transactions().iter().map(|(p, _)| p).collect();
        warn!(
            partition,
            ?producers,
            "the store holds open transactions, but librdkafka reads committed records only: their pending commits are dropped"
        );
        for producer in producers {
            unit.drop_transaction(producer);
        }
    }

    /// The marker ending `producer`'s transaction: its records set aside
    /// go; at a COMMIT the store keeps each in place of its key's record,
    /// unless that record is later in the log (Kafka's rule, as the unit
    /// applies it).
    fn end_transaction(
        &self,
        txn: &mut Transaction<'_>,
        m: &Message<'_>,
        producer: i64,
        committed: bool,
    ) -> Result<(), AppError> {
        let records = txn.scan_prefix(&pending::producer_prefix(producer))?;
        let mut groups: Vec<&str> = records
            .iter()
            .filter_map(|(k, _)| pending::parse(k).and_then(|(_, key)| kshard_offsets::RecordKey::group_of(key)))
            .collect();
        groups.sort_unstable();
        groups.dedup();
        let (_, commits) = self.monitor.units().apply_then(record_at(m, None, None), |unit| {
            groups.iter().map(|g| unit.group(g).map(|x| x.commits)).collect::<Vec<_>>()
        });
        for (entry, stored) in &records {
            txn.delete(entry.as_slice());
            let (Some((_, key)), Some((offset, _))) = (pending::parse(entry), split_stored(stored)) else {
                continue;
            };
            if !committed {
                continue;
            }
            let in_place = txn.get(key)?;
            if in_place.as_deref().and_then(split_stored).is_none_or(|(at, _)| at < offset) {
                txn.put(key, stored.as_slice());
            }
        }
        if committed {
            for (group, n) in groups.iter().zip(commits) {
                if let Some(n) = n {
                    txn.put(commits_key(group), n.to_be_bytes());
                }
            }
        }
        Ok(())
    }
}

/// `m` as a record for its unit, with `key` and `value` (a marker's are not
/// the unit's to decode).
fn record_at<'a>(m: &Message<'_>, key: Option<&'a [u8]>, value: Option<&'a [u8]>) -> RecordAt<'a> {
    RecordAt { partition: m.partition, offset: m.offset, transactional: m.transactional, key, value }
}

fn partition_of(shard: &ShardSpec) -> Result<i32, AppError> {
    shard.sources.first().map(|s| s.partition).ok_or_else(|| format!("shard {} has no source", shard.id).into())
}

impl Application for OffsetsShards {
    fn consume(&self, _: &ShardSpec, txn: &mut Transaction<'_>, m: &Message<'_>) -> Result<(), AppError> {
        if let Some(Transactional::Marker { producer_id, committed }) = m.transactional {
            return self.end_transaction(txn, m, producer_id, committed);
        }
        // An offset tombstone drops the commits of it that open transactions
        // set aside: which producers have one, asked before it applies.
        let mut open = Vec::new();
        if let (Some(key), None) = (m.key, m.value) {
            self.monitor.units().update(m.partition, |unit| open = unit.pending_producers_of(key));
        }
        // The group's count of commits after the record, read under the
        // unit's lock the record was applied under.
        let group = m.key.and_then(kshard_offsets::RecordKey::group_of);
        let (applied, commits) = self
            .monitor
            .units()
            .apply_then(record_at(m, m.key, m.value), |unit| group.map(|g| unit.group(g).map(|x| x.commits)));
        if let Err(s) = &applied {
            // Counted and logged, like the direct reader. Still kept: a later
            // kshard that can decode it restores it.
            warn!(partition = s.partition, offset = s.offset, reason = s.skipped.reason(), error = %s.skipped, topic = m.topic, "skipped a record of the offsets topic");
        }
        let Some(key) = m.key else { return Ok(()) };
        // A transaction's commit waits in the store for the marker, as in the
        // unit; so does a record of a transaction that did not decode (kept,
        // like any, for a kshard that can; dropped if the transaction aborts).
        if let (Ok(Applied::OffsetPending) | Err(_), Some(Transactional::Record { producer_id }), Some(value)) =
            (&applied, m.transactional, m.value)
        {
            txn.put(pending::key(producer_id, key), stored_value(m.offset, value));
            return Ok(());
        }
        // Each group's count of commits is kept too: every member, and the
        // next primary, then export the same counter.
        if let (Ok(applied), Some(group), Some(commits)) = (&applied, group, commits) {
            match (applied, commits) {
                (Applied::OffsetCommitted, Some(n)) => txn.put(commits_key(group), n.to_be_bytes()),
                (Applied::OffsetDeleted | Applied::GroupDeleted, None) => txn.delete(commits_key(group)),
                _ => {}
            }
        }
        match m.value {
            Some(value) => txn.put(key, stored_value(m.offset, value)),
            None => {
                txn.delete(key);
                for producer in open {
                    txn.delete(pending::key(producer, key));
                }
            }
        }
        Ok(())
    }

    /// Every record where the reader can (transactions are set aside here
    /// until their marker), else committed ones.
    fn isolation(&self) -> Isolation {
        self.isolation
    }

    fn recovered(&self, shard: &ShardSpec, store: &dyn Store, offsets: &[SourceOffset]) -> Result<(), AppError> {
        let partition = partition_of(shard)?;
        let started = Instant::now();
        let next = offsets.iter().find(|o| o.partition == partition).map(|o| o.offset);
        let mut unit = unit_from_store(store, next).map_err(AppError::new)?;
        self.without_stranded_transactions(&mut unit, partition);
        let (groups, offsets_known) = (unit.groups().count(), unit.offset_count());
        // A unit ahead of the store held records a primary here applied but
        // never committed (it failed): what was shown goes back until read again.
        let shown = self.monitor.units().position(partition);
        let behind_shown = shown.is_some_and(|shown| shown > next.unwrap_or(0));
        self.monitor.units().replace(partition, unit);
        info!(shard = %shard.id, partition, groups, offsets = offsets_known, next_offset = ?next, ms = started.elapsed().as_millis() as u64, "restored the partition's state from the store");
        self.standbys.lock().unwrap_or_else(PoisonError::into_inner).remove(&partition);
        self.primaries.lock().unwrap_or_else(PoisonError::into_inner).insert(partition);
        self.held(partition);
        if behind_shown && self.monitor.is_caught_up() {
            // Serving already: this partition's lag goes back to its checkpoint
            // until it has read to the end again.
            self.recovering.lock().unwrap_or_else(PoisonError::into_inner).insert(partition);
            // Not a failure (nothing to restart, no backoff): a condition,
            // not current at once, released at the partition's end.
            let why = format!("partition {partition} is reading again from its store's checkpoint");
            let at = self.monitor.now();
            self.monitor.step(Event::Hold { key: recovering_key(partition), why, grace: Duration::ZERO, at });
        }
        self.settle();
        Ok(())
    }

    fn following(&self, shard: &ShardSpec, store: &dyn Store, offsets: &[SourceOffset]) -> Result<(), AppError> {
        let partition = partition_of(shard)?;
        let next = offsets.iter().find(|o| o.partition == partition).map(|o| o.offset);
        let mut unit = unit_from_store(store, next).map_err(AppError::new)?;
        self.without_stranded_transactions(&mut unit, partition);
        // A standby never shows less than this member showed already.
        if self.monitor.units().position(partition).is_none_or(|shown| next.is_some_and(|n| n >= shown)) {
            self.monitor.units().replace(partition, unit);
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
        self.monitor.units().update(partition, |unit| follow_transaction(unit, mutations, next));
    }

    fn end_of_source(&self, _: &ShardSpec, _: &str, partition: i32, next_offset: Option<i64>) {
        self.monitor.end_of_partition(partition, next_offset);
        if self.recovering.lock().unwrap_or_else(PoisonError::into_inner).remove(&partition) {
            self.monitor.step(Event::Release(recovering_key(partition)));
        }
    }

    fn stopped(&self, shard: &ShardSpec) {
        let Ok(partition) = partition_of(shard) else { return };
        let was_primary = self.primaries.lock().unwrap_or_else(PoisonError::into_inner).remove(&partition);
        let was_standby = self.standbys.lock().unwrap_or_else(PoisonError::into_inner).remove(&partition);
        if self.recovering.lock().unwrap_or_else(PoisonError::into_inner).remove(&partition) {
            self.monitor.step(Event::Release(recovering_key(partition)));
        }
        if (was_primary || was_standby) && !self.stopping.load(Ordering::Acquire) {
            // Its state here stays, and is served, until the grace runs out:
            // the shard is moving, or restarting after a failure.
            let why = format!("the shard of partition {partition} has no replica on this member");
            self.monitor.step(Event::Hold { key: held_key(partition), why, grace: self.grace, at: self.monitor.now() });
        }
    }
}

/// Holds a condition ([`Event::Hold`]) for each partition whose shard has no
/// primary anywhere in the cluster (a fail-over under way), so that one that
/// lasts past `grace` turns `/ready` 503; returns those partitions.
pub(crate) fn watch_primaries(
    monitor: &Monitor,
    cluster: &kshard_runtime::ClusterView,
    partitions: i32,
    grace: Duration,
) -> Vec<i32> {
    hold_each(monitor, partitions, grace, |p, shard| {
        let key = format!("no primary for partition {p}");
        let why = cluster.primary(shard).is_none().then(|| format!("shard {shard} (partition {p}) has no primary"));
        (key, why)
    })
}

/// For each partition (and its shard), holds the condition `check` names
/// when it says why, and releases it otherwise; returns the partitions held.
fn hold_each(
    monitor: &Monitor,
    partitions: i32,
    grace: Duration,
    check: impl Fn(i32, &str) -> (String, Option<String>),
) -> Vec<i32> {
    let at = monitor.now();
    let mut held = Vec::new();
    for p in 0..partitions {
        let (key, why) = check(p, &crate::shards_reader::shard_id(p));
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
    monitor: &Monitor,
    statuses: &std::collections::BTreeMap<String, ReplicaCode>,
    progress: &std::collections::BTreeMap<String, Progress>,
    partitions: i32,
    grace: Duration,
) -> Vec<i32> {
    let at = monitor.now();
    hold_each(monitor, partitions, grace, |p, shard| {
        let key = format!("standby of partition {p} behind");
        let standby = statuses.get(shard) == Some(&ReplicaCode::Standby);
        let why = progress.get(shard).filter(|_| standby).and_then(|progress| {
            let silent = progress.published.map(|t| at.saturating_duration_since(t)).filter(|d| *d > STANDBY_SILENT);
            match (silent, progress.behind()) {
                (Some(d), _) => Some(format!(
                    "the standby here of shard {shard} (partition {p}) has not said where it is for {} s",
                    d.as_secs()
                )),
                (None, n) if n > STANDBY_BEHIND => {
                    Some(format!("the standby here of shard {shard} (partition {p}) is {n} records behind its log"))
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
    monitor: &Monitor,
    statuses: &std::collections::BTreeMap<String, ReplicaCode>,
    progress: &std::collections::BTreeMap<String, Progress>,
    partitions: i32,
    grace: Duration,
) -> Vec<i32> {
    let at = monitor.now();
    hold_each(monitor, partitions, grace, |p, shard| {
        let key = format!("state of partition {p} old");
        let serving = matches!(statuses.get(shard), Some(ReplicaCode::Standby | ReplicaCode::Primary));
        let why = progress.get(shard).filter(|_| serving).and_then(|progress| {
            let age = at.saturating_duration_since(progress.applied?);
            (age > STATE_OLD).then(|| {
                format!(
                    "the state here of shard {shard} (partition {p}) is {} s old: its primary has committed nothing since (gone, or stuck)",
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
        let shard = crate::shards_reader::shard_id(2);
        let statuses = [(shard.clone(), ReplicaCode::Standby)].into();
        let now = Some(std::time::Instant::now());
        let far = [(shard.clone(), Progress { next_offset: 10, log_end: 5_000, published: now, applied: now })].into();
        assert_eq!(watch_standbys(&monitor, &statuses, &far, 4, Duration::ZERO), [2]);
        let why = monitor.verdict().reason.unwrap_or_default();
        assert!(why.contains("partition 2") && why.contains("4990 records behind"), "{why}");
        let near =
            [(shard.clone(), Progress { next_offset: 4_500, log_end: 5_000, published: now, applied: now })].into();
        assert_eq!(watch_standbys(&monitor, &statuses, &near, 4, Duration::ZERO), Vec::<i32>::new());
        let why = monitor.verdict().reason.unwrap_or_default();
        assert!(!why.contains("behind"), "released once within the bound: {why}");
        // Stuck: near the end when it last said, 20 s ago.
        let long_ago = std::time::Instant::now().checked_sub(Duration::from_secs(20));
        let stuck =
            [(shard, Progress { next_offset: 4_999, log_end: 5_000, published: long_ago, applied: long_ago })].into();
        assert_eq!(watch_standbys(&monitor, &statuses, &stuck, 4, Duration::ZERO), [2]);
        let why = monitor.verdict().reason.unwrap_or_default();
        assert!(why.contains("partition 2") && why.contains("has not said where it is"), "{why}");
    }

    #[test]
    fn state_whose_primary_committed_nothing_for_long_is_named_with_its_age() {
        let monitor = Monitor::new(crate::MonitorSettings::default());
        let (standby, primary) = (crate::shards_reader::shard_id(1), crate::shards_reader::shard_id(3));
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
        assert_eq!(watch_ages(&monitor, &statuses, &progress, 4, Duration::ZERO), [1]);
        let why = monitor.verdict().reason.unwrap_or_default();
        assert!(why.contains("partition 1") && why.contains("20 s old"), "{why}");
        // A record arrives: released.
        let progress = [(standby, Progress { next_offset: 51, log_end: 51, published: now, applied: now })].into();
        assert_eq!(watch_ages(&monitor, &statuses, &progress, 4, Duration::ZERO), Vec::<i32>::new());
        assert!(monitor.verdict().ready || !monitor.verdict().reason.unwrap_or_default().contains("old"));
    }
}
