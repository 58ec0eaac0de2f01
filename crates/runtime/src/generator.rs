//! [`PartitionShards`]: the common case of shard specs made rather than
//! written — one shard per partition of a topic, followed as the topic
//! gains partitions. A member given one creates the shards of the
//! partitions there are before it joins, then looks again every period and
//! creates the shards of partitions added since (each member running the
//! same generator creates the same specs; a spec already there is left as
//! it is).

use std::sync::Arc;
use std::time::Duration;

use crate::keyspace::Keyspace;
use crate::model::{Keys, ShardSpec};
use crate::node::{Created, create_shard};
use crate::partitions::Partitions;

/// How often a member looks for new partitions, unless told otherwise.
pub const FOLLOW_EVERY: Duration = Duration::from_secs(30);

/// One shard per partition of a topic (see the module's doc).
#[derive(Clone)]
pub struct PartitionShards {
    topic: String,
    shard: Arc<dyn Fn(i32) -> ShardSpec + Send + Sync>,
    every: Duration,
}

impl std::fmt::Debug for PartitionShards {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PartitionShards").field("topic", &self.topic).field("every", &self.every).finish()
    }
}

impl PartitionShards {
    /// A shard for each partition of `topic`: `shard(p)` is partition p's
    /// spec (it reads p, and logs to a partition of its own).
    pub fn new(topic: impl Into<String>, shard: impl Fn(i32) -> ShardSpec + Send + Sync + 'static) -> Self {
        PartitionShards { topic: topic.into(), shard: Arc::new(shard), every: FOLLOW_EVERY }
    }

    /// Looks for new partitions every `period` (default [`FOLLOW_EVERY`]).
    pub fn every(mut self, period: Duration) -> Self {
        self.every = period.max(Duration::from_millis(100));
        self
    }

    /// The topic followed.
    pub fn topic(&self) -> &str {
        &self.topic
    }

    /// The specs of partitions `partitions`.
    pub fn specs(&self, partitions: std::ops::Range<i32>) -> Vec<ShardSpec> {
        partitions.map(|p| (self.shard)(p)).collect()
    }
}

/// Creates the shards of `generator`'s partitions from `made` on, as many
/// as `partitions` has now; the count made after. A spec whose id another
/// spec holds is an error (named); a failure to count or create is retried
/// next time.
pub(crate) async fn create_new<K: Keyspace>(
    ks: &K,
    keys: &Keys,
    partitions: &dyn Partitions,
    generator: &PartitionShards,
    made: i32,
) -> Result<i32, GenerateError> {
    let topic = generator.topic();
    let count = partitions.partition_count(topic).await.map_err(|e| GenerateError::Count(topic.to_owned(), e))?;
    let count = count.unwrap_or(0);
    for spec in generator.specs(made..count) {
        match create_shard(ks, keys, &spec).await.map_err(GenerateError::Keyspace)? {
            Created::Created => tracing::info!(shard = %spec.id, topic, "created the shard of a partition"),
            Created::Existed => {}
            Created::Conflict(theirs) => {
                return Err(GenerateError::Taken { ours: Box::new(spec), theirs });
            }
        }
    }
    Ok(made.max(count))
}

/// Why generated shards were not created.
#[derive(Debug, thiserror::Error)]
pub(crate) enum GenerateError {
    #[error("counting the partitions of {0}")]
    Count(String, #[source] kshard_kafka::Error),
    #[error("creating a shard")]
    Keyspace(#[source] crate::keyspace::KeyspaceError),
    #[error("shard {} is taken by another spec", .ours.id)]
    Taken { ours: Box<ShardSpec>, theirs: Box<ShardSpec> },
}

/// Follows every generator's topic until dropped (aborted with its member):
/// new partitions get their shards within a period.
pub(crate) async fn follow<K: Keyspace>(
    ks: Arc<K>,
    keys: Keys,
    partitions: Arc<dyn Partitions>,
    generators: Vec<(PartitionShards, i32)>,
) {
    let mut generators = generators;
    let every = generators.iter().map(|(g, _)| g.every).min().unwrap_or(FOLLOW_EVERY);
    loop {
        tokio::time::sleep(every).await;
        for (generator, made) in &mut generators {
            match create_new(&*ks, &keys, partitions.as_ref(), generator, *made).await {
                Ok(now) => *made = now,
                Err(e) => {
                    tracing::warn!(topic = generator.topic(), error = %e, "following a topic's partitions; trying again")
                }
            }
        }
    }
}
