//! Each group's lag objectives as kshard itself has measured them, for the
//! group's page and `/api/group`: how much of the time its lag in seconds was
//! under each objective's bound, and what is left of the error budget.
//!
//! It counts as the rules of [`crate::objectives::prometheus_rules`] do over
//! `kafka_consumer_group_topic_max_lag_seconds`: at each refresh the group is
//! good (its worst lag in seconds is under the bound) or not, and that holds
//! until the next refresh, as Prometheus holds a sample. Time with no verdict
//! counts neither way: while kshard is not ready, while the group's lag in
//! seconds is unknown, and any gap between refreshes longer than five minutes
//! (Prometheus's lookback, past which a rule no longer sees the series).
//!
//! Bounded: each (group, objective) keeps the window in [`SLICES`] slices of
//! good and measured time (the oldest slice leaves whole), 24 bytes each. It
//! lives in memory and starts empty when kshard does: the figures say since
//! when they count, and Prometheus's `kshard:objective_error_budget_remaining`
//! covers the whole window across restarts. Pure: the caller passes the time.

use std::collections::VecDeque;
use std::sync::Arc;

use serde::Serialize;

use crate::names::FastMap;
use crate::objectives::Objective;

/// Slices each objective's window is kept in.
pub(crate) const SLICES: u64 = 30;

/// The longest time between two refreshes that still counts: Prometheus's
/// default lookback (`--query.lookback-delta`).
const LOOKBACK_MS: i64 = 5 * 60_000;

/// One slice of a window: the time measured in it, and how much of it good.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Slice {
    /// Its index: it starts `index × slice width` after the epoch.
    index: u64,
    good_ms: u64,
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
}

/// The ledgers of every group an objective covers.
#[derive(Debug, Default)]
pub(crate) struct Budgets {
    objectives: Arc<[Objective]>,
    /// The group-id matchers of each objective, compiled.
    selectors: Vec<Vec<GroupMatcher>>,
    /// By group: its ledgers, and the generation that last saw it.
    groups: FastMap<Arc<str>, (u64, Vec<Ledger>)>,
    generation: u64,
    /// The last refresh counted from, when the next one may count from it.
    last_ms: Option<i64>,
}

/// A `group_id` matcher, compiled.
#[derive(Debug)]
enum GroupMatcher {
    Equal(String, bool),
    Regex(regex::Regex, bool),
}

impl GroupMatcher {
    fn matches(&self, group: &str) -> bool {
        match self {
            GroupMatcher::Equal(v, want) => (v == group) == *want,
            GroupMatcher::Regex(r, want) => r.is_match(group) == *want,
        }
    }
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
    /// Whether the group's lag in seconds was under the bound at the last
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
    /// The share of the error budget left, as Prometheus's
    /// `kshard:objective_error_budget_remaining`: 1 − (1 − good_ratio) /
    /// (1 − target); 1 untouched, 0 spent, below 0 the objective missed.
    pub budget_remaining: Option<f64>,
    /// When kshard began measuring it (its process's start, in effect), ms
    /// since the epoch.
    pub since_ms: Option<i64>,
}

impl Budgets {
    /// Ledgers for `objectives` (those of this cluster: only their `group_id`
    /// matchers are read here).
    pub(crate) fn new(objectives: Arc<[Objective]>) -> Self {
        let selectors = objectives
            .iter()
            .map(|o| {
                o.selector
                    .iter()
                    .filter(|m| m.label == "group_id")
                    .map(|m| {
                        let want = !m.op.starts_with('!');
                        if m.op.contains('~') {
                            // Checked when the objective was read.
                            let r = regex::Regex::new(&format!("^(?:{})$", m.value)).unwrap_or_else(|_| never());
                            GroupMatcher::Regex(r, want)
                        } else {
                            GroupMatcher::Equal(m.value.clone(), want)
                        }
                    })
                    .collect()
            })
            .collect();
        Budgets { objectives, selectors, ..Budgets::default() }
    }

    /// One refresh's verdicts at `now_ms`: each group's worst lag in seconds,
    /// when known. Groups absent are forgotten.
    pub(crate) fn record<'a>(&mut self, now_ms: i64, groups: impl IntoIterator<Item = (&'a Arc<str>, Option<f64>)>) {
        if self.objectives.is_empty() {
            return;
        }
        self.generation = self.generation.wrapping_add(1);
        let generation = self.generation;
        let counted = self.last_ms.filter(|last| (1..=LOOKBACK_MS).contains(&(now_ms - last)));
        for (group, seconds) in groups {
            let (seen, ledgers) = self.groups.entry(Arc::clone(group)).or_insert_with(|| {
                let covering = self.selectors.iter().enumerate().filter(|(_, s)| s.iter().all(|m| m.matches(group)));
                let ledgers = covering
                    .map(|(objective, _)| Ledger { objective, good: None, slices: VecDeque::new(), since_ms: None })
                    .collect();
                (0, ledgers)
            });
            *seen = generation;
            for ledger in ledgers.iter_mut() {
                let objective = &self.objectives[ledger.objective];
                if let (Some(from), Some(good)) = (counted, ledger.good) {
                    ledger.count(from, now_ms, good, slice_ms(objective));
                }
                ledger.good = seconds.map(|s| s <= objective.lag_seconds);
            }
        }
        self.groups.retain(|_, (seen, _)| *seen == generation);
        self.last_ms = Some(now_ms);
    }

    /// A refresh that found kshard not ready: the time until the next one
    /// counts neither way.
    pub(crate) fn pause(&mut self) {
        self.last_ms = None;
    }

    /// The objectives covering `group`, as of `now_ms` (empty when none).
    pub(crate) fn view(&self, group: &str, now_ms: i64) -> Vec<BudgetView> {
        let Some((_, ledgers)) = self.groups.get(group) else { return Vec::new() };
        ledgers.iter().map(|l| l.view(&self.objectives[l.objective], now_ms)).collect()
    }

    /// (group, objective) pairs measured.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.groups.values().map(|(_, l)| l.len()).sum()
    }

    /// Whether no group is measured.
    #[cfg(test)]
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A regular expression no group id matches, for one that cannot be
/// compiled (never: objectives are checked when read).
fn never() -> regex::Regex {
    regex::Regex::new("[^\\s\\S]").unwrap_or_else(|_| unreachable!("a valid regular expression"))
}

/// The width of one slice of `objective`'s window, in ms.
fn slice_ms(objective: &Objective) -> u64 {
    (objective.window.as_millis() as u64 / SLICES).max(1)
}

impl Ledger {
    /// `from..to` was `good` (or not): into the slices it spans.
    fn count(&mut self, from: i64, to: i64, good: bool, width: u64) {
        self.since_ms.get_or_insert(from);
        let (mut at, to) = (from.max(0) as u64, to.max(0) as u64);
        while at < to {
            let index = at / width;
            let end = ((index + 1) * width).min(to);
            let slice = match self.slices.back_mut() {
                Some(last) if last.index == index => last,
                // A clock that stepped back: leave what is recorded.
                Some(last) if last.index > index => return,
                _ => {
                    self.slices.push_back(Slice { index, good_ms: 0, measured_ms: 0 });
                    if self.slices.len() as u64 > SLICES {
                        self.slices.pop_front();
                    }
                    self.slices.back_mut().unwrap_or_else(|| unreachable!("just pushed"))
                }
            };
            slice.measured_ms += end - at;
            if good {
                slice.good_ms += end - at;
            }
            at = end;
        }
    }

    fn view(&self, objective: &Objective, now_ms: i64) -> BudgetView {
        let width = slice_ms(objective);
        let oldest = (now_ms.max(0) as u64 / width).saturating_sub(SLICES - 1);
        let (mut good, mut measured) = (0u64, 0u64);
        for s in self.slices.iter().filter(|s| s.index >= oldest) {
            good += s.good_ms;
            measured += s.measured_ms;
        }
        let good_ratio = (measured > 0).then(|| good as f64 / measured as f64);
        let window_seconds = objective.window.as_secs_f64();
        BudgetView {
            name: objective.name.clone(),
            lag_seconds: objective.lag_seconds,
            // 99.9, not 99.89999999999999.
            target_percent: (objective.target * 1e8).round() / 1e6,
            window_seconds,
            good_now: self.good,
            measured_seconds: measured as f64 / 1000.0,
            over_seconds: (measured - good) as f64 / 1000.0,
            allowed_over_seconds: (1.0 - objective.target) * window_seconds,
            good_ratio,
            budget_remaining: good_ratio.map(|r| 1.0 - (1.0 - r) / (1.0 - objective.target)),
            since_ms: self.since_ms,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::objectives::Matcher;

    const MIN: i64 = 60_000;

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

    fn g(name: &str) -> Arc<str> {
        Arc::from(name)
    }

    #[test]
    fn each_interval_counts_as_the_refresh_that_began_it() {
        let mut b = Budgets::new(Arc::from([hour("fresh", "")]));
        let a = g("a");
        b.record(0, [(&a, Some(1.0))]);
        // The first minute was good (1 s at its start), the second over 30 s.
        b.record(MIN, [(&a, Some(45.0))]);
        b.record(2 * MIN, [(&a, Some(2.0))]);
        let v = &b.view("a", 2 * MIN)[0];
        assert_eq!((v.measured_seconds, v.over_seconds), (120.0, 60.0));
        assert_eq!(v.good_ratio, Some(0.5));
        assert_eq!(v.good_now, Some(true));
        // Half the time over, with 1% allowed: fifty budgets spent.
        assert!((v.budget_remaining.expect("measured") - (1.0 - 0.5 / 0.01)).abs() < 1e-9);
        assert!((v.allowed_over_seconds - 36.0).abs() < 1e-9);
        assert_eq!(v.since_ms, Some(0));
    }

    #[test]
    fn unknown_lag_not_ready_and_long_gaps_count_neither_way() {
        let mut b = Budgets::new(Arc::from([hour("fresh", "")]));
        let a = g("a");
        b.record(0, [(&a, None)]);
        b.record(MIN, [(&a, Some(1.0))]);
        assert_eq!(b.view("a", MIN)[0].good_ratio, None, "a minute of unknown lag");
        b.pause();
        b.record(2 * MIN, [(&a, Some(1.0))]);
        assert_eq!(b.view("a", 2 * MIN)[0].measured_seconds, 0.0, "not ready: not counted");
        b.record(9 * MIN, [(&a, Some(1.0))]);
        assert_eq!(b.view("a", 9 * MIN)[0].measured_seconds, 0.0, "seven minutes without a refresh");
        b.record(10 * MIN, [(&a, Some(1.0))]);
        let v = &b.view("a", 10 * MIN)[0];
        assert_eq!((v.measured_seconds, v.budget_remaining), (60.0, Some(1.0)));
    }

    #[test]
    fn selectors_pick_groups_and_groups_gone_are_forgotten() {
        let objectives = [hour("billing", r#"group_id=~"billing-.*""#), hour("not-a", r#"group_id!="a""#)];
        let mut b = Budgets::new(Arc::from(objectives));
        let (a, billing) = (g("a"), g("billing-1"));
        b.record(0, [(&a, Some(1.0)), (&billing, Some(1.0))]);
        let names = |group: &str| b.view(group, 0).into_iter().map(|v| v.name).collect::<Vec<_>>();
        assert!(names("a").is_empty());
        assert_eq!(names("billing-1"), ["billing", "not-a"]);
        assert_eq!(b.len(), 2);
        b.record(MIN, [(&a, Some(1.0))]);
        assert!(b.is_empty(), "billing-1 is gone");
    }

    #[test]
    fn time_older_than_the_window_leaves_a_slice_at_a_time() {
        // An hour in 30 slices of two minutes.
        let mut b = Budgets::new(Arc::from([hour("fresh", "")]));
        let a = g("a");
        b.record(0, [(&a, Some(99.0))]);
        for minute in 1..=120 {
            b.record(minute * MIN, [(&a, Some(1.0))]);
        }
        let v = &b.view("a", 120 * MIN)[0];
        // The bad first minute left with its slice; the window holds 29
        // whole slices and the current one begun (0 minutes in).
        assert_eq!(v.over_seconds, 0.0);
        assert_eq!(v.measured_seconds, 58.0 * 60.0);
        assert_eq!(v.budget_remaining, Some(1.0));
    }

    #[test]
    fn a_clock_stepping_back_changes_nothing_recorded() {
        let mut b = Budgets::new(Arc::from([hour("fresh", "")]));
        let a = g("a");
        b.record(10 * MIN, [(&a, Some(1.0))]);
        b.record(11 * MIN, [(&a, Some(1.0))]);
        b.record(5 * MIN, [(&a, Some(99.0))]);
        b.record(6 * MIN, [(&a, Some(1.0))]);
        assert_eq!(b.view("a", 11 * MIN)[0].over_seconds, 0.0);
    }

    #[test]
    fn a_slice_is_24_bytes_as_docs_objectives_md_says() {
        assert_eq!(std::mem::size_of::<Slice>(), 24);
        let docs = include_str!("../../../../docs/objectives.md");
        assert!(docs.contains("in 30 slices") && docs.contains("24 bytes a slice") && SLICES == 30);
    }

    proptest::proptest! {
        #[test]
        fn bounded_and_never_more_than_the_window(steps in proptest::collection::vec((0i64..400_000, 0u32..100, proptest::bool::ANY), 1..300)) {
            let mut b = Budgets::new(Arc::from([objective("fresh", "", 50.0, Duration::from_secs(3600))]));
            let a = g("a");
            let mut now = 0;
            for (advance, lag, known) in steps {
                now += advance;
                b.record(now, [(&a, known.then_some(f64::from(lag)))]);
                let v = &b.view("a", now)[0];
                proptest::prop_assert!(v.measured_seconds <= 3600.0);
                proptest::prop_assert!(v.over_seconds <= v.measured_seconds);
                proptest::prop_assert!(v.budget_remaining.is_none_or(|r| r <= 1.0));
                let (_, ledgers) = b.groups.get("a").expect("kept");
                proptest::prop_assert!(ledgers[0].slices.len() as u64 <= SLICES);
            }
        }
    }
}
