//! kminion's end-to-end probe, its bookkeeping: each probe message from
//! the moment it is produced until it is acknowledged, read back within the
//! round-trip SLA, or lost; each offset commit of the probe's group; and
//! the counters and histograms kminion exports of them
//! (`end_to_end_messages_produced_total`, `…_roundtrip_latency_seconds`, …).
//! Pure: every event comes with its time, so tests drive it on their own clock.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

/// kminion's buckets for a latency histogram whose SLA is `max`:
/// exponential from 5 ms, doubling, `floor(log2(max_ms / 10)) + 3` of them
/// (11 up to 5.12 s for 5 s; 13 up to 20.48 s for 20 s).
pub fn kminion_buckets(max: Duration) -> Vec<f64> {
    let tenths = (max.as_millis() / 10).max(1) as f64;
    let count = tenths.log2().floor() as usize + 3;
    (0..count).map(|i| 0.005 * f64::powi(2.0, i as i32)).collect()
}

/// kminion's reason for a commit slower than its SLA.
pub const SLA_EXCEEDED: &str = "OFFSET_COMMIT_SLA_EXCEEDED";

/// A latency histogram with fixed upper bounds (and `+Inf`).
#[derive(Debug, Clone, PartialEq)]
pub struct Histogram {
    bounds: Arc<[f64]>,
    /// One count per bound, then the overflow (`+Inf`); not cumulative.
    counts: Vec<u64>,
    sum: f64,
}

impl Histogram {
    fn new(bounds: &Arc<[f64]>) -> Self {
        Histogram { bounds: Arc::clone(bounds), counts: vec![0; bounds.len() + 1], sum: 0.0 }
    }

    fn observe(&mut self, seconds: f64) {
        let i = self.bounds.iter().position(|b| seconds <= *b).unwrap_or(self.bounds.len());
        self.counts[i] += 1;
        self.sum += seconds;
    }

    /// `(upper bound, count in that bucket alone)`, the last bound infinite.
    pub fn buckets(&self) -> Vec<(f64, u64)> {
        self.bounds.iter().copied().chain([f64::INFINITY]).zip(self.counts.iter().copied()).collect()
    }

    /// How many observations.
    pub fn count(&self) -> u64 {
        self.counts.iter().sum()
    }

    /// Their sum, in seconds.
    pub fn sum(&self) -> f64 {
        self.sum
    }
}

/// One partition of the probe topic: kminion's `partition_id` series.
#[derive(Debug, Clone, PartialEq)]
pub struct PartitionProbe {
    /// Produced, no answer yet.
    pub in_flight: i64,
    /// Answered by the broker (acknowledged or failed).
    pub produced: u64,
    /// Failed or timed out.
    pub failed: u64,
    /// Read back within the round-trip SLA.
    pub received: u64,
    /// Acknowledged or not, never read back within the round-trip SLA.
    pub lost: u64,
    /// Produce to acknowledgement.
    pub produce_latency: Histogram,
    /// Produce to read back.
    pub roundtrip_latency: Histogram,
}

/// The offset commits answered by one group coordinator.
#[derive(Debug, Clone, PartialEq)]
pub struct CoordinatorProbe {
    /// Commits sent (answered or timed out).
    pub commits: u64,
    /// Failed commits, by reason: Kafka's error name, [`SLA_EXCEEDED`], or
    /// `RESPONSE_ERROR` (no answer), as kminion names them.
    pub failed: BTreeMap<String, u64>,
    /// Commit to answer.
    pub latency: Histogram,
}

/// What `/metrics` shows of the probe.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ProbeSnapshot {
    /// By partition.
    pub partitions: BTreeMap<i32, PartitionProbe>,
    /// By coordinator broker id.
    pub coordinators: BTreeMap<i32, CoordinatorProbe>,
}

/// The SLAs that shape the histograms and decide when a message is lost.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProbeSlas {
    /// Produce to acknowledgement (the produce histogram's top bucket).
    pub ack: Duration,
    /// Produce to read back; later, the message counts as lost.
    pub roundtrip: Duration,
    /// Commit to answer; later, the commit failed ([`SLA_EXCEEDED`]).
    pub commit: Duration,
}

#[derive(Debug)]
struct Pending {
    partition: i32,
    sent: Instant,
}

#[derive(Debug)]
struct Probe {
    slas: ProbeSlas,
    bounds: [Arc<[f64]>; 3],
    pending: HashMap<String, Pending>,
    shown: ProbeSnapshot,
}

/// The probe's state, shared by its worker threads and `/metrics`.
#[derive(Debug)]
pub struct EndToEnd {
    probe: Mutex<Probe>,
}

impl EndToEnd {
    /// Nothing produced yet.
    pub fn new(slas: ProbeSlas) -> Self {
        let bounds = [slas.ack, slas.roundtrip, slas.commit].map(|sla| Arc::from(kminion_buckets(sla)));
        EndToEnd { probe: Mutex::new(Probe { slas, bounds, pending: HashMap::new(), shown: ProbeSnapshot::default() }) }
    }

    fn with<T>(&self, f: impl FnOnce(&mut Probe) -> T) -> T {
        f(&mut self.probe.lock().unwrap_or_else(PoisonError::into_inner))
    }

    /// Message `id` was produced to `partition` at `at`.
    pub fn sent(&self, id: &str, partition: i32, at: Instant) {
        self.with(|p| {
            p.partition(partition).in_flight += 1;
            p.pending.insert(id.to_owned(), Pending { partition, sent: at });
        });
    }

    /// The broker answered message `id` (sent to `partition` at `sent`) at
    /// `at`: acknowledged, or not written. A failed message is not waited for.
    pub fn answered(&self, id: &str, partition: i32, sent: Instant, at: Instant, written: bool) {
        self.with(|p| {
            let seconds = at.saturating_duration_since(sent).as_secs_f64();
            let stats = p.partition(partition);
            stats.in_flight -= 1;
            stats.produced += 1;
            if written {
                stats.produce_latency.observe(seconds);
            } else {
                stats.failed += 1;
                p.pending.remove(id);
            }
        });
    }

    /// Message `id` of this probe was read back at `at`. One read later than
    /// the round-trip SLA is not counted here: [`EndToEnd::expire`] counts it lost.
    pub fn arrived(&self, id: &str, at: Instant) {
        self.with(|p| {
            let Some(pending) = p.pending.get(id) else { return };
            let took = at.saturating_duration_since(pending.sent);
            if took > p.slas.roundtrip {
                return;
            }
            let partition = pending.partition;
            p.pending.remove(id);
            let stats = p.partition(partition);
            stats.received += 1;
            stats.roundtrip_latency.observe(took.as_secs_f64());
        });
    }

    /// Counts as lost every message not read back within the SLA at `now`.
    pub fn expire(&self, now: Instant) {
        self.with(|p| {
            let sla = p.slas.roundtrip;
            let mut lost = Vec::new();
            p.pending.retain(|_, m| {
                let late = now.saturating_duration_since(m.sent) > sla;
                if late {
                    lost.push(m.partition);
                }
                !late
            });
            for partition in lost {
                p.partition(partition).lost += 1;
            }
        });
    }

    /// An offset commit to `coordinator` took `took`: answered, or failed
    /// for `failure`; a commit slower than the SLA failed for that
    /// ([`SLA_EXCEEDED`]), whatever its answer.
    pub fn committed(&self, coordinator: i32, took: Duration, failure: Option<&str>) {
        self.with(|p| {
            let slow = took > p.slas.commit;
            let bounds = &p.bounds[2];
            let stats = p.shown.coordinators.entry(coordinator).or_insert_with(|| CoordinatorProbe {
                commits: 0,
                failed: BTreeMap::new(),
                latency: Histogram::new(bounds),
            });
            stats.commits += 1;
            stats.latency.observe(took.as_secs_f64());
            // Past the SLA, a commit failed for that, whatever came later (kminion's rule).
            let failure = if slow { Some(SLA_EXCEEDED) } else { failure };
            if let Some(reason) = failure {
                *stats.failed.entry(reason.to_owned()).or_default() += 1;
            }
        });
    }

    /// The counters and histograms as they stand.
    pub fn snapshot(&self) -> ProbeSnapshot {
        self.with(|p| p.shown.clone())
    }

    /// How many messages wait to be read back.
    pub fn pending(&self) -> usize {
        self.with(|p| p.pending.len())
    }
}

impl Probe {
    fn partition(&mut self, partition: i32) -> &mut PartitionProbe {
        let [ack, roundtrip, _] = &self.bounds;
        self.shown.partitions.entry(partition).or_insert_with(|| PartitionProbe {
            in_flight: 0,
            produced: 0,
            failed: 0,
            received: 0,
            lost: 0,
            produce_latency: Histogram::new(ack),
            roundtrip_latency: Histogram::new(roundtrip),
        })
    }
}

/// A probe message, in kminion's JSON (`minionID`, `messageID`,
/// `createdUtcNs`): kminion and kshard probes can share a topic, each
/// reading back only its own.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ProbeMessage {
    /// The probe that sent it (random at each start).
    #[serde(rename = "minionID")]
    pub minion_id: String,
    /// This message.
    #[serde(rename = "messageID")]
    pub message_id: String,
    /// When it was made, Unix nanoseconds.
    #[serde(rename = "createdUtcNs")]
    pub created_utc_ns: i64,
}

impl ProbeMessage {
    /// The record value.
    pub fn encode(&self) -> Vec<u8> {
        // A struct of strings and an integer always serializes.
        serde_json::to_vec(self).unwrap_or_default()
    }

    /// The message in `value`, when it is one of `minion`'s; anything else on
    /// the topic (another probe's, kminion's init records) is not.
    pub fn decode_own(value: &[u8], minion: &str) -> Option<ProbeMessage> {
        let m: ProbeMessage = serde_json::from_slice(value).ok()?;
        (m.minion_id == minion).then_some(m)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SLAS: ProbeSlas =
        ProbeSlas { ack: Duration::from_secs(5), roundtrip: Duration::from_secs(20), commit: Duration::from_secs(5) };

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn buckets_are_kminions() {
        let five = kminion_buckets(Duration::from_secs(5));
        assert_eq!(five.len(), 11);
        assert_eq!((five[0], five[10]), (0.005, 5.12));
        let twenty = kminion_buckets(Duration::from_secs(20));
        assert_eq!((twenty.len(), twenty[12]), (13, 20.48));
        assert_eq!(kminion_buckets(ms(1)).len(), 3, "a tiny SLA still has buckets");
    }

    #[test]
    fn a_message_goes_from_in_flight_to_received() {
        let probe = EndToEnd::new(SLAS);
        let t = Instant::now();
        probe.sent("a", 0, t);
        assert_eq!(probe.snapshot().partitions[&0].in_flight, 1);
        probe.answered("a", 0, t, t + ms(3), true);
        probe.arrived("a", t + ms(12));
        let p = &probe.snapshot().partitions[&0];
        assert_eq!((p.in_flight, p.produced, p.failed, p.received, p.lost), (0, 1, 0, 1, 0));
        assert_eq!(p.produce_latency.buckets()[0], (0.005, 1), "3 ms");
        assert_eq!(p.roundtrip_latency.buckets()[2], (0.02, 1), "12 ms");
        assert!((p.roundtrip_latency.sum() - 0.012).abs() < 1e-9);
        assert_eq!(probe.pending(), 0);
        probe.expire(t + Duration::from_secs(60));
        assert_eq!(probe.snapshot().partitions[&0].lost, 0, "received: never lost");
    }

    #[test]
    fn a_message_read_late_or_never_is_lost_once() {
        let probe = EndToEnd::new(SLAS);
        let t = Instant::now();
        probe.sent("late", 1, t);
        probe.sent("never", 1, t);
        probe.answered("late", 1, t, t + ms(2), true);
        probe.arrived("late", t + Duration::from_secs(21));
        probe.expire(t + Duration::from_secs(20));
        assert_eq!(probe.snapshot().partitions[&1].lost, 0, "not yet past the SLA");
        probe.expire(t + Duration::from_secs(21));
        probe.expire(t + Duration::from_secs(22));
        let p = &probe.snapshot().partitions[&1];
        assert_eq!((p.received, p.lost, p.in_flight), (0, 2, 1), "'never' was not even answered");
    }

    #[test]
    fn a_failed_produce_is_counted_and_not_waited_for() {
        let probe = EndToEnd::new(SLAS);
        let t = Instant::now();
        probe.sent("x", 2, t);
        probe.answered("x", 2, t, t + Duration::from_secs(7), false);
        probe.expire(t + Duration::from_secs(60));
        let p = &probe.snapshot().partitions[&2];
        assert_eq!((p.produced, p.failed, p.lost), (1, 1, 0));
        assert_eq!(p.produce_latency.count(), 0, "no latency for a failure");
    }

    #[test]
    fn commits_count_by_coordinator_and_slow_ones_fail() {
        let probe = EndToEnd::new(SLAS);
        probe.committed(1, ms(4), None);
        probe.committed(1, Duration::from_secs(6), None);
        probe.committed(2, ms(8), Some("NOT_COORDINATOR"));
        probe.committed(2, Duration::from_secs(9), Some("REQUEST_TIMED_OUT"));
        let s = probe.snapshot();
        assert_eq!(s.coordinators[&1].commits, 2);
        assert_eq!(s.coordinators[&1].failed, BTreeMap::from([(SLA_EXCEEDED.to_owned(), 1)]));
        assert_eq!(s.coordinators[&1].latency.buckets().last(), Some(&(f64::INFINITY, 1)), "6 s is above 5.12");
        assert_eq!(s.coordinators[&2].failed["NOT_COORDINATOR"], 1);
        assert_eq!(s.coordinators[&2].failed[SLA_EXCEEDED], 1, "past the SLA, that is the reason");
    }

    #[test]
    fn only_own_messages_decode() {
        let m = ProbeMessage { minion_id: "me".into(), message_id: "1".into(), created_utc_ns: 7 };
        let bytes = m.encode();
        assert_eq!(
            String::from_utf8_lossy(&bytes),
            r#"{"minionID":"me","messageID":"1","createdUtcNs":7}"#,
            "kminion's JSON"
        );
        assert_eq!(ProbeMessage::decode_own(&bytes, "me"), Some(m));
        assert_eq!(ProbeMessage::decode_own(&bytes, "other"), None);
        assert_eq!(ProbeMessage::decode_own(b"init-message", "me"), None);
    }
}
