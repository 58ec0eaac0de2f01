//! [`ShareState`]: the unit of one `__share_group_state` partition — the
//! [`SharePartition`] of every share-partition whose records it holds, by
//! (group, topic id, partition) — as [`crate::GroupOffsets`] is the unit of
//! one `__consumer_offsets` partition. Records are applied in log order; a
//! tombstone deletes a share-partition's state (its group was deleted, or
//! the topic). Pure: no I/O, no clock.

use std::sync::Arc;

use kshard_offsets::{ShareStateKey, ShareStateRecord, ShareStateValue, Uuid};

use crate::group_offsets::Skipped;
use crate::names::{FastMap, Names};
use crate::share_partition::SharePartition;

/// A share-partition: (group, topic id, partition).
pub type ShareKey = (Arc<str>, Uuid, i32);

/// What applying one record of `__share_group_state` did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ShareApplied {
    /// A snapshot replaced a share-partition's state.
    Snapshot,
    /// An update was merged into it.
    Update,
    /// A tombstone deleted it.
    Deleted,
    /// A record of a key version this kshard does not know: skipped, counted.
    Unknown,
}

/// The share-partitions of one `__share_group_state` partition.
#[derive(Debug, Default)]
pub struct ShareState {
    partitions: FastMap<ShareKey, SharePartition>,
    names: Names,
    next_offset: Option<i64>,
}

impl ShareState {
    /// Applies the record at `offset`; one that does not decode changes
    /// nothing but the position.
    pub fn apply_bytes(
        &mut self,
        offset: i64,
        key: Option<&[u8]>,
        value: Option<&[u8]>,
    ) -> Result<ShareApplied, Skipped> {
        self.next_offset = Some(offset + 1);
        let key = key.ok_or(Skipped::NullKey)?;
        let record = ShareStateRecord::decode(key, value).map_err(Skipped::Malformed)?;
        Ok(self.apply(&record))
    }

    /// Applies a decoded record.
    pub fn apply(&mut self, record: &ShareStateRecord<'_>) -> ShareApplied {
        let Some(k) = record.key.share_partition() else { return ShareApplied::Unknown };
        let id = (self.names.intern(&k.group_id), k.topic_id, k.partition);
        match (&record.key, &record.value) {
            (_, None) => {
                self.partitions.remove(&id);
                ShareApplied::Deleted
            }
            (ShareStateKey::Snapshot(_), Some(ShareStateValue::Snapshot(v))) => {
                self.partitions.entry(id).or_default().apply_snapshot(v);
                ShareApplied::Snapshot
            }
            (ShareStateKey::Update(_), Some(ShareStateValue::Update(v))) => {
                let first = !self.partitions.contains_key(&id);
                self.partitions.entry(id).or_default().apply_update(v, first);
                ShareApplied::Update
            }
            _ => ShareApplied::Unknown,
        }
    }

    /// Sets a share-partition as DescribeShareGroupOffsets reported it
    /// (admin-API mode, which rebuilds the unit at every scrape).
    pub fn set_reported(&mut self, group: &str, topic_id: Uuid, partition: i32, start_offset: i64, lag: i64) {
        let key = (self.names.intern(group), topic_id, partition);
        self.partitions.insert(key, SharePartition::reported(start_offset, lag));
    }

    /// The state of one share-partition, if it has any.
    pub fn get(&self, group: &str, topic_id: Uuid, partition: i32) -> Option<&SharePartition> {
        self.partitions.get(&(self.names.get(group)?, topic_id, partition))
    }

    /// Puts a share-partition's state as a store kept it (a replica
    /// rebuilding or following its shard).
    pub fn restore(&mut self, group: &str, topic_id: Uuid, partition: i32, state: SharePartition) {
        self.partitions.insert((self.names.intern(group), topic_id, partition), state);
    }

    /// Forgets a share-partition's state (its tombstone, played by a replica).
    pub fn remove(&mut self, group: &str, topic_id: Uuid, partition: i32) {
        if let Some(name) = self.names.get(group) {
            self.partitions.remove(&(name, topic_id, partition));
        }
    }

    /// Every share-partition's state.
    pub fn partitions(&self) -> impl Iterator<Item = (&ShareKey, &SharePartition)> {
        self.partitions.iter()
    }

    /// The share-partitions of `group`.
    pub fn group<'a>(&'a self, group: &'a str) -> impl Iterator<Item = (&'a ShareKey, &'a SharePartition)> + 'a {
        self.partitions.iter().filter(move |((g, _, _), _)| **g == *group)
    }

    /// The next offset to read, once something was read.
    pub fn next_offset(&self) -> Option<i64> {
        self.next_offset
    }

    /// Moves the position without a record (control records, compacted gaps).
    pub fn advance_to(&mut self, next_offset: i64) {
        if self.next_offset.is_none_or(|n| n < next_offset) {
            self.next_offset = Some(next_offset);
        }
    }

    /// Drops interned group names no longer used.
    pub fn sweep_names(&mut self) -> usize {
        self.names.sweep()
    }
}

#[cfg(test)]
mod tests {
    use kshard_offsets::{DeliveryState, SharePartitionKey, ShareSnapshotValue, ShareUpdateValue, StateBatch};

    use super::*;

    const TOPIC: Uuid = Uuid([7; 16]);

    fn key(group: &str) -> SharePartitionKey<'static> {
        SharePartitionKey { group_id: group.to_owned().into(), topic_id: TOPIC, partition: 0 }
    }

    fn batch(first: i64, last: i64, state: DeliveryState, count: i16) -> StateBatch {
        StateBatch { first_offset: first, last_offset: last, delivery_state: state, delivery_count: count }
    }

    fn snapshot(group: &str, start: i64, batches: Vec<StateBatch>) -> (Vec<u8>, Option<Vec<u8>>) {
        let value = ShareSnapshotValue {
            version: 0,
            snapshot_epoch: 0,
            state_epoch: 0,
            leader_epoch: 0,
            start_offset: start,
            delivery_complete_count: -1,
            create_timestamp: 0,
            write_timestamp: 0,
            state_batches: batches,
        };
        let record = ShareStateRecord {
            key: ShareStateKey::Snapshot(key(group)),
            value: Some(ShareStateValue::Snapshot(value)),
        };
        record.encode()
    }

    fn update(group: &str, start: i64, batches: Vec<StateBatch>) -> (Vec<u8>, Option<Vec<u8>>) {
        let value = ShareUpdateValue {
            version: 0,
            snapshot_epoch: 0,
            leader_epoch: -1,
            start_offset: start,
            delivery_complete_count: -1,
            state_batches: batches,
        };
        ShareStateRecord { key: ShareStateKey::Update(key(group)), value: Some(ShareStateValue::Update(value)) }
            .encode()
    }

    #[test]
    fn snapshots_and_updates_fold_per_share_partition_and_a_tombstone_deletes() {
        let mut unit = ShareState::default();
        let (k, v) = snapshot("g", 10, vec![batch(10, 14, DeliveryState::Acknowledged, 1)]);
        assert_eq!(unit.apply_bytes(0, Some(&k), v.as_deref()), Ok(ShareApplied::Snapshot));
        let (k, v) = update("g", -1, vec![batch(15, 19, DeliveryState::Archived, 5)]);
        assert_eq!(unit.apply_bytes(1, Some(&k), v.as_deref()), Ok(ShareApplied::Update));
        let (k, v) = update("h", 3, vec![]);
        unit.apply_bytes(2, Some(&k), v.as_deref()).expect("applies");
        let (_, g) = unit.group("g").next().expect("g has state");
        assert_eq!((g.start_offset, g.lag(30)), (10, Some(10)), "30 - 10 - 10 complete");
        assert_eq!(g.poison(5), 5);
        assert_eq!(unit.partitions().count(), 2);
        let (k, _) = snapshot("g", 0, vec![]);
        assert_eq!(unit.apply_bytes(3, Some(&k), None), Ok(ShareApplied::Deleted));
        assert_eq!(unit.group("g").count(), 0);
        assert_eq!(unit.next_offset(), Some(4));
    }

    #[test]
    fn a_record_that_does_not_decode_is_skipped_and_moves_the_position() {
        let mut unit = ShareState::default();
        assert_eq!(unit.apply_bytes(5, None, Some(b"x")), Err(Skipped::NullKey));
        let skipped = unit.apply_bytes(6, Some(b"\x00\x01\xff"), Some(b"x")).expect_err("malformed");
        assert_eq!(skipped.reason(), "malformed_key");
        let (k, _) = snapshot("g", 0, vec![]);
        let skipped = unit.apply_bytes(7, Some(&k), Some(b"\x00")).expect_err("malformed");
        assert_eq!(skipped.reason(), "malformed_value");
        assert_eq!((unit.next_offset(), unit.partitions().count()), (Some(8), 0));
    }
}
