//! `kshard serve --data-dir --etcd https://…` on a real etcd that asks for
//! TLS with client certificates and a user (`scripts/etcd.sh start
//! --secure`): the CA, certificate, key and user come from the file's
//! `cluster:`, the password from `KSHARD_ETCD_PASSWORD`; the member becomes
//! ready with its shards in etcd, and `kshard shards list` reads them back
//! with the same settings as flags.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use kshard_testkit::{Broker, Etcd, http_get, unique_name};

struct Member(Child);

impl Drop for Member {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
#[ignore = "needs the real broker or etcd: scripts/test.sh runs it (or cargo test -- --include-ignored)"]
fn serve_shares_its_shards_through_an_etcd_with_tls_and_a_user() {
    let broker = Broker::from_env_or_start();
    let (etcd, secure) = Etcd::start_secure();
    let p = unique_name("etcd-tls");
    let dir: PathBuf = std::env::temp_dir().join(&p);
    std::fs::create_dir_all(&dir).expect("test dir");
    let config = dir.join("kshard.yaml");
    let prefix = format!("/kshard/{p}");
    std::fs::write(
        &config,
        format!(
            "groups:\n  allow: ['{p}-.*']\nrecovery_log_topic: {p}-log\nwatermark_interval_seconds: 1\ncluster:\n  etcd: [{}]\n  etcd_prefix: {prefix}\n  etcd_ca_file: {}\n  etcd_cert_file: {}\n  etcd_key_file: {}\n  etcd_user: {}\n",
            etcd.endpoint(),
            secure.ca_file.display(),
            secure.cert_file.display(),
            secure.key_file.display(),
            secure.user
        ),
    )
    .expect("config");
    let log_path = dir.join("member.log");
    let member = Member(
        Command::new(env!("CARGO_BIN_EXE_kshard"))
            .args(["serve", "--brokers", broker.brokers(), "--member-id", "a", "--listen", "127.0.0.1:0"])
            .arg("--config")
            .arg(&config)
            .arg("--data-dir")
            .arg(dir.join("data"))
            .env("KSHARD_ETCD_PASSWORD", &secure.password)
            .env("NO_COLOR", "1")
            .env_remove("KSHARD_ETCD")
            .env_remove("KSHARD_LISTEN")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log_path).expect("log"))
            .spawn()
            .expect("kshard serve starts"),
    );
    let deadline = Instant::now() + Duration::from_secs(120);
    let addr = kshard_testkit::serve_address_in_log(&log_path, deadline);
    loop {
        if let Ok((200, _)) = http_get(&addr, "/ready") {
            break;
        }
        let log = std::fs::read_to_string(&log_path).unwrap_or_default();
        assert!(Instant::now() < deadline, "not ready within 120 s; log:\n{log}");
        std::thread::sleep(Duration::from_millis(200));
    }
    let out = Command::new(env!("CARGO_BIN_EXE_kshard"))
        .args(["shards", "list", "--etcd", etcd.endpoint(), "--etcd-prefix", &prefix, "--json"])
        .arg("--etcd-ca-file")
        .arg(&secure.ca_file)
        .arg("--etcd-cert-file")
        .arg(&secure.cert_file)
        .arg("--etcd-key-file")
        .arg(&secure.key_file)
        .args(["--etcd-user", &secure.user])
        .env("KSHARD_ETCD_PASSWORD", &secure.password)
        .env_remove("KSHARD_ETCD")
        .output()
        .expect("kshard shards list");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}\n{stdout}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("offsets-000") && stdout.contains("PRIMARY"), "{stdout}");
    drop(member);
    let _ = std::fs::remove_dir_all(&dir);
}
