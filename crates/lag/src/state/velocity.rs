//! [`Velocity`]: how fast a group consumes a partition and how fast records
//! arrive in it, over the group's window of recent commits, and the time
//! until its lag reaches zero at those rates.
//!
//! Each kept commit has its offset, its time and the lag then, so the high
//! watermark then is `offset + lag`: the rates are the changes of the two
//! between the window's first and last commit, divided by the time between
//! them. Pure: the commits and the lag come in as arguments.

use crate::consumer_status::Commit;

/// Consumption and production rates of one group-partition.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Velocity {
    /// The seconds between the first and last commit the rates are over.
    pub window_s: f64,
    /// Records the group consumed per second (its committed offset's rise).
    pub consumed_per_s: f64,
    /// Records produced per second (the high watermark's rise).
    pub produced_per_s: f64,
}

impl Velocity {
    /// The rates over `commits` (oldest first); `None` with fewer than two
    /// commits or none a second apart.
    pub fn of(commits: impl IntoIterator<Item = Commit>) -> Option<Self> {
        let mut it = commits.into_iter();
        let first = it.next()?;
        let last = it.last()?;
        // Offsets and times are a client's: computed without overflow.
        let window_s = last.timestamp_ms.saturating_sub(first.timestamp_ms) as f64 / 1000.0;
        if window_s < 1.0 {
            return None;
        }
        let consumed = last.offset.saturating_sub(first.offset).max(0) as f64;
        let (end_last, end_first) = (last.offset.saturating_add(last.lag), first.offset.saturating_add(first.lag));
        let produced = end_last.saturating_sub(end_first).max(0) as f64;
        Some(Velocity { window_s, consumed_per_s: consumed / window_s, produced_per_s: produced / window_s })
    }

    /// Seconds until `lag` reaches zero at these rates: 0 when caught up,
    /// `None` when the lag is not shrinking.
    pub fn catch_up_s(&self, lag: i64) -> Option<f64> {
        if lag <= 0 {
            return Some(0.0);
        }
        let net = self.consumed_per_s - self.produced_per_s;
        (net > 0.0).then(|| lag as f64 / net)
    }
}

/// Seconds since `commit_timestamp_ms` at `now_ms` (0 for a commit stamped
/// in the future by a skewed clock).
pub fn commit_age_s(commit_timestamp_ms: i64, now_ms: i64) -> f64 {
    (now_ms - commit_timestamp_ms).max(0) as f64 / 1000.0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(at_s: i64, offset: i64, lag: i64) -> Commit {
        Commit { offset, timestamp_ms: at_s * 1000, lag }
    }

    #[test]
    fn a_consumer_faster_than_its_producer_catches_up() {
        // 10 s: consumed 0 → 1000, high watermark 500 → 1000.
        let v = Velocity::of([c(0, 0, 500), c(5, 400, 350), c(10, 1000, 0)]).expect("two commits");
        assert_eq!((v.window_s, v.consumed_per_s, v.produced_per_s), (10.0, 100.0, 50.0));
        assert_eq!(v.catch_up_s(200), Some(4.0));
        assert_eq!(v.catch_up_s(0), Some(0.0));
    }

    #[test]
    fn a_growing_lag_has_no_eta_and_one_commit_no_rate() {
        let slow = Velocity::of([c(0, 0, 0), c(10, 100, 900)]).expect("two commits");
        assert_eq!((slow.consumed_per_s, slow.produced_per_s), (10.0, 100.0));
        assert_eq!(slow.catch_up_s(900), None);
        assert_eq!(Velocity::of([c(0, 0, 0)]), None);
        assert_eq!(Velocity::of([c(0, 0, 0), c(0, 5, 0)]), None, "no time between them");
        // A stopped group on an idle topic: no rate either way, no ETA.
        let idle = Velocity::of([c(0, 10, 5), c(60, 10, 5)]).expect("two commits");
        assert_eq!(idle.catch_up_s(5), None);
    }

    #[test]
    fn commit_age_is_never_negative() {
        assert_eq!(commit_age_s(1_000, 31_000), 30.0);
        assert_eq!(commit_age_s(31_000, 1_000), 0.0);
    }
}
