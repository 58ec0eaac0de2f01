//! [`ClusterView`]: every shard's replicas across the cluster, as the
//! keyspace says — which member holds each, in which slot, with which status —
//! kept by a member from the keyspace it follows anyway. Applications use it to
//! tell whether every shard has a primary somewhere (an application that
//! serves every shard's state from its standbys can then say whether that
//! state is current), and operators see it on `/api/shards`.

use std::collections::BTreeMap;

use crate::keyspace::Snapshot;
use crate::keyspace::{KeyValue, WatchEvent};
use crate::model::{AssignmentValue, Keys, MemberSpec, ShardSpec};
use crate::shard_row::ShardRow;
use crate::status::{ReplicaCode, ReplicaStatus};

/// One replica as the keyspace has it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplicaView {
    /// The member's zone.
    pub zone: String,
    /// 0 for the primary.
    pub slot: u32,
    /// Its status as its member last wrote it.
    pub status: ReplicaStatus,
}

/// The replicas of every shard and the live members.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ClusterView {
    /// Shard → member → replica.
    replicas: BTreeMap<String, BTreeMap<String, ReplicaView>>,
    /// Live members, by id.
    members: BTreeMap<String, MemberSpec>,
    /// Every shard the keyspace specifies, with the partitions it reads.
    shards: BTreeMap<String, Vec<(String, i32)>>,
}

impl ClusterView {
    /// The view of the keys under `keys`' root in `snapshot`.
    pub fn from_snapshot(keys: &Keys, snapshot: &Snapshot) -> Self {
        let mut view = ClusterView::default();
        for kv in &snapshot.kvs {
            view.apply(keys, &WatchEvent::Put(kv.clone()));
        }
        view
    }

    /// Forgets everything (before a resync from a snapshot).
    pub fn clear(&mut self) {
        self.replicas.clear();
        self.members.clear();
        self.shards.clear();
    }

    /// Applies one change of a key under `keys`' root; other keys are ignored.
    pub fn apply(&mut self, keys: &Keys, event: &WatchEvent) {
        let key = event.key();
        if let Some(rest) = key.strip_prefix(&keys.members()) {
            // Member keys are `zone#id`.
            let id = rest.rsplit('#').next().unwrap_or(rest);
            match event {
                WatchEvent::Put(KeyValue { value, .. }) => match serde_json::from_slice::<MemberSpec>(value) {
                    Ok(spec) => {
                        self.members.insert(id.to_owned(), spec);
                    }
                    Err(_) => {
                        self.members.remove(id);
                    }
                },
                WatchEvent::Delete { .. } => {
                    self.members.remove(id);
                }
            }
            return;
        }
        if let Some(id) = key.strip_prefix(&keys.shards()) {
            match event {
                WatchEvent::Put(kv) => match serde_json::from_slice::<ShardSpec>(&kv.value) {
                    Ok(spec) if spec.id == id => {
                        let sources = spec.sources.into_iter().map(|s| (s.topic, s.partition)).collect();
                        self.shards.insert(spec.id, sources);
                    }
                    _ => {
                        self.shards.remove(id);
                    }
                },
                WatchEvent::Delete { .. } => {
                    self.shards.remove(id);
                }
            }
            return;
        }
        let Ok(a) = keys.parse_assignment(key) else { return };
        let value = match event {
            WatchEvent::Put(kv) => serde_json::from_slice::<AssignmentValue>(&kv.value).ok(),
            WatchEvent::Delete { .. } => None,
        };
        match value {
            Some(v) => {
                let view = ReplicaView { zone: a.zone, slot: v.slot, status: v.status };
                self.replicas.entry(a.shard).or_default().insert(a.member, view);
            }
            None => {
                if let Some(replicas) = self.replicas.get_mut(&a.shard) {
                    replicas.remove(&a.member);
                    if replicas.is_empty() {
                        self.replicas.remove(&a.shard);
                    }
                }
            }
        }
    }

    /// The member serving `shard` as PRIMARY, if one does.
    pub fn primary(&self, shard: &str) -> Option<&str> {
        self.replicas
            .get(shard)?
            .iter()
            .find(|(_, r)| r.slot == 0 && r.status.code == ReplicaCode::Primary)
            .map(|(m, _)| m.as_str())
    }

    /// The replicas of `shard`, by member.
    pub fn replicas(&self, shard: &str) -> Option<&BTreeMap<String, ReplicaView>> {
        self.replicas.get(shard)
    }

    /// Every shard the keyspace specifies, in order.
    pub fn shards(&self) -> impl Iterator<Item = &str> {
        self.shards.keys().map(String::as_str)
    }

    /// True when the keyspace specifies `shard`.
    pub fn has_shard(&self, shard: &str) -> bool {
        self.shards.contains_key(shard)
    }

    /// The partitions `shard` reads (topic, partition).
    pub fn sources(&self, shard: &str) -> Option<&[(String, i32)]> {
        self.shards.get(shard).map(Vec::as_slice)
    }

    /// The shard that reads `topic`'s `partition` (the first by id when
    /// several do).
    pub fn shard_reading(&self, topic: &str, partition: i32) -> Option<&str> {
        self.shards
            .iter()
            .find(|(_, sources)| sources.iter().any(|(t, p)| t == topic && *p == partition))
            .map(|(id, _)| id.as_str())
    }

    /// The live members.
    pub fn members(&self) -> &BTreeMap<String, MemberSpec> {
        &self.members
    }

    /// `kshard shards list` rows of every replica of `shards` (a shard without
    /// any gets a NONE row); `behind(member, shard)` says how far a replica is
    /// behind its log, when known.
    pub fn rows(&self, shards: &[String], mut behind: impl FnMut(&str, &str) -> Option<i64>) -> Vec<ShardRow> {
        let mut rows = Vec::new();
        for shard in shards {
            let replicas = self.replicas.get(shard);
            let mut ordered: Vec<(&String, &ReplicaView)> = replicas.into_iter().flatten().collect();
            ordered.sort_by_key(|(m, r)| (r.slot, m.as_str()));
            if ordered.is_empty() {
                rows.push(ShardRow::unassigned(shard));
            }
            for (member, r) in ordered {
                let behind = behind(member, shard);
                rows.push(ShardRow {
                    shard: shard.clone(),
                    member: member.clone(),
                    zone: r.zone.clone(),
                    slot: Some(r.slot),
                    status: r.status.code.name().to_owned(),
                    errors: r.status.errors.clone(),
                    behind,
                });
            }
        }
        rows
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn put(key: String, value: Vec<u8>) -> WatchEvent {
        WatchEvent::Put(KeyValue { key, value, create_revision: 1, mod_revision: 1, version: 1, lease: None })
    }

    fn assignment(slot: u32, code: ReplicaCode) -> Vec<u8> {
        serde_json::to_vec(&AssignmentValue { slot, status: ReplicaStatus::new(code) }).expect("json")
    }

    #[test]
    fn follows_assignments_and_their_statuses() {
        let keys = Keys::new("/app");
        let mut view = ClusterView::default();
        let a = format!("{}s1#z#a", keys.assignments());
        let b = format!("{}s1#z#b", keys.assignments());
        view.apply(&keys, &put(a.clone(), assignment(0, ReplicaCode::Standby)));
        view.apply(&keys, &put(b.clone(), assignment(1, ReplicaCode::Standby)));
        assert_eq!(view.primary("s1"), None, "slot 0 handing off is not primary yet");
        view.apply(&keys, &put(a.clone(), assignment(0, ReplicaCode::Primary)));
        assert_eq!(view.primary("s1"), Some("a"));
        view.apply(&keys, &WatchEvent::Delete { key: a, mod_revision: 2 });
        assert_eq!(view.primary("s1"), None);
        let rows = view.rows(&["s1".into(), "s2".into()], |_, _| None);
        let summary: Vec<(String, String, String)> = rows.into_iter().map(|r| (r.shard, r.member, r.status)).collect();
        assert_eq!(summary, [("s1".into(), "b".into(), "STANDBY".into()), ("s2".into(), String::new(), "NONE".into())]);
        view.apply(&keys, &put("/other/key".into(), b"x".to_vec()));
        view.clear();
        assert!(view.replicas("s1").is_none());
    }
}
