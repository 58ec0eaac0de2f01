//! What the monitor derives from its state at each watermark refresh — each
//! group-partition's window of recent commits (its status), the record times
//! wanted for lag in seconds, each group's lag history — and the views over
//! them that readers take once per pass.

use std::sync::{Arc, MutexGuard};

use super::{Monitor, lock};
use crate::consumer_status::{Commit, CommitWindow, Status, StatusSettings};
use crate::lag_history::{HistorySettings, LagPoint};
use crate::lag_time::{LagTimes, Method};
use crate::names::FastMap;

/// The statuses of group-partitions, as of one instant (see [`Monitor::statuses`]).
#[derive(Debug)]
pub struct Statuses<'a> {
    history: MutexGuard<'a, History>,
    now_ms: i64,
}

impl Statuses<'_> {
    /// The status of `group` on `topic`/`partition` with `lag` now (OK until
    /// some of its commits are known).
    pub fn get(&self, group: &Arc<str>, topic: &Arc<str>, partition: i32, lag: i64) -> Status {
        self.window(group, topic, partition).map_or(Status::Ok, |w| w.status(lag, self.now_ms, &self.history.settings))
    }

    /// The recent commits of `group` on `topic`/`partition`, once sampled.
    pub fn window(&self, group: &Arc<str>, topic: &Arc<str>, partition: i32) -> Option<&CommitWindow> {
        let key = (Arc::clone(group), Arc::clone(topic), partition);
        self.history.windows.get(&key).map(|(_, w)| w)
    }
}

/// Lag in seconds, as of one instant (see [`Monitor::lag_seconds`]).
#[derive(Debug)]
pub struct LagSeconds<'a> {
    times: MutexGuard<'a, LagTimes>,
    now_ms: i64,
}

impl LagSeconds<'_> {
    /// The age of the first record not consumed by a group at `committed` on
    /// `topic`/`partition` with `lag` records, and how it was found.
    pub fn get(&self, topic: &Arc<str>, partition: i32, committed: i64, lag: i64) -> Option<(f64, Method)> {
        self.times.lag_seconds(topic, partition, committed, lag, self.now_ms)
    }
}

/// A group-partition: (group, topic, partition).
type GroupPartition = (Arc<str>, Arc<str>, i32);

/// The windows of recent commits, by group-partition, each with the
/// generation of the sample that last saw it.
#[derive(Debug, Default)]
pub(super) struct History {
    pub(super) windows: FastMap<GroupPartition, (u64, CommitWindow)>,
    pub(super) settings: StatusSettings,
    pub(super) generation: u64,
}
impl Monitor {
    /// After a watermark refresh, in one pass over the state: takes each
    /// group-partition's committed offset into its window of recent commits
    /// (a new commit time is a new commit) with its lag against the current
    /// watermarks, forgets the windows of offsets that are gone, samples every
    /// partition's high watermark for lag-in-seconds estimates, and returns
    /// the (topic, partition, offset) of lagging group-partitions whose record
    /// time is to be read (the refresher reads them and hands them to
    /// [`Monitor::times_found`]).
    pub fn sample(&self) -> Vec<(String, i32, i64)> {
        let watermarks = self.watermarks();
        let now_ms = self.clock.epoch_ms();
        let mut history = lock(&self.history);
        let History { windows, settings, generation } = &mut *history;
        *generation = generation.wrapping_add(1);
        let settings = *settings;
        let now = *generation;
        let mut lagging = Vec::new();
        self.for_each_unit(|_, unit| {
            for (group, g) in unit.groups() {
                if !self.settings.groups.allows(group) {
                    continue;
                }
                for (topic, partition, committed) in g.offsets() {
                    let Some(w) = watermarks.get(topic, partition) else { continue };
                    let key = (Arc::clone(group), Arc::clone(topic), partition);
                    let (seen, window) = windows.entry(key).or_default();
                    *seen = now;
                    // OffsetFetch (admin_api) gives no commit time: a new
                    // offset counts as committed when first seen.
                    let timestamp_ms = match window.last() {
                        _ if committed.commit_timestamp > 0 => committed.commit_timestamp,
                        Some(last) if last.offset == committed.offset => last.timestamp_ms,
                        _ => now_ms,
                    };
                    let commit = Commit {
                        offset: committed.offset,
                        timestamp_ms,
                        lag: crate::watermarks::lag(w.high, committed.offset),
                    };
                    window.commit(commit, &settings);
                    window.watermark(w.high, &settings);
                    if committed.offset < w.high && self.settings.topics.allows(topic) {
                        lagging.push((Arc::clone(topic), partition, committed.offset, w.low));
                    }
                }
            }
        });
        windows.retain(|_, (seen, _)| *seen == now);
        drop(history);
        let mut times = lock(&self.lag_times);
        let mut live = std::collections::HashSet::new();
        for (topic, partitions) in watermarks.topics() {
            let topic: Arc<str> = Arc::from(topic);
            for (partition, w) in partitions.iter().enumerate() {
                if let Some(w) = w {
                    times.sample_high(&topic, partition as i32, w.high, now_ms);
                    live.insert((Arc::clone(&topic), partition as i32));
                }
            }
        }
        times.keep_partitions(&live);
        times.wanted(&lagging)
    }

    /// Records read for [`Monitor::sample`]: (topic, partition, wanted
    /// offset) → (offset read, timestamp in ms).
    pub fn times_found(&self, found: impl IntoIterator<Item = ((String, i32, i64), (i64, i64))>) {
        let mut times = lock(&self.lag_times);
        for ((topic, partition, wanted), (offset, timestamp_ms)) in found {
            times.found(&Arc::from(topic), partition, wanted, offset, timestamp_ms);
        }
    }

    /// Offsets of [`Monitor::sample`] that were read and gave no record.
    pub fn times_not_found(&self, missing: impl IntoIterator<Item = (String, i32, i64)>) {
        let mut times = lock(&self.lag_times);
        for (topic, partition, wanted) in missing {
            times.not_found(&Arc::from(topic), partition, wanted);
        }
    }

    /// After a refresh and its record times: each group's total lag and
    /// highest lag in seconds go into its history (one more pass over the
    /// state; groups gone are forgotten).
    pub fn record_history(&self) {
        let watermarks = self.watermarks();
        let seconds = self.lag_seconds();
        let mut totals = Vec::new();
        self.for_each_unit(|_, unit| {
            for (group, g) in unit.groups() {
                if !self.settings.groups.allows(group) {
                    continue;
                }
                let (mut total, mut most) = (0, None::<f64>);
                for (topic, partition, c) in g.offsets() {
                    let Some(w) = watermarks.get(topic, partition) else { continue };
                    if !self.settings.topics.allows(topic) {
                        continue;
                    }
                    let lag = crate::watermarks::lag(w.high, c.offset);
                    total += lag;
                    if let Some((s, _)) = seconds.get(topic, partition, c.offset, lag) {
                        most = Some(most.map_or(s, |m| m.max(s)));
                    }
                }
                totals.push((Arc::clone(group), total, most));
            }
        });
        let now_ms = seconds.now_ms;
        drop(seconds);
        lock(&self.lag_history).record(now_ms, totals);
    }

    /// A group's recent lag, oldest first, and the settings it was kept by.
    pub fn history(&self, group: &str) -> (Vec<LagPoint>, HistorySettings) {
        let history = lock(&self.lag_history);
        (history.points(group), history.settings())
    }

    /// Lag in seconds as of now (holds the record times while it lives: take
    /// it once per pass).
    pub fn lag_seconds(&self) -> LagSeconds<'_> {
        LagSeconds { times: lock(&self.lag_times), now_ms: self.clock.epoch_ms() }
    }

    /// Partitions' statuses by Burrow's rules over their recent commits, as of
    /// now (holds the history while it lives: take it once per pass).
    pub fn statuses(&self) -> Statuses<'_> {
        Statuses { history: lock(&self.history), now_ms: self.clock.epoch_ms() }
    }
}
