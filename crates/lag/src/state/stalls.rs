//! [`Stalls`]: whether the reader of each partition of the offsets topic
//! still moves while records wait for it. Pure, on the caller's instants.
//!
//! A reader can freeze with nothing failing loudly: a fetch connection
//! that a firewall or a proxy black-holes answers nothing, so no error is
//! read, the state's age stays fresh (heartbeats, refreshes), and without
//! this the lag served would freeze with `/ready` 200 while every alert on
//! it fires on a lie. So each watermark refresh hands over each
//! partition's high watermark and the reader's position then. A partition
//! is behind while its high watermark is past the position (kshard's
//! reader reads past transaction markers and open transactions, so it
//! reaches the high watermark at rest); it has stalled once it has been
//! behind, and its position has not moved, for `stale_after`. The first
//! refresh that sees it behind starts the count: records that arrived
//! between two refreshes are not waited for longer than they have been
//! seen. Watched only when kshard's own client reads (librdkafka's reads
//! committed records only, which an open transaction holds back).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// One partition as the refreshes saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Watch {
    /// The reader's position at the last refresh.
    position: i64,
    /// The refresh that first saw it there.
    moved_at: Instant,
    /// The high watermark at the last refresh.
    end: i64,
    /// The refresh that first saw it behind, while it stays behind.
    behind_since: Option<Instant>,
}

/// A partition whose reader has stalled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Stall {
    /// The partition.
    pub(crate) partition: i32,
    /// Where the reader is.
    pub(crate) position: i64,
    /// The offsets waiting past it.
    pub(crate) unread: i64,
    /// Since when it has not moved while behind.
    pub(crate) since: Instant,
}

/// The partitions' readers, as the refreshes saw them.
#[derive(Debug, Default)]
pub(crate) struct Stalls {
    partitions: BTreeMap<i32, Watch>,
}

impl Stalls {
    /// A refresh at `at` found these high watermarks (`ends`) and the
    /// reader at these positions (`None`: nothing read of it yet, which
    /// catch-up watches).
    pub(crate) fn observe(&mut self, at: Instant, ends: &BTreeMap<i32, i64>, positions: &BTreeMap<i32, Option<i64>>) {
        self.partitions.retain(|p, _| ends.contains_key(p));
        for (&partition, &end) in ends {
            let Some(position) = positions.get(&partition).copied().flatten() else {
                self.partitions.remove(&partition);
                continue;
            };
            let behind = end > position;
            let watch =
                self.partitions.entry(partition).or_insert(Watch { position, moved_at: at, end, behind_since: None });
            if watch.position != position {
                watch.position = position;
                watch.moved_at = at;
            }
            watch.end = end;
            watch.behind_since = if behind { Some(watch.behind_since.unwrap_or(at)) } else { None };
        }
    }

    /// The partitions stalled at `now`, for longer than `stale_after`.
    pub(crate) fn stalled(&self, now: Instant, stale_after: Duration) -> Vec<Stall> {
        self.partitions
            .iter()
            .filter_map(|(&partition, w)| {
                let since = w.moved_at.max(w.behind_since?);
                (now.saturating_duration_since(since) > stale_after).then_some(Stall {
                    partition,
                    position: w.position,
                    unread: w.end.saturating_sub(w.position),
                    since,
                })
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const STALE: Duration = Duration::from_secs(15);

    fn at(t0: Instant, s: u64) -> Instant {
        t0 + Duration::from_secs(s)
    }

    fn seen(stalls: &mut Stalls, when: Instant, rows: &[(i32, i64, Option<i64>)]) {
        let ends = rows.iter().map(|&(p, end, _)| (p, end)).collect();
        let positions = rows.iter().map(|&(p, _, position)| (p, position)).collect();
        stalls.observe(when, &ends, &positions);
    }

    #[test]
    fn a_frozen_reader_with_records_waiting_stalls_after_the_limit() {
        let t0 = Instant::now();
        let mut s = Stalls::default();
        // At rest, then records arrive and the reader does not move.
        seen(&mut s, t0, &[(0, 100, Some(100)), (1, 7, Some(7))]);
        seen(&mut s, at(t0, 60), &[(0, 140, Some(100)), (1, 7, Some(7))]);
        assert!(s.stalled(at(t0, 60), STALE).is_empty(), "seen behind just now: not waited for yet");
        assert!(s.stalled(at(t0, 75), STALE).is_empty());
        let stalled = s.stalled(at(t0, 76), STALE);
        assert_eq!(stalled, [Stall { partition: 0, position: 100, unread: 40, since: at(t0, 60) }]);
        // It moves: no longer stalled, even while still behind.
        seen(&mut s, at(t0, 80), &[(0, 150, Some(120)), (1, 7, Some(7))]);
        assert!(s.stalled(at(t0, 90), STALE).is_empty());
        // Caught up: never stalled, however long it rests.
        seen(&mut s, at(t0, 85), &[(0, 150, Some(150)), (1, 7, Some(7))]);
        assert!(s.stalled(at(t0, 900), STALE).is_empty());
    }

    #[test]
    fn a_reader_that_keeps_moving_through_a_backlog_never_stalls() {
        let t0 = Instant::now();
        let mut s = Stalls::default();
        for i in 0..100u64 {
            let i64i = i as i64;
            seen(&mut s, at(t0, 5 * i), &[(0, 1_000_000, Some(1000 * i64i))]);
            assert!(s.stalled(at(t0, 5 * i + 4), STALE).is_empty(), "round {i}");
        }
    }

    #[test]
    fn unknown_positions_are_left_to_catch_up_and_gone_partitions_forgotten() {
        let t0 = Instant::now();
        let mut strict = Stalls::default();
        seen(&mut strict, t0, &[(0, 11, Some(10)), (1, 50, None)]);
        assert_eq!(strict.stalled(at(t0, 16), STALE).len(), 1, "partition 0 only");
        // A partition gone from the refresh is forgotten.
        seen(&mut strict, at(t0, 17), &[]);
        assert!(strict.stalled(at(t0, 100), STALE).is_empty());
    }
}
