//! The offsets reader: tracks every partition of the offsets topic with the
//! watermarks it has at start (waiting, not ready, while the brokers cannot be
//! reached or the topic does not exist yet — Kafka creates `__consumer_offsets`
//! when the first group commits), then reads every partition and applies each
//! record to its unit. Run under the supervisor: after a failure it resumes from
//! the positions the units reached.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use kshard_kafka::{Admin, ClientSettings, PartitionReader, ReadEvent};
use tracing::{debug, info, warn};

use crate::monitor::Monitor;

/// The worker's name in logs and on `/ready`.
pub(crate) const WORKER: &str = "offsets reader";

/// How long to wait before asking again for a topic that is not there yet.
const RETRY: Duration = Duration::from_secs(5);

pub(crate) struct OffsetsReader {
    pub(crate) settings: ClientSettings,
    pub(crate) topic: String,
    pub(crate) timeout: Duration,
    pub(crate) monitor: Arc<Monitor>,
    pub(crate) stop: Arc<AtomicBool>,
    /// Partitions of the topic that appeared later, from the refresher.
    pub(crate) new_partitions: mpsc::Receiver<Vec<i32>>,
    pub(crate) hold: Option<tokio::sync::oneshot::Receiver<()>>,
    /// Where durable shards keep their stores; `None`: read directly, keep
    /// nothing.
    pub(crate) data_dir: Option<std::path::PathBuf>,
    /// With `data_dir`: the members to share the shards with.
    pub(crate) cluster: Option<crate::shards_reader::ClusterOptions>,
    /// With `data_dir`: the recovery logs' topic.
    pub(crate) log_topic: String,
}

/// Tracks `partitions` of `topic` with their current watermarks; returns how
/// many offsets they hold. Fails when the brokers gave no watermarks for one of
/// them (a broker loading its partitions answers so): such a partition is not
/// known to be empty, and must not count as caught up.
pub(crate) fn track_range(
    admin: &Admin,
    monitor: &Monitor,
    topic: &str,
    partitions: std::ops::Range<i32>,
) -> Result<i64, String> {
    let keys: Vec<(String, i32)> = partitions.map(|p| (topic.to_owned(), p)).collect();
    let watermarks = admin.watermarks(&keys).map_err(|e| e.to_string())?;
    let missing: Vec<i32> = keys.iter().filter(|k| !watermarks.contains_key(*k)).map(|k| k.1).collect();
    if !missing.is_empty() {
        return Err(format!("no watermarks yet for partitions {missing:?} of {topic}"));
    }
    let mut total = 0;
    for key in keys {
        let (low, high) = watermarks[&key];
        total += (high - low).max(0);
        monitor.track_partition(key.1, low, high);
    }
    Ok(total)
}

impl OffsetsReader {
    /// One life of the worker: until `stop` (`Ok`) or a failure (`Err`).
    pub(crate) fn run(&mut self) -> Result<(), String> {
        if !self.monitor.is_started() && !self.wait_for_topic() {
            return Ok(());
        }
        if let Some(hold) = self.hold.take() {
            // A dropped sender releases the hold too.
            let _ = hold.blocking_recv();
        }
        if let Some(dir) = self.data_dir.clone() {
            return crate::shards_reader::run(self, &dir);
        }
        let start = self.monitor.resume_positions();
        let reader = PartitionReader::new(&self.settings, &self.topic, &start).map_err(|e| e.to_string())?;
        let assigned = start.iter().map(|(p, _)| *p).collect();
        self.read(&reader, assigned)
    }

    /// Tracks the topic's partitions, retrying until it works; false when the
    /// service stops first.
    fn wait_for_topic(&self) -> bool {
        loop {
            match self.track_all() {
                Ok(()) => {
                    self.settings.clear_access_problem();
                    return true;
                }
                Err(e) => {
                    let reason = self.settings.with_access_problem(e);
                    warn!(error = %reason, topic = %self.topic, "cannot track the offsets topic yet; retrying in 5 s (not ready)");
                    self.monitor.set_waiting_reason(Some(reason));
                }
            }
            let retry_at = Instant::now() + RETRY;
            while Instant::now() < retry_at {
                if self.stop.load(Ordering::Acquire) {
                    return false;
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        }
    }

    fn track_all(&self) -> Result<(), String> {
        let admin = Admin::connect(&self.settings, self.timeout).map_err(|e| e.to_string())?;
        let count = admin
            .partition_count(&self.topic)
            .map_err(|e| e.to_string())?
            .ok_or_else(|| format!("{} does not exist on {} (yet)", self.topic, self.settings.brokers))?;
        let total = track_range(&admin, &self.monitor, &self.topic, 0..count)?;
        self.monitor.set_waiting_reason(None);
        self.monitor.start();
        info!(partitions = count, offsets = total, topic = %self.topic, "catching up with the offsets topic");
        Ok(())
    }

    /// A record or the end of a partition arrived: this life of the worker
    /// works, and reading no longer fails.
    fn showed_progress(&self, progressed: &mut bool, failing_since: &mut Option<Instant>) {
        *failing_since = None;
        if !*progressed {
            *progressed = true;
            self.monitor.health().worker_running(WORKER);
        }
    }

    /// Reads until `stop`. `assigned` are the partitions the reader was created
    /// with; the refresher may announce some of them again after a restart.
    fn read(&self, reader: &PartitionReader, mut assigned: std::collections::BTreeSet<i32>) -> Result<(), String> {
        let started = Instant::now();
        let mut last_log = Instant::now();
        let mut records_at_last_log = self.monitor.counters().records.load(Ordering::Relaxed);
        let mut announced_ready = self.monitor.is_caught_up();
        let mut events = 0u64;
        // Progress (a record or the end of a partition) tells the supervisor this
        // life works; errors that persist past the staleness limit end it.
        let mut progressed = false;
        let mut failing_since: Option<Instant> = None;
        while !self.stop.load(Ordering::Acquire) {
            while let Ok(mut added) = self.new_partitions.try_recv() {
                added.retain(|p| assigned.insert(*p));
                if added.is_empty() {
                    continue;
                }
                let start: Vec<(i32, Option<i64>)> = added.iter().map(|p| (*p, None)).collect();
                reader.add_partitions(&self.topic, &start).map_err(|e| e.to_string())?;
                info!(partitions = ?added, topic = %self.topic, "reading new partitions of the offsets topic");
            }
            // `idle`: nothing arrived, a good moment to check readiness and progress.
            let idle = match reader.poll(Duration::from_millis(100)) {
                Ok(ReadEvent::Record(r)) => {
                    if !progressed || failing_since.is_some() {
                        self.showed_progress(&mut progressed, &mut failing_since);
                    }
                    if let Err(s) = self.monitor.apply(r.partition(), r.offset(), r.key(), r.value()) {
                        warn!(
                            partition = s.partition,
                            offset = s.offset,
                            reason = s.skipped.reason(),
                            error = %s.skipped,
                            topic = %self.topic,
                            "skipped a record of the offsets topic"
                        );
                    }
                    false
                }
                Ok(ReadEvent::EndOfPartition { partition, next_offset }) => {
                    self.showed_progress(&mut progressed, &mut failing_since);
                    debug!(partition, next_offset, "end of partition");
                    self.monitor.end_of_partition(partition, next_offset);
                    false
                }
                Ok(ReadEvent::Idle) => true,
                Err(e) if e.is_authorization() => {
                    return Err(format!(
                        "reading {}: {e}; this principal needs Describe and Read on {} — or use scrape_mode: admin_api, which needs neither",
                        self.topic, self.topic
                    ));
                }
                Err(e) => {
                    let since = *failing_since.get_or_insert_with(Instant::now);
                    if since.elapsed() > self.monitor.health().stale_after() {
                        return Err(format!(
                            "reading {} has failed for {:.0} s: {e}",
                            self.topic,
                            since.elapsed().as_secs_f64()
                        ));
                    }
                    warn!(error = %e, topic = %self.topic, "reading the offsets topic; the client retries");
                    std::thread::sleep(Duration::from_millis(200));
                    true
                }
            };
            // Readiness and progress are checked every 1024 events, not per
            // record: a clock read per record is a measurable share of the CPU.
            events += 1;
            if announced_ready || !(events.is_multiple_of(1024) || idle) {
                continue;
            }
            if self.monitor.is_caught_up() {
                announced_ready = true;
                let records = self.monitor.counters().records.load(Ordering::Relaxed);
                let secs = started.elapsed().as_secs_f64();
                info!(records, seconds = secs, rate = records as f64 / secs.max(1e-9), "caught up");
            } else if last_log.elapsed() >= RETRY {
                let p = self.monitor.progress();
                let records = self.monitor.counters().records.load(Ordering::Relaxed);
                let rate = records.saturating_sub(records_at_last_log) as f64 / last_log.elapsed().as_secs_f64();
                let eta = if rate > 0.0 { p.offsets_remaining as f64 / rate } else { f64::INFINITY };
                info!(
                    records,
                    rate = rate.round(),
                    percent = format!("{:.1}", p.percent),
                    partitions_caught_up = p.partitions_caught_up,
                    partitions = p.partitions,
                    eta_seconds = eta.round(),
                    "catching up"
                );
                last_log = Instant::now();
                records_at_last_log = records;
            }
        }
        Ok(())
    }
}
