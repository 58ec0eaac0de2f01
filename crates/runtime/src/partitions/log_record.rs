//! What a [`super::PartitionRead`] hands out: [`RecordRun`]s of
//! [`LogRecord`]s, read in place (Kafka's, in the fetched answer) until the
//! run is dropped.

use std::sync::Arc;

use kshard_kafka::{Error, ReadRecord, Transactional};

use super::memory_log;

/// A record read, valid until the next poll.
#[derive(Debug)]
pub struct LogRecord<'a>(pub(crate) RecordOf<'a>);

#[derive(Debug)]
pub(crate) enum RecordOf<'a> {
    Kafka(ReadRecord<'a>),
    /// A record of the memory log, and whether it was read with every
    /// record (uncommitted ones and markers too).
    Memory(Arc<str>, i32, Arc<memory_log::Stored>, bool),
}

impl<'a> LogRecord<'a> {
    pub(crate) fn kafka(record: ReadRecord<'a>) -> Self {
        LogRecord(RecordOf::Kafka(record))
    }

    /// The topic.
    pub fn topic(&self) -> &str {
        match &self.0 {
            RecordOf::Kafka(r) => r.topic(),
            RecordOf::Memory(topic, ..) => topic,
        }
    }

    /// The partition.
    pub fn partition(&self) -> i32 {
        match &self.0 {
            RecordOf::Kafka(r) => r.partition(),
            RecordOf::Memory(_, partition, ..) => *partition,
        }
    }

    /// The offset.
    pub fn offset(&self) -> i64 {
        match &self.0 {
            RecordOf::Kafka(r) => r.offset(),
            RecordOf::Memory(_, _, s, _) => s.offset,
        }
    }

    /// The key (`None`: null).
    pub fn key(&self) -> Option<&[u8]> {
        match &self.0 {
            RecordOf::Kafka(r) => r.key(),
            RecordOf::Memory(_, _, s, _) => s.key.as_deref(),
        }
    }

    /// The value (`None`: null).
    pub fn value(&self) -> Option<&[u8]> {
        match &self.0 {
            RecordOf::Kafka(r) => r.value(),
            RecordOf::Memory(_, _, s, _) => s.value.as_deref(),
        }
    }

    /// Its timestamp (milliseconds since the epoch) and whether the broker
    /// set it on append (LogAppendTime) rather than its producer (CreateTime).
    pub fn timestamp(&self) -> (i64, bool) {
        match &self.0 {
            RecordOf::Kafka(r) => r.timestamp(),
            RecordOf::Memory(_, _, s, _) => (s.timestamp_ms, false),
        }
    }

    /// Its headers, in order: name and value (`None`: null).
    pub fn headers(&self) -> Vec<(&str, Option<&[u8]>)> {
        match &self.0 {
            RecordOf::Kafka(r) => r.headers(),
            RecordOf::Memory(_, _, s, _) => s.headers.iter().map(|(k, v)| (k.as_str(), v.as_deref())).collect(),
        }
    }

    /// Its part in a transaction, for a reader of every record (see
    /// [`ReadRecord::transactional`]).
    pub fn transactional(&self) -> Option<Transactional> {
        match &self.0 {
            RecordOf::Kafka(r) => r.transactional(),
            RecordOf::Memory(_, _, s, every) => s.transactional.filter(|_| *every),
        }
    }
}

/// Records of one partition handed out by one poll, in order (see
/// [`super::Polled::Records`]); those not taken before the run is dropped
/// are the next poll's. A loop takes them:
/// `while let Some(record) = run.next_record()? { … }`.
#[derive(Debug)]
pub struct RecordRun<'a>(RunOf<'a>);

#[derive(Debug)]
enum RunOf<'a> {
    Kafka(kshard_kafka::RecordRun<'a>),
    One(Option<LogRecord<'a>>),
}

impl<'a> RecordRun<'a> {
    pub(crate) fn kafka(run: kshard_kafka::RecordRun<'a>) -> Self {
        RecordRun(RunOf::Kafka(run))
    }

    /// A run of one record.
    pub(crate) fn one(record: LogRecord<'a>) -> Self {
        RecordRun(RunOf::One(Some(record)))
    }

    /// The run's next record (`None`: it is over). A source batch that
    /// fails its checksum is [`Error::CorruptBatch`], skipped: the run goes
    /// on after it.
    pub fn next_record(&mut self) -> Result<Option<LogRecord<'_>>, Error> {
        match &mut self.0 {
            RunOf::Kafka(run) => Ok(run.next_record()?.map(LogRecord::kafka)),
            RunOf::One(record) => Ok(record.take()),
        }
    }
}
