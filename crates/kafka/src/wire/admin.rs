//! [`WireAdmin`]: the calls of [`BrokerAdmin`] — metadata, watermarks and
//! consumer groups — on kshard's own connections ([`Links`]), each answer
//! checked by [`crate::wire::answer_shape`] before it is decoded.
//!
//! librdkafka's admin client, in the same process, aborts it on one
//! malformed ApiVersions answer (no error and a null array: librdkafka
//! 2.12.1 allocates for a count of −1); this client refuses an answer that
//! does not fit, naming the call and the field, and the caller hears an
//! error. So the lag monitor's calls — one round every refresh — stay out of
//! librdkafka wherever kshard's own connections reach the brokers.
//!
//! Versions: Metadata 9, ListOffsets 7, ListGroups 4, FindCoordinator 4,
//! OffsetFetch 8 and DescribeGroups 5: every Apache Kafka since 3.0. A
//! cluster whose broker lacks one (ApiVersions, asked once) is served by
//! librdkafka's admin client instead, said once in the log.
//!
//! Retries as librdkafka's admin client makes them: a retriable error of a
//! whole call (a broker restarting) is asked again until the timeout; a
//! partition's or a group's own retriable error (a coordinator loading or
//! down), for 3 s at most, and then that partition is left out, that group
//! given the error: one broker down never fails the others' answers.

use std::collections::{BTreeMap, HashMap};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
use kafka_protocol::messages::{
    ApiKey, ApiVersionsRequest, ApiVersionsResponse, ListOffsetsRequest, ListOffsetsResponse, MetadataResponse,
    TopicName,
};
use kafka_protocol::protocol::StrBytes;

use crate::client::Client;
use crate::error::{Error, Result};
use crate::librdkafka::admin::Admin;
use crate::librdkafka::groups::{FetchedOffsets, GroupDescription, GroupListing};
use crate::retry::{PARTITION_RETRY_FOR, Retry, retriable_code, retrying};
use crate::topic_partition::TopicPartition;
use crate::traits::{BrokerAdmin, WatermarkMap};
use crate::wire::links::Links;

mod groups;

const METADATA_VERSION: i16 = 9;
const LIST_OFFSETS_VERSION: i16 = 7;
const LIST_GROUPS_VERSION: i16 = 4;
const FIND_COORDINATOR_VERSION: i16 = 4;
const OFFSET_FETCH_VERSION: i16 = 8;
const DESCRIBE_GROUPS_VERSION: i16 = 5;
const CONSUMER_GROUP_DESCRIBE_VERSION: i16 = 0;
/// The error a group whose coordinator does not answer is given.
const COORDINATOR_NOT_AVAILABLE: i16 = 15;

/// The calls this client makes, at the versions it makes them.
const NEEDED: [(ApiKey, i16); 6] = [
    (ApiKey::Metadata, METADATA_VERSION),
    (ApiKey::ListOffsets, LIST_OFFSETS_VERSION),
    (ApiKey::ListGroups, LIST_GROUPS_VERSION),
    (ApiKey::FindCoordinator, FIND_COORDINATOR_VERSION),
    (ApiKey::OffsetFetch, OFFSET_FETCH_VERSION),
    (ApiKey::DescribeGroups, DESCRIBE_GROUPS_VERSION),
];

/// Which client answers (decided once a broker said its versions).
enum Backend {
    /// kshard's own; `kip848`: the brokers describe KIP-848 consumer groups
    /// (ConsumerGroupDescribe v0, Kafka 4.0+), which DescribeGroups calls dead.
    Wire { kip848: bool },
    /// librdkafka's: a broker lacks a version kshard's needs.
    Librdkafka(Box<Admin>),
}

/// The lag monitor's admin calls over kshard's own connections.
pub struct WireAdmin {
    links: Links,
    client: Client,
    timeout: Duration,
    backend: OnceLock<Backend>,
}

impl std::fmt::Debug for WireAdmin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WireAdmin").field("brokers", &self.client.brokers()).finish_non_exhaustive()
    }
}

/// The Kafka error of `code` in answer to `step`, or `Ok` for none.
fn answered(step: impl FnOnce() -> String, code: i16) -> Result<()> {
    if code == 0 { Ok(()) } else { Err(Error::Kafka { step: step(), code }) }
}

/// A group's error as [`FetchedOffsets`] and [`GroupDescription`] carry it.
fn group_error(code: i16) -> Option<String> {
    (code != 0).then(|| Error::Kafka { step: String::new(), code }.kafka_error_name().unwrap_or(code.to_string()))
}

impl WireAdmin {
    /// Calls on `settings`' brokers, each given `timeout`; `None` where only
    /// librdkafka can connect (GSSAPI, OAUTHBEARER, keystores…).
    pub fn new(client: &Client, timeout: Duration) -> Result<Option<Self>> {
        Ok(Links::new(client)?.map(|links| WireAdmin {
            links,
            client: client.clone(),
            timeout,
            backend: OnceLock::new(),
        }))
    }

    /// [`WireAdmin::new`], once the brokers answered: a failed TLS handshake
    /// or authentication fails at once, with its reason.
    pub fn connect(client: &Client, timeout: Duration) -> Result<Option<Self>> {
        let Some(admin) = Self::new(client, timeout)? else { return Ok(None) };
        admin.with_backend(|_| Ok(()), |_| Ok(()))?;
        Ok(Some(admin))
    }

    /// Which client answers the calls: `Some("kshard")` or
    /// `Some("librdkafka")` once a broker said its versions, `None` before.
    pub fn client(&self) -> Option<&'static str> {
        self.backend.get().map(|b| match b {
            Backend::Wire { .. } => "kshard",
            Backend::Librdkafka(_) => "librdkafka",
        })
    }

    /// `wire()` when kshard's own calls serve this cluster, `rdkafka(admin)`
    /// when librdkafka's must; asks a broker's versions first, once.
    fn with_backend<T>(
        &self,
        wire: impl FnOnce(&Self) -> Result<T>,
        rdkafka: impl FnOnce(&Admin) -> Result<T>,
    ) -> Result<T> {
        let backend = match self.backend.get() {
            Some(backend) => backend,
            None => {
                let (lacking, kip848) = self.lacking()?;
                let decided = match lacking {
                    None => Backend::Wire { kip848 },
                    Some((api, version)) => {
                        tracing::warn!(
                            brokers = %self.client.brokers(),
                            "the brokers lack {api:?} v{version}: admin calls go through librdkafka"
                        );
                        Backend::Librdkafka(Box::new(Admin::new(&self.client, self.timeout)?))
                    }
                };
                // Two callers may both decide: the first decision stands.
                let _ = self.backend.set(decided);
                self.backend.get().unwrap_or(&Backend::Wire { kip848: false })
            }
        };
        match backend {
            Backend::Wire { .. } => wire(self),
            Backend::Librdkafka(admin) => rdkafka(admin),
        }
    }

    /// The first call [`NEEDED`] that a broker lacks at its version, and
    /// whether it has ConsumerGroupDescribe v0: ApiVersions v0 (which every
    /// broker answers) of the first broker that answers, before any other
    /// call, asked again on retriable errors until the timeout.
    fn lacking(&self) -> Result<(Option<(ApiKey, i16)>, bool)> {
        let request = ApiVersionsRequest::default();
        let answer: ApiVersionsResponse = retrying(self.timeout, std::thread::sleep, |left| {
            self.links.any(left, |link| link.call(&request, 0, left))
        })?;
        answered(|| format!("asking {} for their API versions", self.client.brokers()), answer.error_code)?;
        let has = |key: ApiKey, version: i16| {
            answer
                .api_keys
                .iter()
                .any(|k| k.api_key == key as i16 && (k.min_version..=k.max_version).contains(&version))
        };
        Ok((
            NEEDED.into_iter().find(|&(key, version)| !has(key, version)),
            has(ApiKey::ConsumerGroupDescribe, CONSUMER_GROUP_DESCRIBE_VERSION),
        ))
    }

    /// The metadata of `topics` (`None`: all), asked again on retriable
    /// errors until the timeout.
    fn metadata(&self, topics: Option<&[&str]>) -> Result<MetadataResponse> {
        retrying(self.timeout, std::thread::sleep, |left| self.links.metadata_of(topics, left))
    }

    fn topic_metadata(
        &self,
        topic: &str,
    ) -> Result<Option<kafka_protocol::messages::metadata_response::MetadataResponseTopic>> {
        let metadata = self.metadata(Some(&[topic]))?;
        let Some(t) = metadata.topics.into_iter().find(|t| t.name.as_ref().is_some_and(|n| n.0.as_str() == topic))
        else {
            return Ok(None);
        };
        match t.error_code {
            0 => Ok(Some(t)),
            // Refused: said as such, not as a topic that is not there.
            29 => Err(Error::Kafka { step: format!("fetching metadata of {topic}"), code: 29 }),
            _ => Ok(None),
        }
    }

    fn wire_partition_count(&self, topic: &str) -> Result<Option<i32>> {
        Ok(self
            .topic_metadata(topic)?
            .map(|t| i32::try_from(t.partitions.len()).unwrap_or(i32::MAX))
            .filter(|n| *n > 0))
    }

    fn wire_topics(&self) -> Result<HashMap<String, i32>> {
        let metadata = self.metadata(None)?;
        Ok(metadata
            .topics
            .into_iter()
            .filter(|t| t.error_code == 0 && !t.partitions.is_empty())
            .filter_map(|t| Some((t.name?.0.to_string(), i32::try_from(t.partitions.len()).unwrap_or(i32::MAX))))
            .collect())
    }

    fn wire_leaders(&self, topic: &str) -> Result<HashMap<i32, i32>> {
        Ok(self
            .topic_metadata(topic)?
            .map(|t| {
                t.partitions.iter().filter(|p| p.leader_id.0 >= 0).map(|p| (p.partition_index, p.leader_id.0)).collect()
            })
            .unwrap_or_default())
    }

    /// The offsets at `timestamp` (−2: the earliest, −1: the latest) of
    /// `partitions`, one ListOffsets request per leader; partitions the
    /// brokers gave none for are left out.
    fn list_offsets(&self, partitions: &[TopicPartition], timestamp: i64) -> Result<HashMap<TopicPartition, i64>> {
        self.list_offsets_at(partitions, timestamp, 0)
    }

    /// The last stable offset of each of `partitions`: where a reader of
    /// committed records ends now (before the first record of a
    /// transaction still open; the high watermark when none is). A
    /// partition with no leader for 3 s is left out.
    pub fn stable_ends(&self, partitions: &[TopicPartition]) -> Result<HashMap<TopicPartition, i64>> {
        self.list_offsets_at(partitions, -1, 1)
    }

    /// [`WireAdmin::list_offsets`] as a reader of `isolation_level` sees
    /// the partitions (0: every record, 1: committed ones).
    fn list_offsets_at(
        &self,
        partitions: &[TopicPartition],
        timestamp: i64,
        isolation_level: i8,
    ) -> Result<HashMap<TopicPartition, i64>> {
        let deadline = Instant::now() + self.timeout;
        let partitions_until = Instant::now() + self.timeout.min(PARTITION_RETRY_FOR);
        let mut found = HashMap::with_capacity(partitions.len());
        let mut wanted = partitions.to_vec();
        let mut retry = Retry::default();
        while !wanted.is_empty() {
            let round = self.list_offsets_once(&wanted, timestamp, isolation_level);
            let retriable = match round {
                Ok((offsets, retriable)) => {
                    found.extend(offsets);
                    retriable
                }
                Err(e) if e.is_retriable() && Instant::now() < deadline => wanted,
                Err(e) => return Err(e),
            };
            if retriable.is_empty() || Instant::now() >= partitions_until {
                break;
            }
            wanted = retriable;
            tracing::debug!(partitions = wanted.len(), "asking again for offsets that had a retriable error");
            std::thread::sleep(retry.next_wait().min(partitions_until.saturating_duration_since(Instant::now())));
        }
        Ok(found)
    }

    /// One round of [`WireAdmin::list_offsets`]: the offsets found, and the
    /// partitions to ask for again (no leader, a retriable error, a leader
    /// that could not be reached).
    fn list_offsets_once(
        &self,
        partitions: &[TopicPartition],
        timestamp: i64,
        isolation_level: i8,
    ) -> Result<(HashMap<TopicPartition, i64>, Vec<TopicPartition>)> {
        let mut topics: Vec<&str> = partitions.iter().map(|tp| tp.topic.as_str()).collect();
        topics.sort_unstable();
        topics.dedup();
        let metadata = self.metadata(Some(&topics))?;
        let brokers = Links::brokers(&metadata);
        let leaders: HashMap<(&str, i32), i32> = metadata
            .topics
            .iter()
            .filter_map(|t| Some((t.name.as_ref()?.0.as_str(), t)))
            .flat_map(|(name, t)| t.partitions.iter().map(move |p| ((name, p.partition_index), p.leader_id.0)))
            .collect();
        let mut by_leader: BTreeMap<&str, BTreeMap<&str, Vec<i32>>> = BTreeMap::new();
        let mut retriable = Vec::new();
        for tp in partitions {
            let leader = leaders.get(&(tp.topic.as_str(), tp.partition)).and_then(|id| brokers.get(id));
            match leader {
                Some(address) => by_leader.entry(address).or_default().entry(&tp.topic).or_default().push(tp.partition),
                // No leader (an election under way), or a partition the
                // metadata does not have yet: asked again.
                None => retriable.push(tp.clone()),
            }
        }
        let mut found = HashMap::with_capacity(partitions.len());
        for (address, topics) in by_leader {
            let request = list_offsets_request(&topics, timestamp, isolation_level);
            let answer: Result<ListOffsetsResponse> =
                self.links.on(address, self.timeout, |link| link.call(&request, LIST_OFFSETS_VERSION, self.timeout));
            let answer = match answer {
                Ok(answer) => answer,
                Err(e) if e.is_retriable() => {
                    self.links.drop_link(address);
                    tracing::debug!(error = %e, "listing offsets; asking again");
                    for (topic, ps) in topics {
                        retriable.extend(ps.into_iter().map(|p| TopicPartition::new(topic, p)));
                    }
                    continue;
                }
                Err(e) => return Err(e),
            };
            for t in answer.topics {
                for p in t.partitions {
                    let key = TopicPartition::new(t.name.0.as_str(), p.partition_index);
                    match p.error_code {
                        0 if p.offset >= 0 => _ = found.insert(key, p.offset),
                        0 => {}
                        code if retriable_code(code) => retriable.push(key),
                        _ => {}
                    }
                }
            }
        }
        Ok((found, retriable))
    }

    fn wire_watermarks(&self, partitions: &[TopicPartition]) -> Result<WatermarkMap> {
        let low = self.list_offsets(partitions, -2)?;
        let mut high = self.list_offsets(partitions, -1)?;
        Ok(low.into_iter().filter_map(|(key, l)| high.remove(&key).map(|h| (key, (l, h)))).collect())
    }
}

impl BrokerAdmin for WireAdmin {
    fn partition_count(&self, topic: &str) -> Result<Option<i32>> {
        self.with_backend(|a| a.wire_partition_count(topic), |a| a.partition_count(topic))
    }
    fn topics(&self) -> Result<HashMap<String, i32>> {
        self.with_backend(Self::wire_topics, Admin::topics)
    }
    fn leaders(&self, topic: &str) -> Result<HashMap<i32, i32>> {
        self.with_backend(|a| a.wire_leaders(topic), |a| a.leaders(topic))
    }
    fn watermarks(&self, partitions: &[TopicPartition]) -> Result<WatermarkMap> {
        self.with_backend(|a| a.wire_watermarks(partitions), |a| a.watermarks(partitions))
    }
    fn list_groups(&self) -> Result<Vec<GroupListing>> {
        self.with_backend(Self::wire_list_groups, Admin::list_groups)
    }
    fn describe_groups(&self, groups: &[String]) -> Result<Vec<GroupDescription>> {
        self.with_backend(|a| a.wire_describe_groups(groups), |a| a.describe_groups(groups))
    }
    fn group_offsets(&self, groups: &[String]) -> Result<Vec<FetchedOffsets>> {
        self.with_backend(|a| a.wire_group_offsets(groups), |a| a.group_offsets(groups))
    }
}
/// ListOffsets of `topics`' partitions (by topic) at `timestamp` (-1:
/// latest, -2: earliest), reading as `isolation_level` says:
/// read_uncommitted's latest is the high watermark, the log end Kafka's own
/// tools report; read_committed's the last stable offset.
fn list_offsets_request(topics: &BTreeMap<&str, Vec<i32>>, timestamp: i64, isolation_level: i8) -> ListOffsetsRequest {
    let partition = |p: &i32| {
        ListOffsetsPartition::default().with_partition_index(*p).with_current_leader_epoch(-1).with_timestamp(timestamp)
    };
    let topic = |(topic, ps): (&&str, &Vec<i32>)| {
        ListOffsetsTopic::default()
            .with_name(TopicName(StrBytes::from_string((*topic).to_owned())))
            .with_partitions(ps.iter().map(partition).collect())
    };
    ListOffsetsRequest::default()
        .with_replica_id((-1).into())
        .with_isolation_level(isolation_level)
        .with_topics(topics.iter().map(topic).collect())
}
