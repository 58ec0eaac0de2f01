//! The batch as kafka-protocol's own encoder writes it, byte for byte, and
//! as Kafka's decoder and kshard's reader read it.

use bytes::{Bytes, BytesMut};
use kafka_protocol::indexmap::IndexMap;
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::records::{
    Compression, Record, RecordBatchDecoder, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
};
use proptest::prelude::*;

use super::*;

fn record(key: &str, value: Option<&str>, timestamp_ms: i64) -> OutRecord {
    OutRecord {
        key: Some(Bytes::copy_from_slice(key.as_bytes())),
        value: value.map(|v| Bytes::copy_from_slice(v.as_bytes())),
        headers: vec![("reason".into(), Some(Bytes::from_static(b"why"))), ("empty".into(), None)],
        timestamp_ms,
    }
}

/// kafka-protocol's encoding of the same batch (its base timestamp the
/// least, where Kafka's producer and kshard's take the first: the same when
/// the first record is the earliest).
fn reference(records: &[OutRecord], producer: Identity, sequence: i32, transactional: bool) -> Bytes {
    let encoded: Vec<Record> = records
        .iter()
        .enumerate()
        .map(|(i, r)| {
            let index = i32::try_from(i).expect("small");
            Record {
                transactional,
                control: false,
                delete_horizon: false,
                partition_leader_epoch: -1,
                producer_id: producer.id,
                producer_epoch: producer.epoch,
                timestamp_type: TimestampType::Creation,
                offset: i64::from(index),
                sequence: sequence.wrapping_add(index),
                timestamp: r.timestamp_ms,
                key: r.key.clone(),
                value: r.value.clone(),
                headers: r
                    .headers
                    .iter()
                    .map(|(name, value)| (StrBytes::from_string(name.clone()), value.clone()))
                    .collect::<IndexMap<_, _>>(),
            }
        })
        .collect();
    let mut buf = BytesMut::new();
    let options = RecordEncodeOptions { version: 2, compression: Compression::None };
    RecordBatchEncoder::encode(&mut buf, &encoded, &options).expect("encodes");
    buf.freeze()
}

#[test]
fn a_batch_is_written_as_kafkas_own_encoder_writes_it() {
    let producer = Identity { id: 4_000, epoch: 7 };
    let records = [
        record("a", Some("1"), 1_700_000_000_000),
        record("b", None, 1_700_000_009_000),
        record("c", Some("3"), 1_700_000_005_000),
    ];
    let batch = OutBatch::of(&records).seal(producer, 41, true);
    assert_eq!(batch, reference(&records, producer, 41, true));
    let decoded = RecordBatchDecoder::decode(&mut batch.clone()).expect("decodes");
    assert_eq!(decoded.records.len(), 3);
    for (i, r) in decoded.records.iter().enumerate() {
        assert_eq!((r.producer_id, r.producer_epoch, r.transactional), (4_000, 7, true));
        assert_eq!(r.sequence, 41 + i32::try_from(i).expect("small"));
        assert_eq!((&r.key, &r.value, r.timestamp), (&records[i].key, &records[i].value, records[i].timestamp_ms));
        assert_eq!(r.headers.get(&StrBytes::from_static_str("empty")), Some(&None));
    }
    let header = crate::wire::record_batch::BatchHeader::parse(&batch).expect("a header");
    assert_eq!((header.producer_id, header.transactional, header.count), (4_000, true, 3));
    assert_eq!(i64::from(header.size), i64::try_from(batch.len()).expect("small"));
}

#[test]
fn the_base_sequence_goes_on_the_wire_as_given_even_at_the_largest_int32() {
    let producer = Identity { id: 1, epoch: 0 };
    let records = [record("a", None, 5), record("b", None, 5)];
    let batch = OutBatch::of(&records).seal(producer, i32::MAX, false);
    assert_eq!(batch, reference(&records, producer, i32::MAX, false));
    assert_eq!(batch[53..57], i32::MAX.to_be_bytes());
}

#[test]
fn a_batch_goes_back_to_a_mark_and_reads_back_what_it_kept() {
    let mut batch = OutBatch::default();
    let empty = batch.mark();
    batch.push(&record("a", Some("1"), 10));
    let one = batch.mark();
    batch.push(&record("b", Some("2"), 20));
    batch.truncate(one);
    assert_eq!(batch.records().expect("reads"), vec![record("a", Some("1"), 10)]);
    batch.truncate(empty);
    assert!(batch.is_empty());
    let before = batch.clone();
    batch.truncate(one);
    assert_eq!(batch, before, "a mark a truncate went back past changes nothing");
    batch.push(&record("c", None, 30));
    assert_eq!(batch.records().expect("reads"), vec![record("c", None, 30)]);
    assert_eq!(batch.seal(Identity { id: 2, epoch: 1 }, 0, true)[27..35], 30i64.to_be_bytes(), "base timestamp");
}

#[test]
fn headers_of_one_name_are_each_kept_in_order() {
    let mut r = record("a", None, 1);
    r.headers =
        vec![("x".into(), Some(Bytes::from_static(b"1"))), ("x".into(), None), ("x".into(), Some(Bytes::new()))];
    assert_eq!(OutBatch::of(std::slice::from_ref(&r)).records().expect("reads"), vec![r]);
}

fn any_record() -> impl Strategy<Value = OutRecord> {
    let bytes = proptest::option::of(proptest::collection::vec(any::<u8>(), 0..300));
    // Names apart: kafka-protocol keeps one header of a name, Kafka every one.
    let headers = proptest::collection::btree_map("[a-z]{0,8}", bytes.clone(), 0..3);
    (bytes.clone(), bytes, headers, -1i64..4_000_000_000_000).prop_map(|(key, value, headers, timestamp_ms)| {
        OutRecord {
            key: key.map(Bytes::from),
            value: value.map(Bytes::from),
            headers: headers.into_iter().map(|(n, v)| (n, v.map(Bytes::from))).collect(),
            timestamp_ms,
        }
    })
}

proptest! {
    #[test]
    fn any_records_encode_as_kafka_does_and_read_back(
        records in proptest::collection::vec(any_record(), 1..40),
        id in any::<i64>(),
        epoch in any::<i16>(),
        sequence in any::<i32>(),
    ) {
        let mut batch = OutBatch::default();
        for r in &records {
            let before = batch.bytes();
            batch.push(r);
            prop_assert!(batch.bytes() - before <= OutBatch::encoded_len(r));
        }
        prop_assert_eq!(batch.len(), records.len());
        prop_assert_eq!(batch.records().expect("reads"), records.clone());
        let producer = Identity { id, epoch };
        let sealed = batch.seal(producer, sequence, true);
        let decoded = RecordBatchDecoder::decode(&mut sealed.clone()).expect("Kafka's decoder reads it");
        let times: Vec<i64> = decoded.records.iter().map(|r| r.timestamp).collect();
        prop_assert_eq!(times, records.iter().map(|r| r.timestamp_ms).collect::<Vec<_>>());
        if records.iter().all(|r| r.timestamp_ms >= records[0].timestamp_ms) {
            prop_assert_eq!(sealed, reference(&records, producer, sequence, true));
        }
    }
}
