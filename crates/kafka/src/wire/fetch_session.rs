//! The client's half of a Fetch session (KIP-227), pure: what the next
//! Fetch to one broker must say, given the partitions wanted now and what
//! the broker holds from the last request. In a session the broker keeps
//! each partition's fetch offset and size; a request names only partitions
//! that are new or changed (and those to forget), and an answer names only
//! partitions with something to say, so a quiet partition costs nothing
//! per request.
//!
//! Epochs: a request with session 0 and epoch 0 is a full request that asks
//! for a new session; the broker answers with the session's id (0: it keeps
//! none, and the next request is full again). Each answered incremental
//! request moves the epoch on (1 after `i32::MAX`). An error on the session
//! (FETCH_SESSION_ID_NOT_FOUND, INVALID_FETCH_SESSION_EPOCH), any other
//! top-level error or a lost connection starts over with a full request.

use std::collections::BTreeMap;
use std::sync::Arc;

/// A partition: its topic's name and its number.
pub(crate) type PartitionKey = (Arc<str>, i32);

/// What a Fetch asks of one partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Ask {
    pub(crate) offset: i64,
    pub(crate) max_bytes: i32,
}

/// FETCH_SESSION_ID_NOT_FOUND and INVALID_FETCH_SESSION_EPOCH.
pub(crate) const SESSION_ERRORS: [i16; 2] = [70, 71];

/// The session with one broker.
#[derive(Debug, Default)]
pub(crate) struct FetchSession {
    /// The broker's id for the session; 0: none.
    id: i32,
    /// The epoch of the next request.
    epoch: i32,
    /// What the broker holds for each partition of the session.
    held: BTreeMap<PartitionKey, Ask>,
}

/// The parts of the next Fetch request that the session decides.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct SessionRequest {
    pub(crate) session_id: i32,
    pub(crate) epoch: i32,
    /// The partitions to name, with what to ask of each.
    pub(crate) asks: Vec<(PartitionKey, Ask)>,
    /// Partitions the broker should drop from the session.
    pub(crate) forgotten: Vec<PartitionKey>,
}

impl SessionRequest {
    /// Whether the request names every partition wanted (a full request).
    pub(crate) fn is_full(&self) -> bool {
        self.epoch == 0
    }
}

impl FetchSession {
    /// The next request for `wanted`.
    pub(crate) fn request(&self, wanted: &BTreeMap<PartitionKey, Ask>) -> SessionRequest {
        if self.id == 0 {
            return SessionRequest {
                session_id: 0,
                epoch: 0,
                asks: wanted.iter().map(|(k, a)| (k.clone(), *a)).collect(),
                forgotten: Vec::new(),
            };
        }
        let asks = wanted.iter().filter(|(k, a)| self.held.get(*k) != Some(*a)).map(|(k, a)| (k.clone(), *a));
        let forgotten = self.held.keys().filter(|k| !wanted.contains_key(*k)).cloned();
        SessionRequest { session_id: self.id, epoch: self.epoch, asks: asks.collect(), forgotten: forgotten.collect() }
    }

    /// The broker answered `sent` (made for `wanted`) with `error_code` and
    /// `session_id`.
    pub(crate) fn answered(
        &mut self,
        sent: &SessionRequest,
        wanted: BTreeMap<PartitionKey, Ask>,
        error_code: i16,
        session_id: i32,
    ) {
        if error_code != 0 || (!sent.is_full() && session_id != self.id) {
            self.reset();
            return;
        }
        if sent.is_full() {
            self.id = session_id;
            self.epoch = 1;
        } else {
            self.epoch = if self.epoch == i32::MAX { 1 } else { self.epoch + 1 };
        }
        self.held = if self.id == 0 { BTreeMap::new() } else { wanted };
    }

    /// Starts over: the next request is full.
    pub(crate) fn reset(&mut self) {
        *self = FetchSession::default();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(topic: &str, partition: i32) -> PartitionKey {
        (Arc::from(topic), partition)
    }

    fn wanted(asks: &[(&str, i32, i64)]) -> BTreeMap<PartitionKey, Ask> {
        asks.iter().map(|&(t, p, offset)| (key(t, p), Ask { offset, max_bytes: 1024 })).collect()
    }

    #[test]
    fn a_quiet_partition_is_named_once() {
        let mut session = FetchSession::default();
        let w = wanted(&[("a", 0, 5), ("a", 1, 9), ("b", 0, 0)]);
        let first = session.request(&w);
        assert!(first.is_full());
        assert_eq!(first.asks.len(), 3);
        session.answered(&first, w.clone(), 0, 77);
        // Nothing moved: an incremental request naming nothing.
        let quiet = session.request(&w);
        assert_eq!((quiet.session_id, quiet.epoch), (77, 1));
        assert!(quiet.asks.is_empty() && quiet.forgotten.is_empty());
        session.answered(&quiet, w, 0, 77);
        // a/0 read on to 8, b/0 dropped, c/3 added.
        let w = wanted(&[("a", 0, 8), ("a", 1, 9), ("c", 3, 0)]);
        let next = session.request(&w);
        assert_eq!(next.epoch, 2);
        let named: Vec<&PartitionKey> = next.asks.iter().map(|(k, _)| k).collect();
        assert_eq!(named, vec![&key("a", 0), &key("c", 3)]);
        assert_eq!(next.forgotten, vec![key("b", 0)]);
    }

    #[test]
    fn errors_and_sessionless_brokers_start_over() {
        let mut session = FetchSession::default();
        let w = wanted(&[("a", 0, 1)]);
        let first = session.request(&w);
        session.answered(&first, w.clone(), 0, 0);
        assert!(session.request(&w).is_full(), "the broker keeps no session");
        let first = session.request(&w);
        session.answered(&first, w.clone(), 0, 5);
        let inc = session.request(&w);
        session.answered(&inc, w.clone(), 70, 0);
        let again = session.request(&w);
        assert!(again.is_full() && again.asks.len() == 1, "FETCH_SESSION_ID_NOT_FOUND");
        session.answered(&again, w.clone(), 0, 6);
        let inc = session.request(&w);
        session.answered(&inc, w.clone(), 0, 9);
        assert!(session.request(&w).is_full(), "an answer for another session");
    }

    #[test]
    fn the_epoch_wraps_to_one() {
        let mut session = FetchSession { id: 3, epoch: i32::MAX, held: BTreeMap::new() };
        let w = wanted(&[]);
        let r = session.request(&w);
        session.answered(&r, w.clone(), 0, 3);
        assert_eq!(session.request(&w).epoch, 1);
    }
}
