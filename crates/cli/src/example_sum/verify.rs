//! `kshard example sum verify`: reads every shard's recovery log — what the
//! application made durable, whoever wrote it — into a scratch store, waits
//! until each shard's checkpoint covers everything produced to its source
//! partition, and compares every stream's sum and count with the true ones;
//! then reads what the shards published to `<topic>-sums` as a consumer of
//! committed records does: each stream's sums in strictly increasing
//! sequence (none published twice, none from a transaction that did not
//! commit), the last one the true one.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use kshard_kafka::{Admin, Client, PartitionReader, TopicPartition};
use kshard_runtime::partitions::KafkaPartitions;
use kshard_runtime::recovery_log::Skip;
use kshard_runtime::recovery_log::{LogClients, LogError, play_to_head};
use kshard_runtime::recovery_log::{Played, Player};
use kshard_runtime::{RedbStore, Store};

use super::TopicArgs;
use super::app::StreamSum;
use super::produce::ExpectedFile;

pub(crate) fn verify(
    kafka: &Client,
    topic: &TopicArgs,
    expected: &Path,
    timeout: Duration,
    replayed_outputs: bool,
) -> Result<()> {
    let file = ExpectedFile::load(expected)?.with_context(|| format!("{} does not exist", expected.display()))?;
    if file.topic != topic.topic {
        bail!("{} holds the sums of topic {}, not {}", expected.display(), file.topic, topic.topic);
    }
    let admin = Admin::new(kafka, super::TIMEOUT).context("connecting to Kafka")?;
    let partitions = admin
        .partition_count(&topic.topic)
        .context("reading the source topic")?
        .with_context(|| format!("the topic {} does not exist", topic.topic))?;
    let keys: Vec<TopicPartition> = (0..partitions).map(|p| TopicPartition::new(topic.topic.clone(), p)).collect();
    let ends = every_watermark(&admin, &keys, Instant::now() + timeout).context("reading the source's ends")?;
    let scratch = std::env::temp_dir().join(format!("kshard-sum-verify-{}", std::process::id()));
    std::fs::create_dir_all(&scratch).with_context(|| format!("creating {}", scratch.display()))?;
    let result = compare(kafka, &admin, topic, partitions, &ends, &file, &scratch, (timeout, replayed_outputs));
    let _ = std::fs::remove_dir_all(&scratch);
    result
}

#[allow(clippy::too_many_arguments)]
fn compare(
    client: &Client,
    admin: &Admin,
    topic: &TopicArgs,
    partitions: i32,
    ends: &std::collections::HashMap<TopicPartition, (i64, i64)>,
    file: &ExpectedFile,
    scratch: &Path,
    (timeout, replayed_outputs): (Duration, bool),
) -> Result<()> {
    let deadline = Instant::now() + timeout;
    let log_topic = topic.log_topic();
    let kafka = KafkaPartitions::new(client.clone(), super::TIMEOUT);
    // The recovery log's calls are async (the runtime's replicas are tasks).
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().context("starting tokio")?;
    let (mut records, mut skipped, mut differences) = (0u64, 0usize, Vec::new());
    for p in 0..partitions {
        let shard = super::shard_id(p);
        let end = ends.get(&TopicPartition::new(topic.topic.clone(), p)).map_or(0, |(_, high)| *high);
        // The log's records before the previous snapshot may be deleted: play
        // from its start, which is then a snapshot's, into a fresh store (and
        // again if the primary deletes more meanwhile).
        let (mut player, mut reader) = open_at_start(client, admin, &log_topic, p, scratch, &shard)?;
        loop {
            let log = LogClients { topic: &log_topic, partition: p, reader: &reader, partitions: &kafka, writer: None };
            let played = match runtime.block_on(play_to_head(&log, &mut player, super::TIMEOUT)) {
                // Deleted under us: a primary snapshotted and truncated
                // meanwhile (the records after the player's are missing).
                Err(e @ LogError::ChainBroken { .. }) => {
                    if Instant::now() >= deadline {
                        return Err(e).with_context(|| format!("playing the log of {shard}"));
                    }
                    (player, reader) = open_at_start(client, admin, &log_topic, p, scratch, &shard)?;
                    continue;
                }
                played => played.with_context(|| format!("playing the log of {shard}"))?,
            };
            skipped += played
                .iter()
                .filter(|p| matches!(p, Played::Skipped(Skip::NotNext { .. } | Skip::Fork | Skip::NotTheAuthor { .. })))
                .count();
            if player.bootstrapping() {
                bail!("the recovery log of {shard} starts with no snapshot to play from");
            }
            let consumed =
                player.offsets().iter().find(|o| o.topic == topic.topic && o.partition == p).map_or(0, |o| o.offset);
            if consumed >= end {
                break;
            }
            if Instant::now() >= deadline {
                bail!("{shard} consumed {consumed} of the {end} records of {}/{p} within {timeout:?}", topic.topic);
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        for (id, want) in file.streams.iter().filter(|(_, e)| e.partition == p) {
            let got = player.store().get(id.as_bytes())?.and_then(|b| StreamSum::decode(&b)).unwrap_or_default();
            records += got.seq;
            if got.seq != want.count || got.sum != want.sum {
                differences.push(format!(
                    "{id} ({shard}): {} records summing to {}, expected {} summing to {}",
                    got.seq, got.sum, want.count, want.sum
                ));
            }
        }
    }
    if !differences.is_empty() {
        for d in &differences {
            println!("DIFFERENT {d}");
        }
        bail!("{} of {} streams differ", differences.len(), file.streams.len());
    }
    let outputs = check_published(client, admin, topic, partitions, file, (timeout, replayed_outputs))?;
    println!(
        "verified: {} streams, {records} records, every sum exact ({skipped} recovery-log records of fenced writers skipped); {outputs} sums published, each stream's once per transaction in order, the last exact",
        file.streams.len()
    );
    Ok(())
}

/// Checks what was published to the sums topic against `file`: each
/// stream's sums in order (unless outputs were replayed) and its last one
/// exact; how many were published. A stream whose last sum is behind (of
/// fewer records than produced) is read again, for up to `timeout` more:
/// the recovery log's part of a transaction can be readable before its
/// outputs' part is (Kafka writes the commit markers partition by
/// partition, later on a broker that was down), so a reader of committed
/// records may not see a committed transaction's sums yet. A sum out of
/// order, a wrong sum, or one of more records than produced fails at once.
fn check_published(
    client: &Client,
    admin: &Admin,
    topic: &TopicArgs,
    partitions: i32,
    file: &ExpectedFile,
    (timeout, replayed_outputs): (Duration, bool),
) -> Result<usize> {
    let deadline = Instant::now() + timeout;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let read_for = left.max(Duration::from_secs(10));
        let published = published(client, admin, &super::app::sums_topic(&topic.topic), partitions, read_for)?;
        let (mut wrong, mut behind) = (Vec::new(), Vec::new());
        for (id, want) in &file.streams {
            let sums = published.get(id.as_bytes()).map_or(&[][..], Vec::as_slice);
            let last = sums.last().map(|l| (l.seq, l.sum));
            if let Some(w) = sums.windows(2).find(|w| w[1].seq <= w[0].seq).filter(|_| !replayed_outputs) {
                wrong.push(format!("{id}: published sequence {} after {}", w[1].seq, w[0].seq));
            } else if last.is_none_or(|(seq, _)| seq < want.count) {
                behind.push(format!("{id}: last published {last:?}, expected ({}, {})", want.count, want.sum));
            } else if last != Some((want.count, want.sum)) {
                wrong.push(format!("{id}: last published {last:?}, expected ({}, {})", want.count, want.sum));
            }
        }
        if wrong.is_empty() && behind.is_empty() {
            return Ok(published.values().map(Vec::len).sum());
        }
        if wrong.is_empty() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(500));
            continue;
        }
        let count = wrong.len() + behind.len();
        for w in wrong.iter().chain(&behind).take(20) {
            println!("PUBLISHED {w}");
        }
        bail!("{count} of {} streams' published sums are wrong", file.streams.len());
    }
}

/// Every sum published to `sums` (its `partitions`), as a reader of
/// committed records reads them to each partition's end: by stream, in order.
fn published(
    kafka: &Client,
    admin: &Admin,
    sums: &str,
    partitions: i32,
    timeout: Duration,
) -> Result<std::collections::BTreeMap<Vec<u8>, Vec<StreamSum>>> {
    if admin.partition_count(sums).context("looking up the sums topic")?.is_none() {
        bail!("the sums topic {sums} does not exist");
    }
    let start: Vec<(i32, Option<i64>)> = (0..partitions).map(|p| (p, Some(0))).collect();
    let reader = PartitionReader::new(kafka, sums, &start).context("reading the published sums")?;
    let (mut out, mut ended) =
        (std::collections::BTreeMap::<Vec<u8>, Vec<StreamSum>>::new(), std::collections::BTreeSet::new());
    let deadline = Instant::now() + timeout;
    while ended.len() < usize::try_from(partitions).unwrap_or(0) {
        if Instant::now() >= deadline {
            bail!("read {} of {partitions} partitions of {sums} to their end within {timeout:?}", ended.len());
        }
        match reader.poll(Duration::from_millis(500)).context("reading the published sums")? {
            kshard_kafka::ReadEvent::Record(r) => {
                let (Some(stream), Some(sum)) = (r.key(), r.value().and_then(StreamSum::decode)) else {
                    bail!("{sums}/{} offset {}: not a stream's sum", r.partition(), r.offset());
                };
                out.entry(stream.to_vec()).or_default().push(sum);
            }
            kshard_kafka::ReadEvent::EndOfPartition { partition, .. } => {
                ended.insert(partition);
            }
            _ => {}
        }
    }
    Ok(out)
}

fn low_watermark(admin: &Admin, topic: &str, partition: i32) -> Result<i64> {
    let key = TopicPartition::new(topic, partition);
    let marks = every_watermark(admin, std::slice::from_ref(&key), Instant::now() + super::TIMEOUT)
        .context("reading a recovery log's start")?;
    Ok(marks.get(&key).map_or(0, |(low, _)| *low))
}

/// The watermarks of every partition of `keys`: asked again while Kafka
/// leaves some out (their leaders moving, right after a broker came back)
/// until `deadline`. A partition Kafka did not answer for is not one with
/// nothing in it.
fn every_watermark(
    admin: &Admin,
    keys: &[TopicPartition],
    deadline: Instant,
) -> Result<std::collections::HashMap<TopicPartition, (i64, i64)>> {
    loop {
        let marks = admin.watermarks(keys)?;
        let missing: Vec<&TopicPartition> = keys.iter().filter(|k| !marks.contains_key(k)).collect();
        if missing.is_empty() {
            return Ok(marks);
        }
        if Instant::now() >= deadline {
            bail!("Kafka gave no watermarks of {missing:?} before the deadline");
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// A fresh scratch store and a reader of the log from its start.
fn open_at_start(
    kafka: &Client,
    admin: &Admin,
    topic: &str,
    partition: i32,
    scratch: &Path,
    shard: &str,
) -> Result<(Player<RedbStore>, PartitionReader)> {
    // A new file each time: the store being replaced is still open.
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_nanos();
    let path = scratch.join(format!("{shard}-{nanos}.redb"));
    let low = low_watermark(admin, topic, partition)?;
    let store = RedbStore::open(&path)?;
    // A log never truncated starts with its first hand-off; one truncated, with a snapshot.
    let player = if low > 0 { Player::bootstrap(store, low) } else { Player::open(store)? };
    let reader = PartitionReader::new(kafka, topic, &[(partition, Some(low))]).context("reading a recovery log")?;
    Ok((player, reader))
}
