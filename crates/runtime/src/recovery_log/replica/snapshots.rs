//! A primary's snapshots, which bound replay: when one is due, writing it
//! and recording it as the shard's newest hint (never over a newer one),
//! with the log before the previous hint deleted; and a promoted standby's
//! learning of the newest.

use super::*;

impl Log<'_> {
    /// Learns the newest snapshot (a standby promoted: the primary before it
    /// may have written some); a keyspace that does not answer changes nothing.
    pub(crate) async fn refresh_hint(&mut self) {
        match self.ctx.hints.read(&self.spec.id).await {
            Ok(hints) => {
                if let Some((h, _)) = hints
                    && self.hint.is_none_or(|known| known.offset < h.current.offset)
                    && matches!(self.of_this_log(&h.current).await, Ok(true))
                {
                    self.hint = Some(h.current);
                }
            }
            Err(e) => tracing::warn!(shard = %self.spec.id, error = %e, "reading the shard's hints"),
        }
    }

    /// True when the log holds the snapshot `hint` names (see
    /// [`holds_snapshot`]); why the log could not be read to tell.
    pub(super) async fn of_this_log(&self, hint: &Hint) -> Result<bool, HintsError> {
        Ok(holds_snapshot(self.io.partitions.as_ref(), self.log, hint, KAFKA_TIMEOUT).await?)
    }

    /// True when the log since the last snapshot has outgrown the policy.
    pub(crate) fn snapshot_due(&self) -> bool {
        super::super::policy::snapshot_due(self.spec, self.since_snapshot, self.hint.map_or(0, |h| h.bytes))
    }

    /// Writes a snapshot of the store as `author` (the primary), records it as
    /// the shard's newest hint, and deletes the log before the previous one.
    /// Only writing the snapshot can fail the primary: when the hints cannot
    /// be read or written (etcd away, say), the log is kept whole and the next
    /// transaction tries again.
    pub(crate) async fn snapshot(&mut self, author: u64, offsets: &[SourceOffset]) -> Result<(), ReplicaError> {
        // Of the store with every transaction in it.
        self.finish_commit().await?;
        let started = Instant::now();
        let spec = self.spec;
        let clients = self.io.clients(self.log);
        append(&clients, &mut self.player, author, Body::SnapshotStart, Vec::new(), KAFKA_TIMEOUT).await?;
        // Where the snapshot-start record was applied (not where it was meant
        // to go: a fenced writer's record may have landed first).
        let Some(start) = self.player.snapshot_start() else { return Ok(()) };
        let mut after: Option<Vec<u8>> = None;
        let mut bytes = 0u64;
        loop {
            let entries = self.player.store().scan(after.as_deref(), SNAPSHOT_CHUNK)?;
            let size: usize = entries.iter().map(|(k, v)| k.len() + v.len()).sum();
            bytes += size as u64;
            after = entries.last().map(|(k, _)| k.clone());
            let mutations: Vec<Mutation> =
                entries.into_iter().map(|(key, value)| Mutation::Put { key, value }).collect();
            // Each chunk is read back before the next (or we are fenced).
            commit(&clients, &mut self.player, author, mutations, offsets.to_vec(), KAFKA_TIMEOUT).await?;
            if size < SNAPSHOT_CHUNK {
                break;
            }
        }
        // Complete: a replica starting at the log's start may begin here.
        append(&clients, &mut self.player, author, Body::SnapshotEnd, Vec::new(), KAFKA_TIMEOUT).await?;
        self.mark_applied();
        self.ctx.metrics.snapshot(&spec.id, bytes);
        let hint = Hint { offset: start.offset, seq: start.seq, checksum: start.checksum, author: Some(author), bytes };
        match self.record_hint(hint).await {
            Ok(Some(previous)) => {
                self.hint = Some(hint);
                self.since_snapshot = 0;
                let log = self.log;
                let deleted = self.io.partitions.delete_before(&log.topic, log.partition, previous).await;
                match deleted {
                    Ok(low) => {
                        tracing::info!(shard = %spec.id, offset = start.offset, bytes, low, ms = started.elapsed().as_millis() as u64, "snapshot written; log deleted before the previous one");
                    }
                    Err(e) => {
                        tracing::warn!(shard = %spec.id, error = %e, "deleting the log before the previous snapshot")
                    }
                }
            }
            Ok(None) => {
                self.hint = Some(hint);
                self.since_snapshot = 0;
                tracing::info!(shard = %spec.id, offset = start.offset, bytes, "snapshot written");
            }
            Err(e) => {
                tracing::warn!(shard = %spec.id, error = %e, "a snapshot was written but not recorded; retrying later")
            }
        }
        Ok(())
    }

    /// Records `hint` as the newest, keeping the one it replaces; returns the
    /// offset the log may be deleted before (the replaced hint's), if any.
    /// Checked against what was read, and never replacing a newer hint, so a
    /// slow or fenced primary cannot make the hints point backwards.
    pub(super) async fn record_hint(&self, hint: Hint) -> Result<Option<i64>, HintsError> {
        let stored = self.ctx.hints.read(&self.spec.id).await?;
        let (previous, revision) = match stored {
            // Hints of a log since recreated (the snapshot they name is not
            // there) are replaced whole: kept, they would refuse every
            // snapshot until the new log grew past them.
            Some((h, revision)) if !self.of_this_log(&h.current).await? => (None, revision),
            Some((h, _)) if h.current.offset >= hint.offset => {
                return Err(HintsError::Newer(h.current.offset));
            }
            Some((h, revision)) => (Some(h.current), revision),
            None => (None, 0),
        };
        if !self.ctx.hints.write(&self.spec.id, &Hints { current: hint, previous }, revision).await? {
            return Err(HintsError::Raced);
        }
        Ok(previous.map(|p| p.offset))
    }
}
