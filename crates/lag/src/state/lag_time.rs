//! Lag in seconds: the age of the first record a group has not consumed — now
//! minus the timestamp of the record at its committed offset. Pure: the
//! timestamps come in from a reader, the time as an argument.
//!
//! Timestamps of records at committed offsets are kept while some group still
//! sits at that offset (a record's timestamp never changes), so a refresh only
//! reads the records of offsets that moved; the last few read on each
//! partition are kept as exact (offset, time) points whatever group needs
//! them. Where the record is gone (deleted, compacted, or a transaction
//! marker) or not read yet (the group committed since the last refresh), the
//! time is estimated from the nearest known points around the offset: records
//! read, and the high watermarks seen at refreshes (an offset below a sampled
//! high watermark was written before that sample, one at or above it after);
//! linear in between. An offset older than every point is no later than the
//! first point past it. Each value says which way it was found ([`Method`]).

use kshard_kafka::TopicPartitionOffset;
use std::collections::VecDeque;
use std::sync::Arc;

use crate::names::FastMap;

/// When the first record not consumed was written: lag in seconds is the
/// time since, at whatever instant it is shown.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Written {
    /// Nothing to wait for: 0 s.
    Nothing(Method),
    /// At this time, in ms since the epoch.
    At(i64, Method),
}

impl Written {
    /// The lag in seconds at `now_ms`.
    pub(crate) fn seconds(self, now_ms: i64) -> f64 {
        match self {
            Written::Nothing(_) => 0.0,
            Written::At(written, _) => ((now_ms - written).max(0)) as f64 / 1000.0,
        }
    }

    /// How it was found.
    pub(crate) fn method(self) -> Method {
        match self {
            Written::Nothing(m) | Written::At(_, m) => m,
        }
    }
}

/// How a lag in seconds was found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Method {
    /// The timestamp of the record at the committed offset.
    Record,
    /// Interpolated between high watermarks seen at refreshes.
    Estimate,
    /// The timestamp of the first record after the committed offset (the one
    /// there is gone, and no estimate reaches back that far).
    NextRecord,
    /// No record follows the committed offset, only a transaction marker: the
    /// group is caught up (0 s).
    End,
}

impl Method {
    /// Its name (the `method` label).
    pub(crate) fn name(self) -> &'static str {
        match self {
            Method::Record => "record",
            Method::Estimate => "estimate",
            Method::NextRecord => "next_record",
            Method::End => "end",
        }
    }
}

/// A high watermark as seen at refreshes: from when to when it stood.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct HighSeen {
    high: i64,
    first_ms: i64,
    last_ms: i64,
}

/// High watermarks kept per partition (changes only: an idle partition keeps
/// its history).
const HIGHS_KEPT: usize = 120;

/// A topic-partition.
type Partition = (Arc<str>, i32);

/// (offset, ms since the epoch): the record at that offset was written then.
type Point = (i64, i64);

/// Records read kept per partition as exact (offset, time) points for
/// estimates: the highest offsets, those nearest the groups' next commits.
const POINTS_KEPT: usize = 8;

/// The record times known and the high-watermark history.
#[derive(Debug, Default)]
pub(crate) struct LagTimes {
    /// (topic, partition, committed offset) → (offset read, its timestamp in ms).
    records: FastMap<(Arc<str>, i32, i64), (i64, i64)>,
    /// Offsets read for that gave no record (a transaction marker at the end).
    missing: std::collections::HashSet<(Arc<str>, i32, i64)>,
    highs: FastMap<Partition, VecDeque<HighSeen>>,
    /// Records read, per partition: offset → timestamp in ms (at most
    /// [`POINTS_KEPT`], the highest offsets).
    points: FastMap<Partition, std::collections::BTreeMap<i64, i64>>,
}

impl LagTimes {
    /// Records the high watermark of `topic`/`partition` seen at `now_ms`.
    /// A high watermark lower than the last one seen (the topic deleted and
    /// created again, the log truncated) makes what was known of the
    /// partition's offsets untrue: its history and points are forgotten.
    pub(crate) fn sample_high(&mut self, topic: &Arc<str>, partition: i32, high: i64, now_ms: i64) {
        let key = (Arc::clone(topic), partition);
        if self.highs.get(&key).and_then(|s| s.back()).is_some_and(|last| high < last.high) {
            self.highs.remove(&key);
            self.points.remove(&key);
            self.records.retain(|(t, p, _), _| !(t == topic && *p == partition));
            self.missing.retain(|(t, p, _)| !(t == topic && *p == partition));
        }
        let seen = self.highs.entry(key).or_default();
        match seen.back_mut() {
            Some(last) if last.high == high => last.last_ms = now_ms,
            _ => {
                seen.push_back(HighSeen { high, first_ms: now_ms, last_ms: now_ms });
                if seen.len() > HIGHS_KEPT {
                    seen.pop_front();
                }
            }
        }
    }

    /// Of `committed` (topic, partition, committed offset, low watermark) of
    /// lagging group-partitions, those whose record time is not known yet and
    /// still in the log; forgets the times no group needs any more.
    pub(crate) fn wanted(&mut self, committed: &[(Arc<str>, i32, i64, i64)]) -> Vec<TopicPartitionOffset> {
        let needed: std::collections::HashSet<(&Arc<str>, i32, i64)> =
            committed.iter().map(|(t, p, o, _)| (t, *p, *o)).collect();
        self.records.retain(|(t, p, o), _| needed.contains(&(t, *p, *o)));
        self.missing.retain(|(t, p, o)| needed.contains(&(t, *p, *o)));
        let mut wanted: Vec<TopicPartitionOffset> = committed
            .iter()
            .filter(|(t, p, o, low)| {
                let key = (Arc::clone(t), *p, *o);
                o >= low && !self.records.contains_key(&key) && !self.missing.contains(&key)
            })
            .map(|(t, p, o, _)| TopicPartitionOffset::new(t.as_ref(), *p, *o))
            .collect();
        wanted.sort();
        wanted.dedup();
        wanted
    }

    /// `topic`/`partition` was read at `wanted` and gave no record: what
    /// follows it (when the lag is one) is a transaction marker, not a record.
    pub(crate) fn not_found(&mut self, topic: &Arc<str>, partition: i32, wanted: i64) {
        self.missing.insert((Arc::clone(topic), partition, wanted));
    }

    /// Forgets the high-watermark history of partitions not in `live`.
    pub(crate) fn keep_partitions(&mut self, live: &std::collections::HashSet<(Arc<str>, i32)>) {
        self.highs.retain(|k, _| live.contains(k));
        self.points.retain(|k, _| live.contains(k));
    }

    /// The record read for `topic`/`partition` at `wanted`: `offset` (≥ the
    /// wanted one) with its timestamp.
    pub(crate) fn found(&mut self, topic: &Arc<str>, partition: i32, wanted: i64, offset: i64, timestamp_ms: i64) {
        self.records.insert((Arc::clone(topic), partition, wanted), (offset, timestamp_ms));
        let points = self.points.entry((Arc::clone(topic), partition)).or_default();
        points.insert(offset, timestamp_ms);
        while points.len() > POINTS_KEPT {
            points.pop_first();
        }
    }

    /// When the record at `offset` was written, estimated from the nearest
    /// known points below and above it (records read, high watermarks seen),
    /// ms since the epoch, and how: [`Method::NextRecord`] when all there is
    /// is a later record's time. `None` when no point lies above it.
    fn estimate(&self, key: &Partition, offset: i64) -> Option<(i64, Method)> {
        // (offset, time): the record at that offset was written then.
        let (mut below, mut above): (Option<Point>, Option<Point>) = (None, None);
        let mut above_is_record = false;
        if let Some(seen) = self.highs.get(key)
            && let Some(after) = seen.iter().position(|s| s.high > offset)
        {
            // Offsets below a sampled high watermark were written before the
            // sample; the one at the previous high watermark, after that one.
            above = Some((seen[after].high, seen[after].first_ms));
            below = after.checked_sub(1).map(|i| (seen[i].high, seen[i].last_ms));
        }
        if let Some(points) = self.points.get(key) {
            if let Some((&o, &ms)) = points.range(..=offset).next_back()
                && below.is_none_or(|(b, _)| o >= b)
            {
                below = Some((o, ms));
            }
            // On a tie the high watermark wins: it bounds the offsets below
            // it, the record only itself.
            if let Some((&o, &ms)) = points.range(offset + 1..).next()
                && above.is_none_or(|(a, _)| o < a)
            {
                above = Some((o, ms));
                above_is_record = true;
            }
        }
        let (end, end_ms) = above?;
        let Some((start, start_ms)) = below else {
            return Some((end_ms, if above_is_record { Method::NextRecord } else { Method::Estimate }));
        };
        let share = (offset - start).max(0) as f64 / (end - start).max(1) as f64;
        let written = start_ms + (share * (end_ms - start_ms) as f64) as i64;
        // Producers' clocks need not agree: stay between the two points.
        Some((written.clamp(start_ms.min(end_ms), start_ms.max(end_ms)), Method::Estimate))
    }

    /// The lag in seconds of a group at `committed` on `topic`/`partition`
    /// with `lag` records now, at `now_ms`; 0 with no lag, `None` when nothing
    /// is known yet.
    #[cfg(test)]
    pub(crate) fn lag_seconds(
        &self,
        topic: &Arc<str>,
        partition: i32,
        committed: i64,
        lag: i64,
        now_ms: i64,
    ) -> Option<(f64, Method)> {
        self.written(topic, partition, committed, lag).map(|w| (w.seconds(now_ms), w.method()))
    }

    /// When the first record a group at `committed` on `topic`/`partition`
    /// with `lag` records has not consumed was written, and how that was
    /// found: what [`LagTimes::lag_seconds`] counts from.
    pub(crate) fn written(&self, topic: &Arc<str>, partition: i32, committed: i64, lag: i64) -> Option<Written> {
        let at = Written::At;
        if lag <= 0 {
            return Some(Written::Nothing(Method::Record));
        }
        let key = (Arc::clone(topic), partition, committed);
        // One offset left, and reading there gave nothing: a transaction
        // marker, which no consumer ever receives.
        if lag == 1 && self.missing.contains(&key) {
            return Some(Written::Nothing(Method::End));
        }
        let read = self.records.get(&key).copied();
        if let Some((offset, ts)) = read
            && offset == committed
        {
            return Some(at(ts, Method::Record));
        }
        let partition_key = (Arc::clone(topic), partition);
        // The record there was read for another group, or before.
        if let Some(&ts) = self.points.get(&partition_key).and_then(|p| p.get(&committed)) {
            return Some(at(ts, Method::Record));
        }
        self.estimate(&partition_key, committed).map(|(written, method)| at(written, method))
    }

    /// Topic-partitions with a high-watermark history (its memory).
    #[cfg(test)]
    fn partitions(&self) -> usize {
        self.highs.len()
    }
}

/// The larger of two lags in seconds, either of which may be unknown.
pub(crate) fn max_seconds(a: Option<f64>, b: Option<f64>) -> Option<f64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.max(b)),
        (a, b) => a.or(b),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t() -> Arc<str> {
        Arc::from("t")
    }

    #[test]
    fn the_record_at_the_committed_offset_gives_the_age() {
        let mut times = LagTimes::default();
        let wanted = times.wanted(&[(t(), 0, 10, 0), (t(), 0, 10, 0), (t(), 1, 3, 5)]);
        assert_eq!(wanted, [TopicPartitionOffset::new("t", 0, 10)], "once each, and not below the log start");
        times.found(&t(), 0, 10, 10, 1_000_000);
        assert_eq!(times.lag_seconds(&t(), 0, 10, 5, 1_004_500), Some((4.5, Method::Record)));
        assert_eq!(times.lag_seconds(&t(), 0, 10, 0, 1_004_500), Some((0.0, Method::Record)), "no lag: 0 s");
        assert!(times.wanted(&[(t(), 0, 10, 0)]).is_empty(), "known: not read again");
        assert_eq!(times.wanted(&[]), Vec::<TopicPartitionOffset>::new());
        assert!(times.records.is_empty(), "forgotten once no group needs it");
        assert_eq!(
            times.lag_seconds(&t(), 0, 10, 5, 1_004_500),
            Some((4.5, Method::Record)),
            "but kept as one of the partition's last points read"
        );
    }

    #[test]
    fn a_record_gone_is_estimated_from_the_high_watermarks() {
        let mut times = LagTimes::default();
        // Offsets 0‥9 written between 10 s and 12 s, 10‥19 between 20 s and 22 s.
        for (high, at) in [(0, 10_000), (10, 12_000), (10, 20_000), (20, 22_000)] {
            times.sample_high(&t(), 0, high, at);
        }
        // Offset 5: halfway between 10 s and 12 s.
        assert_eq!(times.lag_seconds(&t(), 0, 5, 15, 31_000), Some((20.0, Method::Estimate)));
        // Offset 15: halfway between 20 s (the last time 10 was seen) and 22 s.
        assert_eq!(times.lag_seconds(&t(), 0, 15, 5, 31_000), Some((10.0, Method::Estimate)));
        // The record read was a later one (the committed one is gone): the estimate wins.
        times.found(&t(), 0, 15, 17, 21_900);
        assert_eq!(times.lag_seconds(&t(), 0, 15, 5, 31_000).map(|(_, m)| m), Some(Method::Estimate));
        // No history that far back: the next record's time, labelled so.
        times.found(&t(), 1, 3, 4, 30_000);
        assert_eq!(times.lag_seconds(&t(), 1, 3, 9, 31_000), Some((1.0, Method::NextRecord)));
    }

    #[test]
    fn an_offset_committed_since_the_last_read_is_estimated_from_the_records_read_around_it() {
        let mut times = LagTimes::default();
        // kshard started watching late: the first high watermark it saw (at
        // 300 s) is far past records written from 0 s on, 1 a second.
        times.sample_high(&t(), 0, 300, 300_000);
        times.sample_high(&t(), 0, 305, 305_000);
        assert_eq!(times.wanted(&[(t(), 0, 100, 0), (t(), 0, 200, 0)]).len(), 2);
        times.found(&t(), 0, 100, 100, 100_000);
        times.found(&t(), 0, 200, 200, 200_000);
        // The group committed 110 since: between the records read at 100 and
        // 200, not "no older than the first sample" (300 s).
        assert_eq!(times.lag_seconds(&t(), 0, 110, 195, 305_000), Some((195.0, Method::Estimate)));
        // Past the last record read: between it and the first high watermark.
        assert_eq!(times.lag_seconds(&t(), 0, 250, 55, 305_000), Some((55.0, Method::Estimate)));
        // An offset another group's read found is exact.
        assert_eq!(times.lag_seconds(&t(), 0, 200, 105, 305_000), Some((105.0, Method::Record)));
        // Only the highest offsets read are kept.
        for o in 0..20 {
            times.found(&t(), 0, 210 + o, 210 + o, 210_000 + o * 1000);
        }
        assert_eq!(times.points[&(t(), 0)].len(), POINTS_KEPT);
        assert_eq!(times.points[&(t(), 0)].first_key_value(), Some((&222, &222_000)));
    }

    #[test]
    fn a_high_watermark_going_back_forgets_the_partition() {
        let mut times = LagTimes::default();
        times.sample_high(&t(), 0, 100, 10_000);
        times.wanted(&[(t(), 0, 50, 0)]);
        times.found(&t(), 0, 50, 50, 5_000);
        assert_eq!(times.lag_seconds(&t(), 0, 50, 50, 20_000), Some((15.0, Method::Record)));
        // Deleted and created again: offset 50 is another record now.
        times.sample_high(&t(), 0, 60, 30_000);
        assert_eq!(times.lag_seconds(&t(), 0, 50, 10, 40_000), Some((10.0, Method::Estimate)));
        assert!(times.points.is_empty() && times.records.is_empty());
    }

    #[test]
    fn an_offset_older_than_the_history_is_at_least_as_old_as_its_first_sample() {
        let mut times = LagTimes::default();
        times.sample_high(&t(), 0, 100, 50_000);
        times.sample_high(&t(), 0, 110, 60_000);
        assert_eq!(times.lag_seconds(&t(), 0, 7, 103, 70_000), Some((20.0, Method::Estimate)));
        assert_eq!(times.lag_seconds(&t(), 0, 110, 1, 70_000), None, "at the end as far as known");
    }

    #[test]
    fn a_group_before_a_closing_transaction_marker_is_caught_up() {
        let mut times = LagTimes::default();
        times.sample_high(&t(), 0, 11, 10_000);
        assert_eq!(times.wanted(&[(t(), 0, 10, 0)]), [TopicPartitionOffset::new("t", 0, 10)]);
        times.not_found(&t(), 0, 10);
        assert_eq!(times.lag_seconds(&t(), 0, 10, 1, 99_000), Some((0.0, Method::End)));
        assert!(times.wanted(&[(t(), 0, 10, 0)]).is_empty(), "not read again");
        assert_eq!(
            times.lag_seconds(&t(), 0, 10, 3, 99_000).map(|(_, m)| m),
            Some(Method::Estimate),
            "more than a marker"
        );
        times.keep_partitions(&std::collections::HashSet::new());
        assert_eq!(times.partitions(), 0, "a deleted topic's history goes");
    }

    #[test]
    fn the_history_is_bounded_and_keeps_only_changes() {
        let mut times = LagTimes::default();
        for i in 0..1000 {
            times.sample_high(&t(), 0, i / 2, i64::from(i as i32) * 1000);
        }
        let seen = &times.highs[&(t(), 0)];
        assert_eq!(seen.len(), HIGHS_KEPT);
        assert_eq!((seen.back().map(|s| s.first_ms), seen.back().map(|s| s.last_ms)), (Some(998_000), Some(999_000)));
    }
}
