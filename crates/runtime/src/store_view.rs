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

use crate::recovery_log::record::SourceOffset;
use crate::store::{Checkpoint, Entries, StoreError};

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
