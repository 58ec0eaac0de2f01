//! A decompression bomb on the real broker: one zstd record batch whose
//! records inflate to gigabytes, built as a stream (the test never holds
//! the inflated bytes) and produced with a Produce request of its own, as
//! any client with Write on a topic could.

use std::io::{Read, Write};
use std::net::TcpStream;

use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::{ProduceRequest, ProduceResponse, RequestHeader, ResponseHeader, TopicName};
use kafka_protocol::protocol::{Decodable, Encodable, HeaderVersion, StrBytes};

/// Produce v9 (flexible).
const PRODUCE_VERSION: i16 = 9;

/// A v2 record batch, zstd-compressed, of a record for each of `values`
/// (offsets 0, 1, …; timestamps `timestamp_ms` + the offset, in ms), each
/// with a null key and a value of that many zero bytes (a record is at most
/// 2 GiB: its length is a 32-bit varint). Returns the batch's bytes.
pub fn zstd_bomb(values: &[u64], timestamp_ms: i64) -> Vec<u8> {
    let mut encoder = zstd::stream::write::Encoder::new(Vec::new(), 3).expect("a zstd encoder");
    encoder.include_contentsize(false).expect("streamed");
    let chunk = vec![0u8; 1 << 20];
    for (delta, &value_len) in values.iter().enumerate() {
        let delta = delta as i64;
        let mut head = Vec::new();
        head.push(0); // attributes
        varlong(&mut head, delta); // timestamp delta
        varlong(&mut head, delta); // offset delta
        varlong(&mut head, -1); // null key
        varlong(&mut head, i64::try_from(value_len).expect("a length"));
        let length = head.len() as u64 + value_len + 1; // + the header count
        let mut record = Vec::new();
        varlong(&mut record, i64::try_from(length).expect("a length"));
        record.extend(head);
        encoder.write_all(&record).expect("compresses");
        let mut left = value_len;
        while left > 0 {
            let n = left.min(chunk.len() as u64) as usize;
            encoder.write_all(&chunk[..n]).expect("compresses");
            left -= n as u64;
        }
        encoder.write_all(&[0]).expect("compresses"); // no headers
    }
    let compressed = encoder.finish().expect("compressed");
    let last = i32::try_from(values.len()).expect("a count") - 1;
    let mut after_crc = Vec::new();
    after_crc.extend(4i16.to_be_bytes()); // attributes: zstd
    after_crc.extend(last.to_be_bytes()); // last offset delta
    after_crc.extend(timestamp_ms.to_be_bytes()); // base timestamp
    after_crc.extend((timestamp_ms + i64::from(last)).to_be_bytes()); // max timestamp
    after_crc.extend((-1i64).to_be_bytes()); // producer id
    after_crc.extend((-1i16).to_be_bytes()); // producer epoch
    after_crc.extend((-1i32).to_be_bytes()); // base sequence
    after_crc.extend((last + 1).to_be_bytes()); // records
    after_crc.extend(compressed);
    let mut batch = Vec::new();
    batch.extend(0i64.to_be_bytes()); // base offset
    let length = i32::try_from(4 + 1 + 4 + after_crc.len()).expect("a batch length");
    batch.extend(length.to_be_bytes());
    batch.extend((-1i32).to_be_bytes()); // partition leader epoch
    batch.push(2); // magic
    batch.extend(crc32c::crc32c(&after_crc).to_be_bytes());
    batch.extend(after_crc);
    batch
}

/// A zigzag varlong.
fn varlong(out: &mut Vec<u8>, value: i64) {
    let mut v = ((value << 1) ^ (value >> 63)) as u64;
    loop {
        let byte = (v & 0x7f) as u8;
        v >>= 7;
        if v == 0 {
            out.push(byte);
            return;
        }
        out.push(byte | 0x80);
    }
}

/// Produces `batch` as it is to `topic`/`partition` on the PLAINTEXT
/// broker at `address` (acks=1): the base offset the broker gave it.
pub fn produce_batch(address: &str, topic: &str, partition: i32, batch: Vec<u8>) -> i64 {
    let request = ProduceRequest::default().with_acks(1).with_timeout_ms(30_000).with_topic_data(vec![
        TopicProduceData::default().with_name(TopicName(StrBytes::from_string(topic.to_owned()))).with_partition_data(
            vec![PartitionProduceData::default().with_index(partition).with_records(Some(Bytes::from(batch)))],
        ),
    ]);
    let header = RequestHeader::default()
        .with_request_api_key(0)
        .with_request_api_version(PRODUCE_VERSION)
        .with_correlation_id(1)
        .with_client_id(Some(StrBytes::from_static_str("kshard-test")));
    let mut body = BytesMut::new();
    header.encode(&mut body, ProduceRequest::header_version(PRODUCE_VERSION)).expect("a header");
    request.encode(&mut body, PRODUCE_VERSION).expect("a request");
    let mut tcp = TcpStream::connect(address).expect("connects to the broker");
    tcp.write_all(&(body.len() as i32).to_be_bytes()).expect("writes");
    tcp.write_all(&body).expect("writes");
    let mut size = [0u8; 4];
    tcp.read_exact(&mut size).expect("an answer");
    let mut frame = vec![0u8; i32::from_be_bytes(size) as usize];
    tcp.read_exact(&mut frame).expect("an answer");
    let mut frame = Bytes::from(frame);
    ResponseHeader::decode(&mut frame, ProduceResponse::header_version(PRODUCE_VERSION)).expect("a header");
    let answer = ProduceResponse::decode(&mut frame, PRODUCE_VERSION).expect("an answer");
    let p = &answer.responses[0].partition_responses[0];
    assert_eq!(p.error_code, 0, "the broker refused the batch: {p:?}");
    p.base_offset
}
