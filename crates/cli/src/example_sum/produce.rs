//! `kshard example sum produce`: increments of many streams, and the true sums.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use kshard_kafka::{ClientSettings, RecordWriter};
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

/// A small, fast, seeded generator (xorshift64*): the load needs variety, not secrecy.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
}

pub(crate) fn produce(
    settings: &ClientSettings,
    topic: &str,
    partitions: i32,
    streams: u32,
    records: u64,
    expected: &Path,
) -> Result<()> {
    if streams == 0 {
        bail!("invalid streams: at least 1");
    }
    let mut file =
        ExpectedFile::load(expected)?.unwrap_or_else(|| ExpectedFile { topic: topic.to_owned(), ..Default::default() });
    if file.topic != topic {
        bail!("{} holds the sums of topic {}, not {topic}", expected.display(), file.topic);
    }
    let writer = RecordWriter::new(settings).context("connecting a producer")?;
    let ids: Vec<String> = (0..streams).map(|i| format!("s{i:05}")).collect();
    let seed = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_nanos();
    let mut rng = Rng(seed as u64 | 1);
    let started = std::time::Instant::now();
    for _ in 0..records {
        let i = (rng.next() % u64::from(streams)) as usize;
        let increment = (rng.next() % 2001) as i64 - 1000;
        let partition = (i as i32) % partitions;
        let state = file.streams.entry(ids[i].clone()).or_insert(Expected { partition, ..Default::default() });
        state.count += 1;
        state.sum = state.sum.wrapping_add(increment);
        writer
            .send(topic, state.partition, ids[i].as_bytes(), Some(&encode_increment(state.count, increment)))
            .context("producing")?;
    }
    writer.flush(Duration::from_secs(120)).context("waiting for the records to be written")?;
    let json = serde_json::to_vec_pretty(&file).context("encoding the sums")?;
    std::fs::write(expected, json).with_context(|| format!("writing {}", expected.display()))?;
    println!(
        "produced {records} records of {} streams to {topic} in {:.1} s; true sums in {}",
        ids.len(),
        started.elapsed().as_secs_f64(),
        expected.display()
    );
    Ok(())
}
