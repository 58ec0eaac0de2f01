//! [`ShareLayout`]: what a shard of `__share_group_state` keeps in its store
//! — each share-partition's folded state, archived counts included (the
//! rules are pure, in `state/share_store.rs`) — and how the monitor's unit
//! follows it. The share coordinator writes no transactions.

use kshard_runtime::recovery_log::Mutation;
use kshard_runtime::{AppError, Isolation, Message, Store, Transaction};
use tracing::warn;

use crate::catch_up::Log;
use crate::log_shards::{Layout, record_at};
use crate::monitor::Monitor;
use crate::share_state::ShareState;
use crate::share_store::{entry_after, follow_share_transaction, share_unit_from_store};
use crate::units::Units;

/// The store layout of the share-state topic's shards.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ShareLayout {
    /// As for the offsets topic (markers, if any, only move the position).
    pub(crate) isolation: Isolation,
}

impl Layout for ShareLayout {
    type Unit = ShareState;
    const LOG: Log = Log::ShareState;

    fn units(monitor: &Monitor) -> &Units<ShareState> {
        monitor.share_units()
    }

    type Pending = ();

    fn consume(
        &self,
        monitor: &Monitor,
        _: &mut (),
        txn: &mut Transaction<'_>,
        m: &Message<'_>,
    ) -> Result<(), AppError> {
        // The share-partition's state after the record, read under the lock
        // it was applied under.
        let (applied, entry) = monitor
            .share_units()
            .apply_then(record_at(m, m.key, m.value), |unit| m.key.and_then(|k| entry_after(unit, k)));
        if let Err(s) = &applied {
            // Counted and logged, like the direct reader; the state it would
            // have changed stays as it was.
            warn!(partition = s.partition, offset = s.offset, reason = s.skipped.reason(), error = %s.skipped, topic = m.topic, "skipped a record of the share-state topic");
            return Ok(());
        }
        match entry {
            Some((key, Some(state))) => txn.put(key, state),
            Some((key, None)) => txn.delete(key),
            None => {}
        }
        Ok(())
    }

    fn apply(&self, monitor: &Monitor, unit: &std::sync::Mutex<ShareState>, m: &Message<'_>) {
        if let Err(s) = monitor.share_units().apply_in(unit, record_at(m, m.key, m.value)) {
            warn!(partition = s.partition, offset = s.offset, reason = s.skipped.reason(), error = %s.skipped, topic = m.topic, "skipped a record of the share-state topic");
        }
    }

    /// Every entry is written as its record comes: nothing set aside.
    fn finalize(_: &mut (), _: &mut Transaction<'_>) {}

    fn rebuild(&self, store: &dyn Store, next: Option<i64>, _: i32) -> Result<ShareState, AppError> {
        share_unit_from_store(store, next).map_err(AppError::new)
    }

    fn follow(unit: &mut ShareState, mutations: &[Mutation], next: Option<i64>) {
        follow_share_transaction(unit, mutations, next);
    }

    fn isolation(&self) -> Isolation {
        self.isolation
    }

    fn size(unit: &ShareState) -> usize {
        unit.partitions().count()
    }
}
