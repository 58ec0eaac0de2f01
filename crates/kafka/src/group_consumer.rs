//! A plain consumer-group member: subscribes, reads, and commits through the
//! group coordinator like any application. kshard uses it for demo groups and
//! for testing the admin-API mode against real groups.

use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};

use crate::config::ClientSettings;
use crate::context::KshardContext;
use crate::error::{Result, call};

/// A member of a consumer group that commits what it read when told to.
pub struct GroupConsumer {
    consumer: BaseConsumer<KshardContext>,
    group: String,
}

impl std::fmt::Debug for GroupConsumer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GroupConsumer").field("group", &self.group).finish_non_exhaustive()
    }
}

impl GroupConsumer {
    /// Joins `group`, subscribed to `topics`, reading from the earliest offset
    /// when the group has none.
    pub fn new(settings: &ClientSettings, group: &str, topics: &[&str]) -> Result<Self> {
        let consumer: BaseConsumer<KshardContext> = settings.create(
            "group consumer",
            &[
                ("group.id", group),
                ("enable.auto.commit", "false"),
                ("auto.offset.reset", "earliest"),
                ("session.timeout.ms", "10000"),
            ],
        )?;
        consumer.subscribe(topics).map_err(call(format!("subscribing {group} to {topics:?}")))?;
        Ok(GroupConsumer { consumer, group: group.to_owned() })
    }

    /// Reads up to `max` records within `timeout`; returns how many it read.
    pub fn consume(&self, max: usize, timeout: Duration) -> Result<usize> {
        let deadline = Instant::now() + timeout;
        let mut read = 0;
        while read < max && Instant::now() < deadline {
            match self.consumer.poll(Duration::from_millis(100)) {
                Some(Ok(_)) => read += 1,
                Some(Err(e)) => tracing::debug!(group = %self.group, error = %e, "consumer event"),
                None => {}
            }
        }
        Ok(read)
    }

    /// Commits the positions of what was read, synchronously.
    pub fn commit(&self) -> Result<()> {
        self.consumer
            .commit_consumer_state(CommitMode::Sync)
            .map_err(call(format!("committing offsets of {}", self.group)))
    }
}
