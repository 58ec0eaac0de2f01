//! A primary's timing decisions, pure: when one consumer transaction ends,
//! whether it is committed, and when the log is due a snapshot. The worker
//! reads its clock (tokio's: paused and stepped in the simulation) and asks;
//! nothing here waits or reads a clock.

use std::time::Duration;

use crate::model::ShardSpec;

/// A primary whose sources are idle commits an empty transaction this often,
/// so that its standbys know it runs (see
/// [`crate::replica_worker::Progress::applied`]).
pub const HEARTBEAT: Duration = Duration::from_secs(2);

/// A transaction ends at the first message boundary once its writes and
/// outputs hold this much memory (their bytes and their records' overhead):
/// a member of 8 shards, each building one transaction while Kafka commits
/// the one before, holds about 16 MiB of them at most. Measured with `kshard
/// bench runtime` (word count, 250,000 lines drained): 1 MiB took peak RSS
/// from 146 to 79 MB for 28% more CPU per line than 4 MiB. A message's own
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
