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

/// What a round of [`create_new`] made.
pub(crate) struct Round {
    /// The partitions with shards (made, found, or taken by another spec) from 0.
    pub(crate) made: i32,
    /// Specs whose id another spec holds: left as they are.
    pub(crate) taken: Vec<(ShardSpec, Box<ShardSpec>)>,
}

/// Creates the shards of `generator`'s partitions from `made` on, as many
/// as `partitions` has now (a topic that does not exist has none).
pub(crate) async fn create_new<K: Keyspace>(
    ks: &K,
    keys: &Keys,
    partitions: &dyn Partitions,
    generator: &PartitionShards,
    made: i32,
) -> Result<Round, GenerateError> {
    let topic = generator.topic();
    let count = partitions.partition_count(topic).await.map_err(|e| GenerateError::Count(topic.to_owned(), e))?;
    if count.is_none() && made == 0 {
        tracing::warn!(topic, "the topic whose partitions get shards does not exist (yet)");
    }
    let count = count.unwrap_or(0);
    let mut round = Round { made, taken: Vec::new() };
    for spec in generator.specs(made..count) {
        match create_shard(ks, keys, &spec).await.map_err(GenerateError::Keyspace)? {
            Created::Created => tracing::info!(shard = %spec.id, topic, "created the shard of a partition"),
            Created::Existed => {}
            Created::Conflict(theirs) => round.taken.push((spec, theirs)),
        }
        round.made += 1;
    }
    Ok(round)
}

/// Why generated shards were not created.
#[derive(Debug, thiserror::Error)]
pub(crate) enum GenerateError {
    #[error("counting the partitions of {0}")]
    Count(String, #[source] kshard_kafka::Error),
    #[error("creating a shard")]
    Keyspace(#[source] crate::keyspace::KeyspaceError),
}

/// Follows every generator's topic, each at its own period, until aborted
/// with its member: new partitions get their shards within a period. A
/// failure is retried next time; a shard id another spec holds is reported
/// and passed over.
pub(crate) async fn follow<K: Keyspace>(
    ks: Arc<K>,
    keys: Keys,
    partitions: Arc<dyn Partitions>,
    generators: Vec<(PartitionShards, i32)>,
) {
    let now = tokio::time::Instant::now();
    let mut generators: Vec<(PartitionShards, i32, tokio::time::Instant)> = generators
        .into_iter()
        .map(|(g, made)| {
            let due = now + g.every;
            (g, made, due)
        })
        .collect();
    loop {
        let Some(due) = generators.iter().map(|(_, _, due)| *due).min() else { return };
        tokio::time::sleep_until(due).await;
        for (generator, made, next) in &mut generators {
            if *next > tokio::time::Instant::now() {
                continue;
            }
            *next += generator.every;
            match create_new(&*ks, &keys, partitions.as_ref(), generator, *made).await {
                Ok(round) => {
                    *made = round.made;
                    for (ours, theirs) in round.taken {
                        tracing::error!(shard = %ours.id, theirs = ?theirs.sources, "a partition's shard id is another spec's: not created");
                    }
                }
                Err(e) => {
                    tracing::warn!(topic = generator.topic(), error = %e, "following a topic's partitions; trying again")
                }
            }
        }
    }
}
