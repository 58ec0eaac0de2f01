//! Where a replica reads and writes its shard's hints ([`HintBoard`]: the
//! keyspace, for a member), and why that can fail ([`HintsError`]).

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use crate::model::Hints;

/// A hint board's answer, to await.
pub(crate) type HintCall<'a, T> = Pin<Box<dyn Future<Output = Result<T, HintsError>> + Send + 'a>>;

/// Why a shard's hints could not be read, checked or recorded.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum HintsError {
    /// The keyspace failed.
    #[error("the keyspace: {0}")]
    Keyspace(#[from] crate::keyspace::KeyspaceError),
    /// The keyspace did not answer in time.
    #[error("the keyspace did not answer within {0:?}")]
    Timeout(Duration),
    /// The hints under `key` do not parse.
    #[error("{key} does not parse: {source}")]
    Malformed {
        /// Their key.
        key: String,
        /// Why.
        #[source]
        source: serde_json::Error,
    },
    /// Encoding them failed.
    #[error("encoding the hints: {0}")]
    Encode(#[source] serde_json::Error),
    /// The log failed.
    #[error("reading the snapshot a hint names: {0}")]
    Log(#[from] kshard_kafka::Error),
    /// A newer snapshot is recorded.
    #[error("a newer snapshot at {0} is recorded already")]
    Newer(i64),
    /// The hints changed while they were written.
    #[error("the hints changed while they were written")]
    Raced,
}

/// Where a replica reads and writes its shard's hints (the keyspace).
pub(crate) trait HintBoard: Send + Sync {
    /// The shard's hints, if any, and the revision they were written at.
    fn read<'a>(&'a self, shard: &'a str) -> HintCall<'a, Option<(Hints, i64)>>;
    /// Replaces the shard's hints if they are still at `revision` (0: none);
    /// false when someone wrote them meanwhile.
    fn write<'a>(&'a self, shard: &'a str, hints: &'a Hints, revision: i64) -> HintCall<'a, bool>;
}
