//! A replica of a shard without a recovery log
//! ([`crate::ShardSpec::unlogged`]): its store on the member's disk is its
//! state, and a transaction commits to that store alone. There is nothing
//! to play, follow or hand off: the replica is primary as soon as it is
//! assigned (a standby, added while the shard moves, waits), goes on from its store's checkpoint (a member that runs the
//! shard again finds its store, in memory or in its data directory) or from
//! the sources' minimum offsets with an empty store. It publishes nothing:
//! outputs are written in the recovery log's Kafka transaction, and there is
//! none.

use std::sync::Arc;
use std::time::Duration;

use crate::application::{Output, ShardApp};
use crate::model::ShardSpec;
use crate::progress::Progress;
use crate::recovery_log::record::{Mutation, SourceOffset};
use crate::recovery_log::replica::{Done, ReplicaError, ReplicaStore, store_name};
use crate::replica_log::{Parts, ReplicaLog, random_author};
use crate::store::{Checkpoint, LogPosition};
use crate::store_view::StoreViews;
use crate::worker_context::WorkerContext;

/// The replica's store and application object (see the module).
pub(crate) struct NoLog<'a> {
    ctx: &'a WorkerContext,
    spec: &'a ShardSpec,
    store: ReplicaStore,
    /// The sources' offsets the store's state covers.
    offsets: Vec<SourceOffset>,
    /// Transactions committed to the store, counted in its checkpoint.
    committed: i64,
    /// When a transaction was last committed (the opening counts as one).
    applied: std::time::Instant,
    app: Box<dyn ShardApp>,
}

impl<'a> NoLog<'a> {
    /// Opens the replica's store as its member's disk has it.
    pub(crate) fn open(ctx: &'a WorkerContext, spec: &'a ShardSpec) -> Result<Self, ReplicaError> {
        let app = ctx.app.shard(spec).map_err(|error| ReplicaError::Application {
            at: "starting the application's object for the replica".into(),
            error,
        })?;
        let name = store_name(spec);
        let (store, replaced) = ctx.disk.open(&name, false)?;
        if let Some(why) = replaced {
            tracing::warn!(shard = %spec.id, store = name, error = %why, "the store was not readable: set aside, reading the sources again from their minimum offsets");
        }
        let (offsets, committed) = match store.checkpoint()? {
            Some(c) => (c.offsets, c.log.next_offset),
            None => (Vec::new(), 0),
        };
        Ok(NoLog { ctx, spec, store, offsets, committed, applied: tokio::time::Instant::now().into_std(), app })
    }

    fn publish(&self) {
        let progress = Progress {
            next_offset: self.committed,
            log_end: self.committed,
            published: Some(std::time::Instant::now()),
            applied: Some(self.applied),
        };
        self.ctx.metrics.behind(&self.spec.id, 0);
        self.ctx
            .progress
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(self.spec.id.clone(), progress);
    }
}

impl ReplicaLog for NoLog<'_> {
    fn parts(&mut self) -> Parts<'_> {
        Parts { store: self.store.as_ref(), in_flight: None, app: self.app.as_mut() }
    }

    fn offsets(&self) -> &[SourceOffset] {
        &self.offsets
    }

    fn views(&self) -> Option<Arc<dyn StoreViews>> {
        self.store.views()
    }

    async fn play_to_head(&mut self, _: impl FnMut() -> bool + Send) -> Result<bool, ReplicaError> {
        self.publish();
        Ok(true)
    }

    /// There is no log to follow: a replica the allocator adds to move the
    /// shard (to a member that joined) waits, and once promoted goes on
    /// from its own store (the sources' minimum offsets when it has none).
    async fn follow(&mut self) -> Result<(), ReplicaError> {
        Ok(())
    }

    async fn hand_off(&mut self) -> Result<u64, ReplicaError> {
        tracing::info!(shard = %self.spec.id, from = ?self.offsets, "primary of a shard without a recovery log: going on from its store");
        self.publish();
        Ok(random_author())
    }

    async fn tail(&mut self, wait: Duration) -> Result<(), ReplicaError> {
        // Nothing is committed elsewhere: the wait is for a command.
        tokio::time::sleep(wait).await;
        self.publish();
        Ok(())
    }

    async fn idle(&mut self) -> Result<(), ReplicaError> {
        Ok(())
    }

    async fn commit(
        &mut self,
        author: u64,
        (mutations, offsets): (Vec<Mutation>, Vec<SourceOffset>),
        outputs: Vec<Output>,
        done: Done,
    ) -> Result<(), ReplicaError> {
        if !outputs.is_empty() {
            return Err(ReplicaError::Unlogged("publishing is done in the recovery log's Kafka transaction"));
        }
        let next = self.committed + 1;
        let log = LogPosition { next_offset: next, seq: next as u64, checksum: 0, author: Some(author) };
        let checkpoint = Checkpoint { log, offsets, partial: None };
        self.store.apply(&mutations, &checkpoint)?;
        self.committed = next;
        self.offsets = checkpoint.offsets;
        self.applied = tokio::time::Instant::now().into_std();
        done.report(self.app.as_mut(), &self.ctx.metrics, &self.spec.id);
        self.publish();
        Ok(())
    }

    async fn finish_commit(&mut self) -> Result<(), ReplicaError> {
        Ok(())
    }

    fn stopped(&mut self) {
        self.app.stopped();
    }
}
