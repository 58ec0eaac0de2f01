//! Both partition readers on a cluster of three real brokers
//! (`scripts/cluster.sh`): a partition's leader killed, its partitions read
//! on from the new leaders; the broker back, the leaders moved back to it
//! (preferred-leader election) while reading; every record exactly once, in
//! order, and the two readers agree. kshard's reader holds one connection per
//! broker it reads from, and one for metadata.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use kshard_kafka::{Admin, Client, PartitionReader, ReadEvent, ReaderKind, RecordWriter, TopicSpec};
use kshard_testkit::{Cluster, unique_name};

/// Reads until every partition has `want[p]` records in all; each
/// partition's offsets as read.
fn read_until(reader: &PartitionReader, got: &mut BTreeMap<i32, Vec<i64>>, want: i64) {
    let deadline = Instant::now() + Duration::from_secs(90);
    while got.values().any(|o| (o.len() as i64) < want) || got.len() < 3 {
        assert!(
            Instant::now() < deadline,
            "{} reader stuck at {:?}",
            reader.client(),
            got.values().map(Vec::len).collect::<Vec<_>>()
        );
        match reader.poll(Duration::from_millis(200)) {
            Ok(ReadEvent::Record(r)) => got.entry(r.partition()).or_default().push(r.offset()),
            Ok(_) => {}
            // librdkafka reports a broker going away; kshard's reader retries within.
            Err(e) => eprintln!("{}: {e}", reader.client()),
        }
    }
}

fn write(writer: &RecordWriter, topic: &str, n: usize) {
    for p in 0..3 {
        for i in 0..n {
            writer.send(topic, p, format!("k{i}").as_bytes(), Some(b"value")).expect("send");
        }
    }
    writer.flush(Duration::from_secs(60)).expect("flush");
}

fn leaders(admin: &Admin, topic: &str) -> BTreeMap<i32, i32> {
    admin.leaders(topic).expect("leaders").into_iter().collect()
}

#[test]
#[ignore = "needs the real broker or etcd: scripts/test.sh runs it (or cargo test -- --include-ignored)"]
fn leaders_move_and_a_broker_dies_while_reading() {
    let cluster = Cluster::start(&[]);
    let settings = Client::to_brokers(cluster.brokers());
    let admin = Admin::new(&settings, Duration::from_secs(30)).expect("admin");
    let topic = unique_name("reader-cluster");
    admin
        .create_topic(&TopicSpec { name: topic.clone(), partitions: 3, replication: 3, configs: vec![] })
        .expect("create");
    let writer = RecordWriter::new(&settings).expect("writer");
    write(&writer, &topic, 100);
    let before = leaders(&admin, &topic);
    assert_eq!(before.len(), 3, "a leader for each partition: {before:?}");

    let start: Vec<(i32, Option<i64>)> = (0..3).map(|p| (p, None)).collect();
    let readers: Vec<(PartitionReader, BTreeMap<i32, Vec<i64>>)> = [ReaderKind::Kshard, ReaderKind::Librdkafka]
        .into_iter()
        .map(|kind| {
            let mut s = settings.settings().clone();
            s.reader = kind;
            (PartitionReader::new(&Client::new(s), &topic, &start).expect("reader"), BTreeMap::new())
        })
        .collect();
    let mut readers = readers;
    for (reader, got) in &mut readers {
        read_until(reader, got, 100);
    }
    let distinct: std::collections::BTreeSet<i32> = before.values().copied().collect();
    assert_eq!(readers[0].0.shared_connections(), Some(distinct.len() + 1), "one per leader, one for metadata");

    // The leader of partition 0 dies: its partitions move to the others.
    let victim = before[&0];
    cluster.kill(victim);
    let deadline = Instant::now() + Duration::from_secs(60);
    while leaders(&admin, &topic).values().any(|&l| l == victim) {
        assert!(Instant::now() < deadline, "no new leader for the dead broker's partitions");
        std::thread::sleep(Duration::from_millis(200));
    }
    write(&writer, &topic, 50);
    for (reader, got) in &mut readers {
        read_until(reader, got, 150);
    }

    // It comes back, and the preferred-leader election moves its partitions
    // back to it while the readers read.
    cluster.resume(victim);
    let deadline = Instant::now() + Duration::from_secs(90);
    while leaders(&admin, &topic) != before {
        assert!(Instant::now() < deadline, "leaders never moved back: {:?}", leaders(&admin, &topic));
        std::thread::sleep(Duration::from_millis(500));
    }
    write(&writer, &topic, 50);
    for (reader, got) in &mut readers {
        read_until(reader, got, 200);
    }
    for (reader, got) in &readers {
        for (p, offsets) in got {
            assert_eq!(
                offsets,
                &(0..200).collect::<Vec<i64>>(),
                "{}: partition {p}, every record once, in order",
                reader.client()
            );
        }
    }
}
