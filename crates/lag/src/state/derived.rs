//! [`Derived`]: what the monitor derives from its units at each watermark
//! refresh — each group-partition's window of recent commits (its status),
//! the record times wanted for lag in seconds, each group's lag history —
//! and [`DerivedView`], the view over them that readers take once per pass.
//! Pure: the units, watermarks and wall-clock time come in as arguments.

use kshard_kafka::TopicPartitionOffset;
use std::sync::{Arc, MutexGuard};

use crate::consumer_status::{Commit, CommitWindow, Status, StatusSettings};
use crate::lag_history::{HistorySettings, LagHistory, LagPoint};
use crate::lag_time::{LagTimes, Written};
use crate::monitor_settings::MonitorSettings;
use crate::names::FastMap;
use crate::objective_budget::{BudgetView, Budgets};
use crate::objectives::Objective;
use crate::share_rows::ShareRow;
use crate::units::Units;
use crate::velocity::Velocity;
use crate::watermarks::Watermarks;

/// A group-partition: (group, topic, partition).
type GroupPartition = (Arc<str>, Arc<str>, i32);

/// What a refresh derives, behind the monitor's one lock for it.
#[derive(Debug)]
pub(crate) struct Derived {
    /// The windows of recent commits, by group-partition, each with the
    /// generation of the sample that last saw it.
    windows: FastMap<GroupPartition, (u64, CommitWindow)>,
    status: StatusSettings,
    generation: u64,
    /// Record times and high-watermark history, for lag in seconds.
    times: LagTimes,
    /// Each group's recent lag, for the page's chart.
    history: LagHistory,
    /// Each group's lag objectives as measured here.
    budgets: Budgets,
}

/// Statuses and lag in seconds as of one instant (see [`crate::Monitor::derived`]).
#[derive(Debug)]
pub(crate) struct DerivedView<'a> {
    derived: MutexGuard<'a, Derived>,
    now_ms: i64,
}

impl DerivedView<'_> {
    /// The status of `group` on `topic`/`partition` with `lag` now (OK until
    /// some of its commits are known).
    pub(crate) fn status(&self, group: &Arc<str>, topic: &Arc<str>, partition: i32, lag: i64) -> Status {
        self.window(group, topic, partition).map_or(Status::Ok, |w| w.status(lag, self.now_ms, &self.derived.status))
    }

    /// The recent commits of `group` on `topic`/`partition`, once sampled.
    pub(crate) fn window(&self, group: &Arc<str>, topic: &Arc<str>, partition: i32) -> Option<&CommitWindow> {
        self.derived.window(group, topic, partition)
    }
}

impl DerivedView<'_> {
    /// When a commit at `commit_timestamp_ms` was made, as its age counts
    /// from. OffsetFetch (admin_api) gives no commit time: then when the
    /// offset was first seen, as the window keeps it.
    pub(crate) fn committed_at(
        &self,
        group: &Arc<str>,
        topic: &Arc<str>,
        partition: i32,
        commit_timestamp_ms: i64,
    ) -> Option<i64> {
        Some(commit_timestamp_ms)
            .filter(|t| *t > 0)
            .or_else(|| self.window(group, topic, partition).and_then(|w| w.last()).map(|c| c.timestamp_ms))
    }

    /// The group's rates over its window of recent commits, once known.
    pub(crate) fn velocity(&self, group: &Arc<str>, topic: &Arc<str>, partition: i32) -> Option<Velocity> {
        self.window(group, topic, partition).and_then(|w| Velocity::of(w.commits()))
    }

    /// When the first record a group at `committed` has not consumed was
    /// written (see [`crate::lag_time::LagTimes::written`]).
    pub(crate) fn written(&self, topic: &Arc<str>, partition: i32, committed: i64, lag: i64) -> Option<Written> {
        self.derived.times.written(topic, partition, committed, lag)
    }
}

/// What [`DerivedView::motion`] tells of one group-partition.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Motion {
    /// Seconds since the last commit, when its time is known.
    pub(crate) commit_age_s: Option<f64>,
    /// The rates, once two commits a second apart are known.
    pub(crate) velocity: Option<Velocity>,
    /// Seconds until the lag is zero at those rates; `None` when not shrinking.
    pub(crate) catch_up_s: Option<f64>,
}

impl<'a> DerivedView<'a> {
    pub(crate) fn new(derived: MutexGuard<'a, Derived>, now_ms: i64) -> Self {
        DerivedView { derived, now_ms }
    }

    /// Each group's total lag and highest lag in seconds at `now_ms`
    /// (`totals`: group, records, seconds) go into its history (groups gone
    /// are forgotten), and its worst lag in seconds into the ledgers of its
    /// objectives.
    pub(crate) fn record_history(&mut self, totals: Vec<(Arc<str>, i64, Option<f64>)>, now_ms: i64) {
        self.derived.budgets.record(now_ms, totals.iter().map(|(group, _, seconds)| (group, *seconds)));
        self.derived.history.record(now_ms, totals);
    }

    /// A refresh while not ready: the objectives' ledgers count nothing
    /// until the next one.
    pub(crate) fn pause_budgets(&mut self) {
        self.derived.budgets.pause();
    }
}

impl Derived {
    /// Nothing derived yet.
    pub(crate) fn new(
        status: StatusSettings,
        history: HistorySettings,
        objectives: Arc<[Objective]>,
        stale_after: std::time::Duration,
    ) -> Self {
        Derived {
            windows: FastMap::default(),
            status,
            generation: 0,
            times: LagTimes::default(),
            history: LagHistory::new(history),
            budgets: Budgets::new(objectives, stale_after),
        }
    }

    fn window(&self, group: &Arc<str>, topic: &Arc<str>, partition: i32) -> Option<&CommitWindow> {
        let key = (Arc::clone(group), Arc::clone(topic), partition);
        self.windows.get(&key).map(|(_, w)| w)
    }

    /// After a watermark refresh, in one pass over the units: takes each
    /// group-partition's committed offset into its window of recent commits
    /// (a new commit time is a new commit) with its lag against `watermarks`,
    /// forgets the windows of offsets that are gone, samples every
    /// partition's high watermark for lag-in-seconds estimates, and returns
    /// the (topic, partition, offset) of lagging group-partitions whose record
    /// time is to be read (for [`Derived::times_found`]).
    pub(crate) fn sample(
        &mut self,
        units: &Units,
        share: &[ShareRow],
        settings: &MonitorSettings,
        watermarks: &Watermarks,
        now_ms: i64,
    ) -> Vec<TopicPartitionOffset> {
        let mut lagging = self.take_commits(units, settings, watermarks, now_ms);
        // A share group's first record not done is at its start offset.
        for row in share {
            if let Some(w) = watermarks.get(&row.topic, row.partition)
                && row.lag(w.high).is_some_and(|l| l > 0)
            {
                lagging.push((Arc::clone(&row.topic), row.partition, row.start_offset, w.low));
            }
        }
        let mut live = std::collections::HashSet::new();
        for (topic, partitions) in watermarks.topics() {
            let topic: Arc<str> = Arc::from(topic);
            for (partition, w) in partitions.iter().enumerate() {
                if let Some(w) = w {
                    self.times.sample_high(&topic, partition as i32, w.high, now_ms);
                    live.insert((Arc::clone(&topic), partition as i32));
                }
            }
        }
        self.times.keep_partitions(&live);
        self.times.wanted(&lagging)
    }

    /// The commits part of [`Derived::sample`]; returns the lagging
    /// group-partitions: (topic, partition, committed offset, low watermark).
    fn take_commits(
        &mut self,
        units: &Units,
        settings: &MonitorSettings,
        watermarks: &Watermarks,
        now_ms: i64,
    ) -> Vec<(Arc<str>, i32, i64, i64)> {
        self.generation = self.generation.wrapping_add(1);
        let (now, status) = (self.generation, self.status);
        let windows = &mut self.windows;
        let mut lagging = Vec::new();
        units.for_each(|_, unit| {
            for (group, g) in unit.groups() {
                if !settings.groups.allows(group) {
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
                    window.commit(commit, &status);
                    window.watermark(w.high, &status);
                    if committed.offset < w.high && settings.topics.allows(topic) {
                        lagging.push((Arc::clone(topic), partition, committed.offset, w.low));
                    }
                }
            }
        });
        windows.retain(|_, (seen, _)| *seen == now);
        lagging
    }

    /// Records read for [`Derived::sample`]: (topic, partition, wanted
    /// offset) → (offset read, timestamp in ms).
    pub(crate) fn times_found(&mut self, found: impl IntoIterator<Item = (TopicPartitionOffset, (i64, i64))>) {
        for (TopicPartitionOffset { topic, partition, offset: wanted }, (offset, timestamp_ms)) in found {
            self.times.found(&Arc::from(topic), partition, wanted, offset, timestamp_ms);
        }
    }

    /// Offsets of [`Derived::sample`] that were read and gave no record.
    pub(crate) fn times_not_found(&mut self, missing: impl IntoIterator<Item = TopicPartitionOffset>) {
        for TopicPartitionOffset { topic, partition, offset: wanted } in missing {
            self.times.not_found(&Arc::from(topic), partition, wanted);
        }
    }

    /// A group's recent lag, oldest first, and the settings it was kept by.
    pub(crate) fn history(&self, group: &str) -> (Vec<LagPoint>, HistorySettings) {
        (self.history.points(group), self.history.settings())
    }

    /// The groups that missed an objective, as of `now_ms`, with its names.
    pub(crate) fn missed_objectives(&self, now_ms: i64) -> FastMap<Arc<str>, Vec<String>> {
        self.budgets.missed(now_ms)
    }

    /// A group's objectives as measured here, as of `now_ms`.
    pub(crate) fn budgets(&self, group: &str, now_ms: i64) -> Vec<BudgetView> {
        self.budgets.view(group, now_ms)
    }
}
