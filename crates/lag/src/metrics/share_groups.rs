//! The share groups' series (KIP-932): per share-partition, Kafka's lag
//! (as `kafka-share-groups --describe`), its age in seconds, the start
//! offset, the records in flight and redelivered, and the records archived
//! and poisoned as counters; per topic, the lag and its most seconds. A share
//! group's metadata and members are in the consumer-group families, with
//! `protocol_type="share"`.

use std::sync::Arc;

use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;

use super::{Encoded, itoa_buf};
use crate::monitor::{Granularity, Monitor};
use crate::share_rows::ShareRow;
use crate::snapshot::LagSnapshot;

/// A share-partition with what the watermarks and record times add.
pub(super) struct Exported {
    row: ShareRow,
    lag: i64,
    seconds: Option<(f64, &'static str)>,
}

/// (group, topic, lag, the most seconds over its partitions).
type TopicRow = (Arc<str>, Arc<str>, i64, Option<f64>);

/// What the share families show, gathered in one pass.
pub(super) struct ShareRows {
    per_partition: bool,
    partitions: Vec<Exported>,
    /// The per-topic roll-ups, of every share-partition (before any cap).
    topics: Vec<TopicRow>,
}

impl ShareRows {
    /// The share-partitions of `snapshot` whose topic has watermarks and
    /// whose state is initialized.
    pub(super) fn collect(m: &Monitor, snapshot: &LagSnapshot) -> Self {
        let now_ms = m.epoch_ms();
        let derived = m.derived();
        let partitions: Vec<Exported> = snapshot
            .share(&derived)
            .filter_map(|s| {
                let seconds = s.written.map(|w| (w.seconds(now_ms), w.method().name()));
                Some(Exported { row: s.row, lag: s.lag?, seconds })
            })
            .collect();
        let topics = roll_up(&partitions);
        ShareRows { per_partition: m.settings().granularity == Granularity::Partition, partitions, topics }
    }

    /// Each exported share-partition's lag in seconds (-1 when unknown) and
    /// in records: how `max_partition_series` ranks it.
    pub(super) fn ranks(&self) -> impl Iterator<Item = (f64, i64)> + '_ {
        self.partitions.iter().map(|x| (x.seconds.map_or(-1.0, |(s, _)| s), x.lag))
    }

    /// Keeps the per-partition rows whose index `keep` accepts.
    pub(super) fn retain(&mut self, keep: impl Fn(usize) -> bool) {
        let mut i = 0;
        self.partitions.retain(|_| {
            i += 1;
            keep(i - 1)
        });
    }
}

/// (group, topic) → (lag, most seconds); the rows are sorted by group and topic.
fn roll_up(partitions: &[Exported]) -> Vec<TopicRow> {
    let mut topics: Vec<TopicRow> = Vec::new();
    for x in partitions {
        let seconds = x.seconds.map(|(s, _)| s);
        match topics.last_mut() {
            Some((g, t, lag, most)) if *g == x.row.group && *t == x.row.topic => {
                *lag = lag.saturating_add(x.lag);
                *most = crate::lag_time::max_seconds(*most, seconds);
            }
            _ => topics.push((Arc::clone(&x.row.group), Arc::clone(&x.row.topic), x.lag, seconds)),
        }
    }
    topics
}

/// What one per-partition family shows of a share-partition.
type Pick = fn(&Exported) -> i64;

/// The per-share-partition gauges (per-partition granularity).
pub(super) fn partitions(e: &mut DescriptorEncoder<'_>, rows: &ShareRows) -> Encoded {
    if !rows.per_partition {
        return Ok(());
    }
    let families: [(&str, &str, Pick); 4] = [
        (
            "kafka_share_group_topic_partition_lag",
            "Records of a partition a share group has not finished: end offset minus share-partition start offset minus the records after it whose delivery is complete (Kafka's, as kafka-share-groups --describe).",
            |x| x.lag,
        ),
        (
            "kafka_share_group_topic_partition_start_offset",
            "The share-partition start offset: every record before it is acknowledged or archived.",
            |x| x.row.start_offset,
        ),
        (
            "kafka_share_group_topic_partition_in_flight",
            "Records after the start offset delivered and not yet acknowledged (available again after a release or a lock timeout).",
            |x| x.row.in_flight as i64,
        ),
        (
            "kafka_share_group_topic_partition_redelivered",
            "Records after the start offset delivered more than once.",
            |x| x.row.redelivered as i64,
        ),
    ];
    let mut id = itoa_buf();
    for (name, help, pick) in families {
        let mut family = e.encode_descriptor(name, help, None, MetricType::Gauge)?;
        for x in &rows.partitions {
            let pid = id.format(x.row.partition);
            let labels = [("group_id", &*x.row.group), ("topic_name", &*x.row.topic), ("partition_id", pid)];
            ConstGauge::new(pick(x)).encode(family.encode_family(&labels)?)?;
        }
    }
    let mut family = e.encode_descriptor(
        "kafka_share_group_topic_partition_lag_seconds",
        "Age of the record at a share group's start offset (0 when nothing is left); method as for consumer groups.",
        None,
        MetricType::Gauge,
    )?;
    for x in &rows.partitions {
        let Some((s, method)) = x.seconds else { continue };
        let pid = id.format(x.row.partition);
        ConstGauge::new(s).encode(family.encode_family(&[
            ("group_id", &*x.row.group),
            ("topic_name", &*x.row.topic),
            ("partition_id", pid),
            ("method", method),
        ])?)?;
    }
    for (name, help, poison) in [
        (
            "kafka_share_group_topic_partition_archived_records",
            "Records a share group archived (rejected, or delivered too often) since kshard first read the partition's state.",
            false,
        ),
        (
            "kafka_share_group_topic_partition_poison_records",
            "Archived records that had reached the delivery count limit (share.delivery.count.limit): poison messages.",
            true,
        ),
    ] {
        let mut family = e.encode_descriptor(name, help, None, MetricType::Counter)?;
        for x in &rows.partitions {
            let pid = id.format(x.row.partition);
            let n = if poison { x.row.poison } else { x.row.archived };
            ConstCounter::new(n).encode(family.encode_family(&[
                ("group_id", &*x.row.group),
                ("topic_name", &*x.row.topic),
                ("partition_id", pid),
            ])?)?;
        }
    }
    Ok(())
}

/// `kafka_share_group_topic_lag` and `…_topic_max_lag_seconds`.
pub(super) fn topics(e: &mut DescriptorEncoder<'_>, rows: &ShareRows) -> Encoded {
    let topics = &rows.topics;
    let mut family = e.encode_descriptor(
        "kafka_share_group_topic_lag",
        "Sum of a share group's lag over a topic's partitions.",
        None,
        MetricType::Gauge,
    )?;
    for (group, topic, lag, _) in topics {
        ConstGauge::new(*lag).encode(family.encode_family(&[("group_id", &**group), ("topic_name", &**topic)])?)?;
    }
    let mut family = e.encode_descriptor(
        "kafka_share_group_topic_max_lag_seconds",
        "The most lag in seconds of a share group over a topic's partitions.",
        None,
        MetricType::Gauge,
    )?;
    for (group, topic, _, most) in topics {
        let Some(s) = most else { continue };
        ConstGauge::new(*s).encode(family.encode_family(&[("group_id", &**group), ("topic_name", &**topic)])?)?;
    }
    Ok(())
}
