//! [`Units`]: the lag monitor's partition units — one [`GroupOffsets`] per
//! `__consumer_offsets` partition (or one [`ShareState`] per
//! `__share_group_state` partition), each behind its own lock so that readers
//! of different partitions never wait on each other — and the counters of
//! what was applied to them. No I/O, no clock.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, RwLock, RwLockReadGuard};

use kshard_offsets::RecordType;

use crate::group_offsets::{Applied, GroupOffsets, Skipped, Transactional};
use crate::share_state::{ShareApplied, ShareState};
use crate::striped_count::StripedCount;

/// The state of one partition of a log kshard reads, built by applying its
/// records in order.
pub trait Unit: Default + Send + std::fmt::Debug {
    /// What applying a record did.
    type Applied;
    /// Applies one record (see [`RecordAt`]).
    fn apply_at(&mut self, record: &RecordAt<'_>) -> Result<Self::Applied, Skipped>;
    /// Whether a record was of a type this version of kshard does not know.
    fn is_unknown(applied: &Self::Applied) -> bool;
    /// The next offset to read, once something was read.
    fn next_offset(&self) -> Option<i64>;
    /// Moves the position without a record.
    fn advance_to(&mut self, next_offset: i64);
    /// Drops interned names no longer used.
    fn sweep_names(&mut self) -> usize;
}

impl Unit for GroupOffsets {
    type Applied = Applied;

    fn apply_at(&mut self, r: &RecordAt<'_>) -> Result<Applied, Skipped> {
        self.apply_record(r.offset, r.transactional, r.key, r.value)
    }

    fn is_unknown(applied: &Applied) -> bool {
        matches!(applied, Applied::Ignored(RecordType::Unknown(_)))
    }

    fn next_offset(&self) -> Option<i64> {
        GroupOffsets::next_offset(self)
    }

    fn advance_to(&mut self, next_offset: i64) {
        GroupOffsets::advance_to(self, next_offset);
    }

    fn sweep_names(&mut self) -> usize {
        GroupOffsets::sweep_names(self)
    }
}

impl Unit for ShareState {
    type Applied = ShareApplied;

    // The share coordinator writes no transactions: markers only move the position.
    fn apply_at(&mut self, r: &RecordAt<'_>) -> Result<ShareApplied, Skipped> {
        if let Some(Transactional::Marker { .. }) = r.transactional {
            self.advance_to(r.offset + 1);
            return Ok(ShareApplied::Unknown);
        }
        self.apply_bytes(r.offset, r.key, r.value)
    }

    fn is_unknown(applied: &ShareApplied) -> bool {
        *applied == ShareApplied::Unknown
    }

    fn next_offset(&self) -> Option<i64> {
        ShareState::next_offset(self)
    }

    fn advance_to(&mut self, next_offset: i64) {
        ShareState::advance_to(self, next_offset);
    }

    fn sweep_names(&mut self) -> usize {
        ShareState::sweep_names(self)
    }
}

/// Counters of what the reader saw.
#[derive(Debug, Default)]
pub struct ReadCounters {
    /// Records read from the topic (`__consumer_offsets`, `__share_group_state`).
    pub records: StripedCount,
    /// Records skipped because the key was null.
    pub null_key: AtomicU64,
    /// Records skipped because the key did not decode.
    pub malformed_key: AtomicU64,
    /// Records skipped because the value did not decode.
    pub malformed_value: AtomicU64,
    /// Record batches skipped whole: a bad CRC, a header or record that
    /// does not add up, a codec's error (each logged with its partition
    /// and offset).
    pub corrupt_batch: AtomicU64,
    /// Records of a type this version of kshard does not know.
    pub unknown_type: AtomicU64,
    /// Admin-API mode: groups whose OffsetFetch failed at a scrape (their
    /// previous offsets were kept).
    pub offset_fetch_errors: AtomicU64,
}

/// A record the monitor could not use, for the caller to log.
#[derive(Debug)]
pub struct SkippedRecord {
    /// The `__consumer_offsets` partition.
    pub partition: i32,
    /// The record's offset.
    pub offset: i64,
    /// Why it was skipped.
    pub skipped: Skipped,
}

/// One record to apply to its partition's unit.
#[derive(Debug, Clone, Copy)]
pub struct RecordAt<'a> {
    /// The `__consumer_offsets` partition.
    pub partition: i32,
    /// Its offset.
    pub offset: i64,
    /// Its part in a transaction, when read with it.
    pub transactional: Option<Transactional>,
    /// Its key.
    pub key: Option<&'a [u8]>,
    /// Its value.
    pub value: Option<&'a [u8]>,
}

/// The partition units and their counters.
#[derive(Debug, Default)]
pub struct Units<U = GroupOffsets> {
    /// Never drops a unit, and [`Units::replace`] writes in place: a
    /// handle from [`Units::unit`] stays the partition's unit.
    units: RwLock<BTreeMap<i32, Arc<Mutex<U>>>>,
    counters: ReadCounters,
}

pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic while holding a lock leaves plain data behind; keep serving it.
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl<U: Unit> Units<U> {
    fn read(&self) -> RwLockReadGuard<'_, BTreeMap<i32, Arc<Mutex<U>>>> {
        self.units.read().unwrap_or_else(PoisonError::into_inner)
    }

    /// Makes sure `partition` has a unit (an empty one at first).
    pub fn track(&self, partition: i32) {
        self.units.write().unwrap_or_else(PoisonError::into_inner).entry(partition).or_default();
    }

    /// Changes the unit of `partition` with `f` (creating it empty first).
    pub fn update<R>(&self, partition: i32, f: impl FnOnce(&mut U) -> R) -> R {
        loop {
            let units = self.read();
            if let Some(unit) = units.get(&partition) {
                return f(&mut lock(unit));
            }
            drop(units);
            self.track(partition);
        }
    }

    /// Applies `record` to its unit (see [`GroupOffsets::apply_record`]), then
    /// `after` with the unit, under the same lock; counts what it was.
    pub fn apply_then<R>(
        &self,
        record: RecordAt<'_>,
        after: impl FnOnce(&U) -> R,
    ) -> (Result<U::Applied, SkippedRecord>, R) {
        self.counters.records.add(record.partition, 1);
        let (result, then) = self.update(record.partition, |unit| {
            let result = unit.apply_at(&record);
            (result, after(unit))
        });
        (self.count(record.partition, record.offset, result), then)
    }

    fn count(
        &self,
        partition: i32,
        offset: i64,
        result: Result<U::Applied, Skipped>,
    ) -> Result<U::Applied, SkippedRecord> {
        match result {
            Ok(applied) => {
                if U::is_unknown(&applied) {
                    self.counters.unknown_type.fetch_add(1, Ordering::Relaxed);
                }
                Ok(applied)
            }
            Err(skipped) => {
                let counter = match skipped.reason() {
                    "null_key" => &self.counters.null_key,
                    "malformed_key" => &self.counters.malformed_key,
                    _ => &self.counters.malformed_value,
                };
                counter.fetch_add(1, Ordering::Relaxed);
                Err(SkippedRecord { partition, offset, skipped })
            }
        }
    }

    /// The next offset of `partition`'s unit, if it has read anything.
    pub fn position(&self, partition: i32) -> Option<i64> {
        self.read().get(&partition).and_then(|u| lock(u).next_offset())
    }

    /// Each unit's next offset (`None`: nothing read yet), by partition.
    pub fn positions(&self) -> Vec<(i32, Option<i64>)> {
        self.read().iter().map(|(partition, unit)| (*partition, lock(unit).next_offset())).collect()
    }

    /// Moves `partition`'s unit to `next` (the reader saw its end there).
    pub fn advance(&self, partition: i32, next: i64) {
        if let Some(unit) = self.read().get(&partition) {
            lock(unit).advance_to(next);
        }
    }

    /// Replaces the unit of `partition` wholesale (admin-API mode rebuilds
    /// its one unit at every scrape; a new primary rebuilds from its store).
    pub fn replace(&self, partition: i32, unit: U) {
        if let Some(held) = self.read().get(&partition) {
            *lock(held) = unit;
            return;
        }
        let mut units = self.units.write().unwrap_or_else(PoisonError::into_inner);
        match units.get(&partition) {
            Some(held) => *lock(held) = unit,
            None => {
                units.insert(partition, Arc::new(Mutex::new(unit)));
            }
        }
    }

    /// The unit of `partition` (tracked if it was not), for the one reader
    /// of that partition to apply records to without the map's lock (see
    /// [`Units::apply_in`]): per record, only the unit's own lock.
    pub fn unit(&self, partition: i32) -> Arc<Mutex<U>> {
        loop {
            if let Some(unit) = self.read().get(&partition) {
                return Arc::clone(unit);
            }
            self.track(partition);
        }
    }

    /// Applies `record` to `unit` (one of [`Units::unit`]); counts what it
    /// was, but not that it was read: its reader counts the records it
    /// applies in bulk ([`Units::count_read`]), not with an atomic add each.
    pub fn apply_in(&self, unit: &Mutex<U>, record: RecordAt<'_>) -> Result<U::Applied, SkippedRecord> {
        let result = lock(unit).apply_at(&record);
        self.count(record.partition, record.offset, result)
    }

    /// Counts `n` records of `partition` read (applied with [`Units::apply_in`]).
    pub fn count_read(&self, partition: i32, n: u64) {
        if n > 0 {
            self.counters.records.add(partition, n);
        }
    }

    /// Calls `f` with each unit in turn, holding its lock only during the call.
    pub fn for_each(&self, mut f: impl FnMut(i32, &U)) {
        for (partition, unit) in self.read().iter() {
            f(*partition, &lock(unit));
        }
    }

    /// Drops interned names no longer used, in every unit.
    pub fn sweep_names(&self) -> usize {
        self.read().values().map(|u| lock(u).sweep_names()).sum()
    }

    /// The counters of what was applied.
    pub fn counters(&self) -> &ReadCounters {
        &self.counters
    }
}

/// A log's units seen whatever they hold (the offsets topic's groups, the
/// share state's share-partitions): the per-log state the monitor keeps,
/// [`crate::Monitor::log`].
pub trait LogUnits: Send + Sync {
    /// Makes sure `partition` has a unit (an empty one at first).
    fn track(&self, partition: i32);
    /// Each unit's next offset (`None`: nothing read yet), by partition.
    fn positions(&self) -> Vec<(i32, Option<i64>)>;
    /// Empties `partition`'s unit (its log was cut under the reader).
    fn clear(&self, partition: i32);
    /// Moves `partition`'s unit to `next` (the reader saw its end there).
    fn advance(&self, partition: i32, next: i64);
    /// The counters of what was read.
    fn counters(&self) -> &ReadCounters;
}

impl<U: Unit> LogUnits for Units<U> {
    fn track(&self, partition: i32) {
        Units::track(self, partition);
    }

    fn positions(&self) -> Vec<(i32, Option<i64>)> {
        Units::positions(self)
    }

    fn clear(&self, partition: i32) {
        self.replace(partition, U::default());
    }

    fn advance(&self, partition: i32, next: i64) {
        Units::advance(self, partition, next);
    }

    fn counters(&self) -> &ReadCounters {
        Units::counters(self)
    }
}

impl Units<GroupOffsets> {
    /// For each unit, how many transactions are open in it whose offset
    /// commits wait for their marker.
    pub fn open_transactions(&self) -> Vec<(i32, usize)> {
        self.read().iter().map(|(p, u)| (*p, lock(u).open_transactions().len())).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_partitions_unit_stays_the_one_its_reader_holds_through_a_replace() {
        let units: Units = Units::default();
        let held = units.unit(3);
        let marker = RecordAt {
            partition: 3,
            offset: 41,
            transactional: Some(Transactional::Marker { producer_id: 1, committed: true }),
            key: None,
            value: None,
        };
        assert!(units.apply_in(&held, marker).is_ok());
        assert_eq!(units.position(3), Some(42), "applied to the partition's unit");
        let null_key = RecordAt { offset: 42, transactional: None, ..marker };
        assert!(units.apply_in(&held, null_key).is_err());
        assert_eq!(units.counters().null_key.load(Ordering::Relaxed), 1);
        assert_eq!(units.counters().records.get(), 0, "its reader counts what it read");
        units.count_read(3, 2);
        assert_eq!(units.counters().records.get(), 2);
        let mut rebuilt = GroupOffsets::default();
        rebuilt.advance_to(100);
        units.replace(3, rebuilt);
        assert_eq!(lock(&held).next_offset(), Some(100), "the reader's unit is the one put in place");
        assert!(Arc::ptr_eq(&held, &units.unit(3)));
    }
}
