//! The [`Keyspace`] contract as checks, run against every implementation (the
//! embedded one and etcd) by their tests. Each check works under a prefix of
//! its caller's, so several may share one etcd; each panics with what broke.

use std::time::Duration;

use super::{Compare, KeyValue, Keyspace, KeyspaceError, Op, Txn, WatchEvent, WatchStream};

fn put(key: &str, value: &str) -> Op {
    Op::Put { key: key.to_owned(), value: value.as_bytes().to_vec(), lease: None }
}

async fn get<K: Keyspace>(ks: &K, key: &str) -> Option<KeyValue> {
    ks.get_prefix(key).await.expect("get").kvs.into_iter().find(|kv| kv.key == key)
}

async fn next(stream: &mut WatchStream) -> WatchEvent {
    tokio::time::timeout(Duration::from_secs(10), stream.recv())
        .await
        .expect("a watch event within 10 s")
        .expect("the watch goes on")
        .expect("no watch error")
}

/// Runs every check under `prefix` (which should be unique to the run).
pub async fn run_all<K: Keyspace>(ks: &K, prefix: &str) {
    revisions_and_versions(ks, &format!("{prefix}/rev/")).await;
    compare_and_swap(ks, &format!("{prefix}/cas/")).await;
    leases(ks, &format!("{prefix}/lease/")).await;
    watches(ks, &format!("{prefix}/watch/")).await;
}

/// Puts create keys at a revision, updates move the mod revision and version,
/// deletes remove them; reads see one revision and only their prefix.
pub async fn revisions_and_versions<K: Keyspace>(ks: &K, prefix: &str) {
    let a = format!("{prefix}a");
    let b = format!("{prefix}b");
    let created = ks.txn(Txn::ops(vec![put(&a, "1"), put(&b, "x")])).await.expect("put");
    assert!(created.succeeded);
    let kv = get(ks, &a).await.expect("a exists");
    assert_eq!((kv.create_revision, kv.mod_revision, kv.version), (created.revision, created.revision, 1));
    let updated = ks.txn(Txn::ops(vec![put(&a, "2")])).await.expect("update");
    assert!(updated.revision > created.revision);
    let kv = get(ks, &a).await.expect("a exists");
    assert_eq!((kv.create_revision, kv.mod_revision, kv.version), (created.revision, updated.revision, 2));
    assert_eq!(kv.value, b"2");
    let snapshot = ks.get_prefix(prefix).await.expect("range");
    assert_eq!(snapshot.kvs.iter().map(|kv| kv.key.as_str()).collect::<Vec<_>>(), [a.as_str(), b.as_str()]);
    assert!(snapshot.revision >= updated.revision);
    assert!(ks.get_prefix(&format!("{prefix}a/none")).await.expect("range").kvs.is_empty());
    ks.txn(Txn::ops(vec![Op::DeletePrefix(prefix.to_owned())])).await.expect("delete");
    assert!(ks.get_prefix(prefix).await.expect("range").kvs.is_empty());
}

/// A transaction applies its success or failure operations by its
/// comparisons, checked against one state.
pub async fn compare_and_swap<K: Keyspace>(ks: &K, prefix: &str) {
    let key = format!("{prefix}owner");
    let create = |who: &str| Txn {
        compares: vec![Compare::ModRevision(key.clone(), 0)],
        success: vec![put(&key, who)],
        failure: vec![],
    };
    assert!(ks.txn(create("first")).await.expect("txn").succeeded, "creating a missing key");
    assert!(!ks.txn(create("second")).await.expect("txn").succeeded, "the key exists now");
    let kv = get(ks, &key).await.expect("exists");
    assert_eq!(kv.value, b"first");
    // A write checked against a stale revision fails and runs the failure ops.
    let marker = format!("{prefix}lost");
    let stale = Txn {
        compares: vec![Compare::ModRevision(key.clone(), kv.mod_revision - 1)],
        success: vec![put(&key, "stale")],
        failure: vec![put(&marker, "yes")],
    };
    assert!(!ks.txn(stale).await.expect("txn").succeeded);
    assert!(get(ks, &marker).await.is_some(), "the failure branch ran");
    let fresh = Txn {
        compares: vec![
            Compare::ModRevision(key.clone(), kv.mod_revision),
            Compare::CreateRevision(key.clone(), kv.create_revision),
            Compare::Value(key.clone(), b"first".to_vec()),
        ],
        success: vec![put(&key, "second")],
        failure: vec![],
    };
    assert!(ks.txn(fresh).await.expect("txn").succeeded);
    assert_eq!(get(ks, &key).await.expect("exists").value, b"second");
    // One branch may not write a key twice (etcd's rule: deleting twice
    // included), nor under a prefix it deletes; nothing of it applies.
    let twice = Txn::ops(vec![Op::Delete(key.clone()), put(&key, "third")]);
    assert!(matches!(ks.txn(twice).await, Err(KeyspaceError::Invalid(_))));
    let under = Txn::ops(vec![Op::DeletePrefix(prefix.to_owned()), put(&key, "third")]);
    assert!(matches!(ks.txn(under).await, Err(KeyspaceError::Invalid(_))));
    assert_eq!(get(ks, &key).await.expect("exists").value, b"second");
    let twice = Txn::ops(vec![Op::Delete(marker.clone()), Op::Delete(marker.clone())]);
    assert!(matches!(ks.txn(twice).await, Err(KeyspaceError::Invalid(_))));
    ks.txn(Txn::ops(vec![Op::DeletePrefix(prefix.to_owned())])).await.expect("delete");
}

/// Keys under a lease go with it: when revoked, and when it expires unrenewed.
pub async fn leases<K: Keyspace>(ks: &K, prefix: &str) {
    let kept = ks.grant(Duration::from_secs(30)).await.expect("grant");
    let key = format!("{prefix}member");
    let under = |lease| Txn::ops(vec![Op::Put { key: key.clone(), value: b"m".to_vec(), lease: Some(lease) }]);
    ks.txn(under(kept)).await.expect("put under a lease");
    assert_eq!(get(ks, &key).await.expect("exists").lease, Some(kept));
    ks.keep_alive(kept).await.expect("keep alive");
    ks.revoke(kept).await.expect("revoke");
    assert!(get(ks, &key).await.is_none(), "revoking deletes the lease's keys");
    assert_eq!(ks.keep_alive(kept).await, Err(KeyspaceError::LeaseNotFound(kept)));
    assert_eq!(ks.txn(under(kept)).await, Err(KeyspaceError::LeaseNotFound(kept)));

    // Unrenewed, a lease expires (etcd rounds short TTLs up to about 2 s).
    let short = ks.grant(Duration::from_secs(2)).await.expect("grant");
    ks.txn(under(short)).await.expect("put under a lease");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    while get(ks, &key).await.is_some() {
        assert!(tokio::time::Instant::now() < deadline, "the key outlived its lease by 13 s");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A watch delivers every change under its prefix in order, from a past
/// revision too, lease expiry included.
pub async fn watches<K: Keyspace>(ks: &K, prefix: &str) {
    let a = format!("{prefix}a");
    let before = ks.txn(Txn::ops(vec![put(&a, "0")])).await.expect("put").revision;
    // From the past: the change at `before` is replayed.
    let mut past = ks.watch(prefix, before).await.expect("watch");
    let mut live = ks.watch(prefix, before + 1).await.expect("watch");
    let r1 = ks.txn(Txn::ops(vec![put(&a, "1")])).await.expect("put").revision;
    // A key beside the prefix, not under it.
    let elsewhere = format!("{}-elsewhere", prefix.trim_end_matches('/'));
    ks.txn(Txn::ops(vec![put(&elsewhere, "x")])).await.expect("put");
    let r2 = ks.txn(Txn::ops(vec![Op::Delete(a.clone())])).await.expect("delete").revision;
    match next(&mut past).await {
        WatchEvent::Put(kv) => assert_eq!((kv.value.as_slice(), kv.mod_revision), (&b"0"[..], before)),
        other => panic!("expected the replayed put, got {other:?}"),
    }
    for stream in [&mut past, &mut live] {
        match next(stream).await {
            WatchEvent::Put(kv) => assert_eq!((kv.value.as_slice(), kv.mod_revision), (&b"1"[..], r1)),
            other => panic!("expected a put, got {other:?}"),
        }
        assert_eq!(next(stream).await, WatchEvent::Delete { key: a.clone(), mod_revision: r2 });
    }
    // A lease's end shows as deletes.
    let lease = ks.grant(Duration::from_secs(30)).await.expect("grant");
    let b = format!("{prefix}b");
    ks.txn(Txn::ops(vec![Op::Put { key: b.clone(), value: vec![], lease: Some(lease) }])).await.expect("put");
    assert!(matches!(next(&mut live).await, WatchEvent::Put(kv) if kv.key == b));
    ks.revoke(lease).await.expect("revoke");
    assert!(matches!(next(&mut live).await, WatchEvent::Delete { key, .. } if key == b));
    ks.txn(Txn::ops(vec![Op::DeletePrefix(prefix.to_owned()), Op::Delete(elsewhere)])).await.expect("delete");
}
