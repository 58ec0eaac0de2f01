//! [`Traffic`]: the requests and bytes the Kafka clients made from one
//! [`Client`](crate::Client) (and its clones) sent to brokers
//! and received from them: kminion's `kafka_requests_sent_total`,
//! `kafka_sent_bytes`, `kafka_requests_received_total` and
//! `kafka_received_bytes`. kshard's own connections count each request as
//! it goes; librdkafka's producers and consumers report theirs in their
//! statistics, whose totals per client are turned into increments here.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

/// A client not heard from for this long is gone (they report every 10 s):
/// its entry is dropped, so clients made and dropped (probe sessions,
/// readers) do not pile up.
const FORGET_AFTER: Duration = Duration::from_secs(60);

/// Totals since the settings were made.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TrafficTotals {
    /// Requests written to brokers.
    pub requests_sent: u64,
    /// Their bytes (TLS overhead not counted).
    pub bytes_sent: u64,
    /// Answers read from brokers.
    pub responses_received: u64,
    /// Their bytes.
    pub bytes_received: u64,
    /// Answers of kshard's own connections refused as malformed: a frame
    /// past the size allowed, or one whose fields do not fit its bytes.
    pub malformed_answers: u64,
}

/// Counters shared by every client of one settings.
#[derive(Debug, Default)]
pub struct Traffic {
    requests_sent: AtomicU64,
    bytes_sent: AtomicU64,
    responses_received: AtomicU64,
    bytes_received: AtomicU64,
    malformed_answers: AtomicU64,
    /// The last totals each librdkafka client (by its instance name)
    /// reported, and when.
    reported: Mutex<HashMap<String, (TrafficTotals, Instant)>>,
}

impl Traffic {
    /// One request of `bytes` written.
    pub(crate) fn sent(&self, bytes: usize) {
        self.requests_sent.fetch_add(1, Ordering::Relaxed);
        self.bytes_sent.fetch_add(bytes as u64, Ordering::Relaxed);
    }

    /// One answer of `bytes` read.
    pub(crate) fn received(&self, bytes: usize) {
        self.responses_received.fetch_add(1, Ordering::Relaxed);
        self.bytes_received.fetch_add(bytes as u64, Ordering::Relaxed);
    }

    /// One answer refused as malformed.
    pub(crate) fn malformed_answer(&self) {
        self.malformed_answers.fetch_add(1, Ordering::Relaxed);
    }

    /// librdkafka client `client` has sent and received `totals` since it
    /// was made, as it said at `now`: what is new since its last report is
    /// added. What a client did after its last report before it was dropped
    /// is not counted (up to its reporting interval).
    pub(crate) fn reported(&self, client: &str, totals: TrafficTotals, now: Instant) {
        let mut reported = self.reported.lock().unwrap_or_else(PoisonError::into_inner);
        reported.retain(|_, (_, at)| now.saturating_duration_since(*at) < FORGET_AFTER);
        let before = reported.insert(client.to_owned(), (totals, now)).map(|(t, _)| t).unwrap_or_default();
        let add = |counter: &AtomicU64, now: u64, then: u64| {
            counter.fetch_add(now.saturating_sub(then), Ordering::Relaxed);
        };
        add(&self.requests_sent, totals.requests_sent, before.requests_sent);
        add(&self.bytes_sent, totals.bytes_sent, before.bytes_sent);
        add(&self.responses_received, totals.responses_received, before.responses_received);
        add(&self.bytes_received, totals.bytes_received, before.bytes_received);
    }

    /// The totals now.
    pub fn totals(&self) -> TrafficTotals {
        let n = |a: &AtomicU64| a.load(Ordering::Relaxed);
        TrafficTotals {
            requests_sent: n(&self.requests_sent),
            bytes_sent: n(&self.bytes_sent),
            responses_received: n(&self.responses_received),
            bytes_received: n(&self.bytes_received),
            malformed_answers: n(&self.malformed_answers),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn totals(requests: u64, bytes: u64) -> TrafficTotals {
        TrafficTotals {
            requests_sent: requests,
            bytes_sent: bytes,
            responses_received: requests,
            bytes_received: bytes * 2,
            malformed_answers: 0,
        }
    }

    #[test]
    fn own_requests_and_librdkafka_reports_add_up() {
        let t = Traffic::default();
        let at = Instant::now();
        t.sent(100);
        t.received(300);
        t.reported("rdkafka#producer-1", totals(5, 50), at);
        t.reported("rdkafka#producer-1", totals(7, 80), at + Duration::from_secs(10));
        t.reported("rdkafka#consumer-2", totals(1, 10), at + Duration::from_secs(10));
        let now = t.totals();
        assert_eq!((now.requests_sent, now.bytes_sent), (1 + 7 + 1, 100 + 80 + 10));
        assert_eq!((now.responses_received, now.bytes_received), (1 + 7 + 1, 300 + 160 + 20));
    }

    #[test]
    fn clients_no_longer_heard_from_are_forgotten() {
        let t = Traffic::default();
        let at = Instant::now();
        for i in 0..100 {
            t.reported(&format!("rdkafka#consumer-{i}"), totals(1, 1), at);
        }
        t.reported("rdkafka#producer-1", totals(1, 1), at + Duration::from_secs(61));
        assert_eq!(t.reported.lock().expect("lock").len(), 1, "the dropped consumers went");
        assert_eq!(t.totals().requests_sent, 101, "what they did stays counted");
    }
}
