//! [`LocalMember`]: with a data directory, the runtime member this process
//! runs the offsets topic's shards on, once it has started — what it shares
//! (its replicas' statuses and progress, its view of the cluster, its
//! metrics) and its id. The shards reader sets it at each start; HTTP,
//! `/ready` and `/metrics` read it. Without a data directory it stays empty.

use std::sync::{Arc, Mutex, PoisonError};

use kshard_runtime::NodeShared;

/// The runtime member running the shards here, when there is one.
#[derive(Debug, Clone, Default)]
pub struct LocalMember(Arc<Mutex<Option<(NodeShared, String)>>>);

impl LocalMember {
    /// The member `id` started, sharing `shared`.
    pub fn set(&self, shared: NodeShared, id: String) {
        *self.0.lock().unwrap_or_else(PoisonError::into_inner) = Some((shared, id));
    }

    /// What the member shares, and its id.
    pub fn get(&self) -> Option<(NodeShared, String)> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }

    /// What the member shares.
    pub fn shared(&self) -> Option<NodeShared> {
        self.get().map(|(shared, _)| shared)
    }
}
