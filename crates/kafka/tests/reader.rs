//! Both partition readers against the real broker — kshard's own
//! ([`ReaderKind::Kshard`]) and librdkafka's ([`ReaderKind::Librdkafka`]) —
//! reading the same partitions must agree record for record: every codec a
//! producer writes (none, gzip, snappy, lz4, zstd), null keys and values,
//! committed, aborted and still-open transactions (a committed-only reader
//! stops at the open one's first offset and reads on once it commits; kshard's
//! reader of every record reads past it, naming each transaction's records
//! and handing out the markers),
//! reading from the earliest offset, from an offset inside a batch and from
//! one that was deleted or lies past the end (the log's start, as
//! `auto.offset.reset=earliest`; past the end, kshard's reader first says the
//! log was truncated under it),
//! partitions added while reading, over TLS and SASL, across a broker
//! that is killed and started again (kshard's reader), and compacted batches. kshard's reader shares one connection
//! per broker among every reader made from the same settings. Every read
//! here waits as an async task does: a poll that does not wait, then
//! [`PartitionReader::readable`] — a reader that failed to say it is
//! readable would never get past its first wait.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use kshard_kafka::{
    Admin, Client, ClientSettings, Isolation, PartitionReader, Protocol, ReadEvent, ReadRecord, ReaderKind,
    RecordWriter, Sasl, TopicSpec, Transactional,
};
use kshard_testkit::{Broker, Listener, unique_name};
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};

/// A record as read: (partition, offset, key, value).
type Read = (i32, i64, Option<Vec<u8>>, Option<Vec<u8>>);

/// What a reader delivered until every partition reached its end: the
/// records, and each partition's next offset at its end (when told).
#[derive(Debug, Default, PartialEq, Eq)]
struct ReadBack {
    records: Vec<Read>,
    ends: BTreeMap<i32, Option<i64>>,
}

/// Polls `reader` without waiting; when it has nothing, waits until it says
/// it is readable (or `deadline` passes), as a runtime replica's task does.
fn poll_as_a_task(reader: &PartitionReader, deadline: Instant) -> ReadEvent<ReadRecord<'_>> {
    let event = reader.poll(Duration::ZERO).expect("poll");
    if let ReadEvent::Idle = event {
        let left = deadline.saturating_duration_since(Instant::now());
        let runtime = tokio::runtime::Builder::new_current_thread().enable_time().build().expect("tokio");
        let _ = runtime.block_on(async { tokio::time::timeout(left, reader.readable()).await });
    }
    event
}

fn with_reader(settings: &ClientSettings, kind: ReaderKind) -> Client {
    let mut s = settings.clone();
    s.reader = kind;
    Client::new(s)
}

/// Reads `start` of `topic` with `reader` until every partition said it
/// reached its end after at least `at_least` records in all.
fn read_to_end(reader: &PartitionReader, partitions: &[i32], at_least: usize) -> ReadBack {
    let mut back = ReadBack::default();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        assert!(Instant::now() < deadline, "{} did not reach the end in 60 s: {back:?}", reader.client());
        match poll_as_a_task(reader, deadline) {
            ReadEvent::Record(r) => {
                back.records.push((
                    r.partition(),
                    r.offset(),
                    r.key().map(<[u8]>::to_vec),
                    r.value().map(<[u8]>::to_vec),
                ));
                back.ends.remove(&r.partition());
            }
            ReadEvent::EndOfPartition { partition, next_offset } => {
                back.ends.insert(partition, next_offset);
            }
            ReadEvent::Idle => {}
        }
        if partitions.iter().all(|p| back.ends.contains_key(p)) && back.records.len() >= at_least {
            back.records.sort();
            return back;
        }
    }
}

fn create(admin: &Admin, name: &str, partitions: i32) -> String {
    let topic = unique_name(name);
    admin
        .create_topic(&TopicSpec { name: topic.clone(), partitions, replication: 1, configs: vec![] })
        .expect("create");
    topic
}

/// Produces `n` records to `partition` with `compression`, keys and values
/// from `i`, every seventh a null value and every eleventh a null key.
fn produce(brokers: &str, topic: &str, partition: i32, compression: &str, n: usize, from: usize) {
    let producer: BaseProducer = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .set("compression.type", compression)
        .set("linger.ms", "20")
        .create()
        .expect("producer");
    for i in from..from + n {
        let key = format!("key-{i}");
        let value = format!("value-{i}-{}", "x".repeat(i % 50));
        let mut record = BaseRecord::<str, str>::to(topic).partition(partition);
        if i % 11 != 0 {
            record = record.key(&key);
        }
        if i % 7 != 0 {
            record = record.payload(&value);
        }
        producer.send(record).expect("send");
    }
    producer.flush(Duration::from_secs(30)).expect("flush");
}

#[test]
#[ignore = "needs the real broker or etcd: scripts/test.sh runs it (or cargo test -- --include-ignored)"]
fn both_readers_agree_on_every_codec_and_start() {
    let broker = Broker::from_env_or_start();
    let settings = Client::to_brokers(broker.brokers());
    let admin = Admin::new(&settings, Duration::from_secs(30)).expect("admin");
    let codecs = ["none", "gzip", "snappy", "lz4", "zstd"];
    let topic = create(&admin, "reader-codecs", codecs.len() as i32);
    for (p, codec) in codecs.iter().enumerate() {
        produce(broker.brokers(), &topic, p as i32, codec, 300, 0);
    }
    let partitions: Vec<i32> = (0..codecs.len() as i32).collect();
    let from_start: Vec<(i32, Option<i64>)> = partitions.iter().map(|&p| (p, None)).collect();
    let mut answers = Vec::new();
    for kind in [ReaderKind::Kshard, ReaderKind::Librdkafka] {
        let s = with_reader(settings.settings(), kind);
        let reader = PartitionReader::new(&s, &topic, &from_start).expect("reader");
        let all = read_to_end(&reader, &partitions, 300 * codecs.len());
        assert_eq!(all.records.len(), 300 * codecs.len(), "{kind:?}");
        // From inside a batch: offset 123 of each partition.
        let inside: Vec<(i32, Option<i64>)> = partitions.iter().map(|&p| (p, Some(123))).collect();
        let reader = PartitionReader::new(&s, &topic, &inside).expect("reader");
        let tail = read_to_end(&reader, &partitions, (300 - 123) * codecs.len());
        assert!(tail.records.iter().all(|r| r.1 >= 123), "{kind:?} read before 123");
        answers.push((kind, all, tail));
    }
    let (_, own_all, own_tail) = &answers[0];
    let (_, rd_all, rd_tail) = &answers[1];
    assert_eq!(own_all.records, rd_all.records, "every record, from the start");
    assert_eq!(own_tail.records, rd_tail.records, "from offset 123");
    // kshard's reader knows each partition's position at its end.
    for p in &partitions {
        assert_eq!(own_all.ends[p], Some(300), "partition {p}");
    }
    let (key, value) = (&own_all.records[1].2, &own_all.records[1].3);
    assert_eq!((key.as_deref(), value.as_deref()), (Some(&b"key-1"[..]), Some(&b"value-1-x"[..])));
    assert!(own_all.records.iter().any(|r| r.2.is_none()) && own_all.records.iter().any(|r| r.3.is_none()), "nulls");
}

#[test]
#[ignore = "needs the real broker or etcd: scripts/test.sh runs it (or cargo test -- --include-ignored)"]
fn transactions_committed_aborted_and_open() {
    let broker = Broker::from_env_or_start();
    let settings = Client::to_brokers(broker.brokers());
    let admin = Admin::new(&settings, Duration::from_secs(30)).expect("admin");
    let topic = create(&admin, "reader-txn", 1);
    let producer: BaseProducer = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", broker.brokers())
        .set("transactional.id", unique_name("reader-txn"))
        .set("compression.type", "lz4")
        .create()
        .expect("transactional producer");
    let t = Duration::from_secs(30);
    producer.init_transactions(t).expect("init");
    let send = |tag: &str, n: usize| {
        for i in 0..n {
            let key = format!("{tag}-{i}");
            producer.send(BaseRecord::<str, str>::to(&topic).partition(0).key(&key).payload("v")).expect("send");
        }
        producer.flush(t).expect("flush");
    };
    producer.begin_transaction().expect("begin");
    send("committed", 5);
    producer.commit_transaction(t).expect("commit");
    producer.begin_transaction().expect("begin");
    send("aborted", 4);
    producer.abort_transaction(t).expect("abort");
    // A plain producer writes between the transactions.
    produce(broker.brokers(), &topic, 0, "none", 3, 1);
    producer.begin_transaction().expect("begin");
    send("open", 2);

    // Committed 0-4, marker 5, aborted 6-9, marker 10, plain 11-13, open 14-15.
    let keys = |back: &ReadBack| -> Vec<String> {
        back.records.iter().map(|r| String::from_utf8_lossy(r.2.as_deref().unwrap_or_default()).into_owned()).collect()
    };
    let mut first = Vec::new();
    for kind in [ReaderKind::Kshard, ReaderKind::Librdkafka] {
        let reader =
            PartitionReader::new(&with_reader(settings.settings(), kind), &topic, &[(0, None)]).expect("reader");
        let back = read_to_end(&reader, &[0], 8);
        let expected: Vec<String> =
            (0..5).map(|i| format!("committed-{i}")).chain((1..4).map(|i| format!("key-{i}"))).collect();
        assert_eq!(keys(&back), expected, "{kind:?}: committed and plain records, nothing aborted or open");
        first.push((kind, back, reader));
    }
    assert_eq!(first[0].1.records, first[1].1.records);
    assert_eq!(first[0].1.ends[&0], Some(14), "kshard's reader stops at the open transaction");
    // Reading uncommitted, kshard's reader hands out every record to the high
    // watermark, each transaction's with its producer, and the markers.
    let every =
        PartitionReader::with_isolation(&settings, &topic, &[(0, None)], 1024, Isolation::Uncommitted).expect("reader");
    assert_eq!(every.isolation(), Isolation::Uncommitted);
    let (tags, end) = tagged_to_end(&every, 16);
    let producer_id = match tags.first() {
        Some((0, Some(Transactional::Record { producer_id }))) => *producer_id,
        other => panic!("the first record is the committed transaction's: {other:?}"),
    };
    let record = Some(Transactional::Record { producer_id });
    let marker = |committed| Some(Transactional::Marker { producer_id, committed });
    let mut expected: Vec<(i64, Option<Transactional>)> = (0..5).map(|o| (o, record)).collect();
    expected.push((5, marker(true)));
    expected.extend((6..10).map(|o| (o, record)));
    expected.push((10, marker(false)));
    expected.extend((11..14).map(|o| (o, None)));
    expected.extend((14..16).map(|o| (o, record)));
    assert_eq!(tags, expected, "every record, tagged");
    assert_eq!(end, 16, "to the high watermark, past the open transaction");
    let asked = PartitionReader::with_isolation(
        &with_reader(settings.settings(), ReaderKind::Librdkafka),
        &topic,
        &[(0, None)],
        1024,
        Isolation::Uncommitted,
    )
    .expect("reader");
    assert_eq!(asked.isolation(), Isolation::Committed, "librdkafka hides producers and markers");
    producer.commit_transaction(t).expect("commit");
    for (kind, _, reader) in &first {
        let back = read_to_end(reader, &[0], 2);
        assert_eq!(keys(&back), vec!["open-0", "open-1"], "{kind:?} after the commit");
    }
    assert_eq!(tagged_to_end(&every, 1), (vec![(16, marker(true))], 17), "the open transaction's marker");
}

/// Reads with `reader` until its partition's end after at least `at_least`
/// records: each record's offset and part in a transaction, and the end.
fn tagged_to_end(reader: &PartitionReader, at_least: usize) -> (Vec<(i64, Option<Transactional>)>, i64) {
    let mut tags = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        assert!(Instant::now() < deadline, "did not reach the end in 60 s: {tags:?}");
        match poll_as_a_task(reader, deadline) {
            ReadEvent::Record(r) => tags.push((r.offset(), r.transactional())),
            ReadEvent::EndOfPartition { next_offset: Some(end), .. } if tags.len() >= at_least => return (tags, end),
            _ => {}
        }
    }
}

#[test]
#[ignore = "needs the real broker or etcd: scripts/test.sh runs it (or cargo test -- --include-ignored)"]
fn deleted_offsets_added_partitions_and_one_connection() {
    let broker = Broker::from_env_or_start();
    let settings = Client::to_brokers(broker.brokers());
    let admin = Admin::new(&settings, Duration::from_secs(30)).expect("admin");
    let topic = create(&admin, "reader-deleted", 3);
    for p in 0..3 {
        produce(broker.brokers(), &topic, p, "none", 20, 0);
    }
    admin.delete_records(&topic, 0, 10).expect("delete records");
    let other = create(&admin, "reader-other", 1);
    produce(broker.brokers(), &other, 0, "zstd", 5, 0);
    for kind in [ReaderKind::Kshard, ReaderKind::Librdkafka] {
        let s = with_reader(settings.settings(), kind);
        // Offset 3 of partition 0 was deleted: the log's start, 10.
        let reader = PartitionReader::new(&s, &topic, &[(0, Some(3))]).expect("reader");
        let back = read_to_end(&reader, &[0], 10);
        let offsets: Vec<i64> = back.records.iter().map(|r| r.1).collect();
        assert_eq!(offsets, (10..20).collect::<Vec<_>>(), "{kind:?}");
        reader.add_partitions(&topic, &[(1, Some(15)), (2, None)]).expect("add");
        let back = read_to_end(&reader, &[1, 2], 25);
        assert_eq!(back.records.iter().filter(|r| r.0 == 1).count(), 5, "{kind:?}");
        assert_eq!(back.records.iter().filter(|r| r.0 == 2).count(), 20, "{kind:?}");
        // Past the end (a topic created again under a reader, say): out of
        // range, so from the log's start, also while another reader of the
        // same partition is at its end. kshard's reader first says the log
        // was truncated under it (what it built from the partition is to be
        // dropped); a deleted offset (above) is no such error.
        let beyond = PartitionReader::new(&s, &topic, &[(1, Some(500))]).expect("reader");
        if kind == ReaderKind::Kshard {
            let deadline = Instant::now() + Duration::from_secs(60);
            let told = loop {
                assert!(Instant::now() < deadline, "no word of the truncation in 60 s");
                match beyond.poll(Duration::from_millis(500)) {
                    Err(e) => break e,
                    Ok(ReadEvent::Idle) => {}
                    Ok(other) => panic!("{other:?} before the truncation was told"),
                }
            };
            assert!(
                matches!(told, kshard_kafka::Error::Truncated { partition: 1, offset: 500, log_start: 0, .. }),
                "{told}"
            );
        }
        let back = read_to_end(&beyond, &[1], 20);
        assert_eq!(back.records.iter().map(|r| r.1).collect::<Vec<_>>(), (0..20).collect::<Vec<_>>(), "{kind:?}");
        drop(beyond);
        // Another reader made from the same settings, of another topic.
        let second = PartitionReader::new(&s, &other, &[(0, None)]).expect("reader");
        assert_eq!(read_to_end(&second, &[0], 5).records.len(), 5, "{kind:?}");
        if kind == ReaderKind::Kshard {
            // One broker: one fetch connection and one for metadata, for both readers.
            assert_eq!(reader.shared_connections(), Some(2));
            assert_eq!(second.shared_connections(), Some(2));
        }
    }
}

#[test]
#[ignore = "needs the real broker or etcd: scripts/test.sh runs it (or cargo test -- --include-ignored)"]
fn over_tls_and_sasl() {
    let broker = Broker::from_env_or_start();
    let settings = Client::to_brokers(broker.brokers());
    let admin = Admin::new(&settings, Duration::from_secs(30)).expect("admin");
    let topic = create(&admin, "reader-secure", 1);
    produce(broker.brokers(), &topic, 0, "snappy", 50, 0);
    for (listener, sasl) in [
        (Listener::Ssl, None),
        (Listener::SaslPlaintext, Some(("PLAIN", "admin"))),
        (Listener::SaslSsl, Some(("SCRAM-SHA-512", "admin"))),
    ] {
        let mut s = ClientSettings::new(broker.address(listener));
        s.security.protocol = Protocol::new(listener != Listener::SaslPlaintext, sasl.is_some());
        if listener != Listener::SaslPlaintext {
            s.security.tls.ca = Some(broker.ca_file().into());
        }
        if let Some((mechanism, user)) = sasl {
            let mechanism = mechanism.parse().expect("a mechanism");
            s.security.sasl = Some(Sasl { mechanism, username: user.into(), password: broker.password(user).into() });
        }
        for (kind, client) in [(ReaderKind::Kshard, "kshard"), (ReaderKind::Librdkafka, "librdkafka")] {
            let reader = PartitionReader::new(&with_reader(&s, kind), &topic, &[(0, None)]).expect("reader");
            assert_eq!(reader.client(), client, "{listener:?}");
            let back = read_to_end(&reader, &[0], 50);
            assert_eq!(back.records.len(), 50, "{listener:?}, {client}");
        }
    }
}

#[test]
#[ignore = "needs the real broker or etcd: scripts/test.sh runs it (or cargo test -- --include-ignored)"]
fn reads_on_across_a_broker_restart() {
    let broker = Broker::start_private(&[]);
    let settings = Client::to_brokers(broker.brokers());
    let admin = Admin::new(&settings, Duration::from_secs(30)).expect("admin");
    let topic = create(&admin, "reader-restart", 2);
    for p in 0..2 {
        produce(broker.brokers(), &topic, p, "gzip", 100, 0);
    }
    let reader = PartitionReader::new(&settings, &topic, &[(0, None), (1, None)]).expect("reader");
    assert_eq!(read_to_end(&reader, &[0, 1], 200).records.len(), 200);
    broker.kill();
    broker.resume();
    let writer = RecordWriter::new(&settings).expect("writer");
    for p in 0..2 {
        for i in 0..10 {
            writer.send(&topic, p, format!("after-{i}").as_bytes(), Some(b"v")).expect("send");
        }
    }
    writer.flush(Duration::from_secs(60)).expect("flush");
    let back = read_to_end(&reader, &[0, 1], 20);
    let offsets: Vec<(i32, i64)> = back.records.iter().map(|r| (r.0, r.1)).collect();
    let expected: Vec<(i32, i64)> = (0..2).flat_map(|p| (100..110).map(move |o| (p, o))).collect();
    assert_eq!(offsets, expected, "every record written after the restart, once");
}

#[test]
#[ignore = "needs the real broker or etcd: scripts/test.sh runs it (or cargo test -- --include-ignored)"]
fn both_readers_agree_on_compacted_batches() {
    // The cleaner rewrites batches without the records a later one of the
    // same key replaced: offsets then have gaps inside and between batches,
    // and a batch's last offset may be one it no longer holds.
    let broker = Broker::from_env_or_start();
    let settings = Client::to_brokers(broker.brokers());
    let admin = Admin::new(&settings, Duration::from_secs(30)).expect("admin");
    let topic = unique_name("reader-compacted");
    let configs = [
        ("cleanup.policy", "compact"),
        ("segment.ms", "1000"),
        ("min.cleanable.dirty.ratio", "0.01"),
        ("min.compaction.lag.ms", "0"),
        ("delete.retention.ms", "3600000"),
    ];
    let spec = TopicSpec {
        name: topic.clone(),
        partitions: 2,
        replication: 1,
        configs: configs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect(),
    };
    admin.create_topic(&spec).expect("create");
    // Half the records superseded by later ones of the same key; partition
    // 1's batches compressed (the cleaner recompresses them).
    let producers: Vec<(i32, BaseProducer)> = [(0, "none"), (1, "zstd")]
        .into_iter()
        .map(|(partition, codec)| {
            let producer = rdkafka::ClientConfig::new()
                .set("bootstrap.servers", broker.brokers())
                .set("compression.type", codec)
                .set("linger.ms", "20")
                .create()
                .expect("producer");
            (partition, producer)
        })
        .collect();
    let write = |round: usize| {
        for (partition, producer) in &producers {
            for i in 0..200 {
                // Every other record's key is its own (kept), the rest
                // share ten keys (superseded): gaps between kept records.
                let key = if i % 2 == 0 { format!("own-{round}-{i}") } else { format!("shared-{}", i % 20) };
                let value = format!("round-{round}-{i}");
                producer
                    .send(BaseRecord::<str, str>::to(&topic).partition(*partition).key(&key).payload(&value))
                    .expect("send");
            }
            producer.flush(Duration::from_secs(30)).expect("flush");
        }
        400
    };
    // Writes over several seconds, so that segments roll and become cleanable.
    let partitions = [0, 1];
    let from_start: Vec<(i32, Option<i64>)> = partitions.iter().map(|&p| (p, None)).collect();
    let deadline = Instant::now() + Duration::from_secs(90);
    let (mut round, mut written) = (0, 0);
    let compacted = loop {
        written += write(round);
        round += 1;
        std::thread::sleep(Duration::from_millis(1500));
        let reader = PartitionReader::new(&with_reader(settings.settings(), ReaderKind::Kshard), &topic, &from_start)
            .expect("reader");
        let back = read_to_end(&reader, &partitions, 0);
        if back.records.len() < written {
            break back;
        }
        assert!(Instant::now() < deadline, "the cleaner compacted nothing of {written} records");
    };
    let gaps = compacted.records.windows(2).filter(|w| w[0].0 == w[1].0 && w[1].1 != w[0].1 + 1).count();
    assert!(gaps > 0, "compaction left offsets with gaps");
    // Both readers, the same records, from the start and from an offset the
    // cleaner removed (the next one kept).
    let removed =
        compacted.records.windows(2).find(|w| w[0].0 == w[1].0 && w[1].1 > w[0].1 + 1).map(|w| (w[0].0, w[0].1 + 1));
    let (gap_partition, gap_offset) = removed.expect("a removed offset");
    let mut answers = Vec::new();
    for kind in [ReaderKind::Kshard, ReaderKind::Librdkafka] {
        let s = with_reader(settings.settings(), kind);
        let all = read_to_end(&PartitionReader::new(&s, &topic, &from_start).expect("reader"), &partitions, 0);
        let at_gap = PartitionReader::new(&s, &topic, &[(gap_partition, Some(gap_offset))]).expect("reader");
        let after = read_to_end(&at_gap, &[gap_partition], 0);
        answers.push((all, after));
    }
    assert_eq!(answers[0].0.records, answers[1].0.records, "every record kept, from the start");
    assert_eq!(answers[0].1.records, answers[1].1.records, "from an offset compacted away");
    assert!(answers[0].1.records.first().is_some_and(|r| r.1 > gap_offset), "read on from the next record kept");
    // Every key is there: each record's own, and the ten shared ones.
    for partition in partitions {
        let keys: std::collections::BTreeSet<_> =
            answers[0].0.records.iter().filter(|r| r.0 == partition).filter_map(|r| r.2.clone()).collect();
        assert_eq!(keys.len(), 100 * round + 10, "partition {partition} keeps every key");
    }
}
