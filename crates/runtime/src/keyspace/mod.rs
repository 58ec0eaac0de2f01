//! The coordination keyspace: a revisioned key-value store with compare-and-
//! swap transactions, leases and watches — etcd's model, which the runtime keeps
//! assignments, member records and replica status in.
//!
//! [`Keyspace`] is the contract; [`memory::MemoryKeyspace`] implements it in
//! process (the default for a single process), [`etcd::EtcdKeyspace`] on
//! etcd. `conformance` (with the `testing` feature) is the contract as
//! checks, run against every implementation.
//!
//! Semantics, as etcd's:
//! - every change increments the keyspace's revision; a key records the
//!   revision that created it (`create_revision`), last changed it
//!   (`mod_revision`) and how many times it changed since creation (`version`);
//! - a transaction checks all its comparisons against one state and applies
//!   either its success or its failure operations, atomically, at one revision;
//!   comparing a missing key's revision to 0 is true; a branch may not write
//!   one key twice ([`Txn::validate`], [`KeyspaceError::Invalid`]);
//! - a key put with a lease is deleted when the lease expires or is revoked;
//! - a watch delivers every change of keys under its prefix from a revision on,
//!   in revision order, without gaps; asking for a revision older than the
//!   history kept fails with [`KeyspaceError::Compacted`].

#[cfg(any(test, feature = "testing"))]
pub mod conformance;
#[cfg(feature = "etcd")]
pub(crate) mod etcd;
pub(crate) mod memory;

#[cfg(feature = "etcd")]
pub use etcd::{EtcdAccess, EtcdAccessError, EtcdKeyspace};
pub use memory::MemoryKeyspace;

use std::future::Future;
use std::time::Duration;

/// A lease: keys put under it live while it is kept alive.
pub type LeaseId = i64;

/// One key and its metadata.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyValue {
    /// The key.
    pub key: String,
    /// The value.
    pub value: Vec<u8>,
    /// The revision that created the key.
    pub create_revision: i64,
    /// The revision that last changed it.
    pub mod_revision: i64,
    /// Changes since creation (1 when just created).
    pub version: i64,
    /// The lease it lives under, if any.
    pub lease: Option<LeaseId>,
}

/// A transaction's condition on one key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Compare {
    /// The key's mod revision equals this (0: the key does not exist).
    ModRevision(String, i64),
    /// The key's create revision equals this (0: the key does not exist).
    CreateRevision(String, i64),
    /// The key exists with this value.
    Value(String, Vec<u8>),
}

/// A change a transaction makes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Op {
    /// Sets a key, under a lease or none.
    Put {
        /// The key.
        key: String,
        /// The value.
        value: Vec<u8>,
        /// The lease the key lives under.
        lease: Option<LeaseId>,
    },
    /// Deletes a key (nothing when it does not exist).
    Delete(String),
    /// Deletes every key under a prefix.
    DeletePrefix(String),
}

/// A transaction: if every comparison holds, the success operations, else the
/// failure operations.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Txn {
    /// The conditions.
    pub compares: Vec<Compare>,
    /// Applied when all conditions hold.
    pub success: Vec<Op>,
    /// Applied otherwise.
    pub failure: Vec<Op>,
}

/// The most compares, or operations on either branch, one transaction may
/// hold: etcd's default `--max-txn-ops`.
pub const MAX_TXN_OPS: usize = 128;

impl Txn {
    /// Unconditional operations.
    pub fn ops(ops: Vec<Op>) -> Self {
        Txn { compares: vec![], success: ops, failure: vec![] }
    }

    /// Checks etcd's rule: within one branch no key is written twice — put
    /// or deleted twice, or put or deleted under a prefix the branch deletes
    /// (etcd refuses these as "duplicate key given in txn request").
    pub fn validate(&self) -> Result<()> {
        let longest = self.compares.len().max(self.success.len()).max(self.failure.len());
        if longest > MAX_TXN_OPS {
            return Err(KeyspaceError::Invalid(format!(
                "too many operations in one transaction: {longest} (etcd takes {MAX_TXN_OPS} by default)"
            )));
        }
        for ops in [&self.success, &self.failure] {
            let mut keys = std::collections::BTreeSet::new();
            let mut prefixes = Vec::new();
            for op in ops {
                match op {
                    Op::Put { key, .. } | Op::Delete(key) => {
                        if !keys.insert(key.as_str()) {
                            return Err(KeyspaceError::Invalid(format!(
                                "the key {key} is written twice in one transaction"
                            )));
                        }
                    }
                    Op::DeletePrefix(prefix) => prefixes.push(prefix.as_str()),
                }
            }
            for (i, prefix) in prefixes.iter().enumerate() {
                let clash = keys.iter().find(|k| k.starts_with(prefix)).copied().or_else(|| {
                    prefixes.iter().enumerate().find(|(j, p)| *j != i && p.starts_with(prefix)).map(|(_, p)| *p)
                });
                if let Some(k) = clash {
                    return Err(KeyspaceError::Invalid(format!(
                        "{k} is under the prefix {prefix} the transaction deletes"
                    )));
                }
            }
        }
        Ok(())
    }
}

/// What a transaction did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TxnResponse {
    /// True when the conditions held.
    pub succeeded: bool,
    /// The keyspace's revision after the transaction.
    pub revision: i64,
}

/// Keys under a prefix at one revision.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Snapshot {
    /// The keys, in key order.
    pub kvs: Vec<KeyValue>,
    /// The revision they were read at: watch from `revision + 1` to follow them.
    pub revision: i64,
}

/// One change seen by a watch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WatchEvent {
    /// A key was created or changed.
    Put(KeyValue),
    /// A key was deleted (by an operation, or by its lease's end).
    Delete {
        /// The key.
        key: String,
        /// The revision of the deletion.
        mod_revision: i64,
    },
}

impl WatchEvent {
    /// The revision of the change.
    pub fn revision(&self) -> i64 {
        match self {
            WatchEvent::Put(kv) => kv.mod_revision,
            WatchEvent::Delete { mod_revision, .. } => *mod_revision,
        }
    }

    /// The key changed.
    pub fn key(&self) -> &str {
        match self {
            WatchEvent::Put(kv) => &kv.key,
            WatchEvent::Delete { key, .. } => key,
        }
    }
}

/// Why a keyspace call failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyspaceError {
    /// A watch asked for history the keyspace no longer keeps.
    #[error("revision {requested} is compacted (history starts at {oldest})")]
    Compacted {
        /// The revision asked for.
        requested: i64,
        /// The oldest revision still kept.
        oldest: i64,
    },
    /// The lease does not exist (expired or revoked).
    #[error("lease {0} not found (expired or revoked)")]
    LeaseNotFound(LeaseId),
    /// The request breaks the keyspace's rules (a key written twice in one
    /// transaction); retrying it cannot help.
    #[error("invalid request: {0}")]
    Invalid(String),
    /// The keyspace cannot be reached; the call may be retried.
    #[error("keyspace unavailable: {0}")]
    Unavailable(String),
}

/// Result of a keyspace call.
pub type Result<T> = std::result::Result<T, KeyspaceError>;

/// A stream of watch events, ending (with `None`) when the keyspace drops it.
pub type WatchStream = tokio::sync::mpsc::UnboundedReceiver<Result<WatchEvent>>;

/// The coordination keyspace. Calls may be made from many tasks at once.
pub trait Keyspace: Send + Sync + 'static {
    /// Every key under `prefix`, at one revision.
    fn get_prefix(&self, prefix: &str) -> impl Future<Output = Result<Snapshot>> + Send;

    /// Runs a transaction atomically.
    fn txn(&self, txn: Txn) -> impl Future<Output = Result<TxnResponse>> + Send;

    /// Grants a lease that expires after `ttl` unless kept alive.
    fn grant(&self, ttl: Duration) -> impl Future<Output = Result<LeaseId>> + Send;

    /// Renews a lease for its full TTL; fails once it has expired.
    fn keep_alive(&self, lease: LeaseId) -> impl Future<Output = Result<()>> + Send;

    /// Ends a lease now, deleting its keys.
    fn revoke(&self, lease: LeaseId) -> impl Future<Output = Result<()>> + Send;

    /// Every change of keys under `prefix` with a revision of at least
    /// `from_revision`, in order, then as they happen.
    fn watch(&self, prefix: &str, from_revision: i64) -> impl Future<Output = Result<WatchStream>> + Send;
}
