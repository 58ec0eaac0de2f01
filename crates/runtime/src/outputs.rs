//! What a transaction publishes, held as the batches it goes out in: each
//! partition's records encoded as they are published ([`OutBatch`]), in
//! order, a batch at most [`BATCH_BYTES`]. A word of a word count takes
//! about its own length and a dozen bytes until the commit sends it, not a
//! record with allocations of its own, copied again when sent.

use std::collections::HashMap;
use std::sync::Arc;

use kshard_kafka::{BatchMark, OutBatch, OutRecord};

/// The most bytes of records sent as one batch (Kafka's default
/// `max.message.bytes` is 1 MiB; one record larger than this goes alone).
pub(crate) const BATCH_BYTES: usize = 512 * 1024;

/// Records a transaction published to one partition, sent as one batch.
#[derive(Debug, Clone)]
pub struct Output {
    /// The topic (shared by the transaction's outputs to it).
    pub topic: Arc<str>,
    /// The partition.
    pub partition: i32,
    /// The records, in the order published.
    pub batch: OutBatch,
}

/// A transaction's outputs.
#[derive(Debug, Default)]
pub(crate) struct Outputs {
    /// In the order each was opened: a partition's batches in order.
    batches: Vec<Output>,
    /// The topics published to, each name allocated once.
    topics: Vec<Arc<str>>,
    /// Each partition's last batch in `batches`, by (topic in `topics`, partition).
    open: HashMap<(usize, i32), usize>,
    /// Kept from [`Outputs::mark`] on, to go back to.
    undo: Option<Undo>,
}

/// Where the outputs were at a mark.
#[derive(Debug)]
struct Undo {
    batches: usize,
    /// The batches written to since, as they were at the mark.
    touched: Vec<(usize, BatchMark)>,
}

impl Outputs {
    /// Appends `record` to `topic`/`partition`: the bytes it took.
    pub(crate) fn publish(&mut self, topic: &str, partition: i32, record: &OutRecord) -> usize {
        let t = match self.topics.iter().position(|t| **t == *topic) {
            Some(t) => t,
            None => {
                self.topics.push(Arc::from(topic));
                self.topics.len() - 1
            }
        };
        let fits = |o: &Output| o.batch.is_empty() || o.batch.bytes() + OutBatch::encoded_len(record) <= BATCH_BYTES;
        let i = match self.open.get(&(t, partition)) {
            Some(&i) if fits(&self.batches[i]) => i,
            _ => {
                let topic = Arc::clone(&self.topics[t]);
                self.batches.push(Output { topic, partition, batch: OutBatch::default() });
                self.open.insert((t, partition), self.batches.len() - 1);
                self.batches.len() - 1
            }
        };
        let batch = &mut self.batches[i].batch;
        if let Some(undo) = &mut self.undo
            && i < undo.batches
            && !undo.touched.iter().any(|(j, _)| *j == i)
        {
            undo.touched.push((i, batch.mark()));
        }
        let before = batch.bytes();
        batch.push(record);
        batch.bytes() - before
    }

    /// Records published.
    pub(crate) fn records(&self) -> usize {
        self.batches.iter().map(|o| o.batch.len()).sum()
    }

    /// Starts keeping what is published next, to undo it.
    pub(crate) fn mark(&mut self) {
        self.undo = Some(Undo { batches: self.batches.len(), touched: Vec::new() });
    }

    /// Drops what was published since [`Outputs::mark`].
    pub(crate) fn undo(&mut self) {
        let Some(undo) = self.undo.take() else { return };
        for (i, mark) in undo.touched {
            self.batches[i].batch.truncate(mark);
        }
        if self.batches.len() > undo.batches {
            self.batches.truncate(undo.batches);
            // Each partition's last batch, again.
            self.open.clear();
            for (i, o) in self.batches.iter().enumerate() {
                let t = self.topics.iter().position(|t| Arc::ptr_eq(t, &o.topic)).unwrap_or_default();
                self.open.insert((t, o.partition), i);
            }
        }
    }

    /// The batches, each partition's in order.
    pub(crate) fn into_batches(self) -> Vec<Output> {
        self.batches
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn values(outputs: Outputs) -> Vec<(i32, Vec<String>)> {
        outputs
            .into_batches()
            .into_iter()
            .map(|o| {
                let records = o.batch.records().expect("reads back");
                let value =
                    |r: &OutRecord| String::from_utf8_lossy(r.value.as_deref().unwrap_or_default()).into_owned();
                (o.partition, records.iter().map(value).collect())
            })
            .collect()
    }

    fn publish(outputs: &mut Outputs, partition: i32, value: &str) {
        outputs.publish("t", partition, &OutRecord::new(None, Some(value.as_bytes())));
    }

    #[test]
    fn each_partitions_records_go_together_in_order() {
        let mut outputs = Outputs::default();
        for (p, v) in [(0, "a"), (1, "b"), (0, "c"), (1, "d"), (2, "e")] {
            publish(&mut outputs, p, v);
        }
        assert_eq!(outputs.records(), 5);
        let want = [(0, vec!["a", "c"]), (1, vec!["b", "d"]), (2, vec!["e"])];
        assert_eq!(values(outputs), want.map(|(p, v)| (p, v.into_iter().map(str::to_owned).collect())));
    }

    #[test]
    fn a_full_batch_is_followed_by_another_of_the_same_partition() {
        let mut outputs = Outputs::default();
        let big = "x".repeat(200 * 1024);
        for _ in 0..3 {
            publish(&mut outputs, 0, &big);
        }
        let batches = outputs.into_batches();
        assert_eq!(batches.iter().map(|o| o.batch.len()).collect::<Vec<_>>(), [2, 1]);
        assert!(batches.iter().all(|o| o.batch.bytes() <= BATCH_BYTES));
    }

    #[test]
    fn an_undo_drops_what_came_after_the_mark_in_every_batch_it_touched() {
        let mut outputs = Outputs::default();
        publish(&mut outputs, 0, "kept-0");
        publish(&mut outputs, 1, "kept-1");
        outputs.mark();
        publish(&mut outputs, 0, "undone");
        publish(&mut outputs, 2, "undone");
        publish(&mut outputs, 1, "undone");
        outputs.undo();
        assert_eq!(outputs.records(), 2);
        publish(&mut outputs, 2, "after");
        let want = [(0, vec!["kept-0"]), (1, vec!["kept-1"]), (2, vec!["after"])];
        assert_eq!(values(outputs), want.map(|(p, v)| (p, v.into_iter().map(str::to_owned).collect())));
    }
}
