//! The watermark refresher: every interval, one refresh — in `admin_api`
//! mode first the groups and their offsets (ListGroups, DescribeGroups,
//! OffsetFetch); then one Metadata request, the growth of the offsets topic
//! handed to the reader, and batched ListOffsets for every partition of every
//! topic some exported group committed to; then what the monitor derives,
//! the record times lag in seconds wants, and a sweep of unused names. Each
//! step is a function of the brokers and the monitor; [`Schedule`] (pure)
//! decides when a refresh is due; [`Refresher::run`] calls them under the
//! supervisor, and [`scrape_once`] calls the admin-API ones once for `kshard
//! lag`. Each success or failure goes to readiness, so stale watermarks turn
//! `/ready` 503.

use super::error::WorkerError;
use kshard_kafka::TopicPartitionOffset;
use std::collections::{BTreeMap, BTreeSet, HashMap};

use std::sync::{Arc, PoisonError, mpsc};
use std::time::{Duration, Instant};

use kshard_kafka::{Client, TopicPartition};
use tracing::{debug, warn};

use crate::brokers::{BrokerAdmin, Connector, RecordTimes, ShareGroupAdmin};
use crate::catch_up::Log;
use crate::group_offsets::DescribedMember;
use crate::metrics::SelfTimings;
use crate::monitor::Monitor;
use crate::offsets_reader::track_range;
use crate::readiness::Event;
use crate::watermarks::{Watermark, Watermarks};

/// The worker's name in logs and on `/ready`.
pub(crate) const WORKER: &str = "watermark refresher";

/// Where group offsets come from (`offsets_topic` or `admin_api` in a
/// configuration file).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Deserialize, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ScrapeMode {
    /// Read the offsets topic (the default: fast, complete, with metadata).
    #[default]
    OffsetsTopic,
    /// Ask the brokers (ListGroups, OffsetFetch) at every refresh, for clusters
    /// whose `__consumer_offsets` cannot be read. Ready after the first scrape.
    AdminApi,
}

/// When refreshes are due: on schedule, and at once when catch-up completes
/// (after a failure, at most every second), so that readiness waits for
/// watermarks no older than the catch-up, and no longer.
#[derive(Debug, Clone)]
pub(crate) struct Schedule {
    interval: Duration,
    next: Instant,
    refreshed_since_catch_up: bool,
    last_failure: Option<Instant>,
}

impl Schedule {
    /// A schedule whose first refresh is due at `now`.
    pub(crate) fn new(interval: Duration, now: Instant) -> Self {
        Schedule { interval, next: now, refreshed_since_catch_up: false, last_failure: None }
    }

    /// Whether a refresh is due at `now`, the reader `caught_up` or not.
    pub(crate) fn due(&self, now: Instant, caught_up: bool) -> bool {
        let retry = self.last_failure.is_none_or(|t| now.saturating_duration_since(t) >= Duration::from_secs(1));
        now >= self.next || (caught_up && !self.refreshed_since_catch_up && retry)
    }

    /// A refresh that began at `started` (the reader `caught_up` then) ended,
    /// well or not.
    pub(crate) fn finished(&mut self, started: Instant, caught_up: bool, succeeded: bool) {
        if succeeded {
            self.refreshed_since_catch_up |= caught_up;
        } else {
            self.last_failure = Some(started);
        }
        self.next = started + self.interval;
    }

    /// How long to sleep at `now` before asking again: until the refresh that
    /// follows catch-up, catch-up is looked for often; then the next refresh
    /// is slept for, in steps of at most 250 ms.
    pub(crate) fn wait(&self, now: Instant, caught_up: bool) -> Duration {
        if caught_up && self.refreshed_since_catch_up {
            self.next.saturating_duration_since(now).clamp(Duration::from_millis(10), Duration::from_millis(250))
        } else {
            Duration::from_millis(50)
        }
    }
}

pub(crate) struct Refresher {
    pub(crate) kafka: Client,
    pub(crate) offsets_topic: String,
    pub(crate) mode: ScrapeMode,
    pub(crate) interval: Duration,
    pub(crate) monitor: Arc<Monitor>,
    pub(crate) timings: Arc<SelfTimings>,
    pub(crate) shutdown: crate::shutdown::Shutdown,
    pub(crate) new_partitions: mpsc::Sender<Vec<i32>>,
    /// When `__share_group_state` is read: its partitions that appear (the
    /// topic itself appears with the first share group), for its reader.
    pub(crate) new_share_partitions: Option<mpsc::Sender<Vec<i32>>>,
    /// Makes the Kafka clients.
    pub(crate) brokers: Arc<dyn Connector>,
}

impl Refresher {
    /// One life of the worker: until `stop` (`Ok`) or a failure (`Err`).
    pub(crate) fn run(&mut self) -> Result<(), WorkerError> {
        let admin = self.brokers.admin()?;
        let times = self.brokers.timestamps()?;
        let share = if self.mode == ScrapeMode::AdminApi { self.brokers.share_admin()? } else { None };
        let mut schedule = Schedule::new(self.interval, Instant::now());
        while !self.shutdown.is_set() {
            let caught_up = self.monitor.is_caught_up();
            if schedule.due(Instant::now(), caught_up) {
                let started = Instant::now();
                // The monitor's clock, which its readiness decisions read.
                let refreshed_at = self.monitor.now();
                let result = self.refresh(&*admin, share.as_deref()).map(|refreshed| {
                    publish(&self.monitor, &*times, refreshed, caught_up, refreshed_at);
                    self.monitor.step(Event::WorkerRunning(WORKER));
                });
                match &result {
                    Ok(()) => {
                        self.kafka.clear_access_problem();
                        *self.timings.watermark_refresh.lock().unwrap_or_else(PoisonError::into_inner) =
                            Some(started.elapsed());
                    }
                    Err(e) => {
                        let failure = e.failure_on(&self.kafka);
                        warn!(error = %failure.error, kind = failure.kind.label(), "refreshing groups and watermarks");
                        self.monitor.step(Event::RefreshFailed { worker: WORKER, failure });
                    }
                }
                schedule.finished(started, caught_up, result.is_ok());
            }
            self.shutdown.sleep(schedule.wait(Instant::now(), caught_up));
        }
        Ok(())
    }

    /// One refresh's reads of the brokers, in order: the groups (admin-API
    /// mode), the topics, the offsets topic's growth, the watermarks.
    fn refresh(&self, admin: &dyn BrokerAdmin, share: Option<&dyn ShareGroupAdmin>) -> Result<Refreshed, WorkerError> {
        if self.mode == ScrapeMode::AdminApi {
            scrape_groups(admin, share, &self.monitor)?;
        }
        let topics = admin.topics()?;
        // Growth of the offsets topic is the reader's to handle once it tracks
        // the topic; before that, the reader's own start-up tracks every partition.
        let offsets_topic = topics
            .get(&self.offsets_topic)
            .filter(|_| self.mode == ScrapeMode::OffsetsTopic && self.monitor.is_started())
            .map(|&count| (self.offsets_topic.as_str(), count));
        let leaders = match offsets_topic {
            Some((topic, count)) => {
                grow(admin, &self.monitor, Log::Offsets, topic, count, &self.new_partitions)?;
                admin.leaders(topic)?
            }
            None => HashMap::new(),
        };
        if let Some(new_share_partitions) = &self.new_share_partitions
            && self.monitor.is_log_started(Log::ShareState)
            && let Some(&count) = topics.get(Log::ShareState.topic())
        {
            grow(admin, &self.monitor, Log::ShareState, Log::ShareState.topic(), count, new_share_partitions)?;
        }
        let (watermarks, ends) = fetch_watermarks(admin, &self.monitor, &topics, offsets_topic)?;
        Ok(Refreshed { watermarks, leaders, ends })
    }
}

/// What one refresh read of the brokers.
#[derive(Debug)]
pub(crate) struct Refreshed {
    /// Of every partition of every topic some exported group committed to.
    pub(crate) watermarks: Watermarks,
    /// The leader of each partition of the offsets topic (once tracked).
    pub(crate) leaders: HashMap<i32, i32>,
    /// The high watermark of each partition of the offsets topic (once tracked).
    pub(crate) ends: BTreeMap<i32, i64>,
}

/// `topic`, read as `log`, has `count` partitions now: those beyond the ones
/// tracked are tracked and handed to its reader.
fn grow(
    admin: &dyn BrokerAdmin,
    monitor: &Monitor,
    log: Log,
    topic: &str,
    count: i32,
    new_partitions: &mpsc::Sender<Vec<i32>>,
) -> Result<(), WorkerError> {
    let known = monitor.progress_of(log).map_or(0, |p| p.partitions) as i32;
    if count > known {
        track_range(admin, monitor, log, topic, known..count)?;
        // The reader has gone when this fails, and is stopping anyway.
        let _ = new_partitions.send((known..count).collect());
    }
    Ok(())
}

/// The earliest and latest offsets of every partition of every topic some
/// group committed to (of every topic the filter allows, with
/// `every_topic_watermarks`) (ListOffsets, batched per leader), and in the
/// same requests the ends of `offsets_topic` (its name and partition
/// count), when given: how far the reader is.
fn fetch_watermarks(
    admin: &dyn BrokerAdmin,
    monitor: &Monitor,
    topics: &HashMap<String, i32>,
    offsets_topic: Option<(&str, i32)>,
) -> Result<(Watermarks, BTreeMap<i32, i64>), WorkerError> {
    let committed: BTreeSet<String> = monitor.committed_topics().into_iter().collect();
    let settings = monitor.settings();
    let every = settings.every_topic_watermarks;
    let shown = |topic: &str| committed.contains(topic) || (every && settings.topics.allows(topic));
    let partitions_of = |names: &mut dyn Iterator<Item = &String>| -> Vec<TopicPartition> {
        names
            .filter_map(|t| topics.get(t).map(|&n| (t.clone(), n)))
            .flat_map(|(t, n)| (0..n).map(move |p| TopicPartition::new(t.clone(), p)))
            .collect()
    };
    let mut wanted = partitions_of(&mut committed.iter());
    // Asked once, when it is also shown.
    if let Some((topic, count)) = offsets_topic
        && !committed.contains(topic)
    {
        wanted.extend((0..count).map(|p| TopicPartition::new(topic, p)));
    }
    let mut watermarks = Watermarks::default();
    let mut ends = BTreeMap::new();
    for (TopicPartition { topic, partition }, (low, high)) in admin.watermarks(&wanted)? {
        if offsets_topic.is_some_and(|(t, _)| t == topic) {
            ends.insert(partition, high);
        }
        if shown(&topic) {
            watermarks.insert(&topic, partition, Watermark { low, high });
        }
    }
    // Every other topic the filter allows (the kafka_exporter profile's):
    // asked apart, so that a partition without a leader on a topic nobody
    // reads costs those series, never the lag's refresh.
    if every {
        let offsets = offsets_topic.map(|(t, _)| t);
        let mut others = topics
            .keys()
            .filter(|t| !committed.contains(*t) && Some(t.as_str()) != offsets && settings.topics.allows(t));
        let others = partitions_of(&mut others);
        match admin.watermarks(&others) {
            Ok(answered) => {
                for (TopicPartition { topic, partition }, (low, high)) in answered {
                    watermarks.insert(&topic, partition, Watermark { low, high });
                }
            }
            Err(e) => {
                warn!(error = %e, partitions = others.len(), "the watermarks of topics no group reads; left out this time")
            }
        }
    }
    debug!(partitions = watermarks.partition_count(), "watermarks refreshed");
    Ok((watermarks, ends))
}

/// Hands a refresh that began at `at` (the reader `caught_up` then or not)
/// to the monitor, then what follows from it: the commit windows and record
/// times derived, the record times read, the lag history (once ready: lag
/// before catch-up is not lag) and a sweep of names of deleted groups and
/// topics (otherwise kept for the life of the process).
fn publish(monitor: &Monitor, times: &dyn RecordTimes, refreshed: Refreshed, caught_up: bool, at: Instant) {
    monitor.set_offsets_topic(refreshed.leaders, refreshed.ends);
    monitor.refresh(refreshed.watermarks, caught_up, at, |monitor, wanted| read_times(times, monitor, wanted));
    monitor.units().sweep_names();
}

/// Reads the records at the committed offsets of lagging groups whose times
/// are not known yet (`wanted`, from [`Monitor::sample`]): at most half a second a
/// round. A failure only leaves those to estimates until the next refresh.
fn read_times(times: &dyn RecordTimes, monitor: &Monitor, wanted: &[TopicPartitionOffset]) {
    if wanted.is_empty() {
        return;
    }
    match times.read(wanted, Duration::from_millis(500)) {
        Ok(read) => {
            monitor.times_found(read.found.into_iter().map(|(k, t)| (k, (t.offset, t.timestamp_ms))));
            monitor.times_not_found(read.empty);
        }
        Err(e) => warn!(error = %e, records = wanted.len(), "reading the timestamps of records at committed offsets"),
    }
}

/// One scrape as `scrape_mode: admin_api` makes at each refresh — groups and
/// offsets (ListGroups, DescribeGroups, OffsetFetch), then the watermarks of
/// the topics they committed to — into `monitor`, which is then ready. What
/// `kshard lag` answers from.
pub(crate) fn scrape_once(
    brokers: Arc<dyn Connector>,
    kafka: &Client,
    monitor: &Arc<Monitor>,
) -> Result<(), WorkerError> {
    let admin = brokers.checked_admin().map_err(|e| WorkerError::kafka(kafka, e))?;
    let share = brokers.share_admin()?;
    scrape_groups(&*admin, share.as_deref(), monitor)?;
    let (watermarks, _) = fetch_watermarks(&*admin, monitor, &admin.topics()?, None)?;
    monitor.start_log(Log::Offsets);
    let times = brokers.timestamps()?;
    monitor.refresh(watermarks, true, monitor.now(), |monitor, wanted| read_times(&*times, monitor, wanted));
    Ok(())
}

/// Admin-API mode: every group (ListGroups), the state and members of those
/// with members (DescribeGroups) and every group's committed offsets
/// (OffsetFetch), and the share groups with `share`'s calls, replacing the
/// monitor's one unit of state (and of share state).
fn scrape_groups(
    admin: &dyn BrokerAdmin,
    share: Option<&dyn ShareGroupAdmin>,
    monitor: &Monitor,
) -> Result<(), kshard_kafka::Error> {
    let share_groups = share.map(|s| crate::share_scrape::listed(s, monitor)).transpose()?.unwrap_or_default();
    let share_names = crate::share_scrape::names(&share_groups);
    let listings = admin.list_groups()?;
    let exported = |g: &str| monitor.settings().groups.allows(g) && !share_names.contains(g);
    let ids: Vec<String> = listings.iter().map(|g| g.group_id.clone()).filter(|g| exported(g)).collect();
    let offsets = admin.group_offsets(&ids)?;
    let mut unit = crate::group_offsets::ReportedGroups::default();
    let mut to_describe = Vec::new();
    for listing in listings.iter().filter(|g| exported(&g.group_id)) {
        if listing.simple {
            unit.set_reported_state(&listing.group_id, "", &listing.state);
        } else {
            unit.set_reported_state(&listing.group_id, "consumer", &listing.state);
            to_describe.push(listing.group_id.clone());
        }
    }
    // Members and the state DescribeGroups reports; a group it cannot describe
    // keeps its listing's state, without members.
    match admin.describe_groups(&to_describe) {
        Ok(descriptions) => {
            for d in descriptions {
                if let Some(error) = &d.error {
                    warn!(group = %d.group_id, %error, "describing a group");
                    continue;
                }
                let members: Vec<_> = d
                    .members
                    .iter()
                    .map(|m| DescribedMember {
                        member_id: &m.member_id,
                        instance: m.group_instance_id.as_deref(),
                        client_id: &m.client_id,
                        host: &m.host,
                        assigned: &m.assignment,
                    })
                    .collect();
                unit.set_described(&d.group_id, "consumer", &d.assignor, &d.state, &members);
            }
        }
        Err(e) => warn!(error = %e, "describing groups"),
    }
    for group in offsets {
        if let Some(error) = &group.error {
            // Keep what the last scrape knew rather than let the group vanish
            // and come back.
            warn!(group = %group.group_id, %error, "fetching a group's offsets; keeping its previous offsets");
            monitor.units().counters().offset_fetch_errors.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            monitor.units().for_each(|_, previous| {
                if let Some(g) = previous.group(&group.group_id) {
                    for (topic, partition, committed) in g.offsets() {
                        unit.set_committed(&group.group_id, topic, partition, committed.offset);
                    }
                }
            });
            continue;
        }
        for (topic, partition, offset) in &group.offsets {
            unit.set_committed(&group.group_id, topic, *partition, *offset);
        }
    }
    debug!(groups = ids.len(), "groups scraped");
    if let Some(share) = share {
        crate::share_scrape::scrape(share, monitor, &share_groups, &mut unit)?;
    }
    monitor.units().replace(0, unit.into_unit());
    Ok(())
}

#[cfg(test)]
mod tests;
