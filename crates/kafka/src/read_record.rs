//! What a [`crate::PartitionReader`] hands out, whichever client reads:
//! [`ReadRecord`]s (borrowed until the next poll), end-of-partition events,
//! and the [`Isolation`] that says which records are read.

use std::sync::MutexGuard;

use bytes::Bytes;
use rdkafka::message::{BorrowedMessage, Message};

use crate::wire::fetch_session::PartitionKey;
use crate::wire::records::{Corrupt, Headers, PartitionRecords, RecordAt, Transactional};

/// Which records a reader hands out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Isolation {
    /// Committed records only (`read_committed`): aborted transactions and
    /// markers never appear, and a partition ends at its last stable offset,
    /// so that a transaction left open holds back every record after it
    /// until the broker aborts it.
    #[default]
    Committed,
    /// Every record up to the high watermark (`read_uncommitted`), each
    /// record of a transaction naming its producer and each COMMIT or ABORT
    /// marker handed out ([`ReadRecord::transactional`]): the caller sets
    /// open transactions aside until their marker. kshard's reader only:
    /// librdkafka hides producers and markers, so a librdkafka reader asked
    /// for this reads committed records (see [`crate::PartitionReader::isolation`]).
    Uncommitted,
}

/// One record as read, valid until the next poll.
pub struct ReadRecord<'a> {
    record: RecordOf<'a>,
}

enum RecordOf<'a> {
    Librdkafka(BorrowedMessage<'a>),
    /// The reader's walk, held (locked) until the record is dropped: its key
    /// and value are read in place in the Fetch answer's buffer (or a
    /// decompressed batch's), with nothing copied or counted per record.
    Kshard {
        walk: MutexGuard<'a, Option<Walk>>,
        record: RecordAt,
    },
    /// A record of a [`RecordRun`], which holds the walk.
    InRun {
        key: &'a PartitionKey,
        buffer: &'a Bytes,
        record: RecordAt,
    },
}

/// A partition's records being handed out, one poll at a time.
pub(crate) type Walk = (PartitionKey, PartitionRecords);

impl RecordOf<'_> {
    /// kshard's record, its partition and the buffer its ranges point into.
    fn kshard(&self) -> Option<(&PartitionKey, &Bytes, &RecordAt)> {
        match self {
            RecordOf::Kshard { walk, record } => walk.as_ref().map(|(key, records)| (key, records.buffer(), record)),
            RecordOf::InRun { key, buffer, record } => Some((key, buffer, record)),
            RecordOf::Librdkafka(_) => None,
        }
    }
}

impl std::fmt::Debug for ReadRecord<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReadRecord")
            .field("topic", &self.topic())
            .field("partition", &self.partition())
            .field("offset", &self.offset())
            .finish()
    }
}

impl<'a> ReadRecord<'a> {
    pub(crate) fn librdkafka(message: BorrowedMessage<'a>) -> Self {
        ReadRecord { record: RecordOf::Librdkafka(message) }
    }

    pub(crate) fn kshard(walk: MutexGuard<'a, Option<Walk>>, record: RecordAt) -> Self {
        ReadRecord { record: RecordOf::Kshard { walk, record } }
    }

    fn in_run(key: &'a PartitionKey, buffer: &'a Bytes, record: RecordAt) -> Self {
        ReadRecord { record: RecordOf::InRun { key, buffer, record } }
    }

    /// The topic.
    pub fn topic(&self) -> &str {
        match (&self.record, self.record.kshard()) {
            (RecordOf::Librdkafka(m), _) => m.topic(),
            (_, Some((key, _, _))) => &key.0,
            (_, None) => "",
        }
    }

    /// The partition.
    pub fn partition(&self) -> i32 {
        match (&self.record, self.record.kshard()) {
            (RecordOf::Librdkafka(m), _) => m.partition(),
            (_, Some((key, _, _))) => key.1,
            (_, None) => -1,
        }
    }

    /// The record's offset.
    pub fn offset(&self) -> i64 {
        match &self.record {
            RecordOf::Librdkafka(m) => m.offset(),
            RecordOf::Kshard { record, .. } | RecordOf::InRun { record, .. } => record.offset,
        }
    }

    /// The record's part in a transaction, for a reader of
    /// [`Isolation::Uncommitted`] records; `None` for a record written
    /// outside one, and always when reading committed records.
    pub fn transactional(&self) -> Option<Transactional> {
        match &self.record {
            RecordOf::Librdkafka(_) => None,
            RecordOf::Kshard { record, .. } | RecordOf::InRun { record, .. } => record.transactional,
        }
    }

    /// The key (`None` when null).
    pub fn key(&self) -> Option<&[u8]> {
        match (&self.record, self.record.kshard()) {
            (RecordOf::Librdkafka(m), _) => m.key(),
            (_, Some((_, buffer, r))) => r.key.clone().and_then(|k| buffer.get(k)),
            (_, None) => None,
        }
    }

    /// The record's timestamp, milliseconds since the epoch, and whether the
    /// broker set it when appending (LogAppendTime) rather than the producer
    /// when creating it (CreateTime).
    pub fn timestamp(&self) -> (i64, bool) {
        match &self.record {
            RecordOf::Librdkafka(m) => match m.timestamp() {
                rdkafka::Timestamp::LogAppendTime(ms) => (ms, true),
                rdkafka::Timestamp::CreateTime(ms) => (ms, false),
                rdkafka::Timestamp::NotAvailable => (-1, false),
            },
            RecordOf::Kshard { record, .. } | RecordOf::InRun { record, .. } => {
                (record.timestamp_ms, record.log_append_time)
            }
        }
    }

    /// The record's headers, in order: name and value (`None`: null).
    pub fn headers(&self) -> Vec<(&str, Option<&[u8]>)> {
        match (&self.record, self.record.kshard()) {
            (RecordOf::Librdkafka(m), _) => {
                use rdkafka::message::Headers as _;
                m.headers().map(|h| h.iter().map(|h| (h.key, h.value)).collect()).unwrap_or_default()
            }
            (_, Some((_, buffer, r))) => {
                buffer.get(r.headers.clone()).map(|section| Headers::read(section).collect()).unwrap_or_default()
            }
            (_, None) => Vec::new(),
        }
    }

    /// The value (`None` when null: a tombstone).
    pub fn value(&self) -> Option<&[u8]> {
        match (&self.record, self.record.kshard()) {
            (RecordOf::Librdkafka(m), _) => m.payload(),
            (_, Some((_, buffer, r))) => r.value.clone().and_then(|v| buffer.get(v)),
            (_, None) => None,
        }
    }
}

/// What one poll produced: a record ([`crate::PartitionReader::poll`]), or
/// a run of them ([`crate::PartitionReader::poll_run`]).
#[derive(Debug)]
pub enum ReadEvent<R> {
    /// A record, or a run of records.
    Record(R),
    /// The reader reached the current end of a partition.
    EndOfPartition {
        /// The partition.
        partition: i32,
        /// The offset the reader will read next. kshard's reader always
        /// knows it; librdkafka only once it has read a record of the
        /// partition (not for an empty partition or one holding only
        /// transaction markers).
        next_offset: Option<i64>,
    },
    /// Nothing arrived within the poll timeout.
    Idle,
}

impl<R> ReadEvent<R> {
    /// The same event, its record (or run) made another by `f`.
    pub fn map<S>(self, f: impl FnOnce(R) -> S) -> ReadEvent<S> {
        match self {
            ReadEvent::Record(r) => ReadEvent::Record(f(r)),
            ReadEvent::EndOfPartition { partition, next_offset } => {
                ReadEvent::EndOfPartition { partition, next_offset }
            }
            ReadEvent::Idle => ReadEvent::Idle,
        }
    }
}

/// Records of one partition handed out together, in order, by
/// [`crate::PartitionReader::poll_run`]: one poll, then a call per record
/// that reads it in place. The reader is held until the run is dropped;
/// records the run did not hand out are the next poll's.
pub struct RecordRun<'a>(RunOf<'a>);

enum RunOf<'a> {
    /// kshard's reader: its walk, held.
    Kshard(MutexGuard<'a, Option<Walk>>),
    /// librdkafka's: one record.
    One(Option<ReadRecord<'a>>),
}

impl std::fmt::Debug for RecordRun<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let partition = match &self.0 {
            RunOf::Kshard(walk) => walk.as_ref().map(|(key, _)| (key.0.to_string(), key.1)),
            RunOf::One(record) => record.as_ref().map(|r| (r.topic().to_owned(), r.partition())),
        };
        f.debug_struct("RecordRun").field("partition", &partition).finish_non_exhaustive()
    }
}

impl<'a> RecordRun<'a> {
    pub(crate) fn kshard(walk: MutexGuard<'a, Option<Walk>>) -> Self {
        RecordRun(RunOf::Kshard(walk))
    }

    pub(crate) fn one(record: ReadRecord<'a>) -> Self {
        RecordRun(RunOf::One(Some(record)))
    }

    /// The run's first record, holding the reader as the run did.
    pub(crate) fn into_first(self) -> crate::Result<Option<ReadRecord<'a>>> {
        let mut walk = match self.0 {
            RunOf::One(record) => return Ok(record),
            RunOf::Kshard(walk) => walk,
        };
        let Some((key, records)) = walk.as_mut() else { return Ok(None) };
        match records.next_record() {
            Ok(Some(record)) => Ok(Some(ReadRecord::kshard(walk, record))),
            Ok(None) => {
                *walk = None;
                Ok(None)
            }
            Err(e) => Err(corrupt(key, &e)),
        }
    }

    /// The run's next record (`None`: the run is over). A batch that fails
    /// its checksum or does not add up is [`crate::Error::CorruptBatch`]: it
    /// is skipped, and the run goes on with the next batch.
    pub fn next_record(&mut self) -> crate::Result<Option<ReadRecord<'_>>> {
        let walk = match &mut self.0 {
            RunOf::One(record) => return Ok(record.take()),
            RunOf::Kshard(walk) => walk,
        };
        let Some((key, records)) = walk.as_mut() else { return Ok(None) };
        match records.next_record() {
            Ok(Some(record)) => {
                let Some((key, records)) = walk.as_ref() else { return Ok(None) };
                Ok(Some(ReadRecord::in_run(key, records.buffer(), record)))
            }
            Ok(None) => {
                **walk = None;
                Ok(None)
            }
            Err(e) => Err(corrupt(key, &e)),
        }
    }
}

/// A batch of `key`'s that failed its checksum or did not add up: skipped
/// (the error says which), the walk going on with the next one.
fn corrupt(key: &PartitionKey, e: &Corrupt) -> crate::Error {
    crate::Error::CorruptBatch { topic: key.0.to_string(), partition: key.1, offset: e.offset, what: e.to_string() }
}
