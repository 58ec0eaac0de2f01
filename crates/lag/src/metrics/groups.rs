//! The groups' series: lag per partition and topic, commits, metadata,
//! members and assignments. They are collected from the refresh's snapshot
//! in one pass ([`Rows::collect`]), then written family by family (the
//! format wants each family's samples together).

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;

use super::share_groups::ShareRows;
use super::{Encoded, itoa_buf};
use crate::consumer_status::Status;
use crate::derived::Motion;
use crate::filter::NameFilter;
use crate::monitor::{Granularity, Monitor};
use crate::snapshot::{GroupLag, LagSnapshot, PartitionLag};

/// (group, topic, partition, seconds, method).
type PartitionSeconds = (Arc<str>, Arc<str>, i32, f64, &'static str);

/// One group's metadata, as exported.
struct InfoRow {
    group: Arc<str>,
    /// The coordinator's broker id, empty when unknown.
    coordinator: String,
    protocol: Arc<str>,
    protocol_type: Arc<str>,
    state: Arc<str>,
    /// `None` when the members are unknown (admin-API mode): no member series.
    members: Option<i64>,
    empty_members: i64,
}

/// Per group and topic, what the group's members are assigned.
#[derive(Default)]
struct TopicAssignment {
    members: i64,
    partitions: i64,
}

/// What the group families show, gathered in one pass over the units.
/// Aggregation is per group, so no map keyed by (group, topic) strings is needed.
#[derive(Default)]
pub(super) struct Rows {
    /// The granularity is per partition.
    per_partition: bool,
    /// Commit age, rates and catch-up per partition too (`motion_granularity`).
    motion_per_partition: bool,
    /// Empty unless the granularity is per partition.
    partition_lag: Vec<(Arc<str>, Arc<str>, i32, i64)>,
    /// (group, topic, lag, committed offset sum).
    topic_lag: Vec<(Arc<str>, Arc<str>, i64, i64)>,
    /// (group, topic, partition, seconds, method); per-partition granularity only.
    partition_lag_seconds: Vec<PartitionSeconds>,
    /// (group, topic, the most seconds over its partitions).
    topic_max_lag_seconds: Vec<(Arc<str>, Arc<str>, f64)>,
    /// (group, topic, partition, motion); per-partition granularity only.
    partition_motion: Vec<(Arc<str>, Arc<str>, i32, Motion)>,
    /// (group, topic, the oldest last commit over its partitions, in seconds).
    topic_max_commit_age: Vec<(Arc<str>, Arc<str>, f64)>,
    commits: Vec<(Arc<str>, u64)>,
    /// Each group's status (Burrow's rules), of the partitions with watermarks.
    status: Vec<(Arc<str>, Status)>,
    /// (group, topic, partition, records) for committed offsets below the low
    /// watermark: records retention deleted before the group read them.
    records_lost: Vec<(Arc<str>, Arc<str>, i32, i64)>,
    info: Vec<InfoRow>,
    assignments: Vec<(Arc<str>, Arc<str>, TopicAssignment)>,
    /// Group-partitions whose per-partition series `max_partition_series` left out.
    dropped: usize,
}

/// A group-partition by the addresses of its interned names: every row of
/// one collect shares the unit's `Arc`s, so this identifies it without
/// hashing strings.
type RowKey = (usize, usize, i32);

fn row_key(group: &Arc<str>, topic: &Arc<str>, partition: i32) -> RowKey {
    (Arc::as_ptr(group).cast::<u8>() as usize, Arc::as_ptr(topic).cast::<u8>() as usize, partition)
}

impl Rows {
    /// The rows of every group and topic of `snapshot` (the filters applied
    /// there); share groups known by their state alone are the share
    /// families' ([`ShareRows`]).
    pub(super) fn collect(m: &Monitor, snapshot: &LagSnapshot) -> Self {
        let settings = m.settings();
        let per_partition = settings.granularity == Granularity::Partition;
        let motion_per_partition = per_partition && settings.motion_granularity == Granularity::Partition;
        let mut rows = Rows { per_partition, motion_per_partition, ..Rows::default() };
        let now_ms = m.epoch_ms();
        let derived = m.derived();
        for g in snapshot.groups(&derived).filter(|g| !g.share_only) {
            rows.group(&g, &settings.topics, now_ms);
        }
        rows
    }

    /// One group's rows: its partitions topic by topic (those with
    /// watermarks), its metadata and its members' assignments.
    fn group(&mut self, g: &GroupLag, topics: &NameFilter, now_ms: i64) {
        let group = &g.name;
        self.commits.push((Arc::clone(group), g.commits));
        for of_topic in g.by_topic() {
            self.topic(group, &of_topic[0].topic, of_topic, now_ms);
        }
        self.status.push((Arc::clone(group), g.status));
        let coordinator = g.coordinator.map(|c| c.to_string()).unwrap_or_default();
        let Some(gi) = &g.info else {
            // Offsets without group metadata (a client that commits
            // without joining): Kafka lists it Empty, without members,
            // and so do kminion's info and members series.
            self.info.push(InfoRow {
                group: Arc::clone(group),
                coordinator,
                protocol: Arc::from(""),
                protocol_type: Arc::from(""),
                state: Arc::from("Empty"),
                members: Some(0),
                empty_members: 0,
            });
            return;
        };
        let empty = gi.members().iter().filter(|mm| mm.assignment.iter().all(|(_, p)| p.is_empty())).count();
        self.info.push(InfoRow {
            group: Arc::clone(group),
            coordinator,
            protocol: gi.protocol.clone().unwrap_or_else(|| Arc::from("")),
            protocol_type: Arc::clone(&gi.protocol_type),
            state: Arc::from(gi.state()),
            members: gi.members.as_ref().map(|m| m.len() as i64),
            empty_members: empty as i64,
        });
        let mut per_topic: BTreeMap<&Arc<str>, TopicAssignment> = BTreeMap::new();
        for member in gi.members() {
            for (topic, partitions) in &member.assignment {
                let a = per_topic.entry(topic).or_default();
                a.members += 1;
                a.partitions += partitions.len() as i64;
            }
        }
        for (topic, a) in per_topic {
            if topics.allows(topic) {
                self.assignments.push((Arc::clone(group), Arc::clone(topic), a));
            }
        }
    }

    /// A group's rows of one topic: `partitions`, those with watermarks.
    fn topic(&mut self, group: &Arc<str>, topic: &Arc<str>, partitions: &[PartitionLag], now_ms: i64) {
        let (mut topic_sum, mut offset_sum, mut any) = (0i64, 0i64, false);
        let mut max_seconds: Option<f64> = None;
        let mut max_age: Option<f64> = None;
        for p in partitions {
            let Some(l) = p.lag() else { continue };
            let (partition, motion) = (p.partition, p.motion(now_ms));
            // The rates only feed per-partition series.
            if self.motion_per_partition {
                self.partition_motion.push((Arc::clone(group), Arc::clone(topic), partition, motion));
            }
            if let Some(age) = motion.commit_age_s {
                max_age = Some(max_age.map_or(age, |a| a.max(age)));
            }
            if let Some((s, method)) = p.lag_seconds(now_ms) {
                max_seconds = Some(max_seconds.map_or(s, |m| m.max(s)));
                if self.per_partition {
                    self.partition_lag_seconds.push((
                        Arc::clone(group),
                        Arc::clone(topic),
                        partition,
                        s,
                        method.name(),
                    ));
                }
            }
            let lost = p.records_lost();
            if lost > 0 {
                self.records_lost.push((Arc::clone(group), Arc::clone(topic), partition, lost));
            }
            if self.per_partition {
                self.partition_lag.push((Arc::clone(group), Arc::clone(topic), partition, l));
            }
            topic_sum = topic_sum.saturating_add(l);
            offset_sum = offset_sum.saturating_add(p.committed_offset);
            any = true;
        }
        if any {
            self.topic_lag.push((Arc::clone(group), Arc::clone(topic), topic_sum, offset_sum));
        }
        if let Some(s) = max_seconds {
            self.topic_max_lag_seconds.push((Arc::clone(group), Arc::clone(topic), s));
        }
        if let Some(a) = max_age {
            self.topic_max_commit_age.push((Arc::clone(group), Arc::clone(topic), a));
        }
    }

    /// Keeps the per-partition rows of the `max` group-partitions that
    /// matter most — the most lag in seconds, then in records — of the
    /// consumer groups' and the share groups' (`share`) together.
    pub(super) fn cap(&mut self, max: usize, share: &mut ShareRows) {
        let share_count = share.ranks().count();
        if self.partition_lag.len() + share_count <= max {
            return;
        }
        let seconds: HashMap<RowKey, f64, foldhash::fast::RandomState> =
            self.partition_lag_seconds.iter().map(|(g, t, p, s, _)| (row_key(g, t, *p), *s)).collect();
        // A share-partition is ranked by its index, with no group-partition key.
        let mut ranked: Vec<(f64, i64, Ranked)> = self
            .partition_lag
            .iter()
            .map(|(g, t, p, l)| {
                let key = row_key(g, t, *p);
                (seconds.get(&key).copied().unwrap_or(-1.0), *l, Ranked::Group(key))
            })
            .chain(share.ranks().enumerate().map(|(i, (s, l))| (s, l, Ranked::Share(i))))
            .collect();
        let most_first = |a: &(f64, i64, Ranked), b: &(f64, i64, Ranked)| b.0.total_cmp(&a.0).then(b.1.cmp(&a.1));
        if max > 0 {
            ranked.select_nth_unstable_by(max - 1, most_first);
        }
        let kept = &ranked[..max];
        let groups: std::collections::HashSet<RowKey, foldhash::fast::RandomState> =
            kept.iter().filter_map(|r| if let Ranked::Group(k) = r.2 { Some(k) } else { None }).collect();
        let shares: std::collections::HashSet<usize, foldhash::fast::RandomState> =
            kept.iter().filter_map(|r| if let Ranked::Share(i) = r.2 { Some(i) } else { None }).collect();
        self.dropped = self.partition_lag.len() + share_count - max;
        self.partition_lag.retain(|(g, t, p, _)| groups.contains(&row_key(g, t, *p)));
        self.partition_lag_seconds.retain(|(g, t, p, _, _)| groups.contains(&row_key(g, t, *p)));
        self.partition_motion.retain(|(g, t, p, _)| groups.contains(&row_key(g, t, *p)));
        share.retain(|i| shares.contains(&i));
    }
}

/// What `max_partition_series` ranks: a consumer group-partition, or the
/// share-partition at an index of [`ShareRows`].
#[derive(Clone, Copy)]
enum Ranked {
    Group(RowKey),
    Share(usize),
}

/// `partition_series_dropped`: group-partitions left without per-partition
/// series by `max_partition_series` at this scrape.
pub(super) fn dropped(e: &mut DescriptorEncoder<'_>, rows: &Rows) -> Encoded {
    if !rows.per_partition {
        return Ok(());
    }
    ConstGauge::new(rows.dropped as i64).encode(e.encode_descriptor(
        "partition_series_dropped",
        "Group-partitions whose per-partition series max_partition_series left out of this scrape (the roll-ups still count them).",
        None,
        MetricType::Gauge,
    )?)
}

/// `kafka_consumer_group_topic_partition_lag` (per-partition granularity only).
pub(super) fn partition_lag(e: &mut DescriptorEncoder<'_>, rows: &Rows) -> Encoded {
    // With topic granularity the family is not exported at all.
    if !rows.per_partition {
        return Ok(());
    }
    let mut family = e.encode_descriptor(
        "kafka_consumer_group_topic_partition_lag",
        "Lag of a group on a partition: high watermark minus committed offset.",
        None,
        MetricType::Gauge,
    )?;
    let mut id = itoa_buf();
    for (group, topic, partition, l) in &rows.partition_lag {
        let pid = id.format(*partition);
        ConstGauge::new(*l).encode(family.encode_family(&[
            ("group_id", &**group),
            ("topic_name", &**topic),
            ("partition_id", pid),
        ])?)?;
    }
    Ok(())
}

/// `kafka_consumer_group_topic_partition_lag_seconds` (per-partition
/// granularity) and `kafka_consumer_group_topic_max_lag_seconds`.
pub(super) fn lag_seconds(e: &mut DescriptorEncoder<'_>, rows: &Rows) -> Encoded {
    if rows.per_partition {
        let mut family = e.encode_descriptor(
            "kafka_consumer_group_topic_partition_lag_seconds",
            "Age of the first record a group has not consumed (0 when caught up); method: record (its timestamp), estimate (from high watermarks seen), next_record, end (only a transaction marker follows).",
            None,
            MetricType::Gauge,
        )?;
        let mut id = itoa_buf();
        for (group, topic, partition, s, method) in &rows.partition_lag_seconds {
            let pid = id.format(*partition);
            ConstGauge::new(*s).encode(family.encode_family(&[
                ("group_id", &**group),
                ("topic_name", &**topic),
                ("partition_id", pid),
                ("method", *method),
            ])?)?;
        }
    }
    let mut family = e.encode_descriptor(
        "kafka_consumer_group_topic_max_lag_seconds",
        "The most lag in seconds of a group over a topic's partitions.",
        None,
        MetricType::Gauge,
    )?;
    for (group, topic, s) in &rows.topic_max_lag_seconds {
        ConstGauge::new(*s).encode(family.encode_family(&[("group_id", &**group), ("topic_name", &**topic)])?)?;
    }
    Ok(())
}

/// What one motion family shows of a group-partition.
type MotionPick = fn(&Motion) -> Option<f64>;

/// Commit age, consumption and production rates and time to catch up, per
/// partition (per-partition granularity), and the oldest commit per topic.
pub(super) fn motion(e: &mut DescriptorEncoder<'_>, rows: &Rows) -> Encoded {
    let families: [(&str, &str, MotionPick); 4] = [
        (
            "kafka_consumer_group_topic_partition_commit_age_seconds",
            "Seconds since the group last committed an offset for the partition.",
            |m| m.commit_age_s,
        ),
        (
            "kafka_consumer_group_topic_partition_consume_rate",
            "Records per second the group consumed, over its window of recent commits.",
            |m| m.velocity.map(|v| v.consumed_per_s),
        ),
        (
            "kafka_consumer_group_topic_partition_produce_rate",
            "Records per second produced to the partition, over the group's window of recent commits.",
            |m| m.velocity.map(|v| v.produced_per_s),
        ),
        (
            "kafka_consumer_group_topic_partition_catch_up_seconds",
            "Seconds until the group's lag is zero at those rates; absent when the lag is not shrinking.",
            |m| m.catch_up_s,
        ),
    ];
    if rows.motion_per_partition {
        let mut id = itoa_buf();
        for (name, help, pick) in families {
            let mut family = e.encode_descriptor(name, help, None, MetricType::Gauge)?;
            for (group, topic, partition, m) in &rows.partition_motion {
                let Some(v) = pick(m) else { continue };
                let pid = id.format(*partition);
                ConstGauge::new(v).encode(family.encode_family(&[
                    ("group_id", &**group),
                    ("topic_name", &**topic),
                    ("partition_id", pid),
                ])?)?;
            }
        }
    }
    let mut family = e.encode_descriptor(
        "kafka_consumer_group_topic_max_commit_age_seconds",
        "Seconds since the group's oldest last commit over a topic's partitions.",
        None,
        MetricType::Gauge,
    )?;
    for (group, topic, a) in &rows.topic_max_commit_age {
        ConstGauge::new(*a).encode(family.encode_family(&[("group_id", &**group), ("topic_name", &**topic)])?)?;
    }
    Ok(())
}

/// `kafka_consumer_group_topic_lag` and `kafka_consumer_group_topic_offset_sum`.
pub(super) fn topic_lag_and_offset_sum(e: &mut DescriptorEncoder<'_>, rows: &Rows) -> Encoded {
    for (name, help, pick) in [
        ("kafka_consumer_group_topic_lag", "Sum of a group's lag over a topic's partitions.", true),
        ("kafka_consumer_group_topic_offset_sum", "Sum of a group's committed offsets over a topic.", false),
    ] {
        let mut family = e.encode_descriptor(name, help, None, MetricType::Gauge)?;
        for (group, topic, l, sum) in &rows.topic_lag {
            let v = if pick { *l } else { *sum };
            ConstGauge::new(v).encode(family.encode_family(&[("group_id", &**group), ("topic_name", &**topic)])?)?;
        }
    }
    Ok(())
}

/// `kafka_consumer_group_status`: Burrow's code, with its name as a label.
pub(super) fn status(e: &mut DescriptorEncoder<'_>, rows: &Rows) -> Encoded {
    let mut family = e.encode_descriptor(
        "kafka_consumer_group_status",
        "A group's status by Burrow's rules over its recent commits: 1 OK, 2 WARN, 3 ERR (a partition STOP, STALL or REWIND).",
        None,
        MetricType::Gauge,
    )?;
    for (group, s) in &rows.status {
        ConstGauge::new(i64::from(s.code()))
            .encode(family.encode_family(&[("group_id", &**group), ("status", s.name())])?)?;
    }
    Ok(())
}

/// `kafka_consumer_group_topic_partition_records_lost`: only partitions that lost some.
pub(super) fn records_lost(e: &mut DescriptorEncoder<'_>, rows: &Rows) -> Encoded {
    let mut family = e.encode_descriptor(
        "kafka_consumer_group_topic_partition_records_lost",
        "Records retention deleted before the group read them: low watermark minus committed offset, where the committed offset is below it.",
        None,
        MetricType::Gauge,
    )?;
    let mut id = itoa_buf();
    for (group, topic, partition, lost) in &rows.records_lost {
        let pid = id.format(*partition);
        ConstGauge::new(*lost).encode(family.encode_family(&[
            ("group_id", &**group),
            ("topic_name", &**topic),
            ("partition_id", pid),
        ])?)?;
    }
    Ok(())
}

/// `kafka_consumer_group_offset_commits`.
pub(super) fn offset_commits(e: &mut DescriptorEncoder<'_>, rows: &Rows) -> Encoded {
    let mut family = e.encode_descriptor(
        "kafka_consumer_group_offset_commits",
        "Offset commits seen for a group: since kshard started reading, or with a data directory since the partition's shard was created (the same on every member).",
        None,
        MetricType::Counter,
    )?;
    for (group, n) in &rows.commits {
        ConstCounter::new(*n).encode(family.encode_family(&[("group_id", &**group)])?)?;
    }
    Ok(())
}

/// `kafka_consumer_group_info`.
pub(super) fn info(e: &mut DescriptorEncoder<'_>, rows: &Rows) -> Encoded {
    let mut family = e.encode_descriptor(
        "kafka_consumer_group_info",
        "Consumer group info; 1 when the group is Stable, else 0 (as kminion).",
        None,
        MetricType::Gauge,
    )?;
    for row in &rows.info {
        ConstGauge::new(i64::from(&*row.state == "Stable")).encode(family.encode_family(&[
            ("group_id", &*row.group),
            ("protocol", &*row.protocol),
            ("protocol_type", &*row.protocol_type),
            ("state", &*row.state),
            ("coordinator_id", row.coordinator.as_str()),
        ])?)?;
    }
    Ok(())
}

/// `kafka_consumer_group_members` and `kafka_consumer_group_empty_members`.
pub(super) fn members(e: &mut DescriptorEncoder<'_>, rows: &Rows) -> Encoded {
    for (name, help, members) in [
        ("kafka_consumer_group_members", "Members of a group.", true),
        ("kafka_consumer_group_empty_members", "Members of a group with no partition assigned.", false),
    ] {
        let mut family = e.encode_descriptor(name, help, None, MetricType::Gauge)?;
        for row in &rows.info {
            let Some(all) = row.members else { continue };
            ConstGauge::new(if members { all } else { row.empty_members })
                .encode(family.encode_family(&[("group_id", &*row.group)])?)?;
        }
    }
    Ok(())
}

/// `kafka_consumer_group_topic_members` and `…_topic_assigned_partitions`.
pub(super) fn topic_assignments(e: &mut DescriptorEncoder<'_>, rows: &Rows) -> Encoded {
    for (name, help, members) in [
        ("kafka_consumer_group_topic_members", "Members of a group assigned partitions of a topic.", true),
        ("kafka_consumer_group_topic_assigned_partitions", "Partitions of a topic assigned in a group.", false),
    ] {
        let mut family = e.encode_descriptor(name, help, None, MetricType::Gauge)?;
        for (group, topic, a) in &rows.assignments {
            ConstGauge::new(if members { a.members } else { a.partitions })
                .encode(family.encode_family(&[("group_id", &**group), ("topic_name", &**topic)])?)?;
        }
    }
    Ok(())
}
