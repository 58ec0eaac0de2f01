//! Which records a player applies: the chain rules.
//!
//! A player holds the chain it has applied: the last sequence number, the
//! running checksum, and the current author (set by the last hand-off). It
//! applies only the record that continues that chain — the next sequence
//! number, the checksum it holds as `prev` — and, for a transaction or a
//! snapshot's start or end, comes from the current author. Concurrent writers therefore form a tree of which every
//! player reads the same single branch: after a new primary's hand-off, a zombie
//! primary's records either repeat a sequence number already taken or carry a
//! checksum of a branch no one follows, and are skipped. A writer builds its
//! next record from its own view of the chain ([`Chain::next`]) and learns
//! whether it was applied by reading the log back.

use super::record::{Body, LogRecord};

/// The checksum of an empty chain.
pub(crate) const EMPTY: u64 = 0xcbf2_9ce4_8422_2325;

/// The chain's checksum after a record: FNV-1a (64-bit) of the record's bytes,
/// continuing from the checksum before it.
pub(crate) fn checksum(prev: u64, record: &[u8]) -> u64 {
    record.iter().fold(prev, |h, b| (h ^ u64::from(*b)).wrapping_mul(0x0000_0100_0000_01b3))
}

/// Why a record was not applied.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Skip {
    /// Its sequence number is not the next one (another record took it).
    NotNext {
        /// The next sequence number.
        expected: u64,
        /// The record's.
        got: u64,
    },
    /// It continues another branch of the chain.
    Fork,
    /// A player starting at a truncated log's start has not yet met the
    /// snapshot-start record it must begin from.
    BeforeSnapshot,
    /// A transaction by someone other than the current author (a fenced
    /// primary, or no hand-off yet).
    NotTheAuthor {
        /// The current author, if any.
        current: Option<u64>,
        /// The record's.
        got: u64,
    },
}

/// A player's (or a writer's) view of the chain.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Chain {
    seq: u64,
    checksum: u64,
    author: Option<u64>,
}

impl Default for Chain {
    fn default() -> Self {
        Chain { seq: 0, checksum: EMPTY, author: None }
    }
}

impl Chain {
    /// The chain a player left at `seq` with `checksum` and `author` (from a
    /// store's checkpoint), to go on playing from there.
    pub fn resume(seq: u64, checksum: u64, author: Option<u64>) -> Self {
        Chain { seq, checksum, author }
    }

    /// True when no record was applied: a new store on a log from its start.
    pub fn is_empty(&self) -> bool {
        *self == Chain::default()
    }

    /// The last applied sequence number (0 for an empty chain).
    pub fn seq(&self) -> u64 {
        self.seq
    }

    /// The running checksum.
    pub fn checksum(&self) -> u64 {
        self.checksum
    }

    /// The current author: the last applied hand-off's.
    pub fn author(&self) -> Option<u64> {
        self.author
    }

    /// Judges `record` (whose bytes are `bytes`) and applies it when it
    /// continues the chain.
    pub fn offer(&mut self, record: &LogRecord, bytes: &[u8]) -> Result<(), Skip> {
        let expected = self.seq.saturating_add(1);
        if record.seq != expected {
            return Err(Skip::NotNext { expected, got: record.seq });
        }
        if record.prev != self.checksum {
            return Err(Skip::Fork);
        }
        match record.body {
            Body::HandOff => self.author = Some(record.author),
            Body::Transaction { .. } | Body::TransactionPart { .. } | Body::SnapshotStart | Body::SnapshotEnd
                if self.author != Some(record.author) =>
            {
                return Err(Skip::NotTheAuthor { current: self.author, got: record.author });
            }
            Body::Transaction { .. } | Body::TransactionPart { .. } | Body::SnapshotStart | Body::SnapshotEnd => {}
        }
        self.seq = expected;
        self.checksum = checksum(self.checksum, bytes);
        Ok(())
    }

    /// The record `author` writes next, on this view of the chain.
    pub fn next(&self, author: u64, body: Body) -> LogRecord {
        LogRecord { author, seq: self.seq.saturating_add(1), prev: self.checksum, body }
    }
}
