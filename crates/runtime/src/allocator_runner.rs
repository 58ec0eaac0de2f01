//! The allocator at work: the elected member reads shards, members and
//! assignments at one revision, runs [`allocate`](crate::allocator::allocate),
//! and writes the changes in transactions checked against what it read (a
//! concurrent change makes the transaction fail, and the next round starts
//! from a fresh read). New assignments go under their member's lease, so that
//! they vanish with the member. Between rounds it waits for any change under
//! the root.
//!
//! FAILED replicas are retried with a crash-loop backoff: a replica seen FAILED
//! is removed after 1 s, 2 s, 4 s … up to 60 s, doubling with each failure of
//! that shard within ten minutes (counted by this leader).

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use tokio::time::Instant;

use crate::allocator::{Change, Current, Member, Shard, allocate};
use crate::keyspace::{Compare, KeyValue, Keyspace, KeyspaceError, Op, Txn, WatchStream};
use crate::member::Leadership;
use crate::model::{AssignmentValue, Keys, MemberSpec, ShardSpec};
use crate::status::{ReplicaCode, ReplicaStatus};

/// What one round read and did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Round {
    /// The revision it read at.
    pub revision: i64,
    /// The changes it wrote (empty: nothing to do, or a conflict).
    pub changes: Vec<Change>,
    /// False when a concurrent change made the write fail.
    pub applied: bool,
    /// False when the term it ran under had ended (nothing was written).
    pub led: bool,
}

/// The crash-loop backoff of a shard's `n`th failure in a row.
pub fn failure_backoff(n: u32) -> Duration {
    Duration::from_secs(1u64 << n.saturating_sub(1).min(6)).min(Duration::from_secs(60))
}

/// The allocator's memory between rounds.
#[derive(Debug, Default)]
pub struct AllocatorRunner {
    /// When each FAILED assignment (by key and create revision) was first seen.
    failed_since: HashMap<(String, i64), Instant>,
    /// Recent failures per shard.
    failures: HashMap<String, Vec<Instant>>,
}

struct Read {
    revision: i64,
    shards: Vec<Shard>,
    members: Vec<Member>,
    /// Member id → its key's (lease, create revision).
    member_leases: BTreeMap<String, (Option<i64>, i64)>,
    /// (shard, member) → the assignment's key and value.
    assignments: BTreeMap<(String, String), (KeyValue, AssignmentValue)>,
    /// The leader key's create revision.
    leader: Option<i64>,
}

impl AllocatorRunner {
    /// Reads, allocates and writes once, as leader for `term`.
    pub async fn round<K: Keyspace>(&mut self, ks: &K, keys: &Keys, term: &Leadership) -> Result<Round, KeyspaceError> {
        let read = read(ks, keys).await?;
        if read.leader != Some(term.created) {
            return Ok(Round { revision: read.revision, changes: vec![], applied: false, led: false });
        }
        let now = Instant::now();
        // Forget failures of assignments that are gone (removed, or recovered).
        self.failed_since.retain(|(key, created), _| {
            read.assignments
                .values()
                .any(|(kv, v)| kv.key == *key && kv.create_revision == *created && v.status.code == ReplicaCode::Failed)
        });
        let current: Vec<Current> = read
            .assignments
            .iter()
            .map(|((shard, member), (kv, value))| Current {
                shard: shard.clone(),
                member: member.clone(),
                slot: value.slot,
                code: value.status.code,
                retry_due: value.status.code == ReplicaCode::Failed && self.retry_due(shard, kv, now),
            })
            .collect();
        let mut changes = without_readds(allocate(&read.shards, &read.members, &current));
        if changes.is_empty() {
            return Ok(Round { revision: read.revision, changes, applied: true, led: true });
        }
        changes.truncate(fitting_one_txn(&changes));
        let applied = match ks.txn(txn_of(&read, keys, term, &changes)).await {
            Ok(r) => r.succeeded,
            // A member's lease ended between the read and the write.
            Err(KeyspaceError::LeaseNotFound(_)) => false,
            Err(e) => return Err(e),
        };
        if applied {
            self.count_failures(&read, &changes, now);
        }
        self.failures.retain(|_, recent| {
            recent.retain(|t| now.saturating_duration_since(*t) < Duration::from_secs(600));
            !recent.is_empty()
        });
        Ok(Round { revision: read.revision, changes, applied, led: true })
    }

    /// A FAILED replica's removal is a failure of its shard (its retries
    /// back off); moves and surplus are not.
    fn count_failures(&mut self, read: &Read, changes: &[Change], now: Instant) {
        for change in changes {
            if let Change::Remove { shard, member } = change
                && read
                    .assignments
                    .get(&(shard.clone(), member.clone()))
                    .is_some_and(|(_, v)| v.status.code == ReplicaCode::Failed)
            {
                self.failures.entry(shard.clone()).or_default().push(now);
            }
        }
    }

    /// True once a FAILED assignment has waited out its shard's backoff.
    fn retry_due(&mut self, shard: &str, kv: &KeyValue, now: Instant) -> bool {
        let since = *self.failed_since.entry((kv.key.clone(), kv.create_revision)).or_insert(now);
        let recent = self.failures.entry(shard.to_owned()).or_default();
        recent.retain(|t| now.saturating_duration_since(*t) < Duration::from_secs(600));
        now.saturating_duration_since(since) >= failure_backoff(recent.len() as u32 + 1)
    }

    /// Runs rounds for `term` while `leading` holds and the term lasts:
    /// after each, waits for a change under the root (or a second, for
    /// FAILED backoffs to come due). One watch serves every round (made
    /// again only when it ends).
    pub async fn run<K: Keyspace>(
        &mut self,
        ks: &K,
        keys: &Keys,
        term: &Leadership,
        leading: impl Fn() -> bool,
    ) -> Result<(), KeyspaceError> {
        let mut watch: Option<WatchStream> = None;
        while leading() {
            let round = self.round(ks, keys, term).await?;
            if !round.led {
                tracing::warn!(leader = term.created, "no longer the allocator's leader");
                return Ok(());
            }
            if !round.applied {
                tracing::debug!(changes = ?round.changes, "allocator round not applied");
                continue;
            }
            let changes = match &mut watch {
                Some(w) => w,
                None => watch.insert(ks.watch(&format!("{}/", keys.root()), round.revision + 1).await?),
            };
            if !changed_since(changes, round.revision, Duration::from_secs(1)).await {
                watch = None;
            }
        }
        Ok(())
    }
}

/// Waits up to `wait` for a change after `revision` (changes the round read
/// already are passed over); false when the watch ended.
async fn changed_since(changes: &mut WatchStream, revision: i64, wait: Duration) -> bool {
    let deadline = Instant::now() + wait;
    loop {
        match tokio::time::timeout_at(deadline, changes.recv()).await {
            Ok(Some(Ok(event))) if event.revision() <= revision => {}
            Ok(Some(Ok(_))) | Err(_) => return true,
            Ok(Some(Err(_)) | None) => return false,
        }
    }
}

/// `changes` without the adds of replicas removed in the same round: a
/// replica removed and added again (a FAILED one's retry on the same member)
/// is two writes of one key, which etcd refuses in one transaction; the new
/// assignment comes next round.
fn without_readds(mut changes: Vec<Change>) -> Vec<Change> {
    let removed: Vec<(String, String)> = changes
        .iter()
        .filter_map(|c| match c {
            Change::Remove { shard, member } => Some((shard.clone(), member.clone())),
            _ => None,
        })
        .collect();
    changes.retain(
        |c| !matches!(c, Change::Add { shard, member, .. } if removed.contains(&(shard.clone(), member.clone()))),
    );
    changes
}

/// How many of `changes` one transaction holds: at most etcd's limit of
/// compares (an Add has two); the rest comes in the next rounds. A shard's
/// removal and reslots stay together (a primary's swap, or a FAILED
/// primary's removal and the promotion that replaces it).
fn fitting_one_txn(changes: &[Change]) -> usize {
    let mut compares = 0;
    let mut last_shard: Option<&str> = None;
    changes
        .iter()
        .take_while(|c| {
            let (shard, cost) = match c {
                Change::Add { shard, .. } => (shard, 2),
                Change::Remove { shard, .. } | Change::Reslot { shard, .. } => (shard, 1),
            };
            let together = matches!(c, Change::Reslot { .. }) && last_shard == Some(shard.as_str());
            if !together && compares + cost > crate::keyspace::MAX_TXN_OPS - 4 {
                return false;
            }
            compares += cost;
            last_shard = Some(shard);
            true
        })
        .count()
}

/// The transaction that makes `changes` of what `read` found, if `term`
/// still leads and nothing it read has changed since.
fn txn_of(read: &Read, keys: &Keys, term: &Leadership, changes: &[Change]) -> Txn {
    let mut txn = Txn { compares: vec![term.holds()], ..Txn::default() };
    for change in changes {
        match change {
            Change::Remove { shard, member } => {
                if let Some((kv, _)) = read.assignments.get(&(shard.clone(), member.clone())) {
                    txn.compares.push(Compare::ModRevision(kv.key.clone(), kv.mod_revision));
                    txn.success.push(Op::Delete(kv.key.clone()));
                }
            }
            Change::Add { shard, member, slot } => {
                let Some(m) = read.members.iter().find(|m| &m.id == member) else { continue };
                let Some((lease, member_created)) = read.member_leases.get(member) else { continue };
                let key = keys.assignment(&crate::model::AssignmentKey {
                    shard: shard.clone(),
                    zone: m.zone.clone(),
                    member: member.clone(),
                });
                let value = AssignmentValue { slot: *slot, status: ReplicaStatus::new(ReplicaCode::Idle) };
                txn.compares.push(Compare::ModRevision(key.clone(), 0));
                txn.compares.push(Compare::CreateRevision(keys.member(&m.zone, member), *member_created));
                txn.success.push(Op::Put { key, value: serde_json::to_vec(&value).unwrap_or_default(), lease: *lease });
            }
            Change::Reslot { shard, member, slot } => {
                if let Some((kv, value)) = read.assignments.get(&(shard.clone(), member.clone())) {
                    let moved = AssignmentValue { slot: *slot, status: value.status.clone() };
                    txn.compares.push(Compare::ModRevision(kv.key.clone(), kv.mod_revision));
                    txn.success.push(Op::Put {
                        key: kv.key.clone(),
                        value: serde_json::to_vec(&moved).unwrap_or_default(),
                        lease: kv.lease,
                    });
                }
            }
        }
    }
    txn
}

async fn read<K: Keyspace>(ks: &K, keys: &Keys) -> Result<Read, KeyspaceError> {
    let snapshot = ks.get_prefix(&format!("{}/", keys.root())).await?;
    let mut read = Read {
        revision: snapshot.revision,
        shards: Vec::new(),
        members: Vec::new(),
        member_leases: BTreeMap::new(),
        assignments: BTreeMap::new(),
        leader: None,
    };
    for kv in snapshot.kvs {
        if kv.key == keys.leader() {
            read.leader = Some(kv.create_revision);
        } else if kv.key.starts_with(&keys.shards()) {
            match serde_json::from_slice::<ShardSpec>(&kv.value) {
                Ok(spec) => read.shards.push(Shard { id: spec.id.clone(), replicas: spec.replicas() }),
                Err(e) => tracing::warn!(key = %kv.key, error = %e, "skipping a shard spec that does not parse"),
            }
        } else if kv.key.starts_with(&keys.members()) {
            match serde_json::from_slice::<MemberSpec>(&kv.value) {
                Ok(spec) => {
                    read.member_leases.insert(spec.id.clone(), (kv.lease, kv.create_revision));
                    read.members.push(Member { id: spec.id, zone: spec.zone, limit: spec.shard_limit });
                }
                Err(e) => tracing::warn!(key = %kv.key, error = %e, "skipping a member that does not parse"),
            }
        } else if kv.key.starts_with(&keys.assignments()) {
            let parsed = keys.parse_assignment(&kv.key).map_err(|e| e.to_string()).and_then(|a| {
                serde_json::from_slice::<AssignmentValue>(&kv.value).map(|v| (a, v)).map_err(|e| e.to_string())
            });
            match parsed {
                Ok((a, value)) => {
                    read.assignments.insert((a.shard, a.member), (kv, value));
                }
                Err(e) => tracing::warn!(key = %kv.key, error = %e, "skipping an assignment that does not parse"),
            }
        }
    }
    Ok(read)
}
