//! The [`Partitions`] contract as checks, run against every implementation
//! (memory, and Kafka) by their tests. Each check takes a topic of one
//! partition, empty, that the caller made for it; each panics with what broke.
//! Readers are awaited as a replica's task awaits them ([`next_event`]), so
//! a reader that never says it is readable fails here.

use std::time::Duration;

use kshard_kafka::Isolation;
use tokio::time::Instant;

use super::{PartitionRead, Partitions, Polled, next_event};

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
            Polled::Record(r) => {
                assert_eq!(r.partition(), 0);
                read.push((r.offset(), r.key().map(<[u8]>::to_vec), r.value().map(<[u8]>::to_vec)));
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

/// Runs every check, each on its own topic of `topics` (four).
pub async fn run_all(log: &dyn Partitions, topics: &[String; 4]) {
    appends_read_back_in_order(log, &topics[0]).await;
    a_waiting_reader_gets_what_comes(log, &topics[1]).await;
    deleted_records_are_gone_and_reading_resumes_at_the_start(log, &topics[2]).await;
    a_reader_past_the_end_reads_from_the_start(log, &topics[3]).await;
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
