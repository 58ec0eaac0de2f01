//! [`ServeOptions`]: how `kshard serve` watches one cluster, as the
//! service (`service.rs`) and the cluster's workers (`cluster_workers.rs`)
//! read it.

use std::time::Duration;

use kshard_kafka::{CONSUMER_OFFSETS_TOPIC, ClientSettings};

use crate::monitor::MonitorSettings;
use crate::refresher::ScrapeMode;

/// How `kshard serve` watches one cluster ([`crate::service::run_many`] takes several).
#[derive(Debug)]
pub struct ServeOptions {
    /// The cluster's name under `clusters:`: the `cluster` label on each of
    /// its series, its path (`/clusters/{name}/`) and its name in Burrow's
    /// API. `None`: one cluster, no label, `local` in Burrow's API.
    pub name: Option<crate::settings::ClusterName>,
    /// How to reach Kafka.
    pub kafka: ClientSettings,
    /// The topic to read: `__consumer_offsets`, or a topic of the same layout.
    pub offsets_topic: String,
    /// Read share groups' delivery state from `__share_group_state` too
    /// (offsets-topic mode).
    pub share_groups: bool,
    /// Where group offsets come from.
    pub mode: ScrapeMode,
    /// How often watermarks are refreshed.
    pub watermark_interval: Duration,
    /// Filters and granularity.
    pub monitor: MonitorSettings,
    /// Timeout of each admin call.
    pub request_timeout: Duration,
    /// Where to keep each partition's state (durable shards of the runtime,
    /// recovery logs in Kafka), so that a restart reads only what is new;
    /// `None`: keep nothing, read everything at start.
    pub data_dir: Option<std::path::PathBuf>,
    /// With `data_dir`: the topic holding the shards' recovery logs (default
    /// [`crate::recovery_log_topic`] of the offsets topic). Each kshard
    /// deployment on one Kafka cluster needs its own.
    pub recovery_log_topic: Option<String>,
    /// With `data_dir`: several processes share the shards through etcd,
    /// each serving the whole cluster's lag.
    pub cluster: Option<crate::log_reader::ClusterOptions>,
    /// kminion's cluster, broker and topic families: what is asked, how often.
    pub cluster_info: crate::cluster_info::ClusterInfoSettings,
    /// kminion's end-to-end probe (off by default).
    pub end_to_end: crate::EndToEndSettings,
}

impl ServeOptions {
    /// Options with kshard's defaults: `__consumer_offsets`, read from the log,
    /// watermarks every 5 s.
    pub fn new(kafka: ClientSettings) -> Self {
        ServeOptions {
            name: None,
            kafka,
            offsets_topic: CONSUMER_OFFSETS_TOPIC.to_owned(),
            share_groups: true,
            mode: ScrapeMode::OffsetsTopic,
            watermark_interval: Duration::from_secs(5),
            monitor: MonitorSettings::default(),
            request_timeout: Duration::from_secs(30),
            data_dir: None,
            recovery_log_topic: None,
            cluster: None,
            cluster_info: crate::cluster_info::ClusterInfoSettings::default(),
            end_to_end: crate::EndToEndSettings::default(),
        }
    }

    /// How old watermarks may be before lag counts as stale: three refresh
    /// intervals, and at least one interval plus the request timeout, so that
    /// one slow refresh on a big cluster does not turn `/ready` 503.
    pub fn stale_after(&self) -> Duration {
        (self.watermark_interval * 3).max(self.watermark_interval + self.request_timeout)
    }
}
