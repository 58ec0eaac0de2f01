//! [`FetchTimes`]: the timestamps of records at given offsets by kshard's own
//! Fetch requests — one request per broker leading wanted partitions, each
//! partition asking for about one batch at its offset: the size of the batch
//! last read there (the broker answers with whole batches from the one that
//! holds the offset). Where the wanted record is the batch's first (or the
//! record there is gone and the batch starts after it), the batch header's
//! timestamp is the answer; otherwise that batch's records are read
//! (decompressed if need be). Every offset wanted on a partition that the
//! batches returned hold is answered from them. No consumer, no assignment,
//! no prefetch: what made [`crate::TimestampReader`] cost about 34 µs of CPU
//! a partition.
//!
//! Leaders come from a Metadata request of its own, kept 30 s or until a
//! broker says they moved; connections ([`BrokerLink`]: TCP, TLS, SASL PLAIN
//! and SCRAM) are kept between calls, and answers read in place
//! ([`crate::wire::fetch_response`]).

use crate::TopicPartitionOffset;
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::{ApiKey, FetchRequest, TopicName};
use kafka_protocol::protocol::StrBytes;

use crate::client::Client;
use crate::error::{Error, Result};
use crate::librdkafka::timestamps::{RecordTime, TimesRead};
use crate::wire::fetch_response::{PartitionData, read_fetch_response};
use crate::wire::links::Links;
use crate::wire::record_batch::{Answer, BatchHeader, after_whole_batches, first_records_from};

/// Fetch v12: topic names (v13 on use topic ids), flexible encoding; every
/// broker since Kafka 2.7 and Kafka 4.x speak it.
const FETCH_VERSION: i16 = 12;

/// Bytes asked of a partition never read before: a producer's default
/// batch. A broker answers with the whole batches from the one that holds
/// the offset asked for, as many as fit in the size asked (the first
/// partition of a response gets its first batch whatever its size), and
/// nothing when the first does not fit: such a partition is asked again for
/// [`GROWTH`] times more. A batch cut at the end of an answer is asked again
/// whole when the wanted record is not in the part that came (its size is in
/// its header).
const FIRST_BYTES: i32 = 16 * 1024;

/// How much more a partition whose first batch did not fit is asked for.
const GROWTH: i32 = 8;

/// The least asked of a partition: a batch header (61 bytes) and a few
/// records.
const LEAST_BYTES: i32 = 512;

/// The most asked of one partition: a batch is at most the broker's
/// `message.max.bytes` (1 MiB by default).
const MOST_BYTES: i32 = 8 * 1024 * 1024;

/// What one response may carry; partitions past it come back empty and are
/// asked again in the same call.
const RESPONSE_MAX_BYTES: i32 = 32 * 1024 * 1024;

/// Requests per broker and call, at most: partitions left out of a full
/// response, or wanted at offsets the first answer did not hold (several
/// groups far apart on one partition), are asked again.
const REQUESTS_PER_BROKER: usize = 16;

/// The least time a Metadata request is given (the cluster's whole metadata).
const METADATA_TIMEOUT: Duration = Duration::from_secs(5);

/// TOPIC_AUTHORIZATION_FAILED: no Read on the topic.
const TOPIC_AUTHORIZATION_FAILED: i16 = 29;

/// Topics said to be refused, at most (then the log would only repeat).
const MOST_REFUSED_TOPICS: usize = 1_000;

/// Partition numbers past this are not believed (tables are indexed by
/// them): far more than any topic has.
const MOST_PARTITIONS: usize = 1 << 20;

/// How long the cluster's leaders are trusted without a sign that they moved
/// (an error from a broker, or a wanted partition without a known leader).
const LEADERS_MAX_AGE: Duration = Duration::from_secs(30);

/// Partition errors that mean the leaders known are out of date:
/// UNKNOWN_TOPIC_OR_PARTITION, LEADER_NOT_AVAILABLE, NOT_LEADER_OR_FOLLOWER,
/// FENCED_LEADER_EPOCH, UNKNOWN_LEADER_EPOCH, UNKNOWN_TOPIC_ID.
const LEADERS_MOVED: [i16; 6] = [3, 5, 6, 74, 75, 100];

/// Reads record timestamps with Fetch requests of its own.
pub struct FetchTimes {
    /// The connections to the brokers.
    links: Links,
    /// The leaders last read, if still trusted.
    leaders: Mutex<Option<Arc<Leaders>>>,
    /// Topic → by partition, the size of the batch last read there (0: none
    /// yet): what to ask for next time, so that a partition's answer is about
    /// one batch, not the log after it.
    batch_sizes: Mutex<ByPartition<i32>>,
    /// Topics the broker would not let kshard read, each said once.
    refused_topics: Mutex<std::collections::HashSet<String>>,
}

/// Each partition's leader's address, as a Metadata request said.
struct Leaders {
    read_at: Instant,
    /// The leader's `host:port` (`None`: no leader).
    by_partition: ByPartition<Option<Arc<str>>>,
}

impl Leaders {
    fn of(&self, topic: &str, partition: i32) -> Option<&Arc<str>> {
        self.by_partition.get(topic, partition)?.as_ref()
    }
}

/// A value per partition, by topic then partition number.
#[derive(Default)]
struct ByPartition<T>(HashMap<String, Vec<T>>);

impl<T: Clone + Default> ByPartition<T> {
    fn get(&self, topic: &str, partition: i32) -> Option<&T> {
        self.0.get(topic)?.get(usize::try_from(partition).ok()?)
    }

    /// Sets a partition's value; partition numbers no topic has (negative,
    /// or past [`MOST_PARTITIONS`]) are not believed.
    fn set(&mut self, topic: &str, partition: i32, value: T) {
        let Some(index) = usize::try_from(partition).ok().filter(|&i| i < MOST_PARTITIONS) else { return };
        let slots = match self.0.get_mut(topic) {
            Some(slots) => slots,
            None => self.0.entry(topic.to_owned()).or_default(),
        };
        if slots.len() <= index {
            slots.resize(index + 1, T::default());
        }
        slots[index] = value;
    }
}

/// A partition wanted at some offsets, on its way to one broker.
struct Wanted<'a> {
    topic: &'a str,
    partition: i32,
    /// The offsets not answered yet, ascending; the first is asked for.
    offsets: Vec<i64>,
    /// Where to read from when past the first offset: the end of batches
    /// read that held nothing at or after it (a compacted tail, markers).
    from: i64,
    /// The bytes to ask for.
    bytes: i32,
}

impl std::fmt::Debug for FetchTimes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FetchTimes").finish_non_exhaustive()
    }
}

impl FetchTimes {
    /// A reader on `settings`' brokers: PLAINTEXT, TLS, SASL PLAIN and
    /// SCRAM; `None` for what only librdkafka does (GSSAPI, OAUTHBEARER,
    /// keystores…, see [`crate::Security`]).
    pub fn new(client: &Client) -> Result<Option<Self>> {
        let Some(links) = Links::new(client)? else { return Ok(None) };
        Ok(Some(FetchTimes {
            links,
            leaders: Mutex::new(None),
            batch_sizes: Mutex::new(ByPartition::default()),
            refused_topics: Mutex::new(std::collections::HashSet::new()),
        }))
    }

    /// The record at (or first after) each of `wanted` (topic, partition,
    /// offset), all brokers' requests within `timeout`; and the
    /// offsets read past without a record (only transaction markers follow
    /// them up to the end). Offsets not answered (a broker down, a leader
    /// moving, a response full) are in neither: ask again. An error when
    /// every broker asked failed.
    pub fn read(&self, wanted: &[TopicPartitionOffset], timeout: Duration) -> Result<TimesRead> {
        let mut read = TimesRead::default();
        if wanted.is_empty() {
            return Ok(read);
        }
        let leaders = self.leaders(timeout.max(METADATA_TIMEOUT))?;
        let mut by_partition: HashMap<(&str, i32), Vec<i64>> = HashMap::new();
        for TopicPartitionOffset { topic, partition, offset } in wanted {
            by_partition.entry((topic.as_str(), *partition)).or_default().push(*offset);
        }
        let mut by_broker: BTreeMap<&str, Vec<Wanted<'_>>> = BTreeMap::new();
        let mut leaderless = false;
        {
            let sizes = self.batch_sizes.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            for ((topic, partition), mut offsets) in by_partition {
                let Some(address) = leaders.of(topic, partition) else {
                    leaderless = true;
                    continue;
                };
                offsets.sort_unstable();
                offsets.dedup();
                let bytes = match sizes.get(topic, partition) {
                    // A quarter more: the next batch may be a little larger.
                    Some(&size) if size > 0 => size.saturating_add(size / 4).clamp(LEAST_BYTES, MOST_BYTES),
                    _ => FIRST_BYTES,
                };
                let from = offsets[0];
                by_broker.entry(address).or_default().push(Wanted { topic, partition, offsets, from, bytes });
            }
        }
        let mut moved = leaderless;
        let deadline = Instant::now() + timeout;
        let (mut failed, brokers) = (None, by_broker.len());
        let mut failures = 0;
        for (address, partitions) in by_broker {
            // A broker that fails leaves its partitions unanswered; the
            // others are still read.
            match self.read_from(address, partitions, deadline, &mut read) {
                Ok(leaders_moved) => moved |= leaders_moved,
                Err(e) => {
                    tracing::debug!(broker = address, error = %e, "reading record times");
                    self.links.drop_link(address);
                    moved = true;
                    failures += 1;
                    failed = Some(e);
                }
            }
        }
        if moved {
            *self.leaders.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = None;
        }
        // Every broker failed (TLS or credentials refused, say): say why.
        match failed {
            Some(e) if failures == brokers => Err(e),
            _ => Ok(read),
        }
    }

    /// The leaders known, read again when none are or they are too old.
    fn leaders(&self, timeout: Duration) -> Result<Arc<Leaders>> {
        let mut known = self.leaders.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(leaders) = known.as_ref().filter(|l| l.read_at.elapsed() < LEADERS_MAX_AGE) {
            return Ok(Arc::clone(leaders));
        }
        let read_at = Instant::now();
        let metadata = self.links.metadata(timeout)?;
        let brokers: HashMap<i32, Arc<str>> =
            Links::brokers(&metadata).into_iter().map(|(id, address)| (id, Arc::from(address))).collect();
        let mut by_partition = ByPartition::default();
        for topic in &metadata.topics {
            let Some(name) = topic.name.as_ref().filter(|_| topic.error_code == 0) else { continue };
            for p in &topic.partitions {
                by_partition.set(name.0.as_str(), p.partition_index, brokers.get(&p.leader_id.0).cloned());
            }
        }
        // Sizes of topics gone are forgotten with them.
        self.batch_sizes
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .0
            .retain(|topic, _| by_partition.0.contains_key(topic));
        let leaders = Arc::new(Leaders { read_at, by_partition });
        *known = Some(Arc::clone(&leaders));
        Ok(leaders)
    }

    /// Asks `address` for `partitions` until each offset is answered, the
    /// broker answers none of those left, or [`REQUESTS_PER_BROKER`]
    /// requests. Every offset of a partition that the batches returned hold
    /// is answered from them; the lowest left is asked for next. Whether the
    /// broker said a partition's leader moved.
    fn read_from(
        &self,
        address: &str,
        mut left: Vec<Wanted<'_>>,
        deadline: Instant,
        read: &mut TimesRead,
    ) -> Result<bool> {
        let mut moved = false;
        for _ in 0..REQUESTS_PER_BROKER {
            let timeout = deadline.saturating_duration_since(Instant::now());
            if left.is_empty() || timeout.is_zero() {
                break;
            }
            let frame = self.fetch(address, &left, timeout)?;
            let response = read_fetch_response(&frame).map_err(|e| Error::Refused {
                step: format!("reading a Fetch answer from {address}"),
                message: e.to_string(),
            })?;
            if response.error_code != 0 {
                return Err(Error::Kafka {
                    step: format!("sending a Fetch request to {address}"),
                    code: response.error_code,
                });
            }
            let index: HashMap<(&str, i32), usize> =
                left.iter().enumerate().map(|(i, w)| ((w.topic, w.partition), i)).collect();
            let mut progress = false;
            for p in &response.partitions {
                let Some(&i) = index.get(&(p.topic, p.partition)) else { continue };
                if p.error_code != 0 {
                    moved |= LEADERS_MOVED.contains(&p.error_code);
                    if p.error_code == TOPIC_AUTHORIZATION_FAILED {
                        self.refused_read(p.topic);
                    }
                    continue;
                }
                progress |= self.answer_partition(&mut left[i], p, frame.len(), read);
            }
            left.retain(|w| !w.offsets.is_empty());
            if !progress {
                break;
            }
        }
        Ok(moved)
    }

    /// Answers, into `read`, each offset of `wanted` that its partition's
    /// records in a Fetch answer (a frame of `frame_len` bytes) hold, and
    /// sets what to ask for next: more bytes for a batch that came in part
    /// or not at all, or to read on after whole batches that held nothing.
    /// Whether anything moved on.
    fn answer_partition(
        &self,
        wanted: &mut Wanted<'_>,
        p: &PartitionData<'_>,
        frame_len: usize,
        read: &mut TimesRead,
    ) -> bool {
        let Some(first) = BatchHeader::parse(p.records) else {
            // Empty: the response was full (the same next time), or
            // the batch is larger than asked (more next time).
            let fit =
                frame_len.saturating_add(usize::try_from(wanted.bytes).unwrap_or(0)) <= RESPONSE_MAX_BYTES as usize;
            if fit && p.high_watermark > wanted.from.max(wanted.offsets[0]) && wanted.bytes < MOST_BYTES {
                wanted.bytes = wanted.bytes.saturating_mul(GROWTH).min(MOST_BYTES);
                return true;
            }
            return false;
        };
        self.batch_sizes.lock().unwrap_or_else(std::sync::PoisonError::into_inner).set(
            p.topic,
            p.partition,
            first.size,
        );
        let before = wanted.offsets.len();
        let before_first = wanted.offsets[0];
        let mut need = None;
        let mut answers = first_records_from(p.records, &wanted.offsets).into_iter();
        wanted.offsets.retain(|&want| match answers.next().unwrap_or(Answer::Nothing) {
            Answer::Record(offset, timestamp_ms) => {
                read.found
                    .insert(TopicPartitionOffset::new(p.topic, p.partition, want), RecordTime { offset, timestamp_ms });
                false
            }
            // Only markers up to the end.
            Answer::ControlUpTo(last) if last.saturating_add(1) >= p.high_watermark => {
                read.empty.push(TopicPartitionOffset::new(p.topic, p.partition, want));
                false
            }
            // The batch that holds the offset, whole, next time.
            Answer::NeedBatch(bytes) => {
                need.get_or_insert(bytes);
                true
            }
            // Its time stays unknown: never a guess.
            Answer::Unreadable(why) => {
                tracing::warn!(
                    topic = p.topic,
                    partition = p.partition,
                    offset = want,
                    error = %why,
                    "the record batch holding a committed offset cannot be read; its time is unknown"
                );
                false
            }
            Answer::ControlUpTo(_) | Answer::Nothing => true,
        });
        let mut progress = wanted.offsets.len() < before;
        if let Some(bytes) = need.map(|b| b.clamp(LEAST_BYTES, MOST_BYTES)).filter(|&b| b > wanted.bytes) {
            wanted.bytes = bytes;
            progress = true;
        }
        // Whole batches without an answer: read on after them.
        let asked = wanted.from.max(before_first);
        if need.is_none()
            && let Some(&first) = wanted.offsets.first()
            && let Some(after) = after_whole_batches(p.records).filter(|&a| a > asked.max(first))
        {
            wanted.from = after;
            progress = true;
        }
        progress
    }

    /// Says once per topic that the broker refused to let kshard read it:
    /// the reason its lag in seconds is only ever an estimate.
    fn refused_read(&self, topic: &str) {
        let mut refused = self.refused_topics.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if refused.len() < MOST_REFUSED_TOPICS && refused.insert(topic.to_owned()) {
            tracing::warn!(
                topic,
                "lag in seconds on this topic is estimated: kshard may not Read it (TOPIC_AUTHORIZATION_FAILED); \
                 grant Read on the topic for exact values"
            );
        }
    }

    /// One Fetch request to `address` for the first offset of each of
    /// `partitions`, with the bytes to ask for: the answer's frame.
    fn fetch(&self, address: &str, partitions: &[Wanted<'_>], timeout: Duration) -> Result<Vec<u8>> {
        let mut topics: BTreeMap<&str, Vec<FetchPartition>> = BTreeMap::new();
        for w in partitions {
            topics.entry(w.topic).or_default().push(
                FetchPartition::default()
                    .with_partition(w.partition)
                    .with_fetch_offset(w.from.max(w.offsets[0]))
                    .with_partition_max_bytes(w.bytes),
            );
        }
        let request = FetchRequest::default()
            .with_max_wait_ms(0)
            .with_min_bytes(0)
            .with_max_bytes(RESPONSE_MAX_BYTES)
            .with_isolation_level(0)
            .with_topics(
                topics
                    .into_iter()
                    .map(|(t, ps)| {
                        FetchTopic::default()
                            .with_topic(TopicName(StrBytes::from_string(t.to_owned())))
                            .with_partitions(ps)
                    })
                    .collect(),
            );
        self.links.on(address, timeout, |link| link.send(ApiKey::Fetch, &request, FETCH_VERSION, timeout))
    }
}
