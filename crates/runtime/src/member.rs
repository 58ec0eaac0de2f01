//! A member's presence in the keyspace: its key under a lease it keeps alive,
//! and the election of the one member that runs the allocator.
//!
//! A member joins by granting a lease and creating its key under it; a task
//! renews the lease every third of its TTL (more often while renewals fail).
//! When the lease is lost (revoked, or no renewal got through for a TTL since
//! the last one that did), the member is
//! gone for everyone else — its key and its assignments (which the allocator
//! puts under the member's lease) are deleted — and [`Membership::lost`] turns
//! true so the process stops its replicas. Leaving revokes the lease.
//!
//! The leader is whoever created `{root}/leader` (under its lease); the others
//! wait for that key to go and try again.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

use crate::keyspace::{Compare, Keyspace, KeyspaceError, LeaseId, Op, Txn, WatchEvent};
use crate::model::{Keys, MemberSpec};

/// Why joining failed.
#[derive(Debug, thiserror::Error)]
pub enum MemberError {
    /// The keyspace refused or could not be reached.
    #[error("joining as {member}: {source}")]
    Keyspace {
        /// The member.
        member: String,
        /// The cause.
        #[source]
        source: KeyspaceError,
    },
    /// Another process holds this member id.
    #[error("member {0} is already registered (another process with the same id?)")]
    Taken(String),
}

/// A member registered in the keyspace.
#[derive(Debug)]
pub struct Membership {
    /// The member.
    pub spec: MemberSpec,
    /// Its lease: assignments to it are put under this lease.
    pub lease: LeaseId,
    /// Its key.
    pub key: String,
    lost: watch::Receiver<bool>,
    renewer: tokio::task::JoinHandle<()>,
}

impl Membership {
    /// Registers `spec` under `keys` with a lease of `ttl`, and keeps it alive.
    pub async fn join<K: Keyspace>(
        ks: Arc<K>,
        keys: &Keys,
        spec: MemberSpec,
        ttl: Duration,
    ) -> Result<Self, MemberError> {
        let err = |source| MemberError::Keyspace { member: spec.id.clone(), source };
        let granted = tokio::time::Instant::now();
        let lease = ks.grant(ttl).await.map_err(err)?;
        let key = keys.member(&spec.zone, &spec.id);
        let value = serde_json::to_vec(&spec).unwrap_or_default();
        let created = ks
            .txn(Txn {
                compares: vec![Compare::ModRevision(key.clone(), 0)],
                success: vec![Op::Put { key: key.clone(), value, lease: Some(lease) }],
                failure: vec![],
            })
            .await
            .map_err(err)?;
        if !created.succeeded {
            let _ = ks.revoke(lease).await;
            return Err(MemberError::Taken(spec.id));
        }
        let (tx, lost) = watch::channel(false);
        let renewer = tokio::spawn(async move {
            renew(&*ks, lease, ttl, granted).await;
            let _ = tx.send(true);
        });
        Ok(Membership { spec, lease, key, lost, renewer })
    }

    /// True once the lease is lost: this member no longer holds its assignments.
    pub fn lost(&self) -> watch::Receiver<bool> {
        self.lost.clone()
    }

    /// Leaves: stops renewing and revokes the lease (deleting the member's key
    /// and its assignments).
    pub async fn leave<K: Keyspace>(&self, ks: &K) -> Result<(), KeyspaceError> {
        self.renewer.abort();
        match ks.revoke(self.lease).await {
            Ok(()) | Err(KeyspaceError::LeaseNotFound(_)) => Ok(()),
            Err(e) => Err(e),
        }
    }
}

/// Keeps `lease` (asked for at `granted`) alive every third of `ttl`;
/// returns once it is lost: revoked
/// or expired, or — the keyspace not answering — `ttl` after the last renewal
/// that succeeded was sent (the keyspace counts the TTL from when it got
/// that renewal, so the lease cannot outlive this): from then on other
/// members may hold this member's shards, and it must stop acting.
async fn renew<K: Keyspace>(ks: &K, lease: LeaseId, ttl: Duration, granted: tokio::time::Instant) {
    let period = ttl / 3;
    // The lease was granted (or last renewed) no earlier than this.
    let mut renewed = granted;
    let mut failing = false;
    loop {
        let expires = renewed + ttl;
        let next = (tokio::time::Instant::now() + if failing { period / 4 } else { period }).min(expires);
        tokio::time::sleep_until(next).await;
        if tokio::time::Instant::now() >= expires {
            tracing::warn!(lease, ttl_ms = ttl.as_millis() as u64, "the member's lease expired: not renewed in time");
            return;
        }
        let sent = tokio::time::Instant::now();
        match tokio::time::timeout_at(expires, ks.keep_alive(lease)).await {
            Ok(Ok(())) => {
                renewed = sent;
                failing = false;
            }
            Ok(Err(KeyspaceError::LeaseNotFound(_))) => return,
            Ok(Err(e)) => {
                failing = true;
                tracing::warn!(lease, error = %e, "renewing the member's lease");
            }
            Err(_) => failing = true,
        }
    }
}

/// A member's term as the allocator's leader: the leader key it created.
/// Every write it makes as leader is checked against it, so that a leader
/// deposed while paused (a GC, SIGSTOP) writes nothing when it resumes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Leadership {
    /// The leader key.
    pub key: String,
    /// The revision that created it.
    pub created: i64,
}

impl Leadership {
    /// The comparison that holds while this term lasts.
    pub fn holds(&self) -> Compare {
        Compare::CreateRevision(self.key.clone(), self.created)
    }
}

/// Waits until this member is the leader (it created `{root}/leader` under
/// its lease): its term; `None` when its lease is lost first.
pub async fn become_leader<K: Keyspace>(
    ks: &K,
    keys: &Keys,
    member: &Membership,
) -> Result<Option<Leadership>, KeyspaceError> {
    let key = keys.leader();
    let mut lost = member.lost();
    loop {
        if *lost.borrow() {
            return Ok(None);
        }
        let attempt = ks
            .txn(Txn {
                compares: vec![Compare::ModRevision(key.clone(), 0)],
                success: vec![Op::Put {
                    key: key.clone(),
                    value: member.spec.id.clone().into_bytes(),
                    lease: Some(member.lease),
                }],
                failure: vec![],
            })
            .await?;
        if attempt.succeeded {
            return Ok(Some(Leadership { key, created: attempt.revision }));
        }
        // Someone leads: wait for the key to go, then try again. When that
        // someone is this member (it led before a keyspace error), it leads.
        let mut watch = ks.watch(&key, attempt.revision + 1).await?;
        let leader = ks.get_prefix(&key).await?.kvs.into_iter().find(|kv| kv.key == key);
        match leader {
            None => continue,
            Some(kv) if kv.lease == Some(member.lease) => {
                return Ok(Some(Leadership { key, created: kv.create_revision }));
            }
            Some(_) => {}
        }
        loop {
            tokio::select! {
                event = watch.recv() => match event {
                    Some(Ok(WatchEvent::Delete { key: k, .. })) if k == key => break,
                    Some(Ok(_)) => {}
                    Some(Err(e)) => return Err(e),
                    None => break,
                },
                _ = lost.changed() => return Ok(None),
            }
        }
    }
}
