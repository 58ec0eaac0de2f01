//! Kafka's v2 record batches as a Fetch answer carries them, read without
//! copying: the first data record at or after each offset wanted, from the
//! batch header where that suffices, else by walking the records once per
//! batch (decompressed as a capped stream, only as far as the wants need:
//! [`crate::wire::inflate`]). Pure: bytes in, an [`Answer`] per offset out;
//! [`crate::FetchTimes`] does the I/O. Nothing here trusts the bytes: a
//! lying length or offset ends the walk, and a batch that inflates past
//! [`WALKED_MOST`] is [`Answer::Unreadable`].

use std::io::Read;

use kshard_offsets::cursor::Cursor;

use crate::wire::inflate;

/// The size of a v2 batch's header, up to its first record.
pub(crate) const HEADER: usize = 61;

/// What a partition's records say of the first record at or after an offset.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Answer {
    /// That record: its offset and timestamp (ms).
    Record(i64, i64),
    /// No data record, only control records (transaction markers) up to this offset.
    ControlUpTo(i64),
    /// The batch holding the offset, of this many bytes, came only in part.
    NeedBatch(i32),
    /// Nothing usable (records before the offset only).
    Nothing,
    /// The batch holding the offset cannot be read: why (a codec's error,
    /// or records that inflate past [`WALKED_MOST`]).
    Unreadable(String),
}

/// The v2 record batch header: what [`first_records_from`] reads of a batch
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

    /// In this batch's records (`records`: its bytes after the header,
    /// decompressed as they are read), the first record at or after each of
    /// `wants`, into `found` (in the same order). Each record's length,
    /// timestamp delta and offset delta are read, the rest skipped unread;
    /// the walk stops once every want has its record.
    fn walk(&self, records: &mut dyn Read, wants: &[i64], found: &mut [Option<(i64, i64)>]) -> Walked {
        let mut left = wants.len();
        let mut records = Counted { inner: records, read: 0 };
        for _ in 0..self.count {
            if left == 0 {
                break;
            }
            let record = (|| -> std::io::Result<Option<(i64, i64, u64)>> {
                let Ok(length) = u64::try_from(records.varlong()?) else { return Ok(None) };
                let start = records.read;
                let mut attributes = [0u8; 1];
                records.read_exact(&mut attributes)?;
                let timestamp_delta = records.varlong()?;
                let offset_delta = records.varlong()?;
                let Some(offset) = self.base_offset.checked_add(offset_delta) else { return Ok(None) };
                let timestamp = if self.log_append_time {
                    self.timestamp_ms
                } else {
                    let Some(t) = self.timestamp_ms.checked_add(timestamp_delta) else { return Ok(None) };
                    t
                };
                let Some(rest) = length.checked_sub(records.read - start) else { return Ok(None) };
                Ok(Some((offset, timestamp, rest)))
            })();
            let (offset, timestamp, rest) = match record {
                Ok(Some(record)) => record,
                Ok(None) => return Walked::Cut,
                Err(e) => return Walked::ended(e),
            };
            for (want, slot) in wants.iter().zip(found.iter_mut()) {
                if slot.is_none() && *want <= offset {
                    *slot = Some((offset, timestamp));
                    left -= 1;
                }
            }
            if left > 0 {
                // The rest of the record (key, value, headers), unread.
                match std::io::copy(&mut (&mut records).take(rest), &mut std::io::sink()) {
                    Ok(n) if n == rest => {}
                    Ok(_) => return Walked::Cut,
                    Err(e) => return Walked::ended(e),
                }
            }
        }
        Walked::Done
    }
}

/// How [`BatchHeader::walk`] ended.
enum Walked {
    /// Every want answered, or every record read.
    Done,
    /// The bytes ended first (a batch cut short), or did not add up.
    Cut,
    /// The records could not be decompressed, or inflate past the cap.
    Unreadable(String),
}

impl Walked {
    fn ended(e: std::io::Error) -> Walked {
        match e.kind() {
            std::io::ErrorKind::UnexpectedEof => Walked::Cut,
            _ => Walked::Unreadable(inflate::why(e).to_string()),
        }
    }
}

/// A stream that counts what was read of it, and reads Kafka's zigzag
/// varlongs from it.
struct Counted<'a> {
    inner: &'a mut dyn Read,
    read: u64,
}

impl Read for Counted<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.read += n as u64;
        Ok(n)
    }
}

impl Counted<'_> {
    /// A zigzag varlong: at most 10 bytes.
    fn varlong(&mut self) -> std::io::Result<i64> {
        let mut value: u64 = 0;
        for i in 0..10 {
            let mut byte = [0u8; 1];
            self.read_exact(&mut byte)?;
            value |= u64::from(byte[0] & 0x7f) << (7 * i);
            if byte[0] & 0x80 == 0 {
                return Ok((value >> 1) as i64 ^ -((value & 1) as i64));
            }
        }
        Err(std::io::Error::new(std::io::ErrorKind::InvalidData, "a varlong over 10 bytes"))
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

/// The most of a batch's records decompressed to find the records wanted
/// in it: past this, their times are unknown ([`Answer::Unreadable`]).
pub(crate) const WALKED_MOST: usize = 256 * 1024 * 1024;

/// The first data record at or after each of `wants` in `records` (a
/// partition's record batches as a Fetch response carries them): one
/// answer per want, in their order. Each batch is read (decompressed, as
/// far as the wants in it need) at most once.
pub(crate) fn first_records_from(records: &[u8], wants: &[i64]) -> Vec<Answer> {
    first_records_within(records, wants, WALKED_MOST)
}

/// [`first_records_from`], decompressing at most `most` bytes of a batch.
fn first_records_within(mut records: &[u8], wants: &[i64], most: usize) -> Vec<Answer> {
    let mut answers: Vec<Option<Answer>> = wants.iter().map(|_| None).collect();
    let mut last_control: Vec<Option<i64>> = vec![None; wants.len()];
    while let Some(h) = BatchHeader::parse(records) {
        let complete = h.size as usize <= records.len();
        let (batch, rest) = records.split_at((h.size as usize).min(records.len()));
        records = rest;
        let open: Vec<usize> = (0..wants.len()).filter(|&i| answers[i].is_none()).collect();
        if open.is_empty() {
            break;
        }
        if h.control || h.count == 0 {
            for &i in open.iter().filter(|&&i| h.control && h.last_offset >= wants[i]) {
                last_control[i] = Some(h.last_offset);
            }
        } else {
            let mut inside = Vec::new();
            for i in open.into_iter().filter(|&i| h.last_offset >= wants[i]) {
                // The batch's first record is the one: its header says when
                // (unless the cleaner took records out of it, or set its
                // delete horizon).
                if h.base_offset >= wants[i] && !h.holes && !h.delete_horizon {
                    answers[i] = Some(Answer::Record(h.base_offset, h.timestamp_ms));
                } else {
                    inside.push(i);
                }
            }
            if !inside.is_empty() {
                let batch = Batch { header: &h, bytes: batch, complete, most };
                batch.answer(wants, &inside, &mut answers, &last_control);
            }
        }
        if !complete {
            break;
        }
    }
    answers
        .into_iter()
        .zip(last_control)
        .map(|(a, c)| a.unwrap_or(c.map_or(Answer::Nothing, Answer::ControlUpTo)))
        .collect()
}

/// A data batch read for the wants inside it.
struct Batch<'a> {
    header: &'a BatchHeader,
    /// Its bytes: all of them when `complete`.
    bytes: &'a [u8],
    complete: bool,
    /// The most of its records decompressed.
    most: usize,
}

impl Batch<'_> {
    /// Answers the wants `inside` (by index) by walking the records.
    fn answer(&self, wants: &[i64], inside: &[usize], answers: &mut [Option<Answer>], last_control: &[Option<i64>]) {
        let h = self.header;
        let mut answer_all = |answer: Answer| {
            for &i in inside {
                answers[i] = Some(answer.clone());
            }
        };
        // A compressed batch is read whole or not at all.
        if h.compressed && !self.complete {
            return answer_all(Answer::NeedBatch(h.size));
        }
        let mut stream = match inflate::records(h.codec, self.bytes.get(HEADER..).unwrap_or_default(), self.most) {
            Ok(stream) => stream,
            Err(e) => return answer_all(Answer::Unreadable(e.to_string())),
        };
        let here: Vec<i64> = inside.iter().map(|&i| wants[i]).collect();
        let mut found = vec![None; here.len()];
        let walked = h.walk(&mut stream, &here, &mut found);
        for (&i, found) in inside.iter().zip(found) {
            answers[i] = match (found, &walked) {
                (Some((offset, timestamp)), _) => Some(Answer::Record(offset, timestamp)),
                // Nothing at or after it here (records the cleaner removed): the next batch has it.
                (None, Walked::Done) => None,
                (None, Walked::Cut) if !self.complete => Some(Answer::NeedBatch(h.size)),
                // A whole batch that does not add up ends the search.
                (None, Walked::Cut) => Some(last_control[i].map_or(Answer::Nothing, Answer::ControlUpTo)),
                (None, Walked::Unreadable(why)) => Some(Answer::Unreadable(why.clone())),
            };
        }
    }
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

    /// [`first_records_from`] for one offset.
    fn first_record_from(records: &[u8], want: i64) -> Answer {
        first_records_from(records, &[want]).remove(0)
    }

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
        assert_eq!(first_record_from(cut, 42), Answer::Record(42, 4200), "its offset and time came");
        let cut = &full[..full.len() - 9];
        assert_eq!(first_record_from(cut, 42), Answer::NeedBatch(full.len() as i32), "its offset did not");
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

    /// A zstd batch: a record, one whose value is `zeros` zero bytes, and
    /// two more (offsets 60 to 63, times 6000 to 6300).
    fn bomb(zeros: usize) -> Bytes {
        let zero = Bytes::from(vec![0u8; zeros]);
        let records: Vec<Record> = (0..4)
            .map(|i| Record {
                transactional: false,
                control: false,
                partition_leader_epoch: 0,
                producer_id: -1,
                producer_epoch: -1,
                timestamp_type: TimestampType::Creation,
                offset: 60 + i,
                sequence: 60 + i as i32,
                timestamp: 6000 + 100 * i,
                key: None,
                value: Some(if i == 1 { zero.clone() } else { Bytes::from_static(b"v") }),
                headers: Default::default(),
                delete_horizon: false,
            })
            .collect();
        let mut buf = BytesMut::new();
        let options = RecordEncodeOptions { version: 2, compression: Compression::Zstd };
        RecordBatchEncoder::encode(&mut buf, &records, &options).expect("encode");
        buf.freeze()
    }

    #[test]
    fn every_want_of_a_batch_is_answered_in_one_walk() {
        let b = bomb(10);
        let answers = first_records_from(&b, &[63, 61, 62, 5, 64]);
        assert_eq!(
            answers,
            [
                Answer::Record(63, 6300),
                Answer::Record(61, 6100),
                Answer::Record(62, 6200),
                Answer::Record(60, 6000),
                Answer::Nothing,
            ]
        );
    }

    #[test]
    fn a_batch_that_inflates_past_the_cap_is_read_up_to_the_want_or_is_unreadable() {
        let b = bomb(8 << 20);
        assert!(b.len() < 4096, "8 MiB of zeros in {} bytes", b.len());
        let most = 1 << 20;
        // The offset committed at the large record: its time comes before its value.
        assert_eq!(first_records_within(&b, &[61], most), [Answer::Record(61, 6100)]);
        // One past it: never inflated whole.
        let past = first_records_within(&b, &[61, 62], most);
        assert_eq!(past[0], Answer::Record(61, 6100));
        assert!(matches!(&past[1], Answer::Unreadable(why) if why.contains("inflate past 1048576")), "{past:?}");
        // Under a cap it fits: read.
        assert_eq!(first_records_within(&b, &[62], 16 << 20), [Answer::Record(62, 6200)]);
    }
}
