//! The runtime's seam with the log its recovery logs live in and its sources
//! come from: [`Partitions`] reads a partition from an offset, appends a
//! record and says where it landed, tells partitions' ends and deletes
//! records before an offset. [`kafka::KafkaPartitions`] is Kafka (kshard's
//! reader, one writer and one admin client per member);
//! [`memory::MemoryPartitions`] keeps partitions in memory, so that whole
//! clusters of members can run in one test without a broker.
//! `conformance` (with the `testing` feature) is the contract as checks,
//! run against both.
//!
//! Replicas are async tasks, so nothing here blocks a task's thread: a
//! reader is polled without waiting and awaited through
//! [`PartitionRead::readable`] ([`next_event`] does both), an append's
//! delivery is awaited ([`Appended::delivered`]), and the calls that ask the
//! log something ([`Partitions::ends`], [`Partitions::delete_before`]) are
//! futures (Kafka's run on tokio's blocking pool). Tasks time out on tokio's
//! clock, which a test can drive.

#[cfg(any(test, feature = "testing"))]
pub mod conformance;
pub(crate) mod kafka;
mod log_record;
pub(crate) mod memory;
mod memory_log;
mod memory_reader;

pub use kafka::{KafkaPartitions, LogTopicError, ensure_log_topic, ensure_output_topic};
pub use kshard_kafka::{OutBatch, OutRecord};
pub(crate) use log_record::RecordOf;
pub use log_record::{LogRecord, RecordRun};
pub use memory::{MemoryPartitions, ReadBack};

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use kshard_kafka::{Error, Isolation};

/// (low, high) offsets by (topic, partition).
pub type Ends = HashMap<(String, i32), (i64, i64)>;

/// A call to the log, to await.
pub type Pending<'a, T> = Pin<Box<dyn Future<Output = Result<T, Error>> + Send + 'a>>;

/// What [`PartitionRead::readable`] returns.
pub type Readable<'a> = Pin<Box<dyn Future<Output = ()> + Send + 'a>>;

/// Partitions the runtime reads and writes.
pub trait Partitions: Send + Sync + std::fmt::Debug + 'static {
    /// A reader of `topic`, each listed partition from its offset (`None`:
    /// the earliest), holding at most about `queue_kbytes` read ahead.
    fn reader(
        &self,
        topic: &str,
        start: &[(i32, Option<i64>)],
        queue_kbytes: u32,
        isolation: Isolation,
    ) -> Result<Box<dyn PartitionRead>, Error>;

    /// Queues a record for `topic`/`partition` without waiting (records
    /// queued for one partition land in the order queued);
    /// [`Appended::delivered`] tells where it landed, or why it did not.
    fn append(&self, topic: &str, partition: i32, key: &[u8], value: Option<&[u8]>) -> Result<Appended, Error>;

    /// The (low, high) offsets of each of `partitions`; one not known (not
    /// there, or without a leader) is left out.
    fn ends<'a>(&'a self, partitions: &'a [(String, i32)]) -> Pending<'a, Ends>;

    /// Deletes the records of `topic`/`partition` before `offset`: the
    /// partition's start after it. An offset past the end is refused.
    fn delete_before<'a>(&'a self, topic: &'a str, partition: i32, offset: i64) -> Pending<'a, i64>;

    /// Where a reader of committed records of `topic`/`partition` ends now:
    /// its last stable offset — before the first record of a transaction
    /// still open, the high watermark when none is. What "the head" of a
    /// recovery log is to its players: a transaction a crashed primary left
    /// open holds the rest back until a new primary's writer aborts it.
    fn stable_end<'a>(&'a self, topic: &'a str, partition: i32) -> Pending<'a, i64>;

    /// How many partitions `topic` has now (`None`: no such topic): what
    /// shards made one per partition follow ([`crate::PartitionShards`]).
    fn partition_count<'a>(&'a self, topic: &'a str) -> Pending<'a, Option<i32>>;

    /// The writer of `transactional_id` (a shard's), fencing every earlier
    /// one: a transaction an earlier writer left open is aborted, and its
    /// writes and commits are refused from now on ([`Error::is_fenced`]).
    fn transactional<'a>(&'a self, transactional_id: &'a str) -> Pending<'a, Box<dyn TxnWrite>>;
}

/// One transactional id's writer (see [`Partitions::transactional`]):
/// records sent between two commits are one transaction — a reader of
/// committed records ([`Isolation::Committed`]) sees all of them, once the
/// commit returns, or none. Each commit and abort takes an offset in every
/// partition the transaction wrote (Kafka's markers, never read), so
/// committed readers see gaps between offsets; and they read no further
/// than the first record of a transaction still open (the partition's last
/// stable offset), so an open transaction holds them back until it ends.
pub trait TxnWrite: Send + Sync + std::fmt::Debug {
    /// Adds `partitions` to the open transaction (opening one) in one call,
    /// before records are sent to them ([`TxnWrite::send`] adds a partition
    /// itself otherwise, one call each).
    fn add_partitions<'a>(&'a mut self, partitions: &'a [(&'a str, i32)]) -> Pending<'a, ()>;

    /// Writes `records` to `topic`/`partition` in the open transaction
    /// (opening one), as one batch: the first record's delivery (the others
    /// land at the offsets after it).
    fn send<'a>(&'a mut self, topic: &'a str, partition: i32, records: OutBatch) -> Pending<'a, Appended>;
    /// Waits for every record sent, then commits the open transaction (none
    /// open: nothing to do). An error leaves it to [`TxnWrite::abort`].
    fn commit(&mut self) -> Pending<'_, ()>;
    /// Abandons the open transaction, if any: committed readers never see it.
    fn abort(&mut self) -> Pending<'_, ()>;
}

/// Reads partitions from chosen offsets, with an event when each reaches its
/// end (see [`kshard_kafka::PartitionReader`], which the Kafka one is).
pub trait PartitionRead: Send + Sync + std::fmt::Debug {
    /// Waits up to `timeout` for the next event, blocking the thread (a
    /// task polls with a zero timeout, or calls [`next_event`]).
    fn poll(&self, timeout: Duration) -> Result<Polled<'_>, Error>;
    /// Resolves once [`PartitionRead::poll`] may have an event without
    /// waiting; awaited after a zero-timeout poll was [`Polled::Idle`]. It
    /// may resolve with nothing there after all. Cancel-safe.
    fn readable(&self) -> Readable<'_>;
    /// Reads partitions of `topic` too, each from its offset.
    fn add_partitions(&self, topic: &str, start: &[(i32, Option<i64>)]) -> Result<(), Error>;
    /// Where a partition read ends, as last heard without asking (`None`:
    /// not known; ask [`Partitions::ends`]).
    fn known_end(&self, topic: &str, partition: i32) -> Option<i64>;
}

/// Waits up to `timeout` (on tokio's clock) for `reader`'s next event,
/// without blocking the task's thread.
pub async fn next_event(reader: &dyn PartitionRead, timeout: Duration) -> Result<Polled<'_>, Error> {
    // The clock is read only when nothing is ready: a read per record was a
    // measurable share of a cold start.
    let mut deadline = None;
    loop {
        match reader.poll(Duration::ZERO)? {
            Polled::Idle => {}
            event => return Ok(event),
        }
        let deadline = *deadline.get_or_insert_with(|| tokio::time::Instant::now() + timeout);
        if tokio::time::timeout_at(deadline, reader.readable()).await.is_err() {
            return Ok(Polled::Idle);
        }
    }
}

/// What one poll produced.
#[derive(Debug)]
pub enum Polled<'a> {
    /// Records of one partition, in order: as many as were ready (a
    /// reader of Kafka hands out what it fetched; the memory log, one).
    Records(RecordRun<'a>),
    /// The reader reached the current end of `partition`; its next offset,
    /// when known.
    EndOfPartition {
        /// The partition.
        partition: i32,
        /// The offset read next.
        next_offset: Option<i64>,
    },
    /// The log of `topic`/`partition` no longer holds the reader's
    /// `position`: it was cut below it (an unclean leader election, a topic
    /// deleted and made again). The reader reads on from `log_start`, and
    /// offsets it had read may now name other records.
    Reset {
        /// The topic.
        topic: String,
        /// The partition.
        partition: i32,
        /// The reader's position, past the log's end.
        position: i64,
        /// Where it reads on from.
        log_start: i64,
    },
    /// Nothing arrived in time.
    Idle,
}

/// A record appended, its delivery to come.
#[derive(Debug)]
pub struct Appended(pub(crate) AppendedOf);

#[derive(Debug)]
pub(crate) enum AppendedOf {
    Kafka(kshard_kafka::Delivery),
    Done(Result<i64, String>),
    /// Landing later (an append held back by a fault gate).
    #[cfg(any(test, feature = "testing"))]
    Later(tokio::sync::watch::Receiver<Option<Result<i64, String>>>),
}

impl Appended {
    /// Waits up to `timeout` for the record's own delivery, blocking the
    /// thread: its offset.
    pub fn wait(&self, timeout: Duration) -> Result<i64, Error> {
        match &self.0 {
            AppendedOf::Kafka(d) => d.wait(timeout),
            AppendedOf::Done(done) => Self::done(done),
            // Lands when a task of the runtime lands it: never while this
            // thread blocks on it. Await `delivered` instead.
            #[cfg(any(test, feature = "testing"))]
            AppendedOf::Later(later) => match &*later.borrow() {
                Some(done) => Self::done(done),
                None => Err(Error::Refused { step: "appending".into(), message: "held back by a fault gate".into() }),
            },
        }
    }

    /// Awaits the record's own delivery: its offset. Bound it with a timer:
    /// Kafka's ends within the writer's message timeout. Cancel-safe.
    pub async fn delivered(&self) -> Result<i64, Error> {
        match &self.0 {
            AppendedOf::Kafka(d) => d.delivered().await,
            AppendedOf::Done(done) => Self::done(done),
            #[cfg(any(test, feature = "testing"))]
            AppendedOf::Later(later) => {
                let mut later = later.clone();
                match later.wait_for(Option::is_some).await {
                    Ok(done) => Self::done(done.as_ref().unwrap_or(&Err("never landed".into()))),
                    Err(_) => Self::done(&Err("the append was dropped before it landed".into())),
                }
            }
        }
    }

    fn done(done: &Result<i64, String>) -> Result<i64, Error> {
        done.clone().map_err(|message| Error::Refused { step: "appending".into(), message })
    }
}
