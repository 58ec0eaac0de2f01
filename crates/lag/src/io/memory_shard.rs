//! A replica of a log's shard kept in memory (plain `serve`, no data
//! directory): the shard has no recovery log, and the monitor's unit of its
//! partition is its state. Each record goes to the unit alone; the shard's
//! store holds only the runtime's checkpoint (the partition's next offset as
//! of the last transaction). A replica started again in this process (after a
//! failure, or the reader's restart) keeps the unit and goes on from the
//! checkpoint, passing over the records the unit holds already (a failed
//! transaction's, applied but not committed).

use std::sync::Arc;

use kshard_runtime::recovery_log::SourceOffset;
use kshard_runtime::{AppError, Message, ShardApp, ShardSpec, Store, Transaction};
use tracing::info;

use crate::log_shards::{Layout, LogShards, partition_of};

/// One replica's object (see the module).
pub(crate) struct MemoryShard<L: Layout> {
    shards: Arc<LogShards<L>>,
    spec: ShardSpec,
    partition: i32,
    /// Records before this offset are in the unit already.
    floor: i64,
    /// The partition's unit, applied to without the units' map lock.
    unit: Arc<std::sync::Mutex<L::Unit>>,
    /// Records applied and not yet counted read: counted at the end of each
    /// transaction and before the partition's end is told, one atomic add
    /// rather than one a record.
    uncounted: u64,
}

impl<L: Layout> MemoryShard<L> {
    pub(crate) fn new(shards: Arc<LogShards<L>>, spec: &ShardSpec) -> Result<Self, AppError> {
        let partition = partition_of(spec)?;
        let unit = L::units(&shards.monitor).unit(partition);
        Ok(MemoryShard { shards, spec: spec.clone(), partition, floor: 0, unit, uncounted: 0 })
    }

    /// Counts the records applied since the last count.
    fn count_read(&mut self) {
        L::units(&self.shards.monitor).count_read(self.partition, std::mem::take(&mut self.uncounted));
    }
}

impl<L: Layout> ShardApp for MemoryShard<L> {
    fn consume(&mut self, _: &mut Transaction<'_>, m: &Message<'_>) -> Result<(), AppError> {
        if m.offset >= self.floor {
            self.shards.layout.apply(&self.shards.monitor, &self.unit, m);
            self.uncounted += 1;
        }
        Ok(())
    }

    fn finalize(&mut self, _: &mut Transaction<'_>) -> Result<(), AppError> {
        self.count_read();
        Ok(())
    }

    fn recovered(&mut self, _: &dyn Store, offsets: &[SourceOffset]) -> Result<(), AppError> {
        let next = offsets.iter().find(|o| o.partition == self.partition).map(|o| o.offset);
        self.floor = L::units(&self.shards.monitor).position(self.partition).unwrap_or(0);
        if next.is_some() {
            info!(shard = %self.spec.id, partition = self.partition, next_offset = ?next, unit_at = self.floor, "going on with the partition's state in memory");
        }
        self.shards.primary_here(self.partition);
        self.shards.settle();
        Ok(())
    }

    fn end_of_source(&mut self, _: &str, partition: i32, next_offset: Option<i64>) {
        self.count_read();
        self.shards.end_of_source(partition, next_offset);
    }

    /// The partition was cut under the reader: what was read of it is
    /// dropped, and it is read again from its start (not ready until done).
    fn source_reset(
        &mut self,
        _: &mut Transaction<'_>,
        _: &str,
        partition: i32,
        position: i64,
        log_start: i64,
    ) -> Result<(), AppError> {
        self.floor = 0;
        self.shards.cut(partition, position, log_start);
        Ok(())
    }

    fn source_skipped(&mut self, _: &str, _: i32, _: i64, _: &str) {
        self.shards.batch_skipped();
    }

    fn stopped(&mut self) {
        self.count_read();
        self.shards.stopped(&self.spec);
    }
}

/// Records applied but not yet counted are counted when the replica's
/// object goes, however its task ended (dropped before `stopped`, say).
impl<L: Layout> Drop for MemoryShard<L> {
    fn drop(&mut self) {
        self.count_read();
    }
}

#[cfg(test)]
mod tests {

    use kshard_offsets::{OffsetCommitValue, Record};
    use kshard_runtime::{MemoryStore, Source};

    use super::*;
    use crate::Log;
    use crate::monitor::{Monitor, MonitorSettings};
    use crate::offsets_layout::OffsetsLayout;

    fn shards(monitor: &Arc<Monitor>) -> Arc<LogShards<OffsetsLayout>> {
        let layout = OffsetsLayout { isolation: kshard_runtime::Isolation::Uncommitted };
        let mut shards = LogShards::new(layout, Arc::clone(monitor), 1, crate::shutdown::Shutdown::default());
        shards.in_memory = true;
        Arc::new(shards)
    }

    /// A monitor tracking partition 0 of the offsets topic up to `high`,
    /// and the spec of that partition's shard.
    fn started(high: i64) -> (Arc<Monitor>, ShardSpec) {
        let monitor = Arc::new(Monitor::new(MonitorSettings::default()));
        monitor.track(Log::Offsets, 0, 0, high);
        monitor.start_log(Log::Offsets);
        let spec = ShardSpec::unlogged(
            "offsets-000",
            vec![Source { topic: "__consumer_offsets".into(), partition: 0, min_offset: 0 }],
        );
        (monitor, spec)
    }

    /// Group g's commit of offset `offset`, written at `offset`.
    fn consume_commit(shard: &mut MemoryShard<OffsetsLayout>, txn: &mut Transaction<'_>, offset: i64) {
        let (key, value) = Record::offset_commit("g", "t", 0, Some(OffsetCommitValue::new(3, offset, 0))).encode();
        let message = Message::new("__consumer_offsets", 0, offset, Some(&key), value.as_deref());
        shard.consume(txn, &message).expect("consumes");
    }

    fn commit(shard: &mut MemoryShard<OffsetsLayout>, offset: i64) {
        let store = MemoryStore::default();
        let mut txn = Transaction::new(&store);
        consume_commit(shard, &mut txn, offset);
        shard.finalize(&mut txn).expect("finalizes");
        assert!(txn.into_mutations().is_empty(), "nothing goes to the store: the unit is the state");
    }

    fn commits(monitor: &Monitor) -> Option<u64> {
        monitor.units().update(0, |unit| unit.group("g").map(|g| g.commits))
    }

    #[test]
    fn a_replica_started_again_passes_over_what_the_unit_holds_already() {
        let (monitor, spec) = started(10);
        let mut first = MemoryShard::new(shards(&monitor), &spec).expect("a shard");
        first.recovered(&MemoryStore::default(), &[]).expect("recovers");
        for offset in 0..3 {
            commit(&mut first, offset);
        }
        assert_eq!(commits(&monitor), Some(3));
        // It failed after offset 2, its last transaction (offsets 1 and 2)
        // not committed: the next replica goes on from offset 1.
        let mut next = MemoryShard::new(shards(&monitor), &spec).expect("a shard");
        let checkpoint = [SourceOffset { topic: "__consumer_offsets".into(), partition: 0, offset: 1 }];
        next.recovered(&MemoryStore::default(), &checkpoint).expect("recovers");
        for offset in 1..4 {
            commit(&mut next, offset);
        }
        assert_eq!(commits(&monitor), Some(4), "offsets 1 and 2 are not counted twice");
        assert_eq!(monitor.units().counters().records.get(), 4, "each record applied is counted read once");
    }

    #[test]
    fn records_are_counted_read_by_the_partitions_end() {
        let (monitor, spec) = started(2);
        let mut shard = MemoryShard::new(shards(&monitor), &spec).expect("a shard");
        shard.recovered(&MemoryStore::default(), &[]).expect("recovers");
        let store = MemoryStore::default();
        let mut txn = Transaction::new(&store);
        for offset in 0..2 {
            consume_commit(&mut shard, &mut txn, offset);
        }
        // The end comes inside the transaction, before it is finalized.
        shard.end_of_source("__consumer_offsets", 0, Some(2));
        assert_eq!(monitor.units().counters().records.get(), 2);
    }
}
