//! Produce requests and their answers, without I/O: a partition's records
//! as one record batch (v2) stamped with its producer's id, epoch and
//! sequence, the request that carries one batch per partition, and what
//! each partition's answer means for its batch ([`Landed`]).
//!
//! Versions: Produce v9, the first flexible one (Kafka 2.4+; Kafka 4 reads
//! 3 to 13). The request's transactional id is the one producer whose
//! batches it carries: a broker checks the id's rights and, since Kafka
//! 3.6, that each partition was added to that id's open transaction.

use std::time::Duration;

use bytes::Bytes;
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::{ProduceRequest, ProduceResponse, TopicName, TransactionalId};
use kafka_protocol::protocol::StrBytes;

use crate::retry::retriable_code;

/// Produce v9.
pub(crate) const PRODUCE_VERSION: i16 = 9;

/// One record to write: key, value (`None`: null, a tombstone), headers and
/// its creation time in milliseconds since the epoch.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OutRecord {
    /// The key (`None`: null).
    pub key: Option<Bytes>,
    /// The value (`None`: null).
    pub value: Option<Bytes>,
    /// Headers, in order (a name may repeat).
    pub headers: Vec<(String, Option<Bytes>)>,
    /// Creation time, milliseconds since the epoch.
    pub timestamp_ms: i64,
}

impl OutRecord {
    /// A record of `key` and `value`, created now, without headers.
    pub fn new(key: Option<&[u8]>, value: Option<&[u8]>) -> Self {
        OutRecord {
            key: key.map(Bytes::copy_from_slice),
            value: value.map(Bytes::copy_from_slice),
            headers: Vec::new(),
            timestamp_ms: now_ms(),
        }
    }

    /// The record stamped with `timestamp_ms` (an input's, say, as Kafka
    /// Streams carries event time through), or left at its creation time
    /// when that is unknown (negative, as for a record without a timestamp).
    #[must_use]
    pub fn at(self, timestamp_ms: i64) -> Self {
        if timestamp_ms >= 0 { OutRecord { timestamp_ms, ..self } } else { self }
    }
}

/// Milliseconds since the epoch, now.
pub(crate) fn now_ms() -> i64 {
    let since = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    i64::try_from(since.as_millis()).unwrap_or(i64::MAX)
}

/// Who writes a batch: the producer id and epoch InitProducerId gave.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct Identity {
    /// The producer id.
    pub(crate) id: i64,
    /// Its epoch: a higher one fences every writer of a lower one.
    pub(crate) epoch: i16,
}

/// The sequence after `sequence` + `records`, wrapping as Kafka's do.
pub(crate) fn sequence_after(sequence: i32, records: usize) -> i32 {
    let records = i32::try_from(records).unwrap_or(i32::MAX);
    let next = i64::from(sequence) + i64::from(records);
    i32::try_from(next % (i64::from(i32::MAX) + 1)).unwrap_or(0)
}

/// A Produce request of `batches` (topic, partition, one batch each) for
/// `transactional_id` (`None`: an idempotent producer's), acknowledged by
/// every in-sync replica, the broker waiting at most `timeout` for them.
pub(crate) fn request(
    transactional_id: Option<&str>,
    timeout: Duration,
    batches: &[(&str, i32, Bytes)],
) -> ProduceRequest {
    let mut topics: Vec<TopicProduceData> = Vec::new();
    for (topic, partition, batch) in batches {
        let data = PartitionProduceData::default().with_index(*partition).with_records(Some(batch.clone()));
        match topics.iter_mut().find(|t| t.name.0.as_str() == *topic) {
            Some(t) => t.partition_data.push(data),
            None => topics.push(
                TopicProduceData::default()
                    .with_name(TopicName(StrBytes::from_string((*topic).to_owned())))
                    .with_partition_data(vec![data]),
            ),
        }
    }
    ProduceRequest::default()
        .with_transactional_id(transactional_id.map(|id| TransactionalId(StrBytes::from_string(id.to_owned()))))
        .with_acks(-1)
        .with_timeout_ms(i32::try_from(timeout.as_millis()).unwrap_or(i32::MAX))
        .with_topic_data(topics)
}

/// What became of one partition's batch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Landed {
    /// Written; its first record's offset (−1 when the broker did not say:
    /// a duplicate of a batch it had).
    Written(i64),
    /// Not written, for now (a leader that moved, too few replicas in sync,
    /// a timeout): send the same batch, same sequence, again.
    Again(i16),
    /// A writer with a newer epoch took the producer id over: nothing this
    /// producer sends is written any more.
    Fenced(i16),
    /// The broker lost track of this producer's sequence (OUT_OF_ORDER,
    /// UNKNOWN_PRODUCER_ID): no batch after it can be written until the
    /// producer starts over with a new epoch.
    OutOfSequence(i16),
    /// Refused for good (too large, not authorized, no such topic): the
    /// error code and the broker's message.
    Refused(i16, String),
}

/// How a Produce answer's error `code` lands a batch.
pub(crate) fn landed(code: i16, base_offset: i64, message: Option<&str>) -> Landed {
    match code {
        0 => Landed::Written(base_offset),
        // DUPLICATE_SEQUENCE_NUMBER: the broker has this batch already.
        46 => Landed::Written(-1),
        // INVALID_PRODUCER_EPOCH, PRODUCER_FENCED.
        47 | 90 => Landed::Fenced(code),
        // OUT_OF_ORDER_SEQUENCE_NUMBER, UNKNOWN_PRODUCER_ID.
        45 | 59 => Landed::OutOfSequence(code),
        // CORRUPT_MESSAGE is retriable to Kafka, but a batch kshard encoded
        // is corrupt only if it is refused again: once more at most is the
        // caller's deadline's business.
        code if retriable_code(code) => Landed::Again(code),
        code => Landed::Refused(code, message.unwrap_or_default().to_owned()),
    }
}

/// Each partition's outcome in `answer`, as (topic, partition, outcome).
pub(crate) fn outcomes(answer: &ProduceResponse) -> Vec<(String, i32, Landed)> {
    answer
        .responses
        .iter()
        .flat_map(|t| {
            t.partition_responses.iter().map(move |p| {
                let message = p.error_message.as_ref().map(|m| m.as_str());
                (t.name.0.to_string(), p.index, landed(p.error_code, p.base_offset, message))
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::BytesMut;
    use kafka_protocol::protocol::{Decodable, Encodable};

    fn record(key: &str, value: Option<&str>) -> OutRecord {
        OutRecord {
            key: Some(Bytes::copy_from_slice(key.as_bytes())),
            value: value.map(|v| Bytes::copy_from_slice(v.as_bytes())),
            headers: vec![("reason".into(), Some(Bytes::from_static(b"why"))), ("empty".into(), None)],
            timestamp_ms: 1_700_000_000_000,
        }
    }

    #[test]
    fn a_record_takes_a_known_timestamp_and_keeps_its_own_for_an_unknown_one() {
        assert_eq!(record("a", None).at(5).timestamp_ms, 5);
        assert_eq!(record("a", None).at(-1).timestamp_ms, 1_700_000_000_000);
    }

    #[test]
    fn sequences_wrap_past_the_largest_int32() {
        assert_eq!(sequence_after(0, 3), 3);
        assert_eq!(sequence_after(i32::MAX, 1), 0);
        assert_eq!(sequence_after(i32::MAX - 1, 5), 3);
    }

    #[test]
    fn a_request_groups_partitions_by_topic_and_round_trips() {
        let batch = Bytes::from_static(b"batch");
        let request = request(
            Some("shard-1"),
            Duration::from_secs(30),
            &[("log", 0, batch.clone()), ("out", 2, batch.clone()), ("log", 1, batch)],
        );
        assert_eq!(request.topic_data.len(), 2);
        assert_eq!(request.topic_data[0].partition_data.len(), 2);
        assert_eq!(request.acks, -1);
        let mut body = BytesMut::new();
        request.encode(&mut body, PRODUCE_VERSION).expect("encodes");
        let back = ProduceRequest::decode(&mut body.freeze(), PRODUCE_VERSION).expect("decodes");
        assert_eq!(back, request);
    }

    #[test]
    fn each_answer_code_lands_a_batch_one_way() {
        assert_eq!(landed(0, 12, None), Landed::Written(12));
        assert_eq!(landed(46, 12, None), Landed::Written(-1));
        for code in [6, 7, 19, 20, 56] {
            assert_eq!(landed(code, -1, None), Landed::Again(code), "code {code}");
        }
        assert_eq!(landed(90, -1, None), Landed::Fenced(90));
        assert_eq!(landed(47, -1, None), Landed::Fenced(47));
        assert_eq!(landed(45, -1, None), Landed::OutOfSequence(45));
        assert_eq!(landed(10, -1, Some("too large")), Landed::Refused(10, "too large".into()));
        assert_eq!(landed(53, -1, None), Landed::Refused(53, String::new()));
    }
}
