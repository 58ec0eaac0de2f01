//! A reader's queue in the [`super::fetcher`]: what the fetcher hands one
//! reader ([`Delivery`]), in order, with the bytes it holds counted against
//! the reader's limit and the fetcher's read-ahead ([`super::read_ahead`]).
//! In memory; the fetcher's planning ([`super::fetch_plan`]) reads whether
//! a queue is full or empty, and pushes to it.

use std::collections::VecDeque;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use crate::error::Error;
use crate::wire::fetch_session::PartitionKey;
use crate::wire::read_ahead::Queued;
use crate::wire::records::PartitionRecords;

/// What a reader is handed.
pub(crate) enum Delivery {
    /// A partition's records, from the reader's position on.
    Records { key: PartitionKey, records: PartitionRecords, bytes: usize },
    /// The reader reached the partition's end; it goes on at `next_offset`.
    End { key: PartitionKey, next_offset: i64 },
    /// Reading failed (refused, or a corrupt batch).
    Failed(Error),
}

/// A reader's queue: the fetcher pushes, the reader pops.
pub(crate) struct Sink {
    queue: Mutex<SinkQueue>,
    ready: Condvar,
    /// Wakes the task awaiting the reader ([`crate::PartitionReader::readable`]).
    readable: tokio::sync::Notify,
    /// Bytes queued past which the reader's partitions are not fetched for.
    pub(crate) limit: usize,
    /// What every reader of the fetcher holds queued (see
    /// [`crate::wire::read_ahead`]).
    queued: Arc<Queued>,
}

impl Drop for Sink {
    fn drop(&mut self) {
        // What a reader leaves unread goes with it.
        let left = self.lock().bytes;
        self.queued.remove(left);
    }
}

#[derive(Default)]
struct SinkQueue {
    items: VecDeque<Delivery>,
    bytes: usize,
}

impl Sink {
    /// A queue of `limit` bytes, counted in `queued` too.
    pub(crate) fn new(limit: usize, queued: Arc<Queued>) -> Self {
        Sink {
            queue: Mutex::new(SinkQueue::default()),
            ready: Condvar::new(),
            readable: tokio::sync::Notify::new(),
            limit,
            queued,
        }
    }

    fn lock(&self) -> MutexGuard<'_, SinkQueue> {
        self.queue.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Holds its limit or more.
    pub(crate) fn full(&self) -> bool {
        self.lock().bytes >= self.limit
    }

    /// Holds no records.
    pub(crate) fn empty(&self) -> bool {
        self.lock().bytes == 0
    }

    /// Queues `delivery` and wakes the reader.
    pub(crate) fn push(&self, delivery: Delivery) {
        let mut q = self.lock();
        if let Delivery::Records { bytes, .. } = &delivery {
            q.bytes += bytes;
            self.queued.add(*bytes);
        }
        // Failures not read yet are told once: the latest replaces the one
        // before, so a reader that is slow to poll does not pile them up. A
        // truncation is no passing failure: each is a partition whose state
        // the reader must drop, and none is replaced (one per partition at
        // most, at each truncation).
        let passing = |d: &Delivery| matches!(d, Delivery::Failed(e) if !matches!(e, Error::Truncated { .. }));
        if passing(&delivery) && q.items.back().is_some_and(passing) {
            q.items.pop_back();
        }
        q.items.push_back(delivery);
        self.ready.notify_one();
        self.readable.notify_one();
    }

    /// Waits up to `timeout` for the next delivery; with it, whether taking
    /// it made room the fetcher waits for (the reader's queue fell below its
    /// limit, or the read-ahead below its budget).
    pub(crate) fn next(&self, timeout: Duration) -> Option<(Delivery, bool)> {
        // The clock is read only when there is nothing to hand out: a read a
        // record was a measurable share of catching up.
        let mut deadline = None;
        let mut q = self.lock();
        loop {
            if let Some(d) = q.items.pop_front() {
                let was_full = q.bytes >= self.limit;
                let mut room_made = false;
                if let Delivery::Records { bytes, .. } = &d {
                    q.bytes -= bytes;
                    room_made = self.queued.remove(*bytes);
                }
                return Some((d, room_made || (was_full && q.bytes < self.limit)));
            }
            let now = Instant::now();
            let left = deadline.get_or_insert(now + timeout).saturating_duration_since(now);
            if left.is_zero() {
                return None;
            }
            q = self.ready.wait_timeout(q, left).unwrap_or_else(PoisonError::into_inner).0;
        }
    }

    /// Resolves once a delivery may be queued (see [`crate::PartitionReader::readable`]).
    pub(crate) fn readable(&self) -> tokio::sync::futures::Notified<'_> {
        self.readable.notified()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_truncation_is_told_and_passing_failures_once() {
        let sink = Sink::new(1 << 20, Arc::default());
        let refused = |n: i32| Delivery::Failed(Error::Refused { step: format!("fetch {n}"), message: "no".into() });
        let truncated =
            |p: i32| Delivery::Failed(Error::Truncated { topic: "t".into(), partition: p, offset: 50, log_start: 0 });
        for d in [refused(1), refused(2), truncated(0), truncated(1), refused(3), refused(4), truncated(2)] {
            sink.push(d);
        }
        let mut told = Vec::new();
        while let Some((Delivery::Failed(e), _)) = sink.next(Duration::from_millis(10)) {
            told.push(e.to_string());
        }
        let truncations = told.iter().filter(|t| t.contains("past the log's end")).count();
        assert_eq!(truncations, 3, "every partition's truncation: {told:?}");
        assert_eq!(told.len(), 5, "two runs of passing failures, the latest of each: {told:?}");
        assert!(told[0].contains("fetch 2") && told[3].contains("fetch 4"), "{told:?}");
    }

    #[test]
    fn reading_a_full_queue_below_its_limit_makes_room() {
        let queued = Arc::new(Queued::default());
        let sink = Sink::new(100, Arc::clone(&queued));
        let records = |bytes| Delivery::Records {
            key: (Arc::from("t"), 0),
            records: PartitionRecords::new(bytes::Bytes::new(), 0, false, Vec::new()),
            bytes,
        };
        sink.push(records(60));
        assert!(!sink.full() && !sink.empty());
        sink.push(records(60));
        assert!(sink.full());
        assert_eq!(queued.get(), 120);
        assert!(matches!(sink.next(Duration::ZERO), Some((_, true))), "below its limit again");
        assert!(matches!(sink.next(Duration::ZERO), Some((_, false))), "it had room already");
        assert!(sink.empty() && queued.get() == 0);
        assert!(sink.next(Duration::from_millis(1)).is_none());
    }
}
