//! The etcd keyspace on a real etcd that asks for TLS with client
//! certificates and for a user (`scripts/etcd.sh start --secure`): the
//! keyspace keeps its contract there, under the prefix the user's role may
//! use; a wrong password, no client certificate, TLS files with `http://`
//! endpoints and a key outside the role's prefix are each refused, saying
//! why.

use kshard_runtime::keyspace::{EtcdAccess, EtcdKeyspace, Keyspace, KeyspaceError, Op, Txn, conformance};
use kshard_testkit::{Etcd, SecureEtcd, unique_name};

fn access(secure: &SecureEtcd) -> EtcdAccess {
    EtcdAccess {
        ca_file: Some(secure.ca_file.clone()),
        cert_file: Some(secure.cert_file.clone()),
        key_file: Some(secure.key_file.clone()),
        user: Some((secure.user.clone(), secure.password.clone())),
    }
}

#[tokio::test]
#[ignore = "needs the real broker or etcd: scripts/test.sh runs it (or cargo test -- --include-ignored)"]
async fn the_keyspace_keeps_its_contract_over_tls_as_a_user() {
    let (etcd, secure) = Etcd::start_secure();
    let endpoints = [etcd.endpoint().to_owned()];
    assert!(etcd.endpoint().starts_with("https://"), "{}", etcd.endpoint());
    let ks = EtcdKeyspace::connect_with(&endpoints, &access(&secure)).await.expect("connects over TLS as kshard");
    conformance::run_all(&ks, &format!("/kshard/{}", unique_name("secure"))).await;
    // The user's role covers /kshard/ only.
    let outside = ks.txn(Txn::ops(vec![Op::Put { key: "/elsewhere".into(), value: vec![1], lease: None }])).await;
    let e = outside.expect_err("a key outside the role's prefix");
    assert!(e.to_string().contains("permission denied"), "{e}");
}

#[tokio::test]
#[ignore = "needs the real broker or etcd: scripts/test.sh runs it (or cargo test -- --include-ignored)"]
async fn wrong_credentials_and_plain_connections_are_refused_saying_why() {
    let (etcd, secure) = Etcd::start_secure();
    let endpoints = [etcd.endpoint().to_owned()];
    let wrong = EtcdAccess { user: Some((secure.user.clone(), "wrong".into())), ..access(&secure) };
    let e = EtcdKeyspace::connect_with(&endpoints, &wrong).await.expect_err("a wrong password");
    assert!(matches!(&e, KeyspaceError::Invalid(m) if m.contains("credentials")), "{e}");
    // No client certificate: the handshake fails (or every call does).
    let anonymous = EtcdAccess { cert_file: None, key_file: None, ..access(&secure) };
    match EtcdKeyspace::connect_with(&endpoints, &anonymous).await {
        Err(e) => assert!(!e.to_string().is_empty()),
        Ok(ks) => assert!(ks.get_prefix("/kshard/").await.is_err(), "served without a client certificate"),
    }
    // TLS files with a plain endpoint: refused before connecting, naming the setting.
    let plain = [etcd.endpoint().replace("https://", "http://")];
    let e = EtcdKeyspace::connect_with(&plain, &access(&secure)).await.expect_err("TLS files, http://");
    assert!(matches!(&e, KeyspaceError::Invalid(m) if m.contains("invalid etcd")), "{e}");
    let half = EtcdAccess { key_file: None, ..access(&secure) };
    let e = EtcdKeyspace::connect_with(&endpoints, &half).await.expect_err("a certificate without its key");
    assert!(e.to_string().contains("etcd_cert_file"), "{e}");
}

/// A keyspace over TLS as a user goes on through an etcd restart. (It would
/// log in again by itself where etcd refused its token, as a JWT past its
/// TTL is; etcd 3.4 here took the token back after the restart, so no new
/// login was needed: `relogins` says how many were made.)
#[tokio::test]
#[ignore = "needs the real broker or etcd: scripts/test.sh runs it (or cargo test -- --include-ignored)"]
async fn the_keyspace_goes_on_through_an_etcd_restart() {
    let (etcd, secure) = Etcd::start_secure();
    let endpoints = [etcd.endpoint().to_owned()];
    let ks = EtcdKeyspace::connect_with(&endpoints, &access(&secure)).await.expect("connects");
    let put = |k: &str| Txn::ops(vec![Op::Put { key: format!("/kshard/restart/{k}"), value: vec![1], lease: None }]);
    ks.txn(put("before")).await.expect("writes");
    etcd.kill();
    etcd.resume();
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        match ks.txn(put("after")).await {
            Ok(_) => break,
            Err(e) => assert!(tokio::time::Instant::now() < deadline, "never wrote again after the restart: {e}"),
        }
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    eprintln!("logins made again after the restart: {}", ks.relogins());
    assert_eq!(ks.get_prefix("/kshard/restart/").await.expect("reads").kvs.len(), 2);
}
