//! One recovery-log record, and its bytes.
//!
//! Every record names its author (a random id each primary draws when it hands
//! off), its sequence number in the chain and the checksum of the chain before
//! it; its body is a hand-off, one consumer transaction — the store mutations
//! and the source offsets it covers, so that state and checkpoint move
//! together — or the start or end of a snapshot (the transactions between them
//! put every live key; a player may begin at a start and holds the whole state
//! from the end, see [`super::player::Player::bootstrap`]).
//!
//! Layout (big-endian): magic `KSRL`, version u8 (1), author u64, seq u64,
//! prev u64, kind u8 (0 hand-off, 1 transaction, 2 snapshot start, 3 snapshot
//! end; a reader from before kind 3 counts it malformed and then fails on the
//! next record as past its chain: every member must run a version that knows
//! kind 3 before a primary writes one — stop them all, then start them); a transaction then has a
//! mutation count u32 and each mutation (op u8: 0 put, 1 delete; key len u32,
//! key; for a put, value len u32, value), then an offset count u32 and each
//! offset (topic len u16, topic, partition i32, offset i64). Every length is
//! checked against the bytes left before anything is allocated (the reads are
//! [`kshard_offsets::cursor`]'s).

use kshard_offsets::cursor::{Cursor, CursorError};

/// A store change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Mutation {
    /// Sets a key.
    Put {
        /// The key.
        key: Vec<u8>,
        /// The value.
        value: Vec<u8>,
    },
    /// Deletes a key.
    Delete {
        /// The key.
        key: Vec<u8>,
    },
}

/// A source partition's next offset to read, as of a transaction.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct SourceOffset {
    /// The topic.
    pub topic: String,
    /// The partition.
    pub partition: i32,
    /// The next offset to read.
    pub offset: i64,
}

/// What a record carries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Body {
    /// A new primary takes over the log: from here on, only its author's
    /// records continue the chain.
    HandOff,
    /// A snapshot of the store begins: the transactions that follow (by the
    /// same author) put every live key. A player that starts here, with an
    /// empty store, ends up with the whole state.
    SnapshotStart,
    /// The snapshot the same author started last is complete: every live key
    /// was put since its start. Only a complete snapshot is a starting point.
    SnapshotEnd,
    /// One consumer transaction.
    Transaction {
        /// The store mutations, in order.
        mutations: Vec<Mutation>,
        /// The source offsets after the transaction.
        offsets: Vec<SourceOffset>,
    },
    /// The first mutations of a transaction too large for one record: the
    /// parts come in order, each right after the one before, and the
    /// transaction's [`Body::Transaction`] record ends them (all in one
    /// Kafka transaction, so a reader of committed records sees all or
    /// none). A player applies them together with that record.
    TransactionPart {
        /// The mutations, in order.
        mutations: Vec<Mutation>,
    },
}

/// One record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogRecord {
    /// Who wrote it.
    pub author: u64,
    /// Its place in the chain (the first record is 1).
    pub seq: u64,
    /// The chain's checksum before it.
    pub prev: u64,
    /// What it carries.
    pub body: Body,
}

/// Bytes that are not a record.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("malformed recovery-log record: {what} at byte {at}")]
pub struct RecordError {
    /// What was wrong.
    pub what: &'static str,
    /// Where.
    pub at: usize,
}

const MAGIC: &[u8; 4] = b"KSRL";
const VERSION: u8 = 1;

impl LogRecord {
    /// The record's bytes.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(64);
        out.extend_from_slice(MAGIC);
        out.push(VERSION);
        out.extend_from_slice(&self.author.to_be_bytes());
        out.extend_from_slice(&self.seq.to_be_bytes());
        out.extend_from_slice(&self.prev.to_be_bytes());
        match &self.body {
            Body::HandOff => out.push(0),
            Body::SnapshotStart => out.push(2),
            Body::SnapshotEnd => out.push(3),
            Body::TransactionPart { mutations } => {
                out.push(4);
                encode_mutations(&mut out, mutations);
            }
            Body::Transaction { mutations, offsets } => {
                out.push(1);
                encode_mutations(&mut out, mutations);
                out.extend_from_slice(&len32(offsets.len()).to_be_bytes());
                for o in offsets {
                    let topic = o.topic.as_bytes();
                    out.extend_from_slice(&u16::try_from(topic.len()).unwrap_or(u16::MAX).to_be_bytes());
                    out.extend_from_slice(&topic[..topic.len().min(usize::from(u16::MAX))]);
                    out.extend_from_slice(&o.partition.to_be_bytes());
                    out.extend_from_slice(&o.offset.to_be_bytes());
                }
            }
        }
        out
    }

    /// Reads a record; an error names what and where.
    pub fn decode(bytes: &[u8]) -> Result<Self, RecordError> {
        let mut r = Reader(Cursor::new(bytes));
        if r.take(4, "magic")? != MAGIC {
            return Err(RecordError { what: "not a kshard recovery-log record (magic)", at: 0 });
        }
        if r.u8("version")? != VERSION {
            return Err(RecordError { what: "unknown version", at: 4 });
        }
        let author = r.u64("author")?;
        let seq = r.u64("seq")?;
        let prev = r.u64("prev")?;
        let body = match r.u8("kind")? {
            0 => Body::HandOff,
            2 => Body::SnapshotStart,
            3 => Body::SnapshotEnd,
            1 => {
                let (mutations, offsets) = (r.mutations()?, r.offsets()?);
                Body::Transaction { mutations, offsets }
            }
            4 => Body::TransactionPart { mutations: r.mutations()? },
            _ => return Err(RecordError { what: "unknown record kind", at: r.0.position() - 1 }),
        };
        if !r.0.is_empty() {
            return Err(RecordError { what: "trailing bytes", at: r.0.position() });
        }
        Ok(LogRecord { author, seq, prev, body })
    }
}

fn encode_mutations(out: &mut Vec<u8>, mutations: &[Mutation]) {
    out.extend_from_slice(&len32(mutations.len()).to_be_bytes());
    for m in mutations {
        match m {
            Mutation::Put { key, value } => {
                out.push(0);
                bytes32(out, key);
                bytes32(out, value);
            }
            Mutation::Delete { key } => {
                out.push(1);
                bytes32(out, key);
            }
        }
    }
}

fn len32(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

fn bytes32(out: &mut Vec<u8>, b: &[u8]) {
    out.extend_from_slice(&len32(b.len()).to_be_bytes());
    out.extend_from_slice(b);
}

/// The record's reads: [`Cursor`]'s, each naming what it reads.
struct Reader<'a>(Cursor<'a>);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize, what: &'static str) -> Result<&'a [u8], RecordError> {
        self.0.take(n).map_err(named(what))
    }

    fn u8(&mut self, what: &'static str) -> Result<u8, RecordError> {
        self.0.u8().map_err(named(what))
    }

    fn u64(&mut self, what: &'static str) -> Result<u64, RecordError> {
        self.0.u64().map_err(named(what))
    }

    /// A count of items each at least `min` bytes long, checked against the
    /// bytes left before anything is allocated.
    fn count(&mut self, what: &'static str, min: usize) -> Result<usize, RecordError> {
        let at = self.0.position();
        let n = self.0.u32().map_err(named(what))? as usize;
        self.0.fits(n, min).map_err(|_| RecordError { what, at })
    }

    fn bytes32(&mut self, what: &'static str) -> Result<&'a [u8], RecordError> {
        let n = self.0.u32().map_err(named(what))? as usize;
        self.take(n, what)
    }

    /// A transaction's mutations.
    fn mutations(&mut self) -> Result<Vec<Mutation>, RecordError> {
        let n = self.count("mutation count", 5)?;
        let mut mutations = Vec::with_capacity(n);
        for _ in 0..n {
            mutations.push(match self.u8("mutation op")? {
                0 => Mutation::Put { key: self.bytes32("key")?.to_vec(), value: self.bytes32("value")?.to_vec() },
                1 => Mutation::Delete { key: self.bytes32("key")?.to_vec() },
                _ => return Err(RecordError { what: "unknown mutation op", at: self.0.position() - 1 }),
            });
        }
        Ok(mutations)
    }

    /// A transaction's source offsets.
    fn offsets(&mut self) -> Result<Vec<SourceOffset>, RecordError> {
        let n = self.count("offset count", 14)?;
        let mut offsets = Vec::with_capacity(n);
        for _ in 0..n {
            let len = usize::from(self.0.u16().map_err(named("topic length"))?);
            let topic = self.0.utf8(len).map_err(|e| match e {
                CursorError::InvalidUtf8 { at } => RecordError { what: "topic is not UTF-8", at },
                e => named("topic")(e),
            })?;
            let partition = self.0.i32().map_err(named("partition"))?;
            let offset = self.0.i64().map_err(named("offset"))?;
            offsets.push(SourceOffset { topic: topic.to_owned(), partition, offset });
        }
        Ok(offsets)
    }
}

/// The record's error for a cursor's: `what` was being read where it stopped.
fn named(what: &'static str) -> impl FnOnce(CursorError) -> RecordError {
    move |e| RecordError { what, at: e.at() }
}
