//! [`crate::PartitionReader`] through librdkafka's consumer (`reader:
//! librdkafka`, and for settings only librdkafka honours).

use std::time::Duration;

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::{Offset, TopicPartitionList};

use crate::client::Client;
use crate::error::{Result, call};
use crate::librdkafka::context::KshardContext;
use crate::read_record::{ReadEvent, ReadRecord};

/// How long a task waits on librdkafka's non-empty callback before it polls
/// again anyway (see [`RdkafkaReader::readable`]).
const RECHECK: Duration = Duration::from_millis(100);

/// Reads partitions by manual assignment: no consumer group, no commits.
///
/// The reader enables librdkafka's end-of-partition events, so a caller learns
/// that it has read everything the broker has even when the partition ends in
/// control records (transaction markers) that are never delivered, or is empty.
pub(crate) struct RdkafkaReader {
    consumer: BaseConsumer<KshardContext>,
    /// Rung by librdkafka when the consumer's queue becomes non-empty.
    readable: std::sync::Arc<tokio::sync::Notify>,
}

impl std::fmt::Debug for RdkafkaReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RdkafkaReader").finish_non_exhaustive()
    }
}

impl RdkafkaReader {
    /// A reader of `topic` starting each listed partition at its offset
    /// (`None`: the earliest), with a queue of `queue_kbytes`. A process running many readers at once — a runtime member with
    /// a reader per replica — gives each a small one: on a cold start of 50
    /// shards (100 readers), 1 MB queues peaked at 435 MB RSS, 128 KB ones at
    /// 172 MB, for a 29% longer catch-up.
    pub(crate) fn with_queue(
        client: &Client,
        topic: &str,
        start: &[(i32, Option<i64>)],
        queue_kbytes: u32,
    ) -> Result<Self> {
        let queue = queue_kbytes.to_string();
        let mut consumer: BaseConsumer<KshardContext> = client.create_counted(
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
        let readable = std::sync::Arc::new(tokio::sync::Notify::new());
        let ring = std::sync::Arc::clone(&readable);
        consumer.set_nonempty_callback(move || ring.notify_one());
        Ok(RdkafkaReader { consumer, readable })
    }

    /// Adds partitions of `topic` to the assignment, each from its offset (`None`:
    /// the earliest), without disturbing those already assigned.
    pub(crate) fn add_partitions(&self, topic: &str, start: &[(i32, Option<i64>)]) -> Result<()> {
        let mut added = TopicPartitionList::new();
        for &(partition, offset) in start {
            let offset = offset.map_or(Offset::Beginning, Offset::Offset);
            added
                .add_partition_offset(topic, partition, offset)
                .map_err(call(format!("assigning {topic}/{partition}")))?;
        }
        self.consumer.incremental_assign(&added).map_err(call(format!("adding partitions of {topic}")))
    }

    /// Resolves once the consumer's queue may hold an event, or after
    /// [`RECHECK`] at the latest: librdkafka's non-empty callback misses
    /// wake-ups (after a broker restart the queue filled without one, and a
    /// task waiting on it alone read nothing for a minute).
    pub(crate) async fn readable(&self) {
        let _ = tokio::time::timeout(RECHECK, self.readable.notified()).await;
    }

    /// Waits up to `timeout` for the next event.
    pub(crate) fn poll(&self, timeout: Duration) -> Result<ReadEvent<ReadRecord<'_>>> {
        match self.consumer.poll(timeout) {
            None => Ok(ReadEvent::Idle),
            Some(Ok(message)) => Ok(ReadEvent::Record(ReadRecord::librdkafka(message))),
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
