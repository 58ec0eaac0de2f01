//! What the logs hold, kept whole: every record appended to the shared
//! in-memory log, or committed through a transactional writer, is recorded
//! by its offset (deletes do not touch the record; aborted transactions and
//! a fenced writer's never count), and each recovery log is played from its
//! first record by a reference player. Every
//! store a member holds must be a state of that one chain: at its
//! checkpoint's offset, the reference's chain position, and only the
//! reference's values (all of them, once the replica serves).

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, PoisonError};

use kshard_kafka::{Error, Isolation};

use crate::partitions::MemoryPartitions;
use crate::partitions::{Appended, Ends, OutBatch, PartitionRead, Partitions, Pending, TxnWrite};
use crate::recovery_log::{Played, Player};
use crate::{Checkpoint, MemoryStore, Store};

/// Each partition's committed records: value by offset.
type Records = HashMap<(String, i32), BTreeMap<i64, Vec<u8>>>;

/// The shared log, recording every append.
#[derive(Debug, Clone, Default)]
pub(super) struct Recording {
    pub(super) log: MemoryPartitions,
    records: Arc<Mutex<Records>>,
}

impl Recording {
    /// Every record of `topic`/`partition` appended or committed: (offset, value).
    pub(super) fn records(&self, topic: &str, partition: i32) -> Vec<(i64, Vec<u8>)> {
        let records = self.records.lock().unwrap_or_else(PoisonError::into_inner);
        records.get(&(topic.to_owned(), partition)).map(|r| r.clone().into_iter().collect()).unwrap_or_default()
    }

    /// The offset after the last record of `topic`/`partition` recorded.
    pub(super) fn end(&self, topic: &str, partition: i32) -> i64 {
        let records = self.records.lock().unwrap_or_else(PoisonError::into_inner);
        records.get(&(topic.to_owned(), partition)).and_then(|r| r.keys().next_back()).map_or(0, |last| last + 1)
    }
}

/// How long each call of a transactional writer takes (a broker's round
/// trip), on the paused clock: a crash or a fault can land between the
/// calls of one commit.
const ROUND_TRIP: std::time::Duration = std::time::Duration::from_millis(2);

/// A transactional writer whose records are recorded once committed.
#[derive(Debug)]
struct RecordingTxn {
    inner: Box<dyn TxnWrite>,
    records: Arc<Mutex<Records>>,
    /// Sent in the open transaction: (topic, partition), offset, value.
    pending: Vec<((String, i32), i64, Vec<u8>)>,
}

impl TxnWrite for RecordingTxn {
    fn add_partitions<'a>(&'a mut self, partitions: &'a [(&'a str, i32)]) -> Pending<'a, ()> {
        self.inner.add_partitions(partitions)
    }

    fn send<'a>(&'a mut self, topic: &'a str, partition: i32, batch: OutBatch) -> Pending<'a, Appended> {
        Box::pin(async move {
            tokio::time::sleep(ROUND_TRIP).await;
            let records = batch.records()?;
            let appended = self.inner.send(topic, partition, batch).await?;
            // The memory log lands a send at once.
            let first = appended.wait(std::time::Duration::ZERO)?;
            for (i, r) in records.iter().enumerate() {
                let value = r.value.as_deref().unwrap_or_default().to_vec();
                self.pending.push(((topic.to_owned(), partition), first + i as i64, value));
            }
            Ok(appended)
        })
    }

    fn commit(&mut self) -> Pending<'_, ()> {
        Box::pin(async move {
            tokio::time::sleep(ROUND_TRIP).await;
            let committed = self.inner.commit().await;
            let pending = std::mem::take(&mut self.pending);
            if committed.is_ok() {
                let mut kept = self.records.lock().unwrap_or_else(PoisonError::into_inner);
                for (key, offset, value) in pending {
                    kept.entry(key).or_default().insert(offset, value);
                }
            }
            committed
        })
    }

    fn abort(&mut self) -> Pending<'_, ()> {
        self.pending.clear();
        self.inner.abort()
    }
}

impl Partitions for Recording {
    fn reader(
        &self,
        topic: &str,
        start: &[(i32, Option<i64>)],
        queue_kbytes: u32,
        isolation: Isolation,
    ) -> Result<Box<dyn PartitionRead>, Error> {
        self.log.reader(topic, start, queue_kbytes, isolation)
    }

    fn append(&self, topic: &str, partition: i32, key: &[u8], value: Option<&[u8]>) -> Result<Appended, Error> {
        let appended = self.log.append(topic, partition, key, value)?;
        // The memory log lands an append at once.
        let offset = appended.wait(std::time::Duration::ZERO)?;
        let mut records = self.records.lock().unwrap_or_else(PoisonError::into_inner);
        records.entry((topic.to_owned(), partition)).or_default().insert(offset, value.unwrap_or_default().to_vec());
        Ok(appended)
    }

    fn ends<'a>(&'a self, partitions: &'a [(String, i32)]) -> Pending<'a, Ends> {
        self.log.ends(partitions)
    }

    fn delete_before<'a>(&'a self, topic: &'a str, partition: i32, offset: i64) -> Pending<'a, i64> {
        self.log.delete_before(topic, partition, offset)
    }

    fn stable_end<'a>(&'a self, topic: &'a str, partition: i32) -> Pending<'a, i64> {
        self.log.stable_end(topic, partition)
    }

    fn partition_count<'a>(&'a self, topic: &'a str) -> Pending<'a, Option<i32>> {
        self.log.partition_count(topic)
    }

    fn transactional<'a>(&'a self, transactional_id: &'a str) -> Pending<'a, Box<dyn TxnWrite>> {
        Box::pin(async move {
            let inner = self.log.transactional(transactional_id).await?;
            Ok(Box::new(RecordingTxn { inner, records: Arc::clone(&self.records), pending: Vec::new() })
                as Box<dyn TxnWrite>)
        })
    }
}

/// A state of the chain: after the record before `next_offset`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct ChainState {
    pub(super) seq: u64,
    pub(super) checksum: u64,
    pub(super) data: BTreeMap<Vec<u8>, Vec<u8>>,
}

/// The chain of one recovery log, by the offset after each applied record.
#[derive(Debug, Default)]
pub(super) struct Chain {
    states: BTreeMap<i64, ChainState>,
    /// The state after the last applied record.
    pub(super) last: Option<ChainState>,
}

fn contents(store: &dyn Store) -> BTreeMap<Vec<u8>, Vec<u8>> {
    store.scan(None, usize::MAX).expect("a memory store scans").into_iter().collect()
}

impl Chain {
    /// Plays `records` (offset, value) from the log's first.
    pub(super) fn play(records: &[(i64, Vec<u8>)]) -> Chain {
        let mut player = Player::open(MemoryStore::default()).expect("a memory store");
        let mut chain = Chain::default();
        for (offset, bytes) in records {
            let offset = *offset;
            let played = player.offer(offset, bytes).expect("a memory store applies");
            let applied = played.is_some_and(|p| !matches!(p, Played::Skipped(_) | Played::Malformed(_)));
            if applied {
                let state = ChainState {
                    seq: player.chain().seq(),
                    checksum: player.chain().checksum(),
                    data: contents(player.store()),
                };
                chain.states.insert(offset + 1, state.clone());
                chain.last = Some(state);
            }
        }
        chain
    }

    /// Why `store` (checkpointed at `checkpoint`) is not a state of this
    /// chain; `whole`: it must hold every value, not only reference ones.
    pub(super) fn disagrees(&self, checkpoint: &Checkpoint, store: &dyn Store, whole: bool) -> Option<String> {
        let at = checkpoint.log.next_offset;
        let Some(reference) = self.states.get(&at) else {
            return Some(format!("its checkpoint at {at} is after no record the chain applies: another branch"));
        };
        if (reference.seq, reference.checksum) != (checkpoint.log.seq, checkpoint.log.checksum) {
            return Some(format!(
                "at {at} it holds chain ({}, {:x}), the log's is ({}, {:x}): another branch",
                checkpoint.log.seq, checkpoint.log.checksum, reference.seq, reference.checksum
            ));
        }
        let data = contents(store);
        if let Some((k, v)) = data.iter().find(|(k, v)| reference.data.get(*k) != Some(*v)) {
            return Some(format!("at {at} it holds {k:?}={v:?}, the chain {:?}", reference.data.get(k)));
        }
        if whole && data.len() != reference.data.len() {
            return Some(format!("at {at} it serves {} keys of the chain's {}", data.len(), reference.data.len()));
        }
        None
    }
}
