//! Transactional offset commits in a [`GroupOffsets`] unit: set aside at
//! their record, applied (or dropped) at their producer's marker, as Kafka's
//! group coordinator does; what a standby and a restore do with those set
//! aside.

use kshard_offsets::{OffsetCommitKey, OffsetCommitValue, Record, RecordKey, RecordValue};

use super::{CommittedOffset, GroupOffsets, Skipped, committed};
use crate::open_transactions::{OpenTransactions, PendingCommit};

impl GroupOffsets {
    /// Ends `producer`'s transaction: at a COMMIT, each of its offset
    /// commits replaces the group's offset unless the record of the offset
    /// in place is later in the log (Kafka's rule).
    pub(super) fn end_transaction(&mut self, producer: i64, committed: bool) {
        let commits = self.open.end(producer);
        if !committed {
            return;
        }
        for c in commits {
            self.commit_if_newer(&c.group, &c.topic, c.partition, c.committed);
        }
    }

    /// Sets a group's offset unless the one in place has a later record.
    fn commit_if_newer(&mut self, group: &str, topic: &str, partition: i32, committed: CommittedOffset) -> bool {
        let in_place = self.groups.get(group).and_then(|g| g.offset(topic, partition)).map(|c| c.record_offset);
        if in_place.is_some_and(|at| at >= committed.record_offset) {
            return false;
        }
        let g = match self.groups.get_mut(group) {
            Some(g) => g,
            None => self.groups.entry(self.names.intern(group)).or_default(),
        };
        g.set_offset(&mut self.names, topic, partition, committed);
        g.commits += 1;
        true
    }

    /// Applies the offset commit at `offset` unless the group's offset in
    /// place has a later record, without moving the position: a standby
    /// taking a transaction's commits its primary applied at the marker.
    /// Other records are not taken (false).
    pub fn apply_if_newer(&mut self, offset: i64, key: &[u8], value: &[u8]) -> Result<bool, Skipped> {
        match Record::decode(key, Some(value)).map_err(Skipped::Malformed)? {
            Record { key: RecordKey::OffsetCommit { key, .. }, value: Some(RecordValue::OffsetCommit(v)) } => {
                Ok(self.commit_if_newer(&key.group, &key.topic, key.partition, committed(&v, offset)))
            }
            _ => Ok(false),
        }
    }

    /// The open transactions' offset commits.
    pub fn open_transactions(&self) -> &OpenTransactions {
        &self.open
    }

    /// Sets the offset commit at `offset` (raw key and value, restored from a
    /// store) aside in `producer`'s open transaction; a record that does not
    /// decode, or is no offset commit, is left out.
    pub fn restore_pending(&mut self, producer: i64, offset: i64, key: &[u8], value: &[u8]) {
        if let Ok(Record { key: RecordKey::OffsetCommit { key, .. }, value: Some(RecordValue::OffsetCommit(v)) }) =
            Record::decode(key, Some(value))
        {
            self.set_aside(producer, &key, &v, offset);
        }
    }

    /// Drops `producer`'s pending commit of the offset `key` (raw) names (a
    /// standby: its primary applied the marker, or a tombstone).
    pub fn drop_pending(&mut self, producer: i64, key: &[u8]) {
        if let Ok(RecordKey::OffsetCommit { key, .. }) = RecordKey::decode(key) {
            self.open.remove(producer, &key.group, &key.topic, key.partition);
        }
    }

    /// The producers whose open transaction holds a commit of the offset
    /// `key` (raw) names.
    pub fn pending_producers_of(&self, key: &[u8]) -> Vec<i64> {
        if self.open.is_empty() {
            return Vec::new();
        }
        match RecordKey::decode(key) {
            Ok(RecordKey::OffsetCommit { key, .. }) => self.open.producers_with(&key.group, &key.topic, key.partition),
            _ => Vec::new(),
        }
    }

    /// Forgets `producer`'s open transaction, its commits unapplied.
    pub fn drop_transaction(&mut self, producer: i64) {
        self.open.end(producer);
    }

    /// Sets a transaction's commit aside (and learns the topic's id: a
    /// fact whatever the transaction's end).
    pub(super) fn set_aside(
        &mut self,
        producer: i64,
        key: &OffsetCommitKey<'_>,
        v: &OffsetCommitValue<'_>,
        offset: i64,
    ) {
        if let Some(id) = v.topic_id
            && !self.topic_ids.contains_key(&id)
        {
            self.learn_topic_id(id, &key.topic);
        }
        let pending = PendingCommit {
            group: self.names.intern(&key.group),
            topic: self.names.intern(&key.topic),
            partition: key.partition,
            committed: committed(v, offset),
        };
        self.open.add(producer, pending);
    }
}
