//! A member's lease on a clock the test drives: it is declared lost a TTL
//! after the last renewal that got through, not a TTL after the first that
//! failed. The keyspace is the embedded one behind a switch that makes it
//! unreachable.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use kshard_runtime::keyspace::memory::MemoryKeyspace;
use kshard_runtime::keyspace::{Keyspace, KeyspaceError, LeaseId, Result, Snapshot, Txn, TxnResponse, WatchStream};
use kshard_runtime::member::Membership;
use kshard_runtime::model::{Keys, MemberSpec};
use tokio::time::Instant;

/// The embedded keyspace, unreachable while `down` is set.
#[derive(Clone, Default)]
struct Switched {
    inner: MemoryKeyspace,
    down: Arc<AtomicBool>,
}

impl Switched {
    fn up(&self) -> Result<()> {
        if self.down.load(Ordering::SeqCst) {
            return Err(KeyspaceError::Unavailable("switched off by the test".into()));
        }
        Ok(())
    }
}

impl Keyspace for Switched {
    async fn get_prefix(&self, prefix: &str) -> Result<Snapshot> {
        self.up()?;
        self.inner.get_prefix(prefix).await
    }
    async fn txn(&self, txn: Txn) -> Result<TxnResponse> {
        self.up()?;
        self.inner.txn(txn).await
    }
    async fn grant(&self, ttl: Duration) -> Result<LeaseId> {
        self.up()?;
        self.inner.grant(ttl).await
    }
    async fn keep_alive(&self, lease: LeaseId) -> Result<()> {
        self.up()?;
        self.inner.keep_alive(lease).await
    }
    async fn revoke(&self, lease: LeaseId) -> Result<()> {
        self.up()?;
        self.inner.revoke(lease).await
    }
    async fn watch(&self, prefix: &str, from_revision: i64) -> Result<WatchStream> {
        self.up()?;
        self.inner.watch(prefix, from_revision).await
    }
}

fn spec() -> MemberSpec {
    MemberSpec { id: "m1".into(), zone: "z".into(), shard_limit: 10, endpoint: None }
}

#[tokio::test(start_paused = true)]
async fn a_lease_is_lost_a_ttl_after_its_last_renewal() {
    let ks = Switched::default();
    let ttl = Duration::from_secs(9);
    let start = Instant::now();
    let member = Membership::join(Arc::new(ks.clone()), &Keys::new("/t"), spec(), ttl).await.expect("joins");
    let mut lost = member.lost();
    // Renewals at 3 s and 6 s get through; the keyspace goes away at 7 s.
    tokio::time::sleep(Duration::from_secs(7)).await;
    ks.down.store(true, Ordering::SeqCst);
    lost.wait_for(|l| *l).await.expect("the renewer reports");
    let at = start.elapsed();
    // The last renewal that got through was sent at 6 s: the keyspace may end
    // the lease from 15 s. Counting from the first failed one (9 s) said 18 s.
    assert!(at >= Duration::from_secs(15) && at <= Duration::from_millis(15_100), "declared lost at {at:?}");
}

#[tokio::test(start_paused = true)]
async fn a_lease_renewed_through_short_outages_is_kept() {
    let ks = Switched::default();
    let ttl = Duration::from_secs(9);
    let member = Membership::join(Arc::new(ks.clone()), &Keys::new("/t"), spec(), ttl).await.expect("joins");
    for _ in 0..10 {
        ks.down.store(true, Ordering::SeqCst);
        tokio::time::sleep(Duration::from_secs(5)).await;
        ks.down.store(false, Ordering::SeqCst);
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    assert!(!*member.lost().borrow(), "outages of 5 s under a TTL of 9 s lose nothing");
}
