//! What every replica worker of a member shares ([`WorkerContext`]): the
//! vocabulary the worker (`replica_worker.rs`) and the logs it drives (`replica_log.rs`,
//! `unlogged.rs`, `sources.rs`, `recovery_log/replica.rs`) share.

use std::sync::Arc;

use crate::application::Application;
use crate::disk::Disk;
use crate::metrics::Metrics;
use crate::partitions::Partitions;
use crate::progress::ProgressMap;
use crate::recovery_log::hints::HintBoard;

/// What a worker needs, shared by all the member's replicas.
pub(crate) struct WorkerContext {
    /// Where the recovery logs are and the sources come from (Kafka, or
    /// memory), shared by the member's replicas.
    pub(crate) partitions: Arc<dyn Partitions>,
    /// Where the replicas' stores are.
    pub(crate) disk: Arc<dyn Disk>,
    pub(crate) app: Arc<dyn Application>,
    pub(crate) metrics: Arc<Metrics>,
    pub(crate) progress: ProgressMap,
    /// The replicas' store views, for readers.
    pub(crate) views: crate::store_view::StoreViewsMap,
    /// The shards' hints.
    pub(crate) hints: Arc<dyn HintBoard>,
}

/// The fetch queue of each replica's readers (its log's, and a primary's
/// sources'): a member runs two per shard it is primary of, one per standby.
pub(crate) const READER_QUEUE_KBYTES: u32 = 256;
