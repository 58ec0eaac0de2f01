//! Prometheus metrics, computed from the monitor's state at each scrape.
//!
//! Names follow kminion's, so existing dashboards work; the prefix is the
//! configured namespace (`kminion` gives kminion's exact names). Group series
//! appear only once the monitor has caught up: before that they would show
//! offsets from the past as if they were current.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::registry::Registry;

use crate::monitor::{Granularity, Monitor};
use crate::watermarks::lag;

/// Durations the exporter measures about itself.
#[derive(Debug, Default)]
pub struct SelfTimings {
    /// How long the last watermark refresh took.
    pub watermark_refresh: Mutex<Option<Duration>>,
    /// How long the last `/metrics` render took.
    pub render: Mutex<Option<Duration>>,
}

/// Renders `/metrics` for a monitor.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    timings: Arc<SelfTimings>,
}

impl Metrics {
    /// Metrics for `monitor`, every name prefixed with `namespace_`.
    pub fn new(namespace: &str, monitor: Arc<Monitor>, timings: Arc<SelfTimings>) -> Self {
        let mut registry = Registry::with_prefix(namespace);
        registry.register_collector(Box::new(LagCollector { monitor, timings: Arc::clone(&timings) }));
        Metrics { registry, timings }
    }

    /// The Prometheus text exposition of every metric.
    pub fn render(&self) -> Result<String, std::fmt::Error> {
        let started = Instant::now();
        let mut out = String::with_capacity(1 << 16);
        prometheus_client::encoding::prometheus_text::encode(&mut out, &self.registry)?;
        *self.timings.render.lock().unwrap_or_else(PoisonError::into_inner) = Some(started.elapsed());
        Ok(out)
    }
}

#[derive(Debug)]
struct LagCollector {
    monitor: Arc<Monitor>,
    timings: Arc<SelfTimings>,
}

fn gauge(encoder: &mut DescriptorEncoder<'_>, name: &str, help: &str, value: i64) -> Result<(), std::fmt::Error> {
    let g = ConstGauge::new(value);
    g.encode(encoder.encode_descriptor(name, help, None, MetricType::Gauge)?)
}

fn counter(encoder: &mut DescriptorEncoder<'_>, name: &str, help: &str, value: u64) -> Result<(), std::fmt::Error> {
    let c = ConstCounter::new(value);
    c.encode(encoder.encode_descriptor(name, help, None, MetricType::Counter)?)
}

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

impl Collector for LagCollector {
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> Result<(), std::fmt::Error> {
        let m = &self.monitor;
        let counters = m.counters();
        {
            let mut up =
                encoder.encode_descriptor("exporter_up", "1 while the exporter runs.", None, MetricType::Gauge)?;
            ConstGauge::new(1).encode(up.encode_family(&[("version", env!("CARGO_PKG_VERSION"))])?)?;
        }
        counter(
            &mut encoder,
            "exporter_offset_consumer_records_consumed",
            "Records read from __consumer_offsets.",
            counters.records.load(Ordering::Relaxed),
        )?;
        counter(
            &mut encoder,
            "admin_api_offset_fetch_errors",
            "Admin-API mode: groups whose OffsetFetch failed at a scrape; their previous offsets are kept.",
            counters.offset_fetch_errors.load(Ordering::Relaxed),
        )?;
        {
            let skipped = [
                ("null_key", counters.null_key.load(Ordering::Relaxed)),
                ("malformed_key", counters.malformed_key.load(Ordering::Relaxed)),
                ("malformed_value", counters.malformed_value.load(Ordering::Relaxed)),
                ("unknown_type", counters.unknown_type.load(Ordering::Relaxed)),
            ];
            let mut family = encoder.encode_descriptor(
                "offsets_records_skipped",
                "Records of __consumer_offsets skipped, by reason.",
                None,
                MetricType::Counter,
            )?;
            for (reason, n) in skipped {
                ConstCounter::new(n).encode(family.encode_family(&[("reason", reason)])?)?;
            }
        }
        let progress = m.progress();
        let ready = m.is_ready();
        gauge(
            &mut encoder,
            "catchup_ready",
            "1 while /ready is 200: caught up with the offsets topic, watermarks refreshed since, and data current.",
            i64::from(ready),
        )?;
        gauge(
            &mut encoder,
            "catchup_offsets_remaining",
            "Offsets of __consumer_offsets left to read to catch up.",
            progress.offsets_remaining,
        )?;
        gauge(
            &mut encoder,
            "catchup_partitions_caught_up",
            "Partitions of __consumer_offsets caught up.",
            progress.partitions_caught_up as i64,
        )?;
        {
            let mut family = encoder.encode_descriptor(
                "offsets_topic_unread_offsets",
                "Offsets of a partition of the offsets topic past the reader's position at the last refresh: \
                 0, or 1 after a transaction marker; more for long means a transaction left open holds back \
                 later commits of that partition.",
                None,
                MetricType::Gauge,
            )?;
            let mut id = itoa_buf();
            for (partition, unread) in m.unread() {
                ConstGauge::new(unread).encode(family.encode_family(&[("partition_id", id.format(partition))])?)?;
            }
        }
        let timings = [
            (
                "watermark_refresh_duration_seconds",
                "Duration of the last watermark refresh.",
                &self.timings.watermark_refresh,
            ),
            ("metrics_render_duration_seconds", "Duration of the previous /metrics render.", &self.timings.render),
        ];
        for (name, help, timing) in timings {
            if let Some(d) = *timing.lock().unwrap_or_else(PoisonError::into_inner) {
                let g = ConstGauge::new(d.as_secs_f64());
                g.encode(encoder.encode_descriptor(name, help, None, MetricType::Gauge)?)?;
            }
        }

        // Watermarks the brokers have not confirmed lately are not current: no
        // series rather than frozen ones.
        let current = m.problem().is_none();
        gauge(
            &mut encoder,
            "data_current",
            "1 while every worker runs and watermarks are recent; 0 when lag would be stale (see /ready).",
            i64::from(current),
        )?;
        if let Some(age) = m.health().watermark_age(std::time::Instant::now()) {
            let g = ConstGauge::new(age.as_secs_f64());
            g.encode(encoder.encode_descriptor(
                "watermarks_age_seconds",
                "Time since the last successful watermark refresh.",
                None,
                MetricType::Gauge,
            )?)?;
        }
        if !current {
            return Ok(());
        }
        let watermarks = m.watermarks();
        for (name, help, high) in [
            (
                "kafka_topic_partition_high_water_mark",
                "High watermark of a partition of a topic some group committed to.",
                true,
            ),
            (
                "kafka_topic_partition_low_water_mark",
                "Low watermark of a partition of a topic some group committed to.",
                false,
            ),
        ] {
            let mut family = encoder.encode_descriptor(name, help, None, MetricType::Gauge)?;
            let mut id = itoa_buf();
            for (topic, partitions) in watermarks.topics() {
                for (p, w) in partitions.iter().enumerate() {
                    if let Some(w) = w {
                        let pid = id.format(p as i32);
                        ConstGauge::new(if high { w.high } else { w.low })
                            .encode(family.encode_family(&[("topic_name", topic), ("partition_id", pid)])?)?;
                    }
                }
            }
        }
        for (name, help, pick) in [
            ("kafka_topic_high_water_mark_sum", "Sum of a topic's partitions' high watermarks.", true),
            ("kafka_topic_low_water_mark_sum", "Sum of a topic's partitions' low watermarks.", false),
        ] {
            let mut family = encoder.encode_descriptor(name, help, None, MetricType::Gauge)?;
            for (topic, partitions) in watermarks.topics() {
                let sum: i64 = partitions.iter().flatten().map(|w| if pick { w.high } else { w.low }).sum();
                ConstGauge::new(sum).encode(family.encode_family(&[("topic_name", topic)])?)?;
            }
        }

        if !ready {
            return Ok(());
        }
        self.encode_groups(&mut encoder, &watermarks)
    }
}

impl LagCollector {
    fn encode_groups(
        &self,
        encoder: &mut DescriptorEncoder<'_>,
        watermarks: &crate::watermarks::Watermarks,
    ) -> Result<(), std::fmt::Error> {
        let m = &self.monitor;
        let settings = m.settings();
        // Collected first, then written family by family (the format wants each
        // family's samples together). Aggregation is per group, so no map keyed
        // by (group, topic) strings is needed.
        let mut partition_lag: Vec<(Arc<str>, Arc<str>, i32, i64)> = Vec::new();
        let mut topic_lag: Vec<(Arc<str>, Arc<str>, i64, i64)> = Vec::new();
        let mut commits: Vec<(Arc<str>, u64)> = Vec::new();
        let mut info: Vec<InfoRow> = Vec::new();
        let mut assignments: Vec<(Arc<str>, Arc<str>, TopicAssignment)> = Vec::new();
        m.for_each_unit(|unit_partition, unit| {
            let coordinator = m.coordinator(unit_partition).map(|c| c.to_string()).unwrap_or_default();
            for (group, g) in unit.groups() {
                if !settings.groups.allows(group) {
                    continue;
                }
                commits.push((Arc::clone(group), g.commits));
                for (topic, partitions) in g.by_topic() {
                    if !settings.topics.allows(topic) {
                        continue;
                    }
                    let (mut topic_sum, mut offset_sum, mut any) = (0, 0, false);
                    for (partition, committed) in partitions {
                        let Some(w) = watermarks.get(topic, partition) else { continue };
                        let l = lag(w.high, committed.offset);
                        if settings.granularity == Granularity::Partition {
                            partition_lag.push((Arc::clone(group), Arc::clone(topic), partition, l));
                        }
                        topic_sum += l;
                        offset_sum += committed.offset;
                        any = true;
                    }
                    if any {
                        topic_lag.push((Arc::clone(group), Arc::clone(topic), topic_sum, offset_sum));
                    }
                }
                if let Some(gi) = &g.info {
                    let empty =
                        gi.members().iter().filter(|mm| mm.assignment.iter().all(|(_, p)| p.is_empty())).count();
                    let protocol = gi.protocol.clone().unwrap_or_else(|| Arc::from(""));
                    info.push(InfoRow {
                        group: Arc::clone(group),
                        coordinator: coordinator.clone(),
                        protocol,
                        protocol_type: Arc::clone(&gi.protocol_type),
                        state: Arc::from(gi.state()),
                        members: gi.members.as_ref().map(|m| m.len() as i64),
                        empty_members: empty as i64,
                    });
                    let mut per_topic: HashMap<&Arc<str>, TopicAssignment, foldhash::fast::RandomState> =
                        HashMap::default();
                    for member in gi.members() {
                        for (topic, partitions) in &member.assignment {
                            let a = per_topic.entry(topic).or_default();
                            a.members += 1;
                            a.partitions += partitions.len() as i64;
                        }
                    }
                    for (topic, a) in per_topic {
                        if settings.topics.allows(topic) {
                            assignments.push((Arc::clone(group), Arc::clone(topic), a));
                        }
                    }
                }
            }
        });

        if settings.granularity == Granularity::Partition {
            let mut family = encoder.encode_descriptor(
                "kafka_consumer_group_topic_partition_lag",
                "Lag of a group on a partition: high watermark minus committed offset.",
                None,
                MetricType::Gauge,
            )?;
            let mut id = itoa_buf();
            for (group, topic, partition, l) in &partition_lag {
                let pid = id.format(*partition);
                ConstGauge::new(*l).encode(family.encode_family(&[
                    ("group_id", &**group),
                    ("topic_name", &**topic),
                    ("partition_id", pid),
                ])?)?;
            }
        }
        for (name, help, pick) in [
            ("kafka_consumer_group_topic_lag", "Sum of a group's lag over a topic's partitions.", true),
            ("kafka_consumer_group_topic_offset_sum", "Sum of a group's committed offsets over a topic.", false),
        ] {
            let mut family = encoder.encode_descriptor(name, help, None, MetricType::Gauge)?;
            for (group, topic, l, sum) in &topic_lag {
                let v = if pick { *l } else { *sum };
                ConstGauge::new(v)
                    .encode(family.encode_family(&[("group_id", &**group), ("topic_name", &**topic)])?)?;
            }
        }
        {
            let mut family = encoder.encode_descriptor(
                "kafka_consumer_group_offset_commits",
                "Offset commits seen for a group since kshard started reading.",
                None,
                MetricType::Counter,
            )?;
            for (group, n) in &commits {
                ConstCounter::new(*n).encode(family.encode_family(&[("group_id", &**group)])?)?;
            }
        }
        {
            let mut family = encoder.encode_descriptor(
                "kafka_consumer_group_info",
                "Consumer group info; 1 when the group is Stable, else 0 (as kminion).",
                None,
                MetricType::Gauge,
            )?;
            for row in &info {
                ConstGauge::new(i64::from(&*row.state == "Stable")).encode(family.encode_family(&[
                    ("group_id", &*row.group),
                    ("protocol", &*row.protocol),
                    ("protocol_type", &*row.protocol_type),
                    ("state", &*row.state),
                    ("coordinator_id", row.coordinator.as_str()),
                ])?)?;
            }
        }
        for (name, help, members) in [
            ("kafka_consumer_group_members", "Members of a group.", true),
            ("kafka_consumer_group_empty_members", "Members of a group with no partition assigned.", false),
        ] {
            let mut family = encoder.encode_descriptor(name, help, None, MetricType::Gauge)?;
            for row in &info {
                let Some(all) = row.members else { continue };
                ConstGauge::new(if members { all } else { row.empty_members })
                    .encode(family.encode_family(&[("group_id", &*row.group)])?)?;
            }
        }
        for (name, help, members) in [
            ("kafka_consumer_group_topic_members", "Members of a group assigned partitions of a topic.", true),
            ("kafka_consumer_group_topic_assigned_partitions", "Partitions of a topic assigned in a group.", false),
        ] {
            let mut family = encoder.encode_descriptor(name, help, None, MetricType::Gauge)?;
            for (group, topic, a) in &assignments {
                ConstGauge::new(if members { a.members } else { a.partitions })
                    .encode(family.encode_family(&[("group_id", &**group), ("topic_name", &**topic)])?)?;
            }
        }
        Ok(())
    }
}

/// A small reusable buffer for formatting partition ids without allocating.
fn itoa_buf() -> IdBuf {
    IdBuf(String::with_capacity(12))
}

struct IdBuf(String);

impl IdBuf {
    fn format(&mut self, n: i32) -> &str {
        use std::fmt::Write;
        self.0.clear();
        // Writing to a String cannot fail.
        let _ = write!(self.0, "{n}");
        &self.0
    }
}
