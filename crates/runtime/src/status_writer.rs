//! Writing a replica's status under its assignment: read the assignment, reduce
//! the new status with the stored one (see [`ReplicaStatus::reduce`]), and
//! write it back with a transaction that succeeds only if the assignment has not
//! changed since it was read (its mod revision), keeping the slot the allocator
//! wrote and the member's lease. A conflict or an unreachable keyspace is
//! retried with the seed's backoff ([`status_write_backoff`]) until the write
//! lands, the assignment is gone, or the caller's `until` completes.

use std::future::Future;

use crate::backoff::status_write_backoff;
use crate::keyspace::{Compare, Keyspace, KeyspaceError, Op, Txn};
use crate::model::AssignmentValue;
use crate::status::ReplicaStatus;

/// Why a status was not written.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StatusWriteError {
    /// The assignment was removed, or replaced by a new one (another create
    /// revision): this replica's status no longer belongs anywhere.
    #[error("the assignment {key} is gone")]
    AssignmentGone {
        /// The assignment's key.
        key: String,
    },
    /// The stored value is not an assignment value.
    #[error("the assignment {key} holds no valid value: {error}")]
    Malformed {
        /// The assignment's key.
        key: String,
        /// What did not parse.
        error: String,
    },
    /// The caller stopped waiting (the replica's context ended).
    #[error("stopped before the status of {key} was written (last error: {last})")]
    Stopped {
        /// The assignment's key.
        key: String,
        /// The last failure seen.
        last: String,
    },
}

/// What was written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Written {
    /// The status now stored (the reduction).
    pub status: ReplicaStatus,
    /// The keyspace revision that holds it (the read revision when nothing
    /// needed writing): a local view is current once it has read this far.
    pub revision: i64,
    /// Attempts made.
    pub attempts: u32,
}

/// Writes `status` under the assignment at `key` whose create revision is
/// `create_revision`.
pub async fn write_status<K: Keyspace>(
    ks: &K,
    key: &str,
    create_revision: i64,
    status: &ReplicaStatus,
    until: impl Future<Output = ()>,
) -> Result<Written, StatusWriteError> {
    tokio::pin!(until);
    let mut last = String::from("none");
    let mut attempt = 0u32;
    loop {
        attempt = attempt.saturating_add(1);
        tokio::select! {
            () = &mut until => return Err(StatusWriteError::Stopped { key: key.to_owned(), last }),
            () = tokio::time::sleep(status_write_backoff(attempt)) => {}
        }
        let snapshot = match ks.get_prefix(key).await {
            Ok(s) => s,
            Err(e) => {
                last = e.to_string();
                continue;
            }
        };
        let Some(kv) = snapshot.kvs.into_iter().find(|kv| kv.key == key) else {
            return Err(StatusWriteError::AssignmentGone { key: key.to_owned() });
        };
        if kv.create_revision != create_revision {
            return Err(StatusWriteError::AssignmentGone { key: key.to_owned() });
        }
        let stored: AssignmentValue = serde_json::from_slice(&kv.value)
            .map_err(|e| StatusWriteError::Malformed { key: key.to_owned(), error: e.to_string() })?;
        let reduced = stored.status.reduce(status);
        if reduced == stored.status {
            return Ok(Written { status: reduced, revision: snapshot.revision, attempts: attempt });
        }
        let value = AssignmentValue { slot: stored.slot, status: reduced.clone() };
        let bytes = serde_json::to_vec(&value)
            .map_err(|e| StatusWriteError::Malformed { key: key.to_owned(), error: e.to_string() })?;
        let txn = Txn {
            compares: vec![Compare::ModRevision(key.to_owned(), kv.mod_revision)],
            success: vec![Op::Put { key: key.to_owned(), value: bytes, lease: kv.lease }],
            failure: vec![],
        };
        match ks.txn(txn).await {
            Ok(r) if r.succeeded => return Ok(Written { status: reduced, revision: r.revision, attempts: attempt }),
            Ok(_) => last = "the assignment changed since it was read".into(),
            // The member's lease ended: its assignments are going too.
            Err(KeyspaceError::LeaseNotFound(_)) => {
                return Err(StatusWriteError::AssignmentGone { key: key.to_owned() });
            }
            Err(e) => last = e.to_string(),
        }
    }
}
