//! [`ProcessOptions`]: what a `serve` process has once, whatever the number
//! of clusters it watches: the metric names, the label naming each series'
//! cluster, the web configuration file, the OTLP export and the log counts.

use std::path::PathBuf;
use std::sync::Arc;

use super::names::{LabelName, MetricNamespace};

/// The whole process's options; each cluster's are a
/// [`ServeOptions`](crate::service::ServeOptions).
#[derive(Debug, Clone)]
pub struct ProcessOptions {
    /// Metric name prefix (`kshard`; `kminion` for drop-in names).
    pub namespace: MetricNamespace,
    /// Whose metric names `/metrics` uses.
    pub profile: crate::Profile,
    /// The name of the label naming the cluster of every series (`None`:
    /// `cluster`, or `cluster_name` in the kafka_lag_exporter profile), for
    /// Prometheus setups whose own `cluster` label would collide.
    pub cluster_label: Option<LabelName>,
    /// The exporter-toolkit web configuration file (TLS, basic auth,
    /// headers, rate limit), read again whenever it changes; `None`: plain,
    /// open HTTP.
    pub web_config: Option<PathBuf>,
    /// Push the series to an OpenTelemetry collector; `None`: no export.
    pub otlp: Option<crate::OtlpSettings>,
    /// Where the process counts its log messages
    /// (`<ns>_log_messages_total`); `None`: not shown.
    pub log_counts: Option<Arc<crate::LogCounts>>,
    /// Burrow's notifiers (HTTP and email) over every cluster's groups.
    pub notifiers: Vec<crate::NotifierSettings>,
}

impl ProcessOptions {
    /// `profile`'s names under its own namespace (`kminion` for kminion's,
    /// `kshard` otherwise), no web configuration, no export.
    pub fn new(profile: crate::Profile) -> Self {
        ProcessOptions {
            namespace: MetricNamespace::known(profile.default_namespace()),
            profile,
            cluster_label: None,
            web_config: None,
            otlp: None,
            log_counts: None,
            notifiers: Vec::new(),
        }
    }

    /// These options under `namespace`.
    pub fn with_namespace(self, namespace: &str) -> Result<Self, super::names::InvalidName> {
        Ok(ProcessOptions { namespace: namespace.parse()?, ..self })
    }
}

impl Default for ProcessOptions {
    /// kshard's own names.
    fn default() -> Self {
        ProcessOptions::new(crate::Profile::Kshard)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_profiles_namespace_is_valid() {
        for profile in crate::Profile::ALL {
            assert!(profile.default_namespace().parse::<MetricNamespace>().is_ok(), "{profile:?}");
            assert_eq!(ProcessOptions::new(profile).namespace.as_str(), profile.default_namespace());
        }
    }
}
