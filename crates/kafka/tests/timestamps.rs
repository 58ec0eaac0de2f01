//! Both record-time readers against the real broker — [`TimestampReader`]
//! (librdkafka) and [`FetchTimes`] (kshard's own Fetch requests, over
//! PLAINTEXT, TLS, SASL PLAIN and SCRAM-SHA-512 with and without TLS): the
//! timestamps of records at given offsets, within the time the test produced
//! them; an offset followed only by a transaction marker reported as
//! read-and-empty; a read that had no time to answer reported as neither —
//! it is not evidence of anything, and the caller must ask again (at scale, a
//! refresh's round can run out of time for some partitions); offsets of one
//! partition in different batches; a wrong password refused with a reason;
//! a user without Read answered nothing.

use kshard_kafka::TopicPartitionOffset;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use kshard_kafka::{
    Admin, Client, ClientSettings, FetchTimes, Protocol, RecordWriter, Sasl, TimesRead, TimestampReader,
    TopicPartition, TopicSpec,
};
use kshard_testkit::{Broker, Listener, unique_name};
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};

fn now_ms() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64)
}

#[test]
#[ignore = "needs the real broker or etcd: scripts/test.sh runs it (or cargo test -- --include-ignored)"]
fn record_times_markers_and_unanswered_reads() {
    let broker = Broker::from_env_or_start();
    let settings = Client::to_brokers(broker.brokers());
    let admin = Admin::new(&settings, Duration::from_secs(30)).expect("admin");
    let topic = unique_name("times");
    let spec = TopicSpec { name: topic.clone(), partitions: 2, replication: 1, configs: vec![] };
    admin.create_topic(&spec).expect("create topic");

    // Partition 0: ten plain records, between `before` and `after`.
    let before = now_ms();
    let writer = RecordWriter::new(&settings).expect("producer");
    for i in 0..10 {
        writer.send(&topic, 0, format!("k{i}").as_bytes(), Some(b"v")).expect("send");
    }
    writer.flush(Duration::from_secs(30)).expect("flush");
    let after = now_ms();

    // Partition 1: five records in a committed transaction: offsets 0-4, then
    // the commit marker at 5.
    let producer: BaseProducer = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", broker.brokers())
        .set("transactional.id", unique_name("times-txn"))
        .create()
        .expect("transactional producer");
    producer.init_transactions(Duration::from_secs(30)).expect("init transactions");
    producer.begin_transaction().expect("begin");
    for i in 0..5 {
        let key = format!("t{i}");
        producer.send(BaseRecord::to(&topic).partition(1).key(&key).payload("v")).expect("send");
    }
    producer.commit_transaction(Duration::from_secs(30)).expect("commit");
    // The coordinator writes the marker after the commit returns.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let second = TopicPartition::new(topic.clone(), 1);
    while admin.watermarks(std::slice::from_ref(&second)).expect("watermarks")[&second].1 < 6 {
        assert!(std::time::Instant::now() < deadline, "the commit marker never arrived");
        std::thread::sleep(Duration::from_millis(50));
    }

    let reader = TimestampReader::new(&settings).expect("reader");
    check_reads(&topic, (before, after), true, |wanted, timeout| reader.read(wanted, timeout).expect("read"));
    // kshard's own Fetch reader (PLAINTEXT) answers the same.
    let fetch = FetchTimes::new(&settings).expect("fetch reader").expect("a PLAINTEXT listener");
    check_reads(&topic, (before, after), false, |wanted, timeout| fetch.read(wanted, timeout).expect("read"));
    // And over TLS, SASL PLAIN and SCRAM-SHA-512, with and without TLS: its
    // own connections, as the admin user (a super user).
    for (listener, mechanism) in [
        (Listener::Ssl, None),
        (Listener::SaslPlaintext, Some("PLAIN")),
        (Listener::SaslPlaintext, Some("SCRAM-SHA-512")),
        (Listener::SaslSsl, Some("SCRAM-SHA-512")),
    ] {
        let secured = secured(&broker, listener, mechanism.map(|m| (m, "admin")), None);
        let fetch = FetchTimes::new(&secured).expect("fetch reader").expect("TLS and SASL are its own");
        check_reads(&topic, (before, after), false, |wanted, timeout| fetch.read(wanted, timeout).expect("read"));
    }
    // A wrong password: an error that says so.
    let wrong = secured(&broker, Listener::SaslSsl, Some(("SCRAM-SHA-512", "admin")), Some("wrong"));
    let e = FetchTimes::new(&wrong)
        .expect("settings")
        .expect("SCRAM")
        .read(&[TopicPartitionOffset::new(topic.clone(), 0, 3)], Duration::from_secs(10));
    let e = e.expect_err("refused");
    assert!(e.to_string().contains("credentials"), "{e}");
    // A user without Read on the topic: no answer, and no claim.
    let nobody = secured(&broker, Listener::SaslPlaintext, Some(("PLAIN", "nobody")), None);
    let read = FetchTimes::new(&nobody)
        .expect("settings")
        .expect("PLAIN")
        .read(&[TopicPartitionOffset::new(topic.clone(), 0, 3)], Duration::from_secs(10));
    let read = read.expect("an answer");
    assert!(read.found.is_empty() && read.empty.is_empty(), "{read:?}");
    // Offsets of one partition in different batches: all answered in one
    // call (the second batch asked for once the first answered).
    let second_before = now_ms();
    for i in 10..20 {
        writer.send(&topic, 0, format!("k{i}").as_bytes(), Some(b"v")).expect("send");
    }
    writer.flush(Duration::from_secs(30)).expect("flush");
    let second_after = now_ms();
    let fetch = FetchTimes::new(&settings).expect("fetch reader").expect("PLAINTEXT");
    let wanted = [
        TopicPartitionOffset::new(topic.clone(), 0, 2),
        TopicPartitionOffset::new(topic.clone(), 0, 15),
        TopicPartitionOffset::new(topic.clone(), 0, 19),
    ];
    let read = fetch.read(&wanted, Duration::from_secs(10)).expect("read");
    for TopicPartitionOffset { offset, .. } in &wanted {
        let time = read
            .found
            .get(&TopicPartitionOffset::new(topic.clone(), 0, *offset))
            .unwrap_or_else(|| panic!("offset {offset}: {read:?}"));
        assert_eq!(time.offset, *offset);
        let (from, to) = if *offset < 10 { (before, after) } else { (second_before, second_after) };
        assert!((from..=to).contains(&time.timestamp_ms), "{time:?} produced between {from} and {to}");
    }
    // What only librdkafka does goes through librdkafka.
    let mut gssapi = secured(&broker, Listener::SaslPlaintext, Some(("PLAIN", "admin")), None).settings().clone();
    gssapi.properties.push(("sasl.mechanism".into(), "GSSAPI".into()));
    assert!(FetchTimes::new(&Client::new(gssapi)).expect("settings").is_none(), "GSSAPI goes through librdkafka");
}

/// A client for `listener`, with SASL (mechanism, user) and that user's
/// password unless another is given.
fn secured(broker: &Broker, listener: Listener, sasl: Option<(&str, &str)>, password: Option<&str>) -> Client {
    let mut settings = ClientSettings::new(broker.address(listener));
    let tls = matches!(listener, Listener::Ssl | Listener::SaslSsl);
    settings.security.protocol = Protocol::new(tls, matches!(listener, Listener::SaslPlaintext | Listener::SaslSsl));
    if tls {
        settings.security.tls.ca = Some(broker.ca_file().into());
    }
    if let Some((mechanism, user)) = sasl {
        let password = password.unwrap_or_else(|| broker.password(user));
        let mechanism = mechanism.parse().expect("a mechanism");
        settings.security.sasl = Some(Sasl { mechanism, username: user.into(), password: password.into() });
    }
    Client::new(settings)
}

/// The answers every reader must give on the test's topic.
/// `slow`: whether a read of 1 ns is too short to answer (librdkafka's; a
/// Fetch on loopback answers within the socket's 1 ms).
fn check_reads(
    topic: &str,
    (before, after): (i64, i64),
    slow: bool,
    read: impl Fn(&[TopicPartitionOffset], Duration) -> TimesRead,
) {
    let topic = topic.to_owned();
    let wanted = [
        TopicPartitionOffset::new(topic.clone(), 0, 3),
        TopicPartitionOffset::new(topic.clone(), 1, 2),
        TopicPartitionOffset::new(topic.clone(), 1, 5),
    ];
    let first = read(&wanted, Duration::from_secs(10));
    let at3 = first.found[&TopicPartitionOffset::new(topic.clone(), 0, 3)];
    assert_eq!(at3.offset, 3);
    assert!((before..=after).contains(&at3.timestamp_ms), "{at3:?} produced between {before} and {after}");
    assert_eq!(first.found[&TopicPartitionOffset::new(topic.clone(), 1, 2)].offset, 2);
    assert!(!first.found.contains_key(&TopicPartitionOffset::new(topic.clone(), 1, 5)), "a marker is no record");
    assert_eq!(
        first.empty,
        vec![TopicPartitionOffset::new(topic.clone(), 1, 5)],
        "read past: only a marker follows offset 5"
    );

    // No time to answer: no record, and no claim that there is none.
    if slow {
        let unanswered = read(&[TopicPartitionOffset::new(topic.clone(), 0, 7)], Duration::from_nanos(1));
        assert!(unanswered.found.is_empty() && unanswered.empty.is_empty(), "{unanswered:?}");
    }
    // Asked again with time, it answers; several offsets of one partition too.
    let again = read(
        &[
            TopicPartitionOffset::new(topic.clone(), 0, 7),
            TopicPartitionOffset::new(topic.clone(), 0, 8),
            TopicPartitionOffset::new(topic.clone(), 0, 9),
        ],
        Duration::from_secs(10),
    );
    assert_eq!(again.found[&TopicPartitionOffset::new(topic.clone(), 0, 7)].offset, 7);
    assert_eq!(again.found[&TopicPartitionOffset::new(topic.clone(), 0, 9)].offset, 9);
    // A topic that does not exist: no answer, no error.
    let missing = read(&[TopicPartitionOffset::new("no-such-topic-anywhere", 0, 1)], Duration::from_secs(2));
    assert!(missing.found.is_empty() && missing.empty.is_empty());
}
