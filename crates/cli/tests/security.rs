//! The `kshard` binary over every listener of the test broker — SSL, SASL PLAIN,
//! SASL SCRAM-SHA-512 and SASL_SSL — with the broker's ACLs on: `loadgen`,
//! `offsets dump`, `bench drain` and `serve` work; a wrong password, an
//! untrusted certificate and a principal without Read on `__consumer_offsets`
//! each give a clear message at once; `admin_api` mode works for a principal
//! with only Describe on groups and topics; and no password ever shows in
//! kshard's output or logs.

use std::io::Read;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use kshard_testkit::{Broker, Listener, http_get, unique_name};

/// How a client reaches the broker.
struct Access<'a> {
    listener: Listener,
    mechanism: Option<&'a str>,
    user: &'a str,
    password: String,
    /// False: TLS without the test CA, so the broker's certificate cannot be verified.
    trust_ca: bool,
}

impl Access<'_> {
    fn apply(&self, broker: &Broker, command: &mut Command) {
        command.args(["--brokers", broker.address(self.listener)]);
        if matches!(self.listener, Listener::Ssl | Listener::SaslSsl) {
            command.args(["--tls-enabled", "true"]);
            if self.trust_ca {
                command.args(["--tls-ca-file", broker.ca_file()]);
            }
        }
        if let Some(mechanism) = self.mechanism {
            command.args(["--sasl-mechanism", mechanism, "--sasl-username", self.user]);
            // Passwords go in the environment, never on the command line.
            command.env("KSHARD_SASL_PASSWORD", &self.password);
        }
    }
}

fn kshard(broker: &Broker, access: &Access<'_>, args: &[&str]) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_kshard"));
    command.args(args);
    access.apply(broker, &mut command);
    command.env_remove("KSHARD_BROKERS").output().expect("kshard runs")
}

fn sasl<'a>(broker: &Broker, listener: Listener, mechanism: &'a str, user: &'a str) -> Access<'a> {
    Access { listener, mechanism: Some(mechanism), user, password: broker.password(user).to_owned(), trust_ca: true }
}

/// Every password of the broker's users, to check that none leaks.
fn assert_no_secret(broker: &Broker, what: &str, text: &str) {
    for user in ["admin", "kshard", "monitor", "nobody"] {
        assert!(!text.contains(broker.password(user)), "{what} shows the password of {user}:\n{text}");
    }
}

/// `kshard serve` as a child process, killed on drop. Its stderr is read as it
/// comes, so that a chatty child never blocks on a full pipe.
struct Serve {
    child: Child,
    addr: String,
    logs: Option<std::thread::JoinHandle<String>>,
}

impl Serve {
    fn start(broker: &Broker, access: &Access<'_>, extra: &[&str]) -> Self {
        let port = std::net::TcpListener::bind("127.0.0.1:0").expect("bind").local_addr().expect("addr").port();
        let addr = format!("127.0.0.1:{port}");
        let mut command = Command::new(env!("CARGO_BIN_EXE_kshard"));
        command.args(["serve", "--listen", &addr, "--watermark-interval-seconds", "0.5"]).args(extra);
        access.apply(broker, &mut command);
        let mut child = command
            .env_remove("KSHARD_BROKERS")
            .env_remove("KSHARD_ETCD")
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn kshard serve");
        let mut stderr = child.stderr.take().expect("piped stderr");
        let logs = std::thread::spawn(move || {
            let mut logs = String::new();
            let _ = stderr.read_to_string(&mut logs);
            logs
        });
        Serve { child, addr, logs: Some(logs) }
    }

    /// Polls `/ready` until `done` holds for its status and body, or 60 s pass.
    fn ready_until(&mut self, what: &str, done: impl Fn(u16, &str) -> bool) -> String {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Ok((status, body)) = http_get(&self.addr, "/ready")
                && done(status, &body)
            {
                return body;
            }
            assert!(self.child.try_wait().expect("wait").is_none(), "kshard serve exited");
            assert!(Instant::now() < deadline, "{what}: not within 60 s");
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Stops the service and returns its logs.
    fn stop(mut self) -> String {
        let _ = Command::new("kill").args(["-TERM", &self.child.id().to_string()]).status();
        let _ = self.child.wait();
        self.logs.take().and_then(|t| t.join().ok()).unwrap_or_default()
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn ensure_offsets_topic(broker: &Broker) {
    let settings = kshard_kafka::Client::to_brokers(broker.brokers());
    let admin = kshard_kafka::Admin::new(&settings, Duration::from_secs(30)).expect("admin");
    let topic = unique_name("security-seed");
    let spec = kshard_kafka::TopicSpec { name: topic.clone(), partitions: 1, replication: 1, configs: vec![] };
    admin.create_topic(&spec).expect("topic");
    kshard_kafka::OffsetCommitter::new(&settings, &format!("{topic}-g"))
        .expect("committer")
        .commit(&[(&topic, 0, 0)])
        .expect("commit");
}

#[test]
#[ignore = "needs the real broker or etcd: scripts/test.sh runs it (or cargo test -- --include-ignored)"]
fn dump_loadgen_bench_and_serve_work_over_tls_and_sasl() {
    let broker = Broker::from_env_or_start();
    ensure_offsets_topic(&broker);
    let p = unique_name("sec");
    let ways = [
        ("ssl", Listener::Ssl, None),
        ("plain", Listener::SaslPlaintext, Some("PLAIN")),
        ("scram", Listener::SaslPlaintext, Some("SCRAM-SHA-512")),
        ("sasl-ssl", Listener::SaslSsl, Some("SCRAM-SHA-512")),
    ];
    for (name, listener, mechanism) in ways {
        let as_user = |user: &'static str| match mechanism {
            Some(m) => sasl(&broker, listener, m, user),
            None => Access { listener, mechanism: None, user, password: String::new(), trust_ca: true },
        };
        let prefix = format!("{p}-{name}");
        let args = ["--groups", "2", "--partitions", "1", "--rounds", "2", "--topics", "1", "--prefix", &prefix];
        let out = kshard(&broker, &as_user("admin"), &[&["loadgen"][..], &args].concat());
        assert!(out.status.success(), "{name}: loadgen: {}", String::from_utf8_lossy(&out.stderr));
        let out = kshard(&broker, &as_user("kshard"), &["offsets", "dump"]);
        assert!(out.status.success(), "{name}: dump: {}", String::from_utf8_lossy(&out.stderr));
        let dumped = String::from_utf8_lossy(&out.stdout);
        assert!(dumped.contains(&format!("{prefix}-group-00001")), "{name}: dump shows the commits");
        let out = kshard(&broker, &as_user("kshard"), &["bench", "drain"]);
        assert!(out.status.success(), "{name}: bench drain: {}", String::from_utf8_lossy(&out.stderr));
        let drained: u64 = String::from_utf8_lossy(&out.stdout).trim().parse().expect("a count");
        assert!(drained >= 4, "{name}: drained {drained}");
        assert_no_secret(&broker, name, &String::from_utf8_lossy(&out.stderr));
    }

    // serve over SASL_SSL with SCRAM, as the principal with the default mode's
    // ACLs, on a broker with share groups (so with __share_group_state).
    let share_topic = format!("{p}-share");
    kshard_testkit::kafka_tool(
        "topics",
        &["--bootstrap-server", broker.brokers(), "--create", "--topic", &share_topic],
    );
    kshard_testkit::share_consume(broker.brokers(), &format!("{p}-share-group"), &share_topic, 1, None);
    let access = sasl(&broker, Listener::SaslSsl, "SCRAM-SHA-512", "kshard");
    let mut serve = Serve::start(&broker, &access, &[]);
    // This principal may not Read __share_group_state: share groups are
    // left out, and /ready says so, rather than never being ready.
    let ready = serve
        .ready_until("ready over SASL_SSL", |status, body| status == 200 && body.contains("share_groups_left_out"));
    assert!(ready.contains("may not Read __share_group_state"), "{ready}");
    let (status, api) = http_get(&serve.addr, "/api/groups").expect("GET /api/groups");
    assert_eq!(status, 200);
    assert!(api.contains(&format!("{p}-sasl-ssl-group-00000")), "the group is served");
    let (_, metrics) = http_get(&serve.addr, "/metrics").expect("GET /metrics");
    let logs = serve.stop();
    for (what, text) in [("/api/groups", &api), ("/metrics", &metrics), ("serve's logs", &logs)] {
        assert_no_secret(&broker, what, text);
    }
}

#[test]
#[ignore = "needs the real broker or etcd: scripts/test.sh runs it (or cargo test -- --include-ignored)"]
fn bad_credentials_certificates_and_acls_are_named_at_start() {
    let broker = Broker::from_env_or_start();
    ensure_offsets_topic(&broker);

    let wrong = Access {
        listener: Listener::SaslPlaintext,
        mechanism: Some("SCRAM-SHA-512"),
        user: "kshard",
        password: "not-the-password".into(),
        trust_ca: true,
    };
    let out = kshard(&broker, &wrong, &["offsets", "dump"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("refused the credentials"), "wrong password: {err}");
    assert!(!err.contains("not-the-password"), "the password is not repeated: {err}");

    // TLS without the test CA: the broker's certificate cannot be verified.
    let untrusted =
        Access { listener: Listener::Ssl, mechanism: None, user: "", password: String::new(), trust_ca: false };
    let out = kshard(&broker, &untrusted, &["offsets", "dump"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("TLS with the broker failed"), "untrusted certificate: {err}");

    // `monitor` may Describe topics and groups, but not Read __consumer_offsets.
    let monitor = sasl(&broker, Listener::SaslPlaintext, "SCRAM-SHA-512", "monitor");
    let out = kshard(&broker, &monitor, &["offsets", "dump"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("admin_api"), "missing ACL: {err}");

    let mut serve = Serve::start(&broker, &monitor, &[]);
    let body = serve.ready_until("the reason on /ready", |status, body| status == 503 && body.contains("admin_api"));
    assert!(body.contains("Read"), "the missing right is named: {body}");
    // Counted by kind; held (tried again every 30 s), not retried after 1 s.
    let (_, metrics) = http_get(&serve.addr, "/metrics").expect("GET /metrics");
    let failures = "kshard_worker_failures_total{worker=\"offsets reader\",kind=\"authorization\"} ";
    let counted = metrics.lines().find_map(|l| l.strip_prefix(failures)).and_then(|n| n.parse::<f64>().ok());
    assert!(counted.is_some_and(|n| n >= 1.0), "{failures} in:\n{metrics}");
    let logs = serve.stop();
    assert!(logs.contains("admin_api"), "the log says what to do: {logs}");

    // The same principal in admin_api mode: its ACLs suffice.
    let p = unique_name("sec-admin-api");
    let settings = kshard_kafka::Client::to_brokers(broker.brokers());
    let topic = format!("{p}-t");
    let admin = kshard_kafka::Admin::new(&settings, Duration::from_secs(30)).expect("admin");
    let spec = kshard_kafka::TopicSpec { name: topic.clone(), partitions: 1, replication: 1, configs: vec![] };
    admin.create_topic(&spec).expect("topic");
    let writer = kshard_kafka::RecordWriter::new(&settings).expect("producer");
    for i in 0..10 {
        writer.send(&topic, 0, format!("k{i}").as_bytes(), Some(b"v")).expect("send");
    }
    writer.flush(Duration::from_secs(30)).expect("flush");
    let group = format!("{p}-g");
    kshard_kafka::OffsetCommitter::new(&settings, &group)
        .expect("committer")
        .commit(&[(&topic, 0, 4)])
        .expect("commit");
    let mut serve = Serve::start(&broker, &monitor, &["--scrape-mode", "admin_api"]);
    serve.ready_until("admin_api mode ready", |status, _| status == 200);
    let series = format!(
        "kshard_kafka_consumer_group_topic_partition_lag{{group_id=\"{group}\",topic_name=\"{topic}\",partition_id=\"0\"}} 6"
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (_, metrics) = http_get(&serve.addr, "/metrics").expect("GET /metrics");
        if metrics.lines().any(|l| l == series) {
            break;
        }
        assert!(Instant::now() < deadline, "no lag for {group} in admin_api mode:\n{metrics}");
        std::thread::sleep(Duration::from_millis(200));
    }
    let logs = serve.stop();
    assert_no_secret(&broker, "serve's logs", &logs);
}

#[test]
#[ignore = "needs the real broker or etcd: scripts/test.sh runs it (or cargo test -- --include-ignored)"]
fn serve_says_why_on_ready_when_the_credentials_or_the_certificate_are_refused() {
    let broker = Broker::from_env_or_start();
    ensure_offsets_topic(&broker);
    let wrong = Access {
        listener: Listener::SaslSsl,
        mechanism: Some("SCRAM-SHA-512"),
        user: "kshard",
        password: "not-the-password".into(),
        trust_ca: true,
    };
    let untrusted =
        Access { listener: Listener::Ssl, mechanism: None, user: "", password: String::new(), trust_ca: false };
    for (access, reason) in [(wrong, "refused the credentials"), (untrusted, "TLS with the broker failed")] {
        let mut serve = Serve::start(&broker, &access, &[]);
        serve.ready_until(reason, |status, body| status == 503 && body.contains(reason));
        let logs = serve.stop();
        assert!(logs.contains(reason), "the log says it too: {logs}");
        assert!(!logs.contains("not-the-password"), "the password is not logged");
    }
}
