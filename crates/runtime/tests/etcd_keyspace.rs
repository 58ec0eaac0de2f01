//! The etcd keyspace against the keyspace contract — the same checks the
//! embedded keyspace passes — on the real etcd (`scripts/etcd.sh`).

use kshard_runtime::keyspace::conformance;
use kshard_runtime::keyspace::etcd::EtcdKeyspace;
use kshard_testkit::{Etcd, unique_name};

#[tokio::test]
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
