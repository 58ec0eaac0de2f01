//! `kshard bench drain`: read the offsets topic to its end, doing nothing
//! else (or applying every record, as `serve` does, with `--apply`).

use std::time::Duration;

use anyhow::Result;
use kshard_kafka::{PartitionReader, ReadEvent, TopicPartition};
use kshard_lag::{CatchUp, Monitor, MonitorSettings};

use crate::serve_config::KafkaTarget;

/// Reads the offsets topic to the end of every partition, counting records.
/// With `apply`, every record is also applied to the lag monitor's state, as
/// `serve` does: the difference between the two is the cost of applying.
pub(crate) fn drain(target: &KafkaTarget, apply: bool) -> Result<u64> {
    let (settings, topic) = (&target.kafka, target.offsets_topic.as_str());
    let (admin, count) = crate::offsets_topic(target)?;
    let partitions: Vec<TopicPartition> = (0..count).map(|p| TopicPartition::new(topic, p)).collect();
    let watermarks = admin.watermarks(&partitions)?;
    let mut catch_up = CatchUp::default();
    for key in &partitions {
        let (low, high) = watermarks.get(key).copied().unwrap_or((0, 0));
        catch_up.track(key.partition, low, high);
    }
    catch_up.start();
    let start: Vec<(i32, Option<i64>)> = (0..count).map(|p| (p, None)).collect();
    let reader = PartitionReader::new(settings, topic, &start)?;
    let monitor = Monitor::new(MonitorSettings::default());
    let mut records = 0u64;
    while !catch_up.is_ready() {
        match reader.poll(Duration::from_millis(100)).map_err(|e| crate::explain(settings, e))? {
            ReadEvent::Record(r) => {
                records += 1;
                catch_up.on_record(r.partition(), r.offset());
                if apply {
                    // Malformed records are counted by the monitor; nothing to do here.
                    let _ = monitor.apply(r.partition(), r.offset(), r.key(), r.value());
                }
            }
            ReadEvent::EndOfPartition { partition, next_offset } => {
                catch_up.on_end_of_partition(partition, next_offset)
            }
            ReadEvent::Idle => {}
        }
    }
    Ok(records)
}
