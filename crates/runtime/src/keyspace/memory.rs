//! [`MemoryKeyspace`]: the keyspace in process, with etcd's semantics, for a
//! single kshard process (no etcd needed) and for tests.
//!
//! Time is tokio's clock, so tests can pause and advance it. Leases expire when
//! an operation or the reaper task (started when a tokio runtime is present)
//! notices their deadline passed. The last [`HISTORY`] changes are kept for
//! watches that start in the past.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::time::Instant;

use super::{
    Compare, KeyValue, Keyspace, KeyspaceError, LeaseId, Op, Result, Snapshot, Txn, TxnResponse, WatchEvent,
    WatchStream,
};

/// Changes kept for watches that start in the past.
pub(crate) const HISTORY: usize = 100_000;

#[derive(Debug)]
struct Lease {
    ttl: Duration,
    deadline: Instant,
}

#[derive(Debug)]
struct Watcher {
    prefix: String,
    events: mpsc::UnboundedSender<Result<WatchEvent>>,
}

#[derive(Debug, Default)]
struct State {
    kvs: BTreeMap<String, KeyValue>,
    revision: i64,
    leases: HashMap<LeaseId, Lease>,
    next_lease: LeaseId,
    history: VecDeque<WatchEvent>,
    /// The highest revision whose changes are no longer all in `history`.
    compacted_through: i64,
    watchers: Vec<Watcher>,
}

impl State {
    /// Records a change and tells the watchers of its key.
    fn publish(&mut self, event: WatchEvent) {
        self.watchers.retain(|w| !event.key().starts_with(&w.prefix) || w.events.send(Ok(event.clone())).is_ok());
        self.history.push_back(event);
        if self.history.len() > HISTORY
            && let Some(dropped) = self.history.pop_front()
        {
            self.compacted_through = dropped.revision();
        }
    }

    fn put(&mut self, key: String, value: Vec<u8>, lease: Option<LeaseId>, revision: i64) {
        let kv = match self.kvs.get(&key) {
            Some(old) => KeyValue {
                key: key.clone(),
                value,
                create_revision: old.create_revision,
                mod_revision: revision,
                version: old.version + 1,
                lease,
            },
            None => KeyValue {
                key: key.clone(),
                value,
                create_revision: revision,
                mod_revision: revision,
                version: 1,
                lease,
            },
        };
        self.kvs.insert(key, kv.clone());
        self.publish(WatchEvent::Put(kv));
    }

    fn delete(&mut self, key: &str, revision: i64) {
        if self.kvs.remove(key).is_some() {
            self.publish(WatchEvent::Delete { key: key.to_owned(), mod_revision: revision });
        }
    }

    fn holds(&self, compare: &Compare) -> bool {
        match compare {
            Compare::ModRevision(key, r) => self.kvs.get(key).map_or(0, |kv| kv.mod_revision) == *r,
            Compare::CreateRevision(key, r) => self.kvs.get(key).map_or(0, |kv| kv.create_revision) == *r,
            Compare::Value(key, v) => self.kvs.get(key).is_some_and(|kv| kv.value == *v),
        }
    }

    /// Deletes the keys of expired leases, at one revision per lease.
    fn expire(&mut self, now: Instant) {
        let mut expired: Vec<LeaseId> =
            self.leases.iter().filter(|(_, l)| l.deadline <= now).map(|(id, _)| *id).collect();
        expired.sort_unstable();
        for id in expired {
            self.end_lease(id);
        }
    }

    fn end_lease(&mut self, id: LeaseId) {
        self.leases.remove(&id);
        let keys: Vec<String> = self.kvs.values().filter(|kv| kv.lease == Some(id)).map(|kv| kv.key.clone()).collect();
        if keys.is_empty() {
            return;
        }
        self.revision += 1;
        let revision = self.revision;
        for key in keys {
            self.delete(&key, revision);
        }
    }
}

/// The keyspace in process. Cheap to clone: clones share one keyspace.
#[derive(Debug, Clone)]
pub struct MemoryKeyspace {
    state: Arc<Mutex<State>>,
}

impl Default for MemoryKeyspace {
    fn default() -> Self {
        Self::new()
    }
}

impl MemoryKeyspace {
    /// An empty keyspace at revision 0. Inside a tokio runtime, a reaper task
    /// ends expired leases every 100 ms until the keyspace is dropped.
    pub fn new() -> Self {
        let state = Arc::new(Mutex::new(State::default()));
        if tokio::runtime::Handle::try_current().is_ok() {
            let weak: Weak<Mutex<State>> = Arc::downgrade(&state);
            tokio::spawn(async move {
                loop {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    let Some(state) = weak.upgrade() else { return };
                    state.lock().unwrap_or_else(PoisonError::into_inner).expire(Instant::now());
                }
            });
        }
        MemoryKeyspace { state }
    }

    /// The state, with expired leases ended first.
    fn state(&self) -> MutexGuard<'_, State> {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        state.expire(Instant::now());
        state
    }
}

impl Keyspace for MemoryKeyspace {
    async fn get_prefix(&self, prefix: &str) -> Result<Snapshot> {
        let state = self.state();
        let kvs = state
            .kvs
            .range(prefix.to_owned()..)
            .take_while(|(k, _)| k.starts_with(prefix))
            .map(|(_, kv)| kv.clone())
            .collect();
        Ok(Snapshot { kvs, revision: state.revision })
    }

    async fn txn(&self, txn: Txn) -> Result<TxnResponse> {
        txn.validate()?;
        let mut state = self.state();
        let succeeded = txn.compares.iter().all(|c| state.holds(c));
        let ops = if succeeded { txn.success } else { txn.failure };
        for op in &ops {
            if let Op::Put { lease: Some(lease), .. } = op
                && !state.leases.contains_key(lease)
            {
                return Err(KeyspaceError::LeaseNotFound(*lease));
            }
        }
        if ops.is_empty() {
            return Ok(TxnResponse { succeeded, revision: state.revision });
        }
        state.revision += 1;
        let revision = state.revision;
        for op in ops {
            match op {
                Op::Put { key, value, lease } => state.put(key, value, lease, revision),
                Op::Delete(key) => state.delete(&key, revision),
                Op::DeletePrefix(prefix) => {
                    let keys: Vec<String> = state
                        .kvs
                        .range(prefix.clone()..)
                        .take_while(|(k, _)| k.starts_with(&prefix))
                        .map(|(k, _)| k.clone())
                        .collect();
                    for key in keys {
                        state.delete(&key, revision);
                    }
                }
            }
        }
        Ok(TxnResponse { succeeded, revision })
    }

    async fn grant(&self, ttl: Duration) -> Result<LeaseId> {
        let mut state = self.state();
        state.next_lease += 1;
        let id = state.next_lease;
        state.leases.insert(id, Lease { ttl, deadline: Instant::now() + ttl });
        Ok(id)
    }

    async fn keep_alive(&self, lease: LeaseId) -> Result<()> {
        let mut state = self.state();
        let l = state.leases.get_mut(&lease).ok_or(KeyspaceError::LeaseNotFound(lease))?;
        l.deadline = Instant::now() + l.ttl;
        Ok(())
    }

    async fn revoke(&self, lease: LeaseId) -> Result<()> {
        let mut state = self.state();
        if !state.leases.contains_key(&lease) {
            return Err(KeyspaceError::LeaseNotFound(lease));
        }
        state.end_lease(lease);
        Ok(())
    }

    async fn watch(&self, prefix: &str, from_revision: i64) -> Result<WatchStream> {
        let mut state = self.state();
        if from_revision <= state.compacted_through {
            return Err(KeyspaceError::Compacted { requested: from_revision, oldest: state.compacted_through + 1 });
        }
        let (tx, rx) = mpsc::unbounded_channel();
        for event in state.history.iter().filter(|e| e.revision() >= from_revision && e.key().starts_with(prefix)) {
            // The receiver is ours until returned: sending cannot fail.
            let _ = tx.send(Ok(event.clone()));
        }
        state.watchers.push(Watcher { prefix: prefix.to_owned(), events: tx });
        Ok(rx)
    }
}
