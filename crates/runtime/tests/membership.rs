//! A member's lease on a clock the test drives: it is declared lost a TTL
//! after the last renewal that got through, not a TTL after the first that
//! failed. The keyspace is the embedded one behind a fault gate that makes it
//! unreachable.

use std::sync::Arc;
use std::time::Duration;

use kshard_runtime::faults::{Gate, GatedKeyspace, Passage};
use kshard_runtime::internals::Membership;
use kshard_runtime::keyspace::MemoryKeyspace;
use kshard_runtime::{Keys, MemberSpec};
use tokio::time::Instant;

/// The embedded keyspace behind a gate the test opens and closes.
fn switched() -> (GatedKeyspace<MemoryKeyspace>, Gate) {
    let gate = Gate::default();
    (GatedKeyspace::new(MemoryKeyspace::new(), gate.clone()), gate)
}

fn spec() -> MemberSpec {
    MemberSpec { id: "m1".into(), zone: "z".into(), shard_limit: 10, endpoint: None }
}

#[tokio::test(start_paused = true)]
async fn a_lease_is_lost_a_ttl_after_its_last_renewal() {
    let (ks, gate) = switched();
    let ttl = Duration::from_secs(9);
    let start = Instant::now();
    let member = Membership::join(Arc::new(ks.clone()), &Keys::new("/t"), spec(), ttl).await.expect("joins");
    let mut lost = member.lost();
    // Renewals at 3 s and 6 s get through; the keyspace goes away at 7 s.
    tokio::time::sleep(Duration::from_secs(7)).await;
    gate.set(Passage::Closed);
    lost.wait_for(|l| *l).await.expect("the renewer reports");
    let at = start.elapsed();
    // The last renewal that got through was sent at 6 s: the keyspace may end
    // the lease from 15 s. Counting from the first failed one (9 s) said 18 s.
    assert!(at >= Duration::from_secs(15) && at <= Duration::from_millis(15_100), "declared lost at {at:?}");
}

#[tokio::test(start_paused = true)]
async fn a_lease_renewed_through_short_outages_is_kept() {
    let (ks, gate) = switched();
    let ttl = Duration::from_secs(9);
    let member = Membership::join(Arc::new(ks.clone()), &Keys::new("/t"), spec(), ttl).await.expect("joins");
    for _ in 0..10 {
        gate.set(Passage::Closed);
        tokio::time::sleep(Duration::from_secs(5)).await;
        gate.set(Passage::Open);
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    assert!(!*member.lost().borrow(), "outages of 5 s under a TTL of 9 s lose nothing");
}
