//! A partition's records encoded as they are published, in Kafka's v2 record
//! format, so that a transaction holds each output as the bytes it goes out
//! as (its key, value and headers and a few bytes more) instead of a record
//! with allocations of its own, copied again into a request when sent. The
//! producer that sends the batch writes its header (producer id, epoch,
//! sequence, CRC-32C) in the room left for it: no copy. Pure.

use bytes::Bytes;

use crate::error::{Error, Result};
use crate::wire::produce::{Identity, OutRecord};
use crate::wire::record_batch::HEADER;
use crate::wire::records::{Headers, PartitionRecords};

/// Records for one partition, in order, encoded as one uncompressed record
/// batch will carry them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutBatch {
    /// [`HEADER`] bytes for the batch header, then the records.
    buf: Vec<u8>,
    records: i32,
    /// The first record's timestamp (the batch's base) and the latest.
    first_ms: i64,
    max_ms: i64,
}

/// Where a batch was, to go back to it ([`OutBatch::truncate`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchMark {
    len: usize,
    records: i32,
    first_ms: i64,
    max_ms: i64,
}

impl Default for OutBatch {
    fn default() -> Self {
        OutBatch { buf: vec![0; HEADER], records: 0, first_ms: 0, max_ms: 0 }
    }
}

impl OutBatch {
    /// A batch of `records`.
    pub fn of(records: &[OutRecord]) -> Self {
        let mut batch = OutBatch::default();
        for r in records {
            batch.push(r);
        }
        batch
    }

    /// Appends `record`.
    pub fn push(&mut self, record: &OutRecord) {
        if self.records == 0 {
            (self.first_ms, self.max_ms) = (record.timestamp_ms, record.timestamp_ms);
        }
        self.max_ms = self.max_ms.max(record.timestamp_ms);
        let delta = record.timestamp_ms.wrapping_sub(self.first_ms);
        let buf = &mut self.buf;
        put_varint(buf, length(record_body_len(record, delta, self.records)));
        buf.push(0); // attributes: none are used
        put_varlong(buf, delta);
        put_varint(buf, self.records);
        put_bytes(buf, record.key.as_deref());
        put_bytes(buf, record.value.as_deref());
        put_varint(buf, length(record.headers.len()));
        for (name, value) in &record.headers {
            put_bytes(buf, Some(name.as_bytes()));
            put_bytes(buf, value.as_deref());
        }
        self.records = self.records.saturating_add(1);
    }

    /// The bytes `record` would add to a batch, at most (its timestamp and
    /// offset deltas taken at their longest).
    pub fn encoded_len(record: &OutRecord) -> usize {
        let body = record_body_len(record, i64::MIN, i32::MIN);
        varint_len(length(body)) + body
    }

    /// Records in the batch.
    pub fn len(&self) -> usize {
        usize::try_from(self.records).unwrap_or(0)
    }

    /// Whether it has no record.
    pub fn is_empty(&self) -> bool {
        self.records == 0
    }

    /// Its size as sent, header included.
    pub fn bytes(&self) -> usize {
        self.buf.len()
    }

    /// Where it is now.
    pub fn mark(&self) -> BatchMark {
        BatchMark { len: self.buf.len(), records: self.records, first_ms: self.first_ms, max_ms: self.max_ms }
    }

    /// Back to `mark` (this batch's, taken since its last truncate), the
    /// records pushed since dropped. A mark past where the batch is now
    /// (another batch's, or one a truncate went back past) changes nothing.
    pub fn truncate(&mut self, mark: BatchMark) {
        if mark.len > self.buf.len() || mark.records > self.records || mark.len < HEADER {
            return;
        }
        self.buf.truncate(mark.len);
        (self.records, self.first_ms, self.max_ms) = (mark.records, mark.first_ms, mark.max_ms);
    }

    /// The batch as `producer` sends it, its first record numbered
    /// `sequence`: the header written in front of the records.
    pub(crate) fn seal(mut self, producer: Identity, sequence: i32, transactional: bool) -> Bytes {
        let batch_length = length(self.buf.len() - 12);
        let attributes: i16 = if transactional { 0x10 } else { 0 };
        let h = &mut self.buf[..HEADER];
        h[0..8].copy_from_slice(&0i64.to_be_bytes()); // base offset: the broker's to set
        h[8..12].copy_from_slice(&batch_length.to_be_bytes());
        h[12..16].copy_from_slice(&(-1i32).to_be_bytes()); // partition leader epoch
        h[16] = 2; // magic
        h[21..23].copy_from_slice(&attributes.to_be_bytes());
        h[23..27].copy_from_slice(&(self.records - 1).max(0).to_be_bytes());
        h[27..35].copy_from_slice(&self.first_ms.to_be_bytes());
        h[35..43].copy_from_slice(&self.max_ms.to_be_bytes());
        h[43..51].copy_from_slice(&producer.id.to_be_bytes());
        h[51..53].copy_from_slice(&producer.epoch.to_be_bytes());
        h[53..57].copy_from_slice(&sequence.to_be_bytes());
        h[57..61].copy_from_slice(&self.records.to_be_bytes());
        let crc = crc32c::crc32c(&self.buf[21..]);
        self.buf[17..21].copy_from_slice(&crc.to_be_bytes());
        Bytes::from(self.buf)
    }

    /// Its records, read back (for writers that take records one by one,
    /// and for tests).
    pub fn records(&self) -> Result<Vec<OutRecord>> {
        let sealed = self.clone().seal(Identity { id: -1, epoch: -1 }, -1, false);
        let mut walk = PartitionRecords::new(sealed, 0, false, Vec::new());
        let mut out = Vec::with_capacity(self.len());
        let corrupt = |what: String| Error::Refused { step: "reading a batch back".into(), message: what };
        while let Some(r) = walk.next_record().map_err(|e| corrupt(e.what))? {
            let buffer = walk.buffer();
            let bytes = |range: Option<std::ops::Range<usize>>| range.map(|r| buffer.slice(r));
            let headers = Headers::read(&buffer[r.headers.clone()])
                .map(|(name, value)| (name.to_owned(), value.map(Bytes::copy_from_slice)))
                .collect();
            out.push(OutRecord { key: bytes(r.key), value: bytes(r.value), headers, timestamp_ms: r.timestamp_ms });
        }
        if out.len() != self.len() {
            return Err(corrupt(format!("{} of {} records read back", out.len(), self.len())));
        }
        Ok(out)
    }
}

/// A record's length after its length field.
fn record_body_len(record: &OutRecord, timestamp_delta: i64, offset_delta: i32) -> usize {
    let headers: usize =
        record.headers.iter().map(|(name, value)| bytes_len(Some(name.as_bytes())) + bytes_len(value.as_deref())).sum();
    1 + varlong_len(timestamp_delta)
        + varint_len(offset_delta)
        + bytes_len(record.key.as_deref())
        + bytes_len(record.value.as_deref())
        + varint_len(length(record.headers.len()))
        + headers
}

/// A length as the record format writes it (no record here nears 2 GiB: a
/// transaction's outputs are held in memory, and capped).
fn length(n: usize) -> i32 {
    i32::try_from(n).unwrap_or(i32::MAX)
}

/// A length-prefixed byte string's size (`None`: null, length −1).
fn bytes_len(bytes: Option<&[u8]>) -> usize {
    bytes.map_or(varint_len(-1), |b| varint_len(length(b.len())) + b.len())
}

fn put_bytes(buf: &mut Vec<u8>, bytes: Option<&[u8]>) {
    match bytes {
        Some(b) => {
            put_varint(buf, length(b.len()));
            buf.extend_from_slice(b);
        }
        None => put_varint(buf, -1),
    }
}

fn zigzag32(v: i32) -> u64 {
    u64::from(((v << 1) ^ (v >> 31)).cast_unsigned())
}

fn zigzag64(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)).cast_unsigned()
}

fn unsigned_len(mut v: u64) -> usize {
    let mut n = 1;
    while v >= 0x80 {
        v >>= 7;
        n += 1;
    }
    n
}

fn varint_len(v: i32) -> usize {
    unsigned_len(zigzag32(v))
}

fn varlong_len(v: i64) -> usize {
    unsigned_len(zigzag64(v))
}

fn put_unsigned(buf: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        buf.push((v as u8) | 0x80);
        v >>= 7;
    }
    buf.push(v as u8);
}

fn put_varint(buf: &mut Vec<u8>, v: i32) {
    put_unsigned(buf, zigzag32(v));
}

fn put_varlong(buf: &mut Vec<u8>, v: i64) {
    put_unsigned(buf, zigzag64(v));
}

#[cfg(test)]
mod tests;
