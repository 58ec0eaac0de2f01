//! A replica's store and log when the log is not the one the store was made
//! from: deleted and created again under the same name.

use std::sync::{Arc, Mutex};

use kshard_kafka::Isolation;

use super::*;
use crate::application::{AppError, Application, Message, ShardApp, Transaction};
use crate::disk::MemoryDisk;
use crate::model::{RecoveryLog, Source};
use crate::partitions::memory::MemoryPartitions;
use crate::recovery_log::hints::{HintBoard, HintCall};
use crate::recovery_log::io::hand_off;
use crate::store::MemoryStore;

#[derive(Default)]
struct Board(Mutex<Option<(Hints, i64)>>);

impl HintBoard for Board {
    fn read<'a>(&'a self, _: &'a str) -> HintCall<'a, Option<(Hints, i64)>> {
        Box::pin(std::future::ready(Ok(*self.0.lock().expect("board"))))
    }

    fn write<'a>(&'a self, _: &'a str, hints: &'a Hints, revision: i64) -> HintCall<'a, bool> {
        let mut board = self.0.lock().expect("board");
        let ok = board.as_ref().map_or(0, |(_, r)| *r) == revision;
        if ok {
            *board = Some((*hints, revision + 1));
        }
        Box::pin(std::future::ready(Ok(ok)))
    }
}

struct Nothing;

impl Application for Nothing {
    fn shard(&self, _: &ShardSpec) -> Result<Box<dyn ShardApp>, AppError> {
        Ok(Box::new(Nothing))
    }
}

impl ShardApp for Nothing {
    fn consume(&mut self, _: &mut Transaction<'_>, _: &Message<'_>) -> Result<(), AppError> {
        Ok(())
    }
}

fn context(log: &MemoryPartitions, disk: &MemoryDisk) -> WorkerContext {
    WorkerContext {
        partitions: Arc::new(log.clone()),
        disk: Arc::new(disk.clone()),
        app: Arc::new(Nothing),
        metrics: Arc::default(),
        views: Default::default(),
        progress: Arc::default(),
        hints: Arc::new(Board::default()),
    }
}

fn spec() -> ShardSpec {
    let source = Source { topic: "source".into(), partition: 0, min_offset: 0 };
    ShardSpec::new("s", vec![source], RecoveryLog { topic: "log".into(), partition: 0 })
}

/// A primary `author` writes a hand-off and a transaction per key to the log.
async fn write_chain(log: &MemoryPartitions, author: u64, keys: &[&str]) {
    let reader = log.reader("log", &[(0, None)], 64, Isolation::Committed).expect("a reader");
    let clients = LogClients { topic: "log", partition: 0, reader: reader.as_ref(), partitions: log, writer: None };
    let mut player = Player::open(MemoryStore::default()).expect("a player");
    hand_off(&clients, &mut player, author, KAFKA_TIMEOUT).await.expect("hands off");
    for key in keys {
        let put = Mutation::Put { key: key.as_bytes().to_vec(), value: author.to_be_bytes().to_vec() };
        commit(&clients, &mut player, author, vec![put], vec![], KAFKA_TIMEOUT).await.expect("commits");
    }
}

/// Opens the replica's log and plays it to its head.
async fn played(ctx: &WorkerContext, spec: &ShardSpec) -> Result<Vec<(Vec<u8>, Vec<u8>)>, ReplicaError> {
    let mut log = Log::open(ctx, spec, spec.recovery_log.as_ref().expect("logged")).await?;
    log.play_to_head(|| false).await?;
    Ok(log.player.store().scan(None, usize::MAX)?)
}

#[tokio::test]
async fn a_store_of_a_log_since_recreated_is_rebuilt_from_the_new_one() {
    let (log, disk, spec) = (MemoryPartitions::default(), MemoryDisk::default(), spec());
    let ctx = context(&log, &disk);
    write_chain(&log, 7, &["a", "b", "c"]).await;
    let before = played(&ctx, &spec).await.expect("plays");
    assert_eq!(before.len(), 3);
    // The topic is deleted and created again; its new chain is longer than
    // the store's position. Played on from there, the store kept a, b, c
    // and skipped every new record as a fenced writer's.
    log.delete_topic("log");
    write_chain(&log, 9, &["w", "x", "y", "z"]).await;
    let after = played(&ctx, &spec).await.expect("plays");
    let keys: Vec<&[u8]> = after.iter().map(|(k, _)| k.as_slice()).collect();
    assert_eq!(keys, [b"w", b"x", b"y", b"z"], "the new log's state, nothing of the old");
}

#[tokio::test]
async fn a_store_whose_last_record_is_gone_is_not_played_on() {
    let (log, disk, spec) = (MemoryPartitions::default(), MemoryDisk::default(), spec());
    let ctx = context(&log, &disk);
    write_chain(&log, 7, &["a", "b", "c"]).await;
    played(&ctx, &spec).await.expect("plays");
    // Recreated, and its start deleted up to the store's position: the
    // record the store applied last cannot be read back to tell. Played on,
    // the store skipped the new chain's records as a fenced writer's and
    // served a, b, c; now it starts from a snapshot the log holds (here
    // none: it fails, saying so).
    log.delete_topic("log");
    write_chain(&log, 9, &["v", "w", "x", "y", "z"]).await;
    log.delete_before("log", 0, 4).await.expect("deletes");
    let failed = played(&ctx, &spec).await.expect_err("no snapshot to start from");
    assert!(matches!(failed, ReplicaError::NoSnapshotAtStart(4)), "{failed}");
}

#[tokio::test]
async fn a_record_past_the_chains_next_fails_playback() {
    let log = MemoryPartitions::default();
    write_chain(&log, 7, &["a", "b", "c"]).await;
    // A player whose chain is at 0 where the log's is at 2: the record at 2
    // is number 3, and nothing after it will continue this chain.
    let hint = Hint { offset: 2, seq: 0, checksum: crate::recovery_log::chain::EMPTY, author: Some(7), bytes: 0 };
    let mut player = Player::open_at(MemoryStore::default(), &hint);
    let reader = log.reader("log", &[(0, Some(2))], 64, Isolation::Committed).expect("a reader");
    let Polled::Records(mut run) = next_event(reader.as_ref(), Duration::from_secs(1)).await.expect("reads") else {
        panic!("a record at 2");
    };
    let r = run.next_record().expect("reads").expect("a record at 2");
    let broken = offer(&mut player, &r, |_, _| {}).expect_err("the chain cannot continue");
    assert!(matches!(broken, LogError::ChainBroken { offset: 2, expected: 1, got: 3 }), "{broken}");
}

#[tokio::test]
async fn a_write_of_the_old_log_landing_first_in_the_new_one_is_skipped() {
    let (log, disk, spec) = (MemoryPartitions::default(), MemoryDisk::default(), spec());
    let ctx = context(&log, &disk);
    write_chain(&log, 7, &["a", "b", "c"]).await;
    played(&ctx, &spec).await.expect("plays");
    // The topic is deleted and created again, and the first record in it is
    // 7's next, queued in its producer while the topic was gone. Before,
    // every player from the new log's start failed on it ("cannot continue
    // the chain"), and no new primary could hand off: the shard was down
    // for good.
    log.delete_topic("log");
    let mut old = crate::recovery_log::chain::Chain::default();
    for body in [Body::HandOff, Body::HandOff, Body::HandOff, Body::HandOff] {
        let record = old.next(7, body);
        old.offer(&record, &record.encode()).expect("continues");
    }
    let late = old.next(7, Body::Transaction { mutations: vec![], offsets: vec![] }).encode();
    log.append("log", 0, b"", Some(&late)).expect("appends").delivered().await.expect("delivered");
    write_chain(&log, 9, &["w", "x"]).await;
    let after = played(&ctx, &spec).await.expect("plays");
    let keys: Vec<&[u8]> = after.iter().map(|(k, _)| k.as_slice()).collect();
    assert_eq!(keys, [b"w", b"x"], "the new log's chain, from its first hand-off");
}

#[tokio::test]
async fn hints_of_a_recreated_log_are_replaced_not_obeyed() {
    let (log, disk, spec) = (MemoryPartitions::default(), MemoryDisk::default(), spec());
    let mut ctx = context(&log, &disk);
    // The old log's newest snapshot, at offset 3: in the new log, offset 3
    // holds a transaction.
    let old = Hint { offset: 3, seq: 2, checksum: 9, author: Some(7), bytes: 10 };
    let board = Board(Mutex::new(Some((Hints { current: old, previous: None }, 1))));
    ctx.hints = Arc::new(board);
    write_chain(&log, 9, &["w", "x", "y", "z"]).await;
    let log = Log::open(&ctx, &spec, spec.recovery_log.as_ref().expect("logged")).await.expect("opens");
    assert_eq!(log.hint, None, "the old hint is not a starting point");
    // A snapshot of the new log at 2 is recorded over it (kept, the old hint
    // refused every snapshot until the new log grew past offset 3).
    let new = Hint { offset: 2, seq: 2, checksum: 5, author: Some(9), bytes: 10 };
    assert!(matches!(log.record_hint(new).await, Ok(None)), "recorded, with nothing to delete before");
    let stored = ctx.hints.read("s").await.expect("reads").map(|(h, _)| h);
    assert_eq!(stored, Some(Hints { current: new, previous: None }));
}

/// A transaction of 3 MiB, past what one record takes under a topic's
/// default limit, goes as parts and a last record in one Kafka transaction:
/// a reader of committed records plays all of it as one transaction.
#[tokio::test]
async fn a_transaction_too_large_for_one_record_is_committed_in_parts_and_played_whole() {
    let log = MemoryPartitions::default();
    let reader = log.reader("log", &[(0, None)], 64, Isolation::Committed).expect("a reader");
    let writer: crate::recovery_log::io::WriterSlot =
        tokio::sync::Mutex::new(log.transactional("kshard/log/0").await.expect("a writer"));
    let clients =
        LogClients { topic: "log", partition: 0, reader: reader.as_ref(), partitions: &log, writer: Some(&writer) };
    let mut player = Player::open(MemoryStore::default()).expect("a player");
    hand_off(&clients, &mut player, 7, KAFKA_TIMEOUT).await.expect("hands off");
    let puts: Vec<Mutation> = (0..30u8).map(|i| Mutation::Put { key: vec![i], value: vec![i; 100 * 1024] }).collect();
    commit(&clients, &mut player, 7, puts, vec![], KAFKA_TIMEOUT).await.expect("commits");
    // Played from the log's start by another player: every key, as one transaction.
    let fresh = log.reader("log", &[(0, None)], 64, Isolation::Committed).expect("a reader");
    let other = LogClients { topic: "log", partition: 0, reader: fresh.as_ref(), partitions: &log, writer: None };
    let mut standby = Player::open(MemoryStore::default()).expect("a player");
    let played = crate::recovery_log::io::play_to_head(&other, &mut standby, KAFKA_TIMEOUT).await.expect("plays");
    let parts = played.iter().filter(|p| **p == Played::TransactionPart).count();
    assert_eq!((parts, played.last()), (3, Some(&Played::Transaction)), "{played:?}");
    assert_eq!(standby.store().scan(None, usize::MAX).expect("scans").len(), 30);
    assert_eq!(standby.chain().seq(), player.chain().seq());
}
