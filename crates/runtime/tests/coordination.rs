//! Members, the leader and the allocator at work, on both keyspaces: members
//! join under leases, one is elected, the allocator assigns every shard its
//! replicas on distinct members with one primary; when a member leaves, its
//! assignments go with its lease, a standby is promoted, and the leadership
//! passes on; a member that joins gets work. A leader whose term ends between
//! a round's read and its write writes nothing.

use std::sync::Arc;
use std::time::Duration;

use kshard_runtime::internals::AllocatorRunner;
use kshard_runtime::internals::write_status;
use kshard_runtime::internals::{Leadership, Membership, become_leader};
use kshard_runtime::keyspace::EtcdKeyspace;
use kshard_runtime::keyspace::MemoryKeyspace;
use kshard_runtime::keyspace::{Keyspace, Op, Txn};
use kshard_runtime::{AssignmentValue, Keys, MemberSpec, RecoveryLog, ShardSpec, Source};
use kshard_runtime::{ReplicaCode, ReplicaStatus};
use kshard_testkit::{Etcd, unique_name};

fn spec(id: &str, hot_standbys: u32) -> ShardSpec {
    ShardSpec {
        hot_standbys,
        ..ShardSpec::new(
            id,
            vec![Source { topic: "t".into(), partition: 0, min_offset: 0 }],
            RecoveryLog { topic: "log".into(), partition: 0 },
        )
    }
}

/// (shard, member) → (slot, code), from the keyspace.
async fn assignments<K: Keyspace>(ks: &K, keys: &Keys) -> Vec<(String, String, u32, ReplicaCode)> {
    let mut out: Vec<_> = ks
        .get_prefix(&keys.assignments())
        .await
        .expect("read")
        .kvs
        .into_iter()
        .map(|kv| {
            let a = keys.parse_assignment(&kv.key).expect("parses");
            let v: AssignmentValue = serde_json::from_slice(&kv.value).expect("a value");
            (a.shard, a.member, v.slot, v.status.code)
        })
        .collect();
    out.sort();
    out
}

async fn settle<K: Keyspace>(ks: &K, keys: &Keys, runner: &mut AllocatorRunner, term: &Leadership) {
    for _ in 0..20 {
        let round = runner.round(ks, keys, term).await.expect("round");
        if round.changes.is_empty() {
            return;
        }
    }
    panic!("the allocator did not settle in 20 rounds");
}

/// Every replica reports itself caught up: STANDBY, or PRIMARY in slot 0.
async fn catch_up<K: Keyspace>(ks: &K, keys: &Keys) {
    for kv in ks.get_prefix(&keys.assignments()).await.expect("read").kvs {
        let v: AssignmentValue = serde_json::from_slice(&kv.value).expect("a value");
        let code = if v.slot == 0 { ReplicaCode::Primary } else { ReplicaCode::Standby };
        write_status(ks, &kv.key, kv.create_revision, &ReplicaStatus::new(code), std::future::pending())
            .await
            .expect("status written");
    }
}

async fn coordination<K: Keyspace>(ks: Arc<K>, root: &str) {
    let keys = Keys::new(root);
    for s in [spec("a", 1), spec("b", 0), spec("c", 1)] {
        let put = Op::Put { key: keys.shard(&s.id), value: serde_json::to_vec(&s).expect("json"), lease: None };
        ks.txn(Txn::ops(vec![put])).await.expect("spec");
    }
    let member = |id: &str, zone: &str| MemberSpec { id: id.into(), zone: zone.into(), shard_limit: 5, endpoint: None };
    let ttl = Duration::from_secs(10);
    let m1 = Membership::join(Arc::clone(&ks), &keys, member("m1", "z1"), ttl).await.expect("m1 joins");
    let m2 = Membership::join(Arc::clone(&ks), &keys, member("m2", "z2"), ttl).await.expect("m2 joins");
    assert!(Membership::join(Arc::clone(&ks), &keys, member("m2", "z2"), ttl).await.is_err(), "one m2 at a time");
    let term = become_leader(&*ks, &keys, &m1).await.expect("election").expect("m1 leads");

    let mut runner = AllocatorRunner::default();
    settle(&*ks, &keys, &mut runner, &term).await;
    let a = assignments(&*ks, &keys).await;
    assert_eq!(a.len(), 2 + 1 + 2, "every shard has its replicas: {a:?}");
    for shard in ["a", "b", "c"] {
        let primaries = a.iter().filter(|(s, _, slot, _)| s == shard && *slot == 0).count();
        assert_eq!(primaries, 1, "{shard} has one primary: {a:?}");
    }
    catch_up(&*ks, &keys).await;
    assert!(runner.round(&*ks, &keys, &term).await.expect("round").changes.is_empty(), "nothing to do");

    // m2 leaves: its assignments go with its lease; standbys on m1 are promoted.
    m2.leave(&*ks).await.expect("leaves");
    settle(&*ks, &keys, &mut runner, &term).await;
    let a = assignments(&*ks, &keys).await;
    assert!(a.iter().all(|(_, m, _, _)| m == "m1"), "only m1 is left: {a:?}");
    for shard in ["a", "b", "c"] {
        assert!(a.iter().any(|(s, _, slot, _)| s == shard && *slot == 0), "{shard} has a primary on m1: {a:?}");
    }

    // m3 joins and gets the standbys back.
    let m3 = Membership::join(Arc::clone(&ks), &keys, member("m3", "z2"), ttl).await.expect("m3 joins");
    settle(&*ks, &keys, &mut runner, &term).await;
    let a = assignments(&*ks, &keys).await;
    assert_eq!(a.iter().filter(|(_, m, _, _)| m == "m3").count(), 2, "a and c get standbys on m3: {a:?}");

    // The leader leaves: m3 is elected.
    m1.leave(&*ks).await.expect("leaves");
    let elected = tokio::time::timeout(Duration::from_secs(30), become_leader(&*ks, &keys, &m3)).await;
    let m3_term = elected.expect("elected within 30 s").expect("election").expect("m3 leads");
    // m1's runner, resumed after a pause in which it lost its term: it writes
    // nothing beside m3's, though the keyspace changed (m1 left).
    let deposed = runner.round(&*ks, &keys, &term).await.expect("a round");
    assert!(!deposed.led && deposed.changes.is_empty(), "a deposed leader writes nothing: {deposed:?}");
    let mut m3_runner = AllocatorRunner::default();
    let round = m3_runner.round(&*ks, &keys, &m3_term).await.expect("a round");
    assert!(round.led && !round.changes.is_empty(), "the new leader moves m1's shards: {round:?}");
    m3.leave(&*ks).await.expect("leaves");
    ks.txn(Txn::ops(vec![Op::DeletePrefix(format!("{root}/"))])).await.expect("clean up");
    assert!(ks.get_prefix(&format!("{root}/")).await.expect("read").kvs.is_empty(), "no keys left behind");
}

#[tokio::test]
async fn members_leader_and_allocator_on_the_embedded_keyspace() {
    coordination(Arc::new(MemoryKeyspace::new()), "/coordination").await;
}

#[tokio::test]
#[ignore = "needs the real broker or etcd: scripts/test.sh runs it (or cargo test -- --include-ignored)"]
async fn members_leader_and_allocator_on_etcd() {
    let etcd = Etcd::from_env_or_start();
    let ks = EtcdKeyspace::connect(&[etcd.endpoint().to_owned()]).await.expect("connects");
    coordination(Arc::new(ks), &format!("/{}", unique_name("coordination"))).await;
}

/// Many shards and members at once (50 shards, a replica on each of three
/// members: 150 assignments) take several transactions within etcd's limit
/// of operations, and primaries end spread over the members.
async fn many_assignments_at_once<K: Keyspace>(ks: Arc<K>, root: &str) {
    let keys = Keys::new(root);
    let shards: Vec<ShardSpec> = (0..50).map(|i| spec(&format!("s{i:02}"), 1024)).collect();
    let puts: Vec<Op> = shards
        .iter()
        .map(|s| Op::Put { key: keys.shard(&s.id), value: serde_json::to_vec(s).expect("json"), lease: None })
        .collect();
    for chunk in puts.chunks(100) {
        ks.txn(Txn::ops(chunk.to_vec())).await.expect("specs");
    }
    let member = |id: &str| MemberSpec { id: id.into(), zone: "z".into(), shard_limit: u32::MAX, endpoint: None };
    let ttl = Duration::from_secs(10);
    let mut members = Vec::new();
    for id in ["m1", "m2", "m3"] {
        members.push(Membership::join(Arc::clone(&ks), &keys, member(id), ttl).await.expect("joins"));
    }
    let term = become_leader(&*ks, &keys, &members[0]).await.expect("election").expect("leads");
    let mut runner = AllocatorRunner::default();
    // Rounds until quiet, the replicas catching up between them.
    for round in 0.. {
        assert!(round < 200, "no quiescence");
        let changes = runner.round(&*ks, &keys, &term).await.expect("a round within etcd's limits").changes;
        catch_up(&*ks, &keys).await;
        if changes.is_empty() {
            break;
        }
    }
    let a = assignments(&*ks, &keys).await;
    assert_eq!(a.len(), 150, "a replica of every shard on every member");
    for m in ["m1", "m2", "m3"] {
        let primaries = a.iter().filter(|(_, member, slot, _)| member == m && *slot == 0).count();
        assert!((16..=17).contains(&primaries), "{m} holds {primaries} primaries: primaries spread");
    }
    for m in members {
        m.leave(&*ks).await.expect("leaves");
    }
    ks.txn(Txn::ops(vec![Op::DeletePrefix(format!("{root}/"))])).await.expect("clean up");
}

#[tokio::test]
async fn many_assignments_at_once_on_the_embedded_keyspace() {
    many_assignments_at_once(Arc::new(MemoryKeyspace::new()), "/many").await;
}

#[tokio::test]
#[ignore = "needs the real broker or etcd: scripts/test.sh runs it (or cargo test -- --include-ignored)"]
async fn many_assignments_at_once_on_etcd() {
    let etcd = Etcd::from_env_or_start();
    let ks = EtcdKeyspace::connect(&[etcd.endpoint().to_owned()]).await.expect("connects");
    many_assignments_at_once(Arc::new(ks), &format!("/{}", unique_name("many"))).await;
}

/// The embedded keyspace, where another leader takes over just before the
/// first transaction: the term a round read under ends between its read and
/// its write, as when a leader pauses there past its lease.
#[derive(Clone)]
struct Usurped {
    inner: MemoryKeyspace,
    leader: String,
    usurped: Arc<std::sync::atomic::AtomicBool>,
}

impl Keyspace for Usurped {
    async fn get_prefix(&self, prefix: &str) -> kshard_runtime::keyspace::Result<kshard_runtime::keyspace::Snapshot> {
        self.inner.get_prefix(prefix).await
    }
    async fn txn(&self, txn: Txn) -> kshard_runtime::keyspace::Result<kshard_runtime::keyspace::TxnResponse> {
        if !self.usurped.swap(true, std::sync::atomic::Ordering::SeqCst) {
            let again = Op::Put { key: self.leader.clone(), value: b"usurper".to_vec(), lease: None };
            self.inner.txn(Txn::ops(vec![Op::Delete(self.leader.clone())])).await?;
            self.inner.txn(Txn::ops(vec![again])).await?;
        }
        self.inner.txn(txn).await
    }
    async fn grant(&self, ttl: Duration) -> kshard_runtime::keyspace::Result<i64> {
        self.inner.grant(ttl).await
    }
    async fn keep_alive(&self, lease: i64) -> kshard_runtime::keyspace::Result<()> {
        self.inner.keep_alive(lease).await
    }
    async fn revoke(&self, lease: i64) -> kshard_runtime::keyspace::Result<()> {
        self.inner.revoke(lease).await
    }
    async fn watch(
        &self,
        prefix: &str,
        from: i64,
    ) -> kshard_runtime::keyspace::Result<kshard_runtime::keyspace::WatchStream> {
        self.inner.watch(prefix, from).await
    }
}

#[tokio::test]
async fn a_round_whose_term_ends_before_its_write_writes_nothing() {
    let keys = Keys::new("/usurped");
    let inner = MemoryKeyspace::new();
    let s = spec("a", 1);
    let put = Op::Put { key: keys.shard(&s.id), value: serde_json::to_vec(&s).expect("json"), lease: None };
    inner.txn(Txn::ops(vec![put])).await.expect("spec");
    let ks = Arc::new(inner.clone());
    let member = |id: &str| MemberSpec { id: id.into(), zone: id.into(), shard_limit: 5, endpoint: None };
    let ttl = Duration::from_secs(10);
    let m1 = Membership::join(Arc::clone(&ks), &keys, member("m1"), ttl).await.expect("m1 joins");
    let _m2 = Membership::join(Arc::clone(&ks), &keys, member("m2"), ttl).await.expect("m2 joins");
    let term = become_leader(&*ks, &keys, &m1).await.expect("election").expect("m1 leads");
    let usurped = Usurped { inner: inner.clone(), leader: keys.leader(), usurped: Arc::default() };
    let round = AllocatorRunner::default().round(&usurped, &keys, &term).await.expect("a round");
    assert!(round.led && !round.applied, "read under its term, refused at the write: {round:?}");
    assert!(assignments(&inner, &keys).await.is_empty(), "nothing written beside the new leader");
}
