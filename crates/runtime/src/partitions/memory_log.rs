//! The log of [`MemoryPartitions`](super::memory::MemoryPartitions): each
//! partition's records, every transactional writer and transaction, and the
//! lock and wake-ups its writers and readers share; what a reader sees of it
//! ([`next_visible`], [`last_stable`]) as Kafka's readers would.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError, Weak};

use kshard_kafka::{Error, Transactional};

use super::OutRecord;

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
    pub(super) txn: Option<u64>,
    /// Its part in that transaction: a record of it, or the marker that
    /// ended it (read by uncommitted readers only, as Kafka's are).
    pub(crate) transactional: Option<Transactional>,
}

/// Where a transaction stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Outcome {
    Open,
    Committed,
    Aborted,
}

/// A transactional id's current writer, and its open transaction.
#[derive(Debug, Default)]
pub(super) struct TxnProducer {
    /// Its producer id, as Kafka's: one per transactional id.
    pub(super) id: i64,
    pub(super) epoch: u64,
    pub(super) open: Option<u64>,
}

/// A transaction: where it stands, its producer, the partitions it wrote.
#[derive(Debug)]
pub(super) struct Txn {
    pub(super) outcome: Outcome,
    pub(super) producer_id: i64,
    pub(super) partitions: Vec<(Arc<str>, i32)>,
}

/// A control record's key as Kafka writes it: version 0, then the type
/// (0 ABORT, 1 COMMIT).
pub(super) fn marker_key(committed: bool) -> Vec<u8> {
    vec![0, 0, 0, u8::from(committed)]
}

#[derive(Debug, Default)]
pub(super) struct Partition {
    /// The offset of the first record kept.
    pub(super) start: i64,
    pub(super) records: VecDeque<Arc<Stored>>,
}

impl Partition {
    pub(super) fn end(&self) -> i64 {
        self.start + self.records.len() as i64
    }
}

#[derive(Debug)]
pub(super) struct State {
    pub(super) partitions: HashMap<(Arc<str>, i32), Partition>,
    pub(super) available: bool,
    /// Every transactional id's writer.
    pub(super) producers: HashMap<String, TxnProducer>,
    /// Every transaction.
    pub(super) txns: HashMap<u64, Txn>,
    pub(super) next_txn: u64,
    /// Records readers are told failed their checksum, and skip.
    pub(super) corrupt: std::collections::HashSet<(Arc<str>, i32, i64)>,
}

impl State {
    /// Appends a record to `topic`/`partition`: its offset.
    pub(super) fn push(
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
    pub(super) fn end_txn(&mut self, txn: u64, outcome: Outcome) {
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
    pub(super) fn fenced(&self, id: &str, epoch: u64) -> Option<Error> {
        (self.producers.get(id).map(|p| p.epoch) != Some(epoch))
            .then(|| Error::Kafka { step: format!("writing as transactional id {id}"), code: 90 })
    }
}

#[derive(Debug)]
pub(super) struct Shared {
    pub(super) state: Mutex<State>,
    /// Rung on every append.
    pub(super) appended: Condvar,
    /// Each reader's async waiter, rung with `appended`.
    pub(super) waiters: Mutex<Vec<Weak<tokio::sync::Notify>>>,
}

impl Shared {
    pub(super) fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Wakes every reader, blocked or awaiting.
    pub(super) fn ring(&self) {
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

/// The error of every call while unavailable.
pub(super) fn unavailable(step: &str) -> Error {
    Error::Refused { step: step.to_owned(), message: "the log is unavailable (injected)".into() }
}

/// From `next`, the next record of `p` a reader reads, and its offset (or
/// where it stops): a committed reader skips markers and aborted records
/// and stops at an open transaction's first; an uncommitted one reads them
/// all.
pub(super) fn next_visible(
    p: &Partition,
    txns: &HashMap<u64, Txn>,
    mut next: i64,
    committed: bool,
) -> (i64, Option<Arc<Stored>>) {
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
pub(super) fn last_stable(p: &Partition, txns: &HashMap<u64, Txn>) -> i64 {
    p.records
        .iter()
        .find(|r| r.txn.and_then(|t| txns.get(&t)).is_some_and(|t| t.outcome == Outcome::Open))
        .map_or(p.end(), |r| r.offset)
}
