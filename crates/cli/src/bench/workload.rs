//! The two applications `bench runtime` runs on both systems, as loads and
//! as checks: the records to produce (with the truth they make) and the
//! committed outputs to take back (each checked as `verify` checks it).
//! Inputs and outputs have one format on both sides, so one [`Workload`]
//! drives and checks kshard's example and Kafka Streams' alike.

use std::collections::HashMap;

use crate::example_sum::{ExpectedFile, Increments, StreamSum, stream_index};
use crate::example_wordcount::{Counts, Lines, decode_count};

/// One application's load and the check of its outputs.
pub(crate) trait Workload: Send {
    /// The next input record: partition, key, value.
    fn next(&mut self) -> (i32, Vec<u8>, Vec<u8>);
    /// Input units produced so far: records (sum) or words (word count),
    /// each reflected by the committed outputs once.
    fn units(&self) -> u64;
    /// One committed output: the input units it newly reflects, or what is
    /// wrong with it (published twice, out of order, not of this app).
    fn take(&mut self, key: Option<&[u8]>, value: Option<&[u8]>) -> Result<u64, String>;
    /// Whether the outputs taken match the truth exactly (run when every
    /// unit is reflected); the first difference otherwise.
    fn exact(&self) -> Result<(), String>;
    /// The source partition an output came from, when its key says.
    fn source_partition(&self, key: &[u8]) -> Option<i32>;
}

/// `example sum`: increments of streams; each stream's latest sum out.
pub(crate) struct SumWorkload {
    increments: Increments,
    partitions: i32,
    records: u64,
    published: HashMap<Vec<u8>, StreamSum>,
}

impl SumWorkload {
    pub(crate) fn new(partitions: i32, streams: u32, every_stream: bool) -> anyhow::Result<Self> {
        let increments = Increments::new(ExpectedFile::default(), partitions, streams, 0x5eed, every_stream)?;
        Ok(SumWorkload { increments, partitions, records: 0, published: HashMap::new() })
    }
}

impl Workload for SumWorkload {
    fn next(&mut self) -> (i32, Vec<u8>, Vec<u8>) {
        self.records += 1;
        let (partition, stream, value) = self.increments.next();
        (partition, stream.as_bytes().to_vec(), value.to_vec())
    }

    fn units(&self) -> u64 {
        self.records
    }

    fn take(&mut self, key: Option<&[u8]>, value: Option<&[u8]>) -> Result<u64, String> {
        let (Some(stream), Some(sum)) = (key, value.and_then(StreamSum::decode)) else {
            return Err("an output that is not a stream's sum".into());
        };
        let last = self.published.entry(stream.to_vec()).or_default();
        if sum.seq <= last.seq {
            let stream = String::from_utf8_lossy(stream);
            return Err(format!("{stream}: sequence {} published after {}", sum.seq, last.seq));
        }
        let reflected = sum.seq - last.seq;
        *last = sum;
        Ok(reflected)
    }

    fn exact(&self) -> Result<(), String> {
        let truth = &self.increments.expected().streams;
        if self.published.len() != truth.len() {
            return Err(format!("{} streams published, {} produced", self.published.len(), truth.len()));
        }
        for (id, want) in truth {
            let got = self.published.get(id.as_bytes()).copied().unwrap_or_default();
            if (got.seq, got.sum) != (want.count, want.sum) {
                return Err(format!(
                    "{id}: last published ({}, {}), true ({}, {})",
                    got.seq, got.sum, want.count, want.sum
                ));
            }
        }
        Ok(())
    }

    fn source_partition(&self, key: &[u8]) -> Option<i32> {
        let i = stream_index(key)?;
        i32::try_from(i % u64::try_from(self.partitions.max(1)).ok()?).ok()
    }
}

/// `example wordcount`: lines of words; every count's update out.
pub(crate) struct CountWorkload {
    lines: Lines,
    published: HashMap<Vec<u8>, u64>,
}

impl CountWorkload {
    pub(crate) fn new(partitions: i32, vocabulary: u32) -> anyhow::Result<Self> {
        Ok(CountWorkload {
            lines: Lines::new(Counts::default(), partitions, vocabulary, 0x5eed)?,
            published: HashMap::new(),
        })
    }
}

impl Workload for CountWorkload {
    fn next(&mut self) -> (i32, Vec<u8>, Vec<u8>) {
        let (partition, line) = self.lines.next();
        (partition, Vec::new(), line.into_bytes())
    }

    fn units(&self) -> u64 {
        self.lines.words()
    }

    fn take(&mut self, key: Option<&[u8]>, value: Option<&[u8]>) -> Result<u64, String> {
        let (Some(word), Some(count)) = (key, value.and_then(decode_count)) else {
            return Err("an output that is not a word's count".into());
        };
        let last = self.published.entry(word.to_vec()).or_default();
        if count != *last + 1 {
            let word = String::from_utf8_lossy(word);
            return Err(format!("{word}: count {count} published after {last}"));
        }
        *last = count;
        Ok(1)
    }

    fn exact(&self) -> Result<(), String> {
        let truth = &self.lines.counts().counts;
        if self.published.len() != truth.len() {
            return Err(format!("{} words published, {} produced", self.published.len(), truth.len()));
        }
        match truth.iter().find(|(w, n)| self.published.get(w.as_bytes()) != Some(n)) {
            Some((word, n)) => Err(format!("{word}: last count {:?}, true {n}", self.published.get(word.as_bytes()))),
            None => Ok(()),
        }
    }

    fn source_partition(&self, _: &[u8]) -> Option<i32> {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Feeds a workload's own inputs back as the outputs a system that
    /// publishes every update would write.
    #[test]
    fn a_sum_workload_takes_its_updates_once_and_in_order() {
        let mut w = SumWorkload::new(4, 3, true).expect("valid");
        let inputs: Vec<_> = (0..10).map(|_| w.next()).collect();
        assert_eq!(w.units(), 10);
        let mut sums: HashMap<Vec<u8>, StreamSum> = HashMap::new();
        let mut outputs = Vec::new();
        for (_, key, value) in &inputs {
            let inc = StreamSum::decode(value).expect("an increment");
            let s = sums.entry(key.clone()).or_default();
            *s = StreamSum { seq: inc.seq, sum: s.sum.wrapping_add(inc.sum) };
            outputs.push((key.clone(), *s));
        }
        // The first three records go one to each stream, in turn.
        assert_eq!(
            inputs.iter().take(3).map(|(p, k, _)| (*p, k.clone())).collect::<Vec<_>>(),
            vec![(0, b"s00000".to_vec()), (1, b"s00001".to_vec()), (2, b"s00002".to_vec())]
        );
        assert!(w.exact().is_err(), "nothing published yet");
        let total: u64 = outputs.iter().map(|(k, s)| w.take(Some(k), Some(&s.encode())).expect("in order")).sum();
        assert_eq!(total, 10);
        w.exact().expect("exact");
        let (k, s) = &outputs[9];
        assert!(w.take(Some(k), Some(&s.encode())).expect_err("twice").contains("published after"));
        assert_eq!(w.source_partition(b"s00006"), Some(2));
    }

    #[test]
    fn a_count_workload_wants_every_update_once() {
        let mut w = CountWorkload::new(2, 5).expect("valid");
        let mut seen: HashMap<String, u64> = HashMap::new();
        for _ in 0..20 {
            let (_, _, line) = w.next();
            for word in String::from_utf8(line).expect("text").split(' ') {
                let n = seen.entry(word.to_owned()).or_default();
                *n += 1;
                assert_eq!(w.take(Some(word.as_bytes()), Some(&n.to_be_bytes())), Ok(1));
            }
        }
        assert_eq!(w.units(), seen.values().sum::<u64>());
        w.exact().expect("exact");
        let (word, n) = seen.iter().next().expect("a word");
        assert!(w.take(Some(word.as_bytes()), Some(&n.to_be_bytes())).is_err(), "an update twice");
    }
}
