//! The runtime's Prometheus metrics, per shard replica of this member.
//!
//! | metric | type | what |
//! |---|---|---|
//! | `kshard_runtime_transactions_total{shard}` | counter | consumer transactions committed |
//! | `kshard_runtime_transaction_messages_total{shard}` | counter | source messages those held |
//! | `kshard_runtime_playback_records_total{shard}` | counter | recovery-log records played (`rate()`: records/s) |
//! | `kshard_runtime_playback_bytes_total{shard}` | counter | their bytes (`rate()`: bytes/s) |
//! | `kshard_runtime_replica_status{shard,status}` | gauge | 1 for the replica's status (IDLE … FAILED) |
//! | `kshard_runtime_log_behind_records{shard}` | gauge | records between the replica's position and the log's end |
//! | `kshard_runtime_failover_seconds{shard}` | gauge | last promotion: from the slot becoming 0 to PRIMARY |
//! | `kshard_runtime_replica_failures_total{shard,kind}` | counter | replicas of the shard that failed here, by what they failed of (`kafka`, `fenced`, `recovery_log`, `store`, `application`, `panic`, `keyspace`, `spec`, `runtime`) |
//! | `kshard_runtime_snapshots_total{shard}` | counter | snapshots this member wrote as primary |
//! | `kshard_runtime_snapshot_bytes{shard}` | gauge | the last one's size: the live state |
//! | `kshard_runtime_messages_refused_total{shard,outcome}` | counter | messages the application refused, `skipped` or `dead_lettered` (committed transactions only) |
//! | `kshard_runtime_source_events_total{shard,event}` | counter | a source's log cut below the primary's position (`reset`), or a batch of it that failed its checksum skipped (`batch_skipped`) |

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use crate::replica_failure::FailureKind;
use crate::status::ReplicaCode;

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ShardLabel {
    shard: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct FailureLabels {
    shard: String,
    kind: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RefusedLabels {
    shard: String,
    outcome: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StatusLabels {
    shard: String,
    status: String,
}

/// One shard's playback counters (see [`Metrics::playback`]).
#[derive(Debug, Clone)]
pub struct Playback {
    records: Counter,
    bytes: Counter,
}

impl Playback {
    /// A log record of `bytes` bytes was played.
    pub fn played(&self, bytes: usize) {
        self.records.inc();
        self.bytes.inc_by(bytes as u64);
    }
}

/// The metrics of one member's replicas.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    transactions: Family<ShardLabel, Counter>,
    transaction_messages: Family<ShardLabel, Counter>,
    playback_records: Family<ShardLabel, Counter>,
    playback_bytes: Family<ShardLabel, Counter>,
    status: Family<StatusLabels, Gauge>,
    behind: Family<ShardLabel, Gauge>,
    failover: Family<ShardLabel, Gauge<f64, std::sync::atomic::AtomicU64>>,
    failures: Family<FailureLabels, Counter>,
    snapshots: Family<ShardLabel, Counter>,
    snapshot_bytes: Family<ShardLabel, Gauge>,
    refused: Family<RefusedLabels, Counter>,
    source_events: Family<SourceEventLabels, Counter>,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct SourceEventLabels {
    shard: String,
    event: &'static str,
}

/// What happened to a source that is not a message (see
/// [`Metrics::source_event`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SourceEvent {
    /// Its log was cut below the primary's position.
    Reset,
    /// A batch that failed its checksum was skipped.
    BatchSkipped,
}

const CODES: [ReplicaCode; 5] =
    [ReplicaCode::Idle, ReplicaCode::Backfill, ReplicaCode::Standby, ReplicaCode::Primary, ReplicaCode::Failed];

impl Default for Metrics {
    fn default() -> Self {
        let mut registry = Registry::with_prefix("kshard_runtime");
        let m = Metrics {
            registry: Registry::default(),
            transactions: Family::default(),
            transaction_messages: Family::default(),
            playback_records: Family::default(),
            playback_bytes: Family::default(),
            status: Family::default(),
            behind: Family::default(),
            failover: Family::default(),
            failures: Family::default(),
            snapshots: Family::default(),
            snapshot_bytes: Family::default(),
            refused: Family::default(),
            source_events: Family::default(),
        };
        registry.register("transactions", "Consumer transactions committed", m.transactions.clone());
        registry.register(
            "transaction_messages",
            "Source messages in committed transactions",
            m.transaction_messages.clone(),
        );
        registry.register("playback_records", "Recovery-log records played", m.playback_records.clone());
        registry.register("playback_bytes", "Bytes of recovery-log records played", m.playback_bytes.clone());
        registry.register("replica_status", "1 for the status of this member's replica of the shard", m.status.clone());
        registry.register(
            "log_behind_records",
            "Records between the replica's position and the end of its recovery log",
            m.behind.clone(),
        );
        registry.register(
            "failover_seconds",
            "The replica's last promotion: from its slot becoming 0 to PRIMARY",
            m.failover.clone(),
        );
        registry.register("replica_failures", "Replicas of the shard that failed on this member", m.failures.clone());
        registry.register("snapshots", "Snapshots of the store written by this member as primary", m.snapshots.clone());
        registry.register("snapshot_bytes", "The size of the last snapshot: the live state", m.snapshot_bytes.clone());
        registry.register(
            "messages_refused",
            "Messages the application refused: skipped or dead-lettered, in committed transactions",
            m.refused.clone(),
        );
        registry.register(
            "source_events",
            "A source's log cut below the primary's position (reset), or a corrupt batch of it skipped (batch_skipped)",
            m.source_events.clone(),
        );
        Metrics { registry, ..m }
    }
}

fn shard(s: &str) -> ShardLabel {
    ShardLabel { shard: s.to_owned() }
}

impl Metrics {
    /// A transaction of `messages` messages was committed.
    pub fn transaction(&self, s: &str, messages: usize) {
        self.transactions.get_or_create(&shard(s)).inc();
        self.transaction_messages.get_or_create(&shard(s)).inc_by(messages as u64);
    }

    /// The playback counters of shard `s`, to keep: counting a played record
    /// through them costs no label lookup (playback is the hot path).
    pub fn playback(&self, s: &str) -> Playback {
        Playback {
            records: self.playback_records.get_or_create(&shard(s)).clone(),
            bytes: self.playback_bytes.get_or_create(&shard(s)).clone(),
        }
    }

    /// The replica's status is now `code` (IDLE removes the series).
    pub fn status(&self, s: &str, code: ReplicaCode) {
        for c in CODES {
            let labels = StatusLabels { shard: s.to_owned(), status: c.name().to_owned() };
            if code == ReplicaCode::Idle {
                self.status.remove(&labels);
            } else {
                self.status.get_or_create(&labels).set(i64::from(c == code));
            }
        }
        if code == ReplicaCode::Idle {
            self.behind.remove(&shard(s));
        }
    }

    /// A replica of the shard failed of `kind`.
    pub fn failure(&self, s: &str, kind: FailureKind) {
        self.failures.get_or_create(&FailureLabels { shard: s.to_owned(), kind: kind.name() }).inc();
    }

    /// The replica is `records` behind the end of its log.
    pub fn behind(&self, s: &str, records: i64) {
        self.behind.get_or_create(&shard(s)).set(records);
    }

    /// The replica was promoted in `seconds`.
    pub fn failover(&self, s: &str, seconds: f64) {
        self.failover.get_or_create(&shard(s)).set(seconds);
    }

    /// A snapshot of `bytes` was written.
    pub fn snapshot(&self, s: &str, bytes: u64) {
        self.snapshots.get_or_create(&shard(s)).inc();
        self.snapshot_bytes.get_or_create(&shard(s)).set(i64::try_from(bytes).unwrap_or(i64::MAX));
    }

    /// A committed transaction refused `skipped` messages and sent
    /// `dead_lettered` to the dead-letter topic.
    pub fn refused(&self, s: &str, skipped: u64, dead_lettered: u64) {
        for (outcome, n) in [("skipped", skipped), ("dead_lettered", dead_lettered)] {
            if n > 0 {
                self.refused.get_or_create(&RefusedLabels { shard: s.to_owned(), outcome }).inc_by(n);
            }
        }
    }

    /// `event` happened to a source of shard `s`.
    pub(crate) fn source_event(&self, s: &str, event: SourceEvent) {
        let event = match event {
            SourceEvent::Reset => "reset",
            SourceEvent::BatchSkipped => "batch_skipped",
        };
        self.source_events.get_or_create(&SourceEventLabels { shard: s.to_owned(), event }).inc();
    }

    /// The metrics in Prometheus' text format (0.0.4, no `# EOF`: it can be
    /// served alone or after other families).
    pub fn encode(&self) -> String {
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::prometheus_text::encode(&mut out, &self.registry);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_status_series_is_one_and_idle_removes_them() {
        let m = Metrics::default();
        m.status("s1", ReplicaCode::Standby);
        m.status("s1", ReplicaCode::Primary);
        m.transaction("s1", 3);
        let text = m.encode();
        assert!(text.contains(r#"kshard_runtime_replica_status{shard="s1",status="PRIMARY"} 1"#), "{text}");
        assert!(text.contains(r#"kshard_runtime_replica_status{shard="s1",status="STANDBY"} 0"#), "{text}");
        assert!(text.contains(r#"kshard_runtime_transaction_messages_total{shard="s1"} 3"#), "{text}");
        assert!(!text.contains("# EOF"), "classic text, to follow other families: {text}");
        m.status("s1", ReplicaCode::Idle);
        assert!(!m.encode().contains("replica_status{"), "{}", m.encode());
    }
}
