//! Walking record batches: every codec, control batches, aborted
//! transactions, and bytes that do not add up.

use super::*;
use bytes::BytesMut;
use kafka_protocol::records::{Compression, Record, RecordBatchEncoder, RecordEncodeOptions, TimestampType};
use proptest::prelude::*;

/// A batch of `records` (offset, value), by kafka-protocol's encoder
/// (the bytes a Java producer writes, CRC and all).
pub(crate) fn batch(
    records: &[(i64, Option<&'static [u8]>)],
    compression: Compression,
    producer: Option<i64>,
) -> Bytes {
    batch_of(records, compression, producer, false)
}

fn batch_of(
    records: &[(i64, Option<&'static [u8]>)],
    compression: Compression,
    producer: Option<i64>,
    control: bool,
) -> Bytes {
    let records: Vec<Record> = records
        .iter()
        .map(|&(offset, value)| Record {
            transactional: producer.is_some(),
            control,
            partition_leader_epoch: 0,
            producer_id: producer.unwrap_or(-1),
            producer_epoch: if producer.is_some() { 0 } else { -1 },
            timestamp_type: TimestampType::Creation,
            offset,
            sequence: offset as i32,
            timestamp: 1_000 + offset,
            key: Some(Bytes::from(format!("k{offset}"))),
            value: value.map(Bytes::from_static),
            headers: Default::default(),
            delete_horizon: false,
        })
        .collect();
    let mut buf = BytesMut::new();
    RecordBatchEncoder::encode(&mut buf, &records, &RecordEncodeOptions { version: 2, compression }).expect("encode");
    buf.freeze()
}

/// A transaction marker at `offset` for `producer`: ABORT (type 0) or COMMIT (1).
fn marker(offset: i64, producer: i64, commit: bool) -> Bytes {
    let key: &'static [u8] = if commit { &[0, 0, 0, 1] } else { &[0, 0, 0, 0] };
    let record = Record {
        transactional: true,
        control: true,
        partition_leader_epoch: 0,
        producer_id: producer,
        producer_epoch: 0,
        timestamp_type: TimestampType::Creation,
        offset,
        sequence: -1,
        timestamp: 0,
        key: Some(Bytes::from_static(key)),
        value: Some(Bytes::from_static(&[0, 0, 0, 0, 0, 0])),
        headers: Default::default(),
        delete_horizon: false,
    };
    let mut buf = BytesMut::new();
    RecordBatchEncoder::encode(
        &mut buf,
        &[record],
        &RecordEncodeOptions { version: 2, compression: Compression::None },
    )
    .expect("encode");
    buf.freeze()
}

/// A record read: offset and value.
type Read = (i64, Option<Vec<u8>>);

fn read_all(bytes: Bytes, from: i64, committed: bool, aborted: Vec<(i64, i64)>) -> Result<Vec<Read>, Corrupt> {
    let mut walk = PartitionRecords::new(bytes, from, committed, aborted);
    let mut out = Vec::new();
    while let Some(r) = walk.next_record()? {
        if let Some(Transactional::Marker { .. }) = r.transactional {
            continue;
        }
        let value = r.value.map(|v| walk.buffer()[v].to_vec());
        let key = r.key.map(|k| walk.buffer()[k].to_vec());
        assert_eq!(key, Some(format!("k{}", r.offset).into_bytes()));
        assert_eq!(r.timestamp_ms, 1_000 + r.offset);
        out.push((r.offset, value));
    }
    Ok(out)
}

fn join(parts: &[Bytes]) -> Bytes {
    Bytes::from(parts.concat())
}

#[test]
fn every_codec_reads_back_the_same_records() {
    for compression in [Compression::None, Compression::Gzip, Compression::Snappy, Compression::Lz4, Compression::Zstd]
    {
        let bytes = join(&[
            batch(&[(0, Some(b"a")), (1, None), (2, Some(b"c"))], compression, None),
            batch(&[(3, Some(b"d"))], compression, None),
        ]);
        let read = read_all(bytes, 1, false, vec![]).expect("read");
        assert_eq!(
            read,
            vec![(1, None), (2, Some(b"c".to_vec())), (3, Some(b"d".to_vec()))],
            "{compression:?}, from offset 1"
        );
    }
}

#[test]
fn plain_and_compressed_batches_in_one_answer_each_read_in_their_own_buffer() {
    // A plain batch is read in place in the answer, a compressed one in its
    // inflated copy: the buffer the ranges point into follows the batch.
    let bytes = join(&[
        batch(&[(0, Some(b"plain")), (1, Some(b"in place"))], Compression::None, None),
        batch(&[(2, Some(b"inflated")), (3, None)], Compression::Zstd, None),
        batch(&[(4, Some(b"plain again"))], Compression::None, None),
        batch(&[(5, Some(b"gzip"))], Compression::Gzip, None),
    ]);
    let read = read_all(bytes, 0, false, vec![]).expect("read");
    let values: Vec<Option<&[u8]>> = read.iter().map(|(_, v)| v.as_deref()).collect();
    let expected: [Option<&[u8]>; 6] =
        [Some(b"plain"), Some(b"in place"), Some(b"inflated"), None, Some(b"plain again"), Some(b"gzip")];
    assert_eq!(values, expected);
}

#[test]
fn a_batch_that_inflates_past_the_most_is_corrupt_and_the_next_is_read() {
    // One value of zeros just past the most (4 MiB here, as a test's
    // walk is set to): a few kilobytes of zstd.
    let most = 4 << 20;
    let zeros = Bytes::from(vec![0u8; most + 1]);
    let record = Record {
        transactional: false,
        control: false,
        partition_leader_epoch: 0,
        producer_id: -1,
        producer_epoch: -1,
        timestamp_type: TimestampType::Creation,
        offset: 0,
        sequence: 0,
        timestamp: 1_000,
        key: Some(Bytes::from_static(b"k0")),
        value: Some(zeros),
        headers: Default::default(),
        delete_horizon: false,
    };
    let mut bomb = BytesMut::new();
    let options = RecordEncodeOptions { version: 2, compression: Compression::Zstd };
    RecordBatchEncoder::encode(&mut bomb, &[record], &options).expect("encode");
    assert!(bomb.len() < 4 * 1024, "{} bytes", bomb.len());
    let bytes = join(&[bomb.freeze(), batch(&[(1, Some(b"b"))], Compression::Zstd, None)]);
    let mut walk = PartitionRecords { inflated_most: most, ..PartitionRecords::new(bytes, 0, false, vec![]) };
    let e = walk.next_record().expect_err("too large");
    assert_eq!(e.offset, 0);
    assert!(e.what.contains("inflate past 4194304"), "{e}");
    let next = walk.next_record().expect("the next batch").expect("a record");
    assert_eq!(next.offset, 1);
}

#[test]
fn a_cut_last_batch_ends_the_walk_and_a_flipped_bit_is_corrupt() {
    let first = batch(&[(0, Some(b"a"))], Compression::None, None);
    let second = batch(&[(1, Some(b"b"))], Compression::None, None);
    let both = join(&[first.clone(), second.clone()]);
    for cut in first.len()..both.len() {
        let read = read_all(both.slice(..cut), 0, false, vec![]).expect("a cut batch is no error");
        assert_eq!(read, vec![(0, Some(b"a".to_vec()))], "cut at {cut}");
    }
    let mut flipped = both.to_vec();
    let last = flipped.len() - 1;
    flipped[last] ^= 1;
    let e = read_all(Bytes::from(flipped), 0, false, vec![]).expect_err("CRC");
    assert_eq!(e.offset, 1);
    assert!(e.what.contains("CRC-32C"), "{e}");
}

#[test]
fn aborted_transactions_and_markers_are_left_out_when_reading_committed() {
    // Producer 7 aborts 1..=2 (marker 3); producer 8 commits 4 (marker 6);
    // a plain record 5 between.
    let bytes = join(&[
        batch(&[(0, Some(b"plain"))], Compression::None, None),
        batch(&[(1, Some(b"x")), (2, Some(b"y"))], Compression::None, Some(7)),
        marker(3, 7, false),
        batch(&[(4, Some(b"kept"))], Compression::Lz4, Some(8)),
        batch(&[(5, Some(b"plain2"))], Compression::None, None),
        marker(6, 8, true),
        // Producer 7 again, in a new transaction that commits.
        batch(&[(7, Some(b"later"))], Compression::None, Some(7)),
        marker(8, 7, true),
    ]);
    let committed = read_all(bytes.clone(), 0, true, vec![(7, 1)]).expect("read");
    let offsets: Vec<i64> = committed.iter().map(|r| r.0).collect();
    assert_eq!(offsets, vec![0, 4, 5, 7]);
    let everything = read_all(bytes, 0, false, vec![]).expect("read");
    let offsets: Vec<i64> = everything.iter().map(|r| r.0).collect();
    assert_eq!(offsets, vec![0, 1, 2, 4, 5, 7], "markers are never data records");
}

#[test]
fn reading_every_record_names_each_transaction_and_yields_its_marker() {
    let bytes = join(&[
        batch(&[(0, Some(b"plain"))], Compression::None, None),
        batch(&[(1, Some(b"x")), (2, Some(b"y"))], Compression::Zstd, Some(7)),
        marker(3, 7, false),
        batch(&[(4, Some(b"kept"))], Compression::None, Some(8)),
        marker(5, 8, true),
    ]);
    let tags = |from: i64| -> Vec<(i64, Option<Transactional>)> {
        let mut walk = PartitionRecords::new(bytes.clone(), from, false, vec![]);
        std::iter::from_fn(|| walk.next_record().expect("read")).map(|r| (r.offset, r.transactional)).collect()
    };
    let record = |producer_id| Some(Transactional::Record { producer_id });
    let marker = |producer_id, committed| Some(Transactional::Marker { producer_id, committed });
    assert_eq!(
        tags(0),
        vec![(0, None), (1, record(7)), (2, record(7)), (3, marker(7, false)), (4, record(8)), (5, marker(8, true))]
    );
    assert_eq!(tags(3), vec![(3, marker(7, false)), (4, record(8)), (5, marker(8, true))]);
    let mut committed = PartitionRecords::new(bytes, 0, true, vec![(7, 1)]);
    let offsets: Vec<_> =
        std::iter::from_fn(|| committed.next_record().expect("read")).map(|r| (r.offset, r.transactional)).collect();
    assert_eq!(offsets, vec![(0, None), (4, None)], "reading committed, nothing is tagged");
}

#[test]
fn a_reader_ahead_of_the_fetch_follows_the_aborted_list_from_its_start() {
    // Producer 7 aborts 1..=2 (marker 3), then commits 5 (marker 6); the
    // answer (fetched from 0) lists (7, 1); this reader starts at 4.
    let bytes = join(&[
        batch(&[(0, Some(b"plain"))], Compression::None, None),
        batch(&[(1, Some(b"x")), (2, Some(b"y"))], Compression::None, Some(7)),
        marker(3, 7, false),
        batch(&[(4, Some(b"plain2"))], Compression::None, None),
        batch(&[(5, Some(b"kept"))], Compression::None, Some(7)),
        marker(6, 7, true),
    ]);
    let offsets: Vec<i64> = read_all(bytes, 4, true, vec![(7, 1)]).expect("read").iter().map(|r| r.0).collect();
    assert_eq!(offsets, vec![4, 5], "the committed transaction after the aborted one is kept");
}

#[test]
fn the_walk_goes_on_after_a_corrupt_batch() {
    let mut first = batch(&[(0, Some(b"a"))], Compression::None, None).to_vec();
    let last = first.len() - 1;
    first[last] ^= 1;
    let bytes = join(&[Bytes::from(first), batch(&[(1, Some(b"b"))], Compression::None, None)]);
    let mut walk = PartitionRecords::new(bytes, 0, false, vec![]);
    assert!(walk.next_record().is_err(), "the CRC");
    assert_eq!(walk.next_record().expect("the next batch").map(|r| r.offset), Some(1));
}

#[test]
fn legacy_formats_are_named() {
    let mut old = batch(&[(0, Some(b"a"))], Compression::None, None).to_vec();
    old[16] = 1;
    let e = read_all(Bytes::from(old), 0, false, vec![]).expect_err("v1");
    assert!(e.what.contains("v1") && e.what.contains("librdkafka"), "{e}");
}

proptest! {
    #[test]
    fn never_panics_on_any_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..400), from in 0i64..4) {
        let mut walk = PartitionRecords::new(Bytes::from(bytes), from, true, vec![(1, 0)]);
        for _ in 0..100 {
            match walk.next_record() {
                Ok(Some(_)) => {}
                _ => break,
            }
        }
    }

    #[test]
    fn a_batch_with_a_patched_byte_never_panics(at in 0usize..80, byte in any::<u8>()) {
        let mut b = batch(&[(0, Some(b"abc")), (1, Some(b"de"))], Compression::None, None).to_vec();
        if at < b.len() {
            b[at] = byte;
        }
        let _ = read_all_unchecked(Bytes::from(b));
    }
}

fn read_all_unchecked(bytes: Bytes) -> Result<usize, Corrupt> {
    let mut walk = PartitionRecords::new(bytes, 0, false, vec![]);
    let mut n = 0;
    while walk.next_record()?.is_some() {
        n += 1;
    }
    Ok(n)
}
