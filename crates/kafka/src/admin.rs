//! Admin calls: create topics, read watermarks.

use std::time::Duration;

use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::util::Timeout;

use crate::config::ClientSettings;
use crate::error::{Error, Result, call};

/// A topic to create.
#[derive(Debug, Clone)]
pub struct TopicSpec {
    /// The topic name.
    pub name: String,
    /// Its partition count.
    pub partitions: i32,
    /// Its replication factor.
    pub replication: i32,
    /// Topic configs, e.g. `("cleanup.policy", "compact")`.
    pub configs: Vec<(String, String)>,
}

impl TopicSpec {
    /// `__consumer_offsets` as Kafka creates it: 50 partitions, compacted.
    pub fn consumer_offsets() -> Self {
        TopicSpec {
            name: crate::CONSUMER_OFFSETS_TOPIC.to_owned(),
            partitions: 50,
            replication: 1,
            configs: vec![("cleanup.policy".into(), "compact".into())],
        }
    }
}

/// Blocking admin client. Calls block the calling thread up to `timeout`.
pub struct Admin {
    admin: AdminClient<DefaultClientContext>,
    metadata: BaseConsumer,
    timeout: Duration,
}

impl std::fmt::Debug for Admin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Admin").field("timeout", &self.timeout).finish_non_exhaustive()
    }
}

impl Admin {
    /// Connects an admin client; `timeout` bounds every call.
    pub fn new(settings: &ClientSettings, timeout: Duration) -> Result<Self> {
        let mut config = settings.client_config();
        settings.apply_overrides(&mut config);
        let admin = config.create().map_err(|source| Error::Client { client: "admin client", source })?;
        let metadata = config.create().map_err(|source| Error::Client { client: "metadata client", source })?;
        Ok(Admin { admin, metadata, timeout })
    }

    /// Creates a topic; `Ok(false)` when it already existed.
    pub fn create_topic(&self, spec: &TopicSpec) -> Result<bool> {
        let step = format!("creating topic {}", spec.name);
        let mut topic = NewTopic::new(&spec.name, spec.partitions, TopicReplication::Fixed(spec.replication));
        for (k, v) in &spec.configs {
            topic = topic.set(k, v);
        }
        // rdkafka's admin futures are completed by its own background thread, so
        // blocking this thread on them needs no async runtime.
        let options = AdminOptions::new().operation_timeout(Some(Timeout::After(self.timeout)));
        let results =
            futures_executor::block_on(self.admin.create_topics([&topic], &options)).map_err(call(step.clone()))?;
        match results.into_iter().next() {
            Some(Ok(_)) => Ok(true),
            Some(Err((_, RDKafkaErrorCode::TopicAlreadyExists))) => Ok(false),
            Some(Err((_, code))) => Err(Error::Refused { step, message: code.to_string() }),
            None => Err(Error::Refused { step, message: "no result for the topic".into() }),
        }
    }

    /// The partition count of `topic`, or `None` when the topic does not exist.
    pub fn partition_count(&self, topic: &str) -> Result<Option<i32>> {
        let metadata = self
            .metadata
            .fetch_metadata(Some(topic), self.timeout)
            .map_err(call(format!("fetching metadata of {topic}")))?;
        Ok(metadata
            .topics()
            .iter()
            .find(|t| t.name() == topic && t.error().is_none())
            .map(|t| t.partitions().len() as i32)
            .filter(|n| *n > 0))
    }

    /// The low and high watermarks of one partition.
    pub fn watermarks(&self, topic: &str, partition: i32) -> Result<(i64, i64)> {
        self.metadata
            .fetch_watermarks(topic, partition, self.timeout)
            .map_err(call(format!("fetching watermarks of {topic}/{partition}")))
    }
}
