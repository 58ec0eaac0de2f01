//! `kshard loadgen`: writes a [`LoadShape`] into a broker.
//!
//! Into `__consumer_offsets` (the default), every commit goes through the group
//! coordinator — an OffsetCommit request per group and round, as a group that
//! manages its own assignment sends it — so Kafka writes the records itself;
//! `--real-groups` adds consumer groups that join, read and commit. Kafka refuses
//! client writes to its internal topics, so the synthetic stream (every value
//! version, group metadata with members, tombstones, malformed records) goes to
//! another topic named with `--offsets-topic`, created compacted when missing.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use kshard_kafka::{Admin, CONSUMER_OFFSETS_TOPIC, Client, OffsetCommitter, RecordWriter, TopicSpec};

use crate::loadgen::{Kind, LoadShape};
use crate::serve_config::KafkaTarget;

/// Threads committing for different groups at once.
const COMMIT_THREADS: usize = 4;

pub(crate) fn run(target: &KafkaTarget, shape: &LoadShape, offsets_partitions: i32) -> Result<()> {
    let settings = &target.kafka;
    let admin = Admin::connect(settings, Duration::from_secs(30))?;
    produce_topics(settings, &admin, shape)?;
    if target.offsets_topic == CONSUMER_OFFSETS_TOPIC {
        commit_through_coordinator(settings, shape)?;
    } else {
        write_synthetic(settings, &admin, &target.offsets_topic, offsets_partitions, shape)?;
    }
    for i in 0..shape.real_groups {
        let topics = shape.topic_names();
        let topic = &topics[i as usize % topics.len()];
        let group = format!("{}-real-group-{i:03}", shape.prefix);
        let member = kshard_kafka::GroupConsumer::new(settings, &group, &[topic])?;
        // Each real group reads part of its topic, so that it has lag.
        let target = (shape.records_per_topic_partition() as usize * shape.partitions as usize) / 2;
        let read = member.consume(target, Duration::from_secs(60))?;
        member.commit()?;
        eprintln!("kshard: real group {group} read {read} records of {topic} and committed");
    }
    Ok(())
}

/// Creates the consumed topics and fills them, so that lag is real.
fn produce_topics(kafka: &Client, admin: &Admin, shape: &LoadShape) -> Result<()> {
    let per_partition = shape.records_per_topic_partition();
    if per_partition == 0 {
        return Ok(());
    }
    let writer = RecordWriter::new(kafka)?;
    let topics = shape.topic_names();
    for topic in &topics {
        let spec =
            TopicSpec { name: topic.clone(), partitions: shape.partitions as i32, replication: 1, configs: vec![] };
        admin.create_topic(&spec).map_err(|e| crate::explain(kafka, e))?;
        for p in 0..shape.partitions as i32 {
            for i in 0..per_partition {
                writer.send(topic, p, format!("key-{i}").as_bytes(), Some(b"loadgen"))?;
            }
        }
    }
    writer.flush(Duration::from_secs(300))?;
    eprintln!("kshard: produced {per_partition} records into each partition of {} topics", topics.len());
    Ok(())
}

/// Every group commits every partition once per round, through the coordinator.
fn commit_through_coordinator(kafka: &Client, shape: &LoadShape) -> Result<()> {
    let started = Instant::now();
    let groups: Vec<u32> = (0..shape.groups).collect();
    let chunk = groups.len().div_ceil(COMMIT_THREADS).max(1);
    let commits = std::thread::scope(|scope| -> Result<u64> {
        let handles: Vec<_> =
            groups.chunks(chunk).map(|mine| scope.spawn(move || commit_groups(kafka, shape, mine))).collect();
        let mut total = 0;
        for handle in handles {
            total += handle.join().map_err(|_| anyhow::anyhow!("a commit thread panicked"))??;
        }
        Ok(total)
    })?;
    let secs = started.elapsed().as_secs_f64();
    eprintln!(
        "kshard: committed {commits} offsets of {} groups through the coordinator in {secs:.1} s ({:.0} offsets/s)",
        shape.groups,
        commits as f64 / secs.max(1e-9)
    );
    Ok(())
}

fn commit_groups(kafka: &Client, shape: &LoadShape, groups: &[u32]) -> Result<u64> {
    let mut commits = 0u64;
    for &g in groups {
        let group = shape.group_name(g);
        let topic = shape.topic_name(g);
        let committer = OffsetCommitter::new(kafka, &group)?;
        for round in 0..shape.rounds {
            let offsets: Vec<(&str, i32, i64)> =
                (0..shape.partitions).map(|p| (topic.as_str(), p as i32, shape.offset(g, p, round))).collect();
            // The first commit of a group finds the coordinator (and retries
            // while it moves or loads); the last waits for it, and with it every
            // earlier one (they are handled in order).
            if round == 0 || round + 1 == shape.rounds {
                committer.commit(&offsets).with_context(|| format!("committing for {group}"))?;
            } else {
                committer.commit_async(&offsets)?;
            }
            commits += u64::from(shape.partitions);
        }
    }
    Ok(commits)
}

/// The synthetic stream, written as records into `topic` (not `__consumer_offsets`).
fn write_synthetic(kafka: &Client, admin: &Admin, topic: &str, partitions: i32, shape: &LoadShape) -> Result<()> {
    if admin.create_topic(&TopicSpec::compacted(topic, partitions))? {
        eprintln!("kshard: created {topic} ({partitions} partitions, compacted)");
    }
    let partitions =
        admin.partition_count(topic)?.with_context(|| format!("{topic} is missing on {}", kafka.brokers()))?;
    let writer = RecordWriter::new(kafka)?;
    let started = Instant::now();
    let mut counts: BTreeMap<Kind, u64> = BTreeMap::new();
    let mut bytes = 0usize;
    for record in shape.records() {
        let partition = kshard_kafka::offsets_partition_for(&record.group, partitions);
        writer.send(topic, partition, &record.key, record.value.as_deref())?;
        *counts.entry(record.kind).or_insert(0) += 1;
        bytes += record.key.len() + record.value.as_ref().map_or(0, Vec::len);
    }
    writer.flush(Duration::from_secs(300))?;
    let total: u64 = counts.values().sum();
    let secs = started.elapsed().as_secs_f64();
    eprintln!(
        "kshard: wrote {total} records ({:.1} MB) into {topic} in {secs:.1} s ({:.0} records/s): {counts:?}",
        bytes as f64 / 1e6,
        total as f64 / secs.max(1e-9)
    );
    Ok(())
}
