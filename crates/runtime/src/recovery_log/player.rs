//! Playing a recovery log into a store: each record offered in log order is
//! judged by the chain rules; an applied transaction's mutations go into the
//! store together with the checkpoint (the log position after it, the chain,
//! the source offsets), so a player reopened on the store goes on exactly where
//! it stopped. Skipped and malformed records move nothing but the position.

use super::chain::{Chain, Skip};
use super::record::{Body, LogRecord, RecordError};
use crate::store::{Checkpoint, LogPosition, Store, StoreError};

/// What one offered record did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Played {
    /// A hand-off was applied: `author` writes the log from here on.
    HandOff {
        /// The new author.
        author: u64,
    },
    /// A transaction was applied to the store.
    Transaction,
    /// A snapshot begins.
    SnapshotStart,
    /// The record does not continue the chain.
    Skipped(Skip),
    /// The bytes are not a record (counted, skipped).
    Malformed(RecordError),
}

/// A store and the chain it holds.
#[derive(Debug)]
pub struct Player<S: Store> {
    store: S,
    chain: Chain,
    next_offset: i64,
    offsets: Vec<super::record::SourceOffset>,
    /// Take the chain from the first record when it starts a snapshot.
    bootstrap: bool,
}

impl<S: Store> Player<S> {
    /// A player on `store`, going on from its checkpoint (or from the log's
    /// start for a new store).
    pub fn open(store: S) -> Result<Self, StoreError> {
        let (chain, next_offset, offsets) = match store.checkpoint()? {
            Some(c) => (Chain::resume(c.log.seq, c.log.checksum, c.log.author), c.log.next_offset, c.offsets),
            None => (Chain::default(), 0, Vec::new()),
        };
        Ok(Player { store, chain, next_offset, offsets, bootstrap: false })
    }

    /// A player on a new `store` starting at `hint`: the first record of a
    /// snapshot, with the chain just before it.
    pub fn open_at(store: S, hint: &crate::model::Hint) -> Self {
        Player {
            store,
            chain: Chain::resume(hint.seq, hint.checksum, hint.author),
            next_offset: hint.offset,
            offsets: Vec::new(),
            bootstrap: false,
        }
    }

    /// A player on a new `store` starting at `offset`, the start of a log
    /// whose records before it were deleted: it takes the chain from the first
    /// record when that starts a snapshot (the runtime deletes records only up
    /// to a snapshot's start), and skips everything otherwise.
    pub fn bootstrap(store: S, offset: i64) -> Self {
        Player { store, chain: Chain::default(), next_offset: offset, offsets: Vec::new(), bootstrap: true }
    }

    /// The next log offset to offer.
    pub fn next_offset(&self) -> i64 {
        self.next_offset
    }

    /// The chain as played.
    pub fn chain(&self) -> &Chain {
        &self.chain
    }

    /// The store.
    pub fn store(&self) -> &S {
        &self.store
    }

    /// The source offsets of the last applied transaction.
    pub fn offsets(&self) -> &[super::record::SourceOffset] {
        &self.offsets
    }

    /// Offers the record at `offset` (its bytes). Records before the player's
    /// position (a re-read) are ignored.
    pub fn offer(&mut self, offset: i64, bytes: &[u8]) -> Result<Option<Played>, StoreError> {
        if offset < self.next_offset {
            return Ok(None);
        }
        let record = match LogRecord::decode(bytes) {
            Ok(r) => r,
            Err(e) => {
                self.next_offset = offset + 1;
                return Ok(Some(Played::Malformed(e)));
            }
        };
        if std::mem::take(&mut self.bootstrap) && record.body == Body::SnapshotStart {
            self.chain = Chain::resume(record.seq.saturating_sub(1), record.prev, Some(record.author));
        }
        let mut chain = self.chain.clone();
        if let Err(skip) = chain.offer(&record, bytes) {
            self.next_offset = offset + 1;
            return Ok(Some(Played::Skipped(skip)));
        }
        // Every applied record moves the store's checkpoint, so that a player
        // reopened on it replays nothing it has applied (hand-offs included).
        let (mutations, offsets, played) = match &record.body {
            Body::HandOff => (&[][..], &self.offsets, Played::HandOff { author: record.author }),
            Body::SnapshotStart => (&[][..], &self.offsets, Played::SnapshotStart),
            Body::Transaction { mutations, offsets } => (&mutations[..], offsets, Played::Transaction),
        };
        let checkpoint = Checkpoint {
            log: LogPosition {
                next_offset: offset + 1,
                seq: chain.seq(),
                checksum: chain.checksum(),
                author: chain.author(),
            },
            offsets: offsets.clone(),
        };
        self.store.apply(mutations, &checkpoint)?;
        self.offsets = checkpoint.offsets;
        self.chain = chain;
        self.next_offset = offset + 1;
        Ok(Some(played))
    }

    /// Gives the store back.
    pub fn into_store(self) -> S {
        self.store
    }
}
