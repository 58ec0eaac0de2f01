//! A recovery log on the real broker: a primary's hand-off and transactions, a
//! new primary's hand-off, and the old primary's late (zombie) transaction, all
//! produced to one partition; a player reading it into a redb store applies the
//! right branch only, and a player reopened on the store goes on from its
//! checkpoint without replaying anything. A record the broker refuses is
//! reported as that error, and its writer keeps the log.

use std::path::PathBuf;
use std::time::Duration;

use kshard_kafka::{Admin, Client, PartitionReader, RecordWriter, TopicSpec};
use kshard_runtime::partitions::KafkaPartitions;
use kshard_runtime::recovery_log::{Body, LogRecord, Mutation, SourceOffset};
use kshard_runtime::recovery_log::{Chain, Skip};
use kshard_runtime::recovery_log::{LogClients, play_to_head};
use kshard_runtime::recovery_log::{Played, Player};
use kshard_runtime::{RedbStore, Store};
use kshard_testkit::{Broker, unique_name};

fn txn(key: &str, value: &str, offset: i64) -> Body {
    Body::Transaction {
        mutations: vec![Mutation::Put { key: key.as_bytes().to_vec(), value: value.as_bytes().to_vec() }],
        offsets: vec![SourceOffset { topic: "sums".into(), partition: 0, offset }],
    }
}

/// Appends a record built on `view` and moves the view past it.
fn append(view: &mut Chain, author: u64, body: Body, out: &mut Vec<Vec<u8>>) {
    let record = view.next(author, body);
    let bytes = record.encode();
    view.offer(&record, &bytes).expect("continues the writer's own view");
    out.push(bytes);
}

const TIMEOUT: Duration = Duration::from_secs(30);

/// A recovery log of the test's own on the real broker (one partition,
/// delete policy with unlimited retention: the runtime decides what goes), and
/// a directory for the replicas' stores.
struct TestLog {
    /// Keeps the broker (a private one when no KSHARD_BROKERS) for the test's life.
    _broker: Broker,
    settings: Client,
    topic: String,
    dir: PathBuf,
}

impl TestLog {
    fn new(name: &str) -> Self {
        Self::with_configs(name, &[])
    }

    /// A log topic with extra topic configs.
    fn with_configs(name: &str, extra: &[(&str, &str)]) -> Self {
        let broker = Broker::from_env_or_start();
        let settings = Client::to_brokers(broker.brokers());
        let topic = unique_name(name);
        let admin = Admin::new(&settings, TIMEOUT).expect("admin");
        let spec = TopicSpec {
            name: topic.clone(),
            partitions: 1,
            replication: 1,
            configs: [("cleanup.policy", "delete"), ("retention.ms", "-1")]
                .iter()
                .chain(extra)
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
        };
        admin.create_topic(&spec).expect("log topic");
        let dir = std::env::temp_dir().join(unique_name(&format!("kshard-{name}")));
        std::fs::create_dir_all(&dir).expect("dir");
        TestLog { _broker: broker, settings, topic, dir }
    }

    /// A replica's clients of the log, and a player on its store `name`.
    fn replica(&self, name: &str) -> (Clients, Player<RedbStore>) {
        (Clients::new(&self.settings, &self.topic), self.player(name))
    }

    /// A player on the store `name` (reopened when it exists).
    fn player(&self, name: &str) -> Player<RedbStore> {
        Player::open(RedbStore::open(&self.dir.join(format!("{name}.redb"))).expect("store")).expect("player")
    }
}

impl Drop for TestLog {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// One replica's reader and partitions of the log, and a writer of records
/// made by hand.
struct Clients {
    topic: String,
    reader: PartitionReader,
    partitions: KafkaPartitions,
    writer: RecordWriter,
}

impl Clients {
    fn new(settings: &Client, topic: &str) -> Self {
        Clients {
            topic: topic.to_owned(),
            reader: PartitionReader::new(settings, topic, &[(0, None)]).expect("reader"),
            partitions: KafkaPartitions::new(settings.clone(), TIMEOUT),
            writer: RecordWriter::new(settings).expect("writer"),
        }
    }

    fn log(&self) -> LogClients<'_> {
        LogClients {
            topic: &self.topic,
            partition: 0,
            reader: &self.reader,
            partitions: &self.partitions,
            writer: None,
        }
    }

    /// Reads to the end of the log into `player`.
    async fn play(&self, player: &mut Player<RedbStore>) -> Vec<Played> {
        play_to_head(&self.log(), player, TIMEOUT).await.expect("plays to the end of the log")
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the real broker or etcd: scripts/test.sh runs it (or cargo test -- --include-ignored)"]
async fn a_zombie_primarys_late_write_is_ignored_and_playback_resumes_from_the_checkpoint() {
    let log = TestLog::new("recovery-log");
    let (clients, mut player) = log.replica("store");

    let (old, new) = (0x01d, 0x2e7);
    let mut records = Vec::new();
    let mut old_view = Chain::default();
    append(&mut old_view, old, Body::HandOff, &mut records);
    append(&mut old_view, old, txn("a", "1", 10), &mut records);
    append(&mut old_view, old, txn("b", "2", 11), &mut records);
    // The new primary read the log so far and hands off.
    let mut new_view = old_view.clone();
    append(&mut new_view, new, Body::HandOff, &mut records);
    // The old primary, not knowing, writes once more on its own view.
    append(&mut old_view, old, txn("zombie", "x", 12), &mut records);
    append(&mut new_view, new, txn("a", "9", 13), &mut records);
    let writer = &clients.writer;
    for r in &records {
        writer.send(&log.topic, 0, b"", Some(r)).expect("send");
    }
    writer.flush(TIMEOUT).expect("flush");

    let played = clients.play(&mut player).await;
    assert_eq!(
        played,
        [
            Played::HandOff { author: old },
            Played::Transaction,
            Played::Transaction,
            Played::HandOff { author: new },
            Played::Skipped(Skip::NotNext { expected: 5, got: 4 }),
            Played::Transaction,
        ]
    );
    let store = player.into_store();
    assert_eq!(store.get(b"a").expect("read"), Some(b"9".to_vec()));
    assert_eq!(store.get(b"b").expect("read"), Some(b"2".to_vec()));
    assert_eq!(store.get(b"zombie").expect("read"), None, "the zombie's write is ignored");
    let checkpoint = store.checkpoint().expect("read").expect("a checkpoint");
    assert_eq!(checkpoint.log.next_offset, 6);
    assert_eq!(checkpoint.log.author, Some(new));
    assert_eq!(checkpoint.offsets, [SourceOffset { topic: "sums".into(), partition: 0, offset: 13 }]);
    drop(store);

    // Reopened on its store, a player goes on from the checkpoint: nothing to replay.
    let mut player = log.player("store");
    assert_eq!(player.next_offset(), 6);
    assert_eq!(clients.play(&mut player).await, []);
    // And what the new primary writes next applies.
    let mut more = Vec::new();
    append(&mut new_view, new, txn("c", "3", 14), &mut more);
    writer.send(&log.topic, 0, b"", Some(&more[0])).expect("send");
    writer.flush(TIMEOUT).expect("flush");
    assert_eq!(clients.play(&mut player).await, [Played::Transaction]);
    assert_eq!(player.store().get(b"c").expect("read"), Some(b"3".to_vec()));
    assert_eq!(LogRecord::decode(&more[0]).expect("decodes").seq, 6);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the real broker or etcd: scripts/test.sh runs it (or cargo test -- --include-ignored)"]
async fn racing_hand_offs_each_take_the_log_in_turn_and_every_player_agrees() {
    use kshard_runtime::recovery_log::hand_off;
    let log = TestLog::new("handoff-log");
    let take_over = |author: u64| {
        let (clients, mut player) = log.replica(&author.to_string());
        tokio::spawn(async move {
            let attempts = hand_off(&clients.log(), &mut player, author, TIMEOUT).await.expect("hand-off");
            // Again, as the holder it is: nothing to append.
            let again = hand_off(&clients.log(), &mut player, author, TIMEOUT).await.expect("hand-off");
            (attempts, again, player.chain().clone())
        })
    };
    // Alone on an empty log: one hand-off; again, none.
    let (attempts, again, chain) = take_over(1).await.expect("task");
    assert_eq!((attempts, chain.author(), chain.seq()), (1, Some(1), 1));
    assert_eq!(again, 0, "holding the log already: nothing appended");
    // Two at once: each takes the log at some point.
    let (b, c) = (take_over(2), take_over(3));
    let (b, c) = (b.await.expect("task"), c.await.expect("task"));
    assert!(b.0 >= 1 && c.0 >= 1);
    // A fresh player of the whole log agrees on who holds it last, and
    // with that racer on the whole chain (its sequence number and checksum):
    // nothing the other appended counts after it. The other racer's chain
    // ends earlier on the same log.
    let (clients, mut player) = log.replica("fresh");
    clients.play(&mut player).await;
    let fresh = player.chain().clone();
    let last = fresh.author().expect("an author");
    let (holder, other) = match last {
        2 => (&b, &c),
        3 => (&c, &b),
        _ => panic!("the last hand-off is one of the racers: {last}"),
    };
    assert_eq!(holder.2, fresh, "the holder and a fresh player agree on the chain");
    assert!(other.2.seq() < fresh.seq(), "the other racer's hand-off came before: {:?} {fresh:?}", other.2);
    // Each hand-off that counted is one a racer appended (a racer's that
    // lost its place in the chain was skipped and appended again).
    assert!(fresh.seq() >= 2 && fresh.seq() <= 1 + u64::from(b.0 + c.0), "{fresh:?} after {} and {}", b.0, c.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the real broker or etcd: scripts/test.sh runs it (or cargo test -- --include-ignored)"]
async fn a_primary_commits_through_the_log_until_a_new_one_fences_it() {
    use kshard_runtime::recovery_log::{LogError, commit, hand_off};
    let log = TestLog::new("commit-log");
    let (old_clients, mut old) = log.replica("old");
    hand_off(&old_clients.log(), &mut old, 1, TIMEOUT).await.expect("hand-off");
    let put = |k: &str, v: &str| vec![Mutation::Put { key: k.as_bytes().to_vec(), value: v.as_bytes().to_vec() }];
    let at = |o: i64| vec![SourceOffset { topic: "src".into(), partition: 0, offset: o }];
    commit(&old_clients.log(), &mut old, 1, put("x", "1"), at(5), TIMEOUT).await.expect("commits");
    assert_eq!(old.store().get(b"x").expect("read"), Some(b"1".to_vec()));
    assert_eq!(old.offsets(), at(5).as_slice());

    // A new primary takes over; the old one's next commit is refused.
    let (new_clients, mut new) = log.replica("new");
    hand_off(&new_clients.log(), &mut new, 2, TIMEOUT).await.expect("hand-off");
    assert_eq!(new.store().get(b"x").expect("read"), Some(b"1".to_vec()), "the new primary played the old one's state");
    let fenced = commit(&old_clients.log(), &mut old, 1, put("x", "zombie"), at(6), TIMEOUT).await.expect_err("fenced");
    assert!(matches!(fenced, LogError::Fenced { current: Some(2) }), "{fenced}");
    commit(&new_clients.log(), &mut new, 2, put("y", "2"), at(6), TIMEOUT).await.expect("commits");
    // Every player of the log agrees: the zombie's write is nowhere.
    let (clients, mut fresh) = log.replica("fresh");
    clients.play(&mut fresh).await;
    assert_eq!(fresh.store().get(b"x").expect("read"), Some(b"1".to_vec()));
    assert_eq!(fresh.store().get(b"y").expect("read"), Some(b"2".to_vec()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the real broker or etcd: scripts/test.sh runs it (or cargo test -- --include-ignored)"]
async fn a_record_the_broker_refuses_is_that_error_not_a_fence() {
    use kshard_runtime::recovery_log::{LogError, commit, hand_off};
    // The topic takes records of at most 4 KB.
    let log = TestLog::with_configs("refused-log", &[("max.message.bytes", "4096")]);
    let (clients, mut primary) = log.replica("primary");
    hand_off(&clients.log(), &mut primary, 7, TIMEOUT).await.expect("hand-off");
    let put = |k: &str, size: usize| vec![Mutation::Put { key: k.as_bytes().to_vec(), value: vec![b'v'; size] }];
    let at = |o: i64| vec![SourceOffset { topic: "src".into(), partition: 0, offset: o }];
    let refused =
        commit(&clients.log(), &mut primary, 7, put("big", 64 * 1024), at(1), TIMEOUT).await.expect_err("too large");
    assert!(
        matches!(&refused, LogError::Kafka { step, .. } if step.contains("appending")),
        "the delivery's own error, not a fence: {refused}"
    );
    assert!(refused.to_string().to_lowercase().contains("too large"), "{refused}");
    // Still the log's writer: the next transaction goes through.
    commit(&clients.log(), &mut primary, 7, put("small", 10), at(2), TIMEOUT).await.expect("commits");
    assert_eq!(primary.store().get(b"small").expect("read").map(|v| v.len()), Some(10));
    assert_eq!(primary.store().get(b"big").expect("read"), None);
}

/// Sizes agree end to end on the real broker (whose default segments are
/// 1 MiB): a log topic made by the runtime takes a 10 MiB record, which a
/// new player reads back; a record past what the log takes is refused
/// before it is written, the log and the chain as they were, and the next
/// commit goes on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the real broker or etcd: scripts/test.sh runs it (or cargo test -- --include-ignored)"]
async fn a_ten_mib_record_is_written_and_read_and_a_larger_one_refused_before_it_is_written() {
    use kshard_runtime::partitions::ensure_log_topic;
    use kshard_runtime::recovery_log::{LogError, commit, hand_off};
    let broker = Broker::from_env_or_start();
    let settings = Client::to_brokers(broker.brokers());
    let topic = unique_name("large-log");
    let admin = Admin::new(&settings, TIMEOUT).expect("admin");
    assert!(ensure_log_topic(&admin, &topic, 1, &[]).expect("created as the runtime makes it"));
    let dir = std::env::temp_dir().join(unique_name("kshard-large-log"));
    std::fs::create_dir_all(&dir).expect("dir");
    let player =
        |name: &str| Player::open(RedbStore::open(&dir.join(format!("{name}.redb"))).expect("store")).expect("player");
    let clients = Clients::new(&settings, &topic);
    let mut primary = player("primary");
    hand_off(&clients.log(), &mut primary, 1, TIMEOUT).await.expect("hand-off");
    let put = |k: &str, size: usize| vec![Mutation::Put { key: k.as_bytes().to_vec(), value: vec![7u8; size] }];
    let at = |o: i64| vec![SourceOffset { topic: "src".into(), partition: 0, offset: o }];
    commit(&clients.log(), &mut primary, 1, put("large", 10 << 20), at(1), TIMEOUT).await.expect("a 10 MiB record");
    let end = kshard_runtime::partitions::Partitions::ends(&clients.partitions, &[(topic.clone(), 0)])
        .await
        .expect("ends")[&(topic.clone(), 0)];
    let refused = commit(&clients.log(), &mut primary, 1, put("too-large", 17 << 20), at(2), TIMEOUT).await;
    assert!(matches!(refused, Err(LogError::TooLarge { .. })), "{refused:?}");
    let after = kshard_runtime::partitions::Partitions::ends(&clients.partitions, &[(topic.clone(), 0)])
        .await
        .expect("ends")[&(topic.clone(), 0)];
    assert_eq!(after, end, "nothing was written");
    commit(&clients.log(), &mut primary, 1, put("small", 10), at(3), TIMEOUT).await.expect("the chain goes on");
    // A new player reads it all back.
    let reader = Clients::new(&settings, &topic);
    let mut fresh = player("fresh");
    reader.play(&mut fresh).await;
    assert_eq!(fresh.store().get(b"large").expect("read").map(|v| v.len()), Some(10 << 20));
    assert_eq!(fresh.store().get(b"too-large").expect("read"), None);
    assert_eq!(fresh.offsets(), at(3).as_slice());
    let _ = std::fs::remove_dir_all(&dir);
}
