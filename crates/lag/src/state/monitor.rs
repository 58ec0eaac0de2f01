//! [`Monitor`]: the lag monitor's shared state, in three parts by what they
//! are — the partition [`Units`] the reader applies records to, the
//! [`Readiness`] that says whether they are current and complete (behind one
//! lock), and what each watermark refresh brings and [`Derived`] computes
//! from it (watermarks, coordinators, commit windows, record times, lag
//! history). The reader and the refresher write it; metrics and the HTTP API
//! read it. No I/O happens here: the runtime's handles and what only HTTP
//! serves belong to the service.

use kshard_kafka::TopicPartitionOffset;
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, RwLock};

use crate::catch_up::{Log, Progress};
use crate::derived::{Derived, DerivedView};
use crate::group_offsets::Applied;
use crate::lag_history::{HistorySettings, LagPoint};
pub use crate::monitor_settings::{Clock, Granularity, MonitorSettings, SystemClock};
use crate::readiness::{Event, Readiness, Verdict};
use crate::share_state::ShareState;
use crate::snapshot::LagSnapshot;
use crate::units::{LogUnits, RecordAt, SkippedRecord, Units, lock};
use crate::watermarks::Watermarks;

/// What the last refresh found of the brokers, replaced as a whole.
#[derive(Debug, Default)]
struct Refreshed {
    watermarks: Arc<Watermarks>,
    /// The leader of each `__consumer_offsets` partition: the coordinator of
    /// the groups whose records it holds.
    coordinators: HashMap<i32, i32>,
    /// The high watermark of each partition of the offsets topic: how far
    /// the reader is from the end (see [`Monitor::unread`]).
    offsets_topic_ends: BTreeMap<i32, i64>,
}

/// The lag monitor's state.
#[derive(Debug)]
pub struct Monitor {
    settings: MonitorSettings,
    clock: Arc<dyn Clock>,
    units: Units,
    /// The share-partitions, by `__share_group_state` partition.
    share: Units<ShareState>,
    /// Whether what the units hold is current and complete.
    readiness: Mutex<Readiness>,
    refreshed: RwLock<Refreshed>,
    derived: Mutex<Derived>,
    /// What every output shows: taken once per refresh.
    snapshot: RwLock<Arc<LagSnapshot>>,
}

/// Watermarks older than this are stale unless the service says otherwise.
pub const DEFAULT_STALE_AFTER: std::time::Duration = std::time::Duration::from_secs(15);

impl Monitor {
    /// An empty monitor whose watermarks are stale after [`DEFAULT_STALE_AFTER`].
    pub fn new(settings: MonitorSettings) -> Self {
        Self::with_stale_after(settings, DEFAULT_STALE_AFTER)
    }

    /// An empty monitor whose watermarks are stale after `stale_after`.
    pub fn with_stale_after(settings: MonitorSettings, stale_after: std::time::Duration) -> Self {
        Self::with_clock(settings, stale_after, Arc::new(SystemClock))
    }

    /// An empty monitor reading the time from `clock`.
    pub fn with_clock(settings: MonitorSettings, stale_after: std::time::Duration, clock: Arc<dyn Clock>) -> Self {
        let derived = Derived::new(settings.status, settings.history, Arc::clone(&settings.objectives), stale_after);
        Monitor {
            settings,
            clock,
            units: Units::default(),
            share: Units::default(),
            readiness: Mutex::new(Readiness::new(stale_after)),
            refreshed: RwLock::new(Refreshed::default()),
            derived: Mutex::new(derived),
            snapshot: RwLock::new(Arc::default()),
        }
    }

    /// The current instant, from the monitor's clock.
    pub fn now(&self) -> std::time::Instant {
        self.clock.now()
    }

    /// The monitor's wall clock, ms since the epoch.
    pub fn epoch_ms(&self) -> i64 {
        self.clock.epoch_ms()
    }

    /// The export settings.
    pub(crate) fn settings(&self) -> &MonitorSettings {
        &self.settings
    }

    /// The partition units and their counters.
    pub fn units(&self) -> &Units {
        &self.units
    }

    /// The share-state units (of `__share_group_state`) and their counters.
    pub fn share_units(&self) -> &Units<ShareState> {
        &self.share
    }

    /// The units of `log`, whatever they hold: its state, its positions
    /// and its counters.
    pub fn log(&self, log: Log) -> &dyn LogUnits {
        match log {
            Log::Offsets => &self.units,
            Log::ShareState => &self.share,
        }
    }

    // --- Readiness -------------------------------------------------------

    /// Feeds one event to the readiness state machine.
    pub(crate) fn step(&self, event: Event) {
        lock(&self.readiness).step(event);
    }

    /// `worker` failed with `failure` now; returns how many times in a row.
    pub(crate) fn worker_failed(&self, worker: &'static str, failure: crate::failure::Failure) -> u32 {
        let mut readiness = lock(&self.readiness);
        readiness.step(Event::WorkerFailed { worker, failure, at: self.clock.now() });
        readiness.failures(worker)
    }

    /// Every failure the workers met since the start, by worker and kind
    /// (`kshard_worker_failures_total`).
    pub(crate) fn failure_counts(&self) -> crate::failure::FailureCounts {
        lock(&self.readiness).health().failure_counts().clone()
    }

    /// The readiness state, brought up to the units' positions first. Applying
    /// a record only moves its unit's position; readiness reads the positions
    /// when asked, which keeps a second lock off the per-record path.
    fn readiness(&self) -> MutexGuard<'_, Readiness> {
        let mut readiness = lock(&self.readiness);
        let logs = [(Log::Offsets, self.units.positions()), (Log::ShareState, self.share.positions())];
        for (log, positions) in logs {
            for (partition, next) in positions {
                if let Some(next) = next {
                    readiness.step(Event::Position { log, partition, next });
                }
            }
        }
        readiness
    }

    /// Whether lag is current and complete now, and why not.
    pub fn verdict(&self) -> Verdict {
        self.readiness().verdict(self.clock.now())
    }

    /// True once caught up with `__consumer_offsets` and the watermarks were
    /// refreshed after that (latched), while no worker has failed and the
    /// watermarks are recent: then lag is exported as current.
    pub fn is_ready(&self) -> bool {
        self.verdict().ready
    }

    /// Why lag cannot be presented as current right now (a failed worker,
    /// stale watermarks, an overdue condition), or `None`.
    pub(crate) fn problem(&self) -> Option<String> {
        lock(&self.readiness).health().problem(self.clock.now())
    }

    /// How old the watermarks are (`None` before the first refresh).
    pub(crate) fn watermark_age(&self) -> Option<std::time::Duration> {
        lock(&self.readiness).health().watermark_age(self.clock.now())
    }

    /// The transient conditions that hold, with how long they have.
    pub(crate) fn conditions(&self) -> Vec<(String, std::time::Duration)> {
        lock(&self.readiness).health().conditions(self.clock.now())
    }

    /// `log` is read, and to be caught up with before lag is served.
    pub fn expect(&self, log: Log) {
        self.step(Event::Expected(log));
    }

    /// kshard may not read `log`: left out (see [`Event::Unreadable`]).
    pub(crate) fn log_unreadable(&self, log: Log, why: String) {
        self.step(Event::Unreadable(log, why));
    }

    /// Why `__share_group_state` is not read, when kshard may not read it.
    pub(crate) fn share_unreadable(&self) -> Option<String> {
        lock(&self.readiness).share_unreadable().map(str::to_owned)
    }

    /// Starts tracking a partition of `log` with its watermarks.
    pub fn track(&self, log: Log, partition: i32, low: i64, high: i64) {
        self.log(log).track(partition);
        self.step(Event::Tracked { log, partition, low, high });
    }

    /// True once the initial partitions are tracked ([`Monitor::start_log`] was called).
    pub(crate) fn is_started(&self) -> bool {
        lock(&self.readiness).is_started()
    }

    /// True once the initial partitions of `log` are tracked.
    pub(crate) fn is_log_started(&self, log: Log) -> bool {
        lock(&self.readiness).log(log).is_some_and(crate::CatchUp::is_started)
    }

    /// Ends the initial set of partitions of `log` (see [`crate::CatchUp::start`]).
    pub fn start_log(&self, log: Log) {
        self.readiness().step(Event::Started(log));
    }

    /// The log of `partition` was truncated under its reader at `was_at`,
    /// which reads it again from `from`: what was read of it is dropped, and
    /// `/ready` says so until the reader reaches the partition's end.
    pub(crate) fn rebuild(&self, log: Log, partition: i32, was_at: i64, from: i64) {
        self.log(log).clear(partition);
        self.step(Event::Rebuilding { log, partition, from, was_at, at: self.clock.now() });
    }

    /// The reader of `log` reached the end of `partition`.
    pub fn end_of(&self, log: Log, partition: i32, next_offset: Option<i64>) {
        if let Some(next) = next_offset {
            self.log(log).advance(partition, next);
        }
        self.step(Event::EndOfPartition { log, partition, next: next_offset });
    }

    /// True once every initial partition of `__consumer_offsets` was read to the
    /// high watermark it had at start (latched).
    pub fn is_caught_up(&self) -> bool {
        self.readiness().is_caught_up()
    }

    /// Where catching up stands.
    pub fn progress(&self) -> Progress {
        self.readiness().progress()
    }

    /// Where catching up with `log` stands, when it is read.
    pub fn progress_of(&self, log: Log) -> Option<Progress> {
        self.readiness().log(log).map(crate::CatchUp::progress)
    }

    /// Per-partition catch-up state, for `/ready`.
    pub(crate) fn partition_progress(&self) -> Vec<(i32, crate::catch_up::PartitionProgress)> {
        self.readiness().partitions().map(|(p, s)| (*p, s.clone())).collect()
    }

    // --- Records ---------------------------------------------------------

    /// Applies the record at `offset` of `partition`.
    pub fn apply(
        &self,
        partition: i32,
        offset: i64,
        key: Option<&[u8]>,
        value: Option<&[u8]>,
    ) -> Result<Applied, SkippedRecord> {
        self.units.apply_then(RecordAt { partition, offset, transactional: None, key, value }, |_| ()).0
    }

    /// Every share-partition exported, with its runs when `runs`.
    pub(crate) fn share_rows(&self, runs: bool) -> Vec<crate::ShareRow> {
        crate::share_rows::share_rows(&self.units, &self.share, &self.settings, runs)
    }

    /// Every topic some exported group has committed to or shares.
    pub(crate) fn committed_topics(&self) -> Vec<String> {
        let mut topics: std::collections::BTreeSet<String> =
            self.share_rows(false).into_iter().map(|r| r.topic.to_string()).collect();
        self.units.for_each(|_, unit| {
            for (group, g) in unit.groups() {
                if !self.settings.groups.allows(group) {
                    continue;
                }
                for topic in g.topics() {
                    if self.settings.topics.allows(topic) {
                        topics.insert(topic.to_string());
                    }
                }
            }
        });
        topics.into_iter().collect()
    }

    // --- What a refresh brings and derives -------------------------------

    fn refreshed(&self) -> std::sync::RwLockReadGuard<'_, Refreshed> {
        self.refreshed.read().unwrap_or_else(PoisonError::into_inner)
    }

    /// A refresh that began at `at` and found `watermarks`, without record
    /// times: [`Monitor::refresh`] with no reader of them.
    pub fn set_watermarks(&self, watermarks: Watermarks, caught_up_before: bool, at: std::time::Instant) {
        self.refresh(watermarks, caught_up_before, at, |_, _| {});
    }

    /// A refresh that began at `at` and found `watermarks`: they replace
    /// the last ones, the commits and watermarks are sampled
    /// ([`Monitor::sample`]), `read_times` is handed the record times
    /// wanted (it gives what it reads to [`Monitor::times_found`]), and the
    /// snapshot every output reads until the next refresh is taken
    /// ([`Monitor::take_snapshot`]). `caught_up_before` says whether the
    /// reader had caught up when it began (see [`Monitor::is_ready`]).
    pub fn refresh(
        &self,
        watermarks: Watermarks,
        caught_up_before: bool,
        at: std::time::Instant,
        read_times: impl FnOnce(&Monitor, &[TopicPartitionOffset]),
    ) {
        self.refreshed.write().unwrap_or_else(PoisonError::into_inner).watermarks = Arc::new(watermarks);
        // One pass over the share state, for the sample and the snapshot.
        let share = self.share_rows(false);
        let wanted = self.sample_with(&share);
        // The offsets just sampled: the record times wanted are theirs.
        self.store_snapshot(share);
        // Only now may /ready say the refresh is in: what it serves is this snapshot.
        self.step(Event::Refreshed { at, caught_up_before });
        read_times(self, &wanted);
        self.record_history();
    }

    /// Records what a refresh found of the offsets topic: the leader of each
    /// partition (the coordinator of its groups) and its high watermark.
    /// Readiness sees whether each partition's reader moved since, while
    /// records waited for it.
    pub(crate) fn set_offsets_topic(&self, leaders: HashMap<i32, i32>, ends: BTreeMap<i32, i64>) {
        let positions = self.units.positions().into_iter().collect();
        let at = self.clock.now();
        lock(&self.readiness).step(Event::Observed { at, ends: ends.clone(), positions });
        let mut refreshed = self.refreshed.write().unwrap_or_else(PoisonError::into_inner);
        refreshed.coordinators = leaders;
        refreshed.offsets_topic_ends = ends;
    }

    /// Whether stalled readers of the offsets topic hold `/ready` (only
    /// when kshard's own client reads: see `Readiness::watch_stalls`).
    pub(crate) fn watch_stalls(&self, watch: bool) {
        lock(&self.readiness).watch_stalls(watch);
    }

    /// The latest watermarks.
    pub fn watermarks(&self) -> Arc<Watermarks> {
        Arc::clone(&self.refreshed().watermarks)
    }

    /// The coordinator (leader of the `__consumer_offsets` partition) of the
    /// groups held by unit `partition`, when known.
    pub(crate) fn coordinator(&self, partition: i32) -> Option<i32> {
        self.refreshed().coordinators.get(&partition).copied()
    }

    /// For each partition of the offsets topic, the offsets between the reader's
    /// position and the high watermark of the last refresh: 0 at rest. kshard's
    /// reader reads past open transactions (their commits wait in the unit);
    /// a librdkafka reader reads committed records only, so there a
    /// transaction left open holds back every later commit of its partition
    /// until the broker aborts it, and this stays above 1 meanwhile.
    pub(crate) fn unread(&self) -> Vec<(i32, i64)> {
        let positions: BTreeMap<i32, Option<i64>> = self.units.positions().into_iter().collect();
        self.refreshed()
            .offsets_topic_ends
            .iter()
            .map(|(partition, end)| {
                let position = positions.get(partition).copied().flatten();
                (*partition, position.map_or(*end, |p| (end - p).max(0)))
            })
            .collect()
    }

    fn derived_lock(&self) -> MutexGuard<'_, Derived> {
        lock(&self.derived)
    }

    /// After a watermark refresh, in one pass over the units: each
    /// group-partition's commit goes into its window of recent commits, the
    /// high watermarks are sampled for lag-in-seconds estimates, and the
    /// (topic, partition, offset) of lagging group-partitions whose record
    /// time is to be read come back (for [`Monitor::times_found`]).
    pub fn sample(&self) -> Vec<TopicPartitionOffset> {
        self.sample_with(&self.share_rows(false))
    }

    /// [`Monitor::sample`] with the share rows of this refresh.
    fn sample_with(&self, share: &[crate::ShareRow]) -> Vec<TopicPartitionOffset> {
        let watermarks = self.watermarks();
        self.derived_lock().sample(&self.units, share, &self.settings, &watermarks, self.clock.epoch_ms())
    }

    /// Records read for [`Monitor::sample`]: (topic, partition, wanted
    /// offset) → (offset read, timestamp in ms).
    pub fn times_found(&self, found: impl IntoIterator<Item = (TopicPartitionOffset, (i64, i64))>) {
        self.derived_lock().times_found(found);
    }

    /// Offsets of [`Monitor::sample`] that were read and gave no record.
    pub(crate) fn times_not_found(&self, missing: impl IntoIterator<Item = TopicPartitionOffset>) {
        self.derived_lock().times_not_found(missing);
    }

    /// After a refresh and its record times: the snapshot every output
    /// reads until the next refresh (`Monitor::snapshot`), and, once ready,
    /// each group's total lag and highest lag in seconds into its history
    /// (groups gone are forgotten). [`Monitor::refresh`] takes it.
    pub fn take_snapshot(&self) {
        self.store_snapshot(self.share_rows(false));
        self.record_history();
    }

    /// The committed offsets, the group metadata and the watermarks every
    /// output reads until the next refresh.
    fn store_snapshot(&self, share: Vec<crate::ShareRow>) {
        let watermarks = self.watermarks();
        let snapshot = LagSnapshot::take(&self.units, share, &self.settings, watermarks, |p| self.coordinator(p));
        *self.snapshot.write().unwrap_or_else(PoisonError::into_inner) = Arc::new(snapshot);
    }

    /// Once ready: each group's lag in the snapshot into its history and
    /// its objectives' ledgers (which count nothing until the next refresh
    /// after one while not ready).
    fn record_history(&self) {
        if self.is_ready() {
            let (snapshot, now_ms) = (self.snapshot(), self.clock.epoch_ms());
            let mut derived = self.derived();
            let totals = snapshot.totals(&derived, now_ms);
            derived.record_history(totals, now_ms);
        } else {
            self.derived().pause_budgets();
        }
    }

    /// The bytes the last refresh's snapshot holds of its own (`kshard bench state`).
    pub fn snapshot_bytes(&self) -> usize {
        self.snapshot().heap_bytes()
    }

    /// The snapshot of the last refresh (empty before the first).
    pub(crate) fn snapshot(&self) -> Arc<LagSnapshot> {
        Arc::clone(&self.snapshot.read().unwrap_or_else(PoisonError::into_inner))
    }

    /// The groups that missed a lag objective, with the objectives' names.
    pub(crate) fn missed_objectives(&self) -> crate::names::FastMap<Arc<str>, Vec<String>> {
        self.derived_lock().missed_objectives(self.clock.epoch_ms())
    }

    /// A group's lag objectives as measured here (empty when none covers it).
    pub(crate) fn budgets(&self, group: &str) -> Vec<crate::objective_budget::BudgetView> {
        self.derived_lock().budgets(group, self.clock.epoch_ms())
    }

    /// A group's recent lag, oldest first, and the settings it was kept by.
    pub(crate) fn history(&self, group: &str) -> (Vec<LagPoint>, HistorySettings) {
        self.derived_lock().history(group)
    }

    /// Statuses by Burrow's rules and lag in seconds, as of now (holds what
    /// refreshes derive while it lives: take it once per pass).
    pub(crate) fn derived(&self) -> DerivedView<'_> {
        DerivedView::new(self.derived_lock(), self.clock.epoch_ms())
    }
}
