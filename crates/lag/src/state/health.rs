//! [`Health`]: whether what kshard knows is current, apart from catch-up.
//!
//! Catch-up says the reader once read the log to its end; health says it still
//! can and that the watermarks lag is measured against are recent. Two things
//! make the answer "not current": a worker (the reader or the watermark
//! refresher) that failed and waits to be restarted, and watermarks older than
//! the staleness limit (the brokers stopped answering: every lag value would be
//! frozen). While either holds, `/ready` is 503 with the reason and no lag is
//! exported as if it were current. The decisions take the time as an argument,
//! so they are tested without a clock.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use crate::failure::{Failure, FailureCounts};

/// A worker's failures.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct WorkerFailure {
    /// What went wrong last.
    pub error: String,
    /// How many times it has failed in a row: failures less than
    /// [`FAILURES_FORGOTTEN_AFTER`] apart.
    pub failures: u32,
    /// When it failed last.
    pub at: Instant,
    /// True until the restarted worker has shown progress.
    pub down: bool,
}

/// A failure this long after the previous one starts a new series (the
/// worker had been working), so the restart backoff starts small again.
pub(crate) const FAILURES_FORGOTTEN_AFTER: Duration = Duration::from_secs(60);

/// Worker and watermark health (plain data: [`crate::Readiness`] owns it).
#[derive(Debug)]
pub(crate) struct Health {
    /// Workers that failed, by name.
    failed: BTreeMap<&'static str, WorkerFailure>,
    /// When watermarks were last refreshed successfully.
    last_refresh: Option<Instant>,
    /// Why the latest refresh failed, until one succeeds.
    refresh_error: Option<String>,
    /// Conditions that are normal for a moment (a shard moving between
    /// members) and a problem once they last longer than their grace.
    conditions: BTreeMap<String, Condition>,
    /// Watermarks older than this are stale.
    stale_after: Duration,
    /// Every failure met, by worker and kind.
    counts: FailureCounts,
}

/// A condition that becomes a problem after its grace.
#[derive(Debug, Clone)]
struct Condition {
    since: Instant,
    grace: Duration,
    why: String,
}

impl Health {
    /// Watermarks count as stale once older than `stale_after`.
    pub(crate) fn new(stale_after: Duration) -> Self {
        Health {
            failed: BTreeMap::new(),
            last_refresh: None,
            refresh_error: None,
            conditions: BTreeMap::new(),
            stale_after,
            counts: FailureCounts::default(),
        }
    }

    /// `worker` failed with `failure` at `now`; returns how many times in a row.
    pub(crate) fn worker_failed(&mut self, worker: &'static str, failure: Failure, now: Instant) -> u32 {
        self.counts.count(worker, failure.kind);
        let error = failure.error;
        let failures = match self.failed.get(worker) {
            Some(f) if now.saturating_duration_since(f.at) < FAILURES_FORGOTTEN_AFTER => f.failures + 1,
            _ => 1,
        };
        self.failed.insert(worker, WorkerFailure { error, failures, at: now, down: true });
        failures
    }

    /// `worker` has shown progress since it (re)started: it no longer keeps
    /// kshard from being current. Its count of failures stays, so that a worker
    /// that fails again soon waits longer before its next restart.
    pub(crate) fn worker_running(&mut self, worker: &'static str) {
        if let Some(f) = self.failed.get_mut(worker) {
            f.down = false;
        }
    }

    /// How many times in a row `worker` has failed (0: never).
    pub(crate) fn failures(&self, worker: &str) -> u32 {
        self.failed.get(worker).map_or(0, |f| f.failures)
    }

    /// Condition `key` holds since `now` unless it held already: a problem
    /// once it has lasted longer than `grace`, said as `why`.
    pub(crate) fn hold(&mut self, key: &str, why: String, grace: Duration, now: Instant) {
        match self.conditions.get_mut(key) {
            Some(c) => c.why = why,
            None => {
                self.conditions.insert(key.to_owned(), Condition { since: now, grace, why });
            }
        }
    }

    /// Condition `key` no longer holds.
    pub(crate) fn release(&mut self, key: &str) {
        self.conditions.remove(key);
    }

    /// The conditions that hold (not yet problems, or problems), with how
    /// long they have held at `now`.
    pub(crate) fn conditions(&self, now: Instant) -> Vec<(String, Duration)> {
        self.conditions.values().map(|c| (c.why.clone(), now.saturating_duration_since(c.since))).collect()
    }

    /// Why the latest watermark refresh failed, until one succeeds.
    pub(crate) fn refresh_error(&self) -> Option<String> {
        self.refresh_error.clone()
    }

    /// Watermarks were refreshed at `at`.
    pub(crate) fn refreshed(&mut self, at: Instant) {
        self.last_refresh = Some(at);
        self.refresh_error = None;
    }

    /// A refresh of `worker`'s failed (the worker goes on).
    pub(crate) fn refresh_failed(&mut self, worker: &'static str, failure: Failure) {
        self.counts.count(worker, failure.kind);
        self.refresh_error = Some(failure.error);
    }

    /// Every failure met since the start, by worker and kind.
    pub(crate) fn failure_counts(&self) -> &FailureCounts {
        &self.counts
    }

    /// How old the watermarks are at `now` (`None` before the first refresh).
    pub(crate) fn watermark_age(&self, now: Instant) -> Option<Duration> {
        self.last_refresh.map(|t| now.saturating_duration_since(t))
    }

    /// Why what kshard knows is not current at `now`, or `None` when it is. A
    /// service that never refreshed watermarks is not judged here (catch-up
    /// readiness waits for the first refresh).
    pub(crate) fn problem(&self, now: Instant) -> Option<String> {
        if let Some((worker, f)) = self.failed.iter().find(|(_, f)| f.down) {
            return Some(format!("the {worker} failed ({} in a row) and is restarting: {}", f.failures, f.error));
        }
        // A condition without grace is a problem from the start.
        let overdue =
            self.conditions.values().find(|c| c.grace.is_zero() || now.saturating_duration_since(c.since) > c.grace);
        if let Some(c) = overdue {
            return Some(format!("{} for {:.0} s", c.why, now.saturating_duration_since(c.since).as_secs_f64()));
        }
        let age = now.saturating_duration_since(self.last_refresh?);
        if age > self.stale_after {
            let why = self.refresh_error.as_deref().unwrap_or("no refresh has completed since");
            return Some(format!(
                "watermarks are {:.0} s old (stale after {:.0} s): {why}",
                age.as_secs_f64(),
                self.stale_after.as_secs_f64()
            ));
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::failure::FailureKind;

    #[test]
    fn a_failed_worker_is_a_problem_until_it_shows_progress() {
        let mut h = Health::new(Duration::from_secs(10));
        let t = Instant::now();
        h.refreshed(t);
        assert_eq!(h.problem(t), None);
        assert_eq!(h.worker_failed("reader", Failure::new(FailureKind::Transient, "boom"), t), 1);
        let p = h.problem(t).expect("a problem");
        assert!(p.contains("reader") && p.contains("boom") && p.contains("1 in a row"), "{p}");
        h.worker_running("reader");
        assert_eq!(h.problem(t), None);
    }

    #[test]
    fn failures_count_in_a_row_across_restarts_until_a_quiet_minute() {
        let mut h = Health::new(Duration::from_secs(10));
        let t = Instant::now();
        let s = Duration::from_secs;
        assert_eq!(h.worker_failed("reader", Failure::new(FailureKind::Transient, "a"), t), 1);
        h.worker_running("reader");
        // Fails again soon after coming back: the series goes on.
        assert_eq!(h.worker_failed("reader", Failure::new(FailureKind::Transient, "b"), t + s(2)), 2);
        h.worker_running("reader");
        assert_eq!(h.worker_failed("reader", Failure::new(FailureKind::Transient, "c"), t + s(5)), 3);
        assert!(h.problem(t + s(5)).is_some_and(|p| p.contains("3 in a row")));
        h.worker_running("reader");
        // After a minute of work, a failure starts a new series.
        assert_eq!(h.worker_failed("reader", Failure::new(FailureKind::Transient, "d"), t + s(70)), 1);
    }

    #[test]
    fn a_condition_is_a_problem_only_past_its_grace() {
        let mut h = Health::new(Duration::from_secs(10));
        let t = Instant::now();
        let s = Duration::from_secs;
        h.hold("p7", "partition 7 has no primary".into(), s(20), t);
        assert_eq!(h.problem(t + s(20)), None, "within its grace");
        // Holding again does not restart the clock.
        h.hold("p7", "partition 7 has no primary (still)".into(), s(20), t + s(15));
        let p = h.problem(t + s(21)).expect("past its grace");
        assert!(p.contains("(still)") && p.contains("21 s"), "{p}");
        assert_eq!(h.conditions(t + s(21)).len(), 1);
        h.release("p7");
        assert_eq!(h.problem(t + s(30)), None);
    }

    #[test]
    fn watermarks_older_than_the_limit_are_stale_until_refreshed() {
        let mut h = Health::new(Duration::from_secs(10));
        let t = Instant::now();
        assert_eq!(h.problem(t + Duration::from_secs(100)), None, "never refreshed: catch-up decides");
        h.refreshed(t);
        assert_eq!(h.problem(t + Duration::from_secs(10)), None);
        h.refresh_failed("watermark refresher", Failure::new(FailureKind::Transient, "all brokers down"));
        let p = h.problem(t + Duration::from_secs(11)).expect("stale");
        assert!(p.contains("11 s old") && p.contains("all brokers down"), "{p}");
        h.refreshed(t + Duration::from_secs(12));
        assert_eq!(h.problem(t + Duration::from_secs(13)), None);
        assert_eq!(h.watermark_age(t + Duration::from_secs(13)), Some(Duration::from_secs(1)));
    }
}
