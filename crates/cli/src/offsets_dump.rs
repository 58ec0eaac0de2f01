//! `kshard offsets dump`: read `__consumer_offsets` from the earliest offset to
//! the end of every partition and print each record as one JSON line, with its
//! position in the log (`log_partition`, `log_offset`). Malformed records are printed with their error, counted,
//! and reading goes on.

use std::io::Write;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use kshard_kafka::{PartitionReader, ReadEvent};
use kshard_offsets::Record;
use serde_json::{Map, Value};

use crate::offsets_json::record_json;
use crate::serve_config::KafkaTarget;

/// What a dump read.
#[derive(Debug, Default)]
pub(crate) struct DumpSummary {
    pub(crate) records: u64,
    pub(crate) malformed: u64,
}

/// Dumps the listed partitions (all when empty) of the offsets topic to `out`.
pub(crate) fn dump(target: &KafkaTarget, partitions: &[i32], out: &mut impl Write) -> Result<DumpSummary> {
    let (settings, topic) = (&target.kafka, target.offsets_topic.as_str());
    let (_admin, count) = crate::offsets_topic(target)?;
    let partitions: Vec<i32> = if partitions.is_empty() { (0..count).collect() } else { partitions.to_vec() };
    let start: Vec<(i32, Option<i64>)> = partitions.iter().map(|&p| (p, None)).collect();
    let reader = PartitionReader::new(settings, topic, &start)?;
    let mut pending: std::collections::BTreeSet<i32> = partitions.iter().copied().collect();
    let mut summary = DumpSummary::default();
    let mut last_progress = Instant::now();
    while !pending.is_empty() {
        match reader.poll(Duration::from_millis(500)).map_err(|e| crate::explain(settings, e))? {
            ReadEvent::Record(r) => {
                summary.records += 1;
                let mut line = Map::new();
                // Named apart from the key's own `partition` (the committed topic's).
                line.insert("log_partition".into(), r.partition().into());
                line.insert("log_offset".into(), r.offset().into());
                match r.key().map(|k| Record::decode(k, r.value())) {
                    Some(Ok(record)) => {
                        if let Value::Object(fields) = record_json(&record)? {
                            line.extend(fields);
                        }
                    }
                    Some(Err(e)) => {
                        summary.malformed += 1;
                        line.insert("error".into(), e.to_string().into());
                        // The bytes, so the record can be examined with `offsets decode`.
                        line.insert("key_hex".into(), r.key().map(hex::encode).into());
                        line.insert("value_hex".into(), r.value().map(hex::encode).into());
                    }
                    None => {
                        summary.malformed += 1;
                        line.insert("error".into(), "record has a null key".into());
                    }
                }
                writeln!(out, "{}", Value::Object(line)).context("writing the output")?;
            }
            ReadEvent::EndOfPartition { partition, .. } => {
                pending.remove(&partition);
            }
            ReadEvent::Idle => {
                if last_progress.elapsed() > Duration::from_secs(5) {
                    eprintln!("kshard: waiting for the end of {} partitions: {:?}", pending.len(), pending);
                    last_progress = Instant::now();
                }
            }
        }
    }
    Ok(summary)
}
