//! The etcd keyspace against the keyspace contract — the same checks the
//! embedded keyspace passes — on the real etcd (`scripts/etcd.sh`).

use kshard_runtime::keyspace::EtcdKeyspace;
use kshard_runtime::keyspace::conformance;
use kshard_testkit::{Etcd, unique_name};

#[tokio::test]
#[ignore = "needs the real broker or etcd: scripts/test.sh runs it (or cargo test -- --include-ignored)"]
async fn the_etcd_keyspace_keeps_the_contract() {
    let etcd = Etcd::from_env_or_start();
    let ks = EtcdKeyspace::connect(&[etcd.endpoint().to_owned()]).await.expect("connects to etcd");
    let prefix = format!("/{}", unique_name("kshard-test"));
    conformance::run_all(&ks, &prefix).await;
}

async fn next(w: &mut kshard_runtime::keyspace::WatchStream) -> kshard_runtime::keyspace::WatchEvent {
    tokio::time::timeout(std::time::Duration::from_secs(30), w.recv())
        .await
        .expect("an event within 30 s")
        .expect("the watch goes on")
        .expect("no error")
}

#[tokio::test]
#[ignore = "needs the real broker or etcd: scripts/test.sh runs it (or cargo test -- --include-ignored)"]
async fn a_watch_survives_an_etcd_restart_without_losing_or_repeating_changes() {
    use kshard_runtime::keyspace::{Keyspace, Op, Txn, WatchEvent};
    use std::time::Duration;
    let etcd = Etcd::start_private();
    let ks = EtcdKeyspace::connect(&[etcd.endpoint().to_owned()]).await.expect("connects to etcd");
    let put = |k: &str| Txn::ops(vec![Op::Put { key: format!("/w/{k}"), value: vec![], lease: None }]);
    let r1 = ks.txn(put("1")).await.expect("put").revision;
    let mut watch = ks.watch("/w/", r1).await.expect("watch");
    assert!(matches!(next(&mut watch).await, WatchEvent::Put(kv) if kv.key == "/w/1"));
    etcd.kill();
    etcd.resume();
    // Writes retry until etcd answers again.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    let r2 = loop {
        match ks.txn(put("2")).await {
            Ok(r) => break r.revision,
            Err(e) => {
                assert!(tokio::time::Instant::now() < deadline, "etcd did not come back: {e}");
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    };
    // The same stream goes on: the change after the restart, and nothing twice.
    match next(&mut watch).await {
        WatchEvent::Put(kv) => assert_eq!((kv.key.as_str(), kv.mod_revision), ("/w/2", r2)),
        other => panic!("expected /w/2, got {other:?}"),
    }
}

/// Waits up to 10 s for etcd to hold `want` watchers.
async fn watchers_become(etcd: &Etcd, want: f64) {
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let now = etcd.watchers();
        if now == want {
            return;
        }
        assert!(tokio::time::Instant::now() < deadline, "etcd holds {now} watchers, not {want}");
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}

#[tokio::test]
#[ignore = "needs the real broker or etcd: scripts/test.sh runs it (or cargo test -- --include-ignored)"]
async fn a_watch_dropped_on_a_quiet_keyspace_leaves_no_watcher_in_etcd() {
    use kshard_runtime::keyspace::Keyspace;
    let etcd = Etcd::start_private();
    let ks = EtcdKeyspace::connect(&[etcd.endpoint().to_owned()]).await.expect("connects to etcd");
    let before = etcd.watchers();
    let mut watches = Vec::new();
    for _ in 0..10 {
        watches.push(ks.watch("/quiet/", 1).await.expect("watch"));
    }
    watchers_become(&etcd, before + 10.0).await;
    // Nothing changes under the prefix: the watches must end on their drop.
    drop(watches);
    watchers_become(&etcd, before).await;
}

#[tokio::test]
#[ignore = "needs the real broker or etcd: scripts/test.sh runs it (or cargo test -- --include-ignored)"]
async fn the_allocator_of_a_quiet_cluster_holds_one_watch() {
    use kshard_runtime::Keys;
    use kshard_runtime::internals::AllocatorRunner;
    use kshard_runtime::internals::Leadership;
    use kshard_runtime::keyspace::{Keyspace, Op, Txn};
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::time::Duration;
    let etcd = Etcd::start_private();
    let ks = Arc::new(EtcdKeyspace::connect(&[etcd.endpoint().to_owned()]).await.expect("connects to etcd"));
    let before = etcd.watchers();
    let keys = Keys::new("/quiet");
    let put = Op::Put { key: keys.leader(), value: b"me".to_vec(), lease: None };
    let created = ks.txn(Txn::ops(vec![put])).await.expect("the leader key").revision;
    let term = Leadership { key: keys.leader(), created };
    let leading = Arc::new(AtomicBool::new(true));
    let (ks2, lead) = (Arc::clone(&ks), Arc::clone(&leading));
    let allocator = tokio::spawn(async move {
        AllocatorRunner::default().run(&*ks2, &keys, &term, || lead.load(Ordering::SeqCst)).await
    });
    // A round a second: before the fix, a watcher more each second.
    for _ in 0..3 {
        tokio::time::sleep(Duration::from_secs(2)).await;
        assert_eq!(etcd.watchers(), before + 1.0, "one watch, kept across rounds");
    }
    leading.store(false, Ordering::SeqCst);
    allocator.await.expect("the allocator's task").expect("rounds");
    watchers_become(&etcd, before).await;
}

/// `kshard shards apply`'s write, on the real etcd: two operators plan from
/// the same read; the first's changes are written, the second's are refused
/// at write time by etcd's revision compare (its plan, made before the
/// first wrote, saw nothing stale), and nothing of it is written.
#[tokio::test]
#[ignore = "needs the real broker or etcd: scripts/test.sh runs it (or cargo test -- --include-ignored)"]
async fn two_operators_applying_from_one_read_are_told_apart_by_etcd() {
    use kshard_runtime::shard_specs::{ApplyError, Desired, apply, plan, read};
    use kshard_runtime::{Keys, RecoveryLog, ShardSpec, Source};
    let etcd = Etcd::from_env_or_start();
    let ks = EtcdKeyspace::connect(&[etcd.endpoint().to_owned()]).await.expect("connects to etcd");
    let keys = Keys::new(&format!("/{}", unique_name("kshard-apply")));
    let spec = |standbys| {
        let source = Source { topic: "t".into(), partition: 0, min_offset: 0 };
        ShardSpec {
            hot_standbys: standbys,
            ..ShardSpec::new("s", vec![source], RecoveryLog { topic: "l".into(), partition: 0 })
        }
    };
    let put = |spec| Desired::Put { spec, revision: None };
    apply(&ks, &keys, &plan(&[], &[put(spec(0))]).expect("a plan")).await.expect("created");
    let read_once = read(&ks, &keys).await.expect("reads");
    let first = plan(&read_once, &[put(spec(1))]).expect("a plan");
    let second = plan(&read_once, &[put(spec(2))]).expect("a plan");
    apply(&ks, &keys, &first).await.expect("the first writes");
    let refused = apply(&ks, &keys, &second).await;
    assert!(matches!(refused, Err(ApplyError::Conflict { written: 0, total: 1 })), "{refused:?}");
    assert_eq!(read(&ks, &keys).await.expect("reads")[0].spec.hot_standbys, 1, "the first operator's");
}
