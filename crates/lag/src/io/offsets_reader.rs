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
use std::time::Duration;

use kshard_kafka::TopicPartition;
use tracing::{info, warn};

use crate::brokers::BrokerAdmin;
use crate::catch_up::Log;
use crate::log_reader::{OffsetsReader, refusal, share_state_unreadable};
use crate::monitor::Monitor;
use crate::readiness::Event;

/// How long to wait before asking again for a topic that is not there yet.
const RETRY: Duration = Duration::from_secs(5);

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
        let start = self.monitor.log(self.log).positions();
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
