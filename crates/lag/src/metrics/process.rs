//! The series of the process itself rather than of a cluster's groups:
//! how many log messages it wrote, by level (kminion's
//! `log_messages_total`), and what a cluster's Kafka clients sent and
//! received (kminion's `kafka_requests_sent_total`, `kafka_sent_bytes`,
//! `kafka_requests_received_total`, `kafka_received_bytes`). Written as
//! Prometheus text under the metrics namespace, in every profile.

use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};

use kshard_kafka::TrafficTotals;

/// kminion's levels, in its order; tracing's `TRACE` counts as `debug`.
const LEVELS: [&str; 6] = ["debug", "error", "fatal", "info", "panic", "warn"];

/// Log messages written, by level (those the log filter let through).
#[derive(Debug, Default)]
pub struct LogCounts {
    by_level: [AtomicU64; LEVELS.len()],
}

impl LogCounts {
    /// One message at `level` was written.
    pub fn count(&self, level: &tracing::Level) {
        let name = match *level {
            tracing::Level::ERROR => "error",
            tracing::Level::WARN => "warn",
            tracing::Level::INFO => "info",
            tracing::Level::DEBUG | tracing::Level::TRACE => "debug",
        };
        if let Some(i) = LEVELS.iter().position(|l| *l == name) {
            self.by_level[i].fetch_add(1, Ordering::Relaxed);
        }
    }

    /// `<namespace>_log_messages_total{level}`, every level (0 included).
    pub fn render(&self, namespace: &str) -> String {
        let mut out = String::new();
        let rows: Vec<(String, f64)> = LEVELS
            .iter()
            .zip(&self.by_level)
            .map(|(level, n)| (format!("level=\"{level}\""), n.load(Ordering::Relaxed) as f64))
            .collect();
        family(&mut out, namespace, "log_messages_total", "Log messages written, by level.", "counter", &rows);
        out
    }
}

/// Appends the family `<namespace>_<name>` of `kind` (`counter`, `gauge`)
/// to `out`: its HELP, its TYPE, then one sample per row (its labels as
/// written between the braces, `""` for none, and its value).
pub(crate) fn family(out: &mut String, namespace: &str, name: &str, help: &str, kind: &str, rows: &[(String, f64)]) {
    family_named(out, &format!("{namespace}_{name}"), help, kind, rows);
}

/// [`family`] under `name` as it is, without a namespace.
pub(crate) fn family_named(out: &mut String, name: &str, help: &str, kind: &str, rows: &[(String, f64)]) {
    let _ = write!(out, "# HELP {name} {help}\n# TYPE {name} {kind}\n");
    for (labels, value) in rows {
        let _ = match labels.as_str() {
            "" => writeln!(out, "{name} {value}"),
            labels => writeln!(out, "{name}{{{labels}}} {value}"),
        };
    }
}

/// The traffic counters of one cluster's clients: kminion's four, and the
/// answers refused as malformed.
pub(crate) fn traffic(namespace: &str, t: TrafficTotals) -> String {
    let mut out = String::new();
    for (name, help, value) in [
        ("kafka_requests_sent_total", "Requests sent to the cluster's brokers.", t.requests_sent),
        ("kafka_sent_bytes", "Bytes of the requests sent to the cluster's brokers (TLS not counted).", t.bytes_sent),
        ("kafka_requests_received_total", "Answers read from the cluster's brokers.", t.responses_received),
        ("kafka_received_bytes", "Bytes of the answers read from the cluster's brokers.", t.bytes_received),
        (
            "kafka_malformed_answers_total",
            "Answers from the cluster's brokers refused as malformed (too large, or fields that do not fit their bytes).",
            t.malformed_answers,
        ),
    ] {
        family(&mut out, namespace, name, help, "counter", &[(String::new(), value as f64)]);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn levels_are_kminions_and_all_shown() {
        let logs = LogCounts::default();
        logs.count(&tracing::Level::INFO);
        logs.count(&tracing::Level::INFO);
        logs.count(&tracing::Level::TRACE);
        logs.count(&tracing::Level::ERROR);
        let text = logs.render("kminion");
        assert!(text.contains("kminion_log_messages_total{level=\"info\"} 2\n"), "{text}");
        assert!(text.contains("kminion_log_messages_total{level=\"debug\"} 1\n"), "trace as debug");
        assert!(text.contains("kminion_log_messages_total{level=\"panic\"} 0\n"), "every level, as kminion");
        assert_eq!(text.lines().filter(|l| !l.starts_with('#')).count(), 6);
    }

    #[test]
    fn traffic_is_kminions_four_counters_and_malformed_answers() {
        let totals = TrafficTotals {
            requests_sent: 3,
            bytes_sent: 300,
            responses_received: 2,
            bytes_received: 900,
            malformed_answers: 1,
        };
        let text = traffic("k", totals);
        for line in [
            "k_kafka_requests_sent_total 3",
            "k_kafka_sent_bytes 300",
            "k_kafka_requests_received_total 2",
            "k_kafka_received_bytes 900",
            "k_kafka_malformed_answers_total 1",
        ] {
            assert!(text.contains(line), "{line}: {text}");
        }
    }
}
