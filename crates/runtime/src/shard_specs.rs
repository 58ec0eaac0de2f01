//! Shards as declarative specs, as Gazette's `gazctl shards apply` keeps
//! them: the shards an operator wants ([`Desired`]), the shards the keyspace
//! holds with the revision each was read at, the changes between the two
//! ([`plan`], pure), and those changes written in revision-checked
//! transactions ([`apply`]), so that two operators applying at once cannot
//! overwrite each other: the second finds a shard changed since it read it
//! and writes nothing of that batch.
//!
//! A shard's recovery log is its state: a change of it is refused (delete
//! the shard and create one with the new log, which starts empty). Members
//! follow a changed spec for new replicas; a running primary keeps the
//! spec it started with until it starts again (see `unassign`).

use std::collections::BTreeMap;

use crate::keyspace::{Compare, Keyspace, KeyspaceError, MAX_TXN_OPS, Op, Txn};
use crate::model::{Keys, ShardSpec};

/// A shard as an operator wants it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Desired {
    /// The shard, created or updated to this spec.
    Put {
        /// The spec.
        spec: ShardSpec,
        /// The revision the operator last read it at (from `list --format
        /// yaml` or `edit`): applied only if the shard is still at it (0:
        /// only if it does not exist). `None`: checked against the
        /// revision read when planning.
        revision: Option<i64>,
    },
    /// The shard, deleted (nothing when it does not exist).
    Delete {
        /// The shard.
        id: String,
        /// As for [`Desired::Put`].
        revision: Option<i64>,
    },
}

impl Desired {
    fn id(&self) -> &str {
        match self {
            Desired::Put { spec, .. } => &spec.id,
            Desired::Delete { id, .. } => id,
        }
    }
}

/// A shard as the keyspace holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Current {
    /// Its spec.
    pub spec: ShardSpec,
    /// The revision that last changed it.
    pub revision: i64,
}

/// One change of a plan.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    /// A new shard.
    Create(ShardSpec),
    /// A shard's spec changed, checked against `revision`.
    Update {
        /// As it is.
        before: Box<ShardSpec>,
        /// As it becomes.
        after: Box<ShardSpec>,
        /// The revision it must still be at.
        revision: i64,
    },
    /// A shard deleted, checked against `revision`.
    Delete {
        /// As it is.
        before: Box<ShardSpec>,
        /// The revision it must still be at.
        revision: i64,
    },
}

impl std::fmt::Display for Change {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let json = |s: &ShardSpec| serde_json::to_value(s).unwrap_or_default();
        match self {
            Change::Create(spec) => write!(f, "+ {}: created {}", spec.id, json(spec)),
            Change::Delete { before, .. } => write!(f, "- {}: deleted", before.id),
            Change::Update { before, after, .. } => {
                write!(f, "~ {}:", after.id)?;
                let (b, a) = (json(before), json(after));
                let fields = a.as_object().into_iter().flatten().chain(b.as_object().into_iter().flatten());
                let mut said = std::collections::BTreeSet::new();
                for (name, _) in fields {
                    let (old, new) = (&b[name.as_str()], &a[name.as_str()]);
                    if old != new && said.insert(name.clone()) {
                        write!(f, " {name} {old} -> {new};")?;
                    }
                }
                Ok(())
            }
        }
    }
}

/// Why a plan cannot be made.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlanError {
    /// The same shard twice among the wanted ones.
    #[error("shard {0} is named twice")]
    Twice(String),
    /// A spec that is not valid.
    #[error("shard {id}: {why}")]
    Invalid {
        /// The shard.
        id: String,
        /// What is wrong.
        why: String,
    },
    /// A shard changed (or was created, or deleted) since the revision the
    /// operator gave.
    #[error("shard {id} is at revision {current}, not {given}: read it again")]
    Stale {
        /// The shard.
        id: String,
        /// The revision given.
        given: i64,
        /// The revision it is at (0: it does not exist).
        current: i64,
    },
}

/// The changes that take `current` to `desired` (shards not named are left
/// as they are), in the order of `desired`.
pub fn plan(current: &[Current], desired: &[Desired]) -> Result<Vec<Change>, PlanError> {
    let by_id: BTreeMap<&str, &Current> = current.iter().map(|c| (c.spec.id.as_str(), c)).collect();
    let mut seen = std::collections::BTreeSet::new();
    let mut changes = Vec::new();
    for want in desired {
        let id = want.id();
        if !seen.insert(id) {
            return Err(PlanError::Twice(id.to_owned()));
        }
        let now = by_id.get(id).copied();
        let at = now.map_or(0, |c| c.revision);
        let given = match want {
            Desired::Put { revision, .. } | Desired::Delete { revision, .. } => *revision,
        };
        if let Some(given) = given.filter(|&g| g != at) {
            return Err(PlanError::Stale { id: id.to_owned(), given, current: at });
        }
        match (want, now) {
            (Desired::Put { spec, .. }, None) => {
                check(spec)?;
                changes.push(Change::Create(spec.clone()));
            }
            (Desired::Put { spec, .. }, Some(now)) if *spec != now.spec => {
                check(spec)?;
                if spec.recovery_log != now.spec.recovery_log {
                    return Err(PlanError::Invalid {
                        id: id.to_owned(),
                        why: format!(
                            "its recovery log is {}, not {}: a shard's log is its state (delete the shard, then create it with the new log, empty)",
                            now.spec.log_name(),
                            spec.log_name(),
                        ),
                    });
                }
                changes.push(Change::Update {
                    before: Box::new(now.spec.clone()),
                    after: Box::new(spec.clone()),
                    revision: now.revision,
                });
            }
            (Desired::Put { .. }, Some(_)) | (Desired::Delete { .. }, None) => {}
            (Desired::Delete { .. }, Some(now)) => {
                changes.push(Change::Delete { before: Box::new(now.spec.clone()), revision: now.revision });
            }
        }
    }
    Ok(changes)
}

/// What makes `spec` unusable, as a member would find it.
fn check(spec: &ShardSpec) -> Result<(), PlanError> {
    let invalid = |why: &str| Err(PlanError::Invalid { id: spec.id.clone(), why: why.to_owned() });
    if !crate::model::valid_id(&spec.id) {
        return invalid("an id must not be empty nor hold '#' or '/'");
    }
    if spec.sources.is_empty() {
        return invalid("no sources");
    }
    match &spec.recovery_log {
        Some(log) if log.topic.is_empty() || log.partition < 0 => {
            return invalid("a recovery log needs a topic and a partition");
        }
        None if spec.hot_standbys > 0 => {
            return invalid("a shard without a recovery log can have no hot standbys (they follow the log)");
        }
        _ => {}
    }
    if spec.max_txn_duration_ms == 0 || spec.min_txn_duration_ms > spec.max_txn_duration_ms {
        return invalid("max_txn_duration_ms must be at least 1 and min_txn_duration_ms");
    }
    Ok(())
}

/// Every shard spec under `keys`, with its revision.
pub async fn read<K: Keyspace>(ks: &K, keys: &Keys) -> Result<Vec<Current>, KeyspaceError> {
    Ok(read_checked(ks, keys).await?.0)
}

/// A key under the shards' prefix that holds no shard spec.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unreadable {
    /// The key.
    pub key: String,
    /// Why it is not a spec.
    pub reason: String,
}

/// [`read`], with the keys under the shards' prefix that hold no spec (a
/// value that does not parse, or a spec whose id is not its key's), which
/// the runtime ignores: an operator's tool names them.
pub async fn read_checked<K: Keyspace>(ks: &K, keys: &Keys) -> Result<(Vec<Current>, Vec<Unreadable>), KeyspaceError> {
    let snapshot = ks.get_prefix(&keys.shards()).await?;
    let (mut specs, mut unreadable) = (Vec::new(), Vec::new());
    for kv in snapshot.kvs {
        match serde_json::from_slice::<ShardSpec>(&kv.value) {
            Ok(spec) if kv.key == keys.shard(&spec.id) => specs.push(Current { spec, revision: kv.mod_revision }),
            Ok(spec) => {
                unreadable.push(Unreadable { reason: format!("it holds the spec of shard {}", spec.id), key: kv.key })
            }
            Err(e) => unreadable.push(Unreadable { reason: e.to_string(), key: kv.key }),
        }
    }
    Ok((specs, unreadable))
}

/// What [`apply`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Applied {
    /// Changes written.
    pub written: usize,
    /// The keyspace's revision after the last batch (0: nothing written).
    pub revision: i64,
}

/// Why [`apply`] stopped.
#[derive(Debug, thiserror::Error)]
pub enum ApplyError {
    /// A shard of the batch changed since it was read: that batch wrote
    /// nothing (the batches before it stay written).
    #[error(
        "a shard changed since it was read; {written} of {total} changes were written before it: read again, then apply"
    )]
    Conflict {
        /// Changes written by the batches before.
        written: usize,
        /// Changes planned.
        total: usize,
    },
    /// The keyspace failed.
    #[error(transparent)]
    Keyspace(#[from] KeyspaceError),
}

/// Writes `changes`, each checked against its revision, as few
/// transactions as etcd takes (at most [`MAX_TXN_OPS`] operations each),
/// each all or nothing: a conflict in one leaves the ones before written.
pub async fn apply<K: Keyspace>(ks: &K, keys: &Keys, changes: &[Change]) -> Result<Applied, ApplyError> {
    let mut applied = Applied { written: 0, revision: 0 };
    // A delete is two operations (the spec and its hints).
    for batch in changes.chunks(MAX_TXN_OPS / 2) {
        let mut txn = Txn { compares: Vec::new(), success: Vec::new(), failure: Vec::new() };
        for change in batch {
            let put = |spec: &ShardSpec| Op::Put {
                key: keys.shard(&spec.id),
                value: serde_json::to_vec(spec).unwrap_or_default(),
                lease: None,
            };
            match change {
                Change::Create(spec) => {
                    txn.compares.push(Compare::CreateRevision(keys.shard(&spec.id), 0));
                    txn.success.push(put(spec));
                }
                Change::Update { after, revision, .. } => {
                    txn.compares.push(Compare::ModRevision(keys.shard(&after.id), *revision));
                    txn.success.push(put(after));
                }
                Change::Delete { before, revision } => {
                    txn.compares.push(Compare::ModRevision(keys.shard(&before.id), *revision));
                    txn.success.push(Op::Delete(keys.shard(&before.id)));
                    // Its snapshots' hints go with it: a shard created
                    // again under the id starts a new log, which they are not of.
                    txn.success.push(Op::Delete(keys.hints(&before.id)));
                }
            }
        }
        let response = ks.txn(txn).await?;
        if !response.succeeded {
            return Err(ApplyError::Conflict { written: applied.written, total: changes.len() });
        }
        applied.written += batch.len();
        applied.revision = response.revision;
    }
    Ok(applied)
}

#[cfg(test)]
mod tests;
