//! The `kafka_lag_exporter` profile: seglo/kafka-lag-exporter's names and
//! labels (v0.8) for what kshard knows. Every series also has
//! `cluster_name` (added with the cluster's name when the text is served,
//! `local` without `clusters:`). As kafka-lag-exporter: a group with members
//! shows the partitions assigned to them, with `member_host`, `consumer_id`
//! and `client_id`; a group without shows every committed partition with
//! those labels `unknown`; lag is the high watermark minus the committed
//! offset, at least 0; lag in seconds is NaN while unknown; the sums and
//! maxima are over the partitions shown; the watermark families cover those
//! partitions only. `kafka_consumergroup_poll_time_ms` is the last watermark
//! refresh's duration.

use std::collections::HashSet;
use std::sync::Arc;

use prometheus_client::encoding::DescriptorEncoder;

use super::profile_rows::{PartitionRow, ProfileRows, gauges, per_group_topic};
use super::{Encoded, SelfTimings};

/// The member labels' value for a partition nobody is assigned.
const UNKNOWN: &str = "unknown";

pub(super) fn encode(e: &mut DescriptorEncoder<'_>, rows: &ProfileRows, timings: &SelfTimings) -> Encoded {
    let with_members: HashSet<&str> =
        rows.groups.iter().filter(|g| g.members.is_some_and(|n| n > 0)).map(|g| &*g.group).collect();
    let shown: Vec<&PartitionRow> =
        rows.partitions.iter().filter(|r| r.owner.is_some() || !with_members.contains(&*r.group)).collect();
    let labels = |r: &PartitionRow| {
        let (host, consumer, client) = match &r.owner {
            Some(o) => (o.host.to_string(), o.member_id.to_string(), o.client_id.to_string()),
            None => (UNKNOWN.to_owned(), UNKNOWN.to_owned(), UNKNOWN.to_owned()),
        };
        vec![
            ("group", r.group.to_string()),
            ("topic", r.topic.to_string()),
            ("partition", r.partition.to_string()),
            ("member_host", host),
            ("consumer_id", consumer),
            ("client_id", client),
        ]
    };
    let partitions: HashSet<(&str, i32)> = shown.iter().map(|r| (&*r.topic, r.partition)).collect();
    let watermarks = || rows.watermarks.iter().filter(|(t, p, _, _)| partitions.contains(&(&**t, *p)));
    let tp = |t: &Arc<str>, p: i32| vec![("topic", t.to_string()), ("partition", p.to_string())];
    gauges(e, "kafka_partition_latest_offset", "Latest offset of a partition", watermarks(), |(t, p, _, high)| {
        Some((tp(t, *p), *high))
    })?;
    gauges(e, "kafka_partition_earliest_offset", "Earliest offset of a partition", watermarks(), |(t, p, low, _)| {
        Some((tp(t, *p), *low))
    })?;
    gauges(e, "kafka_consumergroup_group_offset", "Last group consumed offset of a partition", &shown, |r| {
        Some((labels(r), r.offset))
    })?;
    gauges(e, "kafka_consumergroup_group_lag", "Group offset lag of a partition", &shown, |r| {
        Some((labels(r), r.lag.max(0)))
    })?;
    gauges(e, "kafka_consumergroup_group_lag_seconds", "Group time lag of a partition", &shown, |r| {
        Some((labels(r), r.lag_seconds.unwrap_or(f64::NAN)))
    })?;
    // Per group (its rows come together), over the partitions shown: the
    // most lag in records and in seconds, and the sum.
    let mut per_group: Vec<(&str, i64, Option<f64>, i64)> = Vec::new();
    for r in &shown {
        let l = r.lag.max(0);
        match per_group.last_mut() {
            Some((g, max, max_s, sum)) if *g == &*r.group => {
                *max = (*max).max(l);
                *max_s = match (*max_s, r.lag_seconds) {
                    (Some(a), Some(b)) => Some(a.max(b)),
                    (a, b) => a.or(b),
                };
                *sum = sum.saturating_add(l);
            }
            _ => per_group.push((&r.group, l, r.lag_seconds, l)),
        }
    }
    let group = |g: &str| vec![("group", g.to_owned())];
    gauges(e, "kafka_consumergroup_group_max_lag", "Max group offset lag", &per_group, |(g, max, _, _)| {
        Some((group(g), *max))
    })?;
    gauges(e, "kafka_consumergroup_group_max_lag_seconds", "Max group time lag", &per_group, |(g, _, s, _)| {
        Some((group(g), s.unwrap_or(f64::NAN)))
    })?;
    gauges(e, "kafka_consumergroup_group_sum_lag", "Sum of group offset lag", &per_group, |(g, _, _, sum)| {
        Some((group(g), *sum))
    })?;
    gauges(
        e,
        "kafka_consumergroup_group_topic_sum_lag",
        "Sum of group offset lag across topic partitions",
        per_group_topic(shown.iter().map(|r| (&*r.group, &*r.topic, r.lag.max(0)))),
        |(g, t, sum)| Some((vec![("group", g.to_owned()), ("topic", t.to_owned())], sum)),
    )?;
    let poll = *timings.watermark_refresh.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    gauges(e, "kafka_consumergroup_poll_time_ms", "Group time poll time", poll, |d| {
        Some((Vec::<(&str, String)>::new(), d.as_millis().min(i64::MAX as u128) as i64))
    })
}
