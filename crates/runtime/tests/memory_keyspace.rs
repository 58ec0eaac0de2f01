//! The embedded keyspace against the keyspace contract (the same checks the
//! etcd implementation runs).

use kshard_runtime::keyspace::MemoryKeyspace;
use kshard_runtime::keyspace::conformance;

#[tokio::test]
async fn the_embedded_keyspace_keeps_the_contract() {
    let ks = MemoryKeyspace::new();
    conformance::run_all(&ks, "/kshard-test").await;
}

#[tokio::test(start_paused = true)]
async fn leases_expire_on_tokios_clock() {
    use kshard_runtime::keyspace::{Keyspace, Op, Txn};
    use std::time::Duration;
    let ks = MemoryKeyspace::new();
    let lease = ks.grant(Duration::from_secs(10)).await.expect("grant");
    ks.txn(Txn::ops(vec![Op::Put { key: "/m".into(), value: vec![], lease: Some(lease) }])).await.expect("put");
    tokio::time::advance(Duration::from_secs(9)).await;
    ks.keep_alive(lease).await.expect("still alive at 9 s");
    tokio::time::advance(Duration::from_secs(9)).await;
    assert_eq!(ks.get_prefix("/m").await.expect("get").kvs.len(), 1, "renewed at 9 s: alive at 18 s");
    tokio::time::advance(Duration::from_secs(2)).await;
    assert!(ks.get_prefix("/m").await.expect("get").kvs.is_empty(), "expired at 19 s");
}
