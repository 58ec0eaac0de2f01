//! The records of one partition's answer to a Fetch, in order, read in the
//! answer's own buffer: each v2 batch's CRC-32C checked, compressed batches
//! (gzip, snappy, lz4, zstd) decompressed into a buffer of their own, control
//! batches (transaction markers) and, when reading committed records only,
//! the batches of aborted transactions left out, as Kafka's own consumer
//! does with the aborted-transaction list a Fetch answer carries. When
//! reading every record instead, each record of a transaction names its
//! producer and each COMMIT or ABORT marker is yielded, so that the caller
//! can set open transactions aside itself. Pure: bytes in, records out;
//! [`crate::wire::fetcher`] does the I/O.
//!
//! Nothing here trusts the bytes: every length is checked against what is
//! left before it is used, a cut batch at the end (a broker fills an answer
//! up to its size) ends the walk without an error, and anything else that
//! does not add up is a [`Corrupt`] naming the offset of its batch; the walk
//! goes on with the next batch where the bad one says it ends (a batch whose
//! header cannot be read ends the walk).

use std::collections::HashSet;
use std::ops::Range;

use bytes::Bytes;

use kshard_offsets::cursor::{Cursor, CursorError};

use crate::wire::record_batch::{BatchHeader, HEADER, preamble};

/// A batch that does not add up: where, and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the record batch at offset {offset}: {what}")]
pub(crate) struct Corrupt {
    /// The batch's base offset (or the offset read was at).
    pub(crate) offset: i64,
    /// What is wrong.
    pub(crate) what: String,
}

/// One record: its offset and timestamp, and where its key and value are in
/// [`PartitionRecords::buffer`] (`None`: null).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RecordAt {
    pub(crate) offset: i64,
    pub(crate) timestamp_ms: i64,
    /// The broker set the timestamp when it appended the batch (LogAppendTime).
    pub(crate) log_append_time: bool,
    pub(crate) key: Option<Range<usize>>,
    pub(crate) value: Option<Range<usize>>,
    /// The headers section (a count, then each header), read when asked.
    pub(crate) headers: Range<usize>,
    /// Its part in a transaction, when reading every record (never when
    /// reading committed records only).
    pub(crate) transactional: Option<Transactional>,
}

/// A record's part in a producer's transaction, as a reader of every record
/// (not only committed ones) sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transactional {
    /// A record of the producer's open transaction: it counts once the
    /// producer's COMMIT marker comes, never if its ABORT marker does.
    Record {
        /// The producer.
        producer_id: i64,
    },
    /// The marker that ends the producer's transaction (a control record:
    /// its key and value are the marker's own).
    Marker {
        /// The producer.
        producer_id: i64,
        /// COMMIT (true) or ABORT.
        committed: bool,
    },
}

/// A record's headers, read in place from its headers section: each
/// header's name and value (`None`: null), in order. A section that does
/// not add up ends the walk where it stops adding up (its batch's CRC
/// matched, so only a writer's bug makes one).
pub(crate) struct Headers<'a> {
    section: Option<Cursor<'a>>,
    left: u32,
}

impl<'a> Headers<'a> {
    /// The headers in `section` (a varint count, then each header).
    pub(crate) fn read(section: &'a [u8]) -> Self {
        let mut c = Cursor::new(section);
        match c.varint() {
            Ok(n) if n > 0 => Headers { section: Some(c), left: n.unsigned_abs() },
            _ => Headers { section: None, left: 0 },
        }
    }
}

impl<'a> Iterator for Headers<'a> {
    type Item = (&'a str, Option<&'a [u8]>);

    fn next(&mut self) -> Option<Self::Item> {
        if self.left == 0 {
            return None;
        }
        self.left -= 1;
        let c = self.section.as_mut()?;
        let header = (|| {
            let name_len = usize::try_from(c.varint().ok()?).ok()?;
            let name = c.utf8(name_len).ok()?;
            let value = match c.varint().ok()? {
                ..0 => None,
                n => Some(c.take(usize::try_from(n).ok()?).ok()?),
            };
            Some((name, value))
        })();
        if header.is_none() {
            self.left = 0;
        }
        header
    }
}

/// A walk over the batches of one partition's answer.
pub(crate) struct PartitionRecords {
    /// The partition's record bytes, borrowed (reference-counted) from the
    /// answer's frame.
    batches: Bytes,
    /// Where the next batch starts in `batches`.
    at: usize,
    /// Records before this offset were delivered before (a batch starts
    /// before the offset asked for): skipped.
    from: i64,
    /// Read committed records only: leave out aborted transactions.
    committed_only: bool,
    /// The answer's aborted transactions, (producer id, first offset),
    /// sorted by first offset, not reached yet.
    aborted: Vec<(i64, i64)>,
    /// Producers whose transaction in progress was aborted.
    aborting: HashSet<i64>,
    /// The batch being read.
    current: Option<BatchCursor>,
    /// The most a compressed batch's records may inflate to.
    inflated_most: usize,
}

/// The records of one batch, as yet unread.
struct BatchCursor {
    /// The records' bytes when the batch was compressed: a decompressed
    /// copy. `None`: they are read in place in the answer's buffer, with
    /// no reference taken per batch.
    inflated: Option<Bytes>,
    /// Where the next record starts, and where the batch's records end,
    /// in the buffer they are read in.
    at: usize,
    end: usize,
    left: i32,
    base_offset: i64,
    timestamp_ms: i64,
    log_append_time: bool,
    /// The batch's transaction, when its records are to say so.
    producer: Option<i64>,
    /// A control batch (its records are transaction markers).
    control: bool,
}

impl PartitionRecords {
    /// A walk over `batches` that yields records from offset `from` on.
    /// `aborted` is the answer's aborted-transaction list (producer id,
    /// first offset), used when `committed_only`.
    pub(crate) fn new(batches: Bytes, from: i64, committed_only: bool, mut aborted: Vec<(i64, i64)>) -> Self {
        aborted.sort_unstable_by_key(|&(_, first)| std::cmp::Reverse(first));
        PartitionRecords {
            batches,
            at: 0,
            from,
            committed_only,
            aborted,
            aborting: HashSet::new(),
            current: None,
            inflated_most: INFLATED_MOST,
        }
    }

    /// The buffer the last record's key and value ranges point into.
    pub(crate) fn buffer(&self) -> &Bytes {
        match &self.current {
            Some(BatchCursor { inflated: Some(buffer), .. }) => buffer,
            _ => &self.batches,
        }
    }

    /// The next record, `None` once the batches (whole ones) are read.
    pub(crate) fn next_record(&mut self) -> Result<Option<RecordAt>, Corrupt> {
        loop {
            if let Some(cursor) = &mut self.current {
                match cursor.next(&self.batches) {
                    Ok(Some(r)) if r.offset < self.from => continue,
                    // A control record that is no transaction marker.
                    Ok(Some(RecordAt { transactional: None, .. })) if cursor.control => continue,
                    Ok(Some(r)) => return Ok(Some(r)),
                    Ok(None) => self.current = None,
                    // The rest of this batch is lost; the next batches are read.
                    Err(e) => {
                        self.current = None;
                        return Err(e);
                    }
                }
            }
            if !self.next_batch()? {
                return Ok(None);
            }
        }
    }

    /// Moves to the next batch with records to yield; false at the end.
    fn next_batch(&mut self) -> Result<bool, Corrupt> {
        loop {
            let rest = &self.batches[self.at..];
            let Some((offset, magic, stored)) = preamble(rest).filter(|_| rest.len() >= HEADER) else {
                return Ok(false);
            };
            let corrupt = |what: String| Corrupt { offset, what };
            if magic != 2 {
                // Nothing after it can be trusted to start where it says.
                self.at = self.batches.len();
                return Err(corrupt(format!(
                    "message format v{magic} (kshard's reader reads v2, Kafka's format since 0.11; \
                     set reader: librdkafka for older data)"
                )));
            }
            let Some(h) = BatchHeader::parse(rest) else {
                self.at = self.batches.len();
                return Err(corrupt("a header that does not add up".into()));
            };
            let size = usize::try_from(h.size).map_err(|_| corrupt("a negative size".into()))?;
            if size > rest.len() {
                // Cut at the end of the answer: the next Fetch starts there.
                return Ok(false);
            }
            let start = self.at;
            self.at += size;
            let computed = crc32c::crc32c(&rest[21..size]);
            if stored != computed {
                return Err(corrupt(format!("CRC-32C {computed:08x}, the batch says {stored:08x}")));
            }
            // The aborted transactions and their markers are followed
            // through every batch, also those before `from`: the answer's
            // list is for the offset fetched, which may be before it.
            if self.committed_only && h.producer_id >= 0 {
                while let Some(&(producer, first)) = self.aborted.last() {
                    if first > h.last_offset {
                        break;
                    }
                    self.aborting.insert(producer);
                    self.aborted.pop();
                }
                if h.control {
                    if is_abort_marker(&self.batches, start + HEADER..start + size) {
                        self.aborting.remove(&h.producer_id);
                    }
                    continue;
                }
                if h.transactional && self.aborting.contains(&h.producer_id) {
                    continue;
                }
            }
            if h.last_offset < self.from || (h.control && self.committed_only) || h.count == 0 {
                continue;
            }
            let records = start + HEADER..start + size;
            let inflated = match h.codec {
                0 => None,
                codec => Some(inflate(codec, &self.batches[records.clone()], self.inflated_most).map_err(corrupt)?),
            };
            let (at, end) = inflated.as_ref().map_or((records.start, records.end), |b| (0, b.len()));
            self.current = Some(BatchCursor {
                inflated,
                at,
                end,
                left: h.count,
                base_offset: h.base_offset,
                timestamp_ms: h.timestamp_ms,
                log_append_time: h.log_append_time,
                producer: (h.transactional && !self.committed_only).then_some(h.producer_id),
                control: h.control,
            });
            return Ok(true);
        }
    }
}

/// Whether a control batch, its records at `records` in `batches`, holds
/// an ABORT marker: its one record's key is `version int16, type int16`,
/// type 0 (COMMIT is 1).
fn is_abort_marker(batches: &Bytes, records: Range<usize>) -> bool {
    let mut cursor = BatchCursor {
        inflated: None,
        at: records.start,
        end: records.end,
        left: 1,
        base_offset: 0,
        timestamp_ms: 0,
        log_append_time: false,
        producer: Some(0),
        control: true,
    };
    matches!(
        cursor.next(batches),
        Ok(Some(RecordAt { transactional: Some(Transactional::Marker { committed: false, .. }), .. }))
    )
}

/// The marker a control record's key names (`version int16, type int16`:
/// type 0 ABORT, 1 COMMIT; other control records are none).
fn marker_of(key: Option<&[u8]>, producer_id: i64) -> Option<Transactional> {
    match key? {
        [_, _, 0, 0, ..] => Some(Transactional::Marker { producer_id, committed: false }),
        [_, _, 0, 1, ..] => Some(Transactional::Marker { producer_id, committed: true }),
        _ => None,
    }
}

/// The most a compressed batch's records may inflate to: twice the largest
/// batch the reader fetches (128 MiB), so a legitimate, well-compressed
/// batch is read. A batch past it is skipped as [`Corrupt`] (counted and
/// logged by the reader's caller), never held whole. Kafka writes
/// `__consumer_offsets` uncompressed, and clients cannot write to it.
pub(crate) const INFLATED_MOST: usize = 256 * 1024 * 1024;

/// The records' bytes of a batch compressed with `codec` (not 0: none),
/// inflated into a buffer of their own of at most `most` bytes.
fn inflate(codec: i16, records: &[u8], most: usize) -> Result<Bytes, String> {
    crate::wire::inflate::inflate(codec, records, most).map(Bytes::from).map_err(|e| e.to_string())
}

impl BatchCursor {
    /// The next record of the batch: length, attributes, timestamp delta,
    /// offset delta, key, value, headers (kept as a range, read when asked).
    /// The records are read in `batches` unless the batch was inflated.
    fn next(&mut self, batches: &Bytes) -> Result<Option<RecordAt>, Corrupt> {
        if self.left <= 0 {
            return Ok(None);
        }
        self.left -= 1;
        let corrupt = |what: &str| Corrupt { offset: self.base_offset, what: format!("a record: {what}") };
        // Inside the record, every read that runs short runs past its end.
        let within = |e: CursorError| match e {
            CursorError::VarintOverflow { .. } => corrupt("a varint over 10 bytes"),
            _ => corrupt("past the record"),
        };
        let buf = &self.inflated.as_ref().unwrap_or(batches)[..self.end];
        let mut batch = Cursor::resume(buf, self.at);
        let length = batch.varlong().map_err(|_| corrupt("a varint cut"))?;
        let length = usize::try_from(length).map_err(|_| corrupt("a negative length"))?;
        let mut record = batch.split(length).map_err(|_| corrupt("past the batch"))?;
        let _attributes = record.u8().map_err(within)?;
        let timestamp_delta = record.varlong().map_err(within)?;
        let offset_delta = record.varlong().map_err(within)?;
        let mut bytes = || -> Result<Option<Range<usize>>, Corrupt> {
            match record.varlong().map_err(within)? {
                ..0 => Ok(None),
                n => {
                    let n = usize::try_from(n).map_err(|_| corrupt("a length"))?;
                    record.take_range(n).map(Some).map_err(within)
                }
            }
        };
        let key = bytes()?;
        let value = bytes()?;
        let headers = record.take_range(record.remaining()).map_err(within)?;
        self.at = batch.position();
        let offset = self.base_offset.checked_add(offset_delta).ok_or_else(|| corrupt("an offset past i64"))?;
        let timestamp_ms = if self.log_append_time {
            self.timestamp_ms
        } else {
            self.timestamp_ms.checked_add(timestamp_delta).ok_or_else(|| corrupt("a timestamp past i64"))?
        };
        let transactional = match self.producer {
            Some(producer_id) if self.control => marker_of(key.clone().and_then(|k| buf.get(k)), producer_id),
            Some(producer_id) => Some(Transactional::Record { producer_id }),
            None => None,
        };
        let log_append_time = self.log_append_time;
        Ok(Some(RecordAt { offset, timestamp_ms, log_append_time, key, value, headers, transactional }))
    }
}

#[cfg(test)]
pub(crate) mod tests;
