//! kminion's end-to-end probe families (`end_to_end_*`), with kminion's
//! names, labels (`partition_id`, `coordinator_id`, `reason`) and HELP.

use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric, NoLabelSet};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;

use super::Encoded;
use crate::end_to_end::{Histogram, PartitionProbe, ProbeSnapshot};

type Labels<'a> = Vec<(&'a str, String)>;

fn family<'a, T: 'a>(
    e: &mut DescriptorEncoder<'_>,
    name: &str,
    help: &str,
    kind: MetricType,
    items: impl IntoIterator<Item = (Labels<'a>, T)>,
    mut encode: impl FnMut(prometheus_client::encoding::MetricEncoder<'_>, T) -> Encoded,
) -> Encoded {
    let mut f = e.encode_descriptor(name, help, None, kind)?;
    for (labels, item) in items {
        encode(f.encode_family(&labels)?, item)?;
    }
    Ok(())
}

fn by_partition<'a, T>(s: &'a ProbeSnapshot, value: impl Fn(&'a PartitionProbe) -> T) -> Vec<(Labels<'a>, T)> {
    s.partitions.iter().map(|(p, stats)| (vec![("partition_id", p.to_string())], value(stats))).collect()
}

fn counters(e: &mut DescriptorEncoder<'_>, name: &str, help: &str, rows: Vec<(Labels<'_>, u64)>) -> Encoded {
    family(e, name, help, MetricType::Counter, rows, |m, n| ConstCounter::new(n).encode(m))
}

fn histograms(e: &mut DescriptorEncoder<'_>, name: &str, help: &str, rows: Vec<(Labels<'_>, &Histogram)>) -> Encoded {
    family(e, name, help, MetricType::Histogram, rows, |mut m, h| {
        m.encode_histogram::<NoLabelSet>(h.sum(), h.count(), &h.buckets(), None)
    })
}

/// Every `end_to_end_*` family, once the probe has sent something.
pub(super) fn families(e: &mut DescriptorEncoder<'_>, s: &ProbeSnapshot) -> Encoded {
    family(
        e,
        "end_to_end_messages_produced_in_flight",
        "Number of messages that kminion's end-to-end test produced but has not received an answer for yet",
        MetricType::Gauge,
        by_partition(s, |p| p.in_flight),
        |m, n| ConstGauge::new(n).encode(m),
    )?;
    counters(
        e,
        "end_to_end_messages_produced",
        "Number of all messages produced to Kafka. This counter will be incremented when we receive a response (failure/timeout or success) from Kafka",
        by_partition(s, |p| p.produced),
    )?;
    counters(
        e,
        "end_to_end_messages_produced_failed",
        "Number of messages failed to produce to Kafka because of a timeout or failure",
        by_partition(s, |p| p.failed),
    )?;
    counters(
        e,
        "end_to_end_messages_received",
        "Number of *matching* messages kminion received. Every roundtrip message has a minionID (randomly generated on startup) and a timestamp. Kminion only considers a message a match if it it arrives within the configured roundtrip SLA (and it matches the minionID)",
        by_partition(s, |p| p.received),
    )?;
    counters(
        e,
        "end_to_end_messages_lost",
        "Number of messages that have been produced successfully but not received within the configured SLA duration",
        by_partition(s, |p| p.lost),
    )?;
    let coordinator = |id: &i32| vec![("coordinator_id", id.to_string())];
    counters(
        e,
        "end_to_end_offset_commits",
        "Counts how many times kminions end-to-end test has committed offsets",
        s.coordinators.iter().map(|(id, c)| (coordinator(id), c.commits)).collect(),
    )?;
    let failed = s.coordinators.iter().flat_map(|(id, c)| {
        c.failed
            .iter()
            .map(move |(reason, n)| (vec![("coordinator_id", id.to_string()), ("reason", reason.clone())], *n))
    });
    counters(
        e,
        "end_to_end_offset_commits_failed",
        "Number of offset commits that returned an error or timed out",
        failed.collect(),
    )?;
    histograms(
        e,
        "end_to_end_produce_latency_seconds",
        "Time until we received an ack for a produced message",
        by_partition(s, |p| &p.produce_latency),
    )?;
    histograms(
        e,
        "end_to_end_roundtrip_latency_seconds",
        "Time it took between sending (producing) and receiving (consuming) a message",
        by_partition(s, |p| &p.roundtrip_latency),
    )?;
    histograms(
        e,
        "end_to_end_offset_commit_latency_seconds",
        "Time kafka took to respond to kminion's offset commit",
        s.coordinators.iter().map(|(id, c)| (coordinator(id), &c.latency)).collect(),
    )
}
