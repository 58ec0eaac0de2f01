//! What the logs hold, kept whole: every record appended to the shared
//! in-memory log is recorded (deletes do not touch the record), and each
//! recovery log is played from its first record by a reference player. Every
//! store a member holds must be a state of that one chain: at its
//! checkpoint's offset, the reference's chain position, and only the
//! reference's values (all of them, once the replica serves).

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, PoisonError};

use kshard_kafka::{Error, Isolation};
use kshard_runtime::partitions::MemoryPartitions;
use kshard_runtime::partitions::{Appended, Ends, PartitionRead, Partitions, Pending, TxnWrite};
use kshard_runtime::recovery_log::Player;
use kshard_runtime::{Checkpoint, MemoryStore, Store};

type Records = HashMap<(String, i32), Vec<Vec<u8>>>;

/// The shared log, recording every append.
#[derive(Debug, Clone, Default)]
pub(crate) struct Recording {
    pub(crate) log: MemoryPartitions,
    records: Arc<Mutex<Records>>,
}

impl Recording {
    /// Every record appended to `topic`/`partition`, by offset.
    pub(crate) fn records(&self, topic: &str, partition: i32) -> Vec<Vec<u8>> {
        let records = self.records.lock().unwrap_or_else(PoisonError::into_inner);
        records.get(&(topic.to_owned(), partition)).cloned().unwrap_or_default()
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
        let kept = records.entry((topic.to_owned(), partition)).or_default();
        assert_eq!(usize::try_from(offset).ok(), Some(kept.len()), "the memory log's offsets have no gaps");
        kept.push(value.unwrap_or_default().to_vec());
        Ok(appended)
    }

    fn ends<'a>(&'a self, partitions: &'a [(String, i32)]) -> Pending<'a, Ends> {
        self.log.ends(partitions)
    }

    fn delete_before<'a>(&'a self, topic: &'a str, partition: i32, offset: i64) -> Pending<'a, i64> {
        self.log.delete_before(topic, partition, offset)
    }

    fn transactional<'a>(&'a self, transactional_id: &'a str) -> Pending<'a, Box<dyn TxnWrite>> {
        self.log.transactional(transactional_id)
    }
}

/// A state of the chain: after the record before `next_offset`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ChainState {
    pub(crate) seq: u64,
    pub(crate) checksum: u64,
    pub(crate) data: BTreeMap<Vec<u8>, Vec<u8>>,
}

/// The chain of one recovery log, by the offset after each applied record.
#[derive(Debug, Default)]
pub(crate) struct Chain {
    states: BTreeMap<i64, ChainState>,
    /// The state after the last applied record.
    pub(crate) last: Option<ChainState>,
}

fn contents(store: &dyn Store) -> BTreeMap<Vec<u8>, Vec<u8>> {
    store.scan(None, usize::MAX).expect("a memory store scans").into_iter().collect()
}

impl Chain {
    /// Plays `records` from the log's first.
    pub(crate) fn play(records: &[Vec<u8>]) -> Chain {
        let mut player = Player::open(MemoryStore::default()).expect("a memory store");
        let mut chain = Chain::default();
        for (offset, bytes) in records.iter().enumerate() {
            let offset = offset as i64;
            let played = player.offer(offset, bytes).expect("a memory store applies");
            let applied = played.is_some_and(|p| {
                !matches!(
                    p,
                    kshard_runtime::recovery_log::Played::Skipped(_)
                        | kshard_runtime::recovery_log::Played::Malformed(_)
                )
            });
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
    pub(crate) fn disagrees(&self, checkpoint: &Checkpoint, store: &dyn Store, whole: bool) -> Option<String> {
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
