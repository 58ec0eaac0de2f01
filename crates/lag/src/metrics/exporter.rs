//! The exporter's own series: up, records read and skipped, catch-up, the
//! health of what is known, and how long refreshes and renders take.

use std::sync::PoisonError;
use std::sync::atomic::Ordering;

use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;

use super::{Encoded, SelfTimings, counter, gauge, itoa_buf};
use crate::catch_up::Progress;
use crate::monitor::Monitor;

pub(super) fn up(e: &mut DescriptorEncoder<'_>) -> Encoded {
    let mut up = e.encode_descriptor("exporter_up", "1 while the exporter runs.", None, MetricType::Gauge)?;
    ConstGauge::new(1).encode(up.encode_family(&[("version", env!("CARGO_PKG_VERSION"))])?)
}

pub(super) fn records_consumed(e: &mut DescriptorEncoder<'_>, m: &Monitor) -> Encoded {
    let n = m.units().counters().records.get();
    counter(e, "exporter_offset_consumer_records_consumed", "Records read from __consumer_offsets.", n)
}

pub(super) fn offset_fetch_errors(e: &mut DescriptorEncoder<'_>, m: &Monitor) -> Encoded {
    counter(
        e,
        "admin_api_offset_fetch_errors",
        "Admin-API mode: groups whose OffsetFetch failed at a scrape; their previous offsets are kept.",
        m.units().counters().offset_fetch_errors.load(Ordering::Relaxed),
    )
}

pub(super) fn records_skipped(e: &mut DescriptorEncoder<'_>, m: &Monitor) -> Encoded {
    skipped(e, m.units().counters(), "offsets_records_skipped", "Records of __consumer_offsets skipped, by reason.")
}

/// Every failure of a worker (a life that ended in an error or a panic, or
/// a refresh that failed), by worker and kind: a bounded few labels.
pub(super) fn worker_failures(e: &mut DescriptorEncoder<'_>, m: &Monitor) -> Encoded {
    let help = "Failures of kshard's workers (a life that ended, or a refresh that failed), by worker and kind.";
    let mut family = e.encode_descriptor("worker_failures", help, None, MetricType::Counter)?;
    for (worker, kind, n) in m.failure_counts().iter() {
        ConstCounter::new(n).encode(family.encode_family(&[("worker", worker), ("kind", kind.label())])?)?;
    }
    Ok(())
}

const SHARE_READABLE_HELP: &str = "1 while kshard reads __share_group_state; 0 when it may not Read it (share groups' lag is then left out; see /ready).";

/// What was read of `__share_group_state`, once it is read.
pub(super) fn share_state_records(e: &mut DescriptorEncoder<'_>, m: &Monitor) -> Encoded {
    if m.share_unreadable().is_some() {
        return gauge(e, "share_state_readable", SHARE_READABLE_HELP, 0);
    }
    if m.progress_of(crate::catch_up::Log::ShareState).is_none() {
        return Ok(());
    }
    gauge(e, "share_state_readable", SHARE_READABLE_HELP, 1)?;
    let c = m.share_units().counters();
    let n = c.records.get();
    counter(e, "share_state_records_consumed", "Records read from __share_group_state.", n)?;
    skipped(e, c, "share_state_records_skipped", "Records of __share_group_state skipped, by reason.")
}

fn skipped(e: &mut DescriptorEncoder<'_>, c: &crate::units::ReadCounters, name: &str, help: &str) -> Encoded {
    let skipped = [
        ("null_key", c.null_key.load(Ordering::Relaxed)),
        ("malformed_key", c.malformed_key.load(Ordering::Relaxed)),
        ("malformed_value", c.malformed_value.load(Ordering::Relaxed)),
        ("corrupt_batch", c.corrupt_batch.load(Ordering::Relaxed)),
        ("unknown_type", c.unknown_type.load(Ordering::Relaxed)),
    ];
    let mut family = e.encode_descriptor(name, help, None, MetricType::Counter)?;
    for (reason, n) in skipped {
        ConstCounter::new(n).encode(family.encode_family(&[("reason", reason)])?)?;
    }
    Ok(())
}

pub(super) fn catchup_ready(e: &mut DescriptorEncoder<'_>, ready: bool) -> Encoded {
    gauge(
        e,
        "catchup_ready",
        "1 while /ready is 200: caught up with the offsets topic, watermarks refreshed since, and data current.",
        i64::from(ready),
    )
}

pub(super) fn catchup_offsets_remaining(e: &mut DescriptorEncoder<'_>, progress: &Progress) -> Encoded {
    gauge(
        e,
        "catchup_offsets_remaining",
        "Offsets of __consumer_offsets left to read to catch up.",
        progress.offsets_remaining,
    )
}

pub(super) fn catchup_partitions_caught_up(e: &mut DescriptorEncoder<'_>, progress: &Progress) -> Encoded {
    gauge(
        e,
        "catchup_partitions_caught_up",
        "Partitions of __consumer_offsets caught up.",
        progress.partitions_caught_up as i64,
    )
}

pub(super) fn offsets_topic_unread_offsets(e: &mut DescriptorEncoder<'_>, m: &Monitor) -> Encoded {
    let mut family = e.encode_descriptor(
        "offsets_topic_unread_offsets",
        "Offsets of a partition of the offsets topic past the reader's position at the last refresh: \
         0 at rest (more while reading; for long, the reader is stuck). kshard's reader reads past \
         open transactions; with reader: librdkafka, an open transaction holds back later commits.",
        None,
        MetricType::Gauge,
    )?;
    let mut id = itoa_buf();
    for (partition, unread) in m.unread() {
        ConstGauge::new(unread).encode(family.encode_family(&[("partition_id", id.format(partition))])?)?;
    }
    Ok(())
}

pub(super) fn offsets_topic_open_transactions(e: &mut DescriptorEncoder<'_>, m: &Monitor) -> Encoded {
    let mut family = e.encode_descriptor(
        "offsets_topic_open_transactions",
        "Transactions open in a partition of the offsets topic whose offset commits wait for their \
         marker (a producer that died leaves one until the broker aborts it: transaction.timeout.ms).",
        None,
        MetricType::Gauge,
    )?;
    let mut id = itoa_buf();
    for (partition, open) in m.units().open_transactions() {
        ConstGauge::new(open as i64).encode(family.encode_family(&[("partition_id", id.format(partition))])?)?;
    }
    Ok(())
}

/// `watermark_refresh_duration_seconds` and `metrics_render_duration_seconds`,
/// once measured.
pub(super) fn timings(e: &mut DescriptorEncoder<'_>, timings: &SelfTimings) -> Encoded {
    let timings = [
        ("watermark_refresh_duration_seconds", "Duration of the last watermark refresh.", &timings.watermark_refresh),
        ("metrics_render_duration_seconds", "Duration of the previous /metrics render.", &timings.render),
    ];
    for (name, help, timing) in timings {
        if let Some(d) = *timing.lock().unwrap_or_else(PoisonError::into_inner) {
            let g = ConstGauge::new(d.as_secs_f64());
            g.encode(e.encode_descriptor(name, help, None, MetricType::Gauge)?)?;
        }
    }
    Ok(())
}

pub(super) fn data_current(e: &mut DescriptorEncoder<'_>, current: bool) -> Encoded {
    gauge(
        e,
        "data_current",
        "1 while every worker runs and watermarks are recent; 0 when lag would be stale (see /ready).",
        i64::from(current),
    )
}

pub(super) fn watermarks_age(e: &mut DescriptorEncoder<'_>, m: &Monitor) -> Encoded {
    let Some(age) = m.watermark_age() else { return Ok(()) };
    ConstGauge::new(age.as_secs_f64()).encode(e.encode_descriptor(
        "watermarks_age_seconds",
        "Time since the last successful watermark refresh.",
        None,
        MetricType::Gauge,
    )?)
}

/// With a data directory: partitions whose shard has no primary anywhere.
pub(super) fn shards_without_primary(
    e: &mut DescriptorEncoder<'_>,
    m: &Monitor,
    member: Option<&kshard_runtime::NodeShared>,
) -> Encoded {
    let Some(shared) = member else { return Ok(()) };
    let cluster = shared.cluster();
    let partitions = m.progress().partitions as i32;
    let without = (0..partitions)
        .filter(|p| cluster.primary(&crate::log_reader::shard_id(crate::catch_up::Log::Offsets, *p)).is_none())
        .count();
    gauge(
        e,
        "shards_without_primary",
        "Partitions of the offsets topic whose shard has no primary (a fail-over under way); their lag is served from standby copies.",
        without as i64,
    )
}
