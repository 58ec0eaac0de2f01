//! Each group's recent lag, for the web page's chart: one point per interval
//! (a minute by default) over a window (an hour by default), each the highest
//! lag in records and in seconds seen by the refreshes in that interval.
//!
//! Bounded: at most `window / resolution` points of 16 bytes per group (about
//! 1 KB a group with the defaults), and a group no longer seen is forgotten.
//! It lives in memory only and starts empty: Prometheus keeps the long history.
//! Pure: the caller passes the time.

use std::collections::VecDeque;
use std::sync::Arc;

use serde::Serialize;

use crate::names::FastMap;

/// How much history is kept, and how finely.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HistorySettings {
    /// How far back, in seconds.
    pub window_s: u32,
    /// The width of one point, in seconds.
    pub resolution_s: u32,
}

impl Default for HistorySettings {
    fn default() -> Self {
        HistorySettings { window_s: 3600, resolution_s: 60 }
    }
}

impl HistorySettings {
    /// Settings of `window_s` at `resolution_s`, checked: at most 1440
    /// points (about 23 KB) a group.
    pub fn checked(window_s: u32, resolution_s: u32) -> Result<Self, crate::InvalidSetting> {
        if !(60..=86_400).contains(&window_s) {
            return Err(crate::InvalidSetting::new("history.window_seconds", window_s, "between 60 and 86400"));
        }
        if !(1..=3600).contains(&resolution_s) || window_s / resolution_s > 1440 || resolution_s > window_s {
            return Err(crate::InvalidSetting::new(
                "history.resolution_seconds",
                resolution_s,
                "between 1 and 3600, at most the window, and at most 1440 points: window_seconds / resolution_seconds",
            ));
        }
        Ok(HistorySettings { window_s, resolution_s })
    }

    /// Points kept per group.
    pub fn points(&self) -> usize {
        (self.window_s / self.resolution_s.max(1)).max(1) as usize
    }
}

/// One interval of a group's lag.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Point {
    /// The interval's index: its start is `interval × resolution` seconds
    /// since the epoch.
    interval: u32,
    /// The highest total lag (records) seen in the interval.
    lag: i64,
    /// The highest lag in seconds seen, NaN while unknown (saves the
    /// `Option`'s padding).
    lag_seconds: f32,
}

/// One interval of a group's lag, as the API shows it.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct LagPoint {
    /// The interval's start, ms since the epoch.
    pub at_ms: i64,
    /// The highest total lag in records seen in the interval.
    pub lag: i64,
    /// The highest lag in seconds seen in the interval, when known.
    pub lag_seconds: Option<f64>,
}

/// Every group's recent lag.
#[derive(Debug, Default)]
pub struct LagHistory {
    settings: HistorySettings,
    /// Points by group, oldest first, with the generation of the refresh that
    /// last saw the group.
    groups: FastMap<Arc<str>, (u64, VecDeque<Point>)>,
    generation: u64,
}

impl LagHistory {
    /// An empty history.
    pub fn new(settings: HistorySettings) -> Self {
        LagHistory { settings, ..LagHistory::default() }
    }

    /// The settings it keeps points by.
    pub fn settings(&self) -> HistorySettings {
        self.settings
    }

    /// One refresh's figures at `now_ms`: each group's total lag and highest
    /// lag in seconds (when known). Groups absent from `groups` are forgotten.
    pub fn record(&mut self, now_ms: i64, groups: impl IntoIterator<Item = (Arc<str>, i64, Option<f64>)>) {
        self.generation = self.generation.wrapping_add(1);
        let generation = self.generation;
        let interval = self.interval(now_ms);
        let keep = self.settings.points();
        let oldest = interval.saturating_sub(keep as u32 - 1);
        for (group, lag, seconds) in groups {
            let seconds = seconds.map_or(f32::NAN, |s| s as f32);
            let (seen, points) = self.groups.entry(group).or_insert_with(|| (0, VecDeque::with_capacity(keep)));
            *seen = generation;
            while points.front().is_some_and(|p| p.interval < oldest) {
                points.pop_front();
            }
            match points.back_mut() {
                Some(last) if last.interval == interval => {
                    last.lag = last.lag.max(lag);
                    // NaN is unknown: `max` prefers the known value.
                    last.lag_seconds = last.lag_seconds.max(seconds);
                }
                // A clock that stepped back: keep the newer point in place.
                Some(last) if last.interval > interval => {}
                _ => {
                    if points.len() == keep {
                        points.pop_front();
                    }
                    points.push_back(Point { interval, lag, lag_seconds: seconds });
                }
            }
        }
        self.groups.retain(|_, (seen, _)| *seen == generation);
    }

    /// A group's points, oldest first (empty when unknown).
    pub fn points(&self, group: &str) -> Vec<LagPoint> {
        let resolution_ms = i64::from(self.settings.resolution_s.max(1)) * 1000;
        self.groups
            .get(group)
            .map(|(_, points)| {
                points
                    .iter()
                    .map(|p| LagPoint {
                        at_ms: i64::from(p.interval) * resolution_ms,
                        lag: p.lag,
                        lag_seconds: (!p.lag_seconds.is_nan()).then_some(f64::from(p.lag_seconds)),
                    })
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Groups with a history.
    pub fn len(&self) -> usize {
        self.groups.len()
    }

    /// Whether no group has a history.
    pub fn is_empty(&self) -> bool {
        self.groups.is_empty()
    }

    fn interval(&self, now_ms: i64) -> u32 {
        let resolution_ms = i64::from(self.settings.resolution_s.max(1)) * 1000;
        u32::try_from(now_ms.max(0) / resolution_ms).unwrap_or(u32::MAX)
    }
}

#[cfg(test)]
mod tests {

    #[test]
    fn settings_out_of_range_name_the_field_and_what_is_allowed() {
        assert!(HistorySettings::checked(3600, 60).is_ok());
        let e = HistorySettings::checked(30, 1).expect_err("too short");
        assert_eq!(e.to_string(), "invalid history.window_seconds: 30 (between 60 and 86400)");
        let e = HistorySettings::checked(86_400, 1).expect_err("too many points");
        assert_eq!(e.field, "history.resolution_seconds");
        let e = crate::StatusSettings::checked(1, 60).expect_err("too few commits");
        assert_eq!(e.to_string(), "invalid status.window: 1 (between 2 and 100 commits)");
        assert!(crate::StatusSettings::checked(10, 0).is_err());
    }
    use super::*;

    const MIN: i64 = 60_000;

    fn g(name: &str) -> Arc<str> {
        Arc::from(name)
    }

    #[test]
    fn one_point_per_interval_keeps_the_highest_values() {
        let mut h = LagHistory::new(HistorySettings::default());
        h.record(10 * MIN, [(g("a"), 5, Some(1.0))]);
        h.record(10 * MIN + 20_000, [(g("a"), 9, None)]);
        h.record(10 * MIN + 40_000, [(g("a"), 7, Some(3.5))]);
        h.record(11 * MIN, [(g("a"), 2, None)]);
        assert_eq!(
            h.points("a"),
            vec![
                LagPoint { at_ms: 10 * MIN, lag: 9, lag_seconds: Some(3.5) },
                LagPoint { at_ms: 11 * MIN, lag: 2, lag_seconds: None },
            ]
        );
        assert!(h.points("b").is_empty());
    }

    #[test]
    fn points_older_than_the_window_go() {
        let mut h = LagHistory::new(HistorySettings { window_s: 300, resolution_s: 60 });
        for minute in 0..20 {
            h.record(minute * MIN, [(g("a"), minute, None)]);
        }
        let points = h.points("a");
        assert_eq!(points.iter().map(|p| p.lag).collect::<Vec<_>>(), vec![15, 16, 17, 18, 19]);
        // A gap (no refresh for ten minutes) drops what fell out of the window.
        h.record(30 * MIN, [(g("a"), 30, None)]);
        assert_eq!(h.points("a").iter().map(|p| p.lag).collect::<Vec<_>>(), vec![30]);
    }

    #[test]
    fn groups_not_seen_are_forgotten() {
        let mut h = LagHistory::new(HistorySettings::default());
        h.record(0, [(g("a"), 1, None), (g("b"), 1, None)]);
        h.record(MIN, [(g("b"), 1, None)]);
        assert_eq!(h.len(), 1);
        assert!(h.points("a").is_empty());
    }

    #[test]
    fn a_clock_stepping_back_changes_nothing_already_recorded() {
        let mut h = LagHistory::new(HistorySettings::default());
        h.record(10 * MIN, [(g("a"), 5, None)]);
        h.record(9 * MIN, [(g("a"), 50, None)]);
        assert_eq!(h.points("a"), vec![LagPoint { at_ms: 10 * MIN, lag: 5, lag_seconds: None }]);
    }

    proptest::proptest! {
        #[test]
        fn bounded_and_in_order(steps in proptest::collection::vec((0i64..600_000, 0i64..1000), 1..200)) {
            let settings = HistorySettings { window_s: 120, resolution_s: 10 };
            let mut h = LagHistory::new(settings);
            let mut now = 0;
            for (advance, lag) in steps {
                now += advance;
                h.record(now, [(g("a"), lag, Some(lag as f64))]);
                let points = h.points("a");
                proptest::prop_assert!(points.len() <= settings.points());
                proptest::prop_assert!(points.windows(2).all(|w| w[0].at_ms < w[1].at_ms));
                proptest::prop_assert!(points.iter().all(|p| p.at_ms > now - 120_000));
                proptest::prop_assert!(points.last().is_some_and(|p| p.lag >= lag));
            }
        }
    }

    #[test]
    fn a_point_is_small() {
        assert_eq!(std::mem::size_of::<Point>(), 16);
    }
}
