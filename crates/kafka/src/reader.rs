//! Reading chosen partitions from chosen offsets, with end-of-partition events.

use std::time::Duration;

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::message::{BorrowedMessage, Message};
use rdkafka::{Offset, TopicPartitionList};

use crate::config::ClientSettings;
use crate::context::KshardContext;
use crate::error::{Result, call};

/// Reads partitions by manual assignment: no consumer group, no commits.
///
/// The reader enables librdkafka's end-of-partition events, so a caller learns
/// that it has read everything the broker has even when the partition ends in
/// control records (transaction markers) that are never delivered, or is empty.
pub struct PartitionReader {
    consumer: BaseConsumer<KshardContext>,
}

impl std::fmt::Debug for PartitionReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PartitionReader").finish_non_exhaustive()
    }
}

/// One record as read, borrowed from the client's buffer until the next poll.
pub struct ReadRecord<'a> {
    message: BorrowedMessage<'a>,
}

impl std::fmt::Debug for ReadRecord<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReadRecord").field("partition", &self.partition()).field("offset", &self.offset()).finish()
    }
}

impl ReadRecord<'_> {
    /// The topic.
    pub fn topic(&self) -> &str {
        self.message.topic()
    }

    /// The partition.
    pub fn partition(&self) -> i32 {
        self.message.partition()
    }

    /// The record's offset.
    pub fn offset(&self) -> i64 {
        self.message.offset()
    }

    /// The key (`None` when null).
    pub fn key(&self) -> Option<&[u8]> {
        self.message.key()
    }

    /// The value (`None` when null: a tombstone).
    pub fn value(&self) -> Option<&[u8]> {
        self.message.payload()
    }
}

/// What one poll produced.
#[derive(Debug)]
pub enum ReadEvent<'a> {
    /// A record.
    Record(ReadRecord<'a>),
    /// The reader reached the current end of a partition.
    EndOfPartition {
        /// The partition.
        partition: i32,
        /// The offset the reader will read next, when it has read a record of
        /// this partition (librdkafka knows no position before the first one,
        /// e.g. for an empty partition or one holding only transaction markers).
        next_offset: Option<i64>,
    },
    /// Nothing arrived within the poll timeout.
    Idle,
}

impl PartitionReader {
    /// Creates a reader of `topic` starting each listed partition at its offset
    /// (`None`: the earliest offset).
    pub fn new(settings: &ClientSettings, topic: &str, start: &[(i32, Option<i64>)]) -> Result<Self> {
        Self::with_queue(settings, topic, start, 1024)
    }

    /// [`PartitionReader::new`] with a queue of `queue_kbytes` (1024 for
    /// `new`). A process running many readers at once — a runtime member with
    /// a reader per replica — gives each a small one: on a cold start of 50
    /// shards (100 readers), 1 MB queues peaked at 435 MB RSS, 128 KB ones at
    /// 172 MB, for a 29% longer catch-up.
    pub fn with_queue(
        settings: &ClientSettings,
        topic: &str,
        start: &[(i32, Option<i64>)],
        queue_kbytes: u32,
    ) -> Result<Self> {
        let queue = queue_kbytes.to_string();
        let consumer: BaseConsumer<KshardContext> = settings.create(
            "consumer",
            &[
                ("group.id", "kshard-reader"),
                ("enable.auto.commit", "false"),
                ("enable.auto.offset.store", "false"),
                ("enable.partition.eof", "true"),
                ("auto.offset.reset", "earliest"),
                ("isolation.level", "read_committed"),
                ("fetch.wait.max.ms", "100"),
                // librdkafka buffers up to 64 MB per client by default; a reader that
                // applies records as fast as they arrive needs far less, and memory
                // is one of the reasons users run kshard. Measured on Kafka 4.4 with
                // a million records (`bench drain --apply`): 4 MB of queue and fetch
                // peaked at 65 MB RSS in 1.1-1.3 s, these at 25 MB in 1.3-1.5 s.
                // `kafka_properties` raise them for far-away brokers.
                ("queued.max.messages.kbytes", queue.as_str()),
                ("fetch.message.max.bytes", "262144"),
                ("fetch.max.bytes", "2097152"),
                // With the small queue above, a reader that applies records is
                // sometimes a little behind the fetcher; librdkafka then waits
                // this long before fetching that partition again (default: one
                // second, which made catch-up three times slower than the drain).
                ("fetch.queue.backoff.ms", "10"),
            ],
        )?;
        let mut assignment = TopicPartitionList::new();
        for &(partition, offset) in start {
            let offset = offset.map_or(Offset::Beginning, Offset::Offset);
            assignment
                .add_partition_offset(topic, partition, offset)
                .map_err(call(format!("assigning {topic}/{partition}")))?;
        }
        consumer.assign(&assignment).map_err(call(format!("assigning partitions of {topic}")))?;
        Ok(PartitionReader { consumer })
    }

    /// Adds partitions of `topic` to the assignment, each from its offset (`None`:
    /// the earliest), without disturbing those already assigned.
    pub fn add_partitions(&self, topic: &str, start: &[(i32, Option<i64>)]) -> Result<()> {
        let mut added = TopicPartitionList::new();
        for &(partition, offset) in start {
            let offset = offset.map_or(Offset::Beginning, Offset::Offset);
            added
                .add_partition_offset(topic, partition, offset)
                .map_err(call(format!("assigning {topic}/{partition}")))?;
        }
        self.consumer.incremental_assign(&added).map_err(call(format!("adding partitions of {topic}")))
    }

    /// Waits up to `timeout` for the next event.
    pub fn poll(&self, timeout: Duration) -> Result<ReadEvent<'_>> {
        match self.consumer.poll(timeout) {
            None => Ok(ReadEvent::Idle),
            Some(Ok(message)) => Ok(ReadEvent::Record(ReadRecord { message })),
            Some(Err(KafkaError::PartitionEOF(partition))) => {
                let next_offset = self.position(partition)?;
                Ok(ReadEvent::EndOfPartition { partition, next_offset })
            }
            // librdkafka looks up the coordinator of the reader's group.id even
            // though the reader never joins, fetches or commits through it: a
            // principal without rights on that group loses nothing.
            Some(Err(e))
                if e.rdkafka_error_code() == Some(rdkafka::types::RDKafkaErrorCode::GroupAuthorizationFailed) =>
            {
                Ok(ReadEvent::Idle)
            }
            Some(Err(e)) => Err(call("reading")(e)),
        }
    }

    fn position(&self, partition: i32) -> Result<Option<i64>> {
        let positions = self.consumer.position().map_err(call("reading positions"))?;
        Ok(positions
            .elements()
            .iter()
            .find(|e| e.partition() == partition)
            .and_then(|e| e.offset().to_raw())
            .filter(|o| *o >= 0))
    }
}
