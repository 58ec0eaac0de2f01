//! A keyspace behind a [`Gate`]: a closed gate fails every call and ends
//! every watch; a held one makes calls wait and holds back watch events.

use std::time::Duration;

use super::{Closed, Gate, Passage};
use crate::keyspace::{Keyspace, KeyspaceError, LeaseId, Result, Snapshot, Txn, TxnResponse, WatchStream};

/// `K` as a member behind `gate` reaches it.
#[derive(Debug, Clone)]
pub struct GatedKeyspace<K> {
    inner: K,
    gate: Gate,
}

impl<K: Keyspace> GatedKeyspace<K> {
    /// `inner`, reached through `gate`.
    pub fn new(inner: K, gate: Gate) -> Self {
        GatedKeyspace { inner, gate }
    }

    async fn pass(&self) -> Result<()> {
        self.gate.pass().await.map_err(|e| KeyspaceError::Unavailable(e.to_string()))
    }
}

impl<K: Keyspace> Keyspace for GatedKeyspace<K> {
    async fn get_prefix(&self, prefix: &str) -> Result<Snapshot> {
        self.pass().await?;
        self.inner.get_prefix(prefix).await
    }

    async fn txn(&self, txn: Txn) -> Result<TxnResponse> {
        self.pass().await?;
        self.inner.txn(txn).await
    }

    async fn grant(&self, ttl: Duration) -> Result<LeaseId> {
        self.pass().await?;
        self.inner.grant(ttl).await
    }

    async fn keep_alive(&self, lease: LeaseId) -> Result<()> {
        self.pass().await?;
        self.inner.keep_alive(lease).await
    }

    async fn revoke(&self, lease: LeaseId) -> Result<()> {
        self.pass().await?;
        self.inner.revoke(lease).await
    }

    async fn watch(&self, prefix: &str, from_revision: i64) -> Result<WatchStream> {
        self.pass().await?;
        let mut events = self.inner.watch(prefix, from_revision).await?;
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        let gate = self.gate.clone();
        // Forwards while the gate is open; a closed gate ends the watch with
        // an error, as a broken connection does.
        tokio::spawn(async move {
            loop {
                let now = gate.now();
                if now == Passage::Closed {
                    let _ = tx.send(Err(KeyspaceError::Unavailable(Closed.to_string())));
                    return;
                }
                let event = tokio::select! {
                    () = tx.closed() => return,
                    event = events.recv() => event,
                    () = gate.left(now) => continue,
                };
                let Some(event) = event else { return };
                if let Err(e) = gate.pass().await {
                    let _ = tx.send(Err(KeyspaceError::Unavailable(e.to_string())));
                    return;
                }
                if tx.send(event).is_err() {
                    return;
                }
            }
        });
        Ok(rx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::keyspace::memory::MemoryKeyspace;
    use crate::keyspace::{Op, WatchEvent};

    #[tokio::test]
    async fn an_open_gate_keeps_the_contract() {
        let ks = GatedKeyspace::new(MemoryKeyspace::new(), Gate::default());
        crate::keyspace::conformance::run_all(&ks, "/gated").await;
    }

    #[tokio::test(start_paused = true)]
    async fn a_held_gate_holds_watch_events_and_a_closed_one_ends_the_watch() {
        let inner = MemoryKeyspace::new();
        let gate = Gate::default();
        let ks = GatedKeyspace::new(inner.clone(), gate.clone());
        let mut watch = ks.watch("/w/", 1).await.expect("watches");
        gate.set(Passage::Held);
        let put = |k: &str| Txn::ops(vec![Op::Put { key: k.into(), value: vec![], lease: None }]);
        inner.txn(put("/w/a")).await.expect("puts");
        let held = tokio::time::timeout(Duration::from_secs(5), watch.recv()).await;
        assert!(held.is_err(), "nothing while held");
        gate.set(Passage::Open);
        let event = watch.recv().await.expect("an event").expect("ok");
        assert!(matches!(event, WatchEvent::Put(kv) if kv.key == "/w/a"));
        gate.set(Passage::Closed);
        assert!(matches!(watch.recv().await, Some(Err(KeyspaceError::Unavailable(_)))));
        assert!(ks.get_prefix("/w/").await.is_err(), "calls fail while closed");
    }
}
