//! The one error type of the codec: what was wrong, in which field, at which byte.

use std::fmt;

/// Which of the two buffers of a `__consumer_offsets` record an error was found in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Part {
    /// The record key (int16 type, then the key body).
    Key,
    /// The record value (int16 version, then the value body).
    Value,
    /// Consumer-protocol bytes embedded in a group-metadata member (subscription).
    Subscription,
    /// Consumer-protocol bytes embedded in a group-metadata member (assignment).
    Assignment,
}

impl fmt::Display for Part {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Part::Key => "key",
            Part::Value => "value",
            Part::Subscription => "subscription",
            Part::Assignment => "assignment",
        })
    }
}

/// What was wrong with the bytes.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ErrorKind {
    /// The input ended before the field did.
    #[error("needs {needed} bytes but only {remaining} remain")]
    UnexpectedEnd {
        /// Bytes the field needs.
        needed: usize,
        /// Bytes left in the input.
        remaining: usize,
    },
    /// A length or count was negative where null is not allowed (or below -1).
    #[error("invalid length {0}")]
    InvalidLength(i64),
    /// A null string, bytes or array where the schema does not allow null.
    #[error("null where the schema does not allow it")]
    UnexpectedNull,
    /// A string that is not UTF-8.
    #[error("string is not valid UTF-8")]
    InvalidUtf8,
    /// An unsigned varint longer than 5 bytes or larger than `u32::MAX`.
    #[error("unsigned varint overflows 32 bits")]
    VarintOverflow,
    /// A version this codec cannot read (negative, or a format that never existed).
    #[error("unsupported {record} version {version}")]
    UnsupportedVersion {
        /// The schema whose version was read.
        record: &'static str,
        /// The version found.
        version: i16,
    },
    /// Bytes left over after the last field of a known version.
    #[error("{0} unexpected trailing bytes")]
    TrailingBytes(usize),
    /// A tagged field whose size does not match its type.
    #[error("tagged field {tag} has size {size}, expected {expected}")]
    TaggedFieldSize {
        /// The tag.
        tag: u32,
        /// The size found.
        size: usize,
        /// The size the field's type has.
        expected: usize,
    },
    /// A nullable struct's presence marker was neither null nor present.
    #[error("invalid presence marker {0}")]
    InvalidPresence(i64),
}

/// A malformed `__consumer_offsets` record: which part, which field, at which byte.
///
/// The byte offset counts from the start of the part (key, value or embedded
/// consumer-protocol bytes), so `offset` can be read straight off a hex dump.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{part}: field `{field}` at byte {offset}: {kind}")]
pub struct DecodeError {
    /// The buffer the error was found in.
    pub part: Part,
    /// The schema field being read (snake_case, as in the JSON output).
    pub field: &'static str,
    /// The byte offset in that buffer where the field starts.
    pub offset: usize,
    /// What was wrong.
    pub kind: ErrorKind,
}

impl DecodeError {
    pub(crate) fn in_part(mut self, part: Part) -> Self {
        self.part = part;
        self
    }
}
