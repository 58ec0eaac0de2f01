//! [`Partitions`] in memory: each partition a run of records from its start
//! offset, appended at its end (offsets without gaps, as a non-transactional
//! writer's on Kafka), read by any number of readers, each waking as records
//! come. What Kafka does that the runtime relies on is done the same way: a
//! reader's offset before the start, or past the end, reads on from the
//! start (`auto.offset.reset=earliest`); each reader hears once that it
//! reached a partition's end, with its position; a partition comes into
//! being when first written or read (as a topic created before use).
//! [`MemoryPartitions::set_available`] makes every call fail, as when the
//! brokers cannot be reached.
//!
//! Transactions are Kafka's: a transactional id's writer fences the ones
//! before it (their open transaction aborted, their writes refused with
//! PRODUCER_FENCED); a commit or abort appends a marker to each partition
//! the transaction wrote (an offset no reader is given); a committed
//! reader skips aborted records and stops at the first record of an open
//! transaction (the last stable offset), an uncommitted one reads them all.

use std::collections::HashMap;
use std::sync::{Arc, Condvar, Mutex, PoisonError};

use kshard_kafka::{Error, Isolation, Transactional};

use super::memory_log::{Outcome, Shared, State, Txn, TxnProducer, last_stable, next_visible, unavailable};
use super::memory_reader::MemoryReader;
use super::{Appended, AppendedOf, Ends, OutBatch, OutRecord, PartitionRead, Partitions, Pending, TxnWrite};

/// A record as [`MemoryPartitions::read_committed`] reads it: offset, key, value.
pub type ReadBack = (i64, Option<Vec<u8>>, Option<Vec<u8>>);

/// Partitions in memory, shared by its clones (every member of a simulated
/// cluster holds one).
#[derive(Debug, Clone)]
pub struct MemoryPartitions {
    shared: Arc<Shared>,
}

impl Default for MemoryPartitions {
    fn default() -> Self {
        let state = State {
            partitions: HashMap::new(),
            available: true,
            producers: HashMap::new(),
            txns: HashMap::new(),
            next_txn: 1,
            corrupt: Default::default(),
        };
        let shared = Shared { state: Mutex::new(state), appended: Condvar::new(), waiters: Mutex::new(Vec::new()) };
        MemoryPartitions { shared: Arc::new(shared) }
    }
}

impl MemoryPartitions {
    /// Makes every call succeed again (`true`) or fail (`false`).
    pub fn set_available(&self, available: bool) {
        self.shared.lock().available = available;
        self.shared.ring();
    }

    /// The partitions of `topic` written to (or read) so far, in order.
    pub fn partitions_of(&self, topic: &str) -> Vec<i32> {
        let mut partitions: Vec<i32> =
            self.shared.lock().partitions.keys().filter(|(t, _)| &**t == topic).map(|(_, p)| *p).collect();
        partitions.sort_unstable();
        partitions
    }

    /// Cuts `topic`/`partition` to end at `end` (its records from `end` on
    /// lost), as an unclean leader election does: a reader past the new end
    /// hears of it ([`Polled::Reset`](super::Polled::Reset)) and reads on from the start; the next
    /// records appended take the lost offsets again.
    pub fn truncate(&self, topic: &str, partition: i32, end: i64) {
        let mut state = self.shared.lock();
        if let Some(p) = state.partitions.get_mut(&(Arc::from(topic), partition)) {
            let keep = usize::try_from(end.saturating_sub(p.start)).unwrap_or(0);
            p.records.truncate(keep);
        }
        drop(state);
        self.shared.ring();
    }

    /// Makes the record at `offset` of `topic`/`partition` fail its checksum:
    /// a reader reaching it fails the poll with [`Error::CorruptBatch`] and
    /// reads on past it, as kshard's Kafka reader does.
    pub fn corrupt(&self, topic: &str, partition: i32, offset: i64) {
        self.shared.lock().corrupt.insert((Arc::from(topic), partition, offset));
    }

    /// Deletes every partition of `topic`, as deleting a Kafka topic does:
    /// the next use creates it anew, empty, from offset 0.
    pub fn delete_topic(&self, topic: &str) {
        self.shared.lock().partitions.retain(|(t, _), _| &**t != topic);
        self.shared.ring();
    }
}

impl Partitions for MemoryPartitions {
    fn reader(
        &self,
        topic: &str,
        start: &[(i32, Option<i64>)],
        _queue_kbytes: u32,
        isolation: Isolation,
    ) -> Result<Box<dyn PartitionRead>, Error> {
        let readable = Arc::new(tokio::sync::Notify::new());
        self.shared.waiters.lock().unwrap_or_else(PoisonError::into_inner).push(Arc::downgrade(&readable));
        let reader =
            MemoryReader { shared: Arc::clone(&self.shared), reading: Mutex::new(Vec::new()), readable, isolation };
        reader.add_partitions(topic, start)?;
        Ok(Box::new(reader))
    }

    fn append(&self, topic: &str, partition: i32, key: &[u8], value: Option<&[u8]>) -> Result<Appended, Error> {
        let mut state = self.shared.lock();
        if !state.available {
            return Err(unavailable("appending"));
        }
        let offset = state.push((topic, partition), OutRecord::new(Some(key), value), None, None);
        drop(state);
        self.shared.ring();
        Ok(Appended(AppendedOf::Done(Ok(offset))))
    }

    fn transactional<'a>(&'a self, transactional_id: &'a str) -> Pending<'a, Box<dyn TxnWrite>> {
        Box::pin(std::future::ready(self.fence(transactional_id)))
    }

    /// Partitions 0 to the highest written to (or read) so far.
    fn partition_count<'a>(&'a self, topic: &'a str) -> Pending<'a, Option<i32>> {
        let count = if self.shared.lock().available {
            Ok(self.partitions_of(topic).last().map(|p| p + 1))
        } else {
            Err(unavailable("counting a topic's partitions"))
        };
        Box::pin(std::future::ready(count))
    }

    fn stable_end<'a>(&'a self, topic: &'a str, partition: i32) -> Pending<'a, i64> {
        let mut state = self.shared.lock();
        let end = if state.available {
            let State { partitions, txns, .. } = &mut *state;
            let p = partitions.entry((Arc::from(topic), partition)).or_default();
            Ok(last_stable(p, txns))
        } else {
            Err(unavailable("finding the last stable offset"))
        };
        Box::pin(std::future::ready(end))
    }

    fn ends<'a>(&'a self, partitions: &'a [(String, i32)]) -> Pending<'a, Ends> {
        Box::pin(std::future::ready(self.ends_now(partitions)))
    }

    fn delete_before<'a>(&'a self, topic: &'a str, partition: i32, offset: i64) -> Pending<'a, i64> {
        Box::pin(std::future::ready(self.delete_now(topic, partition, offset)))
    }
}

impl MemoryPartitions {
    /// Every record of `topic`/`partition` a reader of committed records
    /// reads now, from its start — whether or not the log is available (for
    /// a test's checks): (offset, key, value).
    pub fn read_committed(&self, topic: &str, partition: i32) -> Vec<ReadBack> {
        let state = self.shared.lock();
        let Some(p) = state.partitions.get(&(Arc::from(topic), partition)) else { return Vec::new() };
        let (mut next, mut out) = (p.start, Vec::new());
        while let (at, Some(record)) = next_visible(p, &state.txns, next, true) {
            out.push((at, record.key.clone(), record.value.clone()));
            next = at + 1;
        }
        out
    }

    /// A new writer of `id`: the one before is fenced, its open transaction aborted.
    fn fence(&self, id: &str) -> Result<Box<dyn TxnWrite>, Error> {
        let mut state = self.shared.lock();
        if !state.available {
            return Err(unavailable("initializing a transactional writer"));
        }
        let next_id = i64::try_from(state.producers.len()).unwrap_or(i64::MAX) + 1000;
        let producer = state
            .producers
            .entry(id.to_owned())
            .or_insert_with(|| TxnProducer { id: next_id, ..TxnProducer::default() });
        producer.epoch += 1;
        let (epoch, open) = (producer.epoch, producer.open.take());
        if let Some(txn) = open {
            state.end_txn(txn, Outcome::Aborted);
        }
        drop(state);
        self.shared.ring();
        Ok(Box::new(MemoryTxn { shared: Arc::clone(&self.shared), id: id.to_owned(), epoch }))
    }

    /// Every partition asked for has ends: one never used comes into being,
    /// empty (as a topic created before use).
    fn ends_now(&self, partitions: &[(String, i32)]) -> Result<Ends, Error> {
        let mut state = self.shared.lock();
        if !state.available {
            return Err(unavailable("finding partitions' ends"));
        }
        Ok(partitions
            .iter()
            .map(|(t, p)| {
                let part = state.partitions.entry((Arc::from(t.as_str()), *p)).or_default();
                ((t.clone(), *p), (part.start, part.end()))
            })
            .collect())
    }

    fn delete_now(&self, topic: &str, partition: i32, offset: i64) -> Result<i64, Error> {
        let mut state = self.shared.lock();
        if !state.available {
            return Err(unavailable("deleting records"));
        }
        let p = state.partitions.entry((Arc::from(topic), partition)).or_default();
        if offset > p.end() {
            return Err(Error::Refused {
                step: format!("deleting records of {topic}/{partition} before {offset}"),
                message: format!("offset out of range: the partition ends at {}", p.end()),
            });
        }
        while p.start < offset {
            p.records.pop_front();
            p.start += 1;
        }
        Ok(p.start)
    }
}

/// A transactional id's writer in memory.
#[derive(Debug)]
struct MemoryTxn {
    shared: Arc<Shared>,
    id: String,
    epoch: u64,
}

impl MemoryTxn {
    fn send_now(&self, topic: &str, partition: i32, batch: &OutBatch) -> Result<Appended, Error> {
        let records = batch.records()?;
        let mut state = self.shared.lock();
        if !state.available {
            return Err(unavailable("appending"));
        }
        if let Some(fenced) = state.fenced(&self.id, self.epoch) {
            return Err(fenced);
        }
        let (producer_id, open) = state.producers.get(&self.id).map_or((0, None), |p| (p.id, p.open));
        let txn = match open {
            Some(txn) => txn,
            None => {
                let txn = state.next_txn;
                state.next_txn += 1;
                state.txns.insert(txn, Txn { outcome: Outcome::Open, producer_id, partitions: Vec::new() });
                if let Some(p) = state.producers.get_mut(&self.id) {
                    p.open = Some(txn);
                }
                txn
            }
        };
        if let Some(t) = state.txns.get_mut(&txn) {
            let tp = (Arc::from(topic), partition);
            if !t.partitions.contains(&tp) {
                t.partitions.push(tp);
            }
        }
        let part = Some(Transactional::Record { producer_id });
        let first =
            records.into_iter().map(|r| state.push((topic, partition), r, Some(txn), part)).min().ok_or_else(|| {
                Error::Refused { step: format!("writing to {topic}/{partition}"), message: "no records".into() }
            })?;
        drop(state);
        self.shared.ring();
        Ok(Appended(AppendedOf::Done(Ok(first))))
    }

    fn end_now(&self, outcome: Outcome) -> Result<(), Error> {
        let mut state = self.shared.lock();
        if !state.available {
            return Err(unavailable("ending a transaction"));
        }
        if let Some(fenced) = state.fenced(&self.id, self.epoch) {
            return Err(fenced);
        }
        let open = state.producers.get_mut(&self.id).and_then(|p| p.open.take());
        if let Some(txn) = open {
            state.end_txn(txn, outcome);
        }
        drop(state);
        self.shared.ring();
        Ok(())
    }
}

impl TxnWrite for MemoryTxn {
    // A partition joins the transaction when first written: a marker is
    // written to partitions that got records.
    fn add_partitions<'a>(&'a mut self, _: &'a [(&'a str, i32)]) -> Pending<'a, ()> {
        Box::pin(std::future::ready(Ok(())))
    }

    fn send<'a>(&'a mut self, topic: &'a str, partition: i32, records: OutBatch) -> Pending<'a, Appended> {
        Box::pin(std::future::ready(self.send_now(topic, partition, &records)))
    }

    fn commit(&mut self) -> Pending<'_, ()> {
        Box::pin(std::future::ready(self.end_now(Outcome::Committed)))
    }

    fn abort(&mut self) -> Pending<'_, ()> {
        Box::pin(std::future::ready(self.end_now(Outcome::Aborted)))
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::super::Polled;
    use super::*;

    #[tokio::test]
    async fn memory_partitions_keep_the_contract() {
        let log = MemoryPartitions::default();
        super::super::conformance::run_all(&log, &["a", "b", "c", "d", "e", "f"].map(String::from)).await;
    }

    #[test]
    fn an_unavailable_log_fails_every_call_until_it_is_back() {
        let log = MemoryPartitions::default();
        let reader = log.reader("t", &[(0, None)], 256, Isolation::Committed).expect("reader");
        log.set_available(false);
        assert!(log.append("t", 0, b"k", None).is_err());
        assert!(log.ends_now(&[("t".into(), 0)]).is_err());
        assert!(reader.poll(Duration::from_millis(10)).is_err());
        log.set_available(true);
        assert_eq!(log.append("t", 0, b"k", None).and_then(|a| a.wait(Duration::ZERO)).ok(), Some(0));
        assert!(matches!(reader.poll(Duration::from_millis(10)), Ok(Polled::Records(_))));
    }
}
