//! Kafka's v2 record batches as a Fetch answer carries them, read without
//! copying: the first data record at or after an offset, from the batch
//! header where that suffices, else by walking the records (decoded when
//! compressed). Pure: bytes in, an [`Answer`] out; [`crate::FetchTimes`]
//! does the I/O. Nothing here trusts the bytes: a lying length or offset
//! ends the walk.

use kafka_protocol::records::RecordBatchDecoder;
use kshard_offsets::cursor::Cursor;

/// The size of a v2 batch's header, up to its first record.
pub(crate) const HEADER: usize = 61;

/// What a partition's records say of the first record at or after an offset.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Answer {
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
pub(crate) struct BatchHeader {
    pub(crate) base_offset: i64,
    /// The whole batch's size on the wire (its length field and the 12 bytes
    /// before it).
    pub(crate) size: i32,
    pub(crate) last_offset: i64,
    pub(crate) control: bool,
    /// Bits 0–2 of the attributes: none, gzip, snappy, lz4, zstd.
    pub(crate) codec: i16,
    compressed: bool,
    /// Written inside a transaction (attribute bit 4).
    pub(crate) transactional: bool,
    /// The producer that wrote the batch (−1: none).
    pub(crate) producer_id: i64,
    /// Its records, and whether they are all there: the log cleaner keeps a
    /// batch's base and last offsets and drops records in between (or all of
    /// them, keeping an empty batch for the producer's state).
    pub(crate) count: i32,
    holes: bool,
    /// The base timestamp is the cleaner's delete horizon, not the first
    /// record's time.
    delete_horizon: bool,
    /// The first record's timestamp, or every record's when the broker sets
    /// them (LogAppendTime).
    pub(crate) timestamp_ms: i64,
    pub(crate) log_append_time: bool,
}

impl BatchHeader {
    /// The header at the start of `bytes`, when it is all there and v2.
    pub(crate) fn parse(bytes: &[u8]) -> Option<BatchHeader> {
        let mut c = Cursor::new(bytes);
        let (base_offset, length) = (c.i64().ok()?, c.i32().ok()?);
        let _partition_leader_epoch = c.i32().ok()?;
        if c.i8().ok()? != 2 || bytes.len() < HEADER {
            return None;
        }
        let _crc = c.u32().ok()?;
        let attributes = c.i16().ok()?;
        let last_offset_delta = c.i32().ok()?;
        let (base_timestamp, max_timestamp) = (c.i64().ok()?, c.i64().ok()?);
        let producer_id = c.i64().ok()?;
        let _producer_epoch_and_base_sequence = c.array::<6>().ok()?;
        let count = c.i32().ok()?;
        let log_append_time = attributes & 0x08 != 0;
        let size = length.checked_add(12)?;
        // A batch is at least its header; a size below it would not move on.
        if size < HEADER as i32 || last_offset_delta < 0 || count < 0 {
            return None;
        }
        Some(BatchHeader {
            base_offset,
            size,
            last_offset: base_offset.checked_add(i64::from(last_offset_delta))?,
            control: attributes & 0x20 != 0,
            codec: attributes & 0x07,
            compressed: attributes & 0x07 != 0,
            transactional: attributes & 0x10 != 0,
            producer_id,
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
        let mut c = Cursor::new(batch);
        c.skip(HEADER).ok()?;
        for _ in 0..self.count {
            let length = usize::try_from(c.varlong().ok()?).ok()?;
            let mut record = c.split(length).ok()?;
            let _attributes = record.u8().ok()?;
            let timestamp_delta = record.varlong().ok()?;
            let offset = self.base_offset.checked_add(record.varlong().ok()?)?;
            if offset >= want {
                let ts = if self.log_append_time {
                    self.timestamp_ms
                } else {
                    self.timestamp_ms.checked_add(timestamp_delta)?
                };
                return Some(Answer::Record(offset, ts));
            }
        }
        Some(Answer::Nothing)
    }
}

/// What is read of a batch before any more of it is trusted: its base
/// offset, magic byte (see [`magic`]) and stored CRC-32C (of the bytes after
/// it). `None` for fewer bytes than that.
pub(crate) fn preamble(bytes: &[u8]) -> Option<(i64, u8, u32)> {
    let mut c = Cursor::new(bytes);
    let base_offset = c.i64().ok()?;
    let _length_and_partition_leader_epoch = c.array::<8>().ok()?;
    Some((base_offset, c.u8().ok()?, c.u32().ok()?))
}

/// A batch's magic byte, its format: 2 since Kafka 0.11 (0 and 1 are the
/// older message sets). `None` for fewer bytes than that.
pub(crate) fn magic(bytes: &[u8]) -> Option<u8> {
    let mut c = Cursor::new(bytes);
    c.skip(16).ok()?;
    c.u8().ok()
}

/// The first data record at or after `want` in `records` (a partition's
/// record batches as a Fetch response carries them).
pub(crate) fn first_record_from(mut records: &[u8], want: i64) -> Answer {
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
pub(crate) fn after_whole_batches(mut records: &[u8]) -> Option<i64> {
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
