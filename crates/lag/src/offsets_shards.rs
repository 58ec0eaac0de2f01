//! The lag monitor as an application of `kshard-runtime`: one shard per
//! partition of the offsets topic, its store a compacted copy of that
//! partition, so that a restart on the data directory reads only what was
//! committed since it stopped.
//!
//! The store maps each record's key (the raw `__consumer_offsets` key) to its
//! offset (8 bytes, big-endian) and raw value; a tombstone deletes the key —
//! what Kafka's log cleaner keeps of the partition. A primary applies each
//! record to the monitor's unit as it consumes it; when a replica becomes
//! primary, its unit is rebuilt from the store by applying the entries in
//! offset order (as if reading the compacted partition), then positioned at
//! the store's checkpoint.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

use kshard_runtime::application::{Application, Message, Transaction};
use kshard_runtime::model::ShardSpec;
use kshard_runtime::recovery_log::record::SourceOffset;
use kshard_runtime::store::Store;
use tracing::{info, warn};

use crate::group_offsets::GroupOffsets;
use crate::monitor::Monitor;

/// The worker's name in logs and on `/ready` while a shard is not served.
pub(crate) const WORKER: &str = crate::offsets_reader::WORKER;

/// Bytes scanned per store read when rebuilding a unit.
const SCAN_CHUNK: usize = 4 << 20;

/// The lag application.
pub(crate) struct OffsetsShards {
    pub(crate) monitor: Arc<Monitor>,
    /// Partitions of the offsets topic (it may grow).
    pub(crate) partitions: AtomicI32,
    /// Partitions whose shard is primary here.
    primaries: Mutex<BTreeSet<i32>>,
    /// Partitions restored from their store after the service had caught up,
    /// until they read to the end again: their state is older than what was
    /// shown before, so `/ready` waits for them.
    recovering: Mutex<BTreeSet<i32>>,
    /// Set when the service stops: shards stopping then are no failure.
    pub(crate) stopping: Arc<AtomicBool>,
}

impl OffsetsShards {
    pub(crate) fn new(monitor: Arc<Monitor>, partitions: i32, stopping: Arc<AtomicBool>) -> Self {
        OffsetsShards {
            monitor,
            partitions: AtomicI32::new(partitions),
            primaries: Mutex::new(BTreeSet::new()),
            recovering: Mutex::new(BTreeSet::new()),
            stopping,
        }
    }
}

impl OffsetsShards {
    /// Says on `/ready` that reading works once every partition's shard is
    /// primary here and none is reading again after a recovery.
    pub(crate) fn settle(&self) {
        let primaries = self.primaries.lock().unwrap_or_else(PoisonError::into_inner).len() as i32;
        let recovering = self.recovering.lock().unwrap_or_else(PoisonError::into_inner).is_empty();
        if recovering && primaries >= self.partitions.load(Ordering::Acquire) {
            self.monitor.health().worker_running(WORKER);
        }
    }
}

fn partition_of(shard: &ShardSpec) -> Result<i32, String> {
    shard.sources.first().map(|s| s.partition).ok_or_else(|| format!("shard {} has no source", shard.id))
}

/// Rebuilds a unit from a store: its entries applied in offset order.
pub(crate) fn unit_from_store(store: &dyn Store, next_offset: Option<i64>) -> Result<GroupOffsets, String> {
    let mut entries: Vec<(i64, Vec<u8>, Vec<u8>)> = Vec::new();
    let mut after: Option<Vec<u8>> = None;
    loop {
        let chunk = store.scan(after.as_deref(), SCAN_CHUNK).map_err(|e| e.to_string())?;
        let Some((last, _)) = chunk.last() else { break };
        after = Some(last.clone());
        for (key, value) in chunk {
            let Some((offset, raw)) = value.split_first_chunk::<8>() else {
                return Err(format!("a stored record of {} bytes has no offset", value.len()));
            };
            entries.push((i64::from_be_bytes(*offset), key, raw.to_vec()));
        }
    }
    entries.sort_unstable_by_key(|(offset, _, _)| *offset);
    let mut unit = GroupOffsets::default();
    for (offset, key, value) in &entries {
        // Records that did not decode when read do not now either (they were
        // counted then); they are kept for a kshard that can.
        let _ = unit.apply_bytes(*offset, Some(key), Some(value));
    }
    if let Some(next) = next_offset {
        unit.advance_to(next);
    }
    Ok(unit)
}

impl Application for OffsetsShards {
    fn consume(&self, _: &ShardSpec, txn: &mut Transaction<'_>, m: &Message<'_>) -> Result<(), String> {
        if let Err(s) = self.monitor.apply(m.partition, m.offset, m.key, m.value) {
            // Counted and logged, like the direct reader. Still kept: a later
            // kshard that can decode it restores it.
            warn!(partition = s.partition, offset = s.offset, reason = s.skipped.reason(), error = %s.skipped, topic = m.topic, "skipped a record of the offsets topic");
        }
        let Some(key) = m.key else { return Ok(()) };
        match m.value {
            Some(value) => {
                let mut stored = Vec::with_capacity(8 + value.len());
                stored.extend_from_slice(&m.offset.to_be_bytes());
                stored.extend_from_slice(value);
                txn.put(key, stored);
            }
            None => txn.delete(key),
        }
        Ok(())
    }

    fn recovered(&self, shard: &ShardSpec, store: &dyn Store, offsets: &[SourceOffset]) -> Result<(), String> {
        let partition = partition_of(shard)?;
        let started = Instant::now();
        let next = offsets.iter().find(|o| o.partition == partition).map(|o| o.offset);
        let unit = unit_from_store(store, next)?;
        let (groups, offsets_known) = (unit.groups().count(), unit.offset_count());
        self.monitor.replace_unit(partition, unit);
        info!(shard = %shard.id, partition, groups, offsets = offsets_known, next_offset = ?next, ms = started.elapsed().as_millis() as u64, "restored the partition's state from the store");
        self.primaries.lock().unwrap_or_else(PoisonError::into_inner).insert(partition);
        if self.monitor.is_caught_up() {
            // Serving already: this partition's lag goes back to its checkpoint
            // until it has read to the end again.
            self.recovering.lock().unwrap_or_else(PoisonError::into_inner).insert(partition);
            let reason = format!("partition {partition} is reading again from its store's checkpoint");
            self.monitor.health().worker_failed(WORKER, reason, Instant::now());
        }
        self.settle();
        Ok(())
    }

    fn end_of_source(&self, _: &ShardSpec, _: &str, partition: i32, next_offset: Option<i64>) {
        self.monitor.end_of_partition(partition, next_offset);
        if self.recovering.lock().unwrap_or_else(PoisonError::into_inner).remove(&partition) {
            self.settle();
        }
    }

    fn stopped(&self, shard: &ShardSpec) {
        let Ok(partition) = partition_of(shard) else { return };
        let was_primary = self.primaries.lock().unwrap_or_else(PoisonError::into_inner).remove(&partition);
        self.recovering.lock().unwrap_or_else(PoisonError::into_inner).remove(&partition);
        if was_primary && !self.stopping.load(Ordering::Acquire) {
            let reason = format!("the shard of partition {partition} stopped; it is being recovered");
            self.monitor.health().worker_failed(WORKER, reason, Instant::now());
        }
    }
}
