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

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError, Weak};
use std::time::{Duration, Instant};

use kshard_kafka::{Error, Isolation, Transactional};

use super::{
    Appended, AppendedOf, Ends, LogRecord, OutBatch, OutRecord, PartitionRead, Partitions, Pending, Polled, Readable,
    RecordOf, TxnWrite,
};

/// A record kept.
#[derive(Debug)]
pub(crate) struct Stored {
    pub(crate) offset: i64,
    pub(crate) key: Option<Vec<u8>>,
    pub(crate) value: Option<Vec<u8>>,
    /// Its headers, in order.
    pub(crate) headers: Vec<(String, Option<Vec<u8>>)>,
    /// Its timestamp (the writer's; the append's time for a plain append).
    pub(crate) timestamp_ms: i64,
    /// The transaction that wrote it (`None`: no transaction).
    txn: Option<u64>,
    /// Its part in that transaction: a record of it, or the marker that
    /// ended it (read by uncommitted readers only, as Kafka's are).
    pub(crate) transactional: Option<Transactional>,
}

/// Where a transaction stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    Open,
    Committed,
    Aborted,
}

/// A record as [`MemoryPartitions::read_committed`] reads it: offset, key, value.
pub type ReadBack = (i64, Option<Vec<u8>>, Option<Vec<u8>>);

/// A transactional id's current writer, and its open transaction.
#[derive(Debug, Default)]
struct TxnProducer {
    /// Its producer id, as Kafka's: one per transactional id.
    id: i64,
    epoch: u64,
    open: Option<u64>,
}

/// A transaction: where it stands, its producer, the partitions it wrote.
#[derive(Debug)]
struct Txn {
    outcome: Outcome,
    producer_id: i64,
    partitions: Vec<(Arc<str>, i32)>,
}

/// A control record's key as Kafka writes it: version 0, then the type
/// (0 ABORT, 1 COMMIT).
fn marker_key(committed: bool) -> Vec<u8> {
    vec![0, 0, 0, u8::from(committed)]
}

#[derive(Debug, Default)]
struct Partition {
    /// The offset of the first record kept.
    start: i64,
    records: VecDeque<Arc<Stored>>,
}

impl Partition {
    fn end(&self) -> i64 {
        self.start + self.records.len() as i64
    }
}

#[derive(Debug)]
struct State {
    partitions: HashMap<(Arc<str>, i32), Partition>,
    available: bool,
    /// Every transactional id's writer.
    producers: HashMap<String, TxnProducer>,
    /// Every transaction.
    txns: HashMap<u64, Txn>,
    next_txn: u64,
    /// Records readers are told failed their checksum, and skip.
    corrupt: std::collections::HashSet<(Arc<str>, i32, i64)>,
}

impl State {
    /// Appends a record to `topic`/`partition`: its offset.
    fn push(
        &mut self,
        (topic, partition): (&str, i32),
        record: OutRecord,
        txn: Option<u64>,
        transactional: Option<Transactional>,
    ) -> i64 {
        let p = self.partitions.entry((Arc::from(topic), partition)).or_default();
        let offset = p.end();
        let bytes = |b: Option<&[u8]>| b.map(<[u8]>::to_vec);
        p.records.push_back(Arc::new(Stored {
            offset,
            key: bytes(record.key.as_deref()),
            value: bytes(record.value.as_deref()),
            headers: record.headers.iter().map(|(k, v)| (k.clone(), bytes(v.as_deref()))).collect(),
            timestamp_ms: record.timestamp_ms,
            txn,
            transactional,
        }));
        offset
    }

    /// Ends `txn`: its markers appended, its records visible or not.
    fn end_txn(&mut self, txn: u64, outcome: Outcome) {
        let Some(t) = self.txns.get_mut(&txn) else { return };
        t.outcome = outcome;
        let (partitions, producer_id) = (t.partitions.clone(), t.producer_id);
        let committed = outcome == Outcome::Committed;
        let marker = Transactional::Marker { producer_id, committed };
        for (topic, partition) in partitions {
            let record = OutRecord::new(Some(&marker_key(committed)), Some(&[0; 6]));
            self.push((&topic, partition), record, Some(txn), Some(marker));
        }
    }

    /// The error of a writer of `id` at `epoch` that is no longer the current one.
    fn fenced(&self, id: &str, epoch: u64) -> Option<Error> {
        (self.producers.get(id).map(|p| p.epoch) != Some(epoch))
            .then(|| Error::Kafka { step: format!("writing as transactional id {id}"), code: 90 })
    }
}

#[derive(Debug)]
struct Shared {
    state: Mutex<State>,
    /// Rung on every append.
    appended: Condvar,
    /// Each reader's async waiter, rung with `appended`.
    waiters: Mutex<Vec<Weak<tokio::sync::Notify>>>,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Wakes every reader, blocked or awaiting.
    fn ring(&self) {
        self.appended.notify_all();
        let mut waiters = self.waiters.lock().unwrap_or_else(PoisonError::into_inner);
        waiters.retain(|w| match w.upgrade() {
            Some(n) => {
                n.notify_one();
                true
            }
            None => false,
        });
    }
}

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

/// The error of every call while unavailable.
fn unavailable(step: &str) -> Error {
    Error::Refused { step: step.to_owned(), message: "the log is unavailable (injected)".into() }
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
    /// hears of it ([`Polled::Reset`]) and reads on from the start; the next
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

/// From `next`, the next record of `p` a reader reads, and its offset (or
/// where it stops): a committed reader skips markers and aborted records
/// and stops at an open transaction's first; an uncommitted one reads them
/// all.
fn next_visible(p: &Partition, txns: &HashMap<u64, Txn>, mut next: i64, committed: bool) -> (i64, Option<Arc<Stored>>) {
    while next < p.end() {
        let record = &p.records[usize::try_from(next - p.start).unwrap_or_default()];
        let outcome = record.txn.and_then(|t| txns.get(&t)).map(|t| t.outcome);
        let marker = matches!(record.transactional, Some(Transactional::Marker { .. }));
        match (marker, outcome) {
            (true, _) if committed => next += 1,
            (false, Some(Outcome::Open)) if committed => break,
            (false, Some(Outcome::Aborted)) if committed => next += 1,
            _ => return (next, Some(Arc::clone(record))),
        }
    }
    (next, None)
}

/// The offset of `p`'s first record of a transaction still open, or its end.
fn last_stable(p: &Partition, txns: &HashMap<u64, Txn>) -> i64 {
    p.records
        .iter()
        .find(|r| r.txn.and_then(|t| txns.get(&t)).is_some_and(|t| t.outcome == Outcome::Open))
        .map_or(p.end(), |r| r.offset)
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

/// One partition a reader reads.
#[derive(Debug)]
struct Reading {
    key: (Arc<str>, i32),
    /// The next offset (`None`: the partition's start).
    next: Option<i64>,
    /// The position its end was last told at.
    told_end: Option<i64>,
}

/// A reader of [`MemoryPartitions`].
#[derive(Debug)]
struct MemoryReader {
    shared: Arc<Shared>,
    reading: Mutex<Vec<Reading>>,
    /// Rung on every append (see [`Shared::ring`]).
    readable: Arc<tokio::sync::Notify>,
    /// Committed records only, or every record.
    isolation: Isolation,
}

impl MemoryReader {
    /// The next event of a partition with one ready, if any.
    fn ready(&self, state: &mut State) -> Option<Result<Polled<'static>, Error>> {
        let mut reading = self.reading.lock().unwrap_or_else(PoisonError::into_inner);
        // Each partition in turn: the one served goes last.
        let (mut served, mut event) = (None, None);
        let committed = self.isolation == Isolation::Committed;
        let State { partitions, txns, corrupt, .. } = state;
        for (i, r) in reading.iter_mut().enumerate() {
            let p = partitions.entry(r.key.clone()).or_default();
            // Before the start (deleted) or past the end: from the start,
            // said when past the end (the log was cut under the reader).
            let next = match r.next {
                Some(n) if n >= p.start && n <= p.end() => n,
                Some(n) if n > p.end() => {
                    r.next = Some(p.start);
                    r.told_end = None;
                    let (topic, partition) = (r.key.0.to_string(), r.key.1);
                    event = Some(Ok(Polled::Reset { topic, partition, position: n, log_start: p.start }));
                    served = Some(i);
                    break;
                }
                _ => p.start,
            };
            let (next, found) = next_visible(p, txns, next, committed);
            r.next = Some(next);
            if let Some(record) = found {
                r.next = Some(next + 1);
                r.told_end = None;
                if corrupt.contains(&(Arc::clone(&r.key.0), r.key.1, next)) {
                    let (topic, partition, offset) = (r.key.0.to_string(), r.key.1, next);
                    let what = format!("the record batch at offset {offset}: its checksum does not match (injected)");
                    event = Some(Err(Error::CorruptBatch { topic, partition, offset, what }));
                    served = Some(i);
                    break;
                }
                let every = !committed;
                event =
                    Some(Ok(Polled::Record(LogRecord(RecordOf::Memory(Arc::clone(&r.key.0), r.key.1, record, every)))));
            } else if r.told_end != Some(next) {
                r.told_end = Some(next);
                event = Some(Ok(Polled::EndOfPartition { partition: r.key.1, next_offset: Some(next) }));
            }
            if event.is_some() {
                served = Some(i);
                break;
            }
        }
        if let Some(i) = served {
            reading[i..].rotate_left(1);
        }
        event
    }
}

impl PartitionRead for MemoryReader {
    fn poll(&self, timeout: Duration) -> Result<Polled<'_>, Error> {
        let deadline = Instant::now() + timeout;
        let mut state = self.shared.lock();
        loop {
            if !state.available {
                return Err(unavailable("reading"));
            }
            if let Some(event) = self.ready(&mut state) {
                return event;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Ok(Polled::Idle);
            }
            state = self.shared.appended.wait_timeout(state, left).unwrap_or_else(PoisonError::into_inner).0;
        }
    }

    fn readable(&self) -> Readable<'_> {
        Box::pin(self.readable.notified())
    }

    fn add_partitions(&self, topic: &str, start: &[(i32, Option<i64>)]) -> Result<(), Error> {
        let mut reading = self.reading.lock().unwrap_or_else(PoisonError::into_inner);
        for (partition, next) in start {
            reading.push(Reading { key: (Arc::from(topic), *partition), next: *next, told_end: None });
        }
        // Its records (or its end) may be there to read already.
        self.readable.notify_one();
        Ok(())
    }

    fn known_end(&self, topic: &str, partition: i32) -> Option<i64> {
        let state = self.shared.lock();
        let p = state.partitions.get(&(Arc::from(topic), partition))?;
        // A committed reader ends at the last stable offset, as Kafka's.
        Some(if self.isolation == Isolation::Committed { last_stable(p, &state.txns) } else { p.end() })
    }
}

#[cfg(test)]
mod tests {
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
        assert!(matches!(reader.poll(Duration::from_millis(10)), Ok(Polled::Record(_))));
    }
}
