//! Which Kafka errors are worth another try, and the loop that tries again.
//!
//! Kafka marks some of its errors retriable (their Java exceptions extend
//! `RetriableException`): a leader that moved or whose epoch changed, a
//! coordinator still loading, a request that timed out. They are what a
//! cluster says while a broker restarts or a partition moves, and a caller
//! that gives up on them fails exactly when the cluster is healing.
//! [`retriable_code`] is that list, by Kafka's numeric codes, with the
//! local librdkafka errors that mean the same (a connection dropped, no
//! broker up yet, a call that timed out); [`Retry`] is the pure schedule,
//! and [`retrying`] runs a call under it until a deadline.
//!
//! This is not for errors that will not heal by themselves: an
//! authorization failure, an unknown topic the caller asked for by name, a
//! malformed request.

use std::time::{Duration, Instant};

use rdkafka::types::RDKafkaErrorCode as Code;

use crate::error::{Error, Result};

/// Whether Kafka's error `code` (as numbered in its protocol) is retriable:
/// its exception extends `RetriableException` in Kafka's `Errors.java`.
pub(crate) fn retriable_code(code: i16) -> bool {
    matches!(
        code,
        2   // CORRUPT_MESSAGE
        | 3   // UNKNOWN_TOPIC_OR_PARTITION
        | 5   // LEADER_NOT_AVAILABLE
        | 6   // NOT_LEADER_OR_FOLLOWER
        | 7   // REQUEST_TIMED_OUT
        | 13  // NETWORK_EXCEPTION
        | 14  // COORDINATOR_LOAD_IN_PROGRESS
        | 15  // COORDINATOR_NOT_AVAILABLE
        | 16  // NOT_COORDINATOR
        | 19  // NOT_ENOUGH_REPLICAS
        | 20  // NOT_ENOUGH_REPLICAS_AFTER_APPEND
        | 41  // NOT_CONTROLLER
        | 51  // CONCURRENT_TRANSACTIONS
        | 56  // KAFKA_STORAGE_ERROR
        | 70  // FETCH_SESSION_ID_NOT_FOUND
        | 71  // INVALID_FETCH_SESSION_EPOCH
        | 72  // LISTENER_NOT_FOUND
        | 74  // FENCED_LEADER_EPOCH
        | 75  // UNKNOWN_LEADER_EPOCH
        | 78  // OFFSET_NOT_AVAILABLE
        | 80  // PREFERRED_LEADER_NOT_AVAILABLE
        | 83  // ELIGIBLE_LEADERS_NOT_AVAILABLE
        | 88  // UNSTABLE_OFFSET_COMMIT
        | 89  // THROTTLING_QUOTA_EXCEEDED
        | 100 // UNKNOWN_TOPIC_ID
        | 103 // INCONSISTENT_TOPIC_ID
    )
}

/// Whether librdkafka's error `code` is retriable: one of Kafka's
/// ([`retriable_code`]), or one of its own that a working cluster heals
/// (a dropped connection, no broker up, a timeout, a coordinator or leader
/// being looked up).
pub(crate) fn retriable_rdkafka(code: Code) -> bool {
    let n = code as i32;
    if n > 0 {
        return i16::try_from(n).is_ok_and(retriable_code);
    }
    matches!(
        code,
        Code::BrokerTransportFailure
            | Code::Resolve
            | Code::AllBrokersDown
            | Code::OperationTimedOut
            | Code::TimedOutQueue
            | Code::MessageTimedOut
            | Code::WaitingForCoordinator
            | Code::UnknownPartition
            | Code::NodeUpdate
            | Code::InProgress
            | Code::PreviousInProgress
    )
}

/// How long a partition (or a group) whose own answer had a retriable error
/// is asked for again (a leader election takes about this long): one offline
/// for minutes must not hold up every caller's answer for the others.
pub(crate) const PARTITION_RETRY_FOR: Duration = Duration::from_secs(3);

/// The waits between tries: 50 ms, doubled each time, at most 1 s.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Retry {
    /// Tries made so far.
    tries: u32,
}

impl Retry {
    /// How long to wait before the next try; counts the try.
    pub(crate) fn next_wait(&mut self) -> Duration {
        let wait = Duration::from_millis(50).saturating_mul(1 << self.tries.min(5)).min(Duration::from_secs(1));
        self.tries = self.tries.saturating_add(1);
        wait
    }
}

/// Runs `call` (given the time left) until it succeeds, fails with an error
/// that is not retriable, or `timeout` has passed; then its last result.
/// `sleep` waits (a test passes its own clock's).
pub(crate) fn retrying<T>(
    timeout: Duration,
    mut sleep: impl FnMut(Duration),
    mut call: impl FnMut(Duration) -> Result<T>,
) -> Result<T> {
    let start = Instant::now();
    let mut retry = Retry::default();
    loop {
        let left = timeout.saturating_sub(start.elapsed());
        match call(left.max(Duration::from_millis(1))) {
            Err(e) if e.is_retriable() && start.elapsed() < timeout => {
                let wait = retry.next_wait().min(timeout.saturating_sub(start.elapsed()));
                tracing::debug!(error = %e, wait_ms = wait.as_millis() as u64, "retrying a retriable Kafka error");
                sleep(wait);
            }
            result => return result,
        }
    }
}

impl Error {
    /// True when Kafka calls this error retriable, or librdkafka reports a
    /// transient failure of its own (`retriable_rdkafka`): the same call
    /// may succeed if made again.
    pub fn is_retriable(&self) -> bool {
        match self {
            Error::Client { .. } => false,
            Error::Call { source, .. } => source.rdkafka_error_code().is_some_and(retriable_rdkafka),
            Error::Kafka { code, .. } => retriable_code(*code),
            Error::Unreachable { .. } => true,
            Error::Refused { .. } | Error::CorruptBatch { .. } | Error::Truncated { .. } => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rdkafka::error::KafkaError;

    fn failed(code: Code) -> Error {
        Error::Call { step: "listing offsets".into(), source: KafkaError::MetadataFetch(code) }
    }

    #[test]
    fn kafkas_retriable_errors_are_retriable() {
        // The error a verify gave up on right after a broker came back.
        assert!(failed(Code::FencedLeaderEpoch).is_retriable());
        for code in [Code::NotLeaderForPartition, Code::LeaderNotAvailable, Code::NotCoordinator, Code::RequestTimedOut]
        {
            assert!(failed(code).is_retriable(), "{code:?}");
        }
        for code in [Code::AllBrokersDown, Code::BrokerTransportFailure, Code::OperationTimedOut] {
            assert!(failed(code).is_retriable(), "{code:?}");
        }
        for code in [
            Code::TopicAuthorizationFailed,
            Code::GroupAuthorizationFailed,
            Code::InvalidRequest,
            Code::UnsupportedVersion,
            Code::Authentication,
            Code::SSL,
        ] {
            assert!(!failed(code).is_retriable(), "{code:?}");
        }
        assert!(!Error::Refused { step: "s".into(), message: "m".into() }.is_retriable());
    }

    #[test]
    fn waits_double_up_to_a_second() {
        let mut retry = Retry::default();
        let waits: Vec<u64> = (0..8).map(|_| retry.next_wait().as_millis() as u64).collect();
        assert_eq!(waits, [50, 100, 200, 400, 800, 1000, 1000, 1000]);
    }

    #[test]
    fn a_retriable_error_is_retried_until_it_clears() {
        let mut answers = vec![Err(failed(Code::FencedLeaderEpoch)), Err(failed(Code::NotCoordinator)), Ok(7)];
        answers.reverse();
        let mut slept = Vec::new();
        let got = retrying(Duration::from_secs(60), |d| slept.push(d), |_| answers.pop().expect("an answer"));
        assert_eq!(got.ok(), Some(7));
        assert_eq!(slept, [Duration::from_millis(50), Duration::from_millis(100)]);
    }

    #[test]
    fn other_errors_and_the_deadline_end_the_tries() {
        let mut calls = 0;
        let got: Result<()> = retrying(
            Duration::from_secs(60),
            |_| {},
            |_| {
                calls += 1;
                Err(failed(Code::TopicAuthorizationFailed))
            },
        );
        assert!(got.is_err());
        assert_eq!(calls, 1, "not retriable: one call");
        let mut calls = 0;
        let got: Result<()> = retrying(
            Duration::ZERO,
            |_| {},
            |_| {
                calls += 1;
                Err(failed(Code::FencedLeaderEpoch))
            },
        );
        assert!(got.is_err_and(|e| e.is_retriable()));
        assert_eq!(calls, 1, "no time left: the last error");
    }
}
