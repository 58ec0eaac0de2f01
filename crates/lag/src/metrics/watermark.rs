//! The watermarks of the partitions groups committed to.

use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::gauge::ConstGauge;

use super::{Encoded, itoa_buf};
use crate::watermarks::Watermarks;

/// `kafka_topic_partition_high_water_mark` and `…_low_water_mark`.
pub(super) fn partition_watermarks(e: &mut DescriptorEncoder<'_>, watermarks: &Watermarks) -> Encoded {
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
        let mut family = e.encode_descriptor(name, help, None, MetricType::Gauge)?;
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
    Ok(())
}

/// `kafka_topic_high_water_mark_sum` and `…_low_water_mark_sum`.
pub(super) fn topic_watermark_sums(e: &mut DescriptorEncoder<'_>, watermarks: &Watermarks) -> Encoded {
    for (name, help, pick) in [
        ("kafka_topic_high_water_mark_sum", "Sum of a topic's partitions' high watermarks.", true),
        ("kafka_topic_low_water_mark_sum", "Sum of a topic's partitions' low watermarks.", false),
    ] {
        let mut family = e.encode_descriptor(name, help, None, MetricType::Gauge)?;
        for (topic, partitions) in watermarks.topics() {
            let sum = crate::watermarks::total(partitions.iter().flatten().map(|w| if pick { w.high } else { w.low }));
            ConstGauge::new(sum).encode(family.encode_family(&[("topic_name", topic)])?)?;
        }
    }
    Ok(())
}
