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
//! A transaction counts as open here while it has a commit set aside.
//! Pure.

use std::sync::Arc;

use crate::group::CommittedOffset;
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

/// What a transaction's commit is for: group, topic, partition.
type Slot = (Arc<str>, Arc<str>, i32);

/// The open transactions of one partition of the offsets topic: those with
/// at least one commit set aside.
#[derive(Debug, Clone, Default)]
pub struct OpenTransactions {
    /// Each open transaction's commits, by producer id, then by what they
    /// are for (a transaction commits the offsets of up to thousands of
    /// partitions at once: Kafka Streams with exactly-once).
    by_producer: FastMap<i64, FastMap<Slot, CommittedOffset>>,
}

impl OpenTransactions {
    /// Sets `commit` aside in `producer`'s transaction, in place of one the
    /// transaction made earlier for the same partition.
    pub fn add(&mut self, producer: i64, commit: PendingCommit) {
        let slot = (commit.group, commit.topic, commit.partition);
        self.by_producer.entry(producer).or_default().insert(slot, commit.committed);
    }

    /// Drops `producer`'s commit of `group`'s offset of `topic`/`partition`;
    /// a transaction left without commits is no longer counted open.
    pub fn remove(&mut self, producer: i64, group: &str, topic: &str, partition: i32) {
        let Some(commits) = self.by_producer.get_mut(&producer) else { return };
        commits.retain(|(g, t, p), _| !(*p == partition && **t == *topic && **g == *group));
        if commits.is_empty() {
            self.by_producer.remove(&producer);
        }
    }

    /// The producers whose open transaction holds a commit of `group`'s
    /// offset of `topic`/`partition`.
    pub fn producers_with(&self, group: &str, topic: &str, partition: i32) -> Vec<i64> {
        let mut producers: Vec<i64> = self
            .by_producer
            .iter()
            .filter(|(_, c)| c.keys().any(|(g, t, p)| *p == partition && **t == *topic && **g == *group))
            .map(|(p, _)| *p)
            .collect();
        producers.sort_unstable();
        producers
    }

    /// Drops every transaction's commit of `group`'s offset of
    /// `topic`/`partition` (an offset tombstone); returns the producers
    /// whose commit it dropped.
    pub fn forget(&mut self, group: &str, topic: &str, partition: i32) -> Vec<i64> {
        let producers = self.producers_with(group, topic, partition);
        for producer in &producers {
            self.remove(*producer, group, topic, partition);
        }
        producers
    }

    /// Ends `producer`'s transaction: its commits.
    pub fn end(&mut self, producer: i64) -> Vec<PendingCommit> {
        let commits = self.by_producer.remove(&producer).unwrap_or_default();
        commits
            .into_iter()
            .map(|((group, topic, partition), committed)| PendingCommit { group, topic, partition, committed })
            .collect()
    }

    /// The open transactions: producer id and commits, by producer id.
    pub fn iter(&self) -> impl Iterator<Item = (i64, Vec<PendingCommit>)> + '_ {
        let mut producers: Vec<i64> = self.by_producer.keys().copied().collect();
        producers.sort_unstable();
        producers.into_iter().map(|p| (p, self.of(p)))
    }

    /// One producer's open transaction's commits (none when it has none).
    pub fn of(&self, producer: i64) -> Vec<PendingCommit> {
        let Some(commits) = self.by_producer.get(&producer) else { return Vec::new() };
        let mut out: Vec<PendingCommit> = commits
            .iter()
            .map(|((group, topic, partition), committed)| PendingCommit {
                group: Arc::clone(group),
                topic: Arc::clone(topic),
                partition: *partition,
                committed: committed.clone(),
            })
            .collect();
        out.sort_unstable_by_key(|c| c.committed.record_offset);
        out
    }

    /// How many transactions are open.
    pub fn len(&self) -> usize {
        self.by_producer.len()
    }

    /// Whether none is.
    pub fn is_empty(&self) -> bool {
        self.by_producer.is_empty()
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
        assert_eq!((open.len(), open.of(7).len(), open.of(8).len()), (2, 2, 1));
        let mut ended = open.end(7);
        ended.sort_unstable_by_key(|c| c.partition);
        assert_eq!(ended, vec![pending("g", 0, 11, 102), pending("g", 1, 20, 101)]);
        assert_eq!(open.end(7), vec![], "ended once");
        assert_eq!(open.iter().map(|(p, c)| (p, c.len())).collect::<Vec<_>>(), vec![(8, 1)]);
    }

    #[test]
    fn a_tombstone_drops_the_partitions_commits_from_every_transaction() {
        let mut open = OpenTransactions::default();
        open.add(7, pending("g", 0, 10, 100));
        open.add(8, pending("g", 0, 12, 101));
        open.add(8, pending("g", 1, 12, 102));
        assert_eq!(open.producers_with("g", "t", 0), vec![7, 8]);
        assert_eq!(open.forget("g", "t", 0), vec![7, 8]);
        assert_eq!(open.of(7), vec![], "7 had no other commit: no longer open");
        assert_eq!(open.of(8), vec![pending("g", 1, 12, 102)]);
        assert_eq!(open.len(), 1);
        open.remove(8, "g", "t", 1);
        assert!(open.is_empty());
    }
}
