//! [`ClusterAdmin`]: what kminion's cluster, broker and topic families show,
//! asked with kshard's own client: the brokers, controller and cluster id
//! and every topic's partitions and replicas (Metadata v9), topics'
//! configuration values (DescribeConfigs v4, for `kafka_topic_info`'s
//! `cleanup_policy`), and the size of every partition on every broker's log
//! directories (DescribeLogDirs v4, asked of each broker).

use std::collections::BTreeMap;
use std::time::Duration;

use kafka_protocol::messages::describe_configs_request::DescribeConfigsResource;
use kafka_protocol::messages::{
    DescribeConfigsRequest, DescribeConfigsResponse, DescribeLogDirsRequest, DescribeLogDirsResponse,
};
use kafka_protocol::protocol::StrBytes;

use crate::client::Client;
use crate::error::{Error, Result};
use crate::wire::links::Links;

/// DescribeConfigs v4: flexible; every broker since Kafka 2.8.
const DESCRIBE_CONFIGS_VERSION: i16 = 4;
/// DescribeLogDirs v4: flexible, with an error code for the whole answer.
const DESCRIBE_LOG_DIRS_VERSION: i16 = 4;
/// A topic's configuration as a resource type.
const TOPIC_RESOURCE: i8 = 2;

/// A broker as the metadata lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BrokerInfo {
    /// Its node id.
    pub id: i32,
    /// Its advertised host.
    pub host: String,
    /// Its advertised port.
    pub port: i32,
    /// Its rack, empty when it has none.
    pub rack: String,
}

/// A topic as the metadata lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicInfo {
    /// Its name.
    pub name: String,
    /// How many partitions it has.
    pub partitions: usize,
    /// The replicas of its first partition (-1 without partitions), as kminion counts.
    pub replication_factor: i32,
    /// The configuration values asked for, by name (`None`: the broker gave none).
    pub configs: BTreeMap<String, Option<String>>,
    /// Each partition's leader and replicas, by partition id.
    pub replicas: Vec<PartitionReplicas>,
}

/// A partition's leader, replicas and in-sync replicas, as the metadata lists them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionReplicas {
    /// The partition.
    pub partition: i32,
    /// Its leader's broker id (-1: none).
    pub leader: i32,
    /// Its replicas, the preferred leader first.
    pub replicas: Vec<i32>,
    /// Its in-sync replicas.
    pub isr: Vec<i32>,
}

/// The bytes on the brokers' log directories.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LogDirSizes {
    /// Each broker's total over its log directories, of the brokers that answered.
    pub by_broker: BTreeMap<i32, i64>,
    /// Each topic's total over every replica on every broker.
    pub by_topic: BTreeMap<String, i64>,
    /// Every broker and log directory answered: `by_topic` is whole.
    pub complete: bool,
}

/// What [`ClusterAdmin::describe`] learns of a cluster.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ClusterInfo {
    /// The cluster id (empty when the broker gives none).
    pub cluster_id: String,
    /// The active controller's id (-1 when unknown).
    pub controller_id: i32,
    /// The brokers.
    pub brokers: Vec<BrokerInfo>,
    /// The topics, internal ones too.
    pub topics: Vec<TopicInfo>,
    /// The log directories' sizes, when asked for.
    pub log_dirs: Option<LogDirSizes>,
}

/// The cluster calls on one cluster.
pub struct ClusterAdmin {
    links: Links,
    timeout: Duration,
}

impl std::fmt::Debug for ClusterAdmin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClusterAdmin").finish_non_exhaustive()
    }
}

impl ClusterAdmin {
    /// Calls on `settings`' brokers, each given `timeout`; `None` where only
    /// librdkafka can connect (GSSAPI, OAUTHBEARER, keystores…).
    pub fn new(client: &Client, timeout: Duration) -> Result<Option<Self>> {
        Ok(Links::new(client)?.map(|links| ClusterAdmin { links, timeout }))
    }

    /// The brokers and topics, each topic's values of `config_keys`, and with
    /// `log_dirs` the sizes on every broker's log directories.
    pub fn describe(&self, config_keys: &[String], log_dirs: bool) -> Result<ClusterInfo> {
        let metadata = self.links.metadata(self.timeout)?;
        let brokers: Vec<BrokerInfo> = metadata
            .brokers
            .iter()
            .map(|b| BrokerInfo {
                id: b.node_id.0,
                host: b.host.to_string(),
                port: b.port,
                rack: b.rack.as_ref().map(ToString::to_string).unwrap_or_default(),
            })
            .collect();
        let mut topics: Vec<TopicInfo> = metadata
            .topics
            .iter()
            .filter(|t| t.error_code == 0)
            .filter_map(|t| {
                let name = t.name.as_ref()?.0.to_string();
                let replication_factor = t.partitions.first().map_or(-1, |p| p.replica_nodes.len() as i32);
                let mut replicas: Vec<PartitionReplicas> = t
                    .partitions
                    .iter()
                    .map(|p| PartitionReplicas {
                        partition: p.partition_index,
                        leader: p.leader_id.0,
                        replicas: p.replica_nodes.iter().map(|b| b.0).collect(),
                        isr: p.isr_nodes.iter().map(|b| b.0).collect(),
                    })
                    .collect();
                replicas.sort_by_key(|p| p.partition);
                Some(TopicInfo {
                    name,
                    partitions: t.partitions.len(),
                    replication_factor,
                    configs: BTreeMap::new(),
                    replicas,
                })
            })
            .collect();
        topics.sort_by(|a, b| a.name.cmp(&b.name));
        if !config_keys.is_empty()
            && !topics.is_empty()
            && let Err(e) = self.topic_configs(&mut topics, config_keys, &brokers)
        {
            // Their values stay unknown (DescribeConfigs not allowed, say):
            // the rest of the answer holds.
            tracing::warn!(error = %e, "DescribeConfigs of the topics failed");
        }
        let log_dirs = if log_dirs { Some(self.log_dirs(&brokers)) } else { None };
        Ok(ClusterInfo {
            cluster_id: metadata.cluster_id.as_ref().map(ToString::to_string).unwrap_or_default(),
            controller_id: metadata.controller_id.0,
            brokers,
            topics,
            log_dirs,
        })
    }

    /// Each topic's values of `keys`, asked of any broker in one request.
    fn topic_configs(&self, topics: &mut [TopicInfo], keys: &[String], brokers: &[BrokerInfo]) -> Result<()> {
        let request = DescribeConfigsRequest::default().with_resources(
            topics
                .iter()
                .map(|t| {
                    DescribeConfigsResource::default()
                        .with_resource_type(TOPIC_RESOURCE)
                        .with_resource_name(StrBytes::from_string(t.name.clone()))
                        .with_configuration_keys(Some(keys.iter().map(|k| StrBytes::from_string(k.clone())).collect()))
                })
                .collect(),
        );
        let address = any_broker(brokers)?;
        let answer: DescribeConfigsResponse = self
            .links
            .on(&address, self.timeout, |link| link.call(&request, DESCRIBE_CONFIGS_VERSION, self.timeout))?;
        let mut by_topic: BTreeMap<String, BTreeMap<String, Option<String>>> = BTreeMap::new();
        for result in answer.results {
            if result.error_code != 0 {
                // That topic's values stay unknown (deleted meanwhile, or not authorized).
                continue;
            }
            by_topic.insert(
                result.resource_name.to_string(),
                result.configs.into_iter().map(|c| (c.name.to_string(), c.value.map(|v| v.to_string()))).collect(),
            );
        }
        for topic in topics {
            if let Some(configs) = by_topic.remove(&topic.name) {
                topic.configs = configs;
            }
        }
        Ok(())
    }

    /// The log directories' sizes, asked of every broker; one that does not
    /// answer leaves its total out and the topics' totals incomplete.
    fn log_dirs(&self, brokers: &[BrokerInfo]) -> LogDirSizes {
        let request = DescribeLogDirsRequest::default().with_topics(None);
        let mut sizes = LogDirSizes { complete: true, ..LogDirSizes::default() };
        for broker in brokers {
            let address = crate::wire::broker_link::broker_address(&broker.host, broker.port);
            let answer: Result<DescribeLogDirsResponse> = self
                .links
                .on(&address, self.timeout, |link| link.call(&request, DESCRIBE_LOG_DIRS_VERSION, self.timeout));
            let answer = match answer {
                Ok(a) if a.error_code == 0 => a,
                Ok(a) => {
                    tracing::warn!(broker = broker.id, error_code = a.error_code, "DescribeLogDirs refused");
                    sizes.complete = false;
                    continue;
                }
                Err(e) => {
                    tracing::warn!(broker = broker.id, error = %e, "DescribeLogDirs failed");
                    self.links.drop_link(&address);
                    sizes.complete = false;
                    continue;
                }
            };
            let mut total = 0i64;
            for dir in answer.results {
                if dir.error_code != 0 {
                    sizes.complete = false;
                    continue;
                }
                // Sizes a broker reports: added without overflow.
                for topic in dir.topics {
                    let size = topic.partitions.iter().map(|p| p.partition_size.max(0)).fold(0i64, i64::saturating_add);
                    let of_topic = sizes.by_topic.entry(topic.name.0.to_string()).or_default();
                    *of_topic = of_topic.saturating_add(size);
                    total = total.saturating_add(size);
                }
            }
            sizes.by_broker.insert(broker.id, total);
        }
        sizes
    }
}

/// The first broker's address, or why there is none.
fn any_broker(brokers: &[BrokerInfo]) -> Result<String> {
    brokers.first().map(|b| crate::wire::broker_link::broker_address(&b.host, b.port)).ok_or_else(|| Error::Refused {
        step: "describing the cluster".into(),
        message: "no broker in the metadata".into(),
    })
}
