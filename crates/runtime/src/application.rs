//! The [`Application`] contract: what an application of the runtime writes,
//! and what the runtime guarantees it.
//!
//! The runtime guarantees:
//! - only the shard's primary calls [`Application::consume`], from one thread,
//!   with the shard's source messages in offset order per source partition;
//! - messages are grouped into consumer transactions that last between the
//!   shard's minimum and maximum transaction duration (a transaction holding no
//!   message is committed only to move a source's position past transaction
//!   markers at its end);
//! - a transaction's store mutations and the next offset of every source go to
//!   the recovery log in one record and into the store in one store
//!   transaction: after any crash, fail-over or restart the store holds the
//!   effects of exactly the messages before its source offsets — each message
//!   counts once;
//! - [`Transaction::get`] reads the store as of the transaction's own writes.
//!
//! The application must:
//! - keep every piece of state it needs in the store, through the
//!   [`Transaction`] (anything kept elsewhere is lost on fail-over);
//! - be deterministic in the store's contents: no reads of clocks or of other
//!   processes decide what it writes, except through messages;
//! - return an error for a message it cannot take: the replica then fails
//!   (FAILED with that error), its transaction is not committed, and the
//!   allocator retries the shard with a crash-loop backoff.

use std::collections::BTreeMap;

pub use kshard_kafka::{Isolation, Transactional};

use crate::model::ShardSpec;
pub use crate::partitions::OutRecord;
use crate::recovery_log::record::{Mutation, SourceOffset};
use crate::store::{Store, StoreError};

/// One message of a source.
#[derive(Debug, Clone, Copy)]
pub struct Message<'a> {
    /// Its topic.
    pub topic: &'a str,
    /// Its partition.
    pub partition: i32,
    /// Its offset.
    pub offset: i64,
    /// Its timestamp, milliseconds since the epoch (−1: none).
    pub timestamp_ms: i64,
    /// The broker set the timestamp when it appended the record
    /// (LogAppendTime); else its producer did (CreateTime).
    pub log_append_time: bool,
    /// Its headers, in order: name and value (`None`: null).
    pub headers: &'a [(&'a str, Option<&'a [u8]>)],
    /// Its key.
    pub key: Option<&'a [u8]>,
    /// Its value.
    pub value: Option<&'a [u8]>,
    /// Its part in a transaction, for an application that reads
    /// [`Isolation::Uncommitted`] records (see [`Application::isolation`]):
    /// a record of a producer's open transaction, or the marker ending it
    /// (whose key and value are the marker's own). `None` otherwise.
    pub transactional: Option<Transactional>,
}

impl<'a> Message<'a> {
    /// A message of `topic`/`partition` at `offset` with `key` and `value`,
    /// no timestamp, no headers, outside any transaction (for tests).
    pub fn new(topic: &'a str, partition: i32, offset: i64, key: Option<&'a [u8]>, value: Option<&'a [u8]>) -> Self {
        Message {
            topic,
            partition,
            offset,
            timestamp_ms: -1,
            log_append_time: false,
            headers: &[],
            key,
            value,
            transactional: None,
        }
    }
}

/// Why an application refused a message or could not build its view of a
/// shard's state, in its own words or as its own error. It fails the
/// replica, which says where (the message's topic, partition and offset, or
/// the step) around it.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct AppError(Box<dyn std::error::Error + Send + Sync>);

impl AppError {
    /// `error` as the application's.
    pub fn new(error: impl Into<Box<dyn std::error::Error + Send + Sync>>) -> Self {
        AppError(error.into())
    }
}

impl From<String> for AppError {
    fn from(message: String) -> Self {
        AppError(message.into())
    }
}

impl From<&str> for AppError {
    fn from(message: &str) -> Self {
        AppError(message.into())
    }
}

impl From<StoreError> for AppError {
    fn from(error: StoreError) -> Self {
        AppError(Box::new(error))
    }
}

/// An application of the runtime.
pub trait Application: Send + Sync + 'static {
    /// Takes one message into the transaction `txn` of `shard`. An error fails
    /// the replica (the transaction is not committed).
    fn consume(&self, shard: &ShardSpec, txn: &mut Transaction<'_>, message: &Message<'_>) -> Result<(), AppError>;

    /// The records the application's sources are read for: committed ones
    /// (the default), or every record with its part in a transaction and
    /// the markers, for an application that sets open transactions aside
    /// in its store itself (the lag monitor, as Kafka's coordinator does).
    fn isolation(&self) -> Isolation {
        Isolation::Committed
    }

    /// The replica of `shard` is about to become primary: `store` holds the
    /// shard's state as of its checkpoint (`offsets`, each source's next
    /// offset), and sources are read from there next. Applications that keep
    /// a view of their state outside the store (to serve it) rebuild it here.
    /// An error fails the replica.
    fn recovered(&self, shard: &ShardSpec, store: &dyn Store, offsets: &[SourceOffset]) -> Result<(), AppError> {
        let _ = (shard, store, offsets);
        Ok(())
    }

    /// A standby of `shard` reached its log's head: `store` holds the shard's
    /// state as of `offsets`. Applications that serve a view of every shard
    /// (from standbys as well as primaries) build it here; the runtime then
    /// calls [`Application::followed`] with each transaction the standby plays,
    /// until it is promoted ([`Application::recovered`]) or stops
    /// ([`Application::stopped`]). An error fails the replica.
    fn following(&self, shard: &ShardSpec, store: &dyn Store, offsets: &[SourceOffset]) -> Result<(), AppError> {
        let _ = (shard, store, offsets);
        Ok(())
    }

    /// A standby of `shard` applied a transaction of its primary's to its
    /// store: `mutations` (one per key) are in the store now, and `offsets` is
    /// its new checkpoint. Snapshots come as transactions too (puts of what
    /// the store holds already).
    fn followed(&self, shard: &ShardSpec, mutations: &[Mutation], offsets: &[SourceOffset]) {
        let _ = (shard, mutations, offsets);
    }

    /// The primary of `shard` read everything `topic`/`partition` holds now;
    /// `next_offset` is its position when the client knows it.
    fn end_of_source(&self, shard: &ShardSpec, topic: &str, partition: i32, next_offset: Option<i64>) {
        let _ = (shard, topic, partition, next_offset);
    }

    /// The replica of `shard` stopped (torn down or failed), primary or standby.
    fn stopped(&self, shard: &ShardSpec) {
        let _ = shard;
    }
}

/// A record an application publishes in a transaction, for `topic`/`partition`.
#[derive(Debug, Clone)]
pub struct Output {
    /// The topic.
    pub topic: String,
    /// The partition.
    pub partition: i32,
    /// The record.
    pub record: OutRecord,
}

/// A consumer transaction's view of the store: reads see the store as of the
/// transaction's own writes; writes become the recovery-log record's
/// mutations; records published go to Kafka in the same Kafka transaction
/// as that record.
pub struct Transaction<'a> {
    store: &'a dyn Store,
    writes: BTreeMap<Vec<u8>, Option<Vec<u8>>>,
    outputs: Vec<Output>,
    messages: usize,
    bytes: usize,
}

impl std::fmt::Debug for Transaction<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Transaction").field("writes", &self.writes.len()).field("messages", &self.messages).finish()
    }
}

impl<'a> Transaction<'a> {
    /// A transaction over `store`.
    pub fn new(store: &'a dyn Store) -> Self {
        Transaction { store, writes: BTreeMap::new(), outputs: Vec::new(), messages: 0, bytes: 0 }
    }

    /// The value of `key`, as of this transaction's writes.
    pub fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>, StoreError> {
        match self.writes.get(key) {
            Some(v) => Ok(v.clone()),
            None => self.store.get(key),
        }
    }

    /// Every entry whose key starts with `prefix`, in key order, as of this
    /// transaction's writes (for small sets of keys an application keeps
    /// under a prefix of its own: it reads the store in chunks).
    pub fn scan_prefix(&self, prefix: &[u8]) -> Result<crate::store::Entries, StoreError> {
        let mut found: BTreeMap<Vec<u8>, Vec<u8>> = BTreeMap::new();
        if let Some(value) = self.store.get(prefix)? {
            found.insert(prefix.to_vec(), value);
        }
        let mut after = prefix.to_vec();
        'store: loop {
            let chunk = self.store.scan(Some(&after), 64 << 10)?;
            let Some((last, _)) = chunk.last() else { break };
            let last = last.clone();
            for (key, value) in chunk {
                if !key.starts_with(prefix) {
                    break 'store;
                }
                found.insert(key, value);
            }
            after = last;
        }
        for (key, write) in self.writes.range(prefix.to_vec()..).take_while(|(k, _)| k.starts_with(prefix)) {
            match write {
                Some(value) => found.insert(key.clone(), value.clone()),
                None => found.remove(key),
            };
        }
        Ok(found.into_iter().collect())
    }

    /// Sets `key`.
    pub fn put(&mut self, key: impl Into<Vec<u8>>, value: impl Into<Vec<u8>>) {
        let (key, value) = (key.into(), value.into());
        self.bytes += key.len() + value.len() + 9;
        self.writes.insert(key, Some(value));
    }

    /// Deletes `key`.
    pub fn delete(&mut self, key: impl Into<Vec<u8>>) {
        let key = key.into();
        self.bytes += key.len() + 5;
        self.writes.insert(key, None);
    }

    /// Publishes `record` to `topic`/`partition`, exactly once: it is
    /// written in the Kafka transaction that commits this transaction's
    /// recovery-log record, so a reader of committed records sees it once
    /// the transaction commits, and never if it does not (a replica that
    /// fails, a primary fenced by a newer one). Records published to one
    /// partition land in the order published.
    pub fn publish(&mut self, topic: &str, partition: i32, record: OutRecord) {
        self.bytes += record.key.as_ref().map_or(0, |k| k.len()) + record.value.as_ref().map_or(0, |v| v.len()) + 16;
        self.outputs.push(Output { topic: topic.to_owned(), partition, record });
    }

    /// Records published so far.
    pub fn published(&self) -> usize {
        self.outputs.len()
    }

    /// Counts one message taken (the runtime does, after `consume`).
    pub(crate) fn count_message(&mut self) {
        self.messages += 1;
    }

    /// The bytes of keys and values written so far, overwrites included (at
    /// least the log record's size: the runtime ends a transaction before it
    /// outgrows a Kafka record).
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Messages taken so far.
    pub fn messages(&self) -> usize {
        self.messages
    }

    /// The mutations to log and apply, one per key written (the last write wins).
    pub fn into_mutations(self) -> Vec<Mutation> {
        self.into_parts().0
    }

    /// The mutations (see [`Transaction::into_mutations`]) and the records published.
    pub(crate) fn into_parts(self) -> (Vec<Mutation>, Vec<Output>) {
        let mutations = self
            .writes
            .into_iter()
            .map(|(key, value)| match value {
                Some(value) => Mutation::Put { key, value },
                None => Mutation::Delete { key },
            })
            .collect();
        (mutations, self.outputs)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::Checkpoint;

    struct Fixed;
    impl Store for Fixed {
        fn apply(&mut self, _: &[Mutation], _: &Checkpoint) -> Result<(), StoreError> {
            Ok(())
        }
        fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>, StoreError> {
            Ok((key == b"a").then(|| b"stored".to_vec()))
        }
        fn checkpoint(&self) -> Result<Option<Checkpoint>, StoreError> {
            Ok(None)
        }
        fn scan(&self, _: Option<&[u8]>, _: usize) -> Result<crate::store::Entries, StoreError> {
            Ok(Vec::new())
        }
        fn clear(&mut self) -> Result<(), StoreError> {
            Ok(())
        }
    }

    #[test]
    fn a_prefix_scan_sees_the_store_under_the_transactions_own_writes() {
        let mut store = crate::store::MemoryStore::default();
        let put = |k: &str| Mutation::Put { key: k.as_bytes().to_vec(), value: k.as_bytes().to_vec() };
        let checkpoint = Checkpoint {
            log: crate::store::LogPosition { next_offset: 0, seq: 0, checksum: 0, author: None },
            offsets: vec![],
            partial: None,
        };
        store.apply(&[put("p"), put("p/1"), put("p/2"), put("q/1"), put("o")], &checkpoint).expect("applies");
        let mut txn = Transaction::new(&store);
        txn.delete(b"p/1".to_vec());
        txn.put(b"p/3".to_vec(), b"new".to_vec());
        txn.put(b"q/2".to_vec(), b"other".to_vec());
        let keys: Vec<(String, String)> = txn
            .scan_prefix(b"p")
            .expect("scans")
            .into_iter()
            .map(|(k, v)| (String::from_utf8_lossy(&k).into_owned(), String::from_utf8_lossy(&v).into_owned()))
            .collect();
        let want = [("p", "p"), ("p/2", "p/2"), ("p/3", "new")].map(|(k, v)| (k.to_owned(), v.to_owned()));
        assert_eq!(keys, want);
    }

    #[test]
    fn reads_see_the_transactions_own_writes_and_the_last_write_wins() {
        let store = Fixed;
        let mut txn = Transaction::new(&store);
        assert_eq!(txn.get(b"a").expect("reads"), Some(b"stored".to_vec()));
        txn.put(b"a".to_vec(), b"1".to_vec());
        txn.put(b"b".to_vec(), b"2".to_vec());
        txn.delete(b"b".to_vec());
        txn.put(b"a".to_vec(), b"3".to_vec());
        assert_eq!(txn.get(b"a").expect("reads"), Some(b"3".to_vec()));
        assert_eq!(txn.get(b"b").expect("reads"), None);
        assert_eq!(
            txn.into_mutations(),
            [Mutation::Put { key: b"a".to_vec(), value: b"3".to_vec() }, Mutation::Delete { key: b"b".to_vec() }]
        );
    }
}
