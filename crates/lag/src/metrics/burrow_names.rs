//! The `burrow` profile: linkedin/Burrow's Prometheus names and labels for
//! what kshard knows. Every series also has `cluster` (the cluster's name
//! when the text is served, `local` without `clusters:`, as Burrow's HTTP
//! API names it). Statuses are Burrow's numbers: 1 OK, 2 WARN, 3 ERR for a
//! group (its worst partition, STOP, STALL and REWIND counting as ERR); 1 OK,
//! 2 WARN, 4 STOP, 5 STALL, 6 REWIND for a partition. As Burrow, a partition
//! without a commit, of a topic the group committed on, has lag 0. Unlike
//! Burrow, a partition's status and current offset do not wait for ten
//! commits: kshard judges from what it has (see docs/metrics.md).

use prometheus_client::encoding::DescriptorEncoder;

use super::Encoded;
use super::profile_rows::{ProfileRows, gauges};

pub(super) fn encode(e: &mut DescriptorEncoder<'_>, rows: &ProfileRows) -> Encoded {
    let group = |g: &str| vec![("consumer_group", g.to_owned())];
    let mut totals: Vec<(&str, i64)> = Vec::new();
    for r in &rows.partitions {
        match totals.last_mut() {
            Some((g, sum)) if *g == &*r.group => *sum = sum.saturating_add(r.lag.max(0)),
            _ => totals.push((&r.group, r.lag.max(0))),
        }
    }
    let with_partitions: std::collections::HashSet<&str> = totals.iter().map(|(g, _)| *g).collect();
    gauges(
        e,
        "burrow_kafka_consumer_lag_total",
        "The sum of all partition current lag values for the group",
        &totals,
        |(g, sum)| Some((group(g), *sum)),
    )?;
    gauges(
        e,
        "burrow_kafka_consumer_status",
        "The status of the consumer group. It is calculated from the highest status for the individual partitions. Statuses are an index list from NOTFOUND, OK, WARN, or ERR",
        rows.groups.iter().filter(|g| with_partitions.contains(&*g.group)),
        |g| Some((group(&g.group), i64::from(g.status.code()))),
    )?;
    let gtp = |g: &str, t: &str, p: i32| {
        vec![("consumer_group", g.to_owned()), ("topic", t.to_owned()), ("partition", p.to_string())]
    };
    gauges(
        e,
        "burrow_kafka_topic_partition_status",
        "The status of topic partition. It is calculated from the highest status for the individual partitions. Statuses are an index list from OK, WARN, STOP, STALL, REWIND",
        &rows.partitions,
        |r| Some((gtp(&r.group, &r.topic, r.partition), i64::from(r.status.code()))),
    )?;
    gauges(
        e,
        "burrow_kafka_consumer_current_offset",
        "Latest offset that Burrow is storing for this partition",
        &rows.partitions,
        |r| Some((gtp(&r.group, &r.topic, r.partition), r.offset)),
    )?;
    gauges(
        e,
        "burrow_kafka_consumer_partition_lag",
        "Number of messages the consumer group is behind by for a partition as reported by Burrow",
        rows.partitions
            .iter()
            .map(|r| (gtp(&r.group, &r.topic, r.partition), r.lag.max(0)))
            .chain(rows.uncommitted.iter().map(|(g, t, p)| (gtp(g, t, *p), 0))),
        Some,
    )?;
    gauges(
        e,
        "burrow_kafka_topic_partition_offset",
        "Latest offset the topic that Burrow is storing for this partition",
        &rows.watermarks,
        |(t, p, _, high)| Some((vec![("topic", t.to_string()), ("partition", p.to_string())], *high)),
    )
}
