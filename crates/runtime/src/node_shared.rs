//! [`NodeShared`]: what a running member shares with its HTTP endpoints and
//! readers: its metrics, its replicas' statuses, positions and store views,
//! and the cluster as the keyspace says.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::cluster_view::ClusterView;
use crate::metrics::Metrics;
use crate::progress::{Progress, ProgressMap};
use crate::shard_row::ShardRow;
use crate::status::ReplicaCode;
use crate::store_view::{StoreViews, StoreViewsMap};

/// What a running member shares with its HTTP endpoints.
#[derive(Debug, Clone, Default)]
pub struct NodeShared {
    /// Its metrics.
    pub metrics: Arc<Metrics>,
    /// Its replicas' positions in their logs.
    pub progress: ProgressMap,
    /// Its replicas' statuses, by shard (IDLE ones are left out).
    pub statuses: Arc<std::sync::Mutex<BTreeMap<String, ReplicaCode>>>,
    /// Every shard's replicas across the cluster, as the keyspace says.
    pub cluster: Arc<std::sync::Mutex<ClusterView>>,
    /// Its replicas' stores, for readers ([`crate::Queries`]).
    pub(crate) views: StoreViewsMap,
}

impl NodeShared {
    /// The member's replicas and their statuses, by shard.
    pub fn statuses(&self) -> BTreeMap<String, ReplicaCode> {
        self.statuses.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone()
    }

    /// This member's replicas as `kshard shards list` rows (statuses as the
    /// member last wrote them, and how far each is behind its log).
    pub fn local_rows(&self, member: &str, zone: &str) -> Vec<ShardRow> {
        let progress = self.progress.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone();
        self.statuses()
            .into_iter()
            .map(|(shard, code)| ShardRow {
                behind: progress.get(&shard).map(Progress::behind),
                status: code.name().to_owned(),
                shard,
                member: member.to_owned(),
                zone: zone.to_owned(),
                slot: None,
                errors: Vec::new(),
            })
            .collect()
    }

    /// `f` of the cluster's replicas as the keyspace says, under its lock.
    pub(crate) fn with_cluster<T>(&self, f: impl FnOnce(&ClusterView) -> T) -> T {
        f(&self.cluster.lock().unwrap_or_else(std::sync::PoisonError::into_inner))
    }

    /// A copy of the cluster's replicas as the keyspace says.
    pub fn cluster(&self) -> ClusterView {
        self.cluster.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone()
    }

    /// The positions of this member's replicas in their logs.
    pub fn progress(&self) -> BTreeMap<String, Progress> {
        self.progress.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone()
    }

    /// The views of this member's replica of `shard`, while it has one.
    pub(crate) fn views(&self, shard: &str) -> Option<Arc<dyn StoreViews>> {
        self.views.get(shard)
    }

    pub(crate) fn set_status(&self, shard: &str, code: ReplicaCode) {
        let mut statuses = self.statuses.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if code == ReplicaCode::Idle {
            statuses.remove(shard);
        } else {
            statuses.insert(shard.to_owned(), code);
        }
    }
}
