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
        if self.bootstrap == Some(Bootstrap::Seeking) {
            if record.body != Body::SnapshotStart {
                self.next_offset = offset + 1;
                return Ok(Some(Played::Skipped(Skip::BeforeSnapshot)));
            }
            self.chain = Chain::resume(record.seq.saturating_sub(1), record.prev, Some(record.author));
        }
        let mut chain = self.chain.clone();
        if let Err(skip) = chain.offer(&record, bytes) {
            if matches!(self.bootstrap, Some(Bootstrap::Playing(_)))
                && matches!(skip, Skip::NotNext { expected, got } if got > expected)
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
                return self.offer_with(offset, bytes, applied);
            }
            self.next_offset = offset + 1;
            return Ok(Some(Played::Skipped(skip)));
        }
        let bootstrap = match (self.bootstrap, &record.body) {
            (None, _) => None,
            (Some(Bootstrap::Seeking) | Some(Bootstrap::Playing(_)), Body::SnapshotStart) => {
                Some(Bootstrap::Playing(Partial { snapshot: Some(offset) }))
            }
            // The snapshot it began at (or one after it) ended: whole.
            (Some(Bootstrap::Playing(Partial { snapshot: Some(_) })), Body::SnapshotEnd) => None,
            // A new author cut the snapshot short: its next one will do.
            (Some(Bootstrap::Playing(_)), Body::HandOff) => Some(Bootstrap::Playing(Partial { snapshot: None })),
            (other, _) => other,
        };
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
    fn a_large_transactions_parts_are_applied_with_its_last_record_and_replayed_after_a_stop_between() {
        let part = |k: &str| Body::TransactionPart {
            mutations: vec![Mutation::Put { key: k.as_bytes().to_vec(), value: b"v".to_vec() }],
        };
        let offsets = vec![crate::recovery_log::record::SourceOffset { topic: "t".into(), partition: 0, offset: 9 }];
        let last = Body::Transaction {
            mutations: vec![Mutation::Put { key: b"c".to_vec(), value: b"v".to_vec() }],
            offsets: offsets.clone(),
        };
        let records = log(vec![Body::HandOff, part("a"), part("b"), last]);
        let mut player = Player::open(MemoryStore::default()).expect("opens");
        let mut followed = Vec::new();
        let mut played = Vec::new();
        for (offset, bytes) in records.iter().enumerate().take(3) {
            played.push(player.offer(offset as i64, bytes).expect("plays"));
        }
        assert_eq!(
            played,
            [Some(Played::HandOff { author: 7 }), Some(Played::TransactionPart), Some(Played::TransactionPart)]
        );
        assert_eq!(player.store().get(b"a").expect("reads"), None, "held until the last record");
        assert_eq!(player.store().checkpoint().expect("reads").map(|c| c.log.next_offset), Some(1), "before the parts");
        // Stopped here: a player reopened on the store reads the parts again.
        let mut reopened = Player::open(player.into_store()).expect("reopens");
        assert_eq!(reopened.next_offset(), 1);
        for (offset, bytes) in records.iter().enumerate().skip(1) {
            reopened
                .offer_with(offset as i64, bytes, |mutations, o| followed.push((mutations.len(), o.to_vec())))
                .expect("plays");
        }
        for key in [b"a", b"b", b"c"] {
            assert_eq!(reopened.store().get(key).expect("reads"), Some(b"v".to_vec()));
        }
        assert_eq!(followed, [(3, offsets)], "one transaction, every mutation");
        assert_eq!(reopened.next_offset(), 4);
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
            Body::SnapshotEnd,
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
        assert_eq!(played[6], Some(Played::SnapshotEnd));
        assert!(!player.bootstrapping());
        assert!(played[4..6].iter().chain(&played[7..]).all(|p| *p == Some(Played::Transaction)));
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

    /// Records by several authors continuing one chain: `(author, body)`.
    fn chain_of(records: Vec<(u64, Body)>) -> (Vec<Vec<u8>>, Chain) {
        let mut chain = Chain::default();
        let bytes = records
            .into_iter()
            .map(|(author, body)| {
                let record = chain.next(author, body);
                let bytes = record.encode();
                chain.offer(&record, &bytes).expect("continues");
                bytes
            })
            .collect();
        (bytes, chain)
    }

    fn keys(player: &Player<MemoryStore>) -> Vec<String> {
        let entries = player.store().scan(None, usize::MAX).expect("scans");
        entries.into_iter().map(|(k, _)| String::from_utf8(k).expect("utf-8")).collect()
    }

    #[test]
    fn a_bootstrapping_player_is_whole_only_once_a_snapshot_it_played_ends() {
        // Author 7 starts a snapshot and dies after its first chunk; 8 takes
        // over, writes, and later snapshots in full.
        let (records, _) = chain_of(vec![
            (7, Body::HandOff),
            (7, put("a", "1")),
            (7, put("b", "2")),
            (7, Body::SnapshotStart),
            (7, put("a", "1")),
            (8, Body::HandOff),
            (8, put("c", "3")),
            (8, Body::SnapshotStart),
            (8, put("a", "1")),
            (8, put("b", "2")),
            (8, put("c", "3")),
            (8, Body::SnapshotEnd),
            (8, put("d", "4")),
        ]);
        // The log was cut at 1: the first snapshot start there is 7's.
        let mut player = Player::bootstrap(MemoryStore::default(), 1);
        for (o, r) in records.iter().enumerate().take(9) {
            player.offer(o as i64, r).expect("plays");
        }
        // b is missing: 7's snapshot never put it, and 8's has not ended.
        assert_eq!(keys(&player), ["a", "c"]);
        assert!(player.bootstrapping(), "not whole before a snapshot it played ends");
        // A crash here: reopened on its store, it still knows.
        let mut player = Player::open(player.into_store()).expect("reopens");
        assert!(player.bootstrapping(), "the checkpoint says the store is partial");
        for (o, r) in records.iter().enumerate().skip(9).take(2) {
            player.offer(o as i64, r).expect("plays");
        }
        assert!(player.bootstrapping());
        assert_eq!(player.offer(11, &records[11]).expect("plays"), Some(Played::SnapshotEnd));
        assert!(!player.bootstrapping(), "whole at the snapshot's end");
        player.offer(12, &records[12]).expect("plays");
        assert_eq!(keys(&player), ["a", "b", "c", "d"]);
        let reopened = Player::open(player.into_store()).expect("reopens");
        assert!(!reopened.bootstrapping());
    }

    #[test]
    fn a_bootstrapping_player_that_began_at_a_fenced_writers_snapshot_start_starts_again() {
        // 7 is fenced by 8's hand-off, then writes a snapshot start that
        // continues its own view of the chain, not the log's.
        let (before, fork) = chain_of(vec![(7, Body::HandOff), (7, put("x", "1"))]);
        let zombie = fork.next(7, Body::SnapshotStart).encode();
        let mut chain = fork;
        let mut records = before;
        for (author, body) in [(8, Body::HandOff), (8, put("y", "2"))] {
            let record = chain.next(author, body);
            let bytes = record.encode();
            chain.offer(&record, &bytes).expect("continues");
            records.push(bytes);
        }
        records.insert(3, zombie);
        for body in [Body::SnapshotStart, put("x", "1"), Body::SnapshotEnd] {
            let body = match body {
                Body::Transaction { .. } => Body::Transaction {
                    mutations: vec![
                        Mutation::Put { key: b"x".to_vec(), value: b"1".to_vec() },
                        Mutation::Put { key: b"y".to_vec(), value: b"2".to_vec() },
                    ],
                    offsets: vec![],
                },
                other => other,
            };
            let record = chain.next(8, body);
            let bytes = record.encode();
            chain.offer(&record, &bytes).expect("continues");
            records.push(bytes);
        }
        // The log was cut at 3: the zombie's snapshot start comes first.
        let mut player = Player::bootstrap(MemoryStore::default(), 3);
        let played: Vec<Option<Played>> =
            records.iter().enumerate().map(|(o, r)| player.offer(o as i64, r).expect("plays")).collect();
        assert_eq!(played[3], Some(Played::SnapshotStart), "the zombie's, taken at first");
        assert!(matches!(played[4], Some(Played::Skipped(Skip::Fork))), "{:?}", played[4]);
        assert_eq!(played[5], Some(Played::SnapshotStart), "8's, off the zombie's branch: started again");
        assert_eq!(played[7], Some(Played::SnapshotEnd));
        assert!(!player.bootstrapping());
        assert_eq!(keys(&player), ["x", "y"]);
        assert_eq!(player.chain(), &chain, "on the log's chain");
    }

    /// Appends records by `author` on `chain`; their bytes.
    fn extend(chain: &mut Chain, author: u64, bodies: Vec<Body>) -> Vec<Vec<u8>> {
        bodies
            .into_iter()
            .map(|body| {
                let record = chain.next(author, body);
                let bytes = record.encode();
                chain.offer(&record, &bytes).expect("continues");
                bytes
            })
            .collect()
    }

    fn puts(pairs: &[(&str, &str)]) -> Body {
        let mutations = pairs
            .iter()
            .map(|(k, v)| Mutation::Put { key: k.as_bytes().to_vec(), value: v.as_bytes().to_vec() })
            .collect();
        Body::Transaction { mutations, offsets: vec![] }
    }

    #[test]
    fn a_bootstrapping_player_on_a_fenced_writers_branch_starts_again_at_the_next_snapshot() {
        // 7 is fenced by 8's hand-off and then writes a snapshot start on its
        // own view of the chain; 8 commits twice before its next snapshot.
        let (mut records, fork) = chain_of(vec![(7, Body::HandOff), (7, put("x", "1"))]);
        let zombie = fork.next(7, Body::SnapshotStart).encode();
        let mut chain = fork;
        records.extend(extend(&mut chain, 8, vec![Body::HandOff, put("y", "2")]));
        records.insert(3, zombie);
        records.extend(extend(&mut chain, 8, vec![put("z", "3"), put("w", "4")]));
        let start = records.len();
        let snapshot = puts(&[("w", "4"), ("x", "1"), ("y", "2"), ("z", "3")]);
        records.extend(extend(&mut chain, 8, vec![Body::SnapshotStart, snapshot, Body::SnapshotEnd]));
        // The log was cut at 3: the zombie's snapshot start comes first.
        let mut player = Player::bootstrap(MemoryStore::default(), 3);
        let played: Vec<Option<Played>> =
            records.iter().enumerate().map(|(o, r)| player.offer(o as i64, r).expect("plays")).collect();
        // Before, a record past the zombie's chain was "the chain cannot
        // continue" (io::offer fails the replica on it), on every retry.
        let ahead =
            |p: &Option<Played>| matches!(p, Some(Played::Skipped(Skip::NotNext { expected, got })) if got > expected);
        assert!(!played.iter().any(ahead), "a record past the chain reached the caller: {played:?}");
        assert_eq!(played[start], Some(Played::SnapshotStart));
        assert!(!player.bootstrapping(), "whole at 8's snapshot end: {played:?}");
        assert_eq!(keys(&player), ["w", "x", "y", "z"]);
        assert_eq!(player.chain(), &chain, "on the log's chain");
    }

    #[test]
    fn a_fenced_writers_snapshot_start_does_not_throw_a_player_off_the_logs_chain() {
        // A player bootstrapping from 8's snapshot start meets a late
        // snapshot start of 7 (fenced before it) in 8's snapshot.
        let (mut records, mut chain) = chain_of(vec![(7, Body::HandOff), (7, put("x", "1"))]);
        let fork = chain.clone();
        records.extend(extend(&mut chain, 8, vec![Body::HandOff, Body::SnapshotStart]));
        records.push(fork.next(7, Body::SnapshotStart).encode());
        records.extend(extend(&mut chain, 8, vec![put("x", "1"), Body::SnapshotEnd]));
        let mut player = Player::bootstrap(MemoryStore::default(), 3);
        let played: Vec<Option<Played>> =
            records.iter().enumerate().map(|(o, r)| player.offer(o as i64, r).expect("plays")).collect();
        assert!(matches!(played[4], Some(Played::Skipped(_))), "the zombie's start skipped: {:?}", played[4]);
        assert_eq!(played[6], Some(Played::SnapshotEnd));
        assert!(!player.bootstrapping());
        assert_eq!(keys(&player), ["x"]);
        assert_eq!(player.chain(), &chain);
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
