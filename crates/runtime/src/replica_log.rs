//! Where a replica keeps its shard's state, as its worker drives it: the
//! shard's recovery log ([`Log`]: played, tailed, handed off and written
//! transaction by transaction) or, for a shard without one, its store alone
//! ([`crate::unlogged::NoLog`]). The worker's loop and a primary's
//! transactions ([`crate::sources`]) are written once, over this trait.

use std::sync::{Arc, PoisonError};
use std::time::Duration;

use crate::application::{Output, ShardApp};
use crate::recovery_log::io::hand_off;
use crate::recovery_log::record::{Mutation, SourceOffset};
use crate::recovery_log::replica::{Done, InFlight, KAFKA_TIMEOUT, Log, ReplicaError};
use crate::store::Store;
use crate::store_view::StoreViews;

/// What a transaction reads and calls while it is taken.
pub(crate) struct Parts<'a> {
    /// The replica's store.
    pub(crate) store: &'a dyn Store,
    /// The transaction before, while it is being committed: the next one
    /// reads through its writes.
    pub(crate) in_flight: Option<&'a InFlight>,
    /// The application's object for the replica.
    pub(crate) app: &'a mut dyn ShardApp,
}

/// A replica's state and where its changes go (see the module).
pub(crate) trait ReplicaLog {
    /// What a transaction reads and calls.
    fn parts(&mut self) -> Parts<'_>;
    /// The sources' offsets the store's state covers.
    fn offsets(&self) -> &[SourceOffset];
    /// The store's views, for readers.
    fn views(&self) -> Option<Arc<dyn StoreViews>>;
    /// Brings the store up to what the shard has committed; `false` when
    /// `stop` said to stop first.
    async fn play_to_head(&mut self, stop: impl FnMut() -> bool + Send) -> Result<bool, ReplicaError>;
    /// From here on, a standby whose application follows what it plays.
    async fn follow(&mut self) -> Result<(), ReplicaError>;
    /// Takes the shard over as its primary; the author it writes as.
    async fn hand_off(&mut self) -> Result<u64, ReplicaError>;
    /// Applies what the primary commits within `wait` (a standby, or a
    /// primary before its sources start).
    async fn tail(&mut self, wait: Duration) -> Result<(), ReplicaError>;
    /// A primary's transaction took nothing worth committing.
    async fn idle(&mut self) -> Result<(), ReplicaError>;
    /// Commits a primary's transaction as `author`: its writes, the sources'
    /// offsets after it, and what it publishes.
    async fn commit(
        &mut self,
        author: u64,
        writes: (Vec<Mutation>, Vec<SourceOffset>),
        outputs: Vec<Output>,
        done: Done,
    ) -> Result<(), ReplicaError>;
    /// Waits until the transaction being committed, if any, is in the store.
    async fn finish_commit(&mut self) -> Result<(), ReplicaError>;
    /// The replica stops: the application's object is told.
    fn stopped(&mut self);
}

/// A fresh author id: unique per hand-off across processes and restarts.
pub(crate) fn random_author() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_nanos());
    h.write_u32(std::process::id());
    h.finish() | 1
}

impl ReplicaLog for Log<'_> {
    fn parts(&mut self) -> Parts<'_> {
        Parts {
            store: self.player.store().as_ref(),
            in_flight: self.in_flight.as_ref(),
            app: self.app.get_mut().unwrap_or_else(PoisonError::into_inner).as_mut(),
        }
    }

    fn offsets(&self) -> &[SourceOffset] {
        self.player.offsets()
    }

    fn views(&self) -> Option<Arc<dyn StoreViews>> {
        self.player.store().views()
    }

    async fn play_to_head(&mut self, stop: impl FnMut() -> bool + Send) -> Result<bool, ReplicaError> {
        Log::play_to_head(self, stop).await
    }

    async fn follow(&mut self) -> Result<(), ReplicaError> {
        let app = self.app.get_mut().unwrap_or_else(PoisonError::into_inner);
        app.following(self.player.store().as_ref(), self.player.offsets())
            .map_err(|error| ReplicaError::Application { at: "following the shard as a standby".into(), error })?;
        self.follow = true;
        Ok(())
    }

    async fn hand_off(&mut self) -> Result<u64, ReplicaError> {
        // What is played from here on is read back as the primary's.
        self.follow = false;
        let me = random_author();
        self.io.fence(self.log).await?;
        let attempts = hand_off(&self.io.clients(self.log), &mut self.player, me, KAFKA_TIMEOUT).await?;
        self.mark_applied();
        tracing::info!(shard = %self.spec.id, author = me, attempts, "took the recovery log over");
        self.refresh_hint().await;
        self.publish();
        Ok(me)
    }

    async fn tail(&mut self, wait: Duration) -> Result<(), ReplicaError> {
        Log::tail(self, wait).await
    }

    async fn idle(&mut self) -> Result<(), ReplicaError> {
        self.refresh_end(false).await
    }

    async fn commit(
        &mut self,
        author: u64,
        (mutations, offsets): (Vec<Mutation>, Vec<SourceOffset>),
        outputs: Vec<Output>,
        done: Done,
    ) -> Result<(), ReplicaError> {
        // Committed while the next transaction is taken (the one before it
        // is committed and in the store first).
        self.start_commit(author, (mutations, offsets.clone()), outputs, done).await?;
        if self.snapshot_due() {
            self.snapshot(author, &offsets).await?;
        }
        self.publish();
        Ok(())
    }

    async fn finish_commit(&mut self) -> Result<(), ReplicaError> {
        Log::finish_commit(self).await
    }

    fn stopped(&mut self) {
        self.app.get_mut().unwrap_or_else(PoisonError::into_inner).stopped();
    }
}
