//! Producing keyed records to explicit partitions.

use std::time::Duration;

use rdkafka::producer::{BaseRecord, Producer, ThreadedProducer};

use crate::config::ClientSettings;
use crate::context::KshardContext;
use crate::error::{Result, call};

/// A producer that writes records to explicit partitions and waits for them
/// with [`RecordWriter::flush`]. Idempotence is on, so retries never duplicate
/// or reorder records (the principal needs IdempotentWrite on the cluster).
pub struct RecordWriter {
    producer: ThreadedProducer<KshardContext>,
}

impl std::fmt::Debug for RecordWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RecordWriter").finish_non_exhaustive()
    }
}

impl RecordWriter {
    /// Connects a producer.
    pub fn new(settings: &ClientSettings) -> Result<Self> {
        let producer = settings.create(
            "producer",
            &[
                ("linger.ms", "5"),
                ("batch.num.messages", "10000"),
                ("queue.buffering.max.messages", "1000000"),
                ("compression.type", "none"),
                ("enable.idempotence", "true"),
                ("acks", "all"),
                // Records up to 16 MiB (the runtime's recovery logs allow them;
                // topics with the broker's default limit still refuse more than 1 MiB).
                ("message.max.bytes", "16777216"),
            ],
        )?;
        Ok(RecordWriter { producer })
    }

    /// Queues one record; `value: None` produces a null value (a tombstone).
    /// Blocks while librdkafka's queue is full.
    pub fn send(&self, topic: &str, partition: i32, key: &[u8], value: Option<&[u8]>) -> Result<()> {
        let mut record = BaseRecord::<[u8], [u8]>::to(topic).partition(partition).key(key);
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
