//! [`ClusterView`]: what the cluster-info worker last learnt of the cluster
//! (brokers, controller, topics and their configuration values, log
//! directory sizes) and when, for kminion's cluster, broker and topic
//! families. Older than its limit, it is not shown: no frozen broker list
//! presented as current.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use kshard_kafka::ClusterInfo;

/// One answer of the cluster, with the configuration keys it was asked for.
#[derive(Debug, Clone)]
pub struct ClusterSnapshot {
    /// What the brokers said.
    pub info: Arc<ClusterInfo>,
    /// The topic configuration keys asked for (`kafka_topic_info`'s extra labels).
    pub config_keys: Arc<[String]>,
    /// When.
    pub at: Instant,
}

/// The last snapshot, shown while younger than `max_age`.
#[derive(Debug)]
pub struct ClusterView {
    last: Mutex<Option<ClusterSnapshot>>,
    max_age: Duration,
}

impl ClusterView {
    /// A view whose snapshots are shown for `max_age`.
    pub fn new(max_age: Duration) -> Self {
        ClusterView { last: Mutex::new(None), max_age }
    }

    /// Keeps `snapshot` as the last one.
    pub fn set(&self, snapshot: ClusterSnapshot) {
        *self.last.lock().unwrap_or_else(PoisonError::into_inner) = Some(snapshot);
    }

    /// The last snapshot, unless it is older than the limit at `now`.
    pub fn fresh(&self, now: Instant) -> Option<ClusterSnapshot> {
        let last = self.last.lock().unwrap_or_else(PoisonError::into_inner);
        last.as_ref().filter(|s| now.saturating_duration_since(s.at) <= self.max_age).cloned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_snapshot_is_shown_until_it_is_too_old() {
        let view = ClusterView::new(Duration::from_secs(90));
        let t = Instant::now();
        assert!(view.fresh(t).is_none(), "nothing yet");
        view.set(ClusterSnapshot { info: Arc::new(ClusterInfo::default()), config_keys: Arc::from([]), at: t });
        assert!(view.fresh(t + Duration::from_secs(90)).is_some());
        assert!(view.fresh(t + Duration::from_secs(91)).is_none(), "stale: not shown");
    }
}
