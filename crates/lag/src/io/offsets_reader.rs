//! The offsets reader: tracks every partition of the offsets topic with the
//! watermarks it has at start (waiting, not ready, while the brokers cannot be
//! reached or the topic does not exist yet — Kafka creates `__consumer_offsets`
//! when the first group commits), asks once whether it may read the topic,
//! then reads every partition through a shard of the runtime
//! ([`crate::shards_reader`]) that applies each record to its unit. Run under
//! the supervisor: after a failure it goes on from the shards' stores.
//!
//! The same reader reads `__share_group_state` ([`Log::ShareState`]) into the
//! share units. That topic exists only once a share group has: when it is not
//! there at start, there is nothing to catch up with, and the refresher hands
//! its partitions over when it appears.

use super::error::WorkerError;
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use kshard_kafka::{Client, TopicPartition};
use tracing::{debug, info, warn};

use crate::brokers::{BrokerAdmin, Connector, SourceEvent};
use crate::catch_up::Log;
use crate::monitor::Monitor;
use crate::readiness::Event;
use crate::shutdown::Shutdown;

/// The worker's name in logs and on `/ready`.
pub(crate) const WORKER: &str = "offsets reader";

/// The share-state reader's name in logs and on `/ready`.
pub(crate) const SHARE_WORKER: &str = "share-state reader";

/// The name of the worker that reads `log`.
pub(crate) fn worker(log: Log) -> &'static str {
    match log {
        Log::Offsets => WORKER,
        Log::ShareState => SHARE_WORKER,
    }
}

/// How long to wait before asking again for a topic that is not there yet.
const RETRY: Duration = Duration::from_secs(5);

#[derive(Clone)]
pub(crate) struct OffsetsReader {
    pub(crate) kafka: Client,
    /// Which log it reads.
    pub(crate) log: Log,
    pub(crate) topic: String,
    pub(crate) timeout: Duration,
    pub(crate) monitor: Arc<Monitor>,
    pub(crate) shutdown: Shutdown,
    /// Partitions of the topic that appeared later, from the refresher
    /// (taken by each life's partition grower in turn).
    pub(crate) new_partitions: Arc<Mutex<mpsc::Receiver<Vec<i32>>>>,
    /// The shards it reads through, and where they keep their stores.
    pub(crate) shards: crate::shards_reader::Shards,
    /// Makes the Kafka clients.
    pub(crate) brokers: Arc<dyn Connector>,
}

/// Whether the brokers refuse to let kshard read `topic`, asked by one read
/// of the partition `first` (from its offset) for up to `timeout`: the
/// refusal, if they do.
pub(crate) fn refusal(
    brokers: &dyn Connector,
    topic: &str,
    first: (i32, Option<i64>),
    timeout: Duration,
    shutdown: &Shutdown,
) -> Result<Option<kshard_kafka::Error>, WorkerError> {
    let mut reader = brokers.reader(topic, &[first])?;
    let deadline = Instant::now() + timeout;
    let mut answered = false;
    while !answered && Instant::now() < deadline && !shutdown.is_set() {
        let polled = reader.poll(Duration::from_millis(250), &mut |event| {
            answered |= !matches!(event, SourceEvent::Idle);
        });
        match polled {
            Ok(()) => {}
            Err(e) if e.is_authorization() => return Ok(Some(e)),
            Err(e) => debug!(error = %e, topic, "asking whether the topic may be read; the client retries"),
        }
    }
    Ok(None)
}

/// Share groups' progress is left out, said, rather than the whole service
/// kept from ready: kshard may not read `topic` (the ACLs of kshard before
/// share groups grant Read on `__consumer_offsets` only).
pub(crate) fn share_state_unreadable(monitor: &Monitor, topic: &str, e: &kshard_kafka::Error) {
    let why = format!(
        "kshard may not Read {topic}: share groups' progress (their lag) is left out; grant Read on the topic and restart kshard"
    );
    warn!(error = %e, topic, "{why}");
    monitor.log_unreadable(Log::ShareState, why);
    monitor.step(Event::WorkerRunning(worker(Log::ShareState)));
}

/// Tracks `partitions` of `topic` (read as `log`) with their current
/// watermarks; returns how many offsets they hold. Fails when the brokers gave
/// no watermarks for one of them (a broker loading its partitions answers so):
/// such a partition is not known to be empty, and must not count as caught up.
pub(crate) fn track_range(
    admin: &dyn BrokerAdmin,
    monitor: &Monitor,
    log: Log,
    topic: &str,
    partitions: std::ops::Range<i32>,
) -> Result<i64, WorkerError> {
    let keys: Vec<TopicPartition> = partitions.map(|p| TopicPartition::new(topic, p)).collect();
    let watermarks = admin.watermarks(&keys)?;
    let missing: Vec<i32> = keys.iter().filter(|k| !watermarks.contains_key(*k)).map(|k| k.partition).collect();
    if !missing.is_empty() {
        return Err(WorkerError::NoWatermarks { topic: topic.to_owned(), partitions: missing });
    }
    let mut total = 0;
    for key in keys {
        let (low, high) = watermarks[&key];
        total += (high - low).max(0);
        monitor.track(log, key.partition, low, high);
    }
    Ok(total)
}

impl OffsetsReader {
    /// One life of the worker: until the shutdown (`Ok`) or a failure (`Err`).
    pub(crate) async fn run(self) -> Result<(), WorkerError> {
        let asked = self.clone();
        let readable = tokio::task::spawn_blocking(move || {
            if !asked.monitor.is_log_started(asked.log) && !asked.wait_for_topic() {
                return Ok(false);
            }
            asked.may_read()
        })
        .await
        .map_err(|_| WorkerError::Panicked("asking whether the topic may be read panicked".into()))?;
        if !readable? {
            // Shut down, or the share state left out until then.
            self.shutdown.wait().await;
            return Ok(());
        }
        crate::shards_reader::run(&self).await
    }

    /// Whether kshard may read the topic, asked by one read of one partition
    /// before the shards start (a shard refused would fail again at every
    /// restart, saying less). When it may not read the offsets topic, the
    /// worker fails naming the rights it needs; the share state's is left out,
    /// said, until the service stops (`false`).
    fn may_read(&self) -> Result<bool, WorkerError> {
        let start = self.monitor.positions(self.log);
        let Some(first) = start.first() else { return Ok(true) };
        match refusal(&*self.brokers, &self.topic, *first, self.timeout, &self.shutdown)? {
            Some(e) => self.denied(e),
            None => Ok(true),
        }
    }

    /// The brokers refused to let kshard read the topic (`e`).
    fn denied(&self, e: kshard_kafka::Error) -> Result<bool, WorkerError> {
        if self.log == Log::Offsets {
            return Err(WorkerError::ReadDenied { topic: self.topic.clone(), source: Box::new(e) });
        }
        share_state_unreadable(&self.monitor, &self.topic, &e);
        Ok(false)
    }

    /// Tracks the topic's partitions, retrying until it works; false when the
    /// service stops first.
    fn wait_for_topic(&self) -> bool {
        loop {
            match self.track_all() {
                Ok(()) => {
                    self.kafka.clear_access_problem();
                    return true;
                }
                Err(e) => {
                    let reason = self.kafka.with_access_problem(e);
                    warn!(error = %reason, topic = %self.topic, "cannot track the offsets topic yet; retrying in 5 s (not ready)");
                    self.monitor.step(Event::Waiting(reason));
                }
            }
            if self.shutdown.sleep(RETRY) {
                return false;
            }
        }
    }

    fn track_all(&self) -> Result<(), WorkerError> {
        let admin = self.brokers.checked_admin()?;
        let count = match (admin.partition_count(&self.topic)?, self.log) {
            (Some(count), _) => count,
            // No share group was ever made: no state to read, until the
            // refresher sees the topic.
            (None, Log::ShareState) => 0,
            (None, Log::Offsets) => {
                return Err(WorkerError::NoTopic {
                    topic: self.topic.clone(),
                    brokers: self.kafka.brokers().to_owned(),
                });
            }
        };
        let total = track_range(&*admin, &self.monitor, self.log, &self.topic, 0..count)?;
        self.monitor.start_log(self.log);
        info!(partitions = count, offsets = total, topic = %self.topic, "catching up");
        Ok(())
    }
}
