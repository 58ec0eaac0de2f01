//! The sum application: the runtime's exactly-once proof, in the style of
//! Gazette's stream-sum. A source record is one increment of one stream: key
//! the stream's id, value its sequence number (1, 2, 3 … per stream) and the
//! increment. The store keeps each stream's last sequence number and running
//! sum; a record that does not continue its stream's sequence (a gap, or one
//! counted twice) fails the replica — so a replayed or lost message cannot go
//! unnoticed, and the final sums equal the producer's exactly.
//!
//! Each transaction publishes, exactly once, the latest sum of every stream
//! it changed to `<topic>-sums` (the source's partition; key the stream,
//! value its sequence number and sum; timestamp that of the latest increment
//! in it, as Kafka Streams stamps an aggregate's update): a reader of
//! committed records sees each stream's sums in strictly increasing sequence,
//! its final one once.

use std::collections::BTreeMap;

use kshard_runtime::ShardSpec;
use kshard_runtime::{AppError, Application, Message, OutRecord, ShardApp, Transaction};

/// One stream's state: the last sequence number taken and the running sum.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct StreamSum {
    pub(crate) seq: u64,
    pub(crate) sum: i64,
}

impl StreamSum {
    pub(crate) fn encode(self) -> [u8; 16] {
        let mut out = [0; 16];
        out[..8].copy_from_slice(&self.seq.to_be_bytes());
        out[8..].copy_from_slice(&self.sum.to_be_bytes());
        out
    }

    pub(crate) fn decode(bytes: &[u8]) -> Option<Self> {
        let seq = u64::from_be_bytes(bytes.get(..8)?.try_into().ok()?);
        let sum = i64::from_be_bytes(bytes.get(8..16)?.try_into().ok()?);
        (bytes.len() == 16).then_some(StreamSum { seq, sum })
    }
}

/// A source record's value: the stream's sequence number and the increment.
pub(crate) fn encode_increment(seq: u64, increment: i64) -> [u8; 16] {
    StreamSum { seq, sum: increment }.encode()
}

/// The application: its sums go to `sums` (the topic).
#[derive(Debug, Default)]
pub(crate) struct Sum {
    pub(crate) sums: String,
}

/// The topic `topic`'s sums are published to.
pub(crate) fn sums_topic(topic: &str) -> String {
    format!("{topic}-sums")
}

impl Application for Sum {
    fn shard(&self, shard: &ShardSpec) -> Result<Box<dyn ShardApp>, AppError> {
        let partition = shard.sources.first().map_or(0, |s| s.partition);
        Ok(Box::new(SumShard { sums: self.sums.clone(), partition, changed: BTreeMap::new() }))
    }
}

/// One replica's object: the streams the open transaction changed (each
/// with its latest increment's timestamp).
#[derive(Debug, Default)]
pub(crate) struct SumShard {
    sums: String,
    partition: i32,
    changed: BTreeMap<Vec<u8>, (StreamSum, i64)>,
}

impl ShardApp for SumShard {
    fn begin(&mut self, _: &mut Transaction<'_>) -> Result<(), AppError> {
        self.changed.clear();
        Ok(())
    }

    /// Each stream's latest sum, once per transaction.
    fn finalize(&mut self, txn: &mut Transaction<'_>) -> Result<(), AppError> {
        for (stream, (sum, timestamp_ms)) in std::mem::take(&mut self.changed) {
            let record = OutRecord::new(Some(&stream), Some(&sum.encode())).at(timestamp_ms);
            txn.publish(&self.sums, self.partition, record);
        }
        Ok(())
    }

    fn consume(&mut self, txn: &mut Transaction<'_>, message: &Message<'_>) -> Result<(), AppError> {
        let stream = message.key.ok_or("a record without a stream id")?;
        let StreamSum { seq, sum: increment } =
            message.value.and_then(StreamSum::decode).ok_or("a value that is not 16 bytes of (seq, increment)")?;
        let stored = txn.get(stream)?;
        let current = match stored {
            Some(bytes) => StreamSum::decode(&bytes).ok_or("a stored sum that is not 16 bytes")?,
            None => StreamSum::default(),
        };
        if seq != current.seq + 1 {
            let what = if seq <= current.seq { "a repeat" } else { "a gap" };
            return Err(format!(
                "stream {}: {what}: sequence {seq} after {}",
                String::from_utf8_lossy(stream),
                current.seq
            )
            .into());
        }
        let next = StreamSum { seq, sum: current.sum.wrapping_add(increment) };
        txn.put(stream.to_vec(), next.encode().to_vec());
        self.changed.insert(stream.to_vec(), (next, message.timestamp_ms));
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kshard_runtime::MemoryStore;

    fn take(txn: &mut Transaction<'_>, seq: u64, inc: i64) -> Result<(), AppError> {
        let value = encode_increment(seq, inc);
        let m = Message::new("t", 0, 0, Some(b"s1"), Some(&value));
        SumShard::default().consume(txn, &m)
    }

    #[test]
    fn sums_in_sequence_and_fails_on_a_gap_or_a_repeat() {
        let store = MemoryStore::default();
        let mut txn = Transaction::new(&store);
        take(&mut txn, 1, 5).expect("first");
        take(&mut txn, 2, -2).expect("second");
        let got = txn.get(b"s1").expect("reads").and_then(|b| StreamSum::decode(&b));
        assert_eq!(got, Some(StreamSum { seq: 2, sum: 3 }));
        let repeat = take(&mut txn, 2, 1).expect_err("a repeat").to_string();
        assert!(repeat.contains("a repeat: sequence 2 after 2"), "{repeat}");
        let gap = take(&mut txn, 4, 1).expect_err("a gap").to_string();
        assert!(gap.contains("a gap: sequence 4 after 2"), "{gap}");
        let m = Message::new("t", 0, 0, Some(b"s1"), Some(b"short"));
        assert!(SumShard::default().consume(&mut txn, &m).is_err());
    }
}
