//! The runtime's model and where it lives in the keyspace: shard specs,
//! members (processes) and assignments, each a key under one root prefix.
//!
//! ```text
//! {root}/shards/{shard}                  ShardSpec (JSON)
//! {root}/members/{zone}#{member}         MemberSpec (JSON), under the member's lease
//! {root}/assign/{shard}#{zone}#{member}  AssignmentValue (JSON: slot and replica status),
//!                                        under the member's lease
//! {root}/hints/{shard}                   Hints (JSON): where playback may start
//! ```
//!
//! Slot 0 is the primary. The slot is in the value, not the key, so that
//! promoting a standby (its slot becomes 0) changes the assignment rather than
//! making a new one: the replica keeps what it played. An assignment's identity
//! is its key's create revision: a shard assigned again to the same member
//! (after a removal) is a new key. `#` and `/` may not appear in ids, so keys
//! parse back unambiguously.

use serde::{Deserialize, Serialize};

use crate::status::ReplicaStatus;

/// A partition of a topic a shard reads, and the offset to start from when the
/// shard has no checkpoint yet.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Source {
    /// The topic.
    pub topic: String,
    /// The partition.
    pub partition: i32,
    /// The first offset to read without a checkpoint.
    #[serde(default)]
    pub min_offset: i64,
}

/// Where a shard's recovery log is: one partition of a Kafka topic.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecoveryLog {
    /// The topic.
    pub topic: String,
    /// The partition.
    pub partition: i32,
}

impl std::fmt::Display for RecoveryLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.topic, self.partition)
    }
}

/// A shard: its sources, its recovery log and how it is served.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShardSpec {
    /// The shard's id (no `#` or `/`).
    pub id: String,
    /// What it reads.
    pub sources: Vec<Source>,
    /// Where its store's changes go. `None`: nowhere — the store lives only
    /// on the member that runs the shard (in memory, or in its data
    /// directory), is not replicated, and a new primary elsewhere starts from
    /// the sources' minimum offsets with an empty store (Kafka Streams'
    /// stores with logging disabled). Such a shard has no hot standbys and
    /// publishes nothing (see [`ShardSpec::unlogged`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recovery_log: Option<RecoveryLog>,
    /// Standbys besides the primary.
    #[serde(default)]
    pub hot_standbys: u32,
    /// A transaction groups messages for at least this long, in ms.
    #[serde(default)]
    pub min_txn_duration_ms: u64,
    /// and at most this long, in ms.
    #[serde(default = "default_max_txn_ms")]
    pub max_txn_duration_ms: u64,
    /// Disabled shards get no replicas.
    #[serde(default)]
    pub disable: bool,
    /// Free-form labels.
    #[serde(default)]
    pub labels: std::collections::BTreeMap<String, String>,
    /// The primary snapshots its store when the log written since the last
    /// snapshot exceeds this multiple of that snapshot's size …
    #[serde(default = "default_snapshot_factor")]
    pub snapshot_factor: u32,
    /// … and this many bytes: a new replica replays at most the snapshot
    /// plus `snapshot_factor` times its size (or this many bytes) of records.
    #[serde(default = "default_snapshot_min_bytes")]
    pub snapshot_min_bytes: u64,
    /// What becomes of a message the application refuses.
    #[serde(default, skip_serializing_if = "Refusals::is_fail")]
    pub refusals: Refusals,
}

/// What becomes of a message the application refuses
/// ([`crate::AppError::refused`]); its writes and publishes in the
/// transaction are undone first.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "policy")]
pub enum Refusals {
    /// The replica fails, naming the message and the reason; the allocator
    /// retries the shard with a crash-loop backoff (until someone changes
    /// the policy or the application).
    #[default]
    Fail,
    /// The message is skipped: logged with its topic, partition, offset and
    /// reason, and counted (`kshard_runtime_messages_refused_total`).
    Skip,
    /// The message is published, exactly once, in the same transaction, to
    /// `topic` — the source's partition, or `partition` when set — with its
    /// key, value and headers and these headers more: `kshard.refused`
    /// (the reason), `kshard.source.topic`, `kshard.source.partition`,
    /// `kshard.source.offset` and `kshard.shard`. Counted too.
    DeadLetter {
        /// The dead-letter topic.
        topic: String,
        /// Its partition (default: the source message's).
        #[serde(default)]
        partition: Option<i32>,
    },
}

impl Refusals {
    fn is_fail(&self) -> bool {
        *self == Refusals::Fail
    }
}

fn default_max_txn_ms() -> u64 {
    1000
}

fn default_snapshot_factor() -> u32 {
    2
}

fn default_snapshot_min_bytes() -> u64 {
    8 << 20
}

/// Where playback of a shard's recovery log may start: the first record of a
/// snapshot of the store (a run of transactions putting every live key), and
/// the chain just before it. A replica without a store plays from here, not
/// from the log's start.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Hint {
    /// The log offset of the snapshot's first record.
    pub offset: i64,
    /// The chain's sequence number before it.
    pub seq: u64,
    /// The chain's checksum before it.
    pub checksum: u64,
    /// The author writing the log then.
    pub author: Option<u64>,
    /// The snapshot's size in bytes (the live state then).
    pub bytes: u64,
}

/// A shard's hints: the newest snapshot, and the one before it, which the
/// log is kept from (records before it are deleted).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Hints {
    /// The newest snapshot.
    pub current: Hint,
    /// The one before (a backup: the log keeps it).
    pub previous: Option<Hint>,
}

impl ShardSpec {
    /// A shard of `id` reading `sources`, logging to `recovery_log`, with the
    /// defaults: no standby, transactions of at most a second, snapshots per
    /// the default policy.
    pub fn new(id: impl Into<String>, sources: Vec<Source>, recovery_log: RecoveryLog) -> Self {
        ShardSpec { recovery_log: Some(recovery_log), ..Self::unlogged(id, sources) }
    }

    /// A shard of `id` reading `sources` whose store has no recovery log:
    /// what it holds is rebuilt from the sources whenever the shard starts
    /// on a member that does not have it. For state that is cheap to read
    /// again and needs no fail-over in a second: no standby can follow it,
    /// and a transaction commits to the store alone, so it cannot publish
    /// (a publish, or a dead-lettered refusal, fails the replica).
    pub fn unlogged(id: impl Into<String>, sources: Vec<Source>) -> Self {
        ShardSpec {
            id: id.into(),
            sources,
            recovery_log: None,
            hot_standbys: 0,
            min_txn_duration_ms: 0,
            max_txn_duration_ms: default_max_txn_ms(),
            disable: false,
            labels: Default::default(),
            snapshot_factor: default_snapshot_factor(),
            snapshot_min_bytes: default_snapshot_min_bytes(),
            refusals: Refusals::Fail,
        }
    }

    /// How messages name its recovery log (`topic/partition`), or its
    /// having none (`none`).
    pub fn log_name(&self) -> String {
        self.recovery_log.as_ref().map_or_else(|| "none".to_owned(), RecoveryLog::to_string)
    }

    /// Replicas wanted: the primary and the hot standbys (none when
    /// disabled; no standby without a recovery log to follow).
    pub fn replicas(&self) -> u32 {
        match (self.disable, &self.recovery_log) {
            (true, _) => 0,
            (false, None) => 1,
            (false, Some(_)) => 1 + self.hot_standbys,
        }
    }
}

/// A member: one kshard process of the application.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemberSpec {
    /// The member's id (no `#` or `/`).
    pub id: String,
    /// Its zone (rack, availability zone; no `#` or `/`).
    pub zone: String,
    /// The most replicas it takes.
    pub shard_limit: u32,
    /// Where it serves HTTP (`host:port`), for operators' tools.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoint: Option<String>,
}

/// One replica's assignment, as its key says.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct AssignmentKey {
    /// The shard.
    pub shard: String,
    /// The member's zone.
    pub zone: String,
    /// The member.
    pub member: String,
}

/// An assignment's value: its slot and its replica's status. The allocator
/// writes the slot, the replica its status, each keeping the other's part,
/// with transactions checked against the key's mod revision.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AssignmentValue {
    /// 0 for the primary.
    pub slot: u32,
    /// The replica's status.
    pub status: ReplicaStatus,
}

/// An assignment with what the keyspace knows of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Assignment {
    /// Which replica.
    pub key: AssignmentKey,
    /// Its identity: the key's create revision.
    pub create_revision: i64,
    /// The revision writes must check.
    pub mod_revision: i64,
    /// Slot and status.
    pub value: AssignmentValue,
}

/// A key that does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("malformed {what} key {key:?}: {why}")]
pub struct KeyError {
    /// Which kind of key.
    pub what: &'static str,
    /// The key.
    pub key: String,
    /// What is wrong.
    pub why: &'static str,
}

/// True for ids that can be part of keys.
pub fn valid_id(id: &str) -> bool {
    !id.is_empty() && !id.contains(['#', '/'])
}

/// The keys of one application, under `root`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Keys {
    root: String,
}

impl Keys {
    /// Keys under `root` (e.g. `/kshard/sum`); a trailing `/` is ignored.
    pub fn new(root: &str) -> Self {
        Keys { root: root.trim_end_matches('/').to_owned() }
    }

    /// The root prefix, without a trailing `/`.
    pub fn root(&self) -> &str {
        &self.root
    }

    /// The prefix of shard specs.
    pub fn shards(&self) -> String {
        format!("{}/shards/", self.root)
    }

    /// The prefix of members.
    pub fn members(&self) -> String {
        format!("{}/members/", self.root)
    }

    /// The prefix of assignments.
    pub fn assignments(&self) -> String {
        format!("{}/assign/", self.root)
    }

    /// A shard's hints.
    pub fn hints(&self, shard: &str) -> String {
        format!("{}/hints/{shard}", self.root)
    }

    /// The key the allocator's leader holds.
    pub fn leader(&self) -> String {
        format!("{}/leader", self.root)
    }

    /// A shard spec's key.
    pub fn shard(&self, shard: &str) -> String {
        format!("{}{shard}", self.shards())
    }

    /// A member's key.
    pub fn member(&self, zone: &str, member: &str) -> String {
        format!("{}{zone}#{member}", self.members())
    }

    /// An assignment's key.
    pub fn assignment(&self, a: &AssignmentKey) -> String {
        format!("{}{}#{}#{}", self.assignments(), a.shard, a.zone, a.member)
    }

    /// Parses an assignment's key.
    pub fn parse_assignment(&self, key: &str) -> Result<AssignmentKey, KeyError> {
        let err = |why| KeyError { what: "assignment", key: key.to_owned(), why };
        let rest = key.strip_prefix(&self.assignments()).ok_or_else(|| err("not under the assignments prefix"))?;
        let parts: Vec<&str> = rest.split('#').collect();
        let [shard, zone, member] = parts.as_slice() else { return Err(err("not shard#zone#member")) };
        if ![shard, zone, member].iter().all(|p| valid_id(p)) {
            return Err(err("an empty or invalid id"));
        }
        Ok(AssignmentKey { shard: (*shard).to_owned(), zone: (*zone).to_owned(), member: (*member).to_owned() })
    }

    /// Parses a member's key into (zone, member).
    pub fn parse_member(&self, key: &str) -> Result<(String, String), KeyError> {
        let err = |why| KeyError { what: "member", key: key.to_owned(), why };
        let rest = key.strip_prefix(&self.members()).ok_or_else(|| err("not under the members prefix"))?;
        let (zone, member) = rest.split_once('#').ok_or_else(|| err("not zone#member"))?;
        if !valid_id(zone) || !valid_id(member) {
            return Err(err("an empty or invalid id"));
        }
        Ok((zone.to_owned(), member.to_owned()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn assignment_keys_round_trip_and_bad_ones_are_named() {
        let keys = Keys::new("/kshard/sum/");
        let a = AssignmentKey { shard: "offsets-07".into(), zone: "eu-1a".into(), member: "m-1".into() };
        let key = keys.assignment(&a);
        assert_eq!(key, "/kshard/sum/assign/offsets-07#eu-1a#m-1");
        assert_eq!(keys.parse_assignment(&key), Ok(a));
        for bad in
            ["/kshard/sum/assign/s#z", "/kshard/sum/assign/s#z#m#0", "/other/assign/s#z#m", "/kshard/sum/assign/#z#m"]
        {
            let e = keys.parse_assignment(bad).expect_err(bad);
            assert!(e.to_string().contains("assignment key"), "{e}");
        }
        assert_eq!(keys.parse_member(&keys.member("z", "m")), Ok(("z".into(), "m".into())));
        assert!(keys.parse_member("/kshard/sum/members/zm").is_err());
    }

    #[test]
    fn an_assignment_value_is_slot_and_status() {
        let v = AssignmentValue { slot: 0, status: ReplicaStatus::new(crate::status::ReplicaCode::Primary) };
        let json = serde_json::to_string(&v).expect("serializes");
        assert_eq!(json, r#"{"slot":0,"status":{"code":"PRIMARY"}}"#);
        assert_eq!(serde_json::from_str::<AssignmentValue>(&json).expect("parses"), v);
    }

    #[test]
    fn specs_read_from_json_with_defaults() {
        let spec: ShardSpec = serde_json::from_str(
            r#"{"id":"s1","sources":[{"topic":"t","partition":0}],"recovery_log":{"topic":"log","partition":1},"hot_standbys":1}"#,
        )
        .expect("parses");
        assert_eq!(spec.replicas(), 2);
        assert_eq!((spec.min_txn_duration_ms, spec.max_txn_duration_ms), (0, 1000));
        assert_eq!(ShardSpec { disable: true, ..spec }.replicas(), 0);
        assert!(valid_id("a-b.c") && !valid_id("a#b") && !valid_id("a/b") && !valid_id(""));
    }
}
