//! Admin calls: create and delete topics and groups, metadata, batched
//! watermarks (log start and end offsets), and the consumer-group calls of
//! `groups.rs`.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use crate::librdkafka::context::KshardContext;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::util::Timeout;
use rdkafka::{Offset, TopicPartitionList};

use crate::client::Client;
use crate::error::{Error, Result, call};
use crate::retry::{Retry, retriable_rdkafka, retrying};
use crate::topic_partition::TopicPartition;

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
    /// A compacted topic shaped like `__consumer_offsets` (which Kafka creates
    /// itself and refuses client writes to): where tests and `kshard loadgen
    /// --offsets-topic` write synthetic records, for `offsets_topic` to point at.
    pub fn compacted(name: impl Into<String>, partitions: i32) -> Self {
        TopicSpec {
            name: name.into(),
            partitions,
            replication: 1,
            configs: vec![("cleanup.policy".into(), "compact".into())],
        }
    }
}

/// Which end of a partition [`Admin::list_offsets`] asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OffsetSpec {
    /// The low watermark.
    Earliest,
    /// The high watermark.
    Latest,
}

/// One round of ListOffsets: the offsets found, and the partitions that had
/// a retriable error.
struct Listed {
    offsets: HashMap<TopicPartition, i64>,
    retriable: Vec<TopicPartition>,
}

/// Blocking admin client. Calls block the calling thread up to `timeout`.
pub struct Admin {
    admin: AdminClient<KshardContext>,
    metadata: BaseConsumer<KshardContext>,
    timeout: Duration,
    client: Client,
}

impl std::fmt::Debug for Admin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Admin").field("timeout", &self.timeout).finish_non_exhaustive()
    }
}

impl Admin {
    /// Connects an admin client; `timeout` bounds every call.
    pub fn new(client: &Client, timeout: Duration) -> Result<Self> {
        let admin = client.create("admin client", &[])?;
        // read_uncommitted: "latest" is the high watermark, the log end offset
        // Kafka's own tools report, not the last stable offset (which an open
        // transaction holds back).
        let metadata = client.create("metadata client", &[("isolation.level", "read_uncommitted")])?;
        Ok(Admin { admin, metadata, timeout, client: client.clone() })
    }

    /// An admin client whose brokers answered a Metadata request within the
    /// timeout. A failed TLS handshake or authentication fails at once, with
    /// the reason: librdkafka would retry such a connection until the timeout
    /// and then report only that it timed out.
    pub fn connect(client: &Client, timeout: Duration) -> Result<Self> {
        let admin = Self::new(client, timeout)?;
        admin.check_access()?;
        Ok(admin)
    }

    /// Waits until the brokers answer a Metadata request (see [`Admin::connect`]).
    fn check_access(&self) -> Result<()> {
        let deadline = std::time::Instant::now() + self.timeout;
        loop {
            match self.metadata.fetch_metadata(None, Duration::from_millis(500)) {
                Ok(_) => return Ok(()),
                Err(e) => {
                    // Serves the client's queue: librdkafka delivers its logs and
                    // error events (where TLS and authentication failures show)
                    // through it. The client reads nothing, so no record is lost.
                    let _ = self.metadata.poll(Duration::ZERO);
                    if let Some(problem) = self.client.access_problem() {
                        return Err(Error::Refused {
                            step: format!("connecting to {}", self.client.brokers()),
                            message: problem,
                        });
                    }
                    if std::time::Instant::now() >= deadline {
                        return Err(call(format!("connecting to {}", self.client.brokers()))(e));
                    }
                }
            }
        }
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
        // A retry after a lost answer may find the topic made by the first try.
        let created = self.retried(|left| {
            let options = AdminOptions::new().operation_timeout(Some(Timeout::After(left)));
            let results =
                futures_executor::block_on(self.admin.create_topics([&topic], &options)).map_err(call(step.clone()))?;
            match results.into_iter().next() {
                Some(Ok(_)) => Ok(true),
                Some(Err((_, RDKafkaErrorCode::TopicAlreadyExists))) => Ok(false),
                Some(Err((_, code))) => Err(call(step.clone())(KafkaError::AdminOp(code))),
                None => Err(Error::Refused { step: step.clone(), message: "no result for the topic".into() }),
            }
        })?;
        // The controller answers before the brokers' metadata shows the topic:
        // return once callers can use it.
        let deadline = std::time::Instant::now() + self.timeout;
        while self.partition_count(&spec.name)?.is_none() {
            if std::time::Instant::now() >= deadline {
                return Err(Error::Refused { step, message: "created, but not in the metadata in time".into() });
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Ok(created)
    }

    /// A topic's configuration as the broker applies it (set on the topic,
    /// or the broker's default): name → value (`None`: not set, or secret).
    pub fn topic_configs(&self, topic: &str) -> Result<HashMap<String, Option<String>>> {
        let step = format!("describing the configuration of topic {topic}");
        let resources = [rdkafka::admin::ResourceSpecifier::Topic(topic)];
        self.retried(|left| {
            let options = AdminOptions::new().request_timeout(Some(Timeout::After(left)));
            let results = futures_executor::block_on(self.admin.describe_configs(&resources, &options))
                .map_err(call(step.clone()))?;
            match results.into_iter().next() {
                Some(Ok(resource)) => Ok(resource.entries.into_iter().map(|e| (e.name, e.value)).collect()),
                Some(Err(code)) => Err(call(step.clone())(KafkaError::AdminOp(code))),
                None => Err(Error::Refused { step: step.clone(), message: "no result for the topic".into() }),
            }
        })
    }

    /// Every consumer group of the cluster (ListGroups on every broker).
    pub fn list_groups(&self) -> Result<Vec<crate::librdkafka::groups::GroupListing>> {
        self.retried(|left| crate::librdkafka::groups::list_groups(&self.admin, left))
    }

    /// The state, assignor and members of each group (DescribeGroups, or
    /// ConsumerGroupDescribe for KIP-848 groups).
    pub fn describe_groups(&self, groups: &[String]) -> Result<Vec<crate::librdkafka::groups::GroupDescription>> {
        self.retried(|left| crate::librdkafka::groups::describe_groups(&self.admin, groups, left))
    }

    /// The committed offsets of each group (OffsetFetch for all its partitions).
    pub fn group_offsets(&self, groups: &[String]) -> Result<Vec<crate::librdkafka::groups::FetchedOffsets>> {
        self.retried(|left| crate::librdkafka::groups::group_offsets(&self.admin, groups, left))
    }

    /// Deletes a consumer group (DeleteGroups): Kafka writes tombstones for its
    /// offsets and its metadata. Fails for a group that has members.
    pub fn delete_group(&self, group: &str) -> Result<()> {
        let step = format!("deleting group {group}");
        // The request's own limit too: without it, librdkafka waits for the
        // group's coordinator as long as it takes (a cluster that is down).
        let options = AdminOptions::new()
            .operation_timeout(Some(Timeout::After(self.timeout)))
            .request_timeout(Some(Timeout::After(self.timeout)));
        let results =
            futures_executor::block_on(self.admin.delete_groups(&[group], &options)).map_err(call(step.clone()))?;
        match results.into_iter().next() {
            Some(Ok(_)) => Ok(()),
            Some(Err((_, code))) => Err(refused(step, code)),
            None => Err(Error::Refused { step, message: "no result for the group".into() }),
        }
    }

    /// Deletes the records of `topic`/`partition` before `before` (DeleteRecords);
    /// returns the partition's new low watermark.
    pub fn delete_records(&self, topic: &str, partition: i32, before: i64) -> Result<i64> {
        let step = format!("deleting records of {topic}/{partition} before {before}");
        let mut list = TopicPartitionList::new();
        list.add_partition_offset(topic, partition, rdkafka::Offset::Offset(before)).map_err(call(step.clone()))?;
        self.retried(|left| {
            let options = AdminOptions::new().operation_timeout(Some(Timeout::After(left)));
            let result =
                futures_executor::block_on(self.admin.delete_records(&list, &options)).map_err(call(step.clone()))?;
            let element = result.elements().into_iter().find(|e| e.topic() == topic && e.partition() == partition);
            match element {
                Some(e) => match e.error() {
                    Ok(()) => Ok(e.offset().to_raw().unwrap_or(before)),
                    Err(error) => Err(call(step.clone())(error)),
                },
                None => Err(Error::Refused { step: step.clone(), message: "no result for the partition".into() }),
            }
        })
    }

    /// Grows `topic` to `partitions` partitions (CreatePartitions); `Ok(false)`
    /// when it had that many already.
    pub fn add_partitions(&self, topic: &str, partitions: i32) -> Result<bool> {
        let step = format!("growing {topic} to {partitions} partitions");
        let request = rdkafka::admin::NewPartitions::new(topic, usize::try_from(partitions).unwrap_or(0));
        let options = AdminOptions::new().operation_timeout(Some(Timeout::After(self.timeout)));
        let results = futures_executor::block_on(self.admin.create_partitions(&[request], &options))
            .map_err(call(step.clone()))?;
        match results.into_iter().next() {
            Some(Ok(_)) => Ok(true),
            Some(Err((_, RDKafkaErrorCode::InvalidPartitions))) if self.partition_count(topic)? >= Some(partitions) => {
                Ok(false)
            }
            Some(Err((_, code))) => Err(refused(step, code)),
            None => Err(Error::Refused { step, message: "no result for the topic".into() }),
        }
    }

    /// Deletes a topic; `Ok(false)` when it did not exist.
    pub fn delete_topic(&self, name: &str) -> Result<bool> {
        let step = format!("deleting topic {name}");
        let options = AdminOptions::new().operation_timeout(Some(Timeout::After(self.timeout)));
        let results =
            futures_executor::block_on(self.admin.delete_topics(&[name], &options)).map_err(call(step.clone()))?;
        match results.into_iter().next() {
            Some(Ok(_)) => Ok(true),
            Some(Err((_, RDKafkaErrorCode::UnknownTopicOrPartition))) => Ok(false),
            Some(Err((_, code))) => Err(refused(step, code)),
            None => Err(Error::Refused { step, message: "no result for the topic".into() }),
        }
    }

    fn topic_metadata(&self, topic: &str) -> Result<rdkafka::metadata::Metadata> {
        self.retried(|left| {
            self.metadata.fetch_metadata(Some(topic), left).map_err(call(format!("fetching metadata of {topic}")))
        })
    }

    /// `call` (given the time left), tried again on retriable errors until
    /// the timeout.
    fn retried<T>(&self, call: impl FnMut(Duration) -> Result<T>) -> Result<T> {
        retrying(self.timeout, std::thread::sleep, call)
    }

    /// The partition count of `topic`, or `None` when the topic does not exist.
    pub fn partition_count(&self, topic: &str) -> Result<Option<i32>> {
        Ok(self
            .topic_metadata(topic)?
            .topics()
            .iter()
            .find(|t| t.name() == topic && t.error().is_none())
            .map(|t| t.partitions().len() as i32)
            .filter(|n| *n > 0))
    }

    /// The ids of the cluster's brokers.
    pub fn broker_ids(&self) -> Result<Vec<i32>> {
        let metadata = self
            .retried(|left| self.metadata.fetch_metadata(None, left).map_err(call("fetching the cluster's brokers")))?;
        Ok(metadata.brokers().iter().map(|b| b.id()).collect())
    }

    /// Every topic and its partition count, from one Metadata request.
    pub fn topics(&self) -> Result<HashMap<String, i32>> {
        let metadata = self.retried(|left| {
            self.metadata.fetch_metadata(None, left).map_err(call("fetching metadata of all topics"))
        })?;
        Ok(metadata
            .topics()
            .iter()
            .filter(|t| t.error().is_none() && !t.partitions().is_empty())
            .map(|t| (t.name().to_owned(), t.partitions().len() as i32))
            .collect())
    }

    /// The leader broker of each partition of `topic` (partitions without a
    /// leader are left out).
    pub fn leaders(&self, topic: &str) -> Result<HashMap<i32, i32>> {
        Ok(self
            .topic_metadata(topic)?
            .topics()
            .iter()
            .filter(|t| t.name() == topic)
            .flat_map(|t| t.partitions())
            .filter(|p| p.leader() >= 0)
            .map(|p| (p.id(), p.leader()))
            .collect())
    }

    /// The earliest or latest offset of many partitions, batched: librdkafka
    /// sends one ListOffsets request per partition leader. A retriable error
    /// of the whole call (a broker restarting, its partitions' leaders being
    /// elected) is asked again until the timeout; partitions whose own
    /// answer was retriable, for 3 s at most (a partition offline for long
    /// must not hold up the others), and they are left out after that.
    pub fn list_offsets(
        &self,
        partitions: &[TopicPartition],
        which: OffsetSpec,
    ) -> Result<HashMap<TopicPartition, i64>> {
        let deadline = Instant::now() + self.timeout;
        // Partitions whose own answer was retriable are asked again for a
        // while only: a partition offline for minutes must not hold up
        // every caller's answer for the others.
        let partitions_until = Instant::now() + self.timeout.min(crate::retry::PARTITION_RETRY_FOR);
        let mut found = HashMap::with_capacity(partitions.len());
        let mut wanted = partitions.to_vec();
        let mut retry = Retry::default();
        while !wanted.is_empty() {
            let left = deadline.saturating_duration_since(Instant::now());
            let answer = match self.list_offsets_once(&wanted, which, left.max(Duration::from_millis(1))) {
                Ok(answer) => answer,
                Err(e) if e.is_retriable() && Instant::now() < deadline => {
                    std::thread::sleep(retry.next_wait().min(deadline.saturating_duration_since(Instant::now())));
                    continue;
                }
                Err(e) => return Err(e),
            };
            wanted = answer.retriable;
            found.extend(answer.offsets);
            if wanted.is_empty() || Instant::now() >= partitions_until {
                break;
            }
            tracing::debug!(partitions = wanted.len(), "asking again for offsets that had a retriable error");
            std::thread::sleep(retry.next_wait().min(partitions_until.saturating_duration_since(Instant::now())));
        }
        Ok(found)
    }

    /// One round of [`Admin::list_offsets`].
    fn list_offsets_once(&self, partitions: &[TopicPartition], which: OffsetSpec, timeout: Duration) -> Result<Listed> {
        let mut request = TopicPartitionList::with_capacity(partitions.len());
        let spec = match which {
            OffsetSpec::Earliest => Offset::Beginning,
            OffsetSpec::Latest => Offset::End,
        };
        for tp in partitions {
            request
                .add_partition_offset(&tp.topic, tp.partition, spec)
                .map_err(call(format!("listing offsets of {tp}")))?;
        }
        let response = match self.metadata.offsets_for_times(request.clone(), timeout) {
            Ok(r) => Ok(r),
            // A partition added since this client last asked for its topic is
            // unknown to it: ask for the topics again, then once more.
            Err(KafkaError::MetadataFetch(RDKafkaErrorCode::UnknownPartition)) => {
                let topics: std::collections::BTreeSet<&str> = partitions.iter().map(|tp| tp.topic.as_str()).collect();
                for topic in topics {
                    let _ = self.topic_metadata(topic);
                }
                self.metadata.offsets_for_times(request, timeout)
            }
            Err(e) => Err(e),
        }
        .map_err(call(format!("listing {which:?} offsets of {} partitions", partitions.len())))?;
        let mut listed = Listed { offsets: HashMap::with_capacity(partitions.len()), retriable: Vec::new() };
        for e in response.elements() {
            let key = TopicPartition::new(e.topic(), e.partition());
            match e.error() {
                Ok(()) => {
                    if let Some(offset) = e.offset().to_raw().filter(|o| *o >= 0) {
                        listed.offsets.insert(key, offset);
                    }
                }
                Err(error) if error.rdkafka_error_code().is_some_and(retriable_rdkafka) => listed.retriable.push(key),
                Err(_) => {}
            }
        }
        Ok(listed)
    }

    /// The low and high watermarks (log start and log end offsets, whatever
    /// transactions are open) of many partitions: two batched ListOffsets
    /// rounds (earliest, latest). Partitions the brokers gave no answer for are
    /// left out.
    pub fn watermarks(&self, partitions: &[TopicPartition]) -> Result<HashMap<TopicPartition, (i64, i64)>> {
        let low = self.list_offsets(partitions, OffsetSpec::Earliest)?;
        let mut high = self.list_offsets(partitions, OffsetSpec::Latest)?;
        Ok(low.into_iter().filter_map(|(key, l)| high.remove(&key).map(|h| (key, (l, h)))).collect())
    }
}

/// The broker refused an admin operation with `code`: kept as Kafka's code
/// (librdkafka's admin results give one per request), so that the error
/// says whether it is retriable or an authorization problem.
fn refused(step: String, code: RDKafkaErrorCode) -> Error {
    Error::Call { step, source: rdkafka::error::KafkaError::AdminOp(code) }
}
