//! What another exporter's names show, gathered in one pass over the
//! refresh's snapshot: each group-partition with its committed offset, lag, lag in
//! seconds, status and owner; each group with its members; each partition
//! with its watermarks. The profiles' writers pick from it.

use std::collections::HashMap;
use std::sync::Arc;

use crate::consumer_status::Status;
use crate::monitor::Monitor;
use crate::snapshot::{GroupLag, LagSnapshot};
use crate::watermarks::Watermarks;

pub(super) use crate::snapshot::Owner;

/// One group-partition with a committed offset and watermarks.
pub(super) struct PartitionRow {
    pub(super) group: Arc<str>,
    pub(super) topic: Arc<str>,
    pub(super) partition: i32,
    pub(super) offset: i64,
    pub(super) lag: i64,
    /// `None` when the time of the first record not consumed is unknown.
    pub(super) lag_seconds: Option<f64>,
    pub(super) status: Status,
    /// Its member (kafka_lag_exporter profile only: `None` otherwise).
    pub(super) owner: Option<Owner>,
}

/// One group.
pub(super) struct GroupRow {
    pub(super) group: Arc<str>,
    /// `None` when the members are unknown (admin-API mode).
    pub(super) members: Option<usize>,
    /// Its worst partition's status.
    pub(super) status: Status,
}

/// Everything the profiles' writers show.
pub(super) struct ProfileRows {
    /// Group by group, topic by topic, partition by partition.
    pub(super) partitions: Vec<PartitionRow>,
    pub(super) groups: Vec<GroupRow>,
    /// (topic, partition, low, high), for every partition with watermarks.
    pub(super) watermarks: Vec<(Arc<str>, i32, i64, i64)>,
    /// (group, topic, partition): partitions with watermarks of a topic the
    /// group committed on, without a commit of their own (kafka_exporter
    /// shows them at -1, Burrow with lag 0).
    pub(super) uncommitted: Vec<(Arc<str>, Arc<str>, i32)>,
}

impl ProfileRows {
    /// The rows of every group and topic of `snapshot` (the filters applied
    /// there), with what `profile` shows: the partitions without a commit of
    /// topics a group committed on (kafka_exporter, Burrow), and each
    /// partition's owner (kafka-lag-exporter).
    pub(super) fn collect(m: &Monitor, snapshot: &LagSnapshot, profile: super::Profile) -> Self {
        let uncommitted = matches!(profile, super::Profile::KafkaExporter | super::Profile::Burrow);
        let with_owners = profile == super::Profile::KafkaLagExporter;
        let (watermarks, now_ms) = (&snapshot.watermarks, m.epoch_ms());
        let mut rows =
            ProfileRows { partitions: Vec::new(), groups: Vec::new(), watermarks: Vec::new(), uncommitted: Vec::new() };
        let derived = m.derived();
        for g in snapshot.groups(&derived).filter(|g| !g.share_only) {
            let owners = if with_owners { g.owners() } else { HashMap::new() };
            for p in &g.partitions {
                let Some(lag) = p.lag() else { continue };
                rows.partitions.push(PartitionRow {
                    group: Arc::clone(&g.name),
                    topic: Arc::clone(&p.topic),
                    partition: p.partition,
                    offset: p.committed_offset,
                    lag,
                    lag_seconds: p.lag_seconds(now_ms).map(|(s, _)| s),
                    status: p.status,
                    owner: owners.get(&(Arc::clone(&p.topic), p.partition)).cloned(),
                });
            }
            if uncommitted {
                rows.uncommitted.extend(uncommitted_of(&g, watermarks));
            }
            rows.groups.push(GroupRow {
                group: Arc::clone(&g.name),
                // No group metadata: a group that only commits, without members.
                members: g.info.as_ref().map_or(Some(0), |i| i.members.as_ref().map(Vec::len)),
                status: g.status,
            });
        }
        for (topic, partitions) in watermarks.topics() {
            if !m.settings().topics.allows(topic) {
                continue;
            }
            let topic: Arc<str> = Arc::from(topic);
            for (p, w) in partitions.iter().enumerate() {
                if let Some(w) = w {
                    rows.watermarks.push((Arc::clone(&topic), p as i32, w.low, w.high));
                }
            }
        }
        rows
    }
}

/// The partitions with watermarks of each topic `g` committed on that have
/// no commit of their own: (group, topic, partition).
fn uncommitted_of(g: &GroupLag, watermarks: &Watermarks) -> Vec<(Arc<str>, Arc<str>, i32)> {
    let mut out = Vec::new();
    for of_topic in g.by_topic() {
        let topic = &of_topic[0].topic;
        let slots = watermarks.of_topic(topic);
        let mut has_commit = vec![false; slots.len()];
        for p in of_topic {
            if let Some(slot) = usize::try_from(p.partition).ok().and_then(|i| has_commit.get_mut(i)) {
                *slot = true;
            }
        }
        for (p, w) in slots.iter().enumerate() {
            if w.is_some() && !has_commit[p] {
                out.push((Arc::clone(&g.name), Arc::clone(topic), p as i32));
            }
        }
    }
    out
}

/// Writes the gauge family `name` with one sample per item: its labels and
/// value as `sample` gives them (`None`: no sample for that item).
pub(super) fn gauges<T, K, V>(
    e: &mut prometheus_client::encoding::DescriptorEncoder<'_>,
    name: &str,
    help: &str,
    items: impl IntoIterator<Item = T>,
    mut sample: impl FnMut(T) -> Option<(Vec<(K, String)>, V)>,
) -> super::Encoded
where
    K: prometheus_client::encoding::EncodeLabelKey,
    V: prometheus_client::encoding::EncodeGaugeValue + std::fmt::Debug,
{
    use prometheus_client::encoding::EncodeMetric;
    let mut family = e.encode_descriptor(name, help, None, prometheus_client::metrics::MetricType::Gauge)?;
    for item in items {
        if let Some((labels, value)) = sample(item) {
            prometheus_client::metrics::gauge::ConstGauge::new(value).encode(family.encode_family(&labels)?)?;
        }
    }
    Ok(())
}

/// Per (group, topic), in the order they first come, the sum of the values.
pub(super) fn per_group_topic<'a>(
    values: impl IntoIterator<Item = (&'a str, &'a str, i64)>,
) -> Vec<(&'a str, &'a str, i64)> {
    let mut index: HashMap<(&str, &str), usize> = HashMap::new();
    let mut sums: Vec<(&str, &str, i64)> = Vec::new();
    for (group, topic, value) in values {
        let i = *index.entry((group, topic)).or_insert_with(|| {
            sums.push((group, topic, 0));
            sums.len() - 1
        });
        sums[i].2 = sums[i].2.saturating_add(value);
    }
    sums
}
