//! The [`Partitions`] contract as checks, run against every implementation
//! (memory, and Kafka) by their tests. Each check takes a topic of one
//! partition, empty, that the caller made for it; each panics with what broke.
//! Readers are awaited as a replica's task awaits them ([`next_event`]), so
//! a reader that never says it is readable fails here.

use std::time::Duration;

use kshard_kafka::Isolation;
use tokio::time::Instant;

use super::{OutBatch, OutRecord, PartitionRead, Partitions, Polled, next_event};

/// A record as read: offset, key, value.
type Read = (i64, Option<Vec<u8>>, Option<Vec<u8>>);

/// Reads until partition 0's end after at least `at_least` records: the
/// records, and the end's next offset.
async fn read_to_end(reader: &dyn PartitionRead, at_least: usize) -> (Vec<Read>, i64) {
    let mut read = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        assert!(Instant::now() < deadline, "no end within 30 s after {read:?}");
        // One wait to the deadline, no polling: a reader that never says it
        // is readable stalls here and fails.
        let left = deadline.saturating_duration_since(Instant::now());
        match next_event(reader, left).await.expect("poll") {
            Polled::Records(mut run) => {
                while let Some(r) = run.next_record().expect("a record") {
                    assert_eq!(r.partition(), 0);
                    read.push((r.offset(), r.key().map(<[u8]>::to_vec), r.value().map(<[u8]>::to_vec)));
                }
            }
            Polled::EndOfPartition { partition: 0, next_offset: Some(end) } if read.len() >= at_least => {
                return (read, end);
            }
            _ => {}
        }
    }
}

async fn append_all(log: &dyn Partitions, topic: &str, values: &[Option<&[u8]>]) -> Vec<i64> {
    let appended: Vec<_> = values
        .iter()
        .enumerate()
        .map(|(i, v)| log.append(topic, 0, format!("k{i}").as_bytes(), *v).expect("append"))
        .collect();
    let mut offsets = Vec::new();
    for a in appended {
        let delivered = tokio::time::timeout(Duration::from_secs(30), a.delivered()).await;
        offsets.push(delivered.expect("delivered in time").expect("delivered"));
    }
    offsets
}

/// Runs every check, each on its own topic of `topics` (the last two
/// for transactions).
pub async fn run_all(log: &dyn Partitions, topics: &[String; 6]) {
    appends_read_back_in_order(log, &topics[0]).await;
    a_waiting_reader_gets_what_comes(log, &topics[1]).await;
    deleted_records_are_gone_and_reading_resumes_at_the_start(log, &topics[2]).await;
    a_reader_past_the_end_reads_from_the_start(log, &topics[3]).await;
    transactions_are_read_whole_or_never_and_a_new_writer_fences(log, &topics[4], &topics[5]).await;
}

/// A record with a header and a timestamp of its own, which readers give back.
fn out(key: &str, value: &str) -> OutRecord {
    OutRecord {
        headers: vec![("source".into(), Some(value.as_bytes().to_vec().into())), ("none".into(), None)],
        timestamp_ms: 1_700_000_000_000,
        ..OutRecord::new(Some(key.as_bytes()), Some(value.as_bytes()))
    }
}

/// The values a reader of `isolation` reads from `topic`'s partition 0
/// once it has read at least `at_least`: (offset, value).
async fn values(log: &dyn Partitions, topic: &str, isolation: Isolation, at_least: usize) -> Vec<(i64, String)> {
    let reader = log.reader(topic, &[(0, None)], 256, isolation).expect("reader");
    let (read, _) = read_to_end(reader.as_ref(), at_least).await;
    read.into_iter()
        .map(|(offset, _, v)| (offset, String::from_utf8_lossy(&v.unwrap_or_default()).into_owned()))
        .collect()
}

/// A transaction over two topics is read by committed readers whole, once
/// committed, and an aborted one never, while uncommitted readers read
/// every record; each end takes an offset (a marker). A second writer of
/// the transactional id fences the first: the first's open transaction is
/// aborted, its writes and commit refused.
pub async fn transactions_are_read_whole_or_never_and_a_new_writer_fences(log: &dyn Partitions, a: &str, b: &str) {
    let id = format!("{a}-shard");
    let mut first = log.transactional(&id).await.expect("a writer");
    let sent = first.send(a, 0, OutBatch::of(&[out("k", "r1")])).await.expect("sends");
    tokio::time::timeout(Duration::from_secs(30), sent.delivered()).await.expect("in time").expect("written");
    first.send(b, 0, OutBatch::of(&[out("k", "r2"), out("k", "r3")])).await.expect("sends");
    // Open: an uncommitted reader reads it, a committed one not yet, and
    // committed readers end before it (the last stable offset).
    assert_eq!(values(log, a, Isolation::Uncommitted, 1).await, [(0, "r1".to_owned())]);
    assert_eq!(values(log, a, Isolation::Committed, 0).await, [], "not before the commit");
    assert_eq!(log.stable_end(a, 0).await.expect("the last stable offset"), 0, "before the open transaction");
    first.commit().await.expect("commits");
    // Past the commit's marker (Kafka writes it just after the commit returns).
    let deadline = Instant::now() + Duration::from_secs(30);
    while log.stable_end(a, 0).await.expect("the last stable offset") != 2 {
        assert!(Instant::now() < deadline, "the last stable offset did not pass the commit");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(values(log, b, Isolation::Committed, 2).await, [(0, "r2".to_owned()), (1, "r3".to_owned())]);
    // Aborted: never read by a committed reader.
    let sent = first.send(a, 0, OutBatch::of(&[out("k", "r4")])).await.expect("sends");
    tokio::time::timeout(Duration::from_secs(30), sent.delivered()).await.expect("in time").expect("written");
    first.abort().await.expect("aborts");
    // Left open, then fenced by a second writer of the id.
    let sent = first.send(a, 0, OutBatch::of(&[out("k", "r5")])).await.expect("sends");
    tokio::time::timeout(Duration::from_secs(30), sent.delivered()).await.expect("in time").expect("written");
    let mut second = log.transactional(&id).await.expect("a second writer");
    let late = match first.send(a, 0, OutBatch::of(&[out("k", "late")])).await {
        Ok(sent) => tokio::time::timeout(Duration::from_secs(30), sent.delivered()).await.expect("in time").map(|_| ()),
        Err(e) => Err(e),
    };
    assert!(late.expect_err("fenced").is_fenced());
    assert!(first.commit().await.expect_err("fenced").is_fenced());
    second.send(a, 0, OutBatch::of(&[out("k", "r6")])).await.expect("sends");
    second.commit().await.expect("commits");
    // r1, its commit's marker, r4, its abort's marker, r5, its abort's marker, r6.
    assert_eq!(values(log, a, Isolation::Committed, 2).await, [(0, "r1".to_owned()), (6, "r6".to_owned())]);
    // Each record's headers and timestamp, as written.
    let reader = log.reader(a, &[(0, None)], 256, Isolation::Committed).expect("reader");
    loop {
        if let Polled::Records(mut run) = next_event(reader.as_ref(), Duration::from_secs(30)).await.expect("poll")
            && let Some(r) = run.next_record().expect("a record")
        {
            assert_eq!(r.timestamp(), (1_700_000_000_000, false));
            assert_eq!(r.headers(), [("source", Some(&b"r1"[..])), ("none", None)]);
            break;
        }
    }
    // An uncommitted reader reads every record, and each marker, told apart.
    let reader = log.reader(a, &[(0, None)], 256, Isolation::Uncommitted).expect("reader");
    let mut every = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    while every.len() < 8 {
        assert!(Instant::now() < deadline, "read {every:?}");
        let Polled::Records(mut run) = next_event(reader.as_ref(), Duration::from_secs(1)).await.expect("poll") else {
            continue;
        };
        while let Some(r) = run.next_record().expect("a record") {
            let what = match r.transactional() {
                Some(kshard_kafka::Transactional::Marker { committed: true, .. }) => "COMMIT".to_owned(),
                Some(kshard_kafka::Transactional::Marker { committed: false, .. }) => "ABORT".to_owned(),
                Some(kshard_kafka::Transactional::Record { .. }) => {
                    String::from_utf8_lossy(r.value().unwrap_or_default()).into_owned()
                }
                None => panic!("offset {}: a transaction's record without its part in it", r.offset()),
            };
            every.push((r.offset(), what));
        }
    }
    let want = [(0, "r1"), (1, "COMMIT"), (2, "r4"), (3, "ABORT"), (4, "r5"), (5, "ABORT"), (6, "r6"), (7, "COMMIT")];
    assert_eq!(every, want.map(|(o, w)| (o, w.to_owned())), "written, if not committed, and the markers");
}

/// Appends land at consecutive offsets from 0 and read back in order, from
/// the start and from inside; the end is told with the position.
pub async fn appends_read_back_in_order(log: &dyn Partitions, topic: &str) {
    let offsets = append_all(log, topic, &[Some(b"a"), None, Some(b"c")]).await;
    assert_eq!(offsets, [0, 1, 2], "consecutive offsets from 0");
    let ends = log.ends(&[(topic.to_owned(), 0)]).await.expect("ends");
    assert_eq!(ends.get(&(topic.to_owned(), 0)), Some(&(0, 3)));
    let reader = log.reader(topic, &[(0, None)], 256, Isolation::Committed).expect("reader");
    let (read, end) = read_to_end(reader.as_ref(), 3).await;
    let want: Vec<Read> = vec![
        (0, Some(b"k0".to_vec()), Some(b"a".to_vec())),
        (1, Some(b"k1".to_vec()), None),
        (2, Some(b"k2".to_vec()), Some(b"c".to_vec())),
    ];
    assert_eq!((read, end), (want.clone(), 3));
    assert_eq!(reader.known_end(topic, 0), Some(3), "the end is known after reading to it");
    let inside = log.reader(topic, &[(0, Some(1))], 256, Isolation::Uncommitted).expect("reader");
    assert_eq!(read_to_end(inside.as_ref(), 2).await, (want[1..].to_vec(), 3));
    // A run given up after its first record leaves the rest to the next poll.
    let reader = log.reader(topic, &[(0, None)], 256, Isolation::Committed).expect("reader");
    let (mut firsts, deadline) = (Vec::new(), Instant::now() + Duration::from_secs(30));
    while firsts.len() < 3 {
        assert!(Instant::now() < deadline, "only {firsts:?} within 30 s");
        if let Polled::Records(mut run) = next_event(reader.as_ref(), Duration::from_secs(1)).await.expect("poll")
            && let Some(r) = run.next_record().expect("a record")
        {
            firsts.push(r.offset());
        }
    }
    assert_eq!(firsts, [0, 1, 2], "one record per poll, none lost");
}

/// A reader at the end hears of a record appended later, while it waits:
/// it wakes when the record comes.
pub async fn a_waiting_reader_gets_what_comes(log: &dyn Partitions, topic: &str) {
    append_all(log, topic, &[Some(b"first")]).await;
    let reader = log.reader(topic, &[(0, Some(1))], 256, Isolation::Committed).expect("reader");
    let (read, end) = read_to_end(reader.as_ref(), 0).await;
    assert_eq!((read.len(), end), (0, 1), "at the end already");
    let later = async {
        tokio::time::sleep(Duration::from_millis(100)).await;
        append_all(log, topic, &[Some(b"second")]).await
    };
    let ((read, end), _) = tokio::join!(read_to_end(reader.as_ref(), 1), later);
    assert_eq!((read, end), (vec![(1, Some(b"k0".to_vec()), Some(b"second".to_vec()))], 2));
}

/// Records deleted before an offset are gone: the start moves, a reader
/// from before it reads on from the start, and an offset past the end is
/// refused.
pub async fn deleted_records_are_gone_and_reading_resumes_at_the_start(log: &dyn Partitions, topic: &str) {
    append_all(log, topic, &[Some(b"0"), Some(b"1"), Some(b"2"), Some(b"3")]).await;
    assert_eq!(log.delete_before(topic, 0, 2).await.expect("delete"), 2);
    let ends = log.ends(&[(topic.to_owned(), 0)]).await.expect("ends");
    assert_eq!(ends.get(&(topic.to_owned(), 0)), Some(&(2, 4)));
    let reader = log.reader(topic, &[(0, Some(0))], 256, Isolation::Committed).expect("reader");
    let (read, end) = read_to_end(reader.as_ref(), 2).await;
    assert_eq!((read.iter().map(|r| r.0).collect::<Vec<_>>(), end), (vec![2, 3], 4));
    assert!(log.delete_before(topic, 0, 10).await.is_err(), "past the end");
}

/// A reader asked to start past the end reads from the start.
pub async fn a_reader_past_the_end_reads_from_the_start(log: &dyn Partitions, topic: &str) {
    append_all(log, topic, &[Some(b"0"), Some(b"1")]).await;
    let reader = log.reader(topic, &[(0, Some(50))], 256, Isolation::Committed).expect("reader");
    let (read, end) = read_to_end(reader.as_ref(), 2).await;
    assert_eq!((read.iter().map(|r| r.0).collect::<Vec<_>>(), end), (vec![0, 1], 2));
}
