//! Kafka's wire primitives for the schemas: a [`Reader`] that names the field
//! each read is for, and a [`Writer`].
//!
//! Both know the classic encodings (int16/int32 lengths, -1 for null) and the
//! flexible ones (unsigned varint `N + 1`, 0 for null; tagged fields at the end of
//! each struct), chosen per call by a `flexible` flag because one schema can be
//! classic in some versions and flexible in others. The reader is a thin layer
//! over [`Cursor`], which does the checked reads: every length read from the wire
//! is checked against the bytes that remain before anything is allocated, so a
//! hostile length can never make the decoder reserve more memory than the input
//! holds. No I/O happens here.

use std::borrow::Cow;

use crate::cursor::{Cursor, CursorError};
use crate::error::{DecodeError, ErrorKind, Part};
use crate::uuid::Uuid;

/// A cursor over one buffer; every read names the field it reads for error messages.
#[derive(Debug, Clone)]
pub(crate) struct Reader<'a> {
    cursor: Cursor<'a>,
}

pub(crate) type Result<T> = std::result::Result<T, DecodeError>;

/// The codec's error for a cursor's, naming `field` (the part is set by the caller).
#[inline]
fn named(field: &'static str) -> impl FnOnce(CursorError) -> DecodeError {
    move |e| {
        let kind = match e {
            CursorError::Short { needed, remaining, .. } => ErrorKind::UnexpectedEnd { needed, remaining },
            CursorError::VarintOverflow { .. } => ErrorKind::VarintOverflow,
            CursorError::InvalidLength { len, .. } => ErrorKind::InvalidLength(len),
            CursorError::InvalidUtf8 { .. } => ErrorKind::InvalidUtf8,
        };
        DecodeError { part: Part::Value, field, offset: e.at(), kind }
    }
}

impl<'a> Reader<'a> {
    pub(crate) fn new(buf: &'a [u8]) -> Self {
        Reader { cursor: Cursor::new(buf) }
    }

    pub(crate) fn position(&self) -> usize {
        self.cursor.position()
    }

    pub(crate) fn remaining(&self) -> usize {
        self.cursor.remaining()
    }

    pub(crate) fn error(&self, field: &'static str, offset: usize, kind: ErrorKind) -> DecodeError {
        DecodeError { part: Part::Value, field, offset, kind }
    }

    /// Fails unless every byte was consumed.
    pub(crate) fn finish(&self, field: &'static str) -> Result<()> {
        match self.remaining() {
            0 => Ok(()),
            n => Err(self.error(field, self.position(), ErrorKind::TrailingBytes(n))),
        }
    }

    #[inline]
    pub(crate) fn take(&mut self, field: &'static str, n: usize) -> Result<&'a [u8]> {
        self.cursor.take(n).map_err(named(field))
    }

    #[inline]
    pub(crate) fn i8(&mut self, field: &'static str) -> Result<i8> {
        self.cursor.i8().map_err(named(field))
    }

    #[inline]
    pub(crate) fn i16(&mut self, field: &'static str) -> Result<i16> {
        self.cursor.i16().map_err(named(field))
    }

    #[inline]
    pub(crate) fn i32(&mut self, field: &'static str) -> Result<i32> {
        self.cursor.i32().map_err(named(field))
    }

    #[inline]
    pub(crate) fn i64(&mut self, field: &'static str) -> Result<i64> {
        self.cursor.i64().map_err(named(field))
    }

    #[inline]
    pub(crate) fn uuid(&mut self, field: &'static str) -> Result<Uuid> {
        self.cursor.array().map(Uuid).map_err(named(field))
    }

    #[inline]
    pub(crate) fn uvarint(&mut self, field: &'static str) -> Result<u32> {
        self.cursor.uvarint().map_err(named(field))
    }

    /// Reads a length prefix: `None` for null, else a length that fits the input
    /// when each element takes at least `min_size` bytes.
    #[inline]
    fn length(&mut self, field: &'static str, flexible: bool, wide: bool, min_size: usize) -> Result<Option<usize>> {
        let c = &mut self.cursor;
        let len = match (flexible, wide) {
            (true, _) => c.compact_length(),
            (false, true) => c.length32(),
            (false, false) => c.length16(),
        };
        len.and_then(|len| len.map(|n| c.fits(n, min_size)).transpose()).map_err(named(field))
    }

    fn non_null<T>(&self, field: &'static str, start: usize, value: Option<T>) -> Result<T> {
        value.ok_or_else(|| self.error(field, start, ErrorKind::UnexpectedNull))
    }

    #[inline]
    pub(crate) fn nullable_string(&mut self, field: &'static str, flexible: bool) -> Result<Option<Cow<'a, str>>> {
        let Some(len) = self.length(field, flexible, false, 1)? else {
            return Ok(None);
        };
        self.cursor.utf8(len).map(|s| Some(Cow::Borrowed(s))).map_err(named(field))
    }

    pub(crate) fn string(&mut self, field: &'static str, flexible: bool) -> Result<Cow<'a, str>> {
        let start = self.position();
        let value = self.nullable_string(field, flexible)?;
        self.non_null(field, start, value)
    }

    pub(crate) fn nullable_bytes(&mut self, field: &'static str, flexible: bool) -> Result<Option<Cow<'a, [u8]>>> {
        let Some(len) = self.length(field, flexible, true, 1)? else {
            return Ok(None);
        };
        Ok(Some(Cow::Borrowed(self.take(field, len)?)))
    }

    pub(crate) fn bytes(&mut self, field: &'static str, flexible: bool) -> Result<Cow<'a, [u8]>> {
        let start = self.position();
        let value = self.nullable_bytes(field, flexible)?;
        self.non_null(field, start, value)
    }

    /// Reads a nullable array whose elements take at least `min_size` bytes each.
    pub(crate) fn nullable_array<T>(
        &mut self,
        field: &'static str,
        flexible: bool,
        min_size: usize,
        mut element: impl FnMut(&mut Self) -> Result<T>,
    ) -> Result<Option<Vec<T>>> {
        let Some(len) = self.length(field, flexible, true, min_size.max(1))? else {
            return Ok(None);
        };
        let mut out = Vec::with_capacity(len);
        for _ in 0..len {
            out.push(element(self)?);
        }
        Ok(Some(out))
    }

    pub(crate) fn array_of<T>(
        &mut self,
        field: &'static str,
        flexible: bool,
        min_size: usize,
        element: impl FnMut(&mut Self) -> Result<T>,
    ) -> Result<Vec<T>> {
        let start = self.position();
        let value = self.nullable_array(field, flexible, min_size, element)?;
        self.non_null(field, start, value)
    }

    pub(crate) fn string_array(&mut self, field: &'static str, flexible: bool) -> Result<Vec<Cow<'a, str>>> {
        self.array_of(field, flexible, 1, |r| r.string(field, flexible))
    }

    pub(crate) fn int32_array(&mut self, field: &'static str, flexible: bool) -> Result<Vec<i32>> {
        self.array_of(field, flexible, 4, |r| r.i32(field))
    }

    /// Reads a flexible struct's tagged fields, handing each known one to `on_tag`
    /// (which returns `false` for a tag it does not know: those are skipped, as
    /// Kafka does, so a newer writer's additions never break this reader).
    pub(crate) fn tagged_fields(
        &mut self,
        field: &'static str,
        mut on_tag: impl FnMut(u32, &mut Reader<'a>) -> Result<bool>,
    ) -> Result<()> {
        let count = self.uvarint(field)?;
        for _ in 0..count {
            let tag = self.uvarint(field)?;
            let size = self.uvarint(field)? as usize;
            let mut inner = Reader { cursor: self.cursor.split(size).map_err(named(field))? };
            if on_tag(tag, &mut inner)? {
                inner.finish(field)?;
            }
        }
        Ok(())
    }

    /// Reads a fixed-size tagged field's data, checking its declared size.
    pub(crate) fn fixed_tag<T>(
        &mut self,
        field: &'static str,
        tag: u32,
        size: usize,
        read: impl FnOnce(&mut Self) -> Result<T>,
    ) -> Result<T> {
        if self.remaining() != size {
            return Err(self.error(
                field,
                self.position(),
                ErrorKind::TaggedFieldSize { tag, size: self.remaining(), expected: size },
            ));
        }
        read(self)
    }
}

/// Appends Kafka wire primitives to a byte vector.
#[derive(Debug)]
pub(crate) struct Writer<'v> {
    pub(crate) out: &'v mut Vec<u8>,
}

impl<'v> Writer<'v> {
    pub(crate) fn new(out: &'v mut Vec<u8>) -> Self {
        Writer { out }
    }

    pub(crate) fn i8(&mut self, v: i8) {
        self.out.extend_from_slice(&v.to_be_bytes());
    }

    pub(crate) fn i16(&mut self, v: i16) {
        self.out.extend_from_slice(&v.to_be_bytes());
    }

    pub(crate) fn i32(&mut self, v: i32) {
        self.out.extend_from_slice(&v.to_be_bytes());
    }

    pub(crate) fn i64(&mut self, v: i64) {
        self.out.extend_from_slice(&v.to_be_bytes());
    }

    pub(crate) fn uuid(&mut self, v: &Uuid) {
        self.out.extend_from_slice(&v.0);
    }

    pub(crate) fn uvarint(&mut self, mut v: u32) {
        while v >= 0x80 {
            self.out.push((v as u8) | 0x80);
            v >>= 7;
        }
        self.out.push(v as u8);
    }

    /// Writes a length prefix; `None` is null.
    ///
    /// # Panics
    /// When `len` does not fit the prefix (a string over 32,767 bytes in a classic
    /// layout): the encoder's input comes from this process (tests, load
    /// generation), and writing a wrong length would corrupt the record silently.
    fn length(&mut self, len: Option<usize>, flexible: bool, wide: bool) {
        const TOO_LONG: &str = "length does not fit the record's layout";
        match (len, flexible, wide) {
            (None, true, _) => self.uvarint(0),
            (Some(n), true, _) => self.uvarint(u32::try_from(n + 1).expect(TOO_LONG)),
            (None, false, true) => self.i32(-1),
            (Some(n), false, true) => self.i32(i32::try_from(n).expect(TOO_LONG)),
            (None, false, false) => self.i16(-1),
            (Some(n), false, false) => self.i16(i16::try_from(n).expect(TOO_LONG)),
        }
    }

    pub(crate) fn nullable_string(&mut self, v: Option<&str>, flexible: bool) {
        self.length(v.map(str::len), flexible, false);
        if let Some(s) = v {
            self.out.extend_from_slice(s.as_bytes());
        }
    }

    pub(crate) fn string(&mut self, v: &str, flexible: bool) {
        self.nullable_string(Some(v), flexible);
    }

    pub(crate) fn nullable_bytes(&mut self, v: Option<&[u8]>, flexible: bool) {
        self.length(v.map(<[u8]>::len), flexible, true);
        if let Some(b) = v {
            self.out.extend_from_slice(b);
        }
    }

    pub(crate) fn bytes(&mut self, v: &[u8], flexible: bool) {
        self.nullable_bytes(Some(v), flexible);
    }

    pub(crate) fn nullable_array<T>(
        &mut self,
        v: Option<&[T]>,
        flexible: bool,
        mut element: impl FnMut(&mut Self, &T),
    ) {
        self.length(v.map(<[T]>::len), flexible, true);
        for item in v.unwrap_or_default() {
            element(self, item);
        }
    }

    pub(crate) fn array_of<T>(&mut self, v: &[T], flexible: bool, element: impl FnMut(&mut Self, &T)) {
        self.nullable_array(Some(v), flexible, element);
    }

    pub(crate) fn string_array(&mut self, v: &[Cow<'_, str>], flexible: bool) {
        self.array_of(v, flexible, |w, s| w.string(s, flexible));
    }

    pub(crate) fn int32_array(&mut self, v: &[i32], flexible: bool) {
        self.array_of(v, flexible, |w, n| w.i32(*n));
    }

    /// Writes tagged fields: each `(tag, data)` in ascending tag order.
    pub(crate) fn tagged_fields(&mut self, fields: &[(u32, Vec<u8>)]) {
        self.uvarint(u32::try_from(fields.len()).expect("tagged field count fits u32"));
        for (tag, data) in fields {
            self.uvarint(*tag);
            self.uvarint(u32::try_from(data.len()).expect("tagged field size fits u32"));
            self.out.extend_from_slice(data);
        }
    }
}

/// Encodes one tagged field's data with a closure over a fresh writer.
pub(crate) fn tag_data(write: impl FnOnce(&mut Writer<'_>)) -> Vec<u8> {
    let mut data = Vec::new();
    write(&mut Writer::new(&mut data));
    data
}
