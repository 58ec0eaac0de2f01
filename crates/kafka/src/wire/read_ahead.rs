//! How much a [`super::fetcher`] reads ahead for all its readers together:
//! each reader's queue has a limit of its own, but a process with many
//! readers (a runtime member's replicas, a source reader each) would hold
//! their limits and each partition's last answer many times over. Queued
//! records of every reader count against one budget; past it, nothing is
//! fetched until readers have read some down. Pure: bytes queued in, the
//! most the next answer may carry out.

use std::sync::atomic::{AtomicUsize, Ordering};

/// What one answer may carry: one partition's first ask (the broker still
/// sends a first batch larger than this whole). Records are handed out in
/// their answer's buffer when one reader reads every partition with records
/// in it, and copied for each reader otherwise (see `fetch_plan.rs`); an
/// answer of about one partition is read in place by the runtime's
/// replicas too (a partition each), with no copy, and holds no other
/// reader's records. Measured with `kshard bench catch-up` on the
/// 1M-commit load (medians of 3 and 5 runs, docs/performance.md): answers
/// of 4 MiB, copied for the 50 replicas, peaked at 36.1–37.1 MB for plain
/// `serve` (0.42–0.43 CPU-s, 0.42–0.58 s to ready); of 1 MiB, at
/// 27.6–28.1 MB (0.40–0.45 CPU-s, 0.66–0.72 s). The raw drain (one reader,
/// in place either way) peaked at 29.7 and 18.6 MB, at 0.21 CPU-s both;
/// `bench restart` did not change (106 MB, 3.1–3.2 s).
pub(crate) const ANSWER_MAX_BYTES: i32 = 1024 * 1024;
/// What one partition's part of an answer may carry at first; a batch
/// larger than this is asked for whole (its size is in its header).
pub(crate) const PARTITION_MAX_BYTES: i32 = 1024 * 1024;

/// What every reader of one fetcher may hold queued, together. A reader
/// of one queue of 1 MiB stays below it; a durable cold start (50 source
/// readers of 256 KiB each) held up to 58 MB queued before it. Measured
/// with `kshard bench restart` (3 runs each): 8 MiB gave 48–55 MB of peak
/// RSS and 1.8–2.4 s to ready, 16 MiB 53–56 MB and 1.6–1.9 s.
pub(crate) const READ_AHEAD_BYTES: usize = 16 << 20;

/// The bytes a fetcher's readers hold queued, shared by their queues.
#[derive(Debug, Default)]
pub(crate) struct Queued(AtomicUsize);

impl Queued {
    /// Bytes queued now.
    pub(crate) fn get(&self) -> usize {
        self.0.load(Ordering::Acquire)
    }

    /// `bytes` were queued.
    pub(crate) fn add(&self, bytes: usize) {
        self.0.fetch_add(bytes, Ordering::AcqRel);
    }

    /// `bytes` were read (or dropped with their queue): whether that made
    /// room for an answer where there was none.
    pub(crate) fn remove(&self, bytes: usize) -> bool {
        let before = self.0.fetch_sub(bytes, Ordering::AcqRel);
        answer_room(before).is_none() && answer_room(before.saturating_sub(bytes)).is_some()
    }
}

/// The most the next answer may carry when `queued` bytes are queued: the
/// room left in [`READ_AHEAD_BYTES`], at most [`ANSWER_MAX_BYTES`]; `None`
/// (nothing is fetched) while less than a partition's first ask is left,
/// so that answers stay large (readers read down what they hold meanwhile).
pub(crate) fn answer_room(queued: usize) -> Option<i32> {
    let room = READ_AHEAD_BYTES.saturating_sub(queued);
    let first_ask = usize::try_from(PARTITION_MAX_BYTES).unwrap_or(READ_AHEAD_BYTES);
    (room >= first_ask).then(|| i32::try_from(room).unwrap_or(i32::MAX).min(ANSWER_MAX_BYTES))
}

/// What to ask of a partition, asked for `max_bytes` when the read-ahead
/// has `room`. Without room, only readers that hold nothing are fetched
/// for (a reader that waits is never starved: a replica waiting to read its
/// own log's record back must get it), the least of whose queue limits is
/// `empty_limit` (`None`: every reader holds something; nothing is asked),
/// and for no more than that limit — or than `least`, the largest batch
/// that limit cut short before, asked for whole.
pub(crate) fn ask_bytes(max_bytes: i32, least: i32, room: bool, empty_limit: Option<usize>) -> Option<i32> {
    match (room, empty_limit) {
        (true, _) => Some(max_bytes),
        (false, None) => None,
        (false, Some(limit)) => Some(max_bytes.min(i32::try_from(limit).unwrap_or(i32::MAX).max(least)).max(1)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: usize = 1 << 20;

    #[test]
    fn an_answer_carries_what_the_budget_has_room_for_once_a_first_ask_fits() {
        assert_eq!(answer_room(0), Some(ANSWER_MAX_BYTES));
        assert_eq!(answer_room(READ_AHEAD_BYTES - 2 * MIB), Some(ANSWER_MAX_BYTES));
        assert_eq!(answer_room(READ_AHEAD_BYTES - MIB), Some(PARTITION_MAX_BYTES));
        assert_eq!(answer_room(READ_AHEAD_BYTES - MIB + 1), None, "less than a first ask left");
        assert_eq!(answer_room(READ_AHEAD_BYTES + 5 * MIB), None, "past it (an answer's last batch)");
    }

    #[test]
    fn without_room_only_readers_that_hold_nothing_are_fetched_for_up_to_their_limit() {
        let kib = |n: usize| n << 10;
        assert_eq!(ask_bytes(PARTITION_MAX_BYTES, 0, true, None), Some(PARTITION_MAX_BYTES));
        assert_eq!(ask_bytes(PARTITION_MAX_BYTES, 0, true, Some(kib(256))), Some(PARTITION_MAX_BYTES));
        assert_eq!(ask_bytes(PARTITION_MAX_BYTES, 0, false, None), None);
        assert_eq!(ask_bytes(PARTITION_MAX_BYTES, 0, false, Some(kib(256))), Some(kib(256) as i32));
        assert_eq!(ask_bytes(PARTITION_MAX_BYTES, 0, false, Some(kib(4096))), Some(PARTITION_MAX_BYTES));
        // A batch the limit cut short is asked for whole, up to the ask.
        assert_eq!(ask_bytes(PARTITION_MAX_BYTES, kib(300) as i32, false, Some(kib(256))), Some(kib(300) as i32));
        assert_eq!(ask_bytes(3 << 20, 3 << 20, false, Some(kib(256))), Some(3 << 20));
        assert_eq!(ask_bytes(PARTITION_MAX_BYTES, 0, false, Some(0)), Some(1));
    }

    #[test]
    fn reading_down_says_when_room_was_made() {
        let queued = Queued::default();
        queued.add(READ_AHEAD_BYTES);
        assert!(!queued.remove(1), "still no room");
        assert!(queued.remove(MIB), "room for a first ask");
        assert!(!queued.remove(MIB), "there was room already");
        assert_eq!(queued.get(), READ_AHEAD_BYTES - 2 * MIB - 1);
        queued.add(READ_AHEAD_BYTES);
        assert!(!queued.remove(READ_AHEAD_BYTES - MIB - 2), "still one byte short");
    }
}
