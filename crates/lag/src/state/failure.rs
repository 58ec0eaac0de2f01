//! What kind of failure stopped a worker or a refresh ([`FailureKind`], a
//! bounded label), what its supervisor does about it ([`Response`]), and
//! how many of each kind each worker met ([`FailureCounts`],
//! `kshard_worker_failures_total{worker, kind}`). Pure: the I/O layer names
//! the kind of each error it meets (`io/error.rs`), this decides.

use std::collections::BTreeMap;
use std::time::Duration;

/// What kind of failure: one label of a fixed few, so that a count by kind
/// stays bounded whatever the brokers say.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) enum FailureKind {
    /// The brokers or etcd did not answer, a connection failed, a leader
    /// was moving: passes by itself.
    Transient,
    /// An ACL refused (Kafka's authorization error codes).
    Authorization,
    /// TLS or authentication failed: the settings or the broker's
    /// certificate or users must change.
    Credentials,
    /// A client could not be made from the settings.
    Settings,
    /// The brokers refused for another reason.
    Refused,
    /// An answer or a record batch that does not add up.
    Malformed,
    /// The offsets topic is not there (yet), or partitions have no
    /// watermark yet.
    NotThereYet,
    /// The recovery-log topic could not be made ready or grown.
    RecoveryLog,
    /// etcd refused or did not answer.
    Keyspace,
    /// The member running the shards stopped.
    Runtime,
    /// A shard's key holds another application's shard.
    ShardTaken,
    /// A bug: the worker panicked.
    Panic,
}

impl FailureKind {
    /// Every kind.
    #[cfg(test)]
    const ALL: [FailureKind; 12] = [
        FailureKind::Transient,
        FailureKind::Authorization,
        FailureKind::Credentials,
        FailureKind::Settings,
        FailureKind::Refused,
        FailureKind::Malformed,
        FailureKind::NotThereYet,
        FailureKind::RecoveryLog,
        FailureKind::Keyspace,
        FailureKind::Runtime,
        FailureKind::ShardTaken,
        FailureKind::Panic,
    ];

    /// Its label.
    pub(crate) fn label(self) -> &'static str {
        match self {
            FailureKind::Transient => "transient",
            FailureKind::Authorization => "authorization",
            FailureKind::Credentials => "credentials",
            FailureKind::Settings => "settings",
            FailureKind::Refused => "refused",
            FailureKind::Malformed => "malformed",
            FailureKind::NotThereYet => "not_there_yet",
            FailureKind::RecoveryLog => "recovery_log",
            FailureKind::Keyspace => "keyspace",
            FailureKind::Runtime => "runtime",
            FailureKind::ShardTaken => "shard_taken",
            FailureKind::Panic => "panic",
        }
    }

    /// What the supervisor does after a failure of this kind.
    pub(crate) fn response(self) -> Response {
        match self {
            // Someone must grant an ACL, fix a certificate, a password or
            // the settings, or stop the other application: asking again
            // fast only fills the brokers' logs.
            FailureKind::Authorization | FailureKind::Credentials | FailureKind::Settings | FailureKind::ShardTaken => {
                Response::Hold
            }
            FailureKind::Transient
            | FailureKind::Refused
            | FailureKind::Malformed
            | FailureKind::NotThereYet
            | FailureKind::RecoveryLog
            | FailureKind::Keyspace
            | FailureKind::Runtime
            | FailureKind::Panic => Response::Retry,
        }
    }
}

/// What a worker's supervisor does after a failure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Response {
    /// Restart after a backoff that grows with failures in a row.
    Retry,
    /// Wait for someone to act: restart every [`HOLD`].
    Hold,
}

/// How long a held worker waits between tries.
pub(crate) const HOLD: Duration = Duration::from_secs(30);

impl Response {
    /// The wait before the next try, after `failures` in a row (1-based):
    /// 1 s, 2 s, 4 s, … up to 30 s when retrying; 30 s when held.
    pub(crate) fn wait(self, failures: u32) -> Duration {
        match self {
            Response::Retry => Duration::from_secs(1u64 << failures.saturating_sub(1).min(5)).min(HOLD),
            Response::Hold => HOLD,
        }
    }
}

/// One failure: its kind, and what it said.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Failure {
    pub(crate) kind: FailureKind,
    pub(crate) error: String,
}

impl Failure {
    pub(crate) fn new(kind: FailureKind, error: impl std::fmt::Display) -> Self {
        Failure { kind, error: error.to_string() }
    }
}

/// How many failures of each kind each worker met since the start.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct FailureCounts(BTreeMap<(&'static str, FailureKind), u64>);

impl FailureCounts {
    /// `worker` failed with a failure of `kind`.
    pub(crate) fn count(&mut self, worker: &'static str, kind: FailureKind) {
        *self.0.entry((worker, kind)).or_default() += 1;
    }

    /// Every (worker, kind) met, with its count.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (&'static str, FailureKind, u64)> + '_ {
        self.0.iter().map(|(&(worker, kind), &n)| (worker, kind, n))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_are_distinct_and_snake_case() {
        let labels: std::collections::BTreeSet<&str> = FailureKind::ALL.iter().map(|k| k.label()).collect();
        assert_eq!(labels.len(), FailureKind::ALL.len());
        assert!(labels.iter().all(|l| l.chars().all(|c| c.is_ascii_lowercase() || c == '_')), "{labels:?}");
    }

    #[test]
    fn a_retried_failure_backs_off_and_one_waiting_for_someone_holds() {
        let waits: Vec<u64> = (1..=8).map(|n| Response::Retry.wait(n).as_secs()).collect();
        assert_eq!(waits, [1, 2, 4, 8, 16, 30, 30, 30]);
        assert_eq!(FailureKind::Transient.response(), Response::Retry);
        assert_eq!(FailureKind::Authorization.response(), Response::Hold);
        assert_eq!(FailureKind::Credentials.response().wait(1), HOLD, "no fast retries against a refusal");
    }

    #[test]
    fn failures_are_counted_by_worker_and_kind() {
        let mut counts = FailureCounts::default();
        counts.count("refresher", FailureKind::Transient);
        counts.count("refresher", FailureKind::Transient);
        counts.count("offsets reader", FailureKind::Authorization);
        let all: Vec<_> = counts.iter().collect();
        assert_eq!(all, [("offsets reader", FailureKind::Authorization, 1), ("refresher", FailureKind::Transient, 2)]);
    }
}
