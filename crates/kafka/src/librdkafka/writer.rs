//! Producing keyed records to explicit partitions.

use std::sync::Arc;
use std::time::Duration;

use rdkafka::producer::{BaseRecord, Producer, ThreadedProducer};

use crate::client::Client;
use crate::delivery::{Delivered, Delivery};
use crate::error::{Result, call};
use crate::librdkafka::context::KshardContext;

/// A producer that writes records to explicit partitions and waits for them
/// with [`RecordWriter::flush`], or for one record with
/// [`RecordWriter::append`]'s [`Delivery`]. Idempotence is on, so retries
/// never duplicate or reorder records (the principal needs IdempotentWrite on
/// the cluster).
pub struct RecordWriter {
    producer: ThreadedProducer<KshardContext>,
    /// The delivery slot of records nobody waits for (their failures are logged).
    untracked: Arc<Delivered>,
}

impl std::fmt::Debug for RecordWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RecordWriter").finish_non_exhaustive()
    }
}

impl RecordWriter {
    /// Connects a producer.
    pub fn new(client: &Client) -> Result<Self> {
        Self::with(client, &[])
    }

    /// Connects a producer that never has a missing topic created: a record
    /// for one fails with Kafka's "unknown topic". For topics whose settings
    /// matter (recovery logs): the broker's auto-creation would make one with
    /// its defaults (one partition, retention of a week) in place of a topic
    /// deleted by mistake.
    pub fn for_existing_topics(client: &Client) -> Result<Self> {
        Self::with(client, &[("allow.auto.create.topics", "false")])
    }

    /// A producer for kminion's end-to-end probe: each record sent at once
    /// (no linger), acknowledged by every in-sync replica (`all_acks`,
    /// idempotent) or by the leader alone; a record not acknowledged within
    /// `timeout` fails. Produce requests time out after 3 s and are retried,
    /// as kminion's.
    pub fn probe(client: &Client, all_acks: bool, timeout: Duration) -> Result<Self> {
        let timeout_ms = timeout.as_millis().max(1).to_string();
        let (acks, idempotence) = if all_acks { ("all", "true") } else { ("1", "false") };
        let extra = [
            ("linger.ms", "0"),
            ("acks", acks),
            ("enable.idempotence", idempotence),
            ("request.timeout.ms", "3000"),
            ("message.timeout.ms", timeout_ms.as_str()),
            ("allow.auto.create.topics", "false"),
        ];
        Self::with(client, &extra)
    }

    fn with(client: &Client, extra: &[(&str, &str)]) -> Result<Self> {
        let base = [
            ("linger.ms", "5"),
            ("batch.num.messages", "10000"),
            ("queue.buffering.max.messages", "1000000"),
            ("compression.type", "none"),
            ("enable.idempotence", "true"),
            ("acks", "all"),
            // Records up to 16 MiB (the runtime's recovery logs allow them;
            // topics with the broker's default limit still refuse more than 1 MiB).
            ("message.max.bytes", "16777216"),
        ];
        let properties: Vec<(&str, &str)> = base.iter().chain(extra).copied().collect();
        let producer = client.create_counted("producer", &properties)?;
        Ok(RecordWriter { producer, untracked: Arc::new(Delivered::default()) })
    }

    /// Queues one record and returns its [`Delivery`] to wait on.
    pub fn append(&self, topic: &str, partition: i32, key: &[u8], value: Option<&[u8]>) -> Result<Delivery> {
        let slot = Delivered::tracked();
        self.produce(topic, partition, key, value, Arc::clone(&slot))?;
        Ok(Delivery::new(slot, 0, format!("{topic}/{partition}")))
    }

    /// Queues one record; `value: None` produces a null value (a tombstone).
    /// Blocks while librdkafka's queue is full.
    pub fn send(&self, topic: &str, partition: i32, key: &[u8], value: Option<&[u8]>) -> Result<()> {
        self.produce(topic, partition, key, value, Arc::clone(&self.untracked))
    }

    fn produce(
        &self,
        topic: &str,
        partition: i32,
        key: &[u8],
        value: Option<&[u8]>,
        delivered: Arc<Delivered>,
    ) -> Result<()> {
        let mut record =
            BaseRecord::<[u8], [u8], Arc<Delivered>>::with_opaque_to(topic, delivered).partition(partition).key(key);
        if let Some(v) = value {
            record = record.payload(v);
        }
        // A partition added since the producer last asked for the topic's
        // metadata is unknown to it until it asks again.
        let mut metadata_asked = 0;
        loop {
            match self.producer.send(record) {
                Ok(()) => return Ok(()),
                Err((
                    rdkafka::error::KafkaError::MessageProduction(rdkafka::types::RDKafkaErrorCode::QueueFull),
                    r,
                )) => {
                    record = r;
                    std::thread::sleep(Duration::from_millis(5));
                }
                Err((
                    rdkafka::error::KafkaError::MessageProduction(rdkafka::types::RDKafkaErrorCode::UnknownPartition),
                    r,
                )) if metadata_asked < 10 => {
                    record = r;
                    metadata_asked += 1;
                    let _ = self.producer.client().fetch_metadata(Some(topic), Duration::from_secs(5));
                    std::thread::sleep(Duration::from_millis(100));
                }
                Err((source, _)) => return Err(call(format!("producing to {topic}/{partition}"))(source)),
            }
        }
    }

    /// Waits until every queued record is acknowledged, or `timeout` passes.
    pub fn flush(&self, timeout: Duration) -> Result<()> {
        self.producer.flush(timeout).map_err(call("flushing the producer"))
    }
}
