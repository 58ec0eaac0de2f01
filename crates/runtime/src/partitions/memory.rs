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

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError, Weak};
use std::time::{Duration, Instant};

use kshard_kafka::{Error, Isolation};

use super::{Appended, AppendedOf, Ends, LogRecord, PartitionRead, Partitions, Pending, Polled, Readable, RecordOf};

/// A record kept.
#[derive(Debug)]
pub(crate) struct Stored {
    pub(crate) offset: i64,
    pub(crate) key: Option<Vec<u8>>,
    pub(crate) value: Option<Vec<u8>>,
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
        let state = State { partitions: HashMap::new(), available: true };
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
        _isolation: Isolation,
    ) -> Result<Box<dyn PartitionRead>, Error> {
        let readable = Arc::new(tokio::sync::Notify::new());
        self.shared.waiters.lock().unwrap_or_else(PoisonError::into_inner).push(Arc::downgrade(&readable));
        let reader = MemoryReader { shared: Arc::clone(&self.shared), reading: Mutex::new(Vec::new()), readable };
        reader.add_partitions(topic, start)?;
        Ok(Box::new(reader))
    }

    fn append(&self, topic: &str, partition: i32, key: &[u8], value: Option<&[u8]>) -> Result<Appended, Error> {
        let mut state = self.shared.lock();
        if !state.available {
            return Err(unavailable("appending"));
        }
        let p = state.partitions.entry((Arc::from(topic), partition)).or_default();
        let offset = p.end();
        p.records.push_back(Arc::new(Stored { offset, key: Some(key.to_vec()), value: value.map(<[u8]>::to_vec) }));
        drop(state);
        self.shared.ring();
        Ok(Appended(AppendedOf::Done(Ok(offset))))
    }

    fn ends<'a>(&'a self, partitions: &'a [(String, i32)]) -> Pending<'a, Ends> {
        Box::pin(std::future::ready(self.ends_now(partitions)))
    }

    fn delete_before<'a>(&'a self, topic: &'a str, partition: i32, offset: i64) -> Pending<'a, i64> {
        Box::pin(std::future::ready(self.delete_now(topic, partition, offset)))
    }
}

impl MemoryPartitions {
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

/// One partition a reader reads.
#[derive(Debug)]
struct Reading {
    key: (Arc<str>, i32),
    /// The next offset (`None`: the partition's start).
    next: Option<i64>,
    told_end: bool,
}

/// A reader of [`MemoryPartitions`].
#[derive(Debug)]
struct MemoryReader {
    shared: Arc<Shared>,
    reading: Mutex<Vec<Reading>>,
    /// Rung on every append (see [`Shared::ring`]).
    readable: Arc<tokio::sync::Notify>,
}

impl MemoryReader {
    /// The next event of a partition with one ready, if any.
    fn ready(&self, state: &mut State) -> Option<Polled<'static>> {
        let mut reading = self.reading.lock().unwrap_or_else(PoisonError::into_inner);
        // Each partition in turn: the one served goes last.
        let (mut served, mut event) = (None, None);
        for (i, r) in reading.iter_mut().enumerate() {
            let p = state.partitions.entry(r.key.clone()).or_default();
            // Before the start (deleted) or past the end: from the start.
            let next = match r.next {
                Some(n) if n >= p.start && n <= p.end() => n,
                _ => p.start,
            };
            r.next = Some(next);
            if next < p.end() {
                let record = Arc::clone(&p.records[usize::try_from(next - p.start).unwrap_or_default()]);
                r.next = Some(next + 1);
                r.told_end = false;
                event = Some(Polled::Record(LogRecord(RecordOf::Memory(Arc::clone(&r.key.0), r.key.1, record))));
            } else if !r.told_end {
                r.told_end = true;
                event = Some(Polled::EndOfPartition { partition: r.key.1, next_offset: Some(next) });
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
                return Ok(event);
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
            reading.push(Reading { key: (Arc::from(topic), *partition), next: *next, told_end: false });
        }
        // Its records (or its end) may be there to read already.
        self.readable.notify_one();
        Ok(())
    }

    fn known_end(&self, topic: &str, partition: i32) -> Option<i64> {
        self.shared.lock().partitions.get(&(Arc::from(topic), partition)).map(Partition::end)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn memory_partitions_keep_the_contract() {
        let log = MemoryPartitions::default();
        super::super::conformance::run_all(&log, &["a".into(), "b".into(), "c".into(), "d".into()]).await;
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
