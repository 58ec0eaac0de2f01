//! The cluster-info worker: every `interval`, the cluster's brokers,
//! controller, topics (with the configuration values kminion's
//! `kafka_topic_info` shows) and log directory sizes, into the
//! [`ClusterView`] `/metrics` reads. Its failures are logged and retried at
//! the next interval, never reported as the lag's: brokers that refuse
//! DescribeLogDirs or DescribeConfigs (ACLs) cost those series, not `/ready`.

use std::sync::Arc;

use std::time::{Duration, Instant};

use tracing::{info, warn};

use super::brokers::Connector;
use super::error::WorkerError;
use crate::cluster_view::{ClusterSnapshot, ClusterView};

/// The worker's name in logs and on `/ready`.
pub(crate) const WORKER: &str = "cluster info";

/// What the worker asks, and how often.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterInfoSettings {
    /// Ask at all (kminion's cluster, broker and topic families).
    pub enabled: bool,
    /// How often.
    pub interval: Duration,
    /// The topic configuration keys `kafka_topic_info` has as labels (`.` as `_`).
    pub topic_config_keys: Vec<String>,
    /// Ask each broker for its log directories' sizes.
    pub log_dirs: bool,
}

impl Default for ClusterInfoSettings {
    /// kminion's defaults: on, `cleanup.policy`, log directories too; every 30 s.
    fn default() -> Self {
        ClusterInfoSettings {
            enabled: true,
            interval: Duration::from_secs(30),
            topic_config_keys: vec!["cleanup.policy".to_owned()],
            log_dirs: true,
        }
    }
}

pub(crate) struct ClusterInfoWorker {
    pub(crate) brokers: Arc<dyn Connector>,
    pub(crate) view: Arc<ClusterView>,
    pub(crate) settings: ClusterInfoSettings,
    pub(crate) shutdown: crate::shutdown::Shutdown,
}

impl ClusterInfoWorker {
    /// Asks until `stop`.
    pub(crate) fn run(&mut self) -> Result<(), WorkerError> {
        let keys: Arc<[String]> = Arc::from(self.settings.topic_config_keys.clone());
        let mut describer = None;
        let mut warned = false;
        while !self.shutdown.is_set() {
            if describer.is_none() {
                match self.brokers.cluster() {
                    Ok(Some(d)) => describer = Some(d),
                    Ok(None) => {
                        info!(
                            "the cluster's brokers, topics and log directories need kshard's own client, which these settings rule out (GSSAPI, OAUTHBEARER, keystores…): kafka_cluster_info, kafka_broker_info, kafka_topic_info and the log directory sizes are left out"
                        );
                        return self.idle();
                    }
                    Err(e) => warn!(error = %e, "connecting to describe the cluster"),
                }
            }
            if let Some(d) = &describer {
                match d.describe_cluster(&keys, self.settings.log_dirs) {
                    Ok(info) => {
                        warned = false;
                        self.view.set(ClusterSnapshot {
                            info: Arc::new(info),
                            config_keys: Arc::clone(&keys),
                            at: Instant::now(),
                        });
                    }
                    Err(e) if !warned => {
                        warned = true;
                        warn!(error = %e, "describing the cluster failed; its series go once the last answer is stale");
                    }
                    Err(_) => {}
                }
            }
            self.shutdown.sleep(self.settings.interval);
        }
        Ok(())
    }

    fn idle(&self) -> Result<(), WorkerError> {
        while !self.shutdown.is_set() {
            self.shutdown.sleep(Duration::from_secs(1));
        }
        Ok(())
    }
}
