//! Replica status: what a replica reports about itself under its assignment.
//!
//! Codes are ordered — IDLE 0, BACKFILL 100, STANDBY 200, PRIMARY 300, FAILED
//! 400 — and errors are present exactly when the code is FAILED. Two reports
//! of one assignment reduce to the higher code, with errors appended, so a late
//! BACKFILL never overwrites PRIMARY and FAILED sticks to that assignment (only
//! a new assignment, with a new create revision, starts over).

use serde::{Deserialize, Serialize};

/// Where a replica is in its lifecycle.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum ReplicaCode {
    /// Assigned, nothing done yet.
    Idle,
    /// Playing the recovery log towards its head.
    Backfill,
    /// At the head of the log, tailing it: ready to take over (the seed's TAILING).
    Standby,
    /// Serving: reading sources, running transactions, writing the log.
    Primary,
    /// Failed; the errors say why.
    Failed,
}

impl ReplicaCode {
    /// The numeric code (Gazette's values).
    pub fn value(self) -> u32 {
        match self {
            ReplicaCode::Idle => 0,
            ReplicaCode::Backfill => 100,
            ReplicaCode::Standby => 200,
            ReplicaCode::Primary => 300,
            ReplicaCode::Failed => 400,
        }
    }

    /// The name, as in JSON and metric labels (IDLE … FAILED).
    pub fn name(self) -> &'static str {
        match self {
            ReplicaCode::Idle => "IDLE",
            ReplicaCode::Backfill => "BACKFILL",
            ReplicaCode::Standby => "STANDBY",
            ReplicaCode::Primary => "PRIMARY",
            ReplicaCode::Failed => "FAILED",
        }
    }

    /// True for STANDBY and PRIMARY: a replica that holds the shard's state up
    /// to the log's head, which the allocator never removes while fewer such
    /// replicas than wanted would remain.
    pub fn is_consistent(self) -> bool {
        matches!(self, ReplicaCode::Standby | ReplicaCode::Primary)
    }
}

/// A replica's status report.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReplicaStatus {
    /// The code.
    pub code: ReplicaCode,
    /// Why it failed; empty unless the code is FAILED.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub errors: Vec<String>,
}

impl ReplicaStatus {
    /// A status without errors (for every code but FAILED).
    pub fn new(code: ReplicaCode) -> Self {
        ReplicaStatus { code, errors: Vec::new() }
    }

    /// FAILED with one error.
    pub fn failed(error: impl Into<String>) -> Self {
        ReplicaStatus { code: ReplicaCode::Failed, errors: vec![error.into()] }
    }

    /// The reduction of two reports of one assignment: the higher code; the
    /// errors of both when that code is FAILED (each error once, in order).
    pub fn reduce(&self, other: &ReplicaStatus) -> ReplicaStatus {
        let code = self.code.max(other.code);
        let mut errors = Vec::new();
        if code == ReplicaCode::Failed {
            for e in self.errors.iter().chain(&other.errors) {
                if !errors.contains(e) {
                    errors.push(e.clone());
                }
            }
        }
        ReplicaStatus { code, errors }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_are_gazettes_values_in_order() {
        use ReplicaCode::*;
        let codes = [Idle, Backfill, Standby, Primary, Failed];
        assert_eq!(codes.map(ReplicaCode::value), [0, 100, 200, 300, 400]);
        assert!(codes.windows(2).all(|w| w[0] < w[1]));
        assert_eq!(codes.map(ReplicaCode::is_consistent), [false, false, true, true, false]);
        for code in codes {
            assert_eq!(serde_json::to_value(code).expect("serializes"), code.name(), "one name in JSON and labels");
        }
    }

    #[test]
    fn a_late_backfill_never_overwrites_primary_and_failed_sticks() {
        let primary = ReplicaStatus::new(ReplicaCode::Primary);
        let backfill = ReplicaStatus::new(ReplicaCode::Backfill);
        assert_eq!(primary.reduce(&backfill), primary);
        assert_eq!(backfill.reduce(&primary), primary);
        let failed = ReplicaStatus::failed("store: disk full");
        assert_eq!(failed.reduce(&primary), failed);
        let twice = failed.reduce(&ReplicaStatus::failed("log: fenced"));
        assert_eq!(twice.errors, ["store: disk full", "log: fenced"]);
        assert_eq!(twice.reduce(&ReplicaStatus::failed("log: fenced")), twice, "each error once");
    }

    #[test]
    fn status_round_trips_as_json_with_names() {
        let s = ReplicaStatus::failed("x");
        let json = serde_json::to_string(&s).expect("serializes");
        assert_eq!(json, r#"{"code":"FAILED","errors":["x"]}"#);
        assert_eq!(serde_json::from_str::<ReplicaStatus>(&json).expect("parses"), s);
        let standby = serde_json::to_string(&ReplicaStatus::new(ReplicaCode::Standby)).expect("serializes");
        assert_eq!(standby, r#"{"code":"STANDBY"}"#);
    }
}
