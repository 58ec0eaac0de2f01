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
//! ([`crate::fetch_response`]).

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::{ApiKey, FetchRequest, MetadataRequest, MetadataResponse, TopicName};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::records::RecordBatchDecoder;

use crate::broker_link::{BrokerLink, Security};
use crate::config::ClientSettings;
use crate::error::{Error, Result};
use crate::fetch_response::read_fetch_response;
use crate::timestamps::{RecordTime, TimesRead};

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

/// Metadata v9: the first flexible version; every broker since Kafka 2.4
/// speaks it, Kafka 4 too (which dropped v0 to v3).
const METADATA_VERSION: i16 = 9;

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
    /// The bootstrap brokers, `host:port`: where the cluster's metadata is
    /// asked for when no connection is open.
    bootstrap: Vec<String>,
    /// The leaders last read, if still trusted.
    leaders: Mutex<Option<Arc<Leaders>>>,
    /// Topic → by partition, the size of the batch last read there (0: none
    /// yet): what to ask for next time, so that a partition's answer is about
    /// one batch, not the log after it.
    batch_sizes: Mutex<HashMap<String, Vec<i32>>>,
    /// TLS and SASL, as the settings ask.
    security: Security,
    /// Topics the broker would not let kshard read, each said once.
    refused_topics: Mutex<std::collections::HashSet<String>>,
    /// Open connections, by `host:port`.
    connections: Mutex<HashMap<String, BrokerLink>>,
}

/// Each partition's leader's address, as a Metadata request said.
struct Leaders {
    read_at: Instant,
    /// Topic → the leader's `host:port` by partition (`None`: no leader).
    by_topic: HashMap<String, Vec<Option<Arc<str>>>>,
}

/// A partition's slot in a by-topic table.
fn slot<'a, T>(table: &'a HashMap<String, Vec<T>>, topic: &str, partition: i32) -> Option<&'a T> {
    table.get(topic)?.get(usize::try_from(partition).ok()?)
}

impl Leaders {
    fn of(&self, topic: &str, partition: i32) -> Option<&Arc<str>> {
        slot(&self.by_topic, topic, partition)?.as_ref()
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
    /// keystores…, see [`Security`]).
    pub fn new(settings: &ClientSettings) -> Result<Option<Self>> {
        let Some(security) = Security::from_settings(settings)? else { return Ok(None) };
        let bootstrap = settings.brokers.split(',').map(|b| b.trim().to_owned()).filter(|b| !b.is_empty()).collect();
        Ok(Some(FetchTimes {
            bootstrap,
            leaders: Mutex::new(None),
            batch_sizes: Mutex::new(HashMap::new()),
            refused_topics: Mutex::new(std::collections::HashSet::new()),
            security,
            connections: Mutex::new(HashMap::new()),
        }))
    }

    /// The record at (or first after) each of `wanted` (topic, partition,
    /// offset), each broker given at most `timeout` per request; and the
    /// offsets read past without a record (only transaction markers follow
    /// them up to the end). Offsets not answered (a broker down, a leader
    /// moving, a response full) are in neither: ask again. An error when
    /// every broker asked failed.
    pub fn read(&self, wanted: &[(String, i32, i64)], timeout: Duration) -> Result<TimesRead> {
        let mut read = TimesRead::default();
        if wanted.is_empty() {
            return Ok(read);
        }
        let leaders = self.leaders(timeout.max(METADATA_TIMEOUT))?;
        let mut by_partition: HashMap<(&str, i32), Vec<i64>> = HashMap::new();
        for (topic, partition, offset) in wanted {
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
                let bytes = match slot(&sizes, topic, partition) {
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
                    self.connections.lock().unwrap_or_else(std::sync::PoisonError::into_inner).remove(address);
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
        let metadata = self.metadata(timeout)?;
        let brokers: HashMap<i32, Arc<str>> = metadata
            .brokers
            .iter()
            .map(|b| {
                let host = b.host.as_str();
                // An IPv6 address is written in brackets.
                let address =
                    if host.contains(':') { format!("[{host}]:{}", b.port) } else { format!("{host}:{}", b.port) };
                (b.node_id.0, Arc::from(address))
            })
            .collect();
        let mut by_topic: HashMap<String, Vec<Option<Arc<str>>>> = HashMap::new();
        for topic in &metadata.topics {
            let Some(name) = topic.name.as_ref().filter(|_| topic.error_code == 0) else { continue };
            let slots = by_topic.entry(name.0.as_str().to_owned()).or_default();
            for p in &topic.partitions {
                let Ok(index) = usize::try_from(p.partition_index) else { continue };
                if index >= MOST_PARTITIONS {
                    continue;
                }
                if slots.len() <= index {
                    slots.resize(index + 1, None);
                }
                slots[index] = brokers.get(&p.leader_id.0).cloned();
            }
        }
        // Sizes of topics gone are forgotten with them.
        self.batch_sizes
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .retain(|topic, _| by_topic.contains_key(topic));
        let leaders = Arc::new(Leaders { read_at, by_topic });
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
            let (expected, frame) = self.fetch(address, &left, timeout)?;
            let response = read_fetch_response(&frame).map_err(|e| Error::Refused {
                step: format!("reading a Fetch answer from {address}"),
                message: e.to_string(),
            })?;
            if response.correlation_id != expected {
                return Err(Error::Refused {
                    step: format!("reading a Fetch answer from {address}"),
                    message: format!("correlation id {} for {expected}", response.correlation_id),
                });
            }
            if response.error_code != 0 {
                return Err(Error::Refused {
                    step: format!("sending a Fetch request to {address}"),
                    message: format!("error code {}", response.error_code),
                });
            }
            let index: HashMap<(&str, i32), usize> =
                left.iter().enumerate().map(|(i, w)| ((w.topic, w.partition), i)).collect();
            let mut progress = false;
            for p in &response.partitions {
                let Some(&i) = index.get(&(p.topic, p.partition)) else { continue };
                let wanted = &mut left[i];
                if p.error_code != 0 {
                    moved |= LEADERS_MOVED.contains(&p.error_code);
                    if p.error_code == TOPIC_AUTHORIZATION_FAILED {
                        self.refused_read(p.topic);
                    }
                    continue;
                }
                let Some(first) = BatchHeader::parse(p.records) else {
                    // Empty: the response was full (the same next time), or
                    // the batch is larger than asked (more next time).
                    let fit = frame.len().saturating_add(usize::try_from(wanted.bytes).unwrap_or(0))
                        <= RESPONSE_MAX_BYTES as usize;
                    if fit && p.high_watermark > wanted.from.max(wanted.offsets[0]) && wanted.bytes < MOST_BYTES {
                        wanted.bytes = wanted.bytes.saturating_mul(GROWTH).min(MOST_BYTES);
                        progress = true;
                    }
                    continue;
                };
                self.remember(p.topic, p.partition, first.size);
                let before = wanted.offsets.len();
                let before_first = wanted.offsets[0];
                let mut need = None;
                wanted.offsets.retain(|&want| match first_record_from(p.records, want) {
                    Answer::Record(offset, timestamp_ms) => {
                        read.found.insert((p.topic.to_owned(), p.partition, want), RecordTime { offset, timestamp_ms });
                        false
                    }
                    // Only markers up to the end.
                    Answer::ControlUpTo(last) if last.saturating_add(1) >= p.high_watermark => {
                        read.empty.push((p.topic.to_owned(), p.partition, want));
                        false
                    }
                    // The batch that holds the offset, whole, next time.
                    Answer::NeedBatch(bytes) => {
                        need.get_or_insert(bytes);
                        true
                    }
                    Answer::ControlUpTo(_) | Answer::Nothing => true,
                });
                progress |= wanted.offsets.len() < before;
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
            }
            left.retain(|w| !w.offsets.is_empty());
            if !progress {
                break;
            }
        }
        Ok(moved)
    }

    /// The cluster's metadata (every topic), from the first broker that
    /// answers: those connected first, then the bootstrap list.
    fn metadata(&self, timeout: Duration) -> Result<MetadataResponse> {
        let request = MetadataRequest::default().with_topics(None).with_allow_auto_topic_creation(false);
        let mut connections = self.connections.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let open: Vec<String> = connections.keys().cloned().collect();
        let mut failed = None;
        for address in open.iter().chain(&self.bootstrap) {
            if connections.get(address).is_some_and(BrokerLink::expired) {
                connections.remove(address);
            }
            let link = match connections.entry(address.clone()) {
                std::collections::hash_map::Entry::Occupied(open) => open.into_mut(),
                std::collections::hash_map::Entry::Vacant(none) => {
                    match BrokerLink::connect(address, &self.security, timeout) {
                        Ok(link) => none.insert(link),
                        Err(e) => {
                            failed = Some(e);
                            continue;
                        }
                    }
                }
            };
            match link.call::<_, MetadataResponse>(ApiKey::Metadata, &request, METADATA_VERSION, timeout) {
                Ok(metadata) => return Ok(metadata),
                Err(e) => {
                    connections.remove(address);
                    failed = Some(e);
                }
            }
        }
        Err(failed.unwrap_or_else(|| Error::Refused {
            step: "fetching the cluster's metadata".into(),
            message: "no bootstrap broker".into(),
        }))
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

    /// Remembers the size of the batch last read on a partition.
    fn remember(&self, topic: &str, partition: i32, size: i32) {
        let Ok(index) = usize::try_from(partition) else { return };
        if index >= MOST_PARTITIONS {
            return;
        }
        let mut sizes = self.batch_sizes.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let slots = match sizes.get_mut(topic) {
            Some(slots) => slots,
            None => sizes.entry(topic.to_owned()).or_default(),
        };
        if slots.len() <= index {
            slots.resize(index + 1, 0);
        }
        slots[index] = size;
    }

    /// One Fetch request to `address` for the first offset of each of
    /// `partitions`, with the bytes to ask for: the request's correlation id
    /// and the answer's frame. A connection is made when none is open.
    fn fetch(&self, address: &str, partitions: &[Wanted<'_>], timeout: Duration) -> Result<(i32, Vec<u8>)> {
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
        let mut connections = self.connections.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        // A connection kept from before may have been closed by the broker
        // (idle, or its SASL session over): one more try on a new one.
        if let Some(open) = connections.get_mut(address) {
            if !open.expired()
                && let Ok(answer) = open.send(ApiKey::Fetch, &request, FETCH_VERSION, timeout)
            {
                return Ok(answer);
            }
            connections.remove(address);
        }
        let mut link = BrokerLink::connect(address, &self.security, timeout)?;
        let answer = link.send(ApiKey::Fetch, &request, FETCH_VERSION, timeout)?;
        connections.insert(address.to_owned(), link);
        Ok(answer)
    }
}

/// What a partition's records say of the first record at or after an offset.
#[derive(Debug, PartialEq, Eq)]
enum Answer {
    /// That record: its offset and timestamp (ms).
    Record(i64, i64),
    /// No data record, only control records (transaction markers) up to this offset.
    ControlUpTo(i64),
    /// The batch holding the offset, of this many bytes, came only in part.
    NeedBatch(i32),
    /// Nothing usable (records before the offset only).
    Nothing,
}

/// The v2 record batch header: what [`first_record_from`] reads of a batch
/// that came only in part.
struct BatchHeader {
    base_offset: i64,
    /// The whole batch's size on the wire (its length field and the 12 bytes
    /// before it).
    size: i32,
    last_offset: i64,
    control: bool,
    compressed: bool,
    /// Its records, and whether they are all there: the log cleaner keeps a
    /// batch's base and last offsets and drops records in between (or all of
    /// them, keeping an empty batch for the producer's state).
    count: i32,
    holes: bool,
    /// The base timestamp is the cleaner's delete horizon, not the first
    /// record's time.
    delete_horizon: bool,
    /// The first record's timestamp, or every record's when the broker sets
    /// them (LogAppendTime).
    timestamp_ms: i64,
    log_append_time: bool,
}

impl BatchHeader {
    /// The header at the start of `bytes`, when it is all there and v2.
    fn parse(bytes: &[u8]) -> Option<BatchHeader> {
        let be_i64 = |at: usize| bytes.get(at..at + 8).map(|b| i64::from_be_bytes(b.try_into().unwrap_or_default()));
        let be_i32 = |at: usize| bytes.get(at..at + 4).map(|b| i32::from_be_bytes(b.try_into().unwrap_or_default()));
        let be_i16 = |at: usize| bytes.get(at..at + 2).map(|b| i16::from_be_bytes(b.try_into().unwrap_or_default()));
        if bytes.len() < 61 || bytes[16] != 2 {
            return None;
        }
        let attributes = be_i16(21)?;
        let (base_timestamp, max_timestamp) = (be_i64(27)?, be_i64(35)?);
        let log_append_time = attributes & 0x08 != 0;
        let base_offset = be_i64(0)?;
        let last_offset_delta = be_i32(23)?;
        let count = be_i32(57)?;
        let size = be_i32(8)?.checked_add(12)?;
        // A batch is at least its header; a size below it would not move on.
        if size < 61 || last_offset_delta < 0 || count < 0 {
            return None;
        }
        Some(BatchHeader {
            base_offset,
            size,
            last_offset: base_offset.checked_add(i64::from(last_offset_delta))?,
            control: attributes & 0x20 != 0,
            compressed: attributes & 0x07 != 0,
            count,
            holes: i64::from(count) != i64::from(last_offset_delta) + 1,
            delete_horizon: attributes & 0x40 != 0,
            timestamp_ms: if log_append_time { max_timestamp } else { base_timestamp },
            log_append_time,
        })
    }

    /// In this uncompressed batch, the first record at or after `want`: each
    /// record's length, timestamp delta and offset delta are read, the rest
    /// skipped. `None` when the batch ends first (cut, or malformed).
    fn walk(&self, batch: &[u8], want: i64) -> Option<Answer> {
        let mut at = 61;
        let count = i32::from_be_bytes(batch.get(57..61)?.try_into().ok()?);
        for _ in 0..count {
            let (length, n) = varint(batch.get(at..)?)?;
            let start = at + n;
            let end = start.checked_add(usize::try_from(length).ok()?)?;
            let record = batch.get(start..end)?;
            // attributes (1 byte), timestamp delta, offset delta
            let (timestamp_delta, n1) = varint(record.get(1..)?)?;
            let (offset_delta, _) = varint(record.get(1 + n1..)?)?;
            let offset = self.base_offset.checked_add(offset_delta)?;
            if offset >= want {
                let ts = if self.log_append_time {
                    self.timestamp_ms
                } else {
                    self.timestamp_ms.checked_add(timestamp_delta)?
                };
                return Some(Answer::Record(offset, ts));
            }
            at = end;
        }
        Some(Answer::Nothing)
    }
}

/// A zigzag varint (Kafka's records use them): its value and its length.
fn varint(bytes: &[u8]) -> Option<(i64, usize)> {
    let mut value: u64 = 0;
    for (i, b) in bytes.iter().take(10).enumerate() {
        value |= u64::from(b & 0x7f) << (7 * i);
        if b & 0x80 == 0 {
            return Some((((value >> 1) as i64) ^ -((value & 1) as i64), i + 1));
        }
    }
    None
}

/// The first data record at or after `want` in `records` (a partition's
/// record batches as a Fetch response carries them).
fn first_record_from(mut records: &[u8], want: i64) -> Answer {
    let mut last_control = None;
    while let Some(h) = BatchHeader::parse(records) {
        let complete = h.size as usize <= records.len();
        if h.last_offset < want || h.control || h.count == 0 {
            if h.control && h.last_offset >= want {
                last_control = Some(h.last_offset);
            }
            if !complete {
                break;
            }
            records = &records[h.size as usize..];
            continue;
        }
        // The batch's first record is the one: its header says when (unless
        // the cleaner took records out of it, or set its delete horizon).
        if h.base_offset >= want && !h.holes && !h.delete_horizon {
            return Answer::Record(h.base_offset, h.timestamp_ms);
        }
        let (mut batch, rest) = records.split_at((h.size as usize).min(records.len()));
        records = rest;
        if !h.compressed {
            // Uncompressed: walk the records' lengths and deltas only, as
            // far as they came. Nothing at or after `want` (records the
            // cleaner removed): the next batch has it.
            match h.walk(batch, want) {
                Some(Answer::Nothing) => continue,
                Some(found) => return found,
                None if !complete => return Answer::NeedBatch(h.size),
                None => break,
            }
        }
        if !complete {
            return Answer::NeedBatch(h.size);
        }
        // Counts past what the bytes could hold are a lie the decoder would
        // allocate for.
        if h.count > h.size.saturating_mul(64) {
            break;
        }
        let Ok(set) = RecordBatchDecoder::decode(&mut batch) else { break };
        if let Some(r) = set.records.iter().find(|r| r.offset >= want && !r.control) {
            // LogAppendTime: every record's time is the batch's.
            return Answer::Record(r.offset, if h.log_append_time { h.timestamp_ms } else { r.timestamp });
        }
    }
    last_control.map_or(Answer::Nothing, Answer::ControlUpTo)
}

/// The offset after the last whole batch in `records`: where to go on
/// reading a partition whose batches so far held nothing at the offset
/// wanted (a compacted tail, markers), `None` when no batch came whole.
fn after_whole_batches(mut records: &[u8]) -> Option<i64> {
    let mut after = None;
    while let Some(h) = BatchHeader::parse(records) {
        if h.size as usize > records.len() {
            break;
        }
        after = h.last_offset.checked_add(1);
        records = &records[h.size as usize..];
    }
    after
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::{Bytes, BytesMut};
    use kafka_protocol::records::{Compression, Record, RecordBatchEncoder, RecordEncodeOptions, TimestampType};

    fn batch(records: &[(i64, i64, bool)], compression: Compression) -> Bytes {
        let records: Vec<Record> = records
            .iter()
            .map(|&(offset, timestamp, control)| Record {
                transactional: control,
                control,
                partition_leader_epoch: 0,
                producer_id: if control { 7 } else { -1 },
                producer_epoch: if control { 0 } else { -1 },
                timestamp_type: TimestampType::Creation,
                offset,
                // The encoder keeps records whose offset − sequence agree in one batch.
                sequence: offset as i32,
                timestamp,
                key: Some(Bytes::from_static(b"k")),
                value: Some(Bytes::from_static(b"v")),
                headers: Default::default(),
                delete_horizon: false,
            })
            .collect();
        let mut buf = BytesMut::new();
        RecordBatchEncoder::encode(&mut buf, &records, &RecordEncodeOptions { version: 2, compression })
            .expect("encode");
        buf.freeze()
    }

    #[test]
    fn the_record_at_or_after_the_offset() {
        let b = batch(&[(10, 1000, false), (11, 1100, false), (12, 1200, false)], Compression::None);
        assert_eq!(first_record_from(&b, 11), Answer::Record(11, 1100));
        assert_eq!(first_record_from(&b, 5), Answer::Record(10, 1000), "the wanted one is gone");
        assert_eq!(first_record_from(&b, 13), Answer::Nothing);
        let compressed = batch(&[(20, 2000, false), (21, 2100, false)], Compression::Lz4);
        assert_eq!(first_record_from(&compressed, 21), Answer::Record(21, 2100));
    }

    #[test]
    fn markers_only_and_a_batch_in_part() {
        let marker = batch(&[(30, 3000, true)], Compression::None);
        assert_eq!(first_record_from(&marker, 30), Answer::ControlUpTo(30));
        let full = batch(&[(40, 4000, false), (41, 4100, false), (42, 4200, false)], Compression::None);
        let head = full.slice(..70);
        // The first record: the header says it all.
        assert_eq!(first_record_from(&head, 40), Answer::Record(40, 4000));
        assert_eq!(first_record_from(&head, 39), Answer::Record(40, 4000), "gone: the next one");
        // One inside: the whole batch is needed.
        assert_eq!(first_record_from(&head, 41), Answer::NeedBatch(full.len() as i32));
        assert_eq!(first_record_from(&head, 43), Answer::Nothing);
        assert_eq!(first_record_from(&full[..20], 40), Answer::Nothing, "not even a header");
        // Cut past the wanted record (uncompressed): read as far as it came.
        let cut = &full[..full.len() - 1];
        assert_eq!(first_record_from(cut, 41), Answer::Record(41, 4100));
        assert_eq!(first_record_from(cut, 42), Answer::NeedBatch(full.len() as i32));
        // Whole: the records are read.
        assert_eq!(first_record_from(&full, 41), Answer::Record(41, 4100));
        let two = [full.as_ref(), batch(&[(43, 4300, false)], Compression::Gzip).as_ref()].concat();
        assert_eq!(first_record_from(&Bytes::from(two), 43), Answer::Record(43, 4300), "past a first batch");
    }

    /// Bytes of `b` with `at..` overwritten by `with`.
    fn patched(b: &Bytes, at: usize, with: &[u8]) -> Vec<u8> {
        let mut v = b.to_vec();
        v[at..at + with.len()].copy_from_slice(with);
        v
    }

    #[test]
    fn batches_the_log_cleaner_rewrote() {
        let next = batch(&[(46, 4600, false)], Compression::None);
        // Every record gone, the batch kept for the producer's state (count
        // 0): no record there, the next batch's is the answer.
        let emptied = patched(&batch(&[(20, 2000, false)], Compression::None), 57, &0i32.to_be_bytes());
        let both = [&emptied[..], &next[..]].concat();
        assert_eq!(first_record_from(&both, 20), Answer::Record(46, 4600));
        // A compacted tail: the batch still ends at 45, its last record is 41.
        let tail = patched(&batch(&[(40, 4000, false), (41, 4100, false)], Compression::None), 23, &5i32.to_be_bytes());
        let both = [&tail[..], &next[..]].concat();
        assert_eq!(first_record_from(&both, 43), Answer::Record(46, 4600), "read on past the tail");
        assert_eq!(first_record_from(&tail, 43), Answer::Nothing);
        assert_eq!(after_whole_batches(&tail), Some(46), "where to read on from");
        // Records taken out between base and last: the header's first
        // record may be gone, so the records are read.
        let holes = batch(&[(50, 5000, false), (52, 5200, false)], Compression::None);
        assert_eq!(first_record_from(&holes, 49), Answer::Record(50, 5000));
        assert_eq!(first_record_from(&holes, 51), Answer::Record(52, 5200));
    }

    #[test]
    fn lying_headers_end_the_walk() {
        // A length that would not move past the header: nothing, no loop.
        let stuck = patched(&batch(&[(10, 1000, true)], Compression::None), 8, &(-12i32).to_be_bytes());
        assert_eq!(first_record_from(&stuck, 10), Answer::Nothing);
        assert_eq!(after_whole_batches(&stuck), None);
        let negative = patched(&batch(&[(10, 1000, false)], Compression::None), 23, &(-1i32).to_be_bytes());
        assert_eq!(first_record_from(&negative, 10), Answer::Nothing);
        let far = patched(&batch(&[(i64::MAX - 1, 1000, false)], Compression::None), 23, &9i32.to_be_bytes());
        assert_eq!(first_record_from(&far, 0), Answer::Nothing, "an offset past i64");
    }
}
