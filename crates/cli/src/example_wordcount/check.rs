//! `kshard example wordcount produce` (lines of random words, and the true
//! counts) and `verify` (every count's update read back as a consumer of
//! committed records reads it: 1, 2, 3 … up to the true count for every
//! word — none twice, none missing, none of a transaction that did not
//! commit).

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use kshard_kafka::{Client, PartitionReader, ReadEvent, RecordWriter};
use serde::{Deserialize, Serialize};

use super::app::{counts_topic, decode_count};
use crate::example_sum::Rng;

/// The file `produce` writes and `verify` reads: the true counts.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Counts {
    pub(crate) topic: String,
    pub(crate) counts: BTreeMap<String, u64>,
}

impl Counts {
    fn load(path: &Path) -> Result<Option<Self>> {
        match std::fs::read(path) {
            Ok(bytes) => Ok(Some(
                serde_json::from_slice(&bytes).with_context(|| format!("{} is not a counts file", path.display()))?,
            )),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e).with_context(|| format!("reading {}", path.display())),
        }
    }
}

/// Lines of 1 to 12 words drawn from a vocabulary (some words far more
/// common than others), to a topic's partitions in turn, and the true counts
/// they make: what `produce` writes, and the bench's loads.
pub(crate) struct Lines {
    file: Counts,
    vocabulary: u64,
    partitions: u64,
    rng: Rng,
    sent: u64,
    words: u64,
}

impl Lines {
    /// Lines of `vocabulary` words, continuing the counts in `file`; `seed`
    /// fixes the draw.
    pub(crate) fn new(file: Counts, partitions: i32, vocabulary: u32, seed: u64) -> Result<Self> {
        if vocabulary == 0 {
            bail!("invalid vocabulary: at least 1");
        }
        let partitions = u64::try_from(partitions.max(1)).unwrap_or(1);
        Ok(Lines { file, vocabulary: u64::from(vocabulary), partitions, rng: Rng(seed | 1), sent: 0, words: 0 })
    }

    /// The next line and its partition.
    pub(crate) fn next(&mut self) -> (i32, String) {
        let words = 1 + self.rng.next() % 12;
        let mut line = Vec::new();
        for _ in 0..words {
            // Squared: some words far more common than others.
            let r = self.rng.next() % self.vocabulary;
            let word = format!("w{:04}", r * r / self.vocabulary);
            *self.file.counts.entry(word.clone()).or_default() += 1;
            line.push(word);
        }
        self.words += words;
        let partition = i32::try_from(self.sent % self.partitions).unwrap_or(0);
        self.sent += 1;
        (partition, line.join(" "))
    }

    /// Words in the lines so far.
    pub(crate) fn words(&self) -> u64 {
        self.words
    }

    /// The true counts so far.
    pub(crate) fn counts(&self) -> &Counts {
        &self.file
    }

    fn save(&self, path: &Path) -> Result<()> {
        let json = serde_json::to_vec_pretty(&self.file).context("encoding the counts")?;
        std::fs::write(path, json).with_context(|| format!("writing {}", path.display()))
    }
}

/// Writes `lines` [`Lines`] of `vocabulary` words to `topic`'s `partitions`
/// in turn, and adds their words to the counts in `expected`.
pub(crate) fn produce(
    kafka: &Client,
    topic: &str,
    partitions: i32,
    vocabulary: u32,
    lines: u64,
    expected: &Path,
) -> Result<()> {
    let file = Counts::load(expected)?.unwrap_or_else(|| Counts { topic: topic.to_owned(), ..Counts::default() });
    if file.topic != topic {
        bail!("{} holds the counts of topic {}, not {topic}", expected.display(), file.topic);
    }
    let writer = RecordWriter::new(kafka).context("connecting a producer")?;
    let seed = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_nanos();
    let mut generator = Lines::new(file, partitions, vocabulary, seed as u64)?;
    let started = Instant::now();
    for _ in 0..lines {
        let (partition, line) = generator.next();
        writer.send(topic, partition, b"", Some(line.as_bytes())).context("producing")?;
    }
    writer.flush(Duration::from_secs(120)).context("waiting for the lines to be written")?;
    generator.save(expected)?;
    println!(
        "produced {lines} lines to {topic} in {:.1} s; true counts of {} words in {}",
        started.elapsed().as_secs_f64(),
        generator.counts().counts.len(),
        expected.display()
    );
    Ok(())
}

/// Reads `<topic>-counts` until every word's updates reach its true count
/// (or `timeout`), checking each word's updates are exactly 1, 2, 3 ….
pub(crate) fn verify(kafka: &Client, topic: &str, partitions: i32, expected: &Path, timeout: Duration) -> Result<()> {
    let file = Counts::load(expected)?.with_context(|| format!("{} does not exist", expected.display()))?;
    if file.topic != topic {
        bail!("{} holds the counts of topic {}, not {topic}", expected.display(), file.topic);
    }
    let counts = counts_topic(topic);
    let start: Vec<(i32, Option<i64>)> = (0..partitions).map(|p| (p, Some(0))).collect();
    let reader = PartitionReader::new(kafka, &counts, &start).context("reading the published counts")?;
    let mut last: BTreeMap<Vec<u8>, u64> = BTreeMap::new();
    let mut updates = 0u64;
    let deadline = Instant::now() + timeout;
    let mut ended = BTreeSet::new();
    loop {
        match reader.poll(Duration::from_millis(500)).context("reading the published counts")? {
            ReadEvent::Record(r) => {
                let (Some(word), Some(count)) = (r.key(), r.value().and_then(decode_count)) else {
                    bail!("{counts}/{} offset {}: not a word's count", r.partition(), r.offset());
                };
                let before = last.get(word).copied().unwrap_or(0);
                if count != before + 1 {
                    let word = String::from_utf8_lossy(word);
                    let what = if count <= before { "published twice" } else { "missing" };
                    bail!(
                        "{word}: count {count} after {before} at {counts}/{} offset {} (an update {what})",
                        r.partition(),
                        r.offset()
                    );
                }
                last.insert(word.to_vec(), count);
                updates += 1;
            }
            ReadEvent::EndOfPartition { partition, .. } => {
                ended.insert(partition);
            }
            ReadEvent::Idle => {}
        }
        if ended.len() == usize::try_from(partitions).unwrap_or(0) {
            let done = file.counts.iter().all(|(w, n)| last.get(w.as_bytes()) == Some(n));
            if done && last.len() == file.counts.len() {
                break;
            }
            if last.iter().any(|(w, n)| file.counts.get(&*String::from_utf8_lossy(w)).is_none_or(|want| n > want)) {
                bail!("a word counted past its true count, or one never produced");
            }
        }
        if Instant::now() >= deadline {
            let short = file.counts.iter().filter(|(w, n)| last.get(w.as_bytes()) != Some(n)).count();
            bail!("{short} of {} words' counts did not reach their true count within {timeout:?}", file.counts.len());
        }
    }
    println!(
        "verified: {} words, {updates} count updates published, each exactly once and in order, every count exact",
        file.counts.len()
    );
    Ok(())
}
