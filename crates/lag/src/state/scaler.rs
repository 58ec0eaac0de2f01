//! What a KEDA scaled object asks kshard (its trigger's metadata) and the
//! answer from one snapshot's group row: lag in records, lag in seconds, or
//! a share group's backlog, with the target and activation threshold KEDA
//! scales by. Pure: the serving is in `io/keda_server.rs`.

use std::collections::HashMap;

use crate::snapshot::GroupLag;

/// The metadata keys a trigger may set, for the error that names a typo.
const KEYS: [&str; 7] =
    ["cluster", "consumerGroup", "shareGroup", "topic", "metric", "lagThreshold", "activationLagThreshold"];

/// KEDA's own keys of an external trigger, which it sends on with the rest.
const KEDAS: [&str; 7] =
    ["scalerAddress", "enableTLS", "unsafeSsl", "caCert", "tlsCertFile", "tlsClientCert", "tlsClientKey"];

/// A trigger's metadata, key to value.
pub(crate) type Metadata = HashMap<String, String>;

/// What a scaled object follows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ScalerMetric {
    /// A group's lag in records (a share group's: its backlog as Kafka
    /// counts it), summed over its partitions.
    Lag,
    /// The age of the oldest record the group has not consumed, over its
    /// partitions.
    LagSeconds,
}

/// A scaled object's trigger, read from its metadata.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ScalerQuery {
    /// The cluster's name under `clusters:`; `None` with one cluster.
    pub(crate) cluster: Option<String>,
    /// The group.
    pub(crate) group: String,
    /// Whether the trigger named a share group (`shareGroup`).
    pub(crate) share: bool,
    /// Only this topic's partitions.
    pub(crate) topic: Option<String>,
    pub(crate) metric: ScalerMetric,
    /// The value one replica should handle (the HPA's target).
    pub(crate) target: f64,
    /// Active above this value.
    pub(crate) activation: f64,
}

/// Why a trigger's metadata is refused (gRPC `InvalidArgument`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum MetadataError {
    #[error("the trigger's metadata names no group: set consumerGroup (or shareGroup for a share group)")]
    NoGroup,
    #[error("the trigger's metadata sets both consumerGroup and shareGroup: set one")]
    TwoGroups,
    #[error("invalid {key}: {value:?} ({why})")]
    Invalid { key: &'static str, value: String, why: &'static str },
    #[error("unknown metadata key {0:?} (known: {known})", known = KEYS.join(", "))]
    Unknown(String),
}

impl ScalerQuery {
    /// Reads a trigger's metadata.
    pub(crate) fn parse(metadata: &Metadata) -> Result<Self, MetadataError> {
        if let Some(k) = metadata.keys().find(|k| !KEYS.contains(&k.as_str()) && !KEDAS.contains(&k.as_str())) {
            return Err(MetadataError::Unknown(k.clone()));
        }
        let get = |k: &str| metadata.get(k).map(|v| v.trim()).filter(|v| !v.is_empty());
        let (group, share) = match (get("consumerGroup"), get("shareGroup")) {
            (Some(g), None) => (g, false),
            (None, Some(g)) => (g, true),
            (None, None) => return Err(MetadataError::NoGroup),
            (Some(_), Some(_)) => return Err(MetadataError::TwoGroups),
        };
        let metric = match get("metric") {
            None | Some("lag") => ScalerMetric::Lag,
            Some("backlog") if share => ScalerMetric::Lag,
            Some("lagSeconds") => ScalerMetric::LagSeconds,
            Some(other) => {
                let why = if other == "backlog" {
                    "backlog is a share group's: set shareGroup"
                } else {
                    "lag, lagSeconds, or backlog for a share group"
                };
                return Err(MetadataError::Invalid { key: "metric", value: other.to_owned(), why });
            }
        };
        let number = |key: &'static str, default: f64, least: f64| -> Result<f64, MetadataError> {
            let Some(v) = get(key) else { return Ok(default) };
            match v.parse::<f64>() {
                Ok(n) if n.is_finite() && n >= least => Ok(n),
                _ => Err(MetadataError::Invalid {
                    key,
                    value: v.to_owned(),
                    why: if least > 0.0 { "a number above 0" } else { "a number, 0 or more" },
                }),
            }
        };
        // KEDA's Kafka scaler's defaults: 10 records a replica, active above 0.
        let default_target = if metric == ScalerMetric::LagSeconds { 60.0 } else { 10.0 };
        let target = number("lagThreshold", default_target, f64::MIN_POSITIVE)?;
        Ok(ScalerQuery {
            cluster: get("cluster").map(str::to_owned),
            group: group.to_owned(),
            share,
            topic: get("topic").map(str::to_owned),
            metric,
            target,
            activation: number("activationLagThreshold", 0.0, 0.0)?,
        })
    }

    /// The metric's name for the HPA: its kind and what it follows, as
    /// Kubernetes allows a metric name (lowercase letters, digits, `-`).
    pub(crate) fn metric_name(&self) -> String {
        let kind = match (self.metric, self.share) {
            (ScalerMetric::Lag, false) => "lag",
            (ScalerMetric::Lag, true) => "share-backlog",
            (ScalerMetric::LagSeconds, _) => "lag-seconds",
        };
        let parts = [Some("kshard"), Some(kind), self.cluster.as_deref(), Some(&self.group), self.topic.as_deref()];
        let name: String = parts
            .into_iter()
            .flatten()
            .collect::<Vec<_>>()
            .join("-")
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() { c.to_ascii_lowercase() } else { '-' })
            .collect();
        name.chars().take(200).collect()
    }
}

/// Why a value cannot be given (never a 0 standing in for it).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum Unanswerable {
    /// gRPC `NotFound`.
    #[error("group {0:?} is not known to kshard (no commit or share state read for it)")]
    NoGroup(String),
    /// gRPC `NotFound`.
    #[error("group {group:?} has no partition of topic {topic:?}")]
    NoTopic { group: String, topic: String },
    /// gRPC `InvalidArgument`.
    #[error("group {0:?} is a share group: name it with shareGroup")]
    IsShare(String),
    /// gRPC `InvalidArgument`.
    #[error("group {0:?} is not a share group: name it with consumerGroup")]
    NotShare(String),
    /// gRPC `Unavailable`: not known yet.
    #[error("{0}")]
    NotKnown(String),
}

/// The value of `query`'s metric for `group` (the snapshot's row, `None`
/// when absent) at `now_ms`.
pub(crate) fn value(query: &ScalerQuery, group: Option<&GroupLag>, now_ms: i64) -> Result<f64, Unanswerable> {
    let Some(g) = group else { return Err(Unanswerable::NoGroup(query.group.clone())) };
    // The kind its metadata says, else what its rows are.
    let is_share = g.info.as_ref().map_or(g.is_share() || g.share_only, |i| &*i.protocol_type == "share");
    match (query.share, is_share) {
        (false, true) => return Err(Unanswerable::IsShare(query.group.clone())),
        (true, false) => return Err(Unanswerable::NotShare(query.group.clone())),
        _ => {}
    }
    let wanted = |topic: &str| query.topic.as_deref().is_none_or(|t| t == topic);
    // (topic, partition, lag, seconds) of each partition followed.
    let rows: Vec<(&str, i32, Option<i64>, Option<f64>)> = if query.share {
        g.share
            .iter()
            .filter(|s| wanted(&s.row.topic))
            .map(|s| (&*s.row.topic, s.row.partition, s.lag, s.written.map(|w| w.seconds(now_ms))))
            .collect()
    } else {
        g.partitions
            .iter()
            .filter(|p| wanted(&p.topic))
            .map(|p| (&*p.topic, p.partition, p.lag(), p.lag_seconds(now_ms).map(|(s, _)| s)))
            .collect()
    };
    if rows.is_empty() {
        // Nothing committed (or no share state) yet: not a 0, which would
        // scale the group in before it has ever read.
        return Err(match &query.topic {
            Some(topic) => Unanswerable::NoTopic { group: query.group.clone(), topic: topic.clone() },
            None => {
                Unanswerable::NotKnown(format!("group {:?} has no committed offset (or share state) yet", query.group))
            }
        });
    }
    let mut total = 0i64;
    let mut oldest = 0f64;
    for (topic, partition, lag, seconds) in rows {
        let lag = lag.ok_or_else(|| {
            Unanswerable::NotKnown(format!(
                "the lag of {topic}/{partition} is not known yet (its watermarks, or its share-partition's start)"
            ))
        })?;
        total = total.saturating_add(lag);
        if query.metric == ScalerMetric::LagSeconds && lag > 0 {
            let s = seconds.ok_or_else(|| {
                Unanswerable::NotKnown(format!(
                    "the time of the first record of {topic}/{partition} not consumed is not known yet"
                ))
            })?;
            oldest = oldest.max(s);
        }
    }
    Ok(match query.metric {
        ScalerMetric::Lag => total as f64,
        ScalerMetric::LagSeconds => oldest,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect()
    }

    /// Groups `a` (t/0 5 of 100, t/1 40 of 50, u/0 3 of 3) and `c`
    /// (committed on `gone`, a topic without watermarks), as a refresh
    /// sees them.
    fn values(query: &[(&str, &str)]) -> Result<f64, Unanswerable> {
        use crate::watermarks::{Watermark, Watermarks};
        use kshard_offsets::{OffsetCommitValue, Record};
        let monitor = crate::monitor::Monitor::new(crate::MonitorSettings::default());
        monitor.track(crate::Log::Offsets, 0, 0, 0);
        monitor.start_log(crate::Log::Offsets);
        let commits = [("a", "t", 0, 5), ("a", "t", 1, 40), ("a", "u", 0, 3), ("c", "gone", 0, 1)];
        for (at, (group, topic, partition, offset)) in commits.into_iter().enumerate() {
            let (k, v) =
                Record::offset_commit(group, topic, partition, Some(OffsetCommitValue::new(3, offset, 1_000))).encode();
            monitor.apply(0, at as i64, Some(&k), v.as_deref()).expect("applies");
        }
        let mut w = Watermarks::default();
        for (topic, partition, high) in [("t", 0, 100), ("t", 1, 50), ("u", 0, 3)] {
            w.insert(topic, partition, Watermark { low: 0, high });
        }
        monitor.set_watermarks(w, true, monitor.now());
        let q = ScalerQuery::parse(&meta(query)).expect("a valid trigger");
        let (snapshot, derived) = (monitor.snapshot(), monitor.derived());
        value(&q, snapshot.group(&q.group, &derived).as_ref(), monitor.epoch_ms())
    }

    #[test]
    fn values_come_from_the_snapshot_and_unknowns_are_refused() {
        assert_eq!(values(&[("consumerGroup", "a")]), Ok(105.0));
        assert_eq!(values(&[("consumerGroup", "a"), ("topic", "u")]), Ok(0.0));
        assert!(matches!(values(&[("consumerGroup", "a"), ("topic", "v")]), Err(Unanswerable::NoTopic { .. })));
        assert!(matches!(values(&[("consumerGroup", "nobody")]), Err(Unanswerable::NoGroup(_))));
        // No record read here: lag in seconds is kshard's estimate from the
        // watermark just sampled (as /metrics gives it), moments old.
        let seconds = values(&[("consumerGroup", "a"), ("metric", "lagSeconds")]).expect("an estimate");
        assert!((0.0..5.0).contains(&seconds), "{seconds}");
        // A partition without watermarks is not a 0 either.
        assert!(matches!(values(&[("consumerGroup", "c")]), Err(Unanswerable::NotKnown(_))));
        assert!(matches!(values(&[("shareGroup", "a")]), Err(Unanswerable::NotShare(_))));
    }

    #[test]
    fn a_trigger_is_read_with_kedas_kafka_defaults() {
        let q = ScalerQuery::parse(&meta(&[("consumerGroup", "orders")])).expect("valid");
        assert_eq!((q.metric, q.target, q.activation, q.share), (ScalerMetric::Lag, 10.0, 0.0, false));
        assert_eq!(q.metric_name(), "kshard-lag-orders");
        let q = ScalerQuery::parse(&meta(&[
            ("shareGroup", "Jobs.v1"),
            ("cluster", "eu"),
            ("topic", "jobs"),
            ("metric", "lagSeconds"),
            ("activationLagThreshold", "5"),
        ]))
        .expect("valid");
        assert_eq!((q.metric, q.target, q.activation, q.share), (ScalerMetric::LagSeconds, 60.0, 5.0, true));
        assert_eq!(q.metric_name(), "kshard-lag-seconds-eu-jobs-v1-jobs");
        let backlog = ScalerQuery::parse(&meta(&[("shareGroup", "j"), ("metric", "backlog")])).expect("valid");
        assert_eq!(backlog.metric_name(), "kshard-share-backlog-j");
    }

    #[test]
    fn a_bad_trigger_is_refused_naming_the_key() {
        let err = |pairs: &[(&str, &str)]| ScalerQuery::parse(&meta(pairs)).expect_err("refused").to_string();
        assert!(err(&[]).contains("consumerGroup"));
        assert!(err(&[("consumerGroup", "a"), ("shareGroup", "b")]).contains("one"));
        assert!(err(&[("consumerGroup", "a"), ("metric", "backlog")]).contains("shareGroup"));
        assert!(err(&[("consumerGroup", "a"), ("metric", "bytes")]).contains("metric"));
        assert!(err(&[("consumerGroup", "a"), ("lagThreshold", "0")]).contains("lagThreshold"));
        assert!(err(&[("consumerGroup", "a"), ("lagThreshold", "NaN")]).contains("lagThreshold"));
        assert!(err(&[("consumerGroup", "a"), ("activationLagThreshold", "-1")]).contains("activationLagThreshold"));
        assert!(err(&[("consumerGroup", "a"), ("lagTreshold", "5")]).contains("lagTreshold"));
        // KEDA sends its own keys on with the trigger's.
        let keda = [("consumerGroup", "a"), ("scalerAddress", "kshard:9309"), ("enableTLS", "false")];
        assert!(ScalerQuery::parse(&meta(&keda)).is_ok());
    }
}
