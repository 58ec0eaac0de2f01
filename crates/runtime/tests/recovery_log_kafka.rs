//! A recovery log on the real broker: a primary's hand-off and transactions, a
//! new primary's hand-off, and the old primary's late (zombie) transaction, all
//! produced to one partition; a player reading it into a redb store applies the
//! right branch only, and a player reopened on the store goes on from its
//! checkpoint without replaying anything.

use std::time::{Duration, Instant};

use kshard_kafka::{Admin, ClientSettings, PartitionReader, ReadEvent, RecordWriter, TopicSpec};
use kshard_runtime::recovery_log::chain::{Chain, Skip};
use kshard_runtime::recovery_log::player::{Played, Player};
use kshard_runtime::recovery_log::record::{Body, LogRecord, Mutation, SourceOffset};
use kshard_runtime::store::{RedbStore, Store};
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

/// Reads the partition from `from` to its end, offering every record.
fn play(settings: &ClientSettings, topic: &str, player: &mut Player<RedbStore>) -> Vec<Played> {
    let reader = PartitionReader::new(settings, topic, &[(0, Some(player.next_offset()))]).expect("reader");
    let mut played = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        assert!(Instant::now() < deadline, "the end of the log within 60 s");
        match reader.poll(Duration::from_millis(200)).expect("poll") {
            ReadEvent::Record(r) => {
                let bytes = r.value().expect("records have values").to_vec();
                if let Some(p) = player.offer(r.offset(), &bytes).expect("store") {
                    played.push(p);
                }
            }
            ReadEvent::EndOfPartition { .. } => return played,
            ReadEvent::Idle => {}
        }
    }
}

#[test]
fn a_zombie_primarys_late_write_is_ignored_and_playback_resumes_from_the_checkpoint() {
    let broker = Broker::from_env_or_start();
    let settings = ClientSettings::new(broker.brokers());
    let topic = unique_name("recovery-log");
    let admin = Admin::new(&settings, Duration::from_secs(30)).expect("admin");
    // Recovery logs: delete policy with unlimited retention; the runtime decides what goes.
    let spec = TopicSpec {
        name: topic.clone(),
        partitions: 1,
        replication: 1,
        configs: vec![("cleanup.policy".into(), "delete".into()), ("retention.ms".into(), "-1".into())],
    };
    admin.create_topic(&spec).expect("log topic");

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
    let writer = RecordWriter::new(&settings).expect("producer");
    for r in &records {
        writer.send(&topic, 0, b"", Some(r)).expect("send");
    }
    writer.flush(Duration::from_secs(30)).expect("flush");

    let dir = std::env::temp_dir().join(unique_name("kshard-player"));
    std::fs::create_dir_all(&dir).expect("dir");
    let path = dir.join("store.redb");
    let mut player = Player::open(RedbStore::open(&path).expect("store")).expect("player");
    let played = play(&settings, &topic, &mut player);
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
    let mut player = Player::open(RedbStore::open(&path).expect("store")).expect("player");
    assert_eq!(player.next_offset(), 6);
    assert_eq!(play(&settings, &topic, &mut player), []);
    // And what the new primary writes next applies.
    let mut more = Vec::new();
    append(&mut new_view, new, txn("c", "3", 14), &mut more);
    writer.send(&topic, 0, b"", Some(&more[0])).expect("send");
    writer.flush(Duration::from_secs(30)).expect("flush");
    assert_eq!(play(&settings, &topic, &mut player), [Played::Transaction]);
    assert_eq!(player.store().get(b"c").expect("read"), Some(b"3".to_vec()));
    assert_eq!(LogRecord::decode(&more[0]).expect("decodes").seq, 6);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn racing_hand_offs_each_take_the_log_in_turn_and_every_player_agrees() {
    use kshard_runtime::recovery_log::kafka::{LogClients, hand_off, play_to_head};
    let broker = Broker::from_env_or_start();
    let settings = ClientSettings::new(broker.brokers());
    let topic = unique_name("handoff-log");
    let admin = Admin::new(&settings, Duration::from_secs(30)).expect("admin");
    admin
        .create_topic(&TopicSpec { name: topic.clone(), partitions: 1, replication: 1, configs: vec![] })
        .expect("topic");
    let dir = std::env::temp_dir().join(unique_name("kshard-handoff"));
    std::fs::create_dir_all(&dir).expect("dir");
    let timeout = Duration::from_secs(30);
    let take_over = |author: u64| {
        let settings = settings.clone();
        let topic = topic.clone();
        let path = dir.join(format!("{author}.redb"));
        std::thread::spawn(move || {
            let reader = PartitionReader::new(&settings, &topic, &[(0, None)]).expect("reader");
            let writer = RecordWriter::new(&settings).expect("writer");
            let admin = Admin::new(&settings, Duration::from_secs(30)).expect("admin");
            let log = LogClients { topic: &topic, partition: 0, reader: &reader, writer: &writer, admin: &admin };
            let mut player = Player::open(RedbStore::open(&path).expect("store")).expect("player");
            let attempts = hand_off(&log, &mut player, author, timeout).expect("hand-off");
            // Again, as the holder it is: nothing to append.
            let again = hand_off(&log, &mut player, author, timeout).expect("hand-off");
            (attempts, again, player.chain().clone())
        })
    };
    // Alone on an empty log: one hand-off; again, none.
    let (attempts, again, chain) = take_over(1).join().expect("thread");
    assert_eq!((attempts, chain.author(), chain.seq()), (1, Some(1), 1));
    assert_eq!(again, 0, "holding the log already: nothing appended");
    // Two at once: each takes the log at some point.
    let (b, c) = (take_over(2), take_over(3));
    let (b, c) = (b.join().expect("thread"), c.join().expect("thread"));
    assert!(b.0 >= 1 && c.0 >= 1);
    // A fresh player of the whole log agrees on who holds it last.
    let reader = PartitionReader::new(&settings, &topic, &[(0, None)]).expect("reader");
    let writer = RecordWriter::new(&settings).expect("writer");
    let log = LogClients { topic: &topic, partition: 0, reader: &reader, writer: &writer, admin: &admin };
    let mut player = Player::open(RedbStore::open(&dir.join("fresh.redb")).expect("store")).expect("player");
    play_to_head(&log, &mut player, timeout).expect("plays");
    let last = player.chain().author().expect("an author");
    assert!(last == 2 || last == 3, "the last hand-off is one of the racers: {last}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_primary_commits_through_the_log_until_a_new_one_fences_it() {
    use kshard_runtime::recovery_log::kafka::{LogClients, LogError, commit, hand_off};
    let broker = Broker::from_env_or_start();
    let settings = ClientSettings::new(broker.brokers());
    let topic = unique_name("commit-log");
    let admin = Admin::new(&settings, Duration::from_secs(30)).expect("admin");
    admin
        .create_topic(&TopicSpec { name: topic.clone(), partitions: 1, replication: 1, configs: vec![] })
        .expect("topic");
    let dir = std::env::temp_dir().join(unique_name("kshard-commit"));
    std::fs::create_dir_all(&dir).expect("dir");
    let timeout = Duration::from_secs(30);
    let clients = |name: &str| {
        let reader = PartitionReader::new(&settings, &topic, &[(0, None)]).expect("reader");
        let writer = RecordWriter::new(&settings).expect("writer");
        let player = Player::open(RedbStore::open(&dir.join(format!("{name}.redb"))).expect("store")).expect("player");
        (reader, writer, player)
    };
    let (old_reader, old_writer, mut old) = clients("old");
    let old_log = LogClients { topic: &topic, partition: 0, reader: &old_reader, writer: &old_writer, admin: &admin };
    hand_off(&old_log, &mut old, 1, timeout).expect("hand-off");
    let put = |k: &str, v: &str| vec![Mutation::Put { key: k.as_bytes().to_vec(), value: v.as_bytes().to_vec() }];
    let at = |o: i64| vec![SourceOffset { topic: "src".into(), partition: 0, offset: o }];
    commit(&old_log, &mut old, 1, put("x", "1"), at(5), timeout).expect("commits");
    assert_eq!(old.store().get(b"x").expect("read"), Some(b"1".to_vec()));
    assert_eq!(old.offsets(), at(5).as_slice());

    // A new primary takes over; the old one's next commit is refused.
    let (new_reader, new_writer, mut new) = clients("new");
    let new_log = LogClients { topic: &topic, partition: 0, reader: &new_reader, writer: &new_writer, admin: &admin };
    hand_off(&new_log, &mut new, 2, timeout).expect("hand-off");
    assert_eq!(new.store().get(b"x").expect("read"), Some(b"1".to_vec()), "the new primary played the old one's state");
    let fenced = commit(&old_log, &mut old, 1, put("x", "zombie"), at(6), timeout).expect_err("fenced");
    assert!(matches!(fenced, LogError::Fenced { current: Some(2) }), "{fenced}");
    commit(&new_log, &mut new, 2, put("y", "2"), at(6), timeout).expect("commits");
    // Every player of the log agrees: the zombie's write is nowhere.
    let (reader, writer, mut fresh) = clients("fresh");
    let log = LogClients { topic: &topic, partition: 0, reader: &reader, writer: &writer, admin: &admin };
    kshard_runtime::recovery_log::kafka::play_to_head(&log, &mut fresh, timeout).expect("plays");
    assert_eq!(fresh.store().get(b"x").expect("read"), Some(b"1".to_vec()));
    assert_eq!(fresh.store().get(b"y").expect("read"), Some(b"2".to_vec()));
    let _ = std::fs::remove_dir_all(&dir);
}
