//! A plain consumer-group member: subscribes, reads, and commits through the
//! group coordinator like any application. kshard uses it for demo groups and
//! for testing the admin-API mode against real groups.

use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};

use crate::client::Client;
use crate::error::{Result, call};
use crate::librdkafka::context::KshardContext;

/// Which rebalance protocol a [`GroupConsumer`] speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum GroupProtocol {
    /// JoinGroup/SyncGroup with a client-side assignor (every Kafka version).
    #[default]
    Classic,
    /// KIP-848's ConsumerGroupHeartbeat with server-side assignment (Kafka 4.0+).
    Consumer,
}

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
    /// Joins `group` with the classic protocol, subscribed to `topics`, reading
    /// from the earliest offset when the group has none.
    pub fn new(client: &Client, group: &str, topics: &[&str]) -> Result<Self> {
        Self::with_protocol(client, group, topics, GroupProtocol::Classic)
    }

    /// Joins `group` with `protocol`, subscribed to `topics`.
    pub fn with_protocol(client: &Client, group: &str, topics: &[&str], protocol: GroupProtocol) -> Result<Self> {
        let mut properties =
            vec![("group.id", group), ("enable.auto.commit", "false"), ("auto.offset.reset", "earliest")];
        match protocol {
            // The session timeout is the broker's under KIP-848.
            GroupProtocol::Classic => {
                properties.extend([("group.protocol", "classic"), ("session.timeout.ms", "10000")])
            }
            GroupProtocol::Consumer => properties.push(("group.protocol", "consumer")),
        }
        let consumer: BaseConsumer<KshardContext> = client.create_counted("group consumer", &properties)?;
        consumer.subscribe(topics).map_err(call(format!("subscribing {group} to {topics:?}")))?;
        Ok(GroupConsumer { consumer, group: group.to_owned() })
    }

    /// A member of `group`, kminion's end-to-end probe's: subscribed to
    /// `topic`, reading only what is produced after it joins (a new group
    /// starts at the end), with cooperative-sticky assignment, committing
    /// only when told to.
    pub fn probe(client: &Client, group: &str, topic: &str) -> Result<Self> {
        let properties = [
            ("group.id", group),
            ("enable.auto.commit", "false"),
            ("auto.offset.reset", "latest"),
            ("group.protocol", "classic"),
            ("partition.assignment.strategy", "cooperative-sticky"),
            ("session.timeout.ms", "10000"),
        ];
        let consumer: BaseConsumer<KshardContext> = client.create_counted("probe consumer", &properties)?;
        consumer.subscribe(&[topic]).map_err(call(format!("subscribing {group} to {topic}")))?;
        Ok(GroupConsumer { consumer, group: group.to_owned() })
    }

    /// The next record within `timeout`, as `(partition, value)`; `None`
    /// when nothing came (errors are logged: librdkafka retries them).
    pub fn next(&self, timeout: Duration) -> Option<(i32, Option<Vec<u8>>)> {
        use rdkafka::Message;
        match self.consumer.poll(timeout)? {
            Ok(m) => Some((m.partition(), m.payload().map(<[u8]>::to_vec))),
            Err(e) => {
                tracing::debug!(group = %self.group, error = %e, "consumer event");
                None
            }
        }
    }

    /// How many partitions the group gave this member.
    pub fn assigned(&self) -> usize {
        self.consumer.assignment().map(|a| a.count()).unwrap_or(0)
    }

    /// Commits the positions of what was read since the last commit,
    /// synchronously; `false` when there was nothing new to commit.
    pub fn commit_read(&self) -> Result<bool> {
        use rdkafka::error::KafkaError;
        use rdkafka::types::RDKafkaErrorCode;
        match self.consumer.commit_consumer_state(CommitMode::Sync) {
            Ok(()) => Ok(true),
            Err(KafkaError::ConsumerCommit(RDKafkaErrorCode::NoOffset)) => Ok(false),
            Err(e) => Err(call(format!("committing offsets of {}", self.group))(e)),
        }
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
