//! A Burrow-compatible HTTP API (`/v3/kafka/…`): the JSON shapes of
//! linkedin/Burrow's HTTP server, so that Burrow's clients (BurrowUI,
//! burrow-dashboard, burrow-exporter, …) read kshard unchanged. Each cluster
//! is served under its name in `clusters:` ([`CLUSTER`] without). Built from
//! each cluster's monitor; pure.
//!
//! | path | Burrow's answer |
//! | --- | --- |
//! | `/v3/kafka` | the clusters |
//! | `/v3/kafka/{cluster}` | the cluster module's settings |
//! | `/v3/kafka/{cluster}/topic` | the topics |
//! | `/v3/kafka/{cluster}/topic/{topic}` | each partition's end offset |
//! | `/v3/kafka/{cluster}/consumer` | the groups |
//! | `/v3/kafka/{cluster}/consumer/{group}` | each partition's recent commits, owner and lag |
//! | `/v3/kafka/{cluster}/consumer/{group}/status` | the group's status, partitions WARN or worse |
//! | `/v3/kafka/{cluster}/consumer/{group}/lag` | the same with every partition |

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::Serialize;

use crate::consumer_status::{Commit, Status, StatusSettings};
use crate::monitor::Monitor;

/// The cluster's name in the API when the configuration has no `clusters:`.
pub const CLUSTER: &str = "local";

/// `request` in every answer.
#[derive(Debug, Clone, Serialize)]
pub struct RequestInfo {
    /// The path asked for.
    pub url: String,
    /// The `Host` the client used.
    pub host: String,
}

/// An answer: Burrow's envelope (`error`, `message`, `request`) around a body.
#[derive(Debug, Serialize)]
pub struct Answer<T: Serialize> {
    /// False unless this is an error.
    pub error: bool,
    /// What was returned, in Burrow's words.
    pub message: String,
    /// The body's fields, at the top level as in Burrow.
    #[serde(flatten)]
    pub body: T,
    /// The request.
    pub request: RequestInfo,
}

/// No body (errors).
#[derive(Debug, Serialize)]
pub struct Empty {}

/// `/v3/kafka`.
#[derive(Debug, Serialize)]
pub struct Clusters {
    /// The clusters.
    pub clusters: Vec<String>,
}

/// `/v3/kafka/{cluster}`.
#[derive(Debug, Serialize)]
pub struct ClusterDetail {
    /// The cluster module.
    pub module: ClusterModule,
}

/// Burrow's cluster module settings, as far as kshard has them.
#[derive(Debug, Serialize)]
pub struct ClusterModule {
    /// Burrow's class name.
    #[serde(rename = "class-name")]
    pub class_name: String,
    /// The bootstrap servers.
    pub servers: Vec<String>,
    /// Seconds between topic refreshes.
    #[serde(rename = "topic-refresh")]
    pub topic_refresh: i64,
    /// Seconds between offset refreshes.
    #[serde(rename = "offset-refresh")]
    pub offset_refresh: i64,
}

/// `/v3/kafka/{cluster}/topic` and `…/consumer`.
#[derive(Debug, Serialize)]
pub struct Topics {
    /// The topics.
    pub topics: Vec<String>,
}

/// `/v3/kafka/{cluster}/consumer`.
#[derive(Debug, Serialize)]
pub struct Consumers {
    /// The groups.
    pub consumers: Vec<String>,
}

/// `/v3/kafka/{cluster}/topic/{topic}`.
#[derive(Debug, Serialize)]
pub struct TopicOffsets {
    /// Each partition's end offset (high watermark), by partition id.
    pub offsets: Vec<i64>,
}

/// One stored commit (`ConsumerOffset`).
#[derive(Debug, Clone, Copy, Serialize)]
pub struct ConsumerOffset {
    /// The committed offset.
    pub offset: i64,
    /// When it was committed, ms since the epoch.
    pub timestamp: i64,
    /// The lag when it was seen.
    pub lag: i64,
}

impl From<Commit> for ConsumerOffset {
    fn from(c: Commit) -> Self {
        ConsumerOffset { offset: c.offset, timestamp: c.timestamp_ms, lag: c.lag }
    }
}

/// One partition of `/v3/kafka/{cluster}/consumer/{group}` (`ConsumerPartition`).
#[derive(Debug, Serialize)]
pub struct ConsumerPartition {
    /// The recent commits, oldest first.
    pub offsets: Vec<ConsumerOffset>,
    /// The host of the member that owns the partition, if known.
    pub owner: String,
    /// That member's client id, if known.
    pub client_id: String,
    /// Lag now.
    #[serde(rename = "current-lag")]
    pub current_lag: i64,
}

/// `/v3/kafka/{cluster}/consumer/{group}`: per topic, partitions by id
/// (`null` for a partition without commits).
#[derive(Debug, Serialize)]
pub struct ConsumerDetail {
    /// The topics.
    pub topics: BTreeMap<String, Vec<Option<ConsumerPartition>>>,
}

/// One partition's status (`PartitionStatus`).
#[derive(Debug, Clone, Serialize)]
pub struct PartitionStatus {
    /// The topic.
    pub topic: String,
    /// The partition.
    pub partition: i32,
    /// The owner's host, if known.
    pub owner: String,
    /// Its status.
    pub status: &'static str,
    /// The oldest commit kept.
    pub start: Option<ConsumerOffset>,
    /// The newest commit kept.
    pub end: Option<ConsumerOffset>,
    /// Lag now.
    pub current_lag: i64,
    /// Commits kept / the window (1.0 when full).
    pub complete: f32,
}

/// A group's status (`ConsumerGroupStatus`).
#[derive(Debug, Serialize)]
pub struct GroupStatus {
    /// The cluster.
    pub cluster: String,
    /// The group.
    pub group: String,
    /// OK, WARN or ERR (NOTFOUND for a group kshard does not know).
    pub status: &'static str,
    /// The share of partitions whose window is full.
    pub complete: f32,
    /// The partitions (`…/status`: WARN or worse; `…/lag`: all).
    pub partitions: Vec<PartitionStatus>,
    /// Partitions with a committed offset.
    pub partition_count: usize,
    /// The partition with the most lag.
    pub maxlag: Option<PartitionStatus>,
    /// The sum of the partitions' lag.
    pub totallag: i64,
}

/// `…/status` and `…/lag`.
#[derive(Debug, Serialize)]
pub struct StatusBody {
    /// The group's status.
    pub status: GroupStatus,
}

/// Every exported group, as of the last refresh.
pub fn consumers(monitor: &Monitor) -> Consumers {
    Consumers { consumers: monitor.snapshot().names().map(ToString::to_string).collect() }
}

/// Every topic with watermarks.
pub fn topics(monitor: &Monitor) -> Topics {
    let watermarks = &monitor.snapshot().watermarks;
    Topics { topics: watermarks.topics().map(|(t, _)| t.to_owned()).collect() }
}

/// A topic's end offsets, `None` for a topic kshard has no watermarks of.
pub fn topic_offsets(monitor: &Monitor, topic: &str) -> Option<TopicOffsets> {
    let snapshot = monitor.snapshot();
    let watermarks = &snapshot.watermarks;
    let (_, partitions) = watermarks.topics().find(|(t, _)| *t == topic)?;
    Some(TopicOffsets { offsets: partitions.iter().map(|w| w.map_or(0, |w| w.high)).collect() })
}

/// One partition as the group's detail and status need it.
struct Seen {
    topic: Arc<str>,
    partition: i32,
    lag: i64,
    commits: Vec<ConsumerOffset>,
    status: Status,
    owner: String,
    client_id: String,
}

/// The group's partitions with lag (those with watermarks), as the last
/// refresh's snapshot has them, or `None` for a group kshard does not know.
fn seen(monitor: &Monitor, group: &str) -> Option<Vec<Seen>> {
    let (snapshot, derived) = (monitor.snapshot(), monitor.derived());
    let g = snapshot.group(group, &derived)?;
    let owners = g.owners();
    let owner = |topic: &Arc<str>, partition: i32| {
        owners
            .get(&(Arc::clone(topic), partition))
            .map_or((String::new(), String::new()), |o| (o.host.to_string(), o.client_id.to_string()))
    };
    let mut parts = Vec::new();
    for p in &g.partitions {
        let Some(lag) = p.lag() else { continue };
        let (owner, client_id) = owner(&p.topic, p.partition);
        parts.push(Seen {
            topic: Arc::clone(&p.topic),
            partition: p.partition,
            lag,
            commits: derived
                .window(&g.name, &p.topic, p.partition)
                .map(|w| w.commits().map(Into::into).collect())
                .unwrap_or_default(),
            status: p.status,
            owner,
            client_id,
        });
    }
    // A share group's partitions: Kafka's share lag, no commits (it makes none).
    for s in &g.share {
        let Some(lag) = s.lag else { continue };
        let (owner, client_id) = owner(&s.row.topic, s.row.partition);
        let (topic, partition) = (Arc::clone(&s.row.topic), s.row.partition);
        parts.push(Seen { topic, partition, lag, commits: Vec::new(), status: Status::Ok, owner, client_id });
    }
    parts.sort_by(|a, b| (&*a.topic, a.partition).cmp(&(&*b.topic, b.partition)));
    Some(parts)
}

/// `/v3/kafka/{cluster}/consumer/{group}`, `None` for an unknown group.
pub fn consumer_detail(monitor: &Monitor, group: &str) -> Option<ConsumerDetail> {
    let mut topics: BTreeMap<String, Vec<Option<ConsumerPartition>>> = BTreeMap::new();
    for s in seen(monitor, group)? {
        let partitions = topics.entry(s.topic.to_string()).or_default();
        let index = usize::try_from(s.partition).unwrap_or(0);
        if partitions.len() <= index {
            partitions.resize_with(index + 1, || None);
        }
        partitions[index] =
            Some(ConsumerPartition { offsets: s.commits, owner: s.owner, client_id: s.client_id, current_lag: s.lag });
    }
    Some(ConsumerDetail { topics })
}

/// `…/status` (`all` false: partitions WARN or worse) and `…/lag` (`all`);
/// NOTFOUND for an unknown group. `cluster` is the cluster's name in the API.
pub fn group_status(monitor: &Monitor, cluster: &str, group: &str, all: bool) -> GroupStatus {
    let window = StatusSettings::default().window.max(1) as f32;
    let Some(seen) = seen(monitor, group) else {
        return GroupStatus {
            cluster: cluster.to_owned(),
            group: group.to_owned(),
            status: "NOTFOUND",
            complete: 0.0,
            partitions: Vec::new(),
            partition_count: 0,
            maxlag: None,
            totallag: 0,
        };
    };
    let partitions: Vec<PartitionStatus> = seen
        .iter()
        .map(|s| PartitionStatus {
            topic: s.topic.to_string(),
            partition: s.partition,
            owner: s.owner.clone(),
            status: s.status.name(),
            start: s.commits.first().copied(),
            end: s.commits.last().copied(),
            current_lag: s.lag,
            complete: (s.commits.len() as f32 / window).min(1.0),
        })
        .collect();
    let complete_count = partitions.iter().filter(|p| p.complete >= 1.0).count();
    let maxlag = partitions.iter().max_by_key(|p| p.current_lag).cloned();
    GroupStatus {
        cluster: cluster.to_owned(),
        group: group.to_owned(),
        status: Status::of_group(seen.iter().map(|s| s.status)).name(),
        complete: if partitions.is_empty() { 0.0 } else { complete_count as f32 / partitions.len() as f32 },
        partition_count: partitions.len(),
        totallag: crate::watermarks::total(partitions.iter().map(|p| p.current_lag)),
        maxlag,
        partitions: partitions.into_iter().filter(|p| all || p.status != "OK").collect(),
    }
}
