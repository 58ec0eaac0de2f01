//! A Fetch v12 response read in place: its header, error code and each
//! partition's error code, high watermark and record bytes, borrowed from the
//! frame. [`crate::FetchTimes`] reads tens of thousands of partitions a
//! refresh; the generic decoder (kafka-protocol's `FetchResponse`) allocated
//! and copied per partition, and was most of its CPU time.
//!
//! The layout (Kafka's `FetchResponse.json`, version 12, flexible):
//! header `correlation_id int32, tagged fields`; body `throttle_time_ms
//! int32, error_code int16, session_id int32, responses [topic compact string,
//! partitions [partition_index int32, error_code int16, high_watermark int64,
//! last_stable_offset int64, log_start_offset int64, aborted_transactions
//! [producer_id int64, first_offset int64, tagged fields] (nullable),
//! preferred_read_replica int32, records compact bytes (nullable), tagged
//! fields], tagged fields], tagged fields`. The reads are
//! [`kshard_offsets::cursor`]'s: checked, and a length past the frame's end
//! is an error before anything is allocated for it.

use kshard_offsets::cursor::{Cursor, CursorError};

/// One partition of a response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PartitionData<'a> {
    pub(crate) topic: &'a str,
    pub(crate) partition: i32,
    pub(crate) error_code: i16,
    pub(crate) high_watermark: i64,
    /// The end of what a read-committed reader may see: the first offset of
    /// the oldest open transaction, or the high watermark (-1: unknown).
    pub(crate) last_stable_offset: i64,
    pub(crate) log_start_offset: i64,
    /// Transactions aborted in the range returned, (producer id, first
    /// offset); empty for a read-uncommitted Fetch.
    pub(crate) aborted: Vec<(i64, i64)>,
    /// The record batches (empty when the broker sent none).
    pub(crate) records: &'a [u8],
}

/// A response, borrowing the frame it was read from.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct FetchAnswer<'a> {
    pub(crate) error_code: i16,
    /// The fetch session (KIP-227) the broker keeps for the next request, 0: none.
    pub(crate) session_id: i32,
    pub(crate) partitions: Vec<PartitionData<'a>>,
}

/// Where a frame stopped making sense, and why.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
#[error("malformed Fetch response at byte {at}: {what}")]
pub(crate) struct Malformed {
    at: usize,
    what: &'static str,
}

/// Reads `frame` (the bytes after the 4-byte size) as a Fetch v12 response.
pub(crate) fn read_fetch_response(frame: &[u8]) -> Result<FetchAnswer<'_>, Malformed> {
    let mut r = Wire(Cursor::new(frame));
    // The correlation id: [`crate::wire::broker_link::BrokerLink::send`] checked it.
    let _correlation_id = r.i32()?;
    r.skip_tagged_fields()?;
    let _throttle_time_ms = r.i32()?;
    let error_code = r.i16()?;
    let session_id = r.i32()?;
    let mut partitions = Vec::new();
    for _ in 0..r.compact_len()?.unwrap_or(0) {
        let topic = r.compact_str()?;
        let count = r.compact_len()?.unwrap_or(0);
        partitions.reserve(count.min(r.left() / 40));
        for _ in 0..count {
            let partition = r.i32()?;
            let error_code = r.i16()?;
            let high_watermark = r.i64()?;
            let last_stable_offset = r.i64()?;
            let log_start_offset = r.i64()?;
            let mut aborted = Vec::new();
            for _ in 0..r.compact_len()?.unwrap_or(0) {
                aborted.push((r.i64()?, r.i64()?));
                r.skip_tagged_fields()?;
            }
            let _preferred_read_replica = r.i32()?;
            let records = match r.compact_len()? {
                Some(n) => r.take(n, "records")?,
                None => &[],
            };
            r.skip_tagged_fields()?;
            partitions.push(PartitionData {
                topic,
                partition,
                error_code,
                high_watermark,
                last_stable_offset,
                log_start_offset,
                aborted,
                records,
            });
        }
        r.skip_tagged_fields()?;
    }
    r.skip_tagged_fields()?;
    Ok(FetchAnswer { error_code, session_id, partitions })
}

/// A frame's reads: [`Cursor`]'s, each failing with what it was reading.
struct Wire<'a>(Cursor<'a>);

/// The answer's error for a cursor's: `what` was being read where it stopped.
fn named(what: &'static str) -> impl FnOnce(CursorError) -> Malformed {
    move |e| Malformed { at: e.at(), what }
}

impl<'a> Wire<'a> {
    fn left(&self) -> usize {
        self.0.remaining()
    }

    fn take(&mut self, n: usize, what: &'static str) -> Result<&'a [u8], Malformed> {
        self.0.take(n).map_err(named(what))
    }

    fn i16(&mut self) -> Result<i16, Malformed> {
        self.0.i16().map_err(named("an int16"))
    }

    fn i32(&mut self) -> Result<i32, Malformed> {
        self.0.i32().map_err(named("an int32"))
    }

    fn i64(&mut self) -> Result<i64, Malformed> {
        self.0.i64().map_err(named("an int64"))
    }

    fn uvarint(&mut self) -> Result<u64, Malformed> {
        self.0.uvarlong().map_err(|e| match e {
            CursorError::VarintOverflow { at, .. } => Malformed { at, what: "a varint over 10 bytes" },
            e => named("a varint")(e),
        })
    }

    /// A compact length (N + 1, 0 for null): `None` for null.
    fn compact_len(&mut self) -> Result<Option<usize>, Malformed> {
        let start = self.0.position();
        match self.uvarint()? {
            0 => Ok(None),
            n => {
                let n = usize::try_from(n - 1).map_err(|_| Malformed { at: start, what: "a length too large" })?;
                // No element takes less than a byte: a count past the frame is a lie.
                let n =
                    self.0.fits(n, 1).map_err(|_| Malformed { at: start, what: "a length past the frame's end" })?;
                Ok(Some(n))
            }
        }
    }

    fn compact_str(&mut self) -> Result<&'a str, Malformed> {
        let start = self.0.position();
        let n = self.compact_len()?.ok_or(Malformed { at: start, what: "a null topic name" })?;
        self.0.utf8(n).map_err(|e| match e {
            CursorError::InvalidUtf8 { .. } => Malformed { at: start, what: "a topic name not UTF-8" },
            e => named("a topic name")(e),
        })
    }

    fn skip_tagged_fields(&mut self) -> Result<(), Malformed> {
        for _ in 0..self.uvarint()? {
            let _tag = self.uvarint()?;
            let size = self.uvarint()?;
            let size = usize::try_from(size)
                .map_err(|_| Malformed { at: self.0.position(), what: "a tagged field too large" })?;
            self.take(size, "a tagged field")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::{Bytes, BytesMut};
    use kafka_protocol::messages::fetch_response::{
        AbortedTransaction, EpochEndOffset, FetchableTopicResponse, LeaderIdAndEpoch, PartitionData as Partition,
    };
    use kafka_protocol::messages::{BrokerId, FetchResponse, ProducerId, ResponseHeader, TopicName};
    use kafka_protocol::protocol::{Encodable, HeaderVersion, StrBytes};
    use proptest::prelude::*;

    /// A partition: index, error code, high watermark, records.
    type Part = (i32, i16, i64, Option<&'static [u8]>);

    /// A response as the generic encoder writes it (the bytes a broker sends).
    fn encoded(correlation_id: i32, topics: &[(&str, Vec<Part>)]) -> Vec<u8> {
        let response = FetchResponse::default().with_responses(
            topics
                .iter()
                .map(|(name, partitions)| {
                    FetchableTopicResponse::default()
                        .with_topic(TopicName(StrBytes::from_string((*name).to_owned())))
                        .with_partitions(
                            partitions
                                .iter()
                                .map(|&(index, error, hw, records)| {
                                    Partition::default()
                                        .with_partition_index(index)
                                        .with_error_code(error)
                                        .with_high_watermark(hw)
                                        .with_last_stable_offset(11)
                                        .with_log_start_offset(2)
                                        .with_aborted_transactions(Some(vec![
                                            AbortedTransaction::default()
                                                .with_producer_id(ProducerId(7))
                                                .with_first_offset(3),
                                        ]))
                                        // Tagged fields a v12 broker may add.
                                        .with_diverging_epoch(
                                            EpochEndOffset::default().with_epoch(2).with_end_offset(9),
                                        )
                                        .with_current_leader(LeaderIdAndEpoch::default().with_leader_id(BrokerId(1)))
                                        .with_records(records.map(Bytes::from_static))
                                })
                                .collect(),
                        )
                })
                .collect(),
        );
        let mut buf = BytesMut::new();
        ResponseHeader::default()
            .with_correlation_id(correlation_id)
            .encode(&mut buf, FetchResponse::header_version(12))
            .expect("header");
        response.encode(&mut buf, 12).expect("body");
        buf.to_vec()
    }

    #[test]
    fn reads_what_the_generic_encoder_wrote() {
        let frame = encoded(
            42,
            &[("orders", vec![(0, 0, 100, Some(b"batches")), (3, 6, -1, None)]), ("pay", vec![(1, 0, 5, Some(b""))])],
        );
        let answer = read_fetch_response(&frame).expect("read");
        assert_eq!(answer.error_code, 0);
        let p = |topic, partition, error_code, high_watermark, records| PartitionData {
            topic,
            partition,
            error_code,
            high_watermark,
            last_stable_offset: 11,
            log_start_offset: 2,
            aborted: vec![(7, 3)],
            records,
        };
        assert_eq!(
            answer.partitions,
            vec![p("orders", 0, 0, 100, &b"batches"[..]), p("orders", 3, 6, -1, &[]), p("pay", 1, 0, 5, &[])]
        );
    }

    #[test]
    fn a_cut_frame_is_malformed_at_every_length() {
        let frame = encoded(1, &[("t", vec![(0, 0, 9, Some(b"records")), (1, 0, 9, None)])]);
        for end in 0..frame.len() {
            assert!(read_fetch_response(&frame[..end]).is_err(), "cut at {end} of {}", frame.len());
        }
    }

    proptest! {
        #[test]
        fn never_panics_on_any_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
            let _ = read_fetch_response(&bytes);
        }
    }
}
