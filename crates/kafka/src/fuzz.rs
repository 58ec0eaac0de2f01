//! The decode entry points of kshard's own Kafka client, for the fuzz
//! targets in `fuzz/` (feature `fuzzing`; not part of the crate's API).
//! Each takes bytes as a broker could send them and must return, whatever
//! they are: no panic, no abort, no allocation past a small multiple of
//! the input (or the caps it states).

use bytes::Bytes;
use kafka_protocol::messages::{
    AddPartitionsToTxnResponse, ApiVersionsResponse, ConsumerGroupDescribeResponse, DescribeConfigsResponse,
    DescribeGroupsResponse, DescribeLogDirsResponse, EndTxnResponse, FindCoordinatorResponse, InitProducerIdResponse,
    ListGroupsResponse, ListOffsetsResponse, MetadataResponse, OffsetFetchResponse, ProduceResponse,
    SaslAuthenticateResponse, SaslHandshakeResponse, ShareGroupDescribeResponse,
};

use crate::wire::answer_shape::{self, Answer};

/// A Fetch v12 answer's frame: read, and every partition's records walked
/// to their end (committed-only and every-record readers both).
pub fn fetch_answer(frame: &[u8]) {
    let Ok(answer) = crate::wire::fetch_response::read_fetch_response(frame) else { return };
    for p in &answer.partitions {
        for committed_only in [false, true] {
            let bytes = Bytes::copy_from_slice(p.records);
            records_walk(bytes, p.log_start_offset, committed_only, p.aborted.clone());
        }
    }
}

/// A partition's record batches, walked from `from` to their end.
pub fn records(batches: &[u8], from: i64, committed_only: bool) {
    records_walk(Bytes::copy_from_slice(batches), from, committed_only, vec![(7, from)]);
}

fn records_walk(batches: Bytes, from: i64, committed_only: bool, aborted: Vec<(i64, i64)>) {
    let mut walk = crate::wire::records::PartitionRecords::new(batches, from, committed_only, aborted);
    // Each step moves on (a record, or a batch skipped as corrupt); the
    // walk ends, bounded by the bytes.
    for _ in 0..1_000_000 {
        match walk.next_record() {
            Ok(Some(r)) => {
                let buffer = walk.buffer();
                let _ = r.key.and_then(|k| buffer.get(k));
                let _ = r.value.and_then(|v| buffer.get(v));
            }
            Ok(None) => return,
            Err(_) => {}
        }
    }
}

/// The first record at or after each of `wants` in a partition's batches,
/// as record times are read.
pub fn record_times(batches: &[u8], wants: &[i64]) {
    let answers = crate::wire::record_batch::first_records_from(batches, wants);
    assert_eq!(answers.len(), wants.len(), "one answer per offset wanted");
    let _ = crate::wire::record_batch::after_whole_batches(batches);
}

/// A compressed batch's records inflated with `codec`, at most `most` bytes.
pub fn inflate(codec: i16, compressed: &[u8], most: usize) {
    if let Ok(out) = crate::wire::inflate::inflate(codec, compressed, most) {
        assert!(out.len() <= most, "inflated past the cap");
    }
}

/// An answer to the call `which` selects (of the answers, at the versions,
/// kshard decodes with the kafka-protocol crate): checked against its shape
/// and, when it fits, decoded, as `BrokerLink::call` does.
pub fn answer(which: u8, body: &[u8]) {
    match which % 19 {
        0 => checked::<MetadataResponse>(body, 9),
        1 => checked::<ListOffsetsResponse>(body, 7),
        2 => checked::<ApiVersionsResponse>(body, 3),
        3 => checked::<SaslHandshakeResponse>(body, 1),
        4 => checked::<SaslAuthenticateResponse>(body, 2),
        5 => checked::<ListGroupsResponse>(body, 5),
        6 => checked::<FindCoordinatorResponse>(body, 4),
        7 => checked::<ShareGroupDescribeResponse>(body, 1),
        8 => checked::<DescribeConfigsResponse>(body, 4),
        9 => checked::<DescribeLogDirsResponse>(body, 4),
        10 => checked::<ApiVersionsResponse>(body, 0),
        11 => checked::<ListGroupsResponse>(body, 4),
        12 => checked::<OffsetFetchResponse>(body, 8),
        13 => checked::<DescribeGroupsResponse>(body, 5),
        14 => checked::<ConsumerGroupDescribeResponse>(body, 0),
        15 => checked::<ProduceResponse>(body, 9),
        16 => checked::<InitProducerIdResponse>(body, 4),
        17 => checked::<AddPartitionsToTxnResponse>(body, 3),
        _ => checked::<EndTxnResponse>(body, 3),
    }
}

fn checked<A: Answer>(body: &[u8], version: i16) {
    let _ = answer_shape::decode::<A>(Bytes::copy_from_slice(body), version);
}
