//! The [`Application`] contract: what an application of the runtime writes,
//! and what the runtime guarantees it.
//!
//! An [`Application`] makes a [`ShardApp`] for each replica a member runs
//! (primary or standby): that replica's own object, called from its task
//! only, one call at a time (`&mut self`, no locks), dropped when the
//! replica stops.
//!
//! The runtime guarantees, on the primary:
//! - each consumer transaction calls [`ShardApp::begin`], then
//!   [`ShardApp::consume`] with each source message in offset order per
//!   source partition (awaiting [`ShardApp::consume_async`] instead for an
//!   application that [`awaits`](ShardApp::awaits)), then
//!   [`ShardApp::finalize`], then commits, then [`ShardApp::committed`].
//!   Commits are pipelined: while Kafka commits one transaction, the next is
//!   taken (its reads see the one before's writes), and it commits only once
//!   the one before is committed and in the store — so `committed` for a
//!   transaction may come after the next one's `finalize`, always in order;
//! - a transaction lasts between the shard's minimum and maximum transaction
//!   duration (one holding no message is committed only to move a source's
//!   position past transaction markers at its end, or as a heartbeat);
//! - a transaction's store mutations, the next offset of every source and
//!   the records published ([`Transaction::publish`]) are one unit: one
//!   recovery-log record and its outputs in one Kafka transaction, and one
//!   store transaction. After any crash, fail-over, zombie or restart the
//!   store holds the effects of exactly the messages before its source
//!   offsets, and a reader of committed records sees each published record
//!   exactly once — never one of a transaction that did not commit;
//! - [`Transaction::get`] reads the store as of the transaction's own writes;
//! - a message the application refuses ([`AppError::refused`]) is undone
//!   (its writes and publishes in the transaction rolled back) and handled
//!   as the shard's [`Refusals`](crate::Refusals) policy says: the replica fails (the
//!   default), or the message is skipped and counted, or it is published to
//!   a dead-letter topic with the reason in its headers — exactly once, in
//!   the same transaction. Any other error fails the replica: its
//!   transaction is not committed, and the allocator retries the shard with
//!   a crash-loop backoff.
//!
//! On a standby: [`ShardApp::following`] once it reached its log's head,
//! then [`ShardApp::followed`] with each transaction it plays; on promotion
//! [`ShardApp::recovered`] before the first transaction. Every replica ends
//! with [`ShardApp::stopped`] when it stops in order.
//!
//! The application must:
//! - keep every piece of state it needs in the store, through the
//!   [`Transaction`] (anything kept elsewhere is lost on fail-over);
//! - be deterministic in the store's contents and outputs: no reads of
//!   clocks or of other processes decide what it writes, except through
//!   messages (an application that calls out must make the answer part of
//!   its state, or accept that a replayed transaction may get another one);
//! - publish only through [`Transaction::publish`]: a record produced any
//!   other way is written even when its transaction never commits.
//!
//! # Example
//!
//! Counting words, and publishing each count as it changes:
//!
//! ```
//! use kshard_runtime::{AppError, Application, Message, MemoryStore, OutRecord, ShardApp, ShardSpec, Transaction};
//!
//! struct WordCount;
//!
//! impl Application for WordCount {
//!     fn shard(&self, _: &ShardSpec) -> Result<Box<dyn ShardApp>, AppError> {
//!         Ok(Box::new(Counter))
//!     }
//! }
//!
//! struct Counter;
//!
//! impl ShardApp for Counter {
//!     fn consume(&mut self, txn: &mut Transaction<'_>, message: &Message<'_>) -> Result<(), AppError> {
//!         let text = message.value.ok_or_else(|| AppError::refused("a null line"))?;
//!         let text = std::str::from_utf8(text).map_err(|_| AppError::refused("not UTF-8"))?;
//!         for word in text.split_whitespace() {
//!             let count = txn.get(word.as_bytes())?.map_or(0, |c| u64::from_be_bytes(c.try_into().unwrap_or_default()));
//!             let count = (count + 1).to_be_bytes();
//!             txn.put(word.as_bytes(), count);
//!             txn.publish("word-counts", message.partition, OutRecord::new(Some(word.as_bytes()), Some(&count)));
//!         }
//!         Ok(())
//!     }
//! }
//!
//! // What the runtime does with one message, on a store of its own:
//! let store = MemoryStore::default();
//! let mut txn = Transaction::new(&store);
//! let mut counter = WordCount.shard(&serde_json::from_str(
//!     r#"{"id":"words-0","sources":[],"recovery_log":{"topic":"log","partition":0}}"#,
//! ).unwrap()).unwrap();
//! counter.consume(&mut txn, &Message::new("lines", 0, 0, None, Some(b"to be or not to be"))).unwrap();
//! assert_eq!(txn.get(b"be").unwrap(), Some(2u64.to_be_bytes().to_vec()));
//! assert_eq!(txn.published(), 6);
//! let refused = counter.consume(&mut txn, &Message::new("lines", 0, 1, None, None)).unwrap_err();
//! assert!(refused.is_refusal());
//! ```

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;

pub use kshard_kafka::{Isolation, Transactional};

pub use crate::app_error::AppError;
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

/// An application of the runtime: makes each replica's [`ShardApp`].
pub trait Application: Send + Sync + 'static {
    /// The application's object for a replica of `shard` starting on this
    /// member (primary or standby). An error fails the replica.
    fn shard(&self, shard: &ShardSpec) -> Result<Box<dyn ShardApp>, AppError>;

    /// The records the application's sources are read for: committed ones
    /// (the default), or every record with its part in a transaction and
    /// the markers, for an application that sets open transactions aside
    /// in its store itself (the lag monitor, as Kafka's coordinator does).
    fn isolation(&self) -> Isolation {
        Isolation::Committed
    }

    /// The application's own HTTP routes, served beside the member's
    /// (`/metrics`, `/api/replicas`, `/api/shards`, which they must not
    /// repeat): its handlers read shards' state through `queries`, from any
    /// member. `None` (the default): the member's routes alone.
    fn routes(&self, queries: crate::queries::Queries) -> Option<axum::Router> {
        let _ = queries;
        None
    }
}

/// What [`ShardApp::consume_async`] returns: the message's consumption, to await.
pub type Consuming<'a> = Pin<Box<dyn Future<Output = Result<(), AppError>> + Send + 'a>>;

/// One replica's application object (see the module's doc for the order
/// of calls and what is guaranteed).
pub trait ShardApp: Send + 'static {
    /// A transaction begins (on the primary).
    fn begin(&mut self, txn: &mut Transaction<'_>) -> Result<(), AppError> {
        let _ = txn;
        Ok(())
    }

    /// Takes one message into the transaction. An error fails the replica;
    /// a refusal ([`AppError::refused`]) goes to the shard's [`Refusals`](crate::Refusals).
    fn consume(&mut self, txn: &mut Transaction<'_>, message: &Message<'_>) -> Result<(), AppError> {
        let _ = (txn, message);
        Err(AppError::new("this application consumes through consume_async (its awaits() must say so)"))
    }

    /// Whether the runtime awaits [`ShardApp::consume_async`] for each
    /// message, rather than calling [`ShardApp::consume`]: for an
    /// application that calls out (the next message waits for the future).
    fn awaits(&self) -> bool {
        false
    }

    /// [`ShardApp::consume`] for an application that awaits.
    fn consume_async<'a>(&'a mut self, txn: &'a mut Transaction<'_>, message: &'a Message<'a>) -> Consuming<'a> {
        Box::pin(std::future::ready(self.consume(txn, message)))
    }

    /// The transaction is about to commit: last writes and publishes (the
    /// final value of each key it touched, say). An error fails the replica.
    fn finalize(&mut self, txn: &mut Transaction<'_>) -> Result<(), AppError> {
        let _ = txn;
        Ok(())
    }

    /// The transaction committed: `offsets` is each source's next offset.
    fn committed(&mut self, offsets: &[SourceOffset]) {
        let _ = offsets;
    }

    /// The replica is about to become primary: `store` holds the shard's
    /// state as of its checkpoint (`offsets`, each source's next offset),
    /// and sources are read from there next. Applications that keep a view
    /// of their state outside the store (to serve it) rebuild it here. An
    /// error fails the replica.
    fn recovered(&mut self, store: &dyn Store, offsets: &[SourceOffset]) -> Result<(), AppError> {
        let _ = (store, offsets);
        Ok(())
    }

    /// A standby reached its log's head: `store` holds the shard's state as
    /// of `offsets`. Applications that serve a view of every shard (from
    /// standbys as well as primaries) build it here; [`ShardApp::followed`]
    /// then comes with each transaction the standby plays, until it is
    /// promoted ([`ShardApp::recovered`]) or stops. An error fails the replica.
    fn following(&mut self, store: &dyn Store, offsets: &[SourceOffset]) -> Result<(), AppError> {
        let _ = (store, offsets);
        Ok(())
    }

    /// A standby applied a transaction of its primary's to its store:
    /// `mutations` (one per key) are in the store now, and `offsets` is its
    /// new checkpoint. Snapshots come as transactions too (puts of what the
    /// store holds already).
    fn followed(&mut self, mutations: &[Mutation], offsets: &[SourceOffset]) {
        let _ = (mutations, offsets);
    }

    /// The primary read everything `topic`/`partition` holds now;
    /// `next_offset` is its position when the client knows it.
    fn end_of_source(&mut self, topic: &str, partition: i32, next_offset: Option<i64>) {
        let _ = (topic, partition, next_offset);
    }

    /// The log of source `topic`/`partition` was cut below the primary's
    /// position `position` (an unclean leader election, or the topic deleted
    /// and made again): it is read on from `log_start`, and the offsets from
    /// there to `position` may now name other records than those consumed.
    /// Called in a transaction, which can undo what the store holds of the
    /// lost records (by default it is kept, and what follows `log_start`
    /// comes as new messages). An error fails the replica.
    fn source_reset(
        &mut self,
        txn: &mut Transaction<'_>,
        topic: &str,
        partition: i32,
        position: i64,
        log_start: i64,
    ) -> Result<(), AppError> {
        let _ = (txn, topic, partition, position, log_start);
        Ok(())
    }

    /// A batch of source records at `offset` of `topic`/`partition` failed
    /// its checksum (`why`) and was skipped: called when the shard's
    /// [`Refusals`](crate::Refusals) policy is not `fail` (with `fail`, the
    /// replica fails naming the batch, and fails again each time it reads it).
    fn source_skipped(&mut self, topic: &str, partition: i32, offset: i64, why: &str) {
        let _ = (topic, partition, offset, why);
    }

    /// The replica stopped (torn down or failed), primary or standby.
    fn stopped(&mut self) {}
}

pub use crate::outputs::Output;

/// A consumer transaction's view of the store: reads see the store as of the
/// transaction's own writes; writes become the recovery-log record's
/// mutations; records published go to Kafka in the same Kafka transaction
/// as that record.
pub struct Transaction<'a> {
    store: &'a dyn Store,
    /// The writes of the transaction before, still being committed: read
    /// over the store (see `Log::start_commit`).
    before: Option<&'a BTreeMap<Vec<u8>, Option<Vec<u8>>>>,
    writes: BTreeMap<Vec<u8>, Option<Vec<u8>>>,
    outputs: crate::outputs::Outputs,
    messages: usize,
    bytes: usize,
    /// What the message being consumed changed, to undo it if refused
    /// (kept only when the shard's refusals are not `Fail`).
    undo: Option<Undo>,
}

/// A write of a transaction: a value, or a delete (`None`).
type Write = Option<Vec<u8>>;

/// A message's changes to a transaction, newest last: each key's entry in
/// the writes before it, and the outputs and bytes before the message.
#[derive(Debug, Default)]
struct Undo {
    /// Each key written, and its entry in the writes before (`None`: none).
    writes: Vec<(Vec<u8>, Option<Write>)>,
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
        Transaction {
            store,
            before: None,
            writes: BTreeMap::new(),
            outputs: crate::outputs::Outputs::default(),
            messages: 0,
            bytes: 0,
            undo: None,
        }
    }

    /// A transaction over `store` with `before`'s writes (the transaction
    /// before it, not yet in the store) over it.
    pub(crate) fn over(store: &'a dyn Store, before: Option<&'a BTreeMap<Vec<u8>, Option<Vec<u8>>>>) -> Self {
        Transaction { before, ..Transaction::new(store) }
    }

    /// The value of `key`, as of this transaction's writes.
    pub fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>, StoreError> {
        match self.writes.get(key).or_else(|| self.before.and_then(|b| b.get(key))) {
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
        for writes in self.before.into_iter().chain([&self.writes]) {
            for (key, write) in writes.range(prefix.to_vec()..).take_while(|(k, _)| k.starts_with(prefix)) {
                match write {
                    Some(value) => found.insert(key.clone(), value.clone()),
                    None => found.remove(key),
                };
            }
        }
        Ok(found.into_iter().collect())
    }

    /// Sets `key`.
    pub fn put(&mut self, key: impl Into<Vec<u8>>, value: impl Into<Vec<u8>>) {
        let (key, value) = (key.into(), value.into());
        self.bytes += key.len() + value.len() + 9;
        self.write(key, Some(value));
    }

    /// Deletes `key`.
    pub fn delete(&mut self, key: impl Into<Vec<u8>>) {
        let key = key.into();
        self.bytes += key.len() + 5;
        self.write(key, None);
    }

    fn write(&mut self, key: Vec<u8>, value: Option<Vec<u8>>) {
        // The key is copied only to be undone by: a copy per write was a
        // measurable share of a cold start.
        match &mut self.undo {
            Some(undo) => {
                let before = self.writes.insert(key.clone(), value);
                undo.writes.push((key, before));
            }
            None => {
                self.writes.insert(key, value);
            }
        }
    }

    /// Starts keeping what the next message changes, so that a refusal can
    /// undo it (the runtime does, when the shard's refusals are not `Fail`).
    pub(crate) fn mark(&mut self) {
        self.undo = Some(Undo { writes: Vec::new(), bytes: self.bytes });
        self.outputs.mark();
    }

    /// Undoes what was changed since [`Transaction::mark`].
    pub(crate) fn undo(&mut self) {
        let Some(undo) = self.undo.take() else { return };
        for (key, before) in undo.writes.into_iter().rev() {
            match before {
                Some(value) => self.writes.insert(key, value),
                None => self.writes.remove(&key),
            };
        }
        self.outputs.undo();
        self.bytes = undo.bytes;
    }

    /// Publishes `record` to `topic`/`partition`, exactly once: it is
    /// written in the Kafka transaction that commits this transaction's
    /// recovery-log record, so a reader of committed records sees it once
    /// the transaction commits, and never if it does not (a replica that
    /// fails, a primary fenced by a newer one). Records published to one
    /// partition land in the order published.
    pub fn publish(&mut self, topic: &str, partition: i32, record: OutRecord) {
        // What it holds until the commit: the record as it goes out.
        self.bytes += self.outputs.publish(topic, partition, &record);
    }

    /// Records published so far.
    pub fn published(&self) -> usize {
        self.outputs.records()
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
        (mutations, self.outputs.into_batches())
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
    fn a_refused_message_is_undone_and_what_came_before_it_stays() {
        let store = Fixed;
        let mut txn = Transaction::new(&store);
        txn.put(b"a".to_vec(), b"1".to_vec());
        txn.publish("out", 0, OutRecord::new(None, Some(b"kept")));
        txn.mark();
        txn.put(b"a".to_vec(), b"2".to_vec());
        txn.put(b"b".to_vec(), b"new".to_vec());
        txn.delete(b"a".to_vec());
        txn.publish("out", 0, OutRecord::new(None, Some(b"undone")));
        txn.undo();
        assert_eq!(txn.get(b"a").expect("reads"), Some(b"1".to_vec()));
        assert_eq!(txn.get(b"b").expect("reads"), None);
        assert_eq!(txn.published(), 1);
        assert_eq!(txn.into_mutations(), [Mutation::Put { key: b"a".to_vec(), value: b"1".to_vec() }]);
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
