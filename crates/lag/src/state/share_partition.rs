//! [`SharePartition`]: the delivery state of one share-partition (a share
//! group's view of one topic-partition, KIP-932) as `__share_group_state`
//! leaves it, and what it says about the group's progress.
//!
//! Folding follows Kafka's share coordinator (read from the
//! `ShareCoordinatorShard` and `PersisterStateBatchCombiner` classes of Kafka
//! 4.4): a snapshot replaces the state; an update moves the start offset unless
//! it is -1, replaces the delivery-complete count, and merges its state batches
//! into the ones so far. Batches below the start offset are dropped (one that
//! straddles it is cut), and where batches overlap, each offset takes the one
//! with the higher delivery count, then the higher state (Archived over
//! Acknowledged over Available). Pure: no I/O, no clock.
//!
//! Lag is Kafka's (`DescribeShareGroupOffsets`, `kafka-share-groups --describe`):
//! the partition's end offset minus the start offset minus the records at or
//! after the start offset whose delivery is complete (acknowledged or archived).

use std::collections::BTreeMap;

use kshard_offsets::{DeliveryState, ShareSnapshotValue, ShareUpdateValue, StateBatch};

/// A run of offsets with one delivery state and count.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Run {
    /// The first offset.
    pub first: i64,
    /// The last offset (inclusive).
    pub last: i64,
    /// The delivery state.
    pub state: DeliveryState,
    /// How many times the records were delivered.
    pub deliveries: i16,
}

impl Run {
    fn len(&self) -> u64 {
        self.last.saturating_sub(self.first).saturating_add(1).max(0) as u64
    }

    fn from_batch(b: &StateBatch) -> Self {
        Run { first: b.first_offset, last: b.last_offset, state: b.delivery_state, deliveries: b.delivery_count }
    }

    /// Kafka's order for overlapping batches: delivery count, then state.
    fn priority(&self) -> (i16, i8) {
        (self.deliveries, self.state.as_i8())
    }

    fn is_complete(&self) -> bool {
        matches!(self.state, DeliveryState::Acknowledged | DeliveryState::Archived)
    }
}

/// One share-partition's state.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SharePartition {
    /// The share-partition start offset: every record before it is done.
    /// -1 while the state is not initialized.
    pub start_offset: i64,
    /// Records at or after the start offset whose delivery is complete, as
    /// the coordinator counts them (-1: not written, as before KIP-1226).
    pub delivery_complete_count: i32,
    /// The share-partition leader's epoch.
    pub leader_epoch: i32,
    /// The state epoch (bumped when the state is reset or re-initialized).
    pub state_epoch: i32,
    /// When the last snapshot was written, in ms.
    pub write_timestamp: i64,
    /// The delivery state of the records at and after the start offset,
    /// sorted and disjoint.
    pub runs: Vec<Run>,
    /// Records archived since this state was first read, by their delivery
    /// count: a count at the group's delivery limit is a poison message.
    pub archived: BTreeMap<i16, u64>,
    /// `scrape_mode: admin_api`: the lag DescribeShareGroupOffsets
    /// reported (the state's batches are not known then; -1: Kafka did not know).
    pub reported_lag: Option<i64>,
}

impl SharePartition {
    /// Replaces the state with a snapshot's, counting the records it archives
    /// that were not archived before.
    pub fn apply_snapshot(&mut self, v: &ShareSnapshotValue) {
        let runs = combine(&[], v.state_batches.iter().map(Run::from_batch), v.start_offset);
        self.count_archived(&runs);
        self.start_offset = v.start_offset;
        self.delivery_complete_count = v.delivery_complete_count;
        self.leader_epoch = v.leader_epoch;
        self.state_epoch = v.state_epoch;
        self.write_timestamp = v.write_timestamp;
        self.runs = runs;
    }

    /// Merges an update (`first`: no state was known, as Kafka's coordinator
    /// takes an update alone then).
    pub fn apply_update(&mut self, v: &ShareUpdateValue, first: bool) {
        if first {
            self.start_offset = -1;
        }
        if v.start_offset != -1 {
            self.start_offset = v.start_offset;
        }
        if v.leader_epoch != -1 || first {
            self.leader_epoch = v.leader_epoch;
        }
        self.delivery_complete_count = v.delivery_complete_count;
        let runs = combine(&self.runs, v.state_batches.iter().map(Run::from_batch), self.start_offset);
        self.count_archived(&runs);
        self.runs = runs;
    }

    /// Adds the records `after` archives that the runs so far did not.
    fn count_archived(&mut self, after: &[Run]) {
        for run in after.iter().filter(|r| r.state == DeliveryState::Archived) {
            let before: u64 =
                self.runs.iter().filter(|r| r.state == DeliveryState::Archived).map(|r| overlap(run, r)).sum();
            let new = run.len().saturating_sub(before);
            if new > 0 {
                *self.archived.entry(run.deliveries).or_default() += new;
            }
        }
    }

    /// Records at or after the start offset whose delivery is complete: the
    /// coordinator's count when written, else counted from the runs.
    pub fn complete(&self) -> i64 {
        if self.delivery_complete_count >= 0 {
            return i64::from(self.delivery_complete_count);
        }
        crate::watermarks::total(
            self.runs.iter().filter(|r| r.is_complete()).map(|r| r.len().min(i64::MAX as u64) as i64),
        )
    }

    /// Kafka's lag for a partition that ends at `end` (its high watermark);
    /// `None` before the state is initialized.
    pub fn lag(&self, end: i64) -> Option<i64> {
        if let Some(reported) = self.reported_lag {
            return (self.start_offset >= 0 && reported >= 0).then_some(reported);
        }
        (self.start_offset >= 0).then(|| end.saturating_sub(self.start_offset).saturating_sub(self.complete()))
    }

    /// A share-partition as DescribeShareGroupOffsets reported it: its start
    /// offset and Kafka's lag then (admin-API mode).
    pub fn reported(start_offset: i64, lag: i64) -> Self {
        SharePartition { start_offset, reported_lag: Some(lag), ..SharePartition::default() }
    }

    /// Records delivered and not yet acknowledged as far as the state tells:
    /// available again after a release or a lock timeout.
    pub fn in_flight(&self) -> u64 {
        self.runs.iter().filter(|r| r.state == DeliveryState::Available && r.deliveries > 0).map(Run::len).sum()
    }

    /// Records at or after the start offset delivered more than once.
    pub fn redelivered(&self) -> u64 {
        self.runs.iter().filter(|r| r.deliveries > 1).map(Run::len).sum()
    }

    /// Records archived since first read with at least `limit` deliveries
    /// (the group's `share.delivery.count.limit`): poison messages.
    pub fn poison(&self, limit: i16) -> u64 {
        self.archived.range(limit..).map(|(_, n)| n).sum()
    }

    /// Every record archived since first read (rejected, or poison).
    pub fn archived_total(&self) -> u64 {
        self.archived.values().sum()
    }
}

fn overlap(a: &Run, b: &Run) -> u64 {
    (a.last.min(b.last) - a.first.max(b.first) + 1).max(0) as u64
}

/// Kafka's combination of the runs so far with new ones: both cut at `start`
/// (unless -1), then each offset takes its highest-priority run, and adjacent
/// runs of one priority are joined.
fn combine(so_far: &[Run], new: impl Iterator<Item = Run>, start: i64) -> Vec<Run> {
    let cut = |r: Run| -> Option<Run> {
        if start == -1 || r.first >= start {
            Some(r)
        } else if r.last >= start {
            Some(Run { first: start, ..r })
        } else {
            None
        }
    };
    let runs: Vec<Run> = so_far.iter().copied().chain(new).filter(|r| r.first <= r.last).filter_map(cut).collect();
    // A sweep over the runs' boundaries: at each, the runs that cover the
    // offsets up to the next boundary, highest priority first.
    let mut bounds: Vec<i64> = runs.iter().flat_map(|r| [r.first, r.last.saturating_add(1)]).collect();
    bounds.sort_unstable();
    bounds.dedup();
    let mut by_first: Vec<&Run> = runs.iter().collect();
    by_first.sort_by_key(|r| r.first);
    let mut active: BTreeMap<((i16, i8), usize), &Run> = BTreeMap::new();
    let mut next = 0;
    let mut out: Vec<Run> = Vec::new();
    for w in bounds.windows(2) {
        let (from, to) = (w[0], w[1] - 1);
        while next < by_first.len() && by_first[next].first <= from {
            active.insert((by_first[next].priority(), next), by_first[next]);
            next += 1;
        }
        active.retain(|_, r| r.last >= from);
        let Some((_, top)) = active.iter().next_back() else { continue };
        match out.last_mut() {
            Some(last) if last.last + 1 == from && last.priority() == top.priority() => last.last = to,
            _ => out.push(Run { first: from, last: to, ..**top }),
        }
    }
    out
}

#[cfg(test)]
mod tests;
