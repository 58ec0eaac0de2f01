//! kshard's own writer ([`Writer`], [`Producer`]) on the real broker:
//! batches land in order with their keys, values, headers and timestamps;
//! a committed transaction is read whole by a `read_committed` reader and
//! an aborted one never; a second producer of a transactional id fences the
//! first — the broker aborts the first's open transaction and refuses its
//! writes; hundreds of transactions back to back, across two topics.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use bytes::Bytes;
use kshard_kafka::{
    Admin, Client, Isolation, OutBatch, OutRecord, PartitionReader, ReadEvent, TRANSACTION_TIMEOUT, TopicPartition,
    TopicSpec, Writer,
};
use kshard_testkit::{Broker, unique_name};

const TIMEOUT: Duration = Duration::from_secs(30);

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a runtime")
}

fn topic(admin: &Admin, name: &str, partitions: i32) {
    admin
        .create_topic(&TopicSpec { name: name.to_owned(), partitions, replication: 1, configs: vec![] })
        .expect("creates");
}

fn record(key: &str, value: &str) -> OutRecord {
    OutRecord::new(Some(key.as_bytes()), Some(value.as_bytes()))
}

/// Every record of `topic`'s `partitions` a reader of `isolation` reads, up
/// to each partition's end: (partition, offset, key, value), in order.
fn read_all(
    settings: &Client,
    topic: &str,
    partitions: &[i32],
    isolation: Isolation,
) -> Vec<(i32, i64, String, String)> {
    // A committed read's end is the last stable offset, which trails a
    // commit until the broker has written its markers: read on to each
    // partition's high watermark, where the test's transactions all ended.
    let admin = Admin::connect(settings, TIMEOUT).expect("admin");
    let asked: Vec<TopicPartition> =
        partitions.iter().map(|p| TopicPartition { topic: topic.to_owned(), partition: *p }).collect();
    let highs = admin.watermarks(&asked).expect("watermarks");
    let high = |partition: i32| highs.iter().find(|(tp, _)| tp.partition == partition).map_or(0, |(_, (_, h))| *h);
    let start: Vec<(i32, Option<i64>)> = partitions.iter().map(|p| (*p, None)).collect();
    let reader = PartitionReader::with_isolation(settings, topic, &start, 1024, isolation).expect("a reader");
    let mut ended = std::collections::BTreeSet::new();
    let mut out = Vec::new();
    let deadline = Instant::now() + TIMEOUT;
    while ended.len() < partitions.len() {
        assert!(Instant::now() < deadline, "{topic}: read {} records, ended {ended:?}", out.len());
        match reader.poll(Duration::from_millis(200)).expect("reads") {
            ReadEvent::Record(r) => {
                let text = |b: Option<&[u8]>| String::from_utf8_lossy(b.unwrap_or_default()).into_owned();
                out.push((r.partition(), r.offset(), text(r.key()), text(r.value())));
            }
            ReadEvent::EndOfPartition { partition, next_offset }
                if next_offset.is_none_or(|next| next >= high(partition)) =>
            {
                ended.insert(partition);
            }
            _ => {}
        }
    }
    out
}

#[test]
#[ignore = "needs the real broker or etcd: scripts/test.sh runs it (or cargo test -- --include-ignored)"]
fn an_idempotent_producers_batches_land_in_order_with_headers_and_timestamps() {
    let broker = Broker::from_env_or_start();
    let settings = Client::to_brokers(broker.brokers());
    let admin = Admin::connect(&settings, TIMEOUT).expect("admin");
    let t = unique_name("writer-idempotent");
    topic(&admin, &t, 2);
    let writer = Writer::new(&settings).expect("settings").expect("PLAINTEXT is kshard's own");
    let (offsets, mut producer) = runtime().block_on(async {
        let mut producer = writer.idempotent().await.expect("a producer id");
        let mut deliveries = Vec::new();
        for batch in 0..5 {
            for partition in 0..2 {
                let records: Vec<OutRecord> =
                    (0..3).map(|i| record(&format!("k{batch}-{i}"), &format!("v{partition}-{batch}-{i}"))).collect();
                deliveries
                    .push((partition, producer.send(&t, partition, OutBatch::of(&records)).await.expect("queued")));
            }
        }
        let mut offsets = Vec::new();
        for (partition, d) in deliveries {
            offsets.push((partition, d.delivered().await.expect("written")));
        }
        (offsets, producer)
    });
    // Each partition's batches back to back, three offsets each.
    for partition in 0..2 {
        let firsts: Vec<i64> = offsets.iter().filter(|(p, _)| *p == partition).map(|(_, o)| *o).collect();
        assert_eq!(firsts, [0, 3, 6, 9, 12], "partition {partition}");
    }
    let read = read_all(&settings, &t, &[0, 1], Isolation::Committed);
    assert_eq!(read.len(), 30);
    for (partition, offset, key, value) in &read {
        let (batch, i) = (offset / 3, offset % 3);
        assert_eq!(key, &format!("k{batch}-{i}"));
        assert_eq!(value, &format!("v{partition}-{batch}-{i}"));
    }

    // Headers, a null value and the record's own timestamp, as librdkafka reads them.
    let with_headers = OutRecord {
        key: Some(Bytes::from_static(b"h")),
        value: None,
        headers: vec![("reason".into(), Some(Bytes::from_static(b"refused"))), ("empty".into(), None)],
        timestamp_ms: 1_600_000_000_123,
    };
    let at = runtime().block_on(async {
        let d = producer.send(&t, 0, OutBatch::of(&[with_headers])).await.expect("queued");
        d.delivered().await.expect("written")
    });
    assert_eq!(at, 15);
    use rdkafka::consumer::{BaseConsumer, Consumer};
    use rdkafka::message::{Headers, Message};
    let consumer: BaseConsumer = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", broker.brokers())
        .set("group.id", unique_name("writer-headers"))
        .create()
        .expect("a consumer");
    let mut assignment = rdkafka::TopicPartitionList::new();
    assignment.add_partition_offset(&t, 0, rdkafka::Offset::Offset(15)).expect("adds");
    consumer.assign(&assignment).expect("assigns");
    let deadline = Instant::now() + TIMEOUT;
    let message = loop {
        assert!(Instant::now() < deadline, "the record with headers was not read");
        if let Some(m) = consumer.poll(Duration::from_millis(200)) {
            break m.expect("reads").detach();
        }
    };
    assert_eq!(message.key(), Some(&b"h"[..]));
    assert_eq!(message.payload(), None, "a null value");
    assert_eq!(message.timestamp().to_millis(), Some(1_600_000_000_123));
    let headers = message.headers().expect("headers");
    let read: Vec<(String, Option<Vec<u8>>)> =
        headers.iter().map(|h| (h.key.to_owned(), h.value.map(<[u8]>::to_vec))).collect();
    assert_eq!(read, [("reason".to_owned(), Some(b"refused".to_vec())), ("empty".to_owned(), None)]);
    // kshard's own reader reads them the same, in place.
    let reader = PartitionReader::new(&settings, &t, &[(0, Some(15))]).expect("a reader");
    let deadline = Instant::now() + TIMEOUT;
    loop {
        assert!(Instant::now() < deadline, "the record with headers was not read by kshard's reader");
        if let ReadEvent::Record(r) = reader.poll(Duration::from_millis(200)).expect("reads") {
            assert_eq!(r.timestamp(), (1_600_000_000_123, false), "the producer's CreateTime");
            let headers: Vec<(String, Option<Vec<u8>>)> =
                r.headers().into_iter().map(|(k, v)| (k.to_owned(), v.map(<[u8]>::to_vec))).collect();
            assert_eq!(headers, read);
            assert_eq!(r.value(), None);
            break;
        }
    }
}

#[test]
#[ignore = "needs the real broker or etcd: scripts/test.sh runs it (or cargo test -- --include-ignored)"]
fn a_committed_transaction_is_read_whole_and_an_aborted_one_never() {
    let broker = Broker::from_env_or_start();
    let settings = Client::to_brokers(broker.brokers());
    let admin = Admin::connect(&settings, TIMEOUT).expect("admin");
    let p = unique_name("writer-txn");
    let (log, out) = (format!("{p}-log"), format!("{p}-out"));
    topic(&admin, &log, 1);
    topic(&admin, &out, 3);
    let writer = Writer::new(&settings).expect("settings").expect("PLAINTEXT is kshard's own");
    runtime().block_on(async {
        let mut producer = writer.transactional(&format!("{p}-shard-0"), TRANSACTION_TIMEOUT).await.expect("init");
        assert!(!producer.in_transaction());
        // Committed: a log record and outputs on three partitions.
        producer.send(&log, 0, OutBatch::of(&[record("txn", "1")])).await.expect("queued");
        for partition in 0..3 {
            producer
                .send(&out, partition, OutBatch::of(&[record("a", &format!("committed-{partition}"))]))
                .await
                .expect("queued");
        }
        assert!(producer.in_transaction());
        producer.commit().await.expect("commits");
        assert!(!producer.in_transaction());
        // Aborted, after its batches were written.
        let d = producer.send(&log, 0, OutBatch::of(&[record("txn", "2")])).await.expect("queued");
        producer.send(&out, 1, OutBatch::of(&[record("b", "aborted")])).await.expect("queued");
        d.delivered().await.expect("written, not yet committed");
        producer.abort().await.expect("aborts");
        // Committed again, after the abort bumped the epoch.
        producer.send(&log, 0, OutBatch::of(&[record("txn", "3")])).await.expect("queued");
        producer.send(&out, 2, OutBatch::of(&[record("c", "committed-again")])).await.expect("queued");
        producer.commit().await.expect("commits");
    });
    let values = |rows: Vec<(i32, i64, String, String)>| -> Vec<String> { rows.into_iter().map(|r| r.3).collect() };
    assert_eq!(values(read_all(&settings, &log, &[0], Isolation::Committed)), ["1", "3"]);
    let mut committed = values(read_all(&settings, &out, &[0, 1, 2], Isolation::Committed));
    committed.sort();
    assert_eq!(committed, ["committed-0", "committed-1", "committed-2", "committed-again"]);
    // A reader of uncommitted records sees the aborted ones: they were written.
    let all = values(read_all(&settings, &log, &[0], Isolation::Uncommitted));
    assert!(all.contains(&"2".to_owned()), "{all:?}");
}

#[test]
#[ignore = "needs the real broker or etcd: scripts/test.sh runs it (or cargo test -- --include-ignored)"]
fn a_new_producer_of_a_transactional_id_fences_the_old_one_at_the_broker() {
    let broker = Broker::from_env_or_start();
    let settings = Client::to_brokers(broker.brokers());
    let admin = Admin::connect(&settings, TIMEOUT).expect("admin");
    let t = unique_name("writer-fence");
    topic(&admin, &t, 1);
    let id = format!("{t}-shard");
    let writer = Writer::new(&settings).expect("settings").expect("PLAINTEXT is kshard's own");
    // The zombie lives on a writer of its own, as an old primary in another process.
    let other = Writer::new(&settings).expect("settings").expect("PLAINTEXT is kshard's own");
    runtime().block_on(async {
        let mut zombie = other.transactional(&id, TRANSACTION_TIMEOUT).await.expect("init");
        let d = zombie.send(&t, 0, OutBatch::of(&[record("z", "zombie-open")])).await.expect("queued");
        d.delivered().await.expect("written inside its transaction");
        let zombie_epoch = zombie.id_and_epoch();

        let mut primary = writer.transactional(&id, TRANSACTION_TIMEOUT).await.expect("fences the zombie");
        assert_eq!(primary.id_and_epoch().0, zombie_epoch.0, "the same producer id");
        assert!(primary.id_and_epoch().1 > zombie_epoch.1, "a newer epoch");

        // The zombie's late write and its commit are refused by the broker.
        let late = zombie.send(&t, 0, OutBatch::of(&[record("z", "zombie-late")])).await;
        let commit = match late {
            Ok(d) => {
                let e = d.delivered().await.expect_err("refused");
                assert!(e.is_fenced(), "{e}");
                zombie.commit().await.expect_err("refused")
            }
            Err(e) => e,
        };
        assert!(commit.is_fenced(), "{commit}");
        assert!(
            zombie.send(&t, 0, OutBatch::of(&[record("z", "again")])).await.expect_err("fenced for good").is_fenced()
        );

        primary.send(&t, 0, OutBatch::of(&[record("p", "primary")])).await.expect("queued");
        primary.commit().await.expect("commits");
    });
    let read: Vec<String> = read_all(&settings, &t, &[0], Isolation::Committed).into_iter().map(|r| r.3).collect();
    assert_eq!(read, ["primary"], "the zombie's open transaction was aborted, its late writes refused");
}

#[test]
#[ignore = "needs the real broker or etcd: scripts/test.sh runs it (or cargo test -- --include-ignored)"]
fn hundreds_of_transactions_back_to_back_each_seen_once() {
    let broker = Broker::from_env_or_start();
    let settings = Client::to_brokers(broker.brokers());
    let admin = Admin::connect(&settings, TIMEOUT).expect("admin");
    let p = unique_name("writer-many");
    let (log, out) = (format!("{p}-log"), format!("{p}-out"));
    topic(&admin, &log, 1);
    topic(&admin, &out, 2);
    let writer = Writer::new(&settings).expect("settings").expect("PLAINTEXT is kshard's own");
    const TRANSACTIONS: usize = 300;
    runtime().block_on(async {
        let mut producer = writer.transactional(&format!("{p}-shard"), TRANSACTION_TIMEOUT).await.expect("init");
        for n in 0..TRANSACTIONS {
            producer.add_partitions(&[(&log, 0), (&out, 0), (&out, 1)]).await.expect("adds");
            producer.send(&log, 0, OutBatch::of(&[record("txn", &n.to_string())])).await.expect("queued");
            let partition = i32::try_from(n % 2).expect("small");
            let outputs: Vec<OutRecord> = (0..10).map(|i| record(&format!("{n}"), &format!("{n}-{i}"))).collect();
            producer.send(&out, partition, OutBatch::of(&outputs)).await.expect("queued");
            producer.commit().await.expect("commits");
        }
    });
    let log_values: Vec<String> =
        read_all(&settings, &log, &[0], Isolation::Committed).into_iter().map(|r| r.3).collect();
    let want: Vec<String> = (0..TRANSACTIONS).map(|n| n.to_string()).collect();
    assert_eq!(log_values, want, "every transaction once, in order");
    let mut counts: BTreeMap<String, usize> = BTreeMap::new();
    for (_, _, key, _) in read_all(&settings, &out, &[0, 1], Isolation::Committed) {
        *counts.entry(key).or_default() += 1;
    }
    assert_eq!(counts.len(), TRANSACTIONS);
    assert!(counts.values().all(|c| *c == 10), "each output once");
}
