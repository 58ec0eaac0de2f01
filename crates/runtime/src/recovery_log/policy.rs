//! A primary's timing decisions, pure: when one consumer transaction ends,
//! whether it is committed, and when the log is due a snapshot. The worker
//! reads its clock (tokio's: paused and stepped in the simulation) and asks;
//! nothing here waits or reads a clock.

use std::time::Duration;

use crate::model::ShardSpec;

/// A primary whose sources are idle commits an empty transaction this often,
/// so that its standbys know it runs (see
/// [`crate::Progress::applied`]).
pub const HEARTBEAT: Duration = Duration::from_secs(2);

/// A transaction ends at the first message boundary once its writes and
/// outputs hold this much (the writes' bytes, the outputs as encoded in
/// their batches; a batch's buffer may hold up to twice that): a member of
/// 8 shards, each building one transaction while Kafka commits the one
/// before, holds a few tens of MiB of them at most. Measured with `kshard
/// bench runtime` (word count, 250,000 lines drained), when outputs were
/// held as records: 1 MiB took peak RSS from 146 to 79 MB for 28% more CPU
/// per line than 4 MiB; outputs encoded as published, 58 MB. A message's own
/// writes and outputs are never split, whatever their size: its log records
/// are split in parts of under 1 MiB and go to Kafka with its outputs in one
/// Kafka transaction.
pub(crate) const MAX_TRANSACTION_BYTES: usize = 1 << 20;

/// The longest a transaction waits for one event before it looks at the
/// time again.
const POLL_AT_MOST: Duration = Duration::from_millis(100);

/// The longest a transaction waits for one event while the one before it
/// commits: how late, at most, it sees that commit end.
const COMMIT_CHECK: Duration = Duration::from_millis(2);

/// What the sources' last poll gave a transaction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Polled {
    /// A message, taken: the transaction's writes are now this many bytes.
    Message {
        /// The transaction's writes so far.
        bytes: usize,
    },
    /// A source read to its end.
    EndOfSource,
    /// Nothing within the wait.
    Idle,
}

/// A transaction ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct End {
    /// The sources had nothing more: the next transaction waits until they
    /// are readable.
    pub drained: bool,
}

/// A shard's transaction timing: at least `min` long, at most `max`, ending
/// early once `min` has passed and nothing more is ready.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Timing {
    min: Duration,
    max: Duration,
}

impl Timing {
    /// The shard's settings (a maximum of 0 ms is taken as 1 ms).
    pub(crate) fn of(spec: &ShardSpec) -> Self {
        Timing {
            min: Duration::from_millis(spec.min_txn_duration_ms),
            max: Duration::from_millis(spec.max_txn_duration_ms.max(1)),
        }
    }

    /// How long the poll at `elapsed` into the transaction may wait; `None`
    /// when the transaction is at its maximum and ends. While the
    /// transaction before is `committing`, in short waits: it is to end
    /// soon after that commit does.
    pub(crate) fn before_poll(&self, elapsed: Duration, committing: bool) -> Option<Duration> {
        let left = self.max.checked_sub(elapsed).filter(|left| !left.is_zero())?;
        Some(left.min(if committing { COMMIT_CHECK } else { POLL_AT_MOST }))
    }

    /// Whether the transaction ends after a poll begun at `elapsed` gave
    /// `polled`; `None` goes on polling. Nothing more ready (or a source's
    /// end) ends it past its minimum only once the transaction before is
    /// committed (not `committing`): until then it takes what comes, so
    /// that under a steady load each transaction takes what arrived while
    /// the one before committed — as many messages per commit as the
    /// commit's round trips allow, as Gazette's pipelined transactions do.
    pub(crate) fn after_poll(&self, elapsed: Duration, polled: Polled, committing: bool) -> Option<End> {
        let may_end = elapsed >= self.min && !committing;
        match polled {
            Polled::Message { bytes } if bytes >= MAX_TRANSACTION_BYTES => Some(End { drained: false }),
            Polled::EndOfSource if may_end => Some(End { drained: false }),
            Polled::Idle if may_end => Some(End { drained: true }),
            Polled::Message { .. } | Polled::EndOfSource | Polled::Idle => None,
        }
    }
}

/// The longest a transaction may go on taking messages without reading its
/// clock: its duration is decided on a clock read this late at most (plus
/// one message's consumption).
const UNCLOCKED_AT_MOST: Duration = Duration::from_millis(1);

/// The most messages a transaction takes between two reads of its clock.
const MESSAGES_PER_CLOCK_AT_MOST: u32 = 64;

/// When a transaction reads its clock: before every poll that follows
/// anything but a message, and otherwise once as many messages were taken
/// as fit in [`UNCLOCKED_AT_MOST`] at the pace of the last ones (a read per
/// message was a measurable share of a cold start; an application that
/// takes long per message gets a read per message).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ClockReads {
    /// Messages taken since the last read.
    since: u32,
    /// Messages to take before the next read.
    every: u32,
    /// What the last read gave: the transaction's age then.
    last: Duration,
    /// The last poll gave no message: read before the next.
    due: bool,
}

impl Default for ClockReads {
    fn default() -> Self {
        ClockReads { since: 0, every: 1, last: Duration::ZERO, due: true }
    }
}

impl ClockReads {
    /// Whether the clock is read before the next poll.
    pub(crate) fn due(&self) -> bool {
        self.due || self.since >= self.every
    }

    /// The clock said the transaction is `elapsed` old.
    pub(crate) fn read(&mut self, elapsed: Duration) {
        let took = elapsed.saturating_sub(self.last);
        if self.since > 0 {
            // At this pace, how many messages fit in the time allowed.
            let per_message = took / self.since;
            let fit = UNCLOCKED_AT_MOST.as_nanos().checked_div(per_message.as_nanos()).unwrap_or(u128::MAX);
            self.every = u32::try_from(fit).unwrap_or(u32::MAX).clamp(1, MESSAGES_PER_CLOCK_AT_MOST);
        }
        (self.since, self.last, self.due) = (0, elapsed, false);
    }

    /// A poll gave `polled`.
    pub(crate) fn polled(&mut self, polled: Polled) {
        match polled {
            Polled::Message { .. } => self.since += 1,
            Polled::EndOfSource | Polled::Idle => self.due = true,
        }
    }
}

/// Whether a transaction that took `messages` and moved a source position
/// (`moved`) is committed, `since_commit` after the last commit: an empty one
/// only as a [`HEARTBEAT`].
pub(crate) fn commits(messages: usize, moved: bool, since_commit: Duration) -> bool {
    messages > 0 || moved || since_commit >= HEARTBEAT
}

/// Whether the log written since the last snapshot (`since_snapshot` bytes)
/// has outgrown the shard's policy, the last snapshot being
/// `snapshot_bytes` long: more than `snapshot_min_bytes` and more than
/// `snapshot_factor` times the snapshot.
pub(crate) fn snapshot_due(spec: &ShardSpec, since_snapshot: u64, snapshot_bytes: u64) -> bool {
    since_snapshot > spec.snapshot_min_bytes
        && since_snapshot > u64::from(spec.snapshot_factor).saturating_mul(snapshot_bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn timing(min_ms: u64, max_ms: u64) -> Timing {
        Timing { min: Duration::from_millis(min_ms), max: Duration::from_millis(max_ms) }
    }

    const MS: fn(u64) -> Duration = Duration::from_millis;

    #[test]
    fn a_transaction_polls_until_its_maximum_in_short_waits() {
        let t = timing(0, 1_000);
        assert_eq!(t.before_poll(MS(0), false), Some(MS(100)));
        assert_eq!(t.before_poll(MS(950), false), Some(MS(50)));
        assert_eq!(t.before_poll(MS(1_000), false), None);
        // A steady stream of messages goes on to the maximum.
        assert_eq!(t.after_poll(MS(990), Polled::Message { bytes: 10 }, false), None);
    }

    #[test]
    fn past_its_minimum_a_transaction_ends_when_nothing_more_is_ready() {
        let t = timing(200, 1_000);
        // Before the minimum, idle polls and source ends keep it open.
        assert_eq!(t.after_poll(MS(100), Polled::Idle, false), None);
        assert_eq!(t.after_poll(MS(100), Polled::EndOfSource, false), None);
        // After it, idle ends it drained; a source's end ends it (the next
        // transaction polls again at once: other sources may have more).
        assert_eq!(t.after_poll(MS(200), Polled::Idle, false), Some(End { drained: true }));
        assert_eq!(t.after_poll(MS(200), Polled::EndOfSource, false), Some(End { drained: false }));
        assert_eq!(t.after_poll(MS(200), Polled::Message { bytes: 1 }, false), None);
    }

    #[test]
    fn while_the_transaction_before_commits_one_takes_what_comes_until_its_maximum() {
        let t = timing(0, 1_000);
        assert_eq!(t.before_poll(MS(10), true), Some(COMMIT_CHECK));
        assert_eq!(t.after_poll(MS(10), Polled::Idle, true), None);
        assert_eq!(t.after_poll(MS(10), Polled::EndOfSource, true), None);
        assert_eq!(
            t.after_poll(MS(10), Polled::Message { bytes: MAX_TRANSACTION_BYTES }, true),
            Some(End { drained: false })
        );
        // The commit done, nothing more ready ends it; the maximum always does.
        assert_eq!(t.after_poll(MS(11), Polled::Idle, false), Some(End { drained: true }));
        assert_eq!(t.before_poll(MS(1_000), true), None);
    }

    #[test]
    fn a_transaction_ends_before_its_record_outgrows_kafkas_limit() {
        let t = timing(0, 1_000);
        let full = Polled::Message { bytes: MAX_TRANSACTION_BYTES };
        assert_eq!(t.after_poll(MS(1), full, false), Some(End { drained: false }));
        assert_eq!(t.after_poll(MS(1), Polled::Message { bytes: MAX_TRANSACTION_BYTES - 1 }, false), None);
    }

    #[test]
    fn the_clock_is_read_as_often_as_a_millisecond_of_messages_allows() {
        let mut clock = ClockReads::default();
        assert!(clock.due(), "the first poll reads it");
        clock.read(MS(0));
        clock.polled(Polled::Message { bytes: 1 });
        assert!(clock.due(), "at first, after every message");
        // 10 µs a message: 64 messages at most between reads.
        clock.read(Duration::from_micros(10));
        for _ in 0..63 {
            clock.polled(Polled::Message { bytes: 1 });
            assert!(!clock.due());
        }
        clock.polled(Polled::Message { bytes: 1 });
        assert!(clock.due());
        // 100 µs a message: 10 between reads.
        clock.read(Duration::from_micros(10 + 6_400));
        for _ in 0..9 {
            clock.polled(Polled::Message { bytes: 1 });
        }
        assert!(!clock.due());
        clock.polled(Polled::Message { bytes: 1 });
        assert!(clock.due());
        // Slow messages: a read after each.
        clock.read(Duration::from_micros(10 + 6_400 + 50_000));
        clock.polled(Polled::Message { bytes: 1 });
        assert!(clock.due());
        clock.read(MS(100));
        // Anything but a message: read before the next poll.
        clock.polled(Polled::Idle);
        assert!(clock.due());
        clock.read(MS(101));
        clock.polled(Polled::EndOfSource);
        assert!(clock.due());
    }

    #[test]
    fn a_clock_that_stands_still_is_read_every_64_messages() {
        // tokio's paused clock in the simulation: no time passes per message.
        let mut clock = ClockReads::default();
        clock.read(MS(5));
        clock.polled(Polled::Message { bytes: 1 });
        clock.read(MS(5));
        for _ in 0..MESSAGES_PER_CLOCK_AT_MOST {
            assert!(!clock.due());
            clock.polled(Polled::Message { bytes: 1 });
        }
        assert!(clock.due());
    }

    #[test]
    fn a_maximum_of_zero_is_one_millisecond() {
        let spec: ShardSpec = serde_json::from_str(
            r#"{"id":"s","sources":[],"recovery_log":{"topic":"l","partition":0},"max_txn_duration_ms":0}"#,
        )
        .expect("spec");
        assert_eq!(Timing::of(&spec).before_poll(MS(0), false), Some(MS(1)));
    }

    #[test]
    fn an_idle_primary_commits_only_its_heartbeat() {
        assert!(!commits(0, false, MS(1_999)));
        assert!(commits(0, false, HEARTBEAT));
        assert!(commits(1, false, MS(0)));
        assert!(commits(0, true, MS(0)), "a source position moved past transaction markers");
    }

    #[test]
    fn a_snapshot_is_due_once_the_log_outgrows_both_bounds() {
        let mut spec: ShardSpec =
            serde_json::from_str(r#"{"id":"s","sources":[],"recovery_log":{"topic":"l","partition":0}}"#)
                .expect("spec");
        (spec.snapshot_min_bytes, spec.snapshot_factor) = (1_000, 2);
        assert!(!snapshot_due(&spec, 1_000, 0), "not past the minimum");
        assert!(snapshot_due(&spec, 1_001, 0));
        assert!(!snapshot_due(&spec, 2_000, 1_000), "not past twice the last snapshot");
        assert!(snapshot_due(&spec, 2_001, 1_000));
    }
}
