//! A reader of [`MemoryPartitions`](super::memory::MemoryPartitions): the
//! partitions it reads, in turn, from the shared log.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use kshard_kafka::{Error, Isolation};

use super::memory_log::{Shared, State, last_stable, next_visible, unavailable};
use super::{LogRecord, PartitionRead, Polled, Readable, RecordOf, RecordRun};

/// One partition a reader reads.
#[derive(Debug)]
pub(super) struct Reading {
    pub(super) key: (Arc<str>, i32),
    /// The next offset (`None`: the partition's start).
    pub(super) next: Option<i64>,
    /// The position its end was last told at.
    pub(super) told_end: Option<i64>,
}

/// A reader of [`MemoryPartitions`].
#[derive(Debug)]
pub(super) struct MemoryReader {
    pub(super) shared: Arc<Shared>,
    pub(super) reading: Mutex<Vec<Reading>>,
    /// Rung on every append (see [`Shared::ring`]).
    pub(super) readable: Arc<tokio::sync::Notify>,
    /// Committed records only, or every record.
    pub(super) isolation: Isolation,
}

impl MemoryReader {
    /// The next event of a partition with one ready, if any.
    pub(super) fn ready(&self, state: &mut State) -> Option<Result<Polled<'static>, Error>> {
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
                event = Some(Ok(Polled::Records(RecordRun::one(LogRecord(RecordOf::Memory(
                    Arc::clone(&r.key.0),
                    r.key.1,
                    record,
                    every,
                ))))));
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
