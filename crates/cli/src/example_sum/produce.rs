//! `kshard example sum produce`: increments of many streams, and the true sums.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use kshard_kafka::{Client, RecordWriter};
use serde::{Deserialize, Serialize};

use super::app::encode_increment;

/// The true state of one stream.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Expected {
    pub(crate) partition: i32,
    pub(crate) count: u64,
    pub(crate) sum: i64,
}

/// The file `produce` writes and `verify` reads.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct ExpectedFile {
    pub(crate) topic: String,
    pub(crate) streams: BTreeMap<String, Expected>,
}

impl ExpectedFile {
    pub(crate) fn load(path: &Path) -> Result<Option<Self>> {
        match std::fs::read(path) {
            Ok(bytes) => Ok(Some(
                serde_json::from_slice(&bytes).with_context(|| format!("{} is not a sums file", path.display()))?,
            )),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e).with_context(|| format!("reading {}", path.display())),
        }
    }
}

/// A small, fast, seeded generator (xorshift64*): the load needs variety, not
/// secrecy. Both examples' loads draw from it.
pub(crate) struct Rng(pub(crate) u64);

impl Rng {
    pub(crate) fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
}

/// The increments `produce` writes (and the bench's loads): each one's
/// partition, stream and value, and the true sums they make.
pub(crate) struct Increments {
    file: ExpectedFile,
    ids: Vec<String>,
    rng: Rng,
    partitions: i32,
    /// Streams taken in turn first (every one gets a record), then at random.
    in_turn: usize,
}

impl Increments {
    /// Increments of `streams` streams over `partitions`, continuing the sums
    /// in `file`; `seed` fixes the draw (two loads of one seed are alike);
    /// with `every_stream`, the first `streams` records go one to each.
    pub(crate) fn new(
        file: ExpectedFile,
        partitions: i32,
        streams: u32,
        seed: u64,
        every_stream: bool,
    ) -> Result<Self> {
        if streams == 0 {
            bail!("invalid streams: at least 1");
        }
        let ids: Vec<String> = (0..streams).map(|i| format!("s{i:05}")).collect();
        let in_turn = if every_stream { ids.len() } else { 0 };
        Ok(Increments { file, ids, rng: Rng(seed | 1), partitions: partitions.max(1), in_turn })
    }

    /// The next increment: its partition, stream id and value.
    pub(crate) fn next(&mut self) -> (i32, &str, [u8; 16]) {
        let i = match self.in_turn {
            0 => (self.rng.next() % self.ids.len() as u64) as usize,
            left => {
                self.in_turn -= 1;
                self.ids.len() - left
            }
        };
        let increment = (self.rng.next() % 2001) as i64 - 1000;
        let partition = (i as i32) % self.partitions;
        let state =
            self.file.streams.entry(self.ids[i].clone()).or_insert(Expected { partition, ..Default::default() });
        state.count += 1;
        state.sum = state.sum.wrapping_add(increment);
        (state.partition, &self.ids[i], encode_increment(state.count, increment))
    }

    /// The true sums so far.
    pub(crate) fn expected(&self) -> &ExpectedFile {
        &self.file
    }

    pub(crate) fn save(&self, path: &Path) -> Result<()> {
        let json = serde_json::to_vec_pretty(&self.file).context("encoding the sums")?;
        std::fs::write(path, json).with_context(|| format!("writing {}", path.display()))
    }
}

/// The stream a sum's key names (`s00042`: 42), for the partition it came from.
pub(crate) fn stream_index(key: &[u8]) -> Option<u64> {
    std::str::from_utf8(key.strip_prefix(b"s")?).ok()?.parse().ok()
}

pub(crate) fn produce(
    kafka: &Client,
    topic: &str,
    partitions: i32,
    streams: u32,
    records: u64,
    expected: &Path,
) -> Result<()> {
    let file =
        ExpectedFile::load(expected)?.unwrap_or_else(|| ExpectedFile { topic: topic.to_owned(), ..Default::default() });
    if file.topic != topic {
        bail!("{} holds the sums of topic {}, not {topic}", expected.display(), file.topic);
    }
    let writer = RecordWriter::new(kafka).context("connecting a producer")?;
    let seed = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_nanos();
    let mut increments = Increments::new(file, partitions, streams, seed as u64, false)?;
    let started = std::time::Instant::now();
    for _ in 0..records {
        let (partition, stream, value) = increments.next();
        writer.send(topic, partition, stream.as_bytes(), Some(&value)).context("producing")?;
    }
    writer.flush(Duration::from_secs(120)).context("waiting for the records to be written")?;
    increments.save(expected)?;
    println!(
        "produced {records} records of {streams} streams to {topic} in {:.1} s; true sums in {}",
        started.elapsed().as_secs_f64(),
        expected.display()
    );
    Ok(())
}
