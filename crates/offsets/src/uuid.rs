//! Kafka's 128-bit UUID (topic ids), shown as Kafka shows it: URL-safe base64
//! without padding, e.g. `AAAAAAAAAAAAAAAAAAAAAQ`.

use std::fmt;

/// A Kafka UUID, as the 16 bytes on the wire.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct Uuid(pub [u8; 16]);

const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

impl fmt::Display for Uuid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // 16 bytes = five 3-byte groups (20 characters) and one last byte (2 characters).
        let mut out = [0u8; 22];
        for (i, chunk) in self.0.chunks(3).enumerate() {
            let b = [chunk[0], *chunk.get(1).unwrap_or(&0), *chunk.get(2).unwrap_or(&0)];
            let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
            for j in 0..4 {
                if i * 4 + j < out.len() {
                    out[i * 4 + j] = ALPHABET[((n >> (18 - 6 * j)) & 0x3f) as usize];
                }
            }
        }
        // The alphabet is ASCII, so this never fails.
        f.write_str(std::str::from_utf8(&out).map_err(|_| fmt::Error)?)
    }
}

impl fmt::Debug for Uuid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Uuid({self})")
    }
}

#[cfg(feature = "serde")]
impl serde::Serialize for Uuid {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

#[cfg(test)]
mod tests {
    use super::Uuid;

    #[test]
    fn displays_like_kafka() {
        // Kafka's Uuid.ONE_UUID ("AAAAAAAAAAAAAAAAAAAAAQ") and ZERO_UUID.
        let mut one = [0u8; 16];
        one[15] = 1;
        assert_eq!(Uuid(one).to_string(), "AAAAAAAAAAAAAAAAAAAAAQ");
        assert_eq!(Uuid([0; 16]).to_string(), "AAAAAAAAAAAAAAAAAAAAAA");
        assert_eq!(Uuid([0xff; 16]).to_string(), "_____________________w");
    }
}
