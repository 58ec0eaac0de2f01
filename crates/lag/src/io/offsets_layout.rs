//! [`OffsetsLayout`]: what a shard of `__consumer_offsets` keeps in its
//! store — a compacted copy of its partition, the groups' commit counts and
//! the records of open transactions (the rules are pure, in
//! `state/shard_store.rs`) — and how the monitor's unit follows it.
//!
//! A primary reads every record (`read_uncommitted`) and applies a
//! transaction's commits at its COMMIT marker, as Kafka's coordinator does,
//! so that a transaction left open holds back nothing else of its partition.

use kshard_runtime::recovery_log::Mutation;
use kshard_runtime::{AppError, Isolation, Message, Store, Transaction, Transactional};
use tracing::warn;

use crate::catch_up::Log;
use crate::group_offsets::{Applied, GroupOffsets};
use crate::log_shards::{Layout, record_at};
use crate::monitor::Monitor;
use crate::shard_store::commit_counts::CommitCounts;
use crate::shard_store::{follow_transaction, pending, split_stored, stored_value, unit_from_store};
use crate::units::Units;

/// The store layout of the offsets topic's shards.
#[derive(Debug, Clone, Copy)]
pub(crate) struct OffsetsLayout {
    /// What the sources are read for: every record (kshard's reader; open
    /// transactions are set aside here), or committed ones (librdkafka).
    pub(crate) isolation: Isolation,
}

impl Default for OffsetsLayout {
    fn default() -> Self {
        OffsetsLayout { isolation: Isolation::Uncommitted }
    }
}

impl OffsetsLayout {
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
        monitor: &Monitor,
        counts: &mut CommitCounts,
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
        let (_, commits) = monitor.units().apply_then(record_at(m, None, None), |unit| {
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
                    counts.set(group, Some(n));
                }
            }
        }
        Ok(())
    }
}

impl Layout for OffsetsLayout {
    type Unit = GroupOffsets;
    const LOG: Log = Log::Offsets;

    fn units(monitor: &Monitor) -> &Units<GroupOffsets> {
        monitor.units()
    }

    /// Each group's commit count, written once per transaction.
    type Pending = CommitCounts;

    fn consume(
        &self,
        monitor: &Monitor,
        counts: &mut CommitCounts,
        txn: &mut Transaction<'_>,
        m: &Message<'_>,
    ) -> Result<(), AppError> {
        if let Some(Transactional::Marker { producer_id, committed }) = m.transactional {
            return self.end_transaction(monitor, counts, txn, m, producer_id, committed);
        }
        // An offset tombstone drops the commits of it that open transactions
        // set aside: which producers have one, asked before it applies.
        let mut open = Vec::new();
        if let (Some(key), None) = (m.key, m.value) {
            monitor.units().update(m.partition, |unit| open = unit.pending_producers_of(key));
        }
        // The group's count of commits after the record, read under the
        // unit's lock the record was applied under.
        let group = m.key.and_then(kshard_offsets::RecordKey::group_of);
        let (applied, commits) = monitor
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
        // Each group's count of commits is kept too (written at the
        // transaction's end): every member, and the next primary, then
        // export the same counter.
        if let (Ok(applied), Some(group), Some(commits)) = (&applied, group, commits) {
            match (applied, commits) {
                (Applied::OffsetCommitted, Some(n)) => counts.set(group, Some(n)),
                (Applied::OffsetDeleted | Applied::GroupDeleted, None) => counts.set(group, None),
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

    fn apply(&self, monitor: &Monitor, unit: &std::sync::Mutex<GroupOffsets>, m: &Message<'_>) {
        if let Err(s) = monitor.units().apply_in(unit, record_at(m, m.key, m.value)) {
            warn!(partition = s.partition, offset = s.offset, reason = s.skipped.reason(), error = %s.skipped, topic = m.topic, "skipped a record of the offsets topic");
        }
    }

    fn finalize(counts: &mut CommitCounts, txn: &mut Transaction<'_>) {
        for (key, count) in counts.take() {
            match count {
                Some(count) => txn.put(key, count),
                None => txn.delete(key),
            }
        }
    }

    fn rebuild(&self, store: &dyn Store, next: Option<i64>, partition: i32) -> Result<GroupOffsets, AppError> {
        let mut unit = unit_from_store(store, next).map_err(AppError::new)?;
        self.without_stranded_transactions(&mut unit, partition);
        Ok(unit)
    }

    fn follow(unit: &mut GroupOffsets, mutations: &[Mutation], next: Option<i64>) {
        follow_transaction(unit, mutations, next);
    }

    /// Every record where the reader can (transactions are set aside here
    /// until their marker), else committed ones.
    fn isolation(&self) -> Isolation {
        self.isolation
    }

    fn size(unit: &GroupOffsets) -> usize {
        unit.offset_count()
    }
}

/// The lag application over the offsets topic's shards.
#[cfg(test)]
pub(crate) type OffsetsShards = crate::log_shards::LogShards<OffsetsLayout>;
