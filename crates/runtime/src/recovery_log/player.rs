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
    /// Skip records until one starts a snapshot, and take the chain from it.
    bootstrap: bool,
    /// The last snapshot start applied: its offset, and the chain before it.
    snapshot_start: Option<SnapshotStart>,
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

impl<S: Store> Player<S> {
    /// A player on `store`, going on from its checkpoint (or from the log's
    /// start for a new store).
    pub fn open(store: S) -> Result<Self, StoreError> {
        let (chain, next_offset, offsets) = match store.checkpoint()? {
            Some(c) => (Chain::resume(c.log.seq, c.log.checksum, c.log.author), c.log.next_offset, c.offsets),
            None => (Chain::default(), 0, Vec::new()),
        };
        Ok(Player { store, chain, next_offset, offsets, bootstrap: false, snapshot_start: None })
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
            snapshot_start: None,
        }
    }

    /// A player on a new `store` starting at `offset`, the start of a log
    /// whose records before it were deleted (the runtime deletes records only
    /// up to a snapshot's start): it skips records until one starts a snapshot,
    /// and takes the chain from that one.
    pub fn bootstrap(store: S, offset: i64) -> Self {
        Player {
            store,
            chain: Chain::default(),
            next_offset: offset,
            offsets: Vec::new(),
            bootstrap: true,
            snapshot_start: None,
        }
    }

    /// True while a bootstrapping player has not found its snapshot start.
    pub fn bootstrapping(&self) -> bool {
        self.bootstrap
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
        if self.bootstrap {
            if record.body != Body::SnapshotStart {
                self.next_offset = offset + 1;
                return Ok(Some(Played::Skipped(Skip::BeforeSnapshot)));
            }
            self.bootstrap = false;
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
        if played == Played::Transaction {
            applied(mutations, &checkpoint.offsets);
        }
        if played == Played::SnapshotStart {
            self.snapshot_start =
                Some(SnapshotStart { offset, seq: self.chain.seq(), checksum: self.chain.checksum() });
        }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::recovery_log::record::Mutation;
    use crate::store::MemoryStore;

    fn put(key: &str, value: &str) -> Body {
        let mutation = Mutation::Put { key: key.as_bytes().to_vec(), value: value.as_bytes().to_vec() };
        Body::Transaction { mutations: vec![mutation], offsets: vec![] }
    }

    /// A log written by one author: its records' bytes, in order.
    fn log(bodies: Vec<Body>) -> Vec<Vec<u8>> {
        let mut chain = Chain::default();
        bodies
            .into_iter()
            .map(|body| {
                let record = chain.next(7, body);
                let bytes = record.encode();
                chain.offer(&record, &bytes).expect("continues");
                bytes
            })
            .collect()
    }

    #[test]
    fn a_player_bootstrapping_at_a_truncated_start_begins_at_the_snapshot_and_ends_with_the_state() {
        let records = log(vec![
            Body::HandOff,
            put("a", "1"),
            put("b", "2"),
            Body::SnapshotStart,
            put("a", "1"),
            put("b", "2"),
            put("c", "3"),
        ]);
        // Deleted up to offset 2: the records before the snapshot start are
        // skipped, then the chain is taken from it.
        let mut player = Player::bootstrap(MemoryStore::default(), 2);
        let played: Vec<Option<Played>> =
            records.iter().enumerate().map(|(o, r)| player.offer(o as i64, r).expect("plays")).collect();
        assert_eq!(played[..2], [None, None], "before the start: ignored");
        assert_eq!(played[2], Some(Played::Skipped(Skip::BeforeSnapshot)));
        assert_eq!(played[3], Some(Played::SnapshotStart));
        assert!(!player.bootstrapping());
        assert!(played[4..].iter().all(|p| *p == Some(Played::Transaction)));
        assert_eq!(player.store().get(b"c").expect("reads"), Some(b"3".to_vec()));
        assert_eq!(player.store().get(b"a").expect("reads"), Some(b"1".to_vec()));
        let start = player.snapshot_start().expect("a snapshot start");
        assert_eq!((start.offset, start.seq), (3, 3));

        // A log whose start holds no snapshot start leaves the player bootstrapping.
        let mut lost = Player::bootstrap(MemoryStore::default(), 1);
        for (o, r) in records.iter().enumerate().take(3) {
            lost.offer(o as i64, r).expect("plays");
        }
        assert!(lost.bootstrapping());
        assert_eq!(lost.store().get(b"a").expect("reads"), None, "nothing applied");
    }

    #[test]
    fn every_applied_record_moves_the_checkpoint() {
        let records = log(vec![Body::HandOff, put("a", "1"), Body::HandOff]);
        let mut player = Player::open(MemoryStore::default()).expect("opens");
        for (o, r) in records.iter().enumerate() {
            player.offer(o as i64, r).expect("plays");
        }
        let store = player.into_store();
        assert_eq!(store.checkpoint().expect("reads").map(|c| c.log.next_offset), Some(3));
        let reopened = Player::open(store).expect("reopens");
        assert_eq!(reopened.next_offset(), 3, "nothing to replay, the last hand-off included");
    }
}
