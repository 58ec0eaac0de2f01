//! Moving primaries away, as `gazctl shards unassign` does: a shard's
//! primary assignment removed, so that the allocator promotes a standby (the
//! old primary's member tears its replica down, and the new primary's
//! writer fences it at the broker), and — for maintenance — a member's
//! primaries all moved off it. Only a primary with a STANDBY ready goes, so
//! the shard is served again as soon as that standby takes over, without
//! rebuilding its state; `force` moves one without. FAILED replicas can be
//! removed too, to be started again at once rather than after their
//! backoff. Each removal is checked against the revision it was read at.

use crate::keyspace::{Compare, Keyspace, KeyspaceError, Op, Txn};
use crate::model::{Assignment, Keys};
use crate::status::ReplicaCode;

/// Which assignments to remove.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Unassign {
    /// Only these shards (all: every shard).
    pub shards: Option<Vec<String>>,
    /// Only primaries on this member (for maintenance).
    pub member: Option<String>,
    /// FAILED replicas, instead of primaries.
    pub failed: bool,
    /// A primary even with no STANDBY to take over (the shard is down
    /// until a new replica has rebuilt its state).
    pub force: bool,
}

/// The assignments to remove, and the primaries left where they are, each
/// with the reason.
pub fn pick(assignments: &[Assignment], what: &Unassign) -> (Vec<Assignment>, Vec<String>) {
    let (mut remove, mut kept) = (Vec::new(), Vec::new());
    let wanted = |shard: &str| what.shards.as_ref().is_none_or(|s| s.iter().any(|id| id == shard));
    let on = |a: &Assignment| what.member.as_ref().is_none_or(|m| *m == a.key.member);
    for a in assignments.iter().filter(|a| wanted(&a.key.shard) && on(a)) {
        if what.failed {
            if a.value.status.code == ReplicaCode::Failed {
                remove.push(a.clone());
            }
            continue;
        }
        if a.value.slot != 0 {
            continue;
        }
        let standby = assignments.iter().any(|o| {
            o.key.shard == a.key.shard && o.key.member != a.key.member && o.value.status.code == ReplicaCode::Standby
        });
        if standby || what.force {
            remove.push(a.clone());
        } else {
            kept.push(format!(
                "{}: its primary on {} stays, no STANDBY is ready to take over (--force moves it anyway)",
                a.key.shard, a.key.member
            ));
        }
    }
    (remove, kept)
}

/// Removes `assignments`, each only if still at the revision read: how many were.
pub async fn remove<K: Keyspace>(ks: &K, keys: &Keys, assignments: &[Assignment]) -> Result<usize, KeyspaceError> {
    let mut removed = 0;
    for a in assignments {
        let key = keys.assignment(&a.key);
        let txn = Txn {
            compares: vec![Compare::ModRevision(key.clone(), a.mod_revision)],
            success: vec![Op::Delete(key)],
            failure: vec![],
        };
        if ks.txn(txn).await?.succeeded {
            removed += 1;
        }
    }
    Ok(removed)
}

/// Every assignment under `keys`.
pub async fn read<K: Keyspace>(ks: &K, keys: &Keys) -> Result<Vec<Assignment>, KeyspaceError> {
    let snapshot = ks.get_prefix(&keys.assignments()).await?;
    Ok(snapshot
        .kvs
        .into_iter()
        .filter_map(|kv| {
            Some(Assignment {
                key: keys.parse_assignment(&kv.key).ok()?,
                create_revision: kv.create_revision,
                mod_revision: kv.mod_revision,
                value: serde_json::from_slice(&kv.value).ok()?,
            })
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{AssignmentKey, AssignmentValue};
    use crate::status::ReplicaStatus;

    fn a(shard: &str, member: &str, slot: u32, code: ReplicaCode) -> Assignment {
        Assignment {
            key: AssignmentKey { shard: shard.into(), zone: "z".into(), member: member.into() },
            create_revision: 1,
            mod_revision: 2,
            value: AssignmentValue { slot, status: ReplicaStatus::new(code) },
        }
    }

    fn shards(picked: &[Assignment]) -> Vec<(&str, &str)> {
        picked.iter().map(|a| (a.key.shard.as_str(), a.key.member.as_str())).collect()
    }

    #[test]
    fn a_primary_goes_only_with_a_standby_ready_unless_forced() {
        let all = [
            a("s1", "m1", 0, ReplicaCode::Primary),
            a("s1", "m2", 1, ReplicaCode::Standby),
            a("s2", "m1", 0, ReplicaCode::Primary),
            a("s2", "m2", 1, ReplicaCode::Backfill),
            a("s3", "m2", 0, ReplicaCode::Primary),
            a("s3", "m1", 1, ReplicaCode::Failed),
        ];
        let (remove, kept) = pick(&all, &Unassign::default());
        assert_eq!(shards(&remove), [("s1", "m1")]);
        assert_eq!(kept.len(), 2, "{kept:?}");
        assert!(kept[0].starts_with("s2: its primary on m1 stays"), "{kept:?}");
        let (remove, _) = pick(&all, &Unassign { force: true, member: Some("m1".into()), ..Unassign::default() });
        assert_eq!(shards(&remove), [("s1", "m1"), ("s2", "m1")], "m1's primaries, forced");
        let (remove, _) = pick(&all, &Unassign { shards: Some(vec!["s1".into()]), ..Unassign::default() });
        assert_eq!(shards(&remove), [("s1", "m1")]);
        let (remove, _) = pick(&all, &Unassign { failed: true, ..Unassign::default() });
        assert_eq!(shards(&remove), [("s3", "m1")]);
        let (remove, _) = pick(&all, &Unassign { failed: true, member: Some("m2".into()), ..Unassign::default() });
        assert!(remove.is_empty(), "m2 has no FAILED replica");
    }
}
