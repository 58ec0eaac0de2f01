//! Status writes against both keyspaces: reduced with the stored status,
//! revision-checked against a concurrent change of the assignment (retried, the
//! allocator's slot kept), refused once the assignment is gone or replaced, and
//! abandoned when the replica's context ends.

use std::future::pending;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use kshard_runtime::AssignmentValue;
use kshard_runtime::internals::{StatusWriteError, write_status};
use kshard_runtime::keyspace::EtcdKeyspace;
use kshard_runtime::keyspace::MemoryKeyspace;
use kshard_runtime::keyspace::{Keyspace, KeyspaceError, LeaseId, Op, Result, Snapshot, Txn, TxnResponse, WatchStream};
use kshard_runtime::{ReplicaCode, ReplicaStatus};
use kshard_testkit::{Etcd, unique_name};

async fn assign<K: Keyspace>(ks: &K, key: &str, slot: u32) -> i64 {
    let value = AssignmentValue { slot, status: ReplicaStatus::new(ReplicaCode::Idle) };
    let op = Op::Put { key: key.to_owned(), value: serde_json::to_vec(&value).expect("json"), lease: None };
    ks.txn(Txn::ops(vec![op])).await.expect("assign").revision
}

async fn stored<K: Keyspace>(ks: &K, key: &str) -> AssignmentValue {
    let kv = ks.get_prefix(key).await.expect("get").kvs.into_iter().find(|kv| kv.key == key).expect("exists");
    serde_json::from_slice(&kv.value).expect("an assignment value")
}

async fn reduces_and_refuses<K: Keyspace>(ks: &K, prefix: &str) {
    let key = format!("{prefix}/assign/s#z#m");
    let created = assign(ks, &key, 1).await;
    let standby = ReplicaStatus::new(ReplicaCode::Standby);
    let w = write_status(ks, &key, created, &standby, pending()).await.expect("written");
    assert_eq!(w.status, standby);
    assert_eq!(stored(ks, &key).await, AssignmentValue { slot: 1, status: standby.clone() });
    // A late BACKFILL changes nothing; FAILED sticks and gathers errors.
    let w = write_status(ks, &key, created, &ReplicaStatus::new(ReplicaCode::Backfill), pending()).await.expect("ok");
    assert_eq!(w.status, standby);
    write_status(ks, &key, created, &ReplicaStatus::failed("a"), pending()).await.expect("written");
    let w = write_status(ks, &key, created, &ReplicaStatus::failed("b"), pending()).await.expect("written");
    assert_eq!(w.status.errors, ["a", "b"]);
    // Replaced (a new create revision), then removed: the status has nowhere to go.
    ks.txn(Txn::ops(vec![Op::Delete(key.clone())])).await.expect("delete");
    let err = write_status(ks, &key, created, &standby, pending()).await.expect_err("gone");
    assert_eq!(err, StatusWriteError::AssignmentGone { key: key.clone() });
    assign(ks, &key, 1).await;
    let err = write_status(ks, &key, created, &standby, pending()).await.expect_err("replaced");
    assert_eq!(err, StatusWriteError::AssignmentGone { key: key.clone() });
    ks.txn(Txn::ops(vec![Op::DeletePrefix(format!("{prefix}/"))])).await.expect("clean up");
}

#[tokio::test]
async fn status_writes_reduce_and_refuse_on_the_embedded_keyspace() {
    reduces_and_refuses(&MemoryKeyspace::new(), "/status-it").await;
}

#[tokio::test]
#[ignore = "needs the real broker or etcd: scripts/test.sh runs it (or cargo test -- --include-ignored)"]
async fn status_writes_reduce_and_refuse_on_etcd() {
    let etcd = Etcd::from_env_or_start();
    let ks = EtcdKeyspace::connect(&[etcd.endpoint().to_owned()]).await.expect("connects");
    reduces_and_refuses(&ks, &format!("/{}", unique_name("status-it"))).await;
}

/// A keyspace whose first transaction is preceded by the allocator promoting
/// the replica (slot 1 → 0): the status write's revision check must fail once.
struct Racing {
    inner: MemoryKeyspace,
    key: String,
    raced: AtomicBool,
}

impl Keyspace for Racing {
    async fn get_prefix(&self, prefix: &str) -> Result<Snapshot> {
        self.inner.get_prefix(prefix).await
    }
    async fn txn(&self, txn: Txn) -> Result<TxnResponse> {
        if !self.raced.swap(true, Ordering::SeqCst) {
            let promoted = AssignmentValue { slot: 0, status: ReplicaStatus::new(ReplicaCode::Idle) };
            let op =
                Op::Put { key: self.key.clone(), value: serde_json::to_vec(&promoted).expect("json"), lease: None };
            self.inner.txn(Txn::ops(vec![op])).await?;
        }
        self.inner.txn(txn).await
    }
    async fn grant(&self, ttl: Duration) -> Result<LeaseId> {
        self.inner.grant(ttl).await
    }
    async fn keep_alive(&self, lease: LeaseId) -> Result<()> {
        self.inner.keep_alive(lease).await
    }
    async fn revoke(&self, lease: LeaseId) -> Result<()> {
        self.inner.revoke(lease).await
    }
    async fn watch(&self, prefix: &str, from: i64) -> Result<WatchStream> {
        self.inner.watch(prefix, from).await
    }
}

#[tokio::test]
async fn a_concurrent_promotion_is_kept_and_the_status_written_after_a_retry() {
    let key = "/a/assign/s#z#m".to_owned();
    let ks = Racing { inner: MemoryKeyspace::new(), key: key.clone(), raced: AtomicBool::new(true) };
    let created = assign(&ks.inner, &key, 1).await;
    ks.raced.store(false, Ordering::SeqCst);
    let standby = ReplicaStatus::new(ReplicaCode::Standby);
    let w = write_status(&ks, &key, created, &standby, pending()).await.expect("written");
    assert_eq!(w.attempts, 2, "the first write lost the race and was retried");
    assert_eq!(stored(&ks.inner, &key).await, AssignmentValue { slot: 0, status: standby });
}

/// A keyspace that cannot be reached.
struct Down;

impl Keyspace for Down {
    async fn get_prefix(&self, _: &str) -> Result<Snapshot> {
        Err(KeyspaceError::Unavailable("down".into()))
    }
    async fn txn(&self, _: Txn) -> Result<TxnResponse> {
        Err(KeyspaceError::Unavailable("down".into()))
    }
    async fn grant(&self, _: Duration) -> Result<LeaseId> {
        Err(KeyspaceError::Unavailable("down".into()))
    }
    async fn keep_alive(&self, _: LeaseId) -> Result<()> {
        Err(KeyspaceError::Unavailable("down".into()))
    }
    async fn revoke(&self, _: LeaseId) -> Result<()> {
        Err(KeyspaceError::Unavailable("down".into()))
    }
    async fn watch(&self, _: &str, _: i64) -> Result<WatchStream> {
        Err(KeyspaceError::Unavailable("down".into()))
    }
}

#[tokio::test(start_paused = true)]
async fn an_unreachable_keyspace_is_retried_with_backoff_until_the_context_ends() {
    let started = tokio::time::Instant::now();
    let until = tokio::time::sleep(Duration::from_secs(20));
    let err = write_status(&Down, "/k", 1, &ReplicaStatus::new(ReplicaCode::Standby), until).await.expect_err("stops");
    assert_eq!(err, StatusWriteError::Stopped { key: "/k".into(), last: "keyspace unavailable: down".into() });
    // 0 + 0 + 5 ms + 2 + 3 + 4 + 5 s = 14.005 s of attempts, then waiting for
    // the next at 19.005 s; stopped at 20 s on the paused clock.
    assert_eq!(started.elapsed(), Duration::from_secs(20));
}
