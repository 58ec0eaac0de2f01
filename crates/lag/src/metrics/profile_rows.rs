//! What another exporter's names show, gathered in one pass over the
//! monitor: each group-partition with its committed offset, lag, lag in
//! seconds, status and owner; each group with its members; each partition
//! with its watermarks. The profiles' writers pick from it.

use std::collections::HashMap;
use std::sync::Arc;

use crate::consumer_status::Status;
use crate::monitor::Monitor;
use crate::watermarks::{Watermarks, lag};

/// The member a partition is assigned to.
#[derive(Debug, Clone)]
pub(super) struct Owner {
    pub(super) host: Arc<str>,
    pub(super) member_id: Arc<str>,
    pub(super) client_id: Arc<str>,
}

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
    /// The rows of every group and topic the filters allow, with what
    /// `profile` shows: the partitions without a commit of topics a group
    /// committed on (kafka_exporter, Burrow), and each partition's owner
    /// (kafka-lag-exporter).
    pub(super) fn collect(m: &Monitor, watermarks: &Watermarks, profile: super::Profile) -> Self {
        let uncommitted = matches!(profile, super::Profile::KafkaExporter | super::Profile::Burrow);
        let with_owners = profile == super::Profile::KafkaLagExporter;
        let settings = m.settings();
        let derived = m.derived();
        let mut rows =
            ProfileRows { partitions: Vec::new(), groups: Vec::new(), watermarks: Vec::new(), uncommitted: Vec::new() };
        m.units().for_each(|_, unit| {
            for (group, g) in unit.groups() {
                if !settings.groups.allows(group) {
                    continue;
                }
                let mut owners: HashMap<(&str, i32), Owner> = HashMap::new();
                let members = if with_owners { g.info.as_ref().map(|i| i.members()).unwrap_or_default() } else { &[] };
                for member in members {
                    let owner = Owner {
                        host: Arc::from(&*member.client_host),
                        member_id: Arc::from(&*member.member_id),
                        client_id: Arc::from(&*member.client_id),
                    };
                    for (topic, partitions) in &member.assignment {
                        for p in partitions {
                            owners.insert((&**topic, *p), owner.clone());
                        }
                    }
                }
                let mut worst = Status::Ok;
                for (topic, partitions) in g.by_topic() {
                    if !settings.topics.allows(topic) {
                        continue;
                    }
                    let mut committed_partitions = Vec::new();
                    for (partition, committed) in partitions {
                        committed_partitions.push(partition);
                        let Some(w) = watermarks.get(topic, partition) else { continue };
                        let l = lag(w.high, committed.offset);
                        let status = derived.status(group, topic, partition, l);
                        worst = Status::of_group([worst, status]);
                        rows.partitions.push(PartitionRow {
                            group: Arc::clone(group),
                            topic: Arc::clone(topic),
                            partition,
                            offset: committed.offset,
                            lag: l,
                            lag_seconds: derived.lag_seconds(topic, partition, committed.offset, l).map(|(s, _)| s),
                            status,
                            owner: owners.get(&(&**topic, partition)).cloned(),
                        });
                    }
                    if !uncommitted || committed_partitions.is_empty() {
                        continue;
                    }
                    let slots = watermarks.of_topic(topic);
                    let mut has_commit = vec![false; slots.len()];
                    for p in committed_partitions {
                        if let Some(slot) = usize::try_from(p).ok().and_then(|p| has_commit.get_mut(p)) {
                            *slot = true;
                        }
                    }
                    for (p, w) in slots.iter().enumerate() {
                        if w.is_some() && !has_commit[p] {
                            rows.uncommitted.push((Arc::clone(group), Arc::clone(topic), p as i32));
                        }
                    }
                }
                rows.groups.push(GroupRow {
                    group: Arc::clone(group),
                    // No group metadata: a group that only commits, without members.
                    members: g.info.as_ref().map_or(Some(0), |i| i.members.as_ref().map(Vec::len)),
                    status: worst,
                });
            }
        });
        for (topic, partitions) in watermarks.topics() {
            if !settings.topics.allows(topic) {
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
