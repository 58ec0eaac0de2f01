//! One checked, big-endian, zero-copy cursor over bytes from outside the
//! process: Kafka's wire (the `__consumer_offsets` codec, Fetch answers and
//! record batches), the recovery log's records and the stores' keys.
//!
//! It reads fixed-size integers (i8 to u64, big-endian), fixed-size arrays,
//! sub-slices, Kafka's unsigned varints (the flexible versions' lengths) and
//! zigzag varints and varlongs (the record format's), and length-prefixed
//! bytes and strings (int16 and int32 prefixes with −1 for null, compact
//! ones with `N + 1` and 0 for null). Every read either moves past what it
//! read or fails with a [`CursorError`] saying what ran short or was
//! malformed and at which byte (counted from the start of the buffer), and
//! leaves the cursor where the failed field starts or where it ran short.
//! Nothing panics and nothing is allocated here: a length read from the
//! bytes is checked against what remains before it is used. What a field
//! means, and the error its layer reports, belong to the caller.

use std::ops::Range;

/// What ran short or was malformed, at which byte of the cursor's buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum CursorError {
    /// The bytes ended before the field did.
    #[error("at byte {at}: needs {needed} bytes but only {remaining} remain")]
    Short {
        /// Where the read that ran short was (for a varint: its cut byte).
        at: usize,
        /// Bytes the read needs.
        needed: usize,
        /// Bytes left.
        remaining: usize,
    },
    /// A varint longer than its type allows (5 bytes for 32 bits, 10 for 64),
    /// or whose last byte carries bits past the type.
    #[error("at byte {at}: varint overflows {bits} bits")]
    VarintOverflow {
        /// Where the varint starts.
        at: usize,
        /// The width of the type read.
        bits: u32,
    },
    /// A length prefix below −1 (or, compact, past `usize`).
    #[error("at byte {at}: invalid length {len}")]
    InvalidLength {
        /// Where the prefix starts.
        at: usize,
        /// The length read.
        len: i64,
    },
    /// String bytes that are not UTF-8.
    #[error("at byte {at}: string is not valid UTF-8")]
    InvalidUtf8 {
        /// Where the string's bytes start (after its length prefix).
        at: usize,
    },
}

impl CursorError {
    /// The byte offset the error names.
    #[inline]
    pub fn at(&self) -> usize {
        match *self {
            CursorError::Short { at, .. }
            | CursorError::VarintOverflow { at, .. }
            | CursorError::InvalidLength { at, .. }
            | CursorError::InvalidUtf8 { at } => at,
        }
    }
}

/// A read's result.
pub type Result<T> = std::result::Result<T, CursorError>;

/// One checked big-endian read a type, named for it.
macro_rules! big_endian {
    ($($t:ident),*) => {$(
        #[doc = concat!("A big-endian ", stringify!($t), ".")]
        #[inline]
        pub fn $t(&mut self) -> Result<$t> {
            self.array().map($t::from_be_bytes)
        }
    )*};
}

/// A position in a borrowed buffer; reads move it forward.
#[derive(Debug, Clone)]
pub struct Cursor<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    /// A cursor at the start of `buf`.
    #[inline]
    pub const fn new(buf: &'a [u8]) -> Self {
        Cursor { buf, pos: 0 }
    }

    /// A cursor over `buf` that goes on from `pos` (where an earlier cursor
    /// over the same bytes stopped); a `pos` past the end is the end.
    #[inline]
    pub fn resume(buf: &'a [u8], pos: usize) -> Self {
        Cursor { buf, pos: pos.min(buf.len()) }
    }

    /// Bytes read so far (from the start of the buffer).
    #[inline]
    pub fn position(&self) -> usize {
        self.pos
    }

    /// Bytes left to read.
    #[inline]
    pub fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }

    /// Whether every byte was read.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.pos == self.buf.len()
    }

    /// The bytes not read yet (the cursor does not move).
    #[inline]
    pub fn rest(&self) -> &'a [u8] {
        &self.buf[self.pos..]
    }

    #[inline]
    fn short(&self, needed: usize) -> CursorError {
        CursorError::Short { at: self.pos, needed, remaining: self.remaining() }
    }

    /// The next `n` bytes.
    #[inline]
    pub fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        match self.buf.get(self.pos..).and_then(|rest| rest.get(..n)) {
            Some(out) => {
                self.pos += n;
                Ok(out)
            }
            None => Err(self.short(n)),
        }
    }

    /// Moves past the next `n` bytes.
    #[inline]
    pub fn skip(&mut self, n: usize) -> Result<()> {
        self.take(n).map(|_| ())
    }

    /// Moves past the next `n` bytes and says where they are in the buffer.
    #[inline]
    pub fn take_range(&mut self, n: usize) -> Result<Range<usize>> {
        let start = self.pos;
        self.skip(n)?;
        Ok(start..self.pos)
    }

    /// The next `n` bytes as a cursor of their own, which counts positions
    /// from the same start as this one (so its errors name bytes of the
    /// whole buffer); this one moves past them.
    #[inline]
    pub fn split(&mut self, n: usize) -> Result<Cursor<'a>> {
        let start = self.pos;
        let taken = self.take(n)?;
        Ok(Cursor { buf: &self.buf[..start + taken.len()], pos: start })
    }

    /// The next `N` bytes as an array.
    #[inline]
    pub fn array<const N: usize>(&mut self) -> Result<[u8; N]> {
        match self.buf.get(self.pos..).and_then(<[u8]>::first_chunk::<N>) {
            Some(out) => {
                self.pos += N;
                Ok(*out)
            }
            None => Err(self.short(N)),
        }
    }

    /// A byte.
    #[inline]
    pub fn u8(&mut self) -> Result<u8> {
        match self.buf.get(self.pos) {
            Some(&b) => {
                self.pos += 1;
                Ok(b)
            }
            None => Err(self.short(1)),
        }
    }

    /// A signed byte.
    #[inline]
    pub fn i8(&mut self) -> Result<i8> {
        self.u8().map(|b| b as i8)
    }

    big_endian! { u16, i16, u32, i32, u64, i64 }

    /// An unsigned varint of at most `bits` (32 or 64) bits: 7 bits a byte,
    /// least significant first, the high bit set on every byte but the last.
    #[inline]
    fn unsigned_varint(&mut self, bits: u32) -> Result<u64> {
        // One byte: most lengths, counts and deltas.
        if let Some(&b) = self.buf.get(self.pos)
            && b < 0x80
        {
            self.pos += 1;
            return Ok(u64::from(b));
        }
        self.long_varint(bits)
    }

    #[cold]
    fn long_varint(&mut self, bits: u32) -> Result<u64> {
        let start = self.pos;
        let mut value = 0u64;
        let mut shift = 0;
        loop {
            let b = self.u8()?;
            // The last byte a type allows may only carry the bits left.
            if shift + 7 > bits && u32::from(b) >> (bits - shift) != 0 {
                self.pos = start;
                return Err(CursorError::VarintOverflow { at: start, bits });
            }
            value |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                return Ok(value);
            }
            shift += 7;
        }
    }

    /// An unsigned varint of at most 32 bits (Kafka's `UNSIGNED_VARINT`:
    /// flexible versions' lengths, counts and tags).
    #[inline]
    pub fn uvarint(&mut self) -> Result<u32> {
        self.unsigned_varint(32).map(|v| v as u32)
    }

    /// An unsigned varint of at most 64 bits.
    #[inline]
    pub fn uvarlong(&mut self) -> Result<u64> {
        self.unsigned_varint(64)
    }

    /// A zigzag varint of 32 bits (Kafka's `VARINT`: the record format's).
    #[inline]
    pub fn varint(&mut self) -> Result<i32> {
        self.uvarint().map(|v| ((v >> 1) as i32) ^ -((v & 1) as i32))
    }

    /// A zigzag varint of 64 bits (Kafka's `VARLONG`).
    #[inline]
    pub fn varlong(&mut self) -> Result<i64> {
        self.uvarlong().map(|v| ((v >> 1) as i64) ^ -((v & 1) as i64))
    }

    /// A length read by `prefix` (which returns it as i64): `None` for −1
    /// (null), an error below it. Not checked against what remains.
    #[inline]
    fn length(&mut self, prefix: impl FnOnce(&mut Self) -> Result<i64>) -> Result<Option<usize>> {
        let start = self.pos;
        match prefix(self)? {
            -1 => Ok(None),
            len => usize::try_from(len).map(Some).map_err(|_| {
                self.pos = start;
                CursorError::InvalidLength { at: start, len }
            }),
        }
    }

    /// An int16 length (`STRING`'s): `None` for −1, an error below it.
    #[inline]
    pub fn length16(&mut self) -> Result<Option<usize>> {
        self.length(|c| c.i16().map(i64::from))
    }

    /// An int32 length or count (`BYTES`' and `ARRAY`'s): `None` for −1,
    /// an error below it.
    #[inline]
    pub fn length32(&mut self) -> Result<Option<usize>> {
        self.length(|c| c.i32().map(i64::from))
    }

    /// A compact length or count (an unsigned varint of `N + 1`): `None`
    /// for 0 (null).
    #[inline]
    pub fn compact_length(&mut self) -> Result<Option<usize>> {
        self.length(|c| c.uvarint().map(|n| i64::from(n) - 1))
    }

    /// Checks that `count` items of at least `min_size` bytes each can fit
    /// in what remains (before anything is allocated for them), and returns
    /// `count`.
    #[inline]
    pub fn fits(&self, count: usize, min_size: usize) -> Result<usize> {
        let needed = count.saturating_mul(min_size);
        if needed > self.remaining() { Err(self.short(needed)) } else { Ok(count) }
    }

    /// The bytes after a length: `None` for null.
    #[inline]
    fn prefixed(&mut self, len: Option<usize>) -> Result<Option<&'a [u8]>> {
        len.map(|n| self.take(n)).transpose()
    }

    /// Bytes after an int16 length; `None` for null.
    #[inline]
    pub fn bytes16(&mut self) -> Result<Option<&'a [u8]>> {
        let len = self.length16()?;
        self.prefixed(len)
    }

    /// Bytes after an int32 length (`BYTES`); `None` for null.
    #[inline]
    pub fn bytes32(&mut self) -> Result<Option<&'a [u8]>> {
        let len = self.length32()?;
        self.prefixed(len)
    }

    /// Bytes after a compact length (`COMPACT_BYTES`); `None` for null.
    #[inline]
    pub fn compact_bytes(&mut self) -> Result<Option<&'a [u8]>> {
        let len = self.compact_length()?;
        self.prefixed(len)
    }

    /// The next `n` bytes as UTF-8.
    #[inline]
    pub fn utf8(&mut self, n: usize) -> Result<&'a str> {
        let at = self.pos;
        let bytes = self.take(n)?;
        std::str::from_utf8(bytes).map_err(|_| {
            self.pos = at;
            CursorError::InvalidUtf8 { at }
        })
    }

    /// A string after an int16 length (`STRING`); `None` for null.
    #[inline]
    pub fn str16(&mut self) -> Result<Option<&'a str>> {
        let len = self.length16()?;
        len.map(|n| self.utf8(n)).transpose()
    }

    /// A string after a compact length (`COMPACT_STRING`); `None` for null.
    #[inline]
    pub fn compact_str(&mut self) -> Result<Option<&'a str>> {
        let len = self.compact_length()?;
        len.map(|n| self.utf8(n)).transpose()
    }
}

#[cfg(test)]
mod tests;
