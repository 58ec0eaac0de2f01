//! Whether a store or a hint belongs to the log as it is: a log topic deleted
//! and created again (by an operator, or by Kafka's auto-creation when a
//! writer reaches a missing topic) starts a new chain at offset 0, and a
//! store or hint of the old one must not be played on into it.
//!
//! Every applied record moves a store's checkpoint, so the record just before
//! the checkpoint's offset is the last one the store applied: its sequence
//! number and the chain's checksum after it are the checkpoint's. A hint names
//! a snapshot-start record by its offset and the chain before it. Reading that
//! one record back tells whether the log still holds the chain the store or
//! hint was made from — without topic ids, and whatever replaced the log.

use std::time::Duration;

use kshard_kafka::Isolation;
use tokio::time::Instant;

use super::chain::checksum;
use super::record::{Body, LogRecord};
use crate::model::{Hint, RecoveryLog};
use crate::partitions::{Partitions, Polled, next_event};
use crate::store::LogPosition;

/// True when `bytes`, read at the offset before `position.next_offset`, is the
/// record after which a store holds `position`.
pub(crate) fn applied_last(bytes: &[u8], position: &LogPosition) -> bool {
    LogRecord::decode(bytes).is_ok_and(|r| r.seq == position.seq && checksum(r.prev, bytes) == position.checksum)
}

/// True when `bytes`, read at `hint.offset`, is the snapshot start `hint` names.
pub(crate) fn starts(bytes: &[u8], hint: &Hint) -> bool {
    LogRecord::decode(bytes)
        .is_ok_and(|r| r.body == Body::SnapshotStart && r.seq == hint.seq.saturating_add(1) && r.prev == hint.checksum)
}

/// True when `log` holds, at `hint.offset`, the snapshot start `hint` names
/// (false for a hint of a log since recreated).
pub(crate) async fn holds_snapshot(
    partitions: &dyn Partitions,
    log: &RecoveryLog,
    hint: &Hint,
    timeout: Duration,
) -> Result<bool, kshard_kafka::Error> {
    let read = record_at(partitions, &log.topic, log.partition, hint.offset, timeout).await?;
    Ok(read.is_some_and(|bytes| starts(&bytes, hint)))
}

/// `hint` when it can be started from: within the log's records from `low`
/// to `high`, and the log holds the snapshot start it names there (a
/// replica's start, a recovery and a prune all ask this first).
pub(crate) async fn usable_hint(
    partitions: &dyn Partitions,
    log: &RecoveryLog,
    hint: Option<Hint>,
    (low, high): (i64, i64),
    timeout: Duration,
) -> Result<Option<Hint>, kshard_kafka::Error> {
    match hint.filter(|h| (low..high).contains(&h.offset)) {
        Some(h) => Ok(holds_snapshot(partitions, log, &h, timeout).await?.then_some(h)),
        None => Ok(None),
    }
}

/// The value of the record at `offset` of `topic`/`partition`; `None` when
/// there is none there (deleted, or past the end). Bounded by `timeout`.
pub(crate) async fn record_at(
    partitions: &dyn Partitions,
    topic: &str,
    partition: i32,
    offset: i64,
    timeout: Duration,
) -> Result<Option<Vec<u8>>, kshard_kafka::Error> {
    let reader = partitions.reader(topic, &[(partition, Some(offset))], 64, Isolation::Uncommitted)?;
    let deadline = Instant::now() + timeout;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(kshard_kafka::Error::Refused {
                step: format!("reading {topic}/{partition} at {offset}"),
                message: format!("nothing came within {timeout:?}"),
            });
        }
        match next_event(reader.as_ref(), left).await? {
            Polled::Records(mut run) => match run.next_record()? {
                Some(r) if r.offset() == offset => return Ok(Some(r.value().unwrap_or_default().to_vec())),
                // Read from elsewhere (the offset was deleted: the reader
                // went to the start): not there.
                Some(_) => return Ok(None),
                None => {}
            },
            // The end reached: not there.
            Polled::EndOfPartition { .. } => return Ok(None),
            // Cut below the reader: read on from the start.
            Polled::Reset { .. } | Polled::Idle => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::recovery_log::chain::Chain;

    #[test]
    fn a_record_tells_its_own_chain_from_another() {
        let mut chain = Chain::default();
        let handoff = chain.next(7, Body::HandOff);
        let bytes = handoff.encode();
        chain.offer(&handoff, &bytes).expect("applies");
        let position = LogPosition { next_offset: 1, seq: chain.seq(), checksum: chain.checksum(), author: Some(7) };
        assert!(applied_last(&bytes, &position));
        let other = Chain::default().next(8, Body::HandOff).encode();
        assert!(!applied_last(&other, &position), "another chain's first record");
        assert!(!applied_last(b"not a record", &position));
        let start = chain.next(7, Body::SnapshotStart);
        let hint = Hint { offset: 1, seq: chain.seq(), checksum: chain.checksum(), author: Some(7), bytes: 0 };
        assert!(starts(&start.encode(), &hint));
        assert!(!starts(&bytes, &hint), "a hand-off is no snapshot start");
    }
}
