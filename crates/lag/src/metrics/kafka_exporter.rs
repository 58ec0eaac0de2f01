//! The `kafka_exporter` profile: danielqsj/kafka_exporter's names and labels
//! (the exporter Strimzi bundles) for what kshard knows — the groups'
//! committed offsets and lag per partition and their sums per topic, the
//! groups' members (empty groups at 0), and the partitions' watermarks. As
//! kafka_exporter: lag is the high watermark minus the committed offset; a
//! partition without a commit, of a topic the group committed on, shows
//! offset and lag `-1`, counted in `current_offset_sum` but not in
//! `lag_sum`. `kafka_brokers`, `kafka_broker_info` and the partitions'
//! leader, replica and in-sync replica families come from the cluster
//! worker's metadata (while its answer is fresh). `kafka_exporter_build_info`
//! is always there, current lag or not, as kafka_exporter's: dashboards
//! (Strimzi's until 2024) fill their variables from it.

use super::Encoded;
use super::profile_rows::{ProfileRows, gauges, per_group_topic};
use crate::cluster_view::ClusterSnapshot;
use prometheus_client::encoding::DescriptorEncoder;

pub(super) fn encode(
    e: &mut DescriptorEncoder<'_>,
    rows: &ProfileRows,
    cluster: Option<&ClusterSnapshot>,
    topics: &crate::filter::NameFilter,
) -> Encoded {
    if let Some(cluster) = cluster {
        let brokers = &cluster.info.brokers;
        gauges(e, "kafka_brokers", "Number of Brokers in the Kafka Cluster.", [brokers.len()], |n| {
            Some((Vec::<(&str, String)>::new(), i64::try_from(n).unwrap_or(i64::MAX)))
        })?;
        gauges(e, "kafka_broker_info", "Information about the Kafka Broker.", brokers, |b| {
            Some((vec![("id", b.id.to_string()), ("address", format!("{}:{}", b.host, b.port))], 1i64))
        })?;
        partition_replicas(e, cluster, topics)?;
    }
    topic_offsets(e, rows)?;
    group_offsets(e, rows)
}

/// kafka_exporter's `kafka_exporter_build_info` (Prometheus's Go version
/// collector's labels) for kshard's build: `version` is kshard's, `tags`
/// says `kshard`; what a Go build knows and kshard's does not (`revision`,
/// `branch`, `goversion`) is `unknown`, as the collector has it for a build
/// without them.
pub(super) fn build_info(e: &mut DescriptorEncoder<'_>) -> Encoded {
    let arch = match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        other => other,
    };
    let labels = vec![
        ("branch", "unknown".to_owned()),
        ("goarch", arch.to_owned()),
        ("goos", std::env::consts::OS.to_owned()),
        ("goversion", "unknown".to_owned()),
        ("revision", "unknown".to_owned()),
        ("tags", "kshard".to_owned()),
        ("version", env!("CARGO_PKG_VERSION").to_owned()),
    ];
    let help = "A metric with a constant '1' value labeled by version, revision, branch, goversion from which kafka_exporter was built, and the goos and goarch for the build.";
    gauges(e, "kafka_exporter_build_info", help, [labels], |l| Some((l, 1i64)))
}

/// The topics' partitions and watermarks.
fn topic_offsets(e: &mut DescriptorEncoder<'_>, rows: &ProfileRows) -> Encoded {
    let mut partitions_per_topic: Vec<(&str, i64)> = Vec::new();
    for (topic, _, _, _) in &rows.watermarks {
        match partitions_per_topic.last_mut() {
            Some((t, n)) if *t == &**topic => *n += 1,
            _ => partitions_per_topic.push((topic, 1)),
        }
    }
    gauges(e, "kafka_topic_partitions", "Number of partitions for this Topic", &partitions_per_topic, |(t, n)| {
        Some((vec![("topic", (*t).to_owned())], *n))
    })?;
    let tp = |t: &str, p: i32| vec![("topic", t.to_owned()), ("partition", p.to_string())];
    gauges(
        e,
        "kafka_topic_partition_current_offset",
        "Current Offset of a Broker at Topic/Partition",
        &rows.watermarks,
        |(t, p, _, high)| Some((tp(t, *p), *high)),
    )?;
    gauges(
        e,
        "kafka_topic_partition_oldest_offset",
        "Oldest Offset of a Broker at Topic/Partition",
        &rows.watermarks,
        |(t, p, low, _)| Some((tp(t, *p), *low)),
    )
}

/// The groups' offsets, lag and members.
fn group_offsets(e: &mut DescriptorEncoder<'_>, rows: &ProfileRows) -> Encoded {
    let gtp = |g: &str, t: &str, p: i32| {
        vec![("consumergroup", g.to_owned()), ("topic", t.to_owned()), ("partition", p.to_string())]
    };
    // Committed partitions, then the -1 rows of the uncommitted ones.
    let with_uncommitted = |value: fn(&super::profile_rows::PartitionRow) -> i64| {
        rows.partitions
            .iter()
            .map(move |r| (gtp(&r.group, &r.topic, r.partition), value(r)))
            .chain(rows.uncommitted.iter().map(|(g, t, p)| (gtp(g, t, *p), -1)))
    };
    gauges(
        e,
        "kafka_consumergroup_current_offset",
        "Current Offset of a ConsumerGroup at Topic/Partition",
        with_uncommitted(|r| r.offset),
        Some,
    )?;
    let gt = |g: &str, t: &str| vec![("consumergroup", g.to_owned()), ("topic", t.to_owned())];
    let offset_sums = per_group_topic(
        rows.partitions
            .iter()
            .map(|r| (&*r.group, &*r.topic, r.offset))
            .chain(rows.uncommitted.iter().map(|(g, t, _)| (&**g, &**t, -1))),
    );
    gauges(
        e,
        "kafka_consumergroup_current_offset_sum",
        "Current Offset of a ConsumerGroup at Topic for all partitions",
        offset_sums,
        |(g, t, sum)| Some((gt(g, t), sum)),
    )?;
    gauges(
        e,
        "kafka_consumergroup_lag",
        "Current Approximate Lag of a ConsumerGroup at Topic/Partition",
        with_uncommitted(|r| r.lag),
        Some,
    )?;
    gauges(
        e,
        "kafka_consumergroup_lag_sum",
        "Current Approximate Lag of a ConsumerGroup at Topic for all partitions",
        per_group_topic(rows.partitions.iter().map(|r| (&*r.group, &*r.topic, r.lag))),
        |(g, t, sum)| Some((gt(g, t), sum)),
    )?;
    gauges(e, "kafka_consumergroup_members", "Amount of members in a consumer group", &rows.groups, |g| {
        Some((vec![("consumergroup", g.group.to_string())], i64::try_from(g.members?).unwrap_or(i64::MAX)))
    })
}

/// kafka_exporter's leader and replica families of every topic the filter
/// allows, from the cluster worker's metadata.
fn partition_replicas(
    e: &mut DescriptorEncoder<'_>,
    cluster: &ClusterSnapshot,
    topics: &crate::filter::NameFilter,
) -> Encoded {
    let partitions: Vec<(&str, &kshard_kafka::PartitionReplicas)> = cluster
        .info
        .topics
        .iter()
        .filter(|t| topics.allows(&t.name))
        .flat_map(|t| t.replicas.iter().map(move |p| (t.name.as_str(), p)))
        .collect();
    let tp = |t: &str, p: i32| vec![("topic", t.to_owned()), ("partition", p.to_string())];
    type Pick = fn(&kshard_kafka::PartitionReplicas) -> i64;
    let families: [(&str, &str, Pick); 5] = [
        ("kafka_topic_partition_leader", "Leader Broker ID of this Topic/Partition", |p| i64::from(p.leader)),
        ("kafka_topic_partition_replicas", "Number of Replicas for this Topic/Partition", |p| p.replicas.len() as i64),
        ("kafka_topic_partition_in_sync_replica", "Number of In-Sync Replicas for this Topic/Partition", |p| {
            p.isr.len() as i64
        }),
        ("kafka_topic_partition_leader_is_preferred", "1 if Topic/Partition is using the Preferred Broker", |p| {
            i64::from(p.replicas.first() == Some(&p.leader))
        }),
        ("kafka_topic_partition_under_replicated_partition", "1 if Topic/Partition is under Replicated", |p| {
            i64::from(p.isr.len() < p.replicas.len())
        }),
    ];
    for (name, help, pick) in families {
        gauges(e, name, help, &partitions, |(t, p)| Some((tp(t, p.partition), pick(p))))?;
    }
    Ok(())
}
