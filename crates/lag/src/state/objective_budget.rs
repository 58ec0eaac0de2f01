//! Each group's lag objectives as kshard itself has measured them, for the
//! group's page and `/api/group`: how much of the time its lag in seconds was
//! under each objective's bound, and what is left of the error budget.
//!
//! It counts as the rules of [`crate::objectives::prometheus_rules`] do over
//! the group's `…_topic_max_lag_seconds`: at each refresh the group is good
//! (its worst lag in seconds is at most the bound) or not, and that holds
//! until the next refresh, as Prometheus holds a sample. Time with no verdict
//! counts neither way: while the group's lag in seconds is unknown, while it
//! is absent from the snapshot, while kshard is not ready, and any time
//! between two refreshes past `stale_after` (kshard withholds its lag series
//! then, and Prometheus no longer sees them).
//!
//! Bounded: each (group, objective) keeps the window in [`SLICES`] slices of
//! good and measured time (the oldest slice leaves whole), 24 bytes each:
//! under 0.8 KB with its header. A group absent for [`FORGET_MS`] is
//! forgotten. It lives in memory and starts empty when kshard does: the
//! figures say since when they count, and Prometheus's
//! `kshard:objective_error_budget_remaining` covers the whole window across
//! restarts. Pure: the caller passes the time.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;

use crate::names::FastMap;
use crate::objectives::{Compiled, Objective};

/// Slices each objective's window is kept in.
pub(crate) const SLICES: usize = 30;

/// How long a group absent from the snapshots keeps its ledgers (a group
/// briefly not listed, while its coordinator moves, loses nothing).
pub(crate) const FORGET_MS: i64 = 10 * 60_000;

/// One slice of a window: the time measured in it, and how much of it good.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Slice {
    /// Its index: it starts `index × slice width` after the epoch.
    index: u64,
    /// Time under the bound, in ms.
    good_ms: u64,
    /// Time with a verdict, in ms.
    measured_ms: u64,
}

/// One group under one objective.
#[derive(Debug)]
struct Ledger {
    /// Which objective (its index in the settings).
    objective: usize,
    /// Under the bound at the last refresh; `None`: not known.
    good: Option<bool>,
    slices: VecDeque<Slice>,
    /// When the first measured time began.
    since_ms: Option<i64>,
    /// Up to when time is counted: a clock stepping back counts nothing twice.
    counted_to: i64,
}

/// A group's ledgers, and when it was last in a snapshot.
#[derive(Debug)]
struct Group {
    seen_ms: i64,
    ledgers: Vec<Ledger>,
}

/// The ledgers of every group an objective covers.
#[derive(Debug)]
pub(crate) struct Budgets {
    objectives: Arc<[Objective]>,
    /// The `group_id` matchers of each objective, compiled.
    selectors: Vec<Vec<Compiled>>,
    /// How long a refresh's verdicts hold at most.
    stale_after_ms: i64,
    groups: FastMap<Arc<str>, Group>,
    /// The last refresh, when the next one may count from it.
    last_ms: Option<i64>,
}

/// An objective as one group's page shows it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BudgetView {
    /// The objective's name.
    pub name: String,
    /// Its bound on lag in seconds.
    pub lag_seconds: f64,
    /// The share of time under the bound it asks for, in percent.
    pub target_percent: f64,
    /// Its window, in seconds.
    pub window_seconds: f64,
    /// Whether the group's lag in seconds was at most the bound at the last
    /// refresh; `None`: not known then.
    pub good_now: Option<bool>,
    /// Time with a verdict, in the window, in seconds.
    pub measured_seconds: f64,
    /// Of it, time over the bound, in seconds.
    pub over_seconds: f64,
    /// Time over the bound the whole window allows: (1 − target) × window.
    pub allowed_over_seconds: f64,
    /// The share of the measured time under the bound; `None` before any.
    pub good_ratio: Option<f64>,
    /// The share of the window's allowance left: 1 − over / allowed (1
    /// untouched, 0 spent, below 0 the objective missed). Time kshard did
    /// not measure counts as good: with the whole window measured it is
    /// Prometheus's `kshard:objective_error_budget_remaining`.
    pub budget_remaining: f64,
    /// How fast the measured time spent the budget: (1 − good_ratio) /
    /// (1 − target); 1 spends exactly the allowance over a window, the
    /// burn-rate alerts fire from 14.4 (fast) down to 1 (creeping).
    pub burn_rate: Option<f64>,
    /// Since when these figures count, ms since the epoch: when kshard began
    /// measuring (its start, in effect), or the window's start if later.
    pub since_ms: Option<i64>,
}

impl Budgets {
    /// Ledgers for `objectives` (those of this cluster: only their `group_id`
    /// matchers are read here), a refresh's verdicts holding `stale_after`
    /// at most.
    pub(crate) fn new(objectives: Arc<[Objective]>, stale_after: Duration) -> Self {
        let selectors = objectives.iter().map(|o| o.compiled("group_id")).collect();
        let stale_after_ms = i64::try_from(stale_after.as_millis()).unwrap_or(i64::MAX);
        Budgets { objectives, selectors, stale_after_ms, groups: FastMap::default(), last_ms: None }
    }

    /// One refresh's verdicts at `now_ms`: each group's worst lag in seconds,
    /// when known. Groups absent for [`FORGET_MS`] are forgotten.
    pub(crate) fn record<'a>(&mut self, now_ms: i64, groups: impl IntoIterator<Item = (&'a Arc<str>, Option<f64>)>) {
        if self.objectives.is_empty() {
            return;
        }
        let from = self.last_ms.filter(|last| now_ms > *last);
        let to = from.map(|from| now_ms.min(from.saturating_add(self.stale_after_ms)));
        let (objectives, selectors) = (&self.objectives, &self.selectors);
        for (group, seconds) in groups {
            let entry = self.groups.entry(Arc::clone(group)).or_insert_with(|| Group {
                seen_ms: now_ms,
                ledgers: selectors
                    .iter()
                    .enumerate()
                    .filter(|(_, s)| s.iter().all(|m| m.accepts(group)))
                    .map(|(objective, _)| Ledger::new(objective))
                    .collect(),
            });
            entry.seen_ms = now_ms;
            for ledger in &mut entry.ledgers {
                let objective = &objectives[ledger.objective];
                if let (Some(from), Some(to), Some(good)) = (from, to, ledger.good) {
                    ledger.count(from, to, good, slice_ms(objective));
                }
                ledger.good = seconds.map(|s| s <= objective.lag_seconds);
            }
        }
        // Absent: the interval its last verdict began counts, then no
        // verdict until seen again; forgotten after a while.
        for g in self.groups.values_mut().filter(|g| g.seen_ms != now_ms) {
            for ledger in &mut g.ledgers {
                if let (Some(from), Some(to), Some(good)) = (from, to, ledger.good.take()) {
                    ledger.count(from, to, good, slice_ms(&objectives[ledger.objective]));
                }
            }
        }
        self.groups.retain(|_, g| now_ms.saturating_sub(g.seen_ms) <= FORGET_MS);
        self.last_ms = Some(now_ms);
    }

    /// A refresh that found kshard not ready: the time until the next one
    /// counts neither way.
    pub(crate) fn pause(&mut self) {
        self.last_ms = None;
    }

    /// The objectives covering `group`, as of `now_ms` (empty when none).
    pub(crate) fn view(&self, group: &str, now_ms: i64) -> Vec<BudgetView> {
        let Some(g) = self.groups.get(group) else { return Vec::new() };
        g.ledgers.iter().map(|l| l.view(&self.objectives[l.objective], now_ms)).collect()
    }

    /// Each group that has spent an objective's whole allowance in its
    /// window as of `now_ms`, with those objectives' names.
    pub(crate) fn missed(&self, now_ms: i64) -> FastMap<Arc<str>, Vec<String>> {
        let mut out = FastMap::default();
        for (group, g) in &self.groups {
            let names: Vec<String> = g
                .ledgers
                .iter()
                .filter(|l| l.missed(&self.objectives[l.objective], now_ms))
                .map(|l| self.objectives[l.objective].name.clone())
                .collect();
            if !names.is_empty() {
                out.insert(Arc::clone(group), names);
            }
        }
        out
    }

    /// (group, objective) pairs measured.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.groups.values().map(|g| g.ledgers.len()).sum()
    }
}

/// The width of one slice of `objective`'s window, in ms.
fn slice_ms(objective: &Objective) -> u64 {
    (u64::try_from(objective.window.as_millis()).unwrap_or(u64::MAX) / SLICES as u64).max(1)
}

impl Ledger {
    fn new(objective: usize) -> Self {
        Ledger { objective, good: None, slices: VecDeque::with_capacity(SLICES), since_ms: None, counted_to: 0 }
    }

    /// `from..to` was `good` (or not): into the slices it spans, but for
    /// what was counted already.
    fn count(&mut self, from: i64, to: i64, good: bool, width: u64) {
        let from = from.max(self.counted_to).max(0);
        if from >= to {
            return;
        }
        self.since_ms.get_or_insert(from);
        self.counted_to = to;
        // Only the last window's worth can stay: a long stretch (a clock
        // jumping ahead) costs no more than the slices it fills.
        let (to, keep) = (to as u64, (SLICES as u64).saturating_mul(width));
        let mut at = (from as u64).max(to.saturating_sub(keep));
        while at < to {
            let index = at / width;
            let end = index.saturating_add(1).saturating_mul(width).min(to);
            if self.slices.back().is_none_or(|last| last.index != index) {
                if self.slices.len() == SLICES {
                    self.slices.pop_front();
                }
                self.slices.push_back(Slice { index, good_ms: 0, measured_ms: 0 });
            }
            let Some(slice) = self.slices.back_mut() else { return };
            slice.measured_ms += end - at;
            if good {
                slice.good_ms += end - at;
            }
            at = end;
        }
    }

    /// The window's sums as of `now_ms`: (good ms, measured ms, the
    /// window's start in ms).
    fn sums(&self, objective: &Objective, now_ms: i64) -> (u64, u64, i64) {
        let width = slice_ms(objective);
        let newest = now_ms.max(0) as u64 / width;
        let oldest = newest.saturating_sub(SLICES as u64 - 1);
        let (mut good, mut measured) = (0u64, 0u64);
        // Slices past now are of a clock since stepped back: not this window's.
        for s in self.slices.iter().filter(|s| (oldest..=newest).contains(&s.index)) {
            good += s.good_ms;
            measured += s.measured_ms;
        }
        (good, measured, (oldest * width) as i64)
    }

    /// Whether the time over the bound in the window passed its allowance.
    fn missed(&self, objective: &Objective, now_ms: i64) -> bool {
        let (good, measured, _) = self.sums(objective, now_ms);
        let allowed = allowed_ms(objective);
        allowed > 0.0 && (measured - good) as f64 > allowed
    }

    fn view(&self, objective: &Objective, now_ms: i64) -> BudgetView {
        let (good, measured, window_start) = self.sums(objective, now_ms);
        let window_ms = objective.window.as_millis() as f64;
        let budget = 1.0 - objective.target;
        let allowed_ms = allowed_ms(objective);
        let over_ms = (measured - good) as f64;
        let good_ratio = (measured > 0).then(|| good as f64 / measured as f64);
        BudgetView {
            name: objective.name.clone(),
            lag_seconds: objective.lag_seconds,
            // 99.9, not 99.89999999999999.
            target_percent: (objective.target * 1e8).round() / 1e6,
            window_seconds: window_ms / 1000.0,
            good_now: self.good,
            measured_seconds: measured as f64 / 1000.0,
            over_seconds: over_ms / 1000.0,
            allowed_over_seconds: allowed_ms / 1000.0,
            good_ratio,
            budget_remaining: if allowed_ms > 0.0 { 1.0 - over_ms / allowed_ms } else { 1.0 },
            burn_rate: good_ratio.map(|r| (1.0 - r) / budget),
            since_ms: self.since_ms.map(|since| since.max(window_start)),
        }
    }
}

/// The time over the bound `objective` allows in its window, in whole ms:
/// 0.1% of 30 days is 43 m 12 s, not 2591.9999999 s. (Under a second is
/// refused when objectives are read; 0 would leave nothing to miss.)
fn allowed_ms(objective: &Objective) -> f64 {
    ((1.0 - objective.target) * objective.window.as_millis() as f64).round()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::objectives::Matcher;

    const MIN: i64 = 60_000;
    /// Refreshes hold their verdicts this long (the monitor's default).
    const STALE: Duration = Duration::from_secs(15);

    fn objective(name: &str, selector: &str, bound: f64, window: Duration) -> Objective {
        Objective {
            name: name.into(),
            selector: Matcher::parse_selector(selector).expect("a selector"),
            lag_seconds: bound,
            target: 0.99,
            window,
        }
    }

    fn hour(name: &str, selector: &str) -> Objective {
        objective(name, selector, 30.0, Duration::from_secs(3600))
    }

    fn budgets(objectives: impl Into<Arc<[Objective]>>) -> Budgets {
        Budgets::new(objectives.into(), STALE)
    }

    fn g(name: &str) -> Arc<str> {
        Arc::from(name)
    }

    /// Records `a`'s lag in seconds every 10 s from `from_s` to `to_s`.
    fn every_10s(b: &mut Budgets, from_s: i64, to_s: i64, seconds: Option<f64>) {
        let a = g("a");
        for t in (from_s..to_s).step_by(10) {
            b.record(t * 1000, [(&a, seconds)]);
        }
    }

    #[test]
    fn each_interval_counts_as_the_refresh_that_began_it() {
        let mut b = budgets([hour("fresh", "")]);
        // A minute at most 30 s (30 s itself is good), then one over it.
        every_10s(&mut b, 0, 60, Some(30.0));
        every_10s(&mut b, 60, 120, Some(45.0));
        every_10s(&mut b, 120, 130, Some(2.0));
        let v = &b.view("a", 2 * MIN)[0];
        assert_eq!(b.missed(2 * MIN).get("a"), Some(&vec!["fresh".to_owned()]));
        assert_eq!((v.measured_seconds, v.over_seconds), (120.0, 60.0));
        assert_eq!(v.good_ratio, Some(0.5));
        assert_eq!(v.good_now, Some(true));
        // 1% of an hour is 36 s: 60 s over spends it and 24 s more.
        assert_eq!(v.allowed_over_seconds, 36.0);
        assert!((v.budget_remaining - (1.0 - 60.0 / 36.0)).abs() < 1e-9);
        // Half the time over, with 1% allowed: fifty times too fast.
        assert!((v.burn_rate.expect("measured") - 50.0).abs() < 1e-9);
        assert_eq!(v.since_ms, Some(0));
    }

    #[test]
    fn unknown_lag_absence_not_ready_and_stale_time_count_neither_way() {
        let mut b = budgets([hour("fresh", "")]);
        let a = g("a");
        every_10s(&mut b, 0, 60, None);
        assert_eq!(b.view("a", MIN)[0].good_ratio, None, "a minute of unknown lag");
        b.pause();
        b.record(2 * MIN, [(&a, Some(1.0))]);
        assert_eq!(b.view("a", 2 * MIN)[0].measured_seconds, 0.0, "not ready: not counted");
        // No refresh for a minute: the last verdict holds for 15 s, as kshard
        // keeps serving its lag until then.
        b.record(3 * MIN, [(&a, Some(1.0))]);
        assert_eq!(b.view("a", 3 * MIN)[0].measured_seconds, 15.0);
        // Absent from a snapshot: no verdict until seen again.
        b.record(3 * MIN + 10_000, []);
        b.record(3 * MIN + 20_000, [(&a, Some(1.0))]);
        b.record(3 * MIN + 30_000, [(&a, Some(1.0))]);
        let v = &b.view("a", 3 * MIN + 30_000)[0];
        assert_eq!((v.measured_seconds, v.budget_remaining, v.burn_rate), (35.0, 1.0, Some(0.0)));
        assert!(b.missed(3 * MIN + 30_000).is_empty());
    }

    #[test]
    fn selectors_pick_groups_and_groups_long_gone_are_forgotten() {
        let objectives = [hour("billing", r#"group_id=~"billing-.*""#), hour("not-a", r#"group_id!="a""#)];
        let mut b = budgets(objectives);
        let (a, billing) = (g("a"), g("billing-1"));
        b.record(0, [(&a, Some(1.0)), (&billing, Some(1.0))]);
        let names = |b: &Budgets, group: &str| b.view(group, 0).into_iter().map(|v| v.name).collect::<Vec<_>>();
        assert!(names(&b, "a").is_empty());
        assert_eq!(names(&b, "billing-1"), ["billing", "not-a"]);
        assert_eq!(b.len(), 2);
        b.record(MIN, [(&a, Some(1.0))]);
        assert_eq!(b.len(), 2, "billing-1 is kept a while");
        assert_eq!(b.view("billing-1", MIN)[0].good_now, None, "without a verdict");
        b.record(MIN + FORGET_MS + 1, [(&a, Some(1.0))]);
        assert_eq!(b.len(), 0, "billing-1 is gone");
    }

    #[test]
    fn time_older_than_the_window_leaves_a_slice_at_a_time() {
        // An hour in 30 slices of two minutes.
        let mut b = budgets([hour("fresh", "")]);
        every_10s(&mut b, 0, 60, Some(99.0));
        every_10s(&mut b, 60, 7210, Some(1.0));
        let v = &b.view("a", 120 * MIN)[0];
        // The bad first minute left with its slice; the window holds 29
        // whole slices and the current one begun (0 minutes in).
        assert_eq!(v.over_seconds, 0.0);
        assert_eq!(v.measured_seconds, 58.0 * 60.0);
        assert_eq!(v.budget_remaining, 1.0);
        assert_eq!(v.since_ms, Some(62 * MIN), "the window's start");
    }

    #[test]
    fn a_clock_stepping_back_counts_nothing_twice() {
        let mut b = budgets([hour("fresh", "")]);
        every_10s(&mut b, 600, 660, Some(1.0));
        every_10s(&mut b, 300, 360, Some(99.0));
        every_10s(&mut b, 650, 700, Some(1.0));
        let v = &b.view("a", 700_000)[0];
        assert_eq!((v.measured_seconds, v.over_seconds), (90.0, 0.0));
    }

    #[test]
    fn a_clock_jumping_years_ahead_fills_only_the_window() {
        let mut b = Budgets::new(Arc::from([hour("fresh", "")]), Duration::MAX);
        let a = g("a");
        b.record(0, [(&a, Some(1.0))]);
        let ten_years = 10 * 366 * 86_400_000;
        b.record(ten_years, [(&a, Some(1.0))]);
        let v = &b.view("a", ten_years)[0];
        assert!(v.measured_seconds <= 3600.0 && v.measured_seconds >= 3480.0, "{v:?}");
    }

    #[test]
    fn a_slice_is_24_bytes_as_docs_objectives_md_says() {
        assert_eq!(std::mem::size_of::<Slice>(), 24);
        let docs = include_str!("../../../../docs/objectives.md");
        assert!(docs.contains("in 30 slices") && docs.contains("24 bytes a slice") && SLICES == 30);
        assert!(docs.contains("for 10 minutes is forgotten") && FORGET_MS == 10 * 60_000);
    }

    proptest::proptest! {
        #[test]
        fn bounded_and_never_more_than_the_window(steps in proptest::collection::vec((-100_000i64..400_000, 0u32..100, proptest::bool::ANY), 1..300)) {
            let mut b = budgets([objective("fresh", "", 50.0, Duration::from_secs(3600))]);
            let a = g("a");
            let mut now = 1_000_000;
            for (advance, lag, known) in steps {
                now += advance;
                b.record(now, [(&a, known.then_some(f64::from(lag)))]);
                let v = &b.view("a", now)[0];
                proptest::prop_assert!(v.measured_seconds <= 3600.0);
                proptest::prop_assert!(v.over_seconds <= v.measured_seconds);
                proptest::prop_assert!(v.budget_remaining <= 1.0);
                let g = b.groups.get("a").expect("kept");
                proptest::prop_assert!(g.ledgers[0].slices.len() <= SLICES);
                proptest::prop_assert!(g.ledgers[0].slices.iter().all(|s| s.measured_ms <= 120_000 && s.good_ms <= s.measured_ms));
            }
        }
    }
}
