//! Playing a recovery log into a store: each record offered in log order is
//! judged by the chain rules; an applied transaction's mutations go into the
//! store together with the checkpoint (the log position after it, the chain,
//! the source offsets), so a player reopened on the store goes on exactly where
//! it stopped. Skipped and malformed records move nothing but the position.
//!
//! A player started at a truncated log's start ([`Player::bootstrap`]) skips
//! records until a snapshot starts and plays on from there, but its store is
//! whole only once a snapshot it played has ended: the first snapshot start
//! it meets may be of a writer that died half-way (its successor's hand-off
//! cuts it short) or a fenced writer's, on a branch no one continues. Until
//! then the checkpoint says so ([`Partial`]), the player reports itself
//! [`Player::bootstrapping`], and a record past its chain's next (the log's
//! chain went on without it) makes it start again, with an emptied store,
//! from the next snapshot start. A complete snapshot —
//! start, chunks and end continuing one another, by one author — can only be
//! on the chain every player follows: its writer read each record back as
//! applied before writing the next.

use super::chain::{Chain, Skip};
use super::record::{Body, LogRecord, RecordError};
use crate::store::{Checkpoint, LogPosition, Partial, Store, StoreError};

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
    /// A part of a large transaction, held until its last record.
    TransactionPart,
    /// A snapshot begins.
    SnapshotStart,
    /// A snapshot ends.
    SnapshotEnd,
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
    /// Started at a truncated log's start: not yet whole.
    bootstrap: Option<Bootstrap>,
    /// The last snapshot start applied: its offset, and the chain before it.
    snapshot_start: Option<SnapshotStart>,
    /// The parts of a large transaction read so far, applied with its last
    /// record ([`Body::TransactionPart`]).
    pending: Vec<super::record::Mutation>,
}

/// A player started at a truncated log's start, until its store is whole.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Bootstrap {
    /// Skipping records until one starts a snapshot, to take the chain from it.
    Seeking,
    /// Playing from a snapshot start.
    Playing(Partial),
}

/// Where an applied snapshot began: what a hint records.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SnapshotStart {
    /// The snapshot-start record's offset.
    pub offset: i64,
    /// The chain's sequence number before it.
    pub seq: u64,
    /// The chain's checksum before it.
    pub checksum: u64,
}

/// What the chain rules make of an offered record.
enum Admission {
    /// It continues the chain: the chain after it.
    Continues(Chain),
    /// It does not: skipped.
    Skipped(Skip),
    /// A bootstrapping player was on a dead branch: its store emptied, it
    /// seeks the next snapshot start, this record offered again.
    Restart,
}

/// Where a bootstrapping player is after `body`, applied at `offset`.
fn next_bootstrap(now: Option<Bootstrap>, body: &Body, offset: i64) -> Option<Bootstrap> {
    match (now, body) {
        (None, _) => None,
        (Some(Bootstrap::Seeking) | Some(Bootstrap::Playing(_)), Body::SnapshotStart) => {
            Some(Bootstrap::Playing(Partial { snapshot: Some(offset) }))
        }
        // The snapshot it began at (or one after it) ended: whole.
        (Some(Bootstrap::Playing(Partial { snapshot: Some(_) })), Body::SnapshotEnd) => None,
        // A new author cut the snapshot short: its next one will do.
        (Some(Bootstrap::Playing(_)), Body::HandOff) => Some(Bootstrap::Playing(Partial { snapshot: None })),
        (other, _) => other,
    }
}

impl<S: Store> Player<S> {
    /// A player on `store`, going on from its checkpoint (or from the log's
    /// start for a new store).
    pub fn open(store: S) -> Result<Self, StoreError> {
        let (chain, next_offset, offsets, bootstrap) = match store.checkpoint()? {
            Some(c) => (
                Chain::resume(c.log.seq, c.log.checksum, c.log.author),
                c.log.next_offset,
                c.offsets,
                c.partial.map(Bootstrap::Playing),
            ),
            None => (Chain::default(), 0, Vec::new(), None),
        };
        Ok(Player { store, chain, next_offset, offsets, bootstrap, snapshot_start: None, pending: Vec::new() })
    }

    /// A player on a new `store` starting at `hint`: the first record of a
    /// snapshot, with the chain just before it (hints name complete
    /// snapshots only: a primary records one after its end).
    pub fn open_at(store: S, hint: &crate::model::Hint) -> Self {
        Player {
            store,
            chain: Chain::resume(hint.seq, hint.checksum, hint.author),
            next_offset: hint.offset,
            offsets: Vec::new(),
            bootstrap: None,
            snapshot_start: None,
            pending: Vec::new(),
        }
    }

    /// A player on a new `store` starting at `offset`, the start of a log
    /// whose records before it were deleted (the runtime deletes records only
    /// up to a snapshot's start): it skips records until one starts a snapshot,
    /// and takes the chain from that one; its store is whole once a snapshot
    /// ends (see the module's doc).
    pub fn bootstrap(store: S, offset: i64) -> Self {
        Player {
            store,
            chain: Chain::default(),
            next_offset: offset,
            offsets: Vec::new(),
            bootstrap: Some(Bootstrap::Seeking),
            snapshot_start: None,
            pending: Vec::new(),
        }
    }

    /// True while a bootstrapping player's store is not whole: no snapshot
    /// it played has ended yet.
    pub fn bootstrapping(&self) -> bool {
        self.bootstrap.is_some()
    }

    /// The last snapshot start this player applied.
    pub fn snapshot_start(&self) -> Option<SnapshotStart> {
        self.snapshot_start
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
        self.offer_with(offset, bytes, |_, _| {})
    }

    /// Moves the position past offsets a committed reader skipped after the
    /// last record offered (transaction markers, aborted records): the
    /// reader's next offset at the partition's end. Never backwards; the
    /// store's checkpoint stays after the record it applied last.
    pub fn skip_to(&mut self, offset: i64) {
        self.next_offset = self.next_offset.max(offset);
    }

    /// [`Player::offer`], calling `applied` with a transaction's mutations and
    /// source offsets once they are in the store.
    pub fn offer_with(
        &mut self,
        offset: i64,
        bytes: &[u8],
        applied: impl FnOnce(&[super::record::Mutation], &[super::record::SourceOffset]),
    ) -> Result<Option<Played>, StoreError> {
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
        let chain = match self.admit(&record, bytes)? {
            Admission::Continues(chain) => chain,
            Admission::Skipped(skip) => {
                self.next_offset = offset + 1;
                return Ok(Some(Played::Skipped(skip)));
            }
            Admission::Restart => return self.offer_with(offset, bytes, applied),
        };
        let bootstrap = next_bootstrap(self.bootstrap, &record.body, offset);
        // A part of a large transaction: held, the chain moved on, the store
        // not (its checkpoint stays before the parts, so that a player
        // reopened on it reads them again).
        if let Body::TransactionPart { mutations } = record.body {
            self.pending.extend(mutations);
            self.chain = chain;
            self.bootstrap = bootstrap;
            self.next_offset = offset + 1;
            return Ok(Some(Played::TransactionPart));
        }
        self.apply(offset, &record, chain, bootstrap, applied)
    }

    /// Judges `record` by the chain rules (seeking a snapshot start first
    /// when bootstrapping): the chain it moves on to, or why not.
    fn admit(&mut self, record: &LogRecord, bytes: &[u8]) -> Result<Admission, StoreError> {
        if self.bootstrap == Some(Bootstrap::Seeking) {
            if record.body != Body::SnapshotStart {
                return Ok(Admission::Skipped(Skip::BeforeSnapshot));
            }
            self.chain = Chain::resume(record.seq.saturating_sub(1), record.prev, Some(record.author));
        }
        let mut chain = self.chain.clone();
        match chain.offer(record, bytes) {
            Ok(()) => Ok(Admission::Continues(chain)),
            Err(Skip::NotNext { expected, got })
                if got > expected && matches!(self.bootstrap, Some(Bootstrap::Playing(_))) =>
            {
                // Not whole yet, and the log's chain has gone past this one:
                // it began at a snapshot start on a branch no one continues
                // (a fenced writer's). Start again, from the next snapshot
                // start. A record behind the chain, or of another branch,
                // proves nothing of the kind: a zombie's view is a prefix of
                // the log's chain.
                self.store.clear()?;
                self.offsets.clear();
                self.bootstrap = Some(Bootstrap::Seeking);
                Ok(Admission::Restart)
            }
            Err(skip) => Ok(Admission::Skipped(skip)),
        }
    }

    /// Applies an admitted record (all but a transaction's parts) to the
    /// store with its checkpoint, the parts held before it included.
    fn apply(
        &mut self,
        offset: i64,
        record: &LogRecord,
        chain: Chain,
        bootstrap: Option<Bootstrap>,
        applied: impl FnOnce(&[super::record::Mutation], &[super::record::SourceOffset]),
    ) -> Result<Option<Played>, StoreError> {
        // The parts before a transaction's last record are applied with it;
        // any other record ends parts that had no last record (none should).
        let parts = std::mem::take(&mut self.pending);
        let whole: Vec<super::record::Mutation>;
        // Every applied record moves the store's checkpoint, so that a player
        // reopened on it replays nothing it has applied (hand-offs included).
        let (mutations, offsets, played) = match &record.body {
            Body::HandOff => (&[][..], &self.offsets, Played::HandOff { author: record.author }),
            Body::SnapshotStart => (&[][..], &self.offsets, Played::SnapshotStart),
            Body::SnapshotEnd => (&[][..], &self.offsets, Played::SnapshotEnd),
            Body::TransactionPart { .. } => (&[][..], &self.offsets, Played::TransactionPart),
            Body::Transaction { mutations, offsets } if parts.is_empty() => {
                (&mutations[..], offsets, Played::Transaction)
            }
            Body::Transaction { mutations, offsets } => {
                whole = parts.into_iter().chain(mutations.iter().cloned()).collect();
                (&whole[..], offsets, Played::Transaction)
            }
        };
        let checkpoint = Checkpoint {
            log: LogPosition {
                next_offset: offset + 1,
                seq: chain.seq(),
                checksum: chain.checksum(),
                author: chain.author(),
            },
            offsets: offsets.clone(),
            partial: match bootstrap {
                Some(Bootstrap::Playing(partial)) => Some(partial),
                _ => None,
            },
        };
        self.store.apply(mutations, &checkpoint)?;
        if played == Played::Transaction {
            applied(mutations, &checkpoint.offsets);
        }
        if played == Played::SnapshotStart {
            self.snapshot_start =
                Some(SnapshotStart { offset, seq: self.chain.seq(), checksum: self.chain.checksum() });
        }
        self.offsets = checkpoint.offsets;
        self.chain = chain;
        self.bootstrap = bootstrap;
        self.next_offset = offset + 1;
        Ok(Some(played))
    }

    /// Gives the store back.
    pub fn into_store(self) -> S {
        self.store
    }
}

#[cfg(test)]
mod tests;
