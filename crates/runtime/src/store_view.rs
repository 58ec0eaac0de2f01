//! [`StoreView`]: a read-only, consistent view of a replica's store for
//! readers beside the replica's own task (an application's HTTP handlers).
//! A view sees every transaction the store applied before it was opened and
//! none after, with the [`Checkpoint`] of exactly that state, so a handler
//! can tell which source offsets its answer covers (read your writes).
//!
//! A store hands out [`StoreViews`], a handle that opens views while the
//! replica goes on applying: a redb read transaction for [`RedbStore`]
//! (readers never block the writer), a copy-on-write snapshot for the stores
//! of a [`MemoryDisk`](crate::MemoryDisk).

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::recovery_log::record::SourceOffset;
use crate::store_data::{Checkpoint, Entries, StoreError};

/// One consistent state of a store, read only: what a view reads through
/// (a [`Store`](crate::Store) of an application's own implements it to
/// hand out views from [`Store::views`](crate::Store::views)).
pub trait StoreRead: Send + Sync {
    /// The value of `key`.
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>, StoreError>;
    /// Entries in key order after `after`, until about `max_bytes`.
    fn scan(&self, after: Option<&[u8]>, max_bytes: usize) -> Result<Entries, StoreError>;
    /// The checkpoint of the state.
    fn checkpoint(&self) -> Result<Option<Checkpoint>, StoreError>;
}

/// Opens views of one store, from any task, while its replica applies
/// transactions to it.
pub trait StoreViews: Send + Sync {
    /// A view of the store as it is now.
    fn view(&self) -> Result<StoreView, StoreError>;
}

/// A read-only, consistent view of a shard's store (see the module's doc).
pub struct StoreView {
    inner: Box<dyn StoreRead>,
    checkpoint: Option<Checkpoint>,
}

impl std::fmt::Debug for StoreView {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StoreView").field("checkpoint", &self.checkpoint).finish_non_exhaustive()
    }
}

impl StoreView {
    /// A view of the state `inner` reads.
    pub fn new(inner: Box<dyn StoreRead>) -> Result<Self, StoreError> {
        let checkpoint = inner.checkpoint()?;
        Ok(StoreView { inner, checkpoint })
    }

    /// The value of `key`.
    pub fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>, StoreError> {
        self.inner.get(key)
    }

    /// Entries in key order after `after` (from the first with `None`),
    /// until about `max_bytes` of keys and values.
    pub fn scan(&self, after: Option<&[u8]>, max_bytes: usize) -> Result<Entries, StoreError> {
        self.inner.scan(after, max_bytes)
    }

    /// The checkpoint of the state seen (`None`: nothing applied yet).
    pub fn checkpoint(&self) -> Option<&Checkpoint> {
        self.checkpoint.as_ref()
    }

    /// The sources' next offsets the state covers: every message before
    /// them is in it, none at or after.
    pub fn offsets(&self) -> &[SourceOffset] {
        self.checkpoint.as_ref().map_or(&[], |c| c.offsets.as_slice())
    }

    /// The next offset of `topic`'s `partition` the state covers (0 when
    /// the shard has read nothing of it, `None` when it does not read it or
    /// has not committed a transaction yet).
    pub fn offset(&self, topic: &str, partition: i32) -> Option<i64> {
        self.offsets().iter().find(|o| o.topic == topic && o.partition == partition).map(|o| o.offset)
    }
}

/// The member's replicas' store views, by shard (each added when its
/// replica's store opens, removed when the replica is torn down).
#[derive(Clone, Default)]
pub(crate) struct StoreViewsMap(Arc<std::sync::Mutex<BTreeMap<String, Arc<dyn StoreViews>>>>);

impl std::fmt::Debug for StoreViewsMap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let shards: Vec<String> =
            self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner).keys().cloned().collect();
        f.debug_tuple("StoreViewsMap").field(&shards).finish()
    }
}

impl StoreViewsMap {
    /// `views` are `shard`'s from now on.
    pub(crate) fn insert(&self, shard: &str, views: Arc<dyn StoreViews>) {
        self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner).insert(shard.to_owned(), views);
    }

    /// `shard`'s views, while its replica has them.
    pub(crate) fn get(&self, shard: &str) -> Option<Arc<dyn StoreViews>> {
        self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner).get(shard).cloned()
    }

    /// `shard`'s views are gone, when they are still `views` (a replica of
    /// the same shard started since keeps its own).
    pub(crate) fn remove(&self, shard: &str, views: &Arc<dyn StoreViews>) {
        let mut map = self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if map.get(shard).is_some_and(|v| Arc::ptr_eq(v, views)) {
            map.remove(shard);
        }
    }
}
