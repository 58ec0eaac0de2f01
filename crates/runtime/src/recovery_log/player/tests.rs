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
    let mutations =
        pairs.iter().map(|(k, v)| Mutation::Put { key: k.as_bytes().to_vec(), value: v.as_bytes().to_vec() }).collect();
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
