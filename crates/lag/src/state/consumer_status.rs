//! Consumer status by Burrow's rules: whether a group is keeping up, judged
//! over a bounded window of its recent commits per partition rather than by a
//! lag threshold. Pure: the time is an argument.
//!
//! Each partition keeps the last [`StatusSettings::window`] commits (offset,
//! commit time, lag when it was seen) and the last few high watermarks seen at
//! refreshes. With lag now, a partition is (checked in this order):
//! - STOP when the time since the last commit exceeds the span of the window
//!   (the consumer stopped committing; with a single commit, when it is older
//!   than [`StatusSettings::single_commit_stop_s`]), unless a recent high
//!   watermark was at or below the last commit (it was caught up moments ago);
//! - then, only when no commit in the window had zero lag and it holds two
//!   commits or more: REWIND when an offset went back, STALL when every commit
//!   is the same offset, WARN when lag never decreased from one commit to the
//!   next;
//! - OK otherwise, and always when there is no lag now.
//!
//! A group's status is the worst of its partitions', STOP, STALL and REWIND
//! counting as ERR (Burrow's API reports the group so, each partition as is).

/// A status, in increasing order of severity.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) enum Status {
    /// Keeping up (or not enough known to say otherwise).
    Ok,
    /// Committing, but lag is not decreasing.
    Warn,
    /// The group's status when a partition is STOP, STALL or REWIND.
    Err,
    /// Stopped committing while behind.
    Stop,
    /// Committing the same offset while behind.
    Stall,
    /// An offset went back.
    Rewind,
}

impl Status {
    /// The status Burrow names `name`.
    pub(crate) fn by_name(name: &str) -> Option<Status> {
        [Status::Ok, Status::Warn, Status::Err, Status::Stop, Status::Stall, Status::Rewind]
            .into_iter()
            .find(|s| s.name() == name)
    }

    /// Burrow's name.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Status::Ok => "OK",
            Status::Warn => "WARN",
            Status::Err => "ERR",
            Status::Stop => "STOP",
            Status::Stall => "STALL",
            Status::Rewind => "REWIND",
        }
    }

    /// Burrow's numeric code (`StatusConstant`: 0 is NOTFOUND).
    pub(crate) fn code(self) -> u8 {
        match self {
            Status::Ok => 1,
            Status::Warn => 2,
            Status::Err => 3,
            Status::Stop => 4,
            Status::Stall => 5,
            Status::Rewind => 6,
        }
    }

    /// The group's status from its partitions': the worst, STOP, STALL and
    /// REWIND counting as ERR.
    pub(crate) fn of_group(partitions: impl IntoIterator<Item = Status>) -> Status {
        partitions.into_iter().map(|s| s.min(Status::Err)).max().unwrap_or(Status::Ok)
    }
}

/// How status is judged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StatusSettings {
    /// Commits kept per partition (Burrow's `intervals`, default 10).
    pub window: usize,
    /// Refreshes during which a group found caught up counts as recently so.
    pub recent_watermarks: usize,
    /// With a single commit in the window (its span is 0), how old that
    /// commit may be before a lagging partition is STOP, in seconds. Burrow's
    /// rule alone would call every lagging partition STOP the moment its first
    /// commit is seen (every group, after a restart, reading a compacted log).
    pub single_commit_stop_s: i64,
}

impl StatusSettings {
    /// Settings of `window` commits per partition and a single commit's
    /// `single_commit_stop_s`, checked against what the rules can use.
    pub fn checked(window: usize, single_commit_stop_s: i64) -> Result<Self, crate::InvalidSetting> {
        if !(2..=100).contains(&window) {
            return Err(crate::InvalidSetting::new("status.window", window, "between 2 and 100 commits"));
        }
        if !(1..=86_400).contains(&single_commit_stop_s) {
            let field = "status.single_commit_stop_seconds";
            return Err(crate::InvalidSetting::new(field, single_commit_stop_s, "between 1 and 86400"));
        }
        Ok(StatusSettings { window, recent_watermarks: window, single_commit_stop_s })
    }
}

impl Default for StatusSettings {
    fn default() -> Self {
        StatusSettings { window: 10, recent_watermarks: 10, single_commit_stop_s: 60 }
    }
}

/// One commit as seen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Commit {
    /// The committed offset.
    pub offset: i64,
    /// When it was committed, ms since the epoch.
    pub timestamp_ms: i64,
    /// The high watermark then, minus the offset (0 when negative).
    pub lag: i64,
}

/// A commit as kept: 16 bytes (seconds are precise enough for rules about
/// minutes; a lag past four billion is kept as four billion).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Kept {
    offset: i64,
    at_s: u32,
    lag: u32,
}

impl Kept {
    fn new(c: &Commit) -> Self {
        let at_s = u32::try_from(c.timestamp_ms.max(0) / 1000).unwrap_or(u32::MAX);
        Kept { offset: c.offset, at_s, lag: u32::try_from(c.lag.max(0)).unwrap_or(u32::MAX) }
    }
}

/// The recent history of one group-partition: at most
/// [`StatusSettings::window`] commits, and whether a recent refresh found the
/// group caught up. About 200 bytes with the default window.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct CommitWindow {
    commits: Vec<Kept>,
    /// Refreshes left during which the group counts as recently caught up (a
    /// refresh whose high watermark was at or below the last commit sets it).
    caught_up_for: u8,
}

impl CommitWindow {
    /// Records a commit (a new commit time: the same offset committed again
    /// counts, which is how STALL shows), keeping the last `settings.window`.
    pub(crate) fn commit(&mut self, commit: Commit, settings: &StatusSettings) {
        let kept = Kept::new(&commit);
        let window = settings.window.max(1);
        match self.commits.last() {
            Some(last) if last.at_s == kept.at_s && last.offset == kept.offset => return,
            // A new commit within the same second replaces the one before it.
            Some(last) if last.at_s == kept.at_s => {
                self.commits.pop();
            }
            _ => {}
        }
        if self.commits.len() >= window {
            self.commits.remove(0);
        }
        if self.commits.capacity() == 0 {
            self.commits.reserve_exact(window);
        }
        self.commits.push(kept);
    }

    /// Records the partition's high watermark at a refresh.
    pub(crate) fn watermark(&mut self, high: i64, settings: &StatusSettings) {
        let caught_up = self.commits.last().is_some_and(|last| high <= last.offset);
        self.caught_up_for = if caught_up {
            u8::try_from(settings.recent_watermarks).unwrap_or(u8::MAX)
        } else {
            self.caught_up_for.saturating_sub(1)
        };
    }

    /// The newest commit in the window.
    pub(crate) fn last(&self) -> Option<Commit> {
        self.commits().last()
    }

    /// The commits in the window, oldest first (times to the second).
    pub(crate) fn commits(&self) -> impl ExactSizeIterator<Item = Commit> + '_ {
        self.commits.iter().map(|k| Commit {
            offset: k.offset,
            timestamp_ms: i64::from(k.at_s) * 1000,
            lag: i64::from(k.lag),
        })
    }

    /// The partition's status with `lag` now, at `now_ms` (ms since the epoch).
    pub(crate) fn status(&self, lag: i64, now_ms: i64, settings: &StatusSettings) -> Status {
        evaluate(&self.commits, self.caught_up_for > 0, lag, now_ms / 1000, settings)
    }
}

/// Burrow's rules over `commits` (oldest first), whether a recent refresh
/// found the group caught up, the lag now and the time now (s since the epoch).
fn evaluate(commits: &[Kept], recently_caught_up: bool, lag: i64, now_s: i64, settings: &StatusSettings) -> Status {
    let (Some(first), Some(last)) = (commits.first(), commits.last()) else { return Status::Ok };
    if lag <= 0 {
        return Status::Ok;
    }
    let (first_s, last_s) = (i64::from(first.at_s), i64::from(last.at_s));
    let span = if commits.len() == 1 { settings.single_commit_stop_s } else { last_s - first_s };
    if now_s - last_s > span && !recently_caught_up {
        return Status::Stop;
    }
    // One commit shows no trend (Burrow would call it STALL).
    if commits.len() < 2 || commits.iter().any(|c| c.lag == 0) {
        return Status::Ok;
    }
    let pairs = || commits.windows(2).map(|w| (w[0], w[1]));
    if pairs().any(|(a, b)| b.offset < a.offset) {
        return Status::Rewind;
    }
    if pairs().all(|(a, b)| a.offset == b.offset) {
        return Status::Stall;
    }
    if pairs().all(|(a, b)| b.lag >= a.lag) {
        return Status::Warn;
    }
    Status::Ok
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Burrow's case: commits of (offset, timestamp in ms, lag), then the
    /// high watermarks of recent refreshes, the lag now and the time now (s).
    fn status(c: &[(i64, i64, i64)], watermarks: &[i64], lag: i64, now_s: i64) -> Status {
        let settings = StatusSettings::default();
        let mut w = CommitWindow::default();
        for &(offset, timestamp_ms, lag) in c {
            w.commit(Commit { offset, timestamp_ms, lag }, &settings);
        }
        for high in watermarks {
            w.watermark(*high, &settings);
        }
        w.status(lag, now_s * 1000, &settings)
    }

    const RISING: [(i64, i64, i64); 5] =
        [(1000, 100_000, 0), (2000, 200_000, 50), (3000, 300_000, 100), (4000, 400_000, 150), (5000, 500_000, 200)];

    // Burrow's own cases (its evaluator's tests, numbered as there), with the
    // high watermarks of its "broker offsets".

    #[test]
    fn burrow_0_and_1_zero_lag_in_the_window_is_ok_until_stopped() {
        assert_eq!(status(&RISING, &[5200], 200, 600), Status::Ok);
        // 400 s since the last commit equals the window's span: not stopped yet.
        assert_eq!(status(&RISING, &[5200], 200, 900), Status::Ok);
    }

    #[test]
    fn burrow_2_and_3_stopped_committing_while_behind() {
        assert_eq!(status(&RISING, &[5200], 200, 1000), Status::Stop);
        let behind = [
            (1000, 100_000, 50),
            (2000, 200_000, 100),
            (3000, 300_000, 150),
            (4000, 400_000, 200),
            (5000, 500_000, 250),
        ];
        assert_eq!(status(&behind, &[5250], 250, 1000), Status::Stop);
    }

    #[test]
    fn burrow_4_to_6_the_same_offset_while_behind_stalls() {
        let same =
            [(1000, 100_000, 0), (1000, 200_000, 50), (1000, 300_000, 100), (1000, 400_000, 150), (1000, 500_000, 200)];
        assert_eq!(status(&same, &[1200], 200, 600), Status::Ok, "zero lag in the window");
        let stalled = [
            (1000, 100_000, 100),
            (1000, 200_000, 150),
            (1000, 300_000, 200),
            (1000, 400_000, 250),
            (1000, 500_000, 300),
        ];
        assert_eq!(status(&stalled, &[1300], 300, 600), Status::Stall);
        let flat = [
            (1000, 100_000, 100),
            (1000, 200_000, 100),
            (1000, 300_000, 100),
            (1000, 400_000, 100),
            (1000, 500_000, 100),
        ];
        assert_eq!(status(&flat, &[1100], 100, 600), Status::Stall);
    }

    #[test]
    fn burrow_7_an_offset_going_back_is_a_rewind() {
        let rewound = [
            (1000, 100_000, 100),
            (2000, 200_000, 150),
            (3000, 300_000, 200),
            (2000, 400_000, 1250),
            (4000, 500_000, 300),
        ];
        assert_eq!(status(&rewound, &[4300], 300, 600), Status::Rewind);
    }

    #[test]
    fn burrow_8_no_lag_now_is_ok_whatever_the_window() {
        let behind = [
            (1000, 100_000, 50),
            (2000, 200_000, 100),
            (3000, 300_000, 150),
            (4000, 400_000, 200),
            (5000, 500_000, 250),
        ];
        assert_eq!(status(&behind, &[5250], 0, 1000), Status::Ok);
    }

    #[test]
    fn burrow_9_and_10_stopped_unless_caught_up_in_recent_refreshes() {
        let base = 1_512_224_618_356;
        let caught_up: Vec<(i64, i64, i64)> =
            (0..15).map(|i| (792_748_079 + i, base + i * 1000 + i * 3 % 5, 0)).collect();
        let recent_growth = [792_749_024, 792_749_000, 792_748_800, 792_748_600, 792_748_500];
        assert_eq!(status(&caught_up, &recent_growth, 931, 1_512_224_650), Status::Stop);
        let recently_level = [792_748_094, 792_748_093, 792_748_093, 792_748_093];
        assert_eq!(status(&caught_up, &recently_level, 1, 1_512_224_650), Status::Ok);
    }

    #[test]
    fn lag_growing_while_committing_warns() {
        let slow = [(1000, 100_000, 10), (1100, 110_000, 20), (1200, 120_000, 30)];
        assert_eq!(status(&slow, &[], 35, 125), Status::Warn);
        let catching_up = [(1000, 100_000, 30), (1100, 110_000, 20), (1200, 120_000, 25)];
        assert_eq!(status(&catching_up, &[], 25, 125), Status::Ok);
    }

    #[test]
    fn the_window_is_bounded_and_a_repeated_commit_time_counts_once() {
        let settings = StatusSettings { window: 3, recent_watermarks: 2, ..StatusSettings::default() };
        let mut w = CommitWindow::default();
        for i in 0..10 {
            w.commit(Commit { offset: i, timestamp_ms: i * 10_000, lag: 5 - i }, &settings);
            w.commit(Commit { offset: i, timestamp_ms: i * 10_000, lag: 5 - i }, &settings);
        }
        let kept: Vec<i64> = w.commits().map(|c| c.offset).collect();
        assert_eq!(kept, [7, 8, 9]);
        assert!(w.commits().all(|c| c.lag == 0), "negative lag is stored as zero");
        // Caught up at a refresh, then two refreshes behind: no longer recent.
        w.watermark(9, &settings);
        assert_eq!(w.caught_up_for, 2);
        w.watermark(20, &settings);
        w.watermark(30, &settings);
        assert_eq!(w.caught_up_for, 0);
        // A second commit in the same second replaces the first.
        w.commit(Commit { offset: 12, timestamp_ms: 100_000, lag: 1 }, &settings);
        w.commit(Commit { offset: 13, timestamp_ms: 100_400, lag: 1 }, &settings);
        let kept: Vec<i64> = w.commits().map(|c| c.offset).collect();
        assert_eq!(kept, [8, 9, 13]);
    }

    #[test]
    fn a_single_commit_is_stopped_only_once_older_than_a_minute() {
        assert_eq!(status(&[(1000, 100_000, 50)], &[], 50, 150), Status::Ok, "50 s old");
        assert_eq!(status(&[(1000, 100_000, 50)], &[], 50, 161), Status::Stop, "61 s old");
        assert_eq!(status(&[(1000, 100_000, 50)], &[], 0, 1000), Status::Ok, "no lag");
    }

    #[test]
    fn a_group_is_its_worst_partition_with_errors_as_err() {
        assert_eq!(Status::of_group([Status::Ok, Status::Warn]), Status::Warn);
        assert_eq!(Status::of_group([Status::Ok, Status::Stall, Status::Warn]), Status::Err);
        assert_eq!(Status::of_group([]), Status::Ok);
        assert_eq!((Status::Rewind.code(), Status::Rewind.name()), (6, "REWIND"));
    }
}
