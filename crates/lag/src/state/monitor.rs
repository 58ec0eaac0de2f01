//! [`Monitor`]: the lag monitor's shared state — one [`GroupOffsets`] unit per
//! `__consumer_offsets` partition, catch-up tracking, the latest watermarks, and
//! counters. The reader applies records to it; metrics and the HTTP API read it;
//! what each watermark refresh derives from it (status windows, record times,
//! lag history) is in `monitor/refresh.rs`. No I/O happens here.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, RwLock};

use kshard_offsets::RecordType;

use crate::catch_up::Progress;
use crate::consumer_status::StatusSettings;
use crate::filter::NameFilter;
use crate::group_offsets::{Applied, GroupOffsets, Skipped};
use crate::lag_history::{HistorySettings, LagHistory};
use crate::lag_time::LagTimes;
use crate::readiness::{Event, Readiness, Verdict};
use crate::watermarks::Watermarks;

mod refresh;

use refresh::History;

/// Where the monitor's decisions read the time: the system's, or a test's.
pub trait Clock: Send + Sync + std::fmt::Debug {
    /// The current instant.
    fn now(&self) -> std::time::Instant;

    /// The wall-clock time, in ms since the epoch (commit times are on it).
    fn epoch_ms(&self) -> i64 {
        let since = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
        i64::try_from(since.as_millis()).unwrap_or(i64::MAX)
    }
}

/// The system's monotonic clock.
#[derive(Debug, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> std::time::Instant {
        std::time::Instant::now()
    }
}

/// Which lag series to export.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Granularity {
    /// Per partition and per topic.
    #[default]
    Partition,
    /// Per topic only.
    Topic,
}

/// What the monitor exports, fixed at start.
#[derive(Debug, Clone, Default)]
pub struct MonitorSettings {
    /// Groups to export.
    pub groups: NameFilter,
    /// Topics to export.
    pub topics: NameFilter,
    /// Partition or topic series.
    pub granularity: Granularity,
    /// How consumer status is judged.
    pub status: StatusSettings,
    /// How much of each group's lag history the page's chart gets.
    pub history: HistorySettings,
}

/// Counters of what the reader saw.
#[derive(Debug, Default)]
pub struct ReadCounters {
    /// Records read from `__consumer_offsets`.
    pub records: AtomicU64,
    /// Records skipped because the key was null.
    pub null_key: AtomicU64,
    /// Records skipped because the key did not decode.
    pub malformed_key: AtomicU64,
    /// Records skipped because the value did not decode.
    pub malformed_value: AtomicU64,
    /// Records of a type this version of kshard does not know.
    pub unknown_type: AtomicU64,
    /// Admin-API mode: groups whose OffsetFetch failed at a scrape (their
    /// previous offsets were kept).
    pub offset_fetch_errors: AtomicU64,
}

/// A record the monitor could not use, for the caller to log.
#[derive(Debug)]
pub struct SkippedRecord {
    /// The `__consumer_offsets` partition.
    pub partition: i32,
    /// The record's offset.
    pub offset: i64,
    /// Why it was skipped.
    pub skipped: Skipped,
}

/// The lag monitor's state.
#[derive(Debug)]
pub struct Monitor {
    settings: MonitorSettings,
    units: RwLock<BTreeMap<i32, Mutex<GroupOffsets>>>,
    /// Whether what the units hold is current and complete.
    readiness: Mutex<Readiness>,
    clock: Arc<dyn Clock>,
    watermarks: RwLock<Arc<Watermarks>>,
    counters: ReadCounters,
    /// The leader of each `__consumer_offsets` partition: the coordinator of
    /// the groups whose records it holds.
    coordinators: RwLock<std::collections::HashMap<i32, i32>>,
    /// Each group-partition's recent commits, for its status.
    history: Mutex<History>,
    /// Record times and high-watermark history, for lag in seconds.
    lag_times: Mutex<LagTimes>,
    /// Each group's recent lag, for the page's chart.
    lag_history: Mutex<LagHistory>,
    /// The high watermark of each partition of the offsets topic at the last
    /// refresh: how far the reader is from the end (see [`Monitor::unread`]).
    offsets_topic_ends: RwLock<std::collections::BTreeMap<i32, i64>>,
    /// With a data directory: the runtime member running the partitions'
    /// shards (their statuses and metrics).
    shards: Mutex<Option<(kshard_runtime::node::NodeShared, String)>>,
}

/// Watermarks older than this are stale unless the service says otherwise.
pub const DEFAULT_STALE_AFTER: std::time::Duration = std::time::Duration::from_secs(15);

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic while holding a lock leaves plain data behind; keep serving it.
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

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
        let status = settings.status;
        let history = settings.history;
        Monitor {
            settings,
            units: RwLock::new(BTreeMap::new()),
            readiness: Mutex::new(Readiness::new(stale_after)),
            clock,
            watermarks: RwLock::new(Arc::new(Watermarks::default())),
            counters: ReadCounters::default(),
            coordinators: RwLock::new(std::collections::HashMap::new()),
            history: Mutex::new(History { settings: status, ..History::default() }),
            lag_times: Mutex::new(LagTimes::default()),
            lag_history: Mutex::new(LagHistory::new(history)),
            offsets_topic_ends: RwLock::new(std::collections::BTreeMap::new()),
            shards: Mutex::new(None),
        }
    }

    /// Records the runtime member (what it shares, and its id) that runs the
    /// partitions' shards.
    pub fn set_shards(&self, shards: kshard_runtime::node::NodeShared, member: String) {
        *lock(&self.shards) = Some((shards, member));
    }

    /// The runtime member that runs the partitions' shards, with a data directory.
    pub fn shards(&self) -> Option<kshard_runtime::node::NodeShared> {
        lock(&self.shards).as_ref().map(|(s, _)| s.clone())
    }

    /// The id of the runtime member, with a data directory.
    pub fn member_id(&self) -> Option<String> {
        lock(&self.shards).as_ref().map(|(_, m)| m.clone())
    }

    /// The current instant, from the monitor's clock.
    pub fn now(&self) -> std::time::Instant {
        self.clock.now()
    }

    /// The monitor's wall clock, ms since the epoch.
    pub fn epoch_ms(&self) -> i64 {
        self.clock.epoch_ms()
    }

    /// Feeds one event to the readiness state machine.
    pub fn step(&self, event: Event) {
        lock(&self.readiness).step(event);
    }

    /// `worker` failed with `error` now; returns how many times in a row.
    pub fn worker_failed(&self, worker: &'static str, error: String) -> u32 {
        let mut readiness = lock(&self.readiness);
        readiness.step(Event::WorkerFailed { worker, error, at: self.clock.now() });
        readiness.failures(worker)
    }

    /// Whether lag is current and complete now, and why not.
    pub fn verdict(&self) -> Verdict {
        self.readiness().verdict(self.clock.now())
    }

    /// Why lag cannot be presented as current right now (a failed worker,
    /// stale watermarks, an overdue condition), or `None`.
    pub fn problem(&self) -> Option<String> {
        lock(&self.readiness).health().problem(self.clock.now())
    }

    /// How old the watermarks are (`None` before the first refresh).
    pub fn watermark_age(&self) -> Option<std::time::Duration> {
        lock(&self.readiness).health().watermark_age(self.clock.now())
    }

    /// How old watermarks may be before lag is stale.
    pub fn stale_after(&self) -> std::time::Duration {
        lock(&self.readiness).health().stale_after()
    }

    /// The transient conditions that hold, with how long they have.
    pub fn conditions(&self) -> Vec<(String, std::time::Duration)> {
        lock(&self.readiness).health().conditions(self.clock.now())
    }

    /// The export settings.
    pub fn settings(&self) -> &MonitorSettings {
        &self.settings
    }

    /// Starts tracking a `__consumer_offsets` partition with its watermarks.
    pub fn track_partition(&self, partition: i32, low: i64, high: i64) {
        self.units.write().unwrap_or_else(PoisonError::into_inner).entry(partition).or_default();
        self.step(Event::Tracked { partition, low, high });
    }

    /// The readiness state, brought up to the units' positions first. Applying
    /// a record only moves its unit's position; readiness reads the positions
    /// when asked, which keeps a second lock off the per-record path.
    fn readiness(&self) -> MutexGuard<'_, Readiness> {
        let mut readiness = lock(&self.readiness);
        let units = self.units.read().unwrap_or_else(PoisonError::into_inner);
        for (partition, unit) in units.iter() {
            if let Some(next) = lock(unit).next_offset() {
                readiness.step(Event::Position { partition: *partition, next });
            }
        }
        readiness
    }

    /// Where a reader should start each tracked partition to go on from what was
    /// applied: the next offset after the last record read, or `None` (the
    /// earliest offset) for a partition nothing was read from yet.
    pub fn resume_positions(&self) -> Vec<(i32, Option<i64>)> {
        let units = self.units.read().unwrap_or_else(PoisonError::into_inner);
        units.iter().map(|(partition, unit)| (*partition, lock(unit).next_offset())).collect()
    }

    /// True once the initial partitions are tracked ([`Monitor::start`] was called).
    pub fn is_started(&self) -> bool {
        lock(&self.readiness).is_started()
    }

    /// Ends the initial set of partitions (see [`crate::CatchUp::start`]).
    pub fn start(&self) {
        self.readiness().step(Event::Started);
    }

    /// Applies the record at `offset` of `partition`.
    pub fn apply(
        &self,
        partition: i32,
        offset: i64,
        key: Option<&[u8]>,
        value: Option<&[u8]>,
    ) -> Result<Applied, SkippedRecord> {
        self.apply_then(partition, offset, None, key, value, |_| ()).0
    }

    /// [`Monitor::apply`] of a record read with its part in a transaction
    /// (see [`GroupOffsets::apply_record`]), then `after` with the unit,
    /// under the same lock.
    pub fn apply_then<R>(
        &self,
        partition: i32,
        offset: i64,
        transactional: Option<crate::group_offsets::Transactional>,
        key: Option<&[u8]>,
        value: Option<&[u8]>,
        after: impl FnOnce(&GroupOffsets) -> R,
    ) -> (Result<Applied, SkippedRecord>, R) {
        self.counters.records.fetch_add(1, Ordering::Relaxed);
        let (result, then) = loop {
            let units = self.units.read().unwrap_or_else(PoisonError::into_inner);
            if let Some(unit) = units.get(&partition) {
                let mut unit = lock(unit);
                let result = unit.apply_record(offset, transactional, key, value);
                break (result, after(&unit));
            }
            drop(units);
            self.units.write().unwrap_or_else(PoisonError::into_inner).entry(partition).or_default();
        };
        (self.count(partition, offset, result), then)
    }

    fn count(&self, partition: i32, offset: i64, result: Result<Applied, Skipped>) -> Result<Applied, SkippedRecord> {
        match result {
            Ok(applied) => {
                if let Applied::Ignored(RecordType::Unknown(_)) = applied {
                    self.counters.unknown_type.fetch_add(1, Ordering::Relaxed);
                }
                Ok(applied)
            }
            Err(skipped) => {
                let counter = match skipped.reason() {
                    "null_key" => &self.counters.null_key,
                    "malformed_key" => &self.counters.malformed_key,
                    _ => &self.counters.malformed_value,
                };
                counter.fetch_add(1, Ordering::Relaxed);
                Err(SkippedRecord { partition, offset, skipped })
            }
        }
    }

    /// Changes the state of `partition` with `f` (creating it empty first).
    pub fn update_unit(&self, partition: i32, f: impl FnOnce(&mut GroupOffsets)) {
        loop {
            let units = self.units.read().unwrap_or_else(PoisonError::into_inner);
            if let Some(unit) = units.get(&partition) {
                f(&mut lock(unit));
                return;
            }
            drop(units);
            self.units.write().unwrap_or_else(PoisonError::into_inner).entry(partition).or_default();
        }
    }

    /// The next offset of `partition`'s unit, if it has read anything.
    pub fn unit_position(&self, partition: i32) -> Option<i64> {
        self.units.read().unwrap_or_else(PoisonError::into_inner).get(&partition).and_then(|u| lock(u).next_offset())
    }

    /// Replaces the state of `partition` wholesale (admin-API mode rebuilds its
    /// one unit at every scrape).
    pub fn replace_unit(&self, partition: i32, unit: GroupOffsets) {
        let mut units = self.units.write().unwrap_or_else(PoisonError::into_inner);
        units.insert(partition, Mutex::new(unit));
    }

    /// The reader reached the end of `partition`.
    pub fn end_of_partition(&self, partition: i32, next_offset: Option<i64>) {
        if let (Some(next), Some(unit)) =
            (next_offset, self.units.read().unwrap_or_else(PoisonError::into_inner).get(&partition))
        {
            lock(unit).advance_to(next);
        }
        self.step(Event::EndOfPartition { partition, next: next_offset });
    }

    /// Replaces the watermarks with those of a refresh that began at `at`.
    /// `caught_up_before` says whether the reader had caught up when it began
    /// (see [`Monitor::is_ready`]).
    pub fn set_watermarks(&self, watermarks: Watermarks, caught_up_before: bool, at: std::time::Instant) {
        *self.watermarks.write().unwrap_or_else(PoisonError::into_inner) = Arc::new(watermarks);
        self.step(Event::Refreshed { at, caught_up_before });
    }

    /// True once every initial partition of `__consumer_offsets` was read to the
    /// high watermark it had at start (latched).
    pub fn is_caught_up(&self) -> bool {
        self.readiness().is_caught_up()
    }

    /// Records the high watermarks of the offsets topic's partitions.
    pub fn set_offsets_topic_ends(&self, ends: std::collections::BTreeMap<i32, i64>) {
        *self.offsets_topic_ends.write().unwrap_or_else(PoisonError::into_inner) = ends;
    }

    /// For each partition read, the transactions open in it whose offset
    /// commits wait for their marker.
    pub fn open_transactions(&self) -> Vec<(i32, usize)> {
        let units = self.units.read().unwrap_or_else(PoisonError::into_inner);
        let mut open: Vec<(i32, usize)> = units.iter().map(|(p, u)| (*p, lock(u).open_transactions().len())).collect();
        open.sort_unstable();
        open
    }

    /// For each partition of the offsets topic, the offsets between the reader's
    /// position and the high watermark of the last refresh: 0 at rest. kshard's
    /// reader reads past open transactions (their commits wait in the unit);
    /// a librdkafka reader reads committed records only, so there a
    /// transaction left open holds back every later commit of its partition
    /// until the broker aborts it, and this stays above 1 meanwhile.
    pub fn unread(&self) -> Vec<(i32, i64)> {
        let ends = self.offsets_topic_ends.read().unwrap_or_else(PoisonError::into_inner);
        let units = self.units.read().unwrap_or_else(PoisonError::into_inner);
        ends.iter()
            .map(|(partition, end)| {
                let position = units.get(partition).and_then(|u| lock(u).next_offset());
                (*partition, position.map_or(*end, |p| (end - p).max(0)))
            })
            .collect()
    }

    /// Records the leaders of the `__consumer_offsets` partitions.
    pub fn set_coordinators(&self, leaders: std::collections::HashMap<i32, i32>) {
        *self.coordinators.write().unwrap_or_else(PoisonError::into_inner) = leaders;
    }

    /// The coordinator (leader of the `__consumer_offsets` partition) of the
    /// groups held by unit `partition`, when known.
    pub fn coordinator(&self, partition: i32) -> Option<i32> {
        self.coordinators.read().unwrap_or_else(PoisonError::into_inner).get(&partition).copied()
    }

    /// The latest watermarks.
    pub fn watermarks(&self) -> Arc<Watermarks> {
        Arc::clone(&self.watermarks.read().unwrap_or_else(PoisonError::into_inner))
    }

    /// True once caught up with `__consumer_offsets` and the watermarks were
    /// refreshed after that (latched), while no worker has failed and the
    /// watermarks are recent: then lag is exported as current.
    pub fn is_ready(&self) -> bool {
        self.verdict().ready
    }

    /// Where catching up stands.
    pub fn progress(&self) -> Progress {
        self.readiness().progress()
    }

    /// Per-partition catch-up state, for `/ready`.
    pub fn partition_progress(&self) -> Vec<(i32, crate::catch_up::PartitionProgress)> {
        self.readiness().partitions().map(|(p, s)| (*p, s.clone())).collect()
    }

    /// The read counters.
    pub fn counters(&self) -> &ReadCounters {
        &self.counters
    }

    /// Calls `f` with each unit in turn, holding its lock only during the call.
    pub fn for_each_unit(&self, mut f: impl FnMut(i32, &GroupOffsets)) {
        let units = self.units.read().unwrap_or_else(PoisonError::into_inner);
        for (partition, unit) in units.iter() {
            f(*partition, &lock(unit));
        }
    }

    /// Every topic some exported group has committed to.
    pub fn committed_topics(&self) -> Vec<String> {
        let mut topics = std::collections::BTreeSet::new();
        self.for_each_unit(|_, unit| {
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

    /// Drops interned names no longer used, in every unit.
    pub fn sweep_names(&self) -> usize {
        let units = self.units.read().unwrap_or_else(PoisonError::into_inner);
        units.values().map(|u| lock(u).sweep_names()).sum()
    }
}
