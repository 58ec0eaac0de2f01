//! A compressed record batch's records, decompressed as a stream and never
//! past a cap.
//!
//! A batch of a few kilobytes can inflate to gigabytes (a value of zeros
//! compresses about 30,000 to one with zstd), and anyone who may write to a
//! topic kshard reads can write one. So nothing here decompresses a batch
//! whole on trust: [`records`] gives its records' bytes as a [`Read`] that
//! decompresses chunk by chunk (the caller stops where it has what it
//! wants, and skips values without keeping them), and [`inflate`] fills a
//! buffer that stops at a cap. zstd's window is held to 32 MiB; snappy's
//! blocks (Kafka writes xerial's framing) are checked against the cap
//! before they are decompressed.
//!
//! Kafka's codecs: 1 gzip, 2 snappy, 3 lz4 (the LZ4 frame format), 4 zstd.

use std::io::{self, Read};

/// zstd's largest window accepted: 2^25 bytes. Kafka's producers at their
/// default levels use 2^21 to 2^23; a frame asking for more is refused
/// rather than given the memory.
const ZSTD_WINDOW_LOG_MOST: u32 = 25;

/// Why a batch's records could not be had.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum InflateError {
    /// A codec Kafka does not have.
    #[error("compression codec {0}, which Kafka does not have")]
    Codec(i16),
    /// The decompressor refused the bytes.
    #[error("decompressing: {0}")]
    Corrupt(String),
    /// More bytes than the cap.
    #[error("its records inflate past {most} bytes")]
    TooLarge {
        /// The cap.
        most: usize,
    },
}

/// The records of a batch compressed with `codec`, as a stream of their
/// decompressed bytes (at most `most` of them: past that, reading fails
/// with [`InflateError::TooLarge`] inside an `io::Error`).
pub(crate) fn records<'a>(codec: i16, compressed: &'a [u8], most: usize) -> Result<Box<dyn Read + 'a>, InflateError> {
    let corrupt = |e: io::Error| InflateError::Corrupt(e.to_string());
    let stream: Box<dyn Read + 'a> = match codec {
        0 => Box::new(compressed),
        1 => Box::new(flate2::read::GzDecoder::new(compressed)),
        2 => Box::new(XerialSnappy::new(compressed, most)?),
        3 => Box::new(lz4::Decoder::new(compressed).map_err(corrupt)?),
        4 => {
            let mut decoder = zstd::stream::read::Decoder::with_buffer(compressed).map_err(corrupt)?;
            decoder.window_log_max(ZSTD_WINDOW_LOG_MOST).map_err(corrupt)?;
            Box::new(decoder)
        }
        other => return Err(InflateError::Codec(other)),
    };
    Ok(Box::new(Capped { inner: stream, left: most, most }))
}

/// The records of a batch compressed with `codec`, whole, when they take
/// at most `most` bytes. The buffer grows with what comes, never past
/// `most`.
pub(crate) fn inflate(codec: i16, compressed: &[u8], most: usize) -> Result<Vec<u8>, InflateError> {
    let mut stream = records(codec, compressed, most)?;
    let mut out: Vec<u8> = Vec::new();
    let mut chunk = [0u8; 64 * 1024];
    loop {
        let n = match stream.read(&mut chunk) {
            Ok(0) => return Ok(out),
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(why(e)),
        };
        if out.capacity() - out.len() < n {
            // Doubling, but never to more than the cap.
            let want = out.len().saturating_mul(2).max(out.len() + n).max(64 * 1024).min(most);
            out.reserve_exact(want - out.len());
        }
        out.extend_from_slice(&chunk[..n]);
    }
}

/// The [`InflateError`] an `io::Error` of [`records`]' stream carries.
pub(crate) fn why(e: io::Error) -> InflateError {
    match e.get_ref().and_then(|inner| inner.downcast_ref::<InflateError>()) {
        Some(inflate) => inflate.clone(),
        None => InflateError::Corrupt(e.to_string()),
    }
}

/// A stream that fails once more than `most` bytes came out of it.
struct Capped<R> {
    inner: R,
    left: usize,
    most: usize,
}

impl<R: Read> Read for Capped<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.left == 0 {
            // One byte more tells a stream that ends at the cap from one that goes on.
            let mut probe = [0u8; 1];
            return match self.inner.read(&mut probe)? {
                0 => Ok(0),
                _ => Err(io::Error::new(io::ErrorKind::InvalidData, InflateError::TooLarge { most: self.most })),
            };
        }
        let n = buf.len().min(self.left);
        let read = self.inner.read(&mut buf[..n])?;
        self.left -= read;
        Ok(read)
    }
}

/// The most a snappy block can inflate: 64 bytes of output for each 2 of
/// input.
const SNAPPY_MOST_RATIO: usize = 32;

/// The magic that starts xerial's snappy framing, which Kafka's producers
/// write: then a version and a compatible version (int32 each), then blocks
/// of an int32 length and a raw snappy block.
const XERIAL_MAGIC: &[u8] = b"\x82SNAPPY\x00";

/// Snappy as Kafka writes it (xerial's framing; raw snappy without it, as
/// Kafka's own reader accepts), one block at a time, each block's size
/// checked against the cap before it is decompressed.
struct XerialSnappy<'a> {
    /// The blocks not decompressed yet.
    rest: &'a [u8],
    /// The block being read, and how much of it is.
    block: Vec<u8>,
    at: usize,
    /// Raw snappy: one block, no lengths.
    raw: bool,
    most: usize,
}

impl<'a> XerialSnappy<'a> {
    fn new(compressed: &'a [u8], most: usize) -> Result<Self, InflateError> {
        let (rest, raw) = match compressed.strip_prefix(XERIAL_MAGIC) {
            Some(framed) => {
                (framed.get(8..).ok_or_else(|| InflateError::Corrupt("a cut snappy header".into()))?, false)
            }
            None => (compressed, true),
        };
        Ok(XerialSnappy { rest, block: Vec::new(), at: 0, raw, most })
    }

    /// Decompresses the next block into `self.block`; false at the end.
    fn next_block(&mut self) -> Result<bool, InflateError> {
        if self.rest.is_empty() {
            return Ok(false);
        }
        let block = if self.raw {
            std::mem::take(&mut self.rest)
        } else {
            let (length, after) = self.rest.split_first_chunk::<4>().ok_or_else(|| cut("a block length"))?;
            let length = u32::from_be_bytes(*length) as usize;
            let block = after.get(..length).ok_or_else(|| cut("a block"))?;
            self.rest = &after[length..];
            block
        };
        let size = snap::raw::decompress_len(block).map_err(|e| InflateError::Corrupt(e.to_string()))?;
        if size > self.most {
            return Err(InflateError::TooLarge { most: self.most });
        }
        // Snappy's densest copy (64 bytes for 2 of input) inflates 32 times
        // at most: a block that claims more lies, and is not given the
        // memory it claims.
        if size > block.len().saturating_mul(SNAPPY_MOST_RATIO).saturating_add(64) {
            return Err(InflateError::Corrupt(format!(
                "a snappy block of {} bytes claims {size} bytes, more than snappy can encode",
                block.len()
            )));
        }
        self.block.clear();
        self.block.resize(size, 0);
        snap::raw::Decoder::new()
            .decompress(block, &mut self.block)
            .map_err(|e| InflateError::Corrupt(e.to_string()))?;
        self.at = 0;
        Ok(true)
    }
}

fn cut(what: &str) -> InflateError {
    InflateError::Corrupt(format!("snappy: {what} cut short"))
}

impl Read for XerialSnappy<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        while self.at == self.block.len() {
            match self.next_block() {
                Ok(true) => {}
                Ok(false) => return Ok(0),
                Err(e) => return Err(io::Error::new(io::ErrorKind::InvalidData, e)),
            }
        }
        let n = buf.len().min(self.block.len() - self.at);
        buf[..n].copy_from_slice(&self.block[self.at..self.at + n]);
        self.at += n;
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::{BufMut, BytesMut};
    use kafka_protocol::compression::{Compressor, Gzip, Lz4, Snappy, Zstd};

    /// `data` compressed by kafka-protocol's compressors (Kafka's framings).
    fn compressed(codec: i16, data: &[u8]) -> Vec<u8> {
        let mut out = BytesMut::new();
        let write = |b: &mut BytesMut| -> anyhow::Result<()> {
            b.put_slice(data);
            Ok(())
        };
        match codec {
            1 => Gzip::compress(&mut out, write),
            2 => Snappy::compress(&mut out, write),
            3 => Lz4::compress(&mut out, write),
            4 => Zstd::compress(&mut out, write),
            _ => unreachable!("a codec"),
        }
        .expect("compresses");
        out.to_vec()
    }

    #[test]
    fn every_codec_inflates_what_kafka_compresses() {
        let data: Vec<u8> = (0..200_000u32).flat_map(|i| (i % 251).to_le_bytes()).collect();
        for codec in 1..=4 {
            let bytes = compressed(codec, &data);
            assert_eq!(inflate(codec, &bytes, data.len()).expect("inflates"), data, "codec {codec}");
            assert_eq!(
                inflate(codec, &bytes, data.len() - 1),
                Err(InflateError::TooLarge { most: data.len() - 1 }),
                "codec {codec}"
            );
        }
        assert_eq!(inflate(0, b"plain", 5).expect("as is"), b"plain");
        assert_eq!(inflate(5, b"x", 5), Err(InflateError::Codec(5)));
    }

    #[test]
    fn a_bomb_stops_at_the_cap_with_the_buffer_no_larger() {
        // 64 MiB of zeros: a few kilobytes compressed.
        let zeros = vec![0u8; 64 << 20];
        for codec in 1..=4 {
            let bomb = compressed(codec, &zeros);
            assert!(bomb.len() < (64 << 20) / 20, "codec {codec}: {} bytes", bomb.len());
            assert_eq!(inflate(codec, &bomb, 1 << 20), Err(InflateError::TooLarge { most: 1 << 20 }), "codec {codec}");
            // As a stream, the start can be read without the rest.
            let mut head = [1u8; 100];
            records(codec, &bomb, 1 << 20).expect("a stream").read_exact(&mut head).expect("reads");
            assert_eq!(head, [0u8; 100]);
        }
    }

    #[test]
    fn cut_and_garbled_input_is_an_error() {
        let data = vec![7u8; 10_000];
        for codec in 1..=4 {
            let bytes = compressed(codec, &data);
            // An error, or (lz4 ends where its input does, its end mark
            // and checksum optional) what was there: never other bytes. A
            // short batch's records then do not add up to its count.
            for end in [1, bytes.len() / 2, bytes.len() - 1] {
                let got = inflate(codec, &bytes[..end], 1 << 20);
                assert!(got.as_ref().is_ok_and(|b| data.starts_with(b)) || got.is_err(), "codec {codec} cut at {end}");
            }
        }
        // A snappy block declaring 4 GiB is refused before it is decompressed.
        let mut framed = XERIAL_MAGIC.to_vec();
        framed.extend([0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 5, 0x80, 0x80, 0x80, 0x80, 0x0f]);
        assert_eq!(inflate(2, &framed, 1 << 20), Err(InflateError::TooLarge { most: 1 << 20 }));
        // Under the cap, but more than 5 bytes can encode: refused before
        // its 1 MiB is allocated.
        let claim = [0x80, 0x80, 0x40]; // 1 MiB, as a varint
        assert!(matches!(inflate(2, &claim, 16 << 20), Err(InflateError::Corrupt(why)) if why.contains("claims")));
    }
}
