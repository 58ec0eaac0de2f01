//! [`AppState`]: one watched cluster as HTTP serves it (its monitor,
//! metrics and member), and the whole process's own series beside the
//! clusters' ([`ProcessSeries`]). Kshard's routes (`http.rs`) and Burrow's
//! (`burrow_http.rs`) both serve it.

use std::sync::Arc;

use crate::LocalMember;
use crate::metrics::{Metrics, exposition};
use crate::monitor::Monitor;

/// One watched cluster, as HTTP serves it.
#[derive(Clone)]
pub(crate) struct AppState {
    /// Its name under `clusters:` (its `cluster` label and path); `None`
    /// for the one cluster of a configuration without `clusters:`.
    pub(crate) name: Option<Arc<str>>,
    pub(crate) monitor: Arc<Monitor>,
    pub(crate) metrics: Arc<Metrics>,
    /// With a data directory: the runtime member running the shards.
    pub(crate) member: LocalMember,
    /// The bootstrap servers (Burrow's cluster detail lists them).
    pub(crate) brokers: Arc<str>,
    /// Seconds between watermark refreshes (Burrow's offset refresh).
    pub(crate) refresh_seconds: i64,
    /// The name of the label naming the cluster (`cluster_label`), when set.
    pub(crate) cluster_label: Option<Arc<str>>,
    /// The metrics namespace (the process's).
    pub(crate) namespace: Arc<str>,
    /// What the cluster's Kafka clients sent and received.
    pub(crate) traffic: Arc<kshard_kafka::Traffic>,
    /// The process's own series that belong to no cluster (log messages,
    /// the OTLP export's), shown by the root `/metrics` only.
    pub(crate) process: Option<ProcessSeries>,
}

/// Series of the whole process, beside the clusters'.
#[derive(Clone)]
pub(crate) struct ProcessSeries {
    /// The metrics namespace they are named under.
    pub(crate) namespace: Arc<str>,
    /// Log messages by level, when the process counts them.
    pub(crate) logs: Option<Arc<crate::LogCounts>>,
    /// The OTLP export's outcomes, when it exports.
    pub(crate) otlp: Option<Arc<crate::io::otlp_export::OtlpStatus>>,
    /// The notifiers' notices, when there are notifiers.
    pub(crate) notifiers: Option<Arc<crate::io::notifier_status::NotifierStatus>>,
}

/// What the root `/metrics` shows, and the OTLP export sends: the one
/// cluster's series, or every cluster's merged, then the process's own.
pub(crate) fn root_metrics(all: &[AppState], process: Option<&ProcessSeries>) -> Result<String, std::fmt::Error> {
    let mut text = match all {
        [one] => one.render_metrics()?,
        _ => exposition::merge(&all.iter().map(AppState::render_metrics).collect::<Result<Vec<_>, _>>()?),
    };
    if let Some(p) = process {
        if let Some(logs) = &p.logs {
            text.push_str(&logs.render(&p.namespace));
        }
        if let Some(otlp) = &p.otlp {
            text.push_str(&otlp.render(&p.namespace));
        }
        if let Some(notifiers) = &p.notifiers {
            text.push_str(&notifiers.render(&p.namespace));
        }
        text.push_str(&crate::metrics::process_resources::render());
    }
    Ok(text)
}

impl AppState {
    /// Its name in Burrow's API and `/api/clusters`.
    pub(crate) fn cluster_name(&self) -> &str {
        self.name.as_deref().unwrap_or(crate::burrow::CLUSTER)
    }

    /// Its series (then its shards' runtime series), each labelled with the
    /// cluster when it is named (or when the profile's tool always labels it).
    pub(crate) fn render_metrics(&self) -> Result<String, std::fmt::Error> {
        let mut text = self.metrics.render()?;
        if let Some(shards) = self.member.shared() {
            text.push_str(&shards.metrics.encode());
        }
        text.push_str(&crate::metrics::process::traffic(&self.namespace, self.traffic.totals()));
        let (default, always) = self.metrics.profile().cluster_label();
        let label = self.cluster_label.as_deref().unwrap_or(default);
        Ok(match &self.name {
            Some(name) => exposition::with_label(&text, label, name),
            None if always => exposition::with_label(&text, label, self.cluster_name()),
            None => text,
        })
    }
}
