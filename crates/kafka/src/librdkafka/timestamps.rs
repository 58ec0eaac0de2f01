//! [`TimestampReader`]: the timestamp of the record at given offsets — the
//! first record a group has not consumed, whose age is its lag in seconds.
//! Each partition is assigned at its offset and its first record taken:
//! librdkafka fetches them all in one request per broker, and with a minimal
//! fetch size each partition returns about one batch.

use crate::TopicPartitionOffset;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Message;
use rdkafka::{Offset, TopicPartitionList};

use crate::client::Client;
use crate::error::{Result, call};
use crate::librdkafka::context::KshardContext;

/// Where a wanted offset's timestamp came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordTime {
    /// The offset of the record read: the wanted one, or a later one when the
    /// wanted one is gone (compacted, a transaction marker).
    pub offset: i64,
    /// Its timestamp, ms since the epoch.
    pub timestamp_ms: i64,
}

/// What [`TimestampReader::read`] found.
#[derive(Debug, Default)]
pub struct TimesRead {
    /// (topic, partition, wanted offset) → the record read there.
    pub found: HashMap<TopicPartitionOffset, RecordTime>,
    /// Wanted offsets read that gave nothing.
    pub empty: Vec<TopicPartitionOffset>,
}

/// Reads the timestamps of records at given offsets, with a short-lived
/// consumer per chunk of 2,000 partitions.
pub struct TimestampReader {
    /// How to reach the brokers.
    client: Client,
}

impl std::fmt::Debug for TimestampReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TimestampReader").finish_non_exhaustive()
    }
}

/// Partitions assigned at once, each chunk by a consumer of its own.
/// Measured with `kshard bench record-times` on 10,000 lagging partitions:
/// all at once on one consumer, none answered within a 500 ms round (1.4 s
/// to answer, 4 s of CPU); in chunks of 2,000 on one consumer, each chunk
/// slower than the last (120 ms to 290 ms) and 2.2 s of CPU, as librdkafka
/// keeps the state of every partition a consumer was ever assigned; a fresh
/// consumer per chunk, 0.9 s and 0.33 s of CPU. Chunks of 1,000 cost about as
/// much CPU and more time, of 5,000 more CPU.
const PARTITIONS_AT_ONCE: usize = 2000;

/// Rounds of assignments per call: a partition wanted at several offsets
/// (several groups) takes one round per offset; the rest waits for the next call.
const ROUNDS: usize = 3;

impl TimestampReader {
    /// A reader on `settings`' brokers.
    pub fn new(client: &Client) -> Result<Self> {
        Ok(TimestampReader { client: client.clone() })
    }

    /// A consumer for one chunk: assigned, read and dropped.
    fn consumer(&self) -> Result<BaseConsumer<KshardContext>> {
        self.client.create(
            "timestamp reader",
            &[
                ("group.id", "kshard-timestamps"),
                ("enable.auto.commit", "false"),
                ("enable.auto.offset.store", "false"),
                ("enable.partition.eof", "false"),
                // An offset no longer in the log is an error, not a jump to the end.
                ("auto.offset.reset", "error"),
                ("isolation.level", "read_uncommitted"),
                ("fetch.wait.max.ms", "50"),
                // The broker returns at least one whole batch whatever this says.
                ("fetch.message.max.bytes", "1024"),
                // What a chunk may hold in memory: a response at most 16 MB,
                // each partition's queue at most 64 KB beyond its first batch.
                ("fetch.max.bytes", "16777216"),
                ("queued.max.messages.kbytes", "64"),
                ("fetch.queue.backoff.ms", "10"),
            ],
        )
    }

    /// The record at (or first after) each of `wanted` (topic, partition,
    /// offset), waiting at most `timeout` per round; and the offsets that were
    /// read past and gave nothing (only transaction markers follow). Offsets
    /// not answered in time (a slow broker, an offset out of range) and those
    /// beyond the rounds of one call are in neither: ask again.
    pub fn read(&self, wanted: &[TopicPartitionOffset], timeout: Duration) -> Result<TimesRead> {
        let mut by_partition: BTreeMap<(&str, i32), BTreeSet<i64>> = BTreeMap::new();
        for TopicPartitionOffset { topic, partition, offset } in wanted {
            by_partition.entry((topic.as_str(), *partition)).or_default().insert(*offset);
        }
        let mut found = HashMap::new();
        let mut empty = Vec::new();
        for _ in 0..ROUNDS {
            let round: Vec<((&str, i32), i64)> =
                by_partition.iter_mut().filter_map(|(k, offsets)| offsets.pop_first().map(|o| (*k, o))).collect();
            if round.is_empty() {
                break;
            }
            for chunk in round.chunks(PARTITIONS_AT_ONCE) {
                self.read_chunk(chunk, timeout, &mut found, &mut empty)?;
            }
        }
        Ok(TimesRead { found, empty })
    }

    /// Reads one chunk of a round: each partition assigned at its offset.
    fn read_chunk(
        &self,
        round: &[((&str, i32), i64)],
        timeout: Duration,
        found: &mut HashMap<TopicPartitionOffset, RecordTime>,
        empty: &mut Vec<TopicPartitionOffset>,
    ) -> Result<()> {
        let consumer = self.consumer()?;
        let mut list = TopicPartitionList::new();
        for ((topic, partition), offset) in round {
            list.add_partition_offset(topic, *partition, Offset::Offset(*offset))
                .map_err(call(format!("assigning {topic}/{partition}")))?;
        }
        consumer.assign(&list).map_err(call("assigning partitions to read timestamps".to_owned()))?;
        let mut pending: HashMap<(String, i32), i64> =
            round.iter().map(|((t, p), o)| (((*t).to_owned(), *p), *o)).collect();
        let deadline = Instant::now() + timeout;
        while !pending.is_empty() && Instant::now() < deadline {
            // Errors (an offset out of range) concern one partition: it
            // stays pending and is left out.
            let m = match consumer.poll(Duration::from_millis(50)) {
                Some(Ok(m)) => m,
                // Quiet: partitions read past their offset without a
                // record are done (no need to wait out the round).
                None => {
                    Self::read_past(&consumer, &mut pending, empty)?;
                    continue;
                }
                Some(Err(_)) => continue,
            };
            let key = (m.topic().to_owned(), m.partition());
            if let Some(&want) = pending.get(&key)
                && m.offset() >= want
                && let Some(timestamp_ms) = m.timestamp().to_millis()
            {
                pending.remove(&key);
                found.insert(
                    TopicPartitionOffset::new(key.0, key.1, want),
                    RecordTime { offset: m.offset(), timestamp_ms },
                );
            }
        }
        // Not answered in time: no record, and no claim there is none.
        // The consumer, dropped, takes its assignment with it.
        Self::read_past(&consumer, &mut pending, empty)
    }

    /// Moves the `pending` partitions read past their wanted offset without a
    /// record (only transaction markers followed: the consumer's position is
    /// beyond it) into `empty`.
    fn read_past(
        consumer: &BaseConsumer<KshardContext>,
        pending: &mut HashMap<(String, i32), i64>,
        empty: &mut Vec<TopicPartitionOffset>,
    ) -> Result<()> {
        if pending.is_empty() {
            return Ok(());
        }
        let positions = consumer.position().map_err(call("reading positions after reading timestamps".to_owned()))?;
        pending.retain(|(topic, partition), want| {
            let position = positions.find_partition(topic, *partition).and_then(|e| match e.offset() {
                Offset::Offset(o) => Some(o),
                _ => None,
            });
            let past = position.is_some_and(|o| o > *want);
            if past {
                empty.push(TopicPartitionOffset::new(topic.clone(), *partition, *want));
            }
            !past
        });
        Ok(())
    }
}
