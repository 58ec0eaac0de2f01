//! [`FetchTimes`]: the timestamps of records at given offsets by kshard's own
//! Fetch request, over PLAINTEXT — one request per broker leading wanted
//! partitions, each partition asking for about one batch at its offset (the
//! broker answers with the batch that holds it). Where the wanted record is
//! the batch's first (or the record there is gone and the batch starts after
//! it), the batch header's timestamp is the answer; otherwise that batch's
//! records are read (decompressed if need be). No consumer, no
//! assignment, no prefetch: what made [`crate::TimestampReader`] cost about
//! 34 µs of CPU a partition.
//! Connections to brokers are kept between calls. TLS and SASL go through
//! [`crate::TimestampReader`].

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::Mutex;
use std::time::Duration;

use bytes::{Buf, BufMut, Bytes, BytesMut};
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::{ApiKey, FetchRequest, FetchResponse, RequestHeader, ResponseHeader, TopicName};
use kafka_protocol::protocol::{Decodable, Encodable, HeaderVersion, StrBytes};
use kafka_protocol::records::RecordBatchDecoder;

use crate::admin::Admin;
use crate::config::ClientSettings;
use crate::error::{Error, Result};
use crate::timestamps::{RecordTime, TimesRead};

/// Fetch v12: topic names (v13 on use topic ids), flexible encoding; every
/// broker since Kafka 2.7 and Kafka 4.x speak it.
const FETCH_VERSION: i16 = 12;

/// Bytes asked of each partition at first: a producer's default batch. A
/// broker returns only whole batches (past the first partition of a
/// response), so a partition that comes back empty is asked again for
/// [`GROWTH`] times more, up to [`MOST_BYTES`].
const FIRST_BYTES: i32 = 16 * 1024;

/// How much more a partition that came back empty is asked for.
const GROWTH: i32 = 8;

/// The most asked of one partition: a batch is at most the broker's
/// `message.max.bytes` (1 MiB by default).
const MOST_BYTES: i32 = 8 * 1024 * 1024;

/// What one response may carry; partitions past it come back empty and are
/// asked again in the same call.
const RESPONSE_MAX_BYTES: i32 = 32 * 1024 * 1024;

/// Requests per broker and call, at most (partitions left out of a full
/// response are asked again).
const REQUESTS_PER_BROKER: usize = 8;

/// Rounds per call: a partition wanted at several offsets takes one each.
const ROUNDS: usize = 3;

/// Reads record timestamps with Fetch requests of its own.
pub struct FetchTimes {
    /// Leaders and broker addresses, read at each call.
    admin: Admin,
    /// Open connections, by `host:port`.
    connections: Mutex<HashMap<String, TcpStream>>,
    /// The next request's correlation id.
    correlation: Mutex<i32>,
}

impl std::fmt::Debug for FetchTimes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FetchTimes").finish_non_exhaustive()
    }
}

impl FetchTimes {
    /// A reader on `settings`' brokers, when they are reached over PLAINTEXT
    /// (`None` for TLS or SASL).
    pub fn new(settings: &ClientSettings) -> Result<Option<Self>> {
        let plaintext = settings
            .properties
            .iter()
            .filter(|(k, _)| k == "security.protocol")
            .all(|(_, v)| v.eq_ignore_ascii_case("plaintext"));
        if !plaintext {
            return Ok(None);
        }
        let admin = Admin::new(settings, Duration::from_secs(30))?;
        Ok(Some(FetchTimes { admin, connections: Mutex::new(HashMap::new()), correlation: Mutex::new(0) }))
    }

    /// The record at (or first after) each of `wanted` (topic, partition,
    /// offset), each broker given at most `timeout` per request; and the
    /// offsets read past without a record (only transaction markers follow
    /// them up to the end). Offsets not answered (a broker down, a leader
    /// moving, a response full) are in neither: ask again.
    pub fn read(&self, wanted: &[(String, i32, i64)], timeout: Duration) -> Result<TimesRead> {
        let mut read = TimesRead::default();
        if wanted.is_empty() {
            return Ok(read);
        }
        let (leaders, brokers) = self.admin.leaders_and_brokers()?;
        let mut by_partition: BTreeMap<(&str, i32), BTreeSet<i64>> = BTreeMap::new();
        for (topic, partition, offset) in wanted {
            by_partition.entry((topic.as_str(), *partition)).or_default().insert(*offset);
        }
        for _ in 0..ROUNDS {
            let mut by_broker: BTreeMap<&str, Vec<(&str, i32, i64)>> = BTreeMap::new();
            for ((topic, partition), offsets) in by_partition.iter_mut() {
                let Some(offset) = offsets.pop_first() else { continue };
                let address = leaders.get(&((*topic).to_owned(), *partition)).and_then(|id| brokers.get(id));
                if let Some(address) = address {
                    by_broker.entry(address.as_str()).or_default().push((topic, *partition, offset));
                }
            }
            if by_broker.is_empty() {
                break;
            }
            for (address, partitions) in by_broker {
                // A broker that fails leaves its partitions unanswered; the
                // others are still read.
                if let Err(e) = self.read_from(address, &partitions, timeout, &mut read) {
                    tracing::debug!(broker = address, error = %e, "reading record times");
                    self.connections.lock().unwrap_or_else(std::sync::PoisonError::into_inner).remove(address);
                }
            }
        }
        Ok(read)
    }

    /// Asks `address` for `partitions` until each is answered, the broker
    /// answers none of those left, or [`REQUESTS_PER_BROKER`] requests.
    fn read_from(
        &self,
        address: &str,
        partitions: &[(&str, i32, i64)],
        timeout: Duration,
        read: &mut TimesRead,
    ) -> Result<()> {
        // (topic, partition, wanted offset, bytes to ask for)
        let mut left: Vec<(&str, i32, i64, i32)> = partitions.iter().map(|&(t, p, o)| (t, p, o, FIRST_BYTES)).collect();
        for _ in 0..REQUESTS_PER_BROKER {
            if left.is_empty() {
                break;
            }
            let response = self.fetch(address, &left, timeout)?;
            let before = left.len();
            let mut answered: std::collections::HashSet<(&str, i32)> = std::collections::HashSet::new();
            let mut bigger: HashMap<(&str, i32), i32> = HashMap::new();
            // (topic, partition) → (wanted offset, bytes asked)
            let asked: HashMap<(&str, i32), (i64, i32)> = left.iter().map(|&(t, p, o, b)| ((t, p), (o, b))).collect();
            for topic in &response.responses {
                let name: &str = &topic.topic.0;
                for p in &topic.partitions {
                    let partition = p.partition_index;
                    let Some(&(want, asked_bytes)) = asked.get(&(name, partition)) else { continue };
                    if p.error_code != 0 {
                        continue;
                    }
                    let Some(records) = p.records.clone().filter(|r| !r.is_empty()) else {
                        // A batch larger than asked for, or the response
                        // full: more next time.
                        if p.high_watermark > want {
                            bigger.insert((name, partition), asked_bytes.saturating_mul(GROWTH).min(MOST_BYTES));
                        }
                        continue;
                    };
                    match first_record_from(records, want) {
                        Answer::Record(offset, timestamp_ms) => {
                            read.found.insert((name.to_owned(), partition, want), RecordTime { offset, timestamp_ms });
                            answered.insert((name, partition));
                        }
                        // Only markers up to the end.
                        Answer::ControlUpTo(last) if last + 1 >= p.high_watermark => {
                            read.empty.push((name.to_owned(), partition, want));
                            answered.insert((name, partition));
                        }
                        // The batch that holds the offset, whole, next time.
                        Answer::NeedBatch(bytes) => {
                            bigger.insert((name, partition), bytes.clamp(FIRST_BYTES, MOST_BYTES));
                        }
                        Answer::ControlUpTo(_) | Answer::Nothing => {}
                    }
                }
            }
            left.retain(|(t, p, _, _)| !answered.contains(&(*t, *p)));
            for (t, p, _, bytes) in &mut left {
                if let Some(&b) = bigger.get(&(*t, *p)) {
                    *bytes = b;
                }
            }
            if left.len() == before && bigger.is_empty() {
                break;
            }
        }
        Ok(())
    }

    /// One Fetch request to `address` for `partitions`, each with the bytes
    /// to ask for.
    fn fetch(&self, address: &str, partitions: &[(&str, i32, i64, i32)], timeout: Duration) -> Result<FetchResponse> {
        let step = |what: &str| format!("{what} a Fetch request to {address}");
        let mut topics: BTreeMap<&str, Vec<FetchPartition>> = BTreeMap::new();
        for (topic, partition, offset, bytes) in partitions {
            topics.entry(topic).or_default().push(
                FetchPartition::default()
                    .with_partition(*partition)
                    .with_fetch_offset(*offset)
                    .with_partition_max_bytes(*bytes),
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
        let correlation = {
            let mut c = self.correlation.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            *c = c.wrapping_add(1);
            *c
        };
        let header = RequestHeader::default()
            .with_request_api_key(ApiKey::Fetch as i16)
            .with_request_api_version(FETCH_VERSION)
            .with_correlation_id(correlation)
            .with_client_id(Some(StrBytes::from_static_str("kshard")));
        let mut body = BytesMut::new();
        header
            .encode(&mut body, FetchRequest::header_version(FETCH_VERSION))
            .map_err(|e| refused(step("encoding"), e))?;
        request.encode(&mut body, FETCH_VERSION).map_err(|e| refused(step("encoding"), e))?;
        let mut frame = BytesMut::with_capacity(body.len() + 4);
        frame.put_i32(body.len() as i32);
        frame.extend_from_slice(&body);

        let mut connections = self.connections.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if !connections.contains_key(address) {
            let stream = TcpStream::connect(address).map_err(|e| refused(step("connecting for"), e))?;
            stream.set_nodelay(true).map_err(|e| refused(step("configuring the connection for"), e))?;
            connections.insert(address.to_owned(), stream);
        }
        let stream = connections.get_mut(address).expect("inserted above");
        stream
            .set_read_timeout(Some(timeout.max(Duration::from_millis(1))))
            .map_err(|e| refused(step("configuring"), e))?;
        stream
            .set_write_timeout(Some(timeout.max(Duration::from_millis(1))))
            .map_err(|e| refused(step("configuring"), e))?;
        stream.write_all(&frame).map_err(|e| refused(step("sending"), e))?;
        let mut size = [0u8; 4];
        stream.read_exact(&mut size).map_err(|e| refused(step("reading the answer to"), e))?;
        let size = i32::from_be_bytes(size);
        // A response is at most what was asked for plus one batch per
        // partition; refuse what no broker would send.
        if !(0..=RESPONSE_MAX_BYTES.saturating_mul(4)).contains(&size) {
            return Err(Error::Refused {
                step: step("reading the answer to"),
                message: format!("a frame of {size} bytes"),
            });
        }
        let mut buf = vec![0u8; size as usize];
        stream.read_exact(&mut buf).map_err(|e| refused(step("reading the answer to"), e))?;
        drop(connections);
        let mut buf = Bytes::from(buf);
        let header = ResponseHeader::decode(&mut buf, FetchResponse::header_version(FETCH_VERSION))
            .map_err(|e| refused(step("decoding the answer to"), e))?;
        if header.correlation_id != correlation {
            return Err(Error::Refused {
                step: step("reading the answer to"),
                message: format!("correlation id {} for {correlation}", header.correlation_id),
            });
        }
        let response =
            FetchResponse::decode(&mut buf, FETCH_VERSION).map_err(|e| refused(step("decoding the answer to"), e))?;
        if response.error_code != 0 {
            return Err(Error::Refused {
                step: step("sending"),
                message: format!("error code {}", response.error_code),
            });
        }
        Ok(response)
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
        Some(BatchHeader {
            base_offset: be_i64(0)?,
            size: be_i32(8)?.checked_add(12)?,
            last_offset: be_i64(0)? + i64::from(be_i32(23)?),
            control: attributes & 0x20 != 0,
            compressed: attributes & 0x07 != 0,
            timestamp_ms: if log_append_time { max_timestamp } else { base_timestamp },
            log_append_time,
        })
    }

    /// In this whole, uncompressed batch, the first record at or after
    /// `want`: each record's length, timestamp delta and offset delta are
    /// read, the rest skipped. `None` when the batch is malformed.
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
            let offset = self.base_offset + offset_delta;
            if offset >= want {
                let ts = if self.log_append_time { self.timestamp_ms } else { self.timestamp_ms + timestamp_delta };
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
fn first_record_from(mut records: Bytes, want: i64) -> Answer {
    let mut last_control = None;
    while let Some(h) = BatchHeader::parse(&records) {
        let complete = h.size as usize <= records.remaining();
        if h.last_offset < want || h.control {
            if h.control && h.last_offset >= want {
                last_control = Some(h.last_offset);
            }
            if !complete {
                break;
            }
            records.advance(h.size as usize);
            continue;
        }
        // The batch's first record is the one: its header says when.
        if h.base_offset >= want {
            return Answer::Record(h.base_offset, h.timestamp_ms);
        }
        if !complete {
            return Answer::NeedBatch(h.size);
        }
        let mut batch = records.split_to(h.size as usize);
        if !h.compressed {
            // Uncompressed: walk the records' lengths and deltas only.
            match h.walk(&batch, want) {
                Some(found) => return found,
                None => break,
            }
        }
        let Ok(set) = RecordBatchDecoder::decode(&mut batch) else { break };
        if let Some(r) = set.records.iter().find(|r| r.offset >= want && !r.control) {
            return Answer::Record(r.offset, r.timestamp);
        }
    }
    last_control.map_or(Answer::Nothing, Answer::ControlUpTo)
}

/// A step that failed, with why (I/O or the protocol).
fn refused(step: String, e: impl std::fmt::Display) -> Error {
    Error::Refused { step, message: e.to_string() }
}

#[cfg(test)]
mod tests {
    use super::*;
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
        assert_eq!(first_record_from(b.clone(), 11), Answer::Record(11, 1100));
        assert_eq!(first_record_from(b.clone(), 5), Answer::Record(10, 1000), "the wanted one is gone");
        assert_eq!(first_record_from(b, 13), Answer::Nothing);
        let compressed = batch(&[(20, 2000, false), (21, 2100, false)], Compression::Lz4);
        assert_eq!(first_record_from(compressed, 21), Answer::Record(21, 2100));
    }

    #[test]
    fn markers_only_and_a_batch_in_part() {
        let marker = batch(&[(30, 3000, true)], Compression::None);
        assert_eq!(first_record_from(marker, 30), Answer::ControlUpTo(30));
        let full = batch(&[(40, 4000, false), (41, 4100, false), (42, 4200, false)], Compression::None);
        let head = full.slice(..70);
        // The first record: the header says it all.
        assert_eq!(first_record_from(head.clone(), 40), Answer::Record(40, 4000));
        assert_eq!(first_record_from(head.clone(), 39), Answer::Record(40, 4000), "gone: the next one");
        // One inside: the whole batch is needed.
        assert_eq!(first_record_from(head.clone(), 41), Answer::NeedBatch(full.len() as i32));
        assert_eq!(first_record_from(head, 43), Answer::Nothing);
        assert_eq!(first_record_from(full.slice(..20), 40), Answer::Nothing, "not even a header");
        // Whole: the records are read.
        assert_eq!(first_record_from(full.clone(), 41), Answer::Record(41, 4100));
        let two = [full.as_ref(), batch(&[(43, 4300, false)], Compression::Gzip).as_ref()].concat();
        assert_eq!(first_record_from(Bytes::from(two), 43), Answer::Record(43, 4300), "past a first batch");
    }
}
