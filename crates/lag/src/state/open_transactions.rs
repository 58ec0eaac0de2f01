//! [`OpenTransactions`]: the offset commits of transactions not ended yet,
//! set aside by producer until the producer's marker — what Kafka's group
//! coordinator keeps as its pending transactional offsets.
//!
//! A transactional producer (`sendOffsetsToTransaction`) commits a group's
//! offsets inside its transaction; the commit counts once its COMMIT marker
//! is read, and never if its ABORT marker is. Meanwhile every other record
//! of the partition applies at once: a transaction left open by a producer
//! that died holds back only its own commits, not the partition behind it.
//! At a COMMIT, each of the transaction's commits replaces the group's
//! offset only if its record is newer (later in the log) than the record of
//! the offset in place, as the coordinator decides (`OffsetMetadataManager`),
//! so that a plain commit written after the transactional one wins. An
//! offset tombstone drops the transactions' commits of that partition too.
//! Pure.

use std::sync::Arc;

use crate::group_offsets::CommittedOffset;
use crate::names::FastMap;

/// An offset commit of an open transaction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PendingCommit {
    /// The group.
    pub group: Arc<str>,
    /// The topic committed to.
    pub topic: Arc<str>,
    /// The partition committed to.
    pub partition: i32,
    /// The commit (its `record_offset` is the record's place in the log).
    pub committed: CommittedOffset,
}

/// The open transactions of one partition of the offsets topic.
#[derive(Debug, Clone, Default)]
pub struct OpenTransactions {
    /// Each open transaction's commits, by producer id: a transaction commits
    /// offsets for a handful of partitions, so a vector is searched.
    by_producer: FastMap<i64, Vec<PendingCommit>>,
}

impl OpenTransactions {
    /// Sets `commit` aside in `producer`'s transaction, in place of one the
    /// transaction made earlier for the same partition.
    pub fn add(&mut self, producer: i64, commit: PendingCommit) {
        let commits = self.by_producer.entry(producer).or_default();
        match commits
            .iter_mut()
            .find(|c| c.partition == commit.partition && c.topic == commit.topic && c.group == commit.group)
        {
            Some(c) => *c = commit,
            None => commits.push(commit),
        }
    }

    /// Drops every transaction's commit of `group`'s offset of `topic`/`partition`
    /// (an offset tombstone). The transactions stay open.
    pub fn forget(&mut self, group: &str, topic: &str, partition: i32) {
        for commits in self.by_producer.values_mut() {
            commits.retain(|c| !(c.partition == partition && *c.topic == *topic && *c.group == *group));
        }
    }

    /// Ends `producer`'s transaction: its commits, in the order made.
    pub fn end(&mut self, producer: i64) -> Vec<PendingCommit> {
        self.by_producer.remove(&producer).unwrap_or_default()
    }

    /// Replaces `producer`'s transaction with `commits` (restored from a store).
    pub fn restore(&mut self, producer: i64, commits: Vec<PendingCommit>) {
        self.by_producer.insert(producer, commits);
    }

    /// The open transactions: producer id and commits, by producer id.
    pub fn iter(&self) -> impl Iterator<Item = (i64, &[PendingCommit])> {
        let mut producers: Vec<_> = self.by_producer.iter().map(|(p, c)| (*p, c.as_slice())).collect();
        producers.sort_unstable_by_key(|(p, _)| *p);
        producers.into_iter()
    }

    /// One producer's open transaction, if it has one.
    pub fn of(&self, producer: i64) -> Option<&[PendingCommit]> {
        self.by_producer.get(&producer).map(Vec::as_slice)
    }

    /// How many transactions are open.
    pub fn len(&self) -> usize {
        self.by_producer.len()
    }

    /// Whether none is.
    pub fn is_empty(&self) -> bool {
        self.by_producer.is_empty()
    }

    /// The commits set aside, over every open transaction.
    pub fn commit_count(&self) -> usize {
        self.by_producer.values().map(Vec::len).sum()
    }

    /// The earliest record of an open transaction's commits, if any.
    pub fn first_record(&self) -> Option<i64> {
        self.by_producer.values().flatten().map(|c| c.committed.record_offset).min()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pending(group: &str, partition: i32, offset: i64, record_offset: i64) -> PendingCommit {
        PendingCommit {
            group: group.into(),
            topic: "t".into(),
            partition,
            committed: CommittedOffset { offset, commit_timestamp: 0, leader_epoch: -1, metadata: None, record_offset },
        }
    }

    #[test]
    fn a_transaction_keeps_its_last_commit_per_partition_until_it_ends() {
        let mut open = OpenTransactions::default();
        open.add(7, pending("g", 0, 10, 100));
        open.add(7, pending("g", 1, 20, 101));
        open.add(7, pending("g", 0, 11, 102));
        open.add(8, pending("h", 0, 5, 103));
        assert_eq!((open.len(), open.commit_count(), open.first_record()), (2, 3, Some(101)));
        let ended = open.end(7);
        assert_eq!(ended, vec![pending("g", 0, 11, 102), pending("g", 1, 20, 101)]);
        assert_eq!(open.end(7), vec![], "ended once");
        assert_eq!(open.iter().map(|(p, c)| (p, c.len())).collect::<Vec<_>>(), vec![(8, 1)]);
    }

    #[test]
    fn a_tombstone_drops_the_partitions_commits_and_leaves_the_transaction_open() {
        let mut open = OpenTransactions::default();
        open.add(7, pending("g", 0, 10, 100));
        open.add(8, pending("g", 0, 12, 101));
        open.add(8, pending("g", 1, 12, 102));
        open.forget("g", "t", 0);
        assert_eq!(open.of(7), Some(&[][..]));
        assert_eq!(open.of(8), Some(&[pending("g", 1, 12, 102)][..]));
        assert_eq!(open.len(), 2);
    }
}
