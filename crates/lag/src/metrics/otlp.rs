//! kshard's series as OpenTelemetry metrics (OTLP): the families `/metrics`
//! shows, read back from that same text, each turned into the OTLP metric
//! the OpenTelemetry specification's Prometheus compatibility maps it to. A
//! counter is a cumulative monotonic sum named without `_total`; a gauge (or
//! an untyped series) a gauge; a histogram an explicit-bucket histogram with
//! per-bucket counts; a summary a summary. Labels become attributes, HELP the
//! description, a `_seconds` or `_bytes` name gives the unit. Pure.

use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::common::v1::{AnyValue, InstrumentationScope, KeyValue, any_value};
use opentelemetry_proto::tonic::metrics::v1::summary_data_point::ValueAtQuantile;
use opentelemetry_proto::tonic::metrics::v1::{
    AggregationTemporality, Gauge, Histogram, HistogramDataPoint, Metric, NumberDataPoint, ResourceMetrics,
    ScopeMetrics, Sum, Summary, SummaryDataPoint, metric::Data, number_data_point,
};
use opentelemetry_proto::tonic::resource::v1::Resource;

use super::exposition_read::{Family, Kind, Label, Sample};

/// What every export carries besides the series.
#[derive(Debug, Clone)]
pub(crate) struct Envelope<'a> {
    /// The resource's attributes (`service.name`, …).
    pub(crate) resource: &'a [(String, String)],
    /// When the counters started counting (the process's start), Unix ns.
    pub(crate) start_ns: u64,
    /// When the series were read, Unix ns.
    pub(crate) now_ns: u64,
    /// At most this many data points a request (receivers cap a message's size).
    pub(crate) max_points: usize,
}

/// The instrumentation scope every metric is in.
const SCOPE: &str = "kshard";

/// `families` as OTLP export requests of at most `max_points` data points
/// each (one, empty of metrics, when there is nothing to send).
pub(crate) fn requests(families: &[Family<'_>], envelope: &Envelope<'_>) -> Vec<ExportMetricsServiceRequest> {
    let max = envelope.max_points.max(1);
    let mut batches: Vec<(Vec<Metric>, usize)> = vec![(Vec::new(), 0)];
    for family in families {
        for metric in split(metric(family, envelope), max) {
            let points = points(&metric);
            if batches.last().is_some_and(|(_, n)| *n > 0 && n + points > max) {
                batches.push((Vec::new(), 0));
            }
            if let Some((metrics, n)) = batches.last_mut() {
                metrics.push(metric);
                *n += points;
            }
        }
    }
    batches.into_iter().map(|(metrics, _)| request(metrics, envelope.resource)).collect()
}

/// What one OTLP export of the Prometheus text `text` sends: each
/// request's protobuf body, at most `max_points` data points each (as the
/// export builds them; for `kshard bench state`).
pub fn export_bodies(text: &str, max_points: usize) -> Result<Vec<Vec<u8>>, super::exposition_read::ReadError> {
    use prost::Message;
    let families = super::exposition_read::read(text)?;
    let resource = [("service.name".to_owned(), "kshard".to_owned())];
    let envelope = Envelope { resource: &resource, start_ns: 1, now_ns: 2, max_points };
    Ok(requests(&families, &envelope).iter().map(Message::encode_to_vec).collect())
}

fn request(metrics: Vec<Metric>, resource: &[(String, String)]) -> ExportMetricsServiceRequest {
    ExportMetricsServiceRequest {
        resource_metrics: vec![ResourceMetrics {
            resource: Some(Resource {
                attributes: resource.iter().map(|(k, v)| attribute(k, v)).collect(),
                ..Resource::default()
            }),
            scope_metrics: vec![ScopeMetrics {
                scope: Some(InstrumentationScope {
                    name: SCOPE.to_owned(),
                    version: env!("CARGO_PKG_VERSION").to_owned(),
                    ..InstrumentationScope::default()
                }),
                metrics,
                schema_url: String::new(),
            }],
            schema_url: String::new(),
        }],
    }
}

fn attribute(key: &str, value: &str) -> KeyValue {
    KeyValue {
        key: key.to_owned(),
        value: Some(AnyValue { value: Some(any_value::Value::StringValue(value.to_owned())) }),
        ..KeyValue::default()
    }
}

fn attributes<'l, 'a: 'l>(labels: impl IntoIterator<Item = &'l Label<'a>>) -> Vec<KeyValue> {
    labels.into_iter().map(|(k, v)| attribute(k, v)).collect()
}

/// How many data points `metric` has.
pub(crate) fn points(metric: &Metric) -> usize {
    match &metric.data {
        Some(Data::Gauge(g)) => g.data_points.len(),
        Some(Data::Sum(s)) => s.data_points.len(),
        Some(Data::Histogram(h)) => h.data_points.len(),
        Some(Data::Summary(s)) => s.data_points.len(),
        Some(Data::ExponentialHistogram(h)) => h.data_points.len(),
        None => 0,
    }
}

/// `metric` in pieces of at most `max` data points, each a whole metric
/// (the points moved, not copied).
fn split(metric: Metric, max: usize) -> Vec<Metric> {
    if points(&metric) <= max {
        return vec![metric];
    }
    fn pieces<T>(points: Vec<T>, max: usize) -> Vec<Vec<T>> {
        let mut out = Vec::with_capacity(points.len().div_ceil(max));
        let mut points = points.into_iter().peekable();
        while points.peek().is_some() {
            out.push(points.by_ref().take(max).collect());
        }
        out
    }
    let Metric { name, description, unit, metadata, data } = metric;
    let with = |data: Data| Metric {
        name: name.clone(),
        description: description.clone(),
        unit: unit.clone(),
        metadata: metadata.clone(),
        data: Some(data),
    };
    match data {
        Some(Data::Gauge(g)) => {
            pieces(g.data_points, max).into_iter().map(|data_points| with(Data::Gauge(Gauge { data_points }))).collect()
        }
        Some(Data::Sum(s)) => pieces(s.data_points, max)
            .into_iter()
            .map(|data_points| {
                with(Data::Sum(Sum {
                    data_points,
                    aggregation_temporality: s.aggregation_temporality,
                    is_monotonic: s.is_monotonic,
                }))
            })
            .collect(),
        Some(Data::Histogram(h)) => pieces(h.data_points, max)
            .into_iter()
            .map(|data_points| {
                with(Data::Histogram(Histogram { data_points, aggregation_temporality: h.aggregation_temporality }))
            })
            .collect(),
        Some(Data::Summary(s)) => pieces(s.data_points, max)
            .into_iter()
            .map(|data_points| with(Data::Summary(Summary { data_points })))
            .collect(),
        other => vec![Metric { name, description, unit, metadata, data: other }],
    }
}

/// The OTLP unit a Prometheus name's suffix stands for (UCUM, as the
/// specification's Prometheus mapping has it).
fn unit(name: &str) -> &'static str {
    if name.ends_with("_seconds") {
        "s"
    } else if name.ends_with("_bytes") {
        "By"
    } else if name.ends_with("_ratio") {
        "1"
    } else {
        ""
    }
}

fn metric(family: &Family<'_>, envelope: &Envelope<'_>) -> Metric {
    let name = match family.kind {
        Kind::Counter => family.name.strip_suffix("_total").unwrap_or(family.name),
        _ => family.name,
    };
    let data = match family.kind {
        Kind::Counter => Data::Sum(Sum {
            data_points: numbers(&family.samples, envelope.start_ns, envelope.now_ns),
            aggregation_temporality: AggregationTemporality::Cumulative as i32,
            is_monotonic: true,
        }),
        Kind::Gauge | Kind::Untyped => Data::Gauge(Gauge { data_points: numbers(&family.samples, 0, envelope.now_ns) }),
        Kind::Histogram => Data::Histogram(Histogram {
            data_points: histogram_points(family, envelope),
            aggregation_temporality: AggregationTemporality::Cumulative as i32,
        }),
        Kind::Summary => Data::Summary(Summary { data_points: summary_points(family, envelope) }),
    };
    Metric {
        name: name.to_owned(),
        description: family.help.clone().into_owned(),
        unit: unit(name).to_owned(),
        metadata: Vec::new(),
        data: Some(data),
    }
}

fn numbers(samples: &[Sample<'_>], start_ns: u64, now_ns: u64) -> Vec<NumberDataPoint> {
    samples
        .iter()
        .map(|s| NumberDataPoint {
            attributes: attributes(&s.labels),
            start_time_unix_nano: start_ns,
            time_unix_nano: now_ns,
            value: Some(number_data_point::Value::AsDouble(s.value)),
            ..NumberDataPoint::default()
        })
        .collect()
}

/// A data point's labels and the samples that make it.
type Group<'f, 'a> = (Vec<&'f Label<'a>>, Vec<&'f Sample<'a>>);

/// The samples of `family` grouped by their labels without `special`
/// (`le`, `quantile`), in the order the groups first appear.
fn grouped<'f, 'a>(family: &'f Family<'a>, special: &str) -> Vec<Group<'f, 'a>> {
    let mut groups: Vec<Group<'f, 'a>> = Vec::new();
    let mut index: std::collections::HashMap<Vec<&'f Label<'a>>, usize> = std::collections::HashMap::new();
    for sample in &family.samples {
        let labels: Vec<_> = sample.labels.iter().filter(|(k, _)| *k != special).collect();
        match index.get(&labels) {
            Some(&i) => groups[i].1.push(sample),
            None => {
                index.insert(labels.clone(), groups.len());
                groups.push((labels, vec![sample]));
            }
        }
    }
    groups
}

fn label<'s>(sample: &'s Sample<'_>, name: &str) -> Option<&'s str> {
    sample.labels.iter().find(|(k, _)| *k == name).map(|(_, v)| v.as_ref())
}

fn le(text: &str) -> Option<f64> {
    match text {
        "+Inf" | "Inf" => Some(f64::INFINITY),
        _ => text.parse().ok(),
    }
}

fn histogram_points(family: &Family<'_>, envelope: &Envelope<'_>) -> Vec<HistogramDataPoint> {
    let (bucket, sum, count) =
        (format!("{}_bucket", family.name), format!("{}_sum", family.name), format!("{}_count", family.name));
    grouped(family, "le")
        .into_iter()
        .map(|(labels, samples)| {
            // (upper bound, cumulative count), by bound.
            let mut cumulative: Vec<(f64, f64)> = samples
                .iter()
                .filter(|s| s.name == bucket)
                .filter_map(|s| Some((le(label(s, "le")?)?, s.value)))
                .collect();
            cumulative.sort_by(|a, b| a.0.total_cmp(&b.0));
            let total = samples.iter().find(|s| s.name == count).map(|s| s.value);
            let total = total.or_else(|| cumulative.last().map(|(_, n)| *n)).unwrap_or(0.0);
            let finite: Vec<(f64, f64)> = cumulative.iter().copied().filter(|(b, _)| b.is_finite()).collect();
            let mut below = 0.0;
            let mut bucket_counts = Vec::with_capacity(finite.len() + 1);
            for (_, n) in &finite {
                bucket_counts.push((n - below).max(0.0) as u64);
                below = *n;
            }
            bucket_counts.push((total - below).max(0.0) as u64);
            HistogramDataPoint {
                attributes: attributes(labels),
                start_time_unix_nano: envelope.start_ns,
                time_unix_nano: envelope.now_ns,
                count: total.max(0.0) as u64,
                sum: samples.iter().find(|s| s.name == sum).map(|s| s.value),
                bucket_counts,
                explicit_bounds: finite.iter().map(|(b, _)| *b).collect(),
                ..HistogramDataPoint::default()
            }
        })
        .collect()
}

fn summary_points(family: &Family<'_>, envelope: &Envelope<'_>) -> Vec<SummaryDataPoint> {
    let (sum, count) = (format!("{}_sum", family.name), format!("{}_count", family.name));
    grouped(family, "quantile")
        .into_iter()
        .map(|(labels, samples)| SummaryDataPoint {
            attributes: attributes(labels),
            start_time_unix_nano: envelope.start_ns,
            time_unix_nano: envelope.now_ns,
            count: samples.iter().find(|s| s.name == count).map_or(0, |s| s.value.max(0.0) as u64),
            sum: samples.iter().find(|s| s.name == sum).map_or(0.0, |s| s.value),
            quantile_values: samples
                .iter()
                .filter(|s| s.name == family.name)
                .filter_map(|s| Some(ValueAtQuantile { quantile: label(s, "quantile")?.parse().ok()?, value: s.value }))
                .collect(),
            flags: 0,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::exposition_read::read;

    const TEXT: &str = r#"# HELP kshard_lag Lag in records
# TYPE kshard_lag gauge
kshard_lag{cluster="a",group="g"} 42
kshard_lag{cluster="b",group="g"} 7
# HELP kshard_records_read_total Records read
# TYPE kshard_records_read_total counter
kshard_records_read_total 1000
# HELP end_to_end_roundtrip_latency_seconds Round trip
# TYPE end_to_end_roundtrip_latency_seconds histogram
end_to_end_roundtrip_latency_seconds_bucket{partition_id="0",le="0.005"} 1
end_to_end_roundtrip_latency_seconds_bucket{partition_id="0",le="0.01"} 3
end_to_end_roundtrip_latency_seconds_bucket{partition_id="0",le="+Inf"} 4
end_to_end_roundtrip_latency_seconds_sum{partition_id="0"} 0.75
end_to_end_roundtrip_latency_seconds_count{partition_id="0"} 4
# TYPE rpc_seconds summary
rpc_seconds{quantile="0.5"} 0.2
rpc_seconds{quantile="0.99"} 0.9
rpc_seconds_sum 12
rpc_seconds_count 40
"#;

    fn envelope(max_points: usize) -> Envelope<'static> {
        static RESOURCE: std::sync::LazyLock<Vec<(String, String)>> =
            std::sync::LazyLock::new(|| vec![("service.name".to_owned(), "kshard".to_owned())]);
        Envelope { resource: &RESOURCE, start_ns: 1_000, now_ns: 2_000, max_points }
    }

    fn metrics(max_points: usize) -> Vec<Vec<Metric>> {
        let families = read(TEXT).expect("valid text");
        requests(&families, &envelope(max_points))
            .into_iter()
            .map(|r| r.resource_metrics.into_iter().flat_map(|rm| rm.scope_metrics).flat_map(|s| s.metrics).collect())
            .collect()
    }

    fn key_values(attributes: &[KeyValue]) -> Vec<(String, String)> {
        attributes
            .iter()
            .map(|kv| {
                let value = match kv.value.as_ref().and_then(|v| v.value.as_ref()) {
                    Some(any_value::Value::StringValue(s)) => s.clone(),
                    other => format!("{other:?}"),
                };
                (kv.key.clone(), value)
            })
            .collect()
    }

    #[test]
    fn each_kind_maps_as_the_specification_says() {
        let all = metrics(1000);
        assert_eq!(all.len(), 1, "one request");
        let m = &all[0];
        let names: Vec<&str> = m.iter().map(|m| m.name.as_str()).collect();
        assert_eq!(names, ["kshard_lag", "kshard_records_read", "end_to_end_roundtrip_latency_seconds", "rpc_seconds"]);

        let Some(Data::Gauge(lag)) = &m[0].data else { panic!("a gauge: {:?}", m[0]) };
        assert_eq!(m[0].description, "Lag in records");
        assert_eq!(
            key_values(&lag.data_points[1].attributes),
            [("cluster".into(), "b".into()), ("group".into(), "g".into())]
        );
        assert_eq!(lag.data_points[1].value, Some(number_data_point::Value::AsDouble(7.0)));
        assert_eq!((lag.data_points[0].start_time_unix_nano, lag.data_points[0].time_unix_nano), (0, 2_000));

        let Some(Data::Sum(read)) = &m[1].data else { panic!("a sum: {:?}", m[1]) };
        assert!(read.is_monotonic);
        assert_eq!(read.aggregation_temporality, AggregationTemporality::Cumulative as i32);
        assert_eq!(read.data_points[0].start_time_unix_nano, 1_000, "counting since the start");

        let Some(Data::Histogram(h)) = &m[2].data else { panic!("a histogram: {:?}", m[2]) };
        assert_eq!(m[2].unit, "s");
        let p = &h.data_points[0];
        assert_eq!(key_values(&p.attributes), [("partition_id".into(), "0".into())], "no le");
        assert_eq!(p.explicit_bounds, [0.005, 0.01]);
        assert_eq!(p.bucket_counts, [1, 2, 1], "per bucket, not cumulative");
        assert_eq!((p.count, p.sum), (4, Some(0.75)));

        let Some(Data::Summary(s)) = &m[3].data else { panic!("a summary: {:?}", m[3]) };
        let q: Vec<(f64, f64)> = s.data_points[0].quantile_values.iter().map(|q| (q.quantile, q.value)).collect();
        assert_eq!(q, [(0.5, 0.2), (0.99, 0.9)]);
        assert_eq!((s.data_points[0].count, s.data_points[0].sum), (40, 12.0));
    }

    #[test]
    fn requests_hold_at_most_max_points_and_lose_none() {
        for max in 1..=6 {
            let batches = metrics(max);
            let total: usize = batches.iter().flatten().map(points).sum();
            assert_eq!(total, 5, "2 gauge points, 1 sum, 1 histogram, 1 summary (max {max})");
            for batch in &batches {
                assert!(batch.iter().map(points).sum::<usize>() <= max, "max {max}: {batch:?}");
            }
        }
        assert_eq!(metrics(1).len(), 5);
    }

    #[test]
    fn nothing_to_send_is_one_empty_request() {
        let requests = requests(&[], &envelope(10));
        assert_eq!(requests.len(), 1);
        assert_eq!(requests[0].resource_metrics[0].scope_metrics[0].metrics.len(), 0);
        let resource = requests[0].resource_metrics[0].resource.as_ref().expect("a resource");
        assert_eq!(key_values(&resource.attributes), [("service.name".into(), "kshard".into())]);
    }
}
