//! [`CatchUp`]: knows when the reader has caught up with `__consumer_offsets`.
//!
//! At start each partition's high watermark is recorded as its target; a
//! partition is caught up when the reader's position reaches the target, when
//! the partition was empty (low = high), or when the client reports the end of
//! the partition. The last rule matters: a partition whose last offsets are
//! transaction markers never delivers them, so its position stops short of the
//! high watermark forever, and only the end-of-partition signal says it is done.
//! Readiness latches: partitions discovered later are consumed and reported, but
//! do not turn a ready monitor back to not ready. Pure: no I/O, no clock.

use std::collections::BTreeMap;

/// A log kshard reads to its end before it serves lag.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Log {
    /// `__consumer_offsets` (or the topic of its layout the service reads).
    Offsets,
    /// `__share_group_state`: the share groups' delivery state.
    ShareState,
}

impl Log {
    /// The topic's name as kshard says it (in `/ready`, in logs).
    pub fn topic(self) -> &'static str {
        match self {
            Log::Offsets => kshard_kafka::CONSUMER_OFFSETS_TOPIC,
            Log::ShareState => kshard_kafka::SHARE_GROUP_STATE_TOPIC,
        }
    }
}

/// Catch-up state of one partition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionProgress {
    /// The low watermark when tracking began.
    pub start: i64,
    /// The high watermark when tracking began: the offset to reach.
    pub target: i64,
    /// The next offset to read.
    pub position: i64,
    /// True once caught up.
    pub caught_up: bool,
    /// True for partitions tracked at start (they decide readiness).
    pub initial: bool,
}

impl PartitionProgress {
    /// Offsets left to read to reach the target.
    pub fn remaining(&self) -> i64 {
        if self.caught_up { 0 } else { self.target.saturating_sub(self.position.max(self.start)).max(0) }
    }
}

/// A summary for `/ready` and progress logs.
#[derive(Debug, Clone, PartialEq)]
pub struct Progress {
    /// True once every initial partition caught up.
    pub ready: bool,
    /// Partitions caught up.
    pub partitions_caught_up: usize,
    /// Partitions tracked.
    pub partitions: usize,
    /// Offsets read so far, over all partitions (from their start).
    pub offsets_read: i64,
    /// Offsets left to reach every target.
    pub offsets_remaining: i64,
    /// Percent done, by offsets (100 when there is nothing to read).
    pub percent: f64,
}

/// Catch-up tracking over the partitions of one topic.
#[derive(Debug, Default)]
pub struct CatchUp {
    partitions: BTreeMap<i32, PartitionProgress>,
    started: bool,
    ready: bool,
}

impl CatchUp {
    /// Tracks `partition` with its current watermarks. Partitions tracked before
    /// [`CatchUp::start`] decide readiness; later ones are only reported.
    pub fn track(&mut self, partition: i32, low: i64, high: i64) {
        let initial = !self.started;
        self.partitions.entry(partition).or_insert(PartitionProgress {
            start: low,
            target: high,
            position: low,
            caught_up: high <= low,
            initial,
        });
        self.update_ready();
    }

    /// Ends the initial set of partitions: readiness now depends on them alone.
    pub fn start(&mut self) {
        self.started = true;
        self.update_ready();
    }

    /// The reader read the record at `offset` of `partition`.
    pub fn on_record(&mut self, partition: i32, offset: i64) {
        if let Some(p) = self.partitions.get_mut(&partition) {
            p.position = p.position.max(offset + 1);
            if !p.caught_up && p.position >= p.target {
                p.caught_up = true;
                self.update_ready();
            }
        }
    }

    /// True once [`CatchUp::start`] was called.
    pub fn is_started(&self) -> bool {
        self.started
    }

    /// The client reports the end of `partition`: everything there is was read.
    /// `next_offset` is the reader's position when it knows one.
    pub fn on_end_of_partition(&mut self, partition: i32, next_offset: Option<i64>) {
        if let Some(p) = self.partitions.get_mut(&partition) {
            // Records past the last delivered one may be markers: the position
            // is at least the target once the end is reached.
            p.position = p.position.max(next_offset.unwrap_or(p.target)).max(p.target);
            if !p.caught_up {
                p.caught_up = true;
                self.update_ready();
            }
        }
    }

    fn update_ready(&mut self) {
        if self.started && !self.ready {
            self.ready = self.partitions.values().filter(|p| p.initial).all(|p| p.caught_up);
        }
    }

    /// True once every partition tracked at start has caught up (latched).
    pub fn is_ready(&self) -> bool {
        self.ready
    }

    /// Per-partition state.
    pub fn partitions(&self) -> &BTreeMap<i32, PartitionProgress> {
        &self.partitions
    }

    /// A summary of where catching up stands.
    pub fn progress(&self) -> Progress {
        // Offsets come from the brokers: saturate rather than overflow.
        let total = crate::watermarks::total(self.partitions.values().map(|p| p.target.saturating_sub(p.start).max(0)));
        let remaining = crate::watermarks::total(self.partitions.values().map(PartitionProgress::remaining));
        let read =
            crate::watermarks::total(self.partitions.values().map(|p| p.position.saturating_sub(p.start).max(0)));
        Progress {
            ready: self.ready,
            partitions_caught_up: self.partitions.values().filter(|p| p.caught_up).count(),
            partitions: self.partitions.len(),
            offsets_read: read,
            offsets_remaining: remaining,
            percent: if total == 0 { 100.0 } else { 100.0 * (total - remaining) as f64 / total as f64 },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ready_when_every_partition_reaches_its_start_high_watermark() {
        let mut c = CatchUp::default();
        c.track(0, 0, 3);
        c.track(1, 5, 7);
        c.start();
        assert!(!c.is_ready());
        c.on_record(0, 0);
        c.on_record(0, 2);
        c.on_record(1, 5);
        assert!(!c.is_ready());
        assert_eq!(c.progress().offsets_remaining, 1);
        c.on_record(1, 6);
        assert!(c.is_ready());
        assert_eq!(c.progress().percent, 100.0);
    }

    #[test]
    fn empty_partitions_are_caught_up_at_once() {
        let mut c = CatchUp::default();
        c.track(0, 0, 0);
        c.track(1, 9, 9); // compacted or deleted away: low = high
        c.start();
        assert!(c.is_ready());
    }

    #[test]
    fn trailing_transaction_markers_are_settled_by_end_of_partition() {
        // Offsets 0..=9 hold records, 10 and 11 are commit markers never delivered.
        let mut c = CatchUp::default();
        c.track(0, 0, 12);
        c.start();
        for offset in 0..10 {
            c.on_record(0, offset);
        }
        assert!(!c.is_ready(), "position 10 is short of 12 forever");
        c.on_end_of_partition(0, None);
        assert!(c.is_ready());
    }

    #[test]
    fn readiness_latches_and_later_partitions_do_not_undo_it() {
        let mut c = CatchUp::default();
        c.track(0, 0, 1);
        c.start();
        c.on_record(0, 0);
        assert!(c.is_ready());
        c.track(1, 0, 100);
        assert!(c.is_ready());
        assert_eq!(c.progress().partitions_caught_up, 1);
        assert_eq!(c.progress().offsets_remaining, 100);
    }

    #[test]
    fn not_ready_before_start_even_if_all_tracked_are_done() {
        let mut c = CatchUp::default();
        c.track(0, 0, 0);
        assert!(!c.is_ready());
        c.start();
        assert!(c.is_ready());
    }
}
