//! `kshard-testkit`: test support shared by the crates' integration tests.
//!
//! [`Broker`] is the real broker, Apache Kafka in KRaft mode: the one
//! `scripts/test.sh` started (its settings in `KSHARD_BROKERS`,
//! `KSHARD_BROKERS_SSL`, … as `scripts/broker.sh` prints them), or one started
//! with `scripts/broker.sh` on 127.0.0.1 in a fresh state directory and stopped
//! by PID when dropped. It is not a fake: integration tests run against the
//! real thing. [`kafka_tool`] runs Kafka's own command-line tools, the oracle
//! kshard's answers are checked against. [`Etcd`] is the real etcd, the same way.
//! [`Namespace`] runs a process in a network namespace of the test's own,
//! reaching the host's services through [`Link`]s the test cuts and heals.
//! [`KafkaProxy`] stands in front of the broker and freezes its clients'
//! fetch connections only, on demand; [`HostileBroker`] answers every
//! request with bytes no broker sends. [`Prometheus`] and [`Alertmanager`]
//! are Debian's, with a configuration of the test's own, and a
//! [`WebhookReceiver`] keeps what notifiers send it.

pub mod bomb;
pub mod grafana;
mod hostile_broker;
mod kafka_proxy;
mod netns;
mod prometheus;
mod smtp;

pub use hostile_broker::{API_VERSIONS_NULL_LIST, HostileBroker, METADATA_2_POW_32_BROKERS};
pub use kafka_proxy::KafkaProxy;
pub use netns::{Link, Namespace};
pub use prometheus::{
    Alertmanager, Delivery, Prometheus, PromtoolError, QueryError, WebhookReceiver, promtool, promtool_check_metrics,
    url_encoded,
};
pub use smtp::SmtpSink;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Command;
use std::time::{SystemTime, UNIX_EPOCH};

/// What a client of [`Etcd::start_secure`] needs: its CA, a client
/// certificate and key, and the user `kshard` (who may read and write under
/// `/kshard/` only) with its password.
#[derive(Debug, Clone)]
pub struct SecureEtcd {
    /// The CA (PEM) of etcd's certificate and of the client's.
    pub ca_file: PathBuf,
    /// A client certificate (PEM).
    pub cert_file: PathBuf,
    /// Its key (PEM).
    pub key_file: PathBuf,
    /// The user.
    pub user: String,
    /// Its password.
    pub password: String,
}

/// A broker to test against; stops it on drop when this process started it.
#[derive(Debug)]
pub struct Broker {
    /// The settings `scripts/broker.sh` printed (`KSHARD_BROKERS=…` and the rest).
    settings: BTreeMap<String, String>,
    /// A broker this test started (stopped on drop).
    started: Option<Started>,
}

/// A listener of the test broker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Listener {
    /// No TLS, no authentication (a super user).
    Plaintext,
    /// TLS from the broker's throwaway CA, no authentication (a super user).
    Ssl,
    /// SASL (PLAIN or SCRAM-SHA-512) without TLS.
    SaslPlaintext,
    /// SASL over TLS.
    SaslSsl,
}

fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// `KEY=VALUE` lines into a map.
fn parse_settings(text: &str) -> BTreeMap<String, String> {
    text.lines()
        .filter_map(|l| l.split_once('='))
        .filter(|(k, _)| k.starts_with("KSHARD_"))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect()
}

impl Broker {
    /// Uses the broker `KSHARD_BROKERS` names, or starts one with `scripts/broker.sh`.
    pub fn from_env_or_start() -> Self {
        if std::env::var("KSHARD_BROKERS").is_ok() {
            let settings = std::env::vars().filter(|(k, _)| k.starts_with("KSHARD_BROKER")).collect();
            return Broker { settings, started: None };
        }
        Self::start_private(&[])
    }

    /// Always starts a broker of this test's own, with extra broker properties
    /// (`key=value`), for tests that stop it, change its settings, or may leave
    /// it unusable.
    pub fn start_private(properties: &[&str]) -> Self {
        let (started, settings) = Started::start("broker", properties);
        assert!(settings.contains_key("KSHARD_BROKERS"), "broker.sh prints KSHARD_BROKERS=");
        Broker { settings, started: Some(started) }
    }

    fn setting(&self, key: &str) -> &str {
        self.settings.get(key).map(String::as_str).unwrap_or_else(|| panic!("the broker's settings lack {key}"))
    }

    /// The PLAINTEXT bootstrap address, `127.0.0.1:PORT`.
    pub fn brokers(&self) -> &str {
        self.setting("KSHARD_BROKERS")
    }

    /// The bootstrap address of `listener`.
    pub fn address(&self, listener: Listener) -> &str {
        match listener {
            Listener::Plaintext => self.brokers(),
            Listener::Ssl => self.setting("KSHARD_BROKERS_SSL"),
            Listener::SaslPlaintext => self.setting("KSHARD_BROKERS_SASL_PLAINTEXT"),
            Listener::SaslSsl => self.setting("KSHARD_BROKERS_SASL_SSL"),
        }
    }

    /// The CA certificate (PEM) the broker's TLS certificate is signed with.
    pub fn ca_file(&self) -> &str {
        self.setting("KSHARD_BROKER_CA")
    }

    /// The password of a SASL user of the test broker: `admin` (a super user),
    /// `kshard` (Describe on topics, Read on `__consumer_offsets`), `monitor`
    /// (Describe on topics and groups) or `nobody` (no ACLs).
    pub fn password(&self, user: &str) -> &str {
        self.setting(&format!("KSHARD_BROKER_PASSWORD_{}", user.to_ascii_uppercase()))
    }

    fn control(&self, command: &str) {
        self.started.as_ref().expect("only a broker this test started can be stopped or resumed").control(command);
    }

    /// Kills the broker with SIGKILL, keeping its data (a private broker only).
    pub fn kill(&self) {
        self.control("kill");
    }

    /// Stops the broker with SIGTERM, keeping its data (a private broker only).
    pub fn stop(&self) {
        self.control("stop");
    }

    /// Starts a stopped or killed broker again on its data and ports.
    pub fn resume(&self) {
        self.control("resume");
    }
}

/// A cluster of three Apache Kafka nodes (`scripts/cluster.sh`, PLAINTEXT),
/// always this test's own; stopped on drop. For faults one broker cannot
/// show: leaders moving between brokers, one broker of several down.
#[derive(Debug)]
pub struct Cluster {
    settings: BTreeMap<String, String>,
    started: Started,
}

impl Cluster {
    /// Starts three nodes with extra properties (`key=value`) for each.
    pub fn start(properties: &[&str]) -> Self {
        let (started, settings) = Started::start("cluster", properties);
        assert!(settings.contains_key("KSHARD_CLUSTER_BROKERS"), "cluster.sh prints KSHARD_CLUSTER_BROKERS=");
        Cluster { settings, started }
    }

    /// The bootstrap list of all three, `127.0.0.1:P1,127.0.0.1:P2,127.0.0.1:P3`.
    pub fn brokers(&self) -> &str {
        &self.settings["KSHARD_CLUSTER_BROKERS"]
    }

    /// Node `id`'s address (1 to 3; the node id is the broker id).
    pub fn node(&self, id: i32) -> &str {
        self.settings.get(&format!("KSHARD_CLUSTER_NODE_{id}")).map_or("", String::as_str)
    }

    /// Kills node `id` with SIGKILL, keeping its data.
    pub fn kill(&self, id: i32) {
        self.started.run("kill", &[&id.to_string()]);
    }

    /// Starts node `id` again on its data and ports.
    pub fn resume(&self, id: i32) {
        self.started.run("resume", &[&id.to_string()]);
    }
}

/// A service this test started with `scripts/{name}.sh start` in a state
/// directory of its own; stopped by PID and its directory removed on drop.
#[derive(Debug)]
struct Started {
    /// `broker`, `cluster`, `etcd` or `prometheus`: the script is `scripts/{name}.sh`.
    name: &'static str,
    state: PathBuf,
}

impl Started {
    /// Starts the service; returns it and the settings its script printed.
    fn start(name: &'static str, args: &[&str]) -> (Self, BTreeMap<String, String>) {
        let started = Started::new(name);
        let out = started.run("start", args);
        (started, parse_settings(&String::from_utf8_lossy(&out.stdout)))
    }

    fn new(name: &'static str) -> Self {
        Started { name, state: std::env::temp_dir().join(unique_name(&format!("kshard-test-{name}"))) }
    }

    /// Starts the service with `scripts/{name}.sh {command} FILE`, where FILE
    /// holds `config` in the service's state directory.
    fn start_configured(name: &'static str, command: &str, config: &str) -> (Self, BTreeMap<String, String>) {
        let started = Started::new(name);
        std::fs::create_dir_all(&started.state).expect("the service's state directory");
        let file = started.state.join(format!("{command}.yml"));
        std::fs::write(&file, config).expect("the service's configuration");
        let out = started.run(command, &[file.to_str().expect("a UTF-8 temporary path")]);
        (started, parse_settings(&String::from_utf8_lossy(&out.stdout)))
    }

    fn run(&self, command: &str, args: &[&str]) -> std::process::Output {
        let name = self.name;
        let out = Command::new(repo_root().join(format!("scripts/{name}.sh")))
            .arg(command)
            .args(args)
            .env("KSHARD_STATE_DIR", &self.state)
            .output()
            .unwrap_or_else(|e| panic!("running scripts/{name}.sh (install it with scripts/install.sh): {e}"));
        assert!(out.status.success(), "scripts/{name}.sh {command} failed:\n{}", String::from_utf8_lossy(&out.stderr));
        out
    }

    /// `kill`, `stop` or `resume`.
    fn control(&self, command: &str) {
        self.run(command, &[]);
    }
}

impl Drop for Started {
    fn drop(&mut self) {
        let _ = Command::new(repo_root().join(format!("scripts/{}.sh", self.name)))
            .arg("stop")
            .env("KSHARD_STATE_DIR", &self.state)
            .status();
        let _ = std::fs::remove_dir_all(&self.state);
    }
}

/// An etcd to test against; stops it on drop when this process started it.
#[derive(Debug)]
pub struct Etcd {
    endpoint: String,
    /// An etcd this test started (stopped on drop).
    started: Option<Started>,
}

impl Etcd {
    /// Uses `KSHARD_ETCD` (as `scripts/test.sh` sets it), or starts an etcd
    /// with `scripts/etcd.sh` in a fresh state directory.
    pub fn from_env_or_start() -> Self {
        if let Ok(endpoint) = std::env::var("KSHARD_ETCD") {
            return Etcd { endpoint, started: None };
        }
        Self::start_private()
    }

    /// Always starts an etcd of this test's own, for tests that stop it.
    pub fn start_private() -> Self {
        let (started, settings) = Started::start("etcd", &[]);
        let endpoint = settings.get("KSHARD_ETCD").cloned().expect("etcd.sh prints KSHARD_ETCD=");
        Etcd { endpoint, started: Some(started) }
    }

    /// Starts an etcd of this test's own that only answers clients over TLS
    /// with a client certificate of its CA, and with authentication on
    /// (`scripts/etcd.sh start --secure`): its endpoint (`https://…`) and
    /// what a client needs.
    pub fn start_secure() -> (Self, SecureEtcd) {
        let (started, settings) = Started::start("etcd", &["--secure"]);
        let get = |key: &str| settings.get(key).cloned().unwrap_or_else(|| panic!("etcd.sh --secure prints {key}="));
        let secure = SecureEtcd {
            ca_file: get("KSHARD_ETCD_CA").into(),
            cert_file: get("KSHARD_ETCD_CERT").into(),
            key_file: get("KSHARD_ETCD_KEY").into(),
            user: get("KSHARD_ETCD_USER"),
            password: get("KSHARD_ETCD_PASSWORD"),
        };
        (Etcd { endpoint: get("KSHARD_ETCD"), started: Some(started) }, secure)
    }

    /// The client endpoint, `http://127.0.0.1:PORT`.
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// The endpoint's `127.0.0.1:PORT`.
    pub fn address(&self) -> &str {
        self.endpoint.trim_start_matches("http://")
    }

    fn control(&self, command: &str) {
        self.started.as_ref().expect("only an etcd this test started can be killed or resumed").control(command);
    }

    /// Kills etcd with SIGKILL, keeping its data (a private etcd only).
    pub fn kill(&self) {
        self.control("kill");
    }

    /// Starts a killed etcd again on its data and ports.
    pub fn resume(&self) {
        self.control("resume");
    }

    /// The watchers etcd holds now (its `etcd_debugging_mvcc_watcher_total`
    /// gauge): of every client, so a count to compare only on a private etcd.
    pub fn watchers(&self) -> f64 {
        let (status, body) = http_get(self.address(), "/metrics").expect("etcd's /metrics");
        assert_eq!(status, 200, "etcd's /metrics");
        parse_metrics(&body).get("etcd_debugging_mvcc_watcher_total").copied().expect("the watcher gauge")
    }
}

/// Says that part of a test is skipped, and `why` (a tool it needs is not
/// installed, say) — or fails the test when `KSHARD_NO_SKIP` is set, as
/// `scripts/test.sh` sets it: the whole suite installs everything, so a skip
/// there is a broken set-up, not a pass.
pub fn skipped(why: &str) {
    if std::env::var_os("KSHARD_NO_SKIP").is_some() {
        panic!("{why}, and KSHARD_NO_SKIP is set (scripts/test.sh installs what every test needs)");
    }
    eprintln!("skipped: {why}");
}

/// Runs one of Kafka's command-line tools (`consumer-groups`, `acls`, `topics`,
/// …) through `scripts/kafka-tool.sh`; its stdout, or a panic with its stderr.
pub fn kafka_tool(tool: &str, args: &[&str]) -> String {
    let out = Command::new(repo_root().join("scripts/kafka-tool.sh"))
        .arg(tool)
        .args(args)
        .output()
        .expect("running scripts/kafka-tool.sh");
    assert!(
        out.status.success(),
        "kafka-{tool} {args:?} failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// One row of `kafka-consumer-groups --describe`: a group's committed offset
/// of a partition, the log end offset and the lag, as Kafka's tool reports them.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct KafkaLag {
    /// The group.
    pub group: String,
    /// The topic.
    pub topic: String,
    /// The partition.
    pub partition: i32,
    /// The committed offset (CURRENT-OFFSET).
    pub committed: i64,
    /// The log end offset (LOG-END-OFFSET).
    pub log_end: i64,
    /// LAG.
    pub lag: i64,
}

/// What Kafka's own `kafka-consumer-groups --describe --all-groups` reports for
/// the groups whose names start with `prefix` (partitions without a committed
/// offset left out).
pub fn kafka_consumer_groups(brokers: &str, prefix: &str) -> Vec<KafkaLag> {
    let out = kafka_tool(
        "consumer-groups",
        &["--bootstrap-server", brokers, "--describe", "--all-groups", "--timeout", "30000"],
    );
    let mut rows: Vec<KafkaLag> = out
        .lines()
        .filter_map(|line| {
            let f: Vec<&str> = line.split_whitespace().collect();
            if f.len() < 6 || !f[0].starts_with(prefix) {
                return None;
            }
            Some(KafkaLag {
                group: f[0].to_owned(),
                topic: f[1].to_owned(),
                partition: f[2].parse().ok()?,
                committed: f[3].parse().ok()?,
                log_end: f[4].parse().ok()?,
                lag: f[5].parse().ok()?,
            })
        })
        .collect();
    rows.sort();
    rows
}

/// One row of `kafka-share-groups --describe --offsets`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShareOffsets {
    /// The topic.
    pub topic: String,
    /// The partition.
    pub partition: i32,
    /// The share-partition start offset (`None` where Kafka prints `-`).
    pub start_offset: Option<i64>,
    /// Kafka's share lag (`None` where Kafka prints `-`).
    pub lag: Option<i64>,
}

/// What Kafka's own `kafka-share-groups --describe --offsets` reports of `group`.
pub fn kafka_share_groups(brokers: &str, group: &str) -> Vec<ShareOffsets> {
    let out = kafka_tool("share-groups", &["--bootstrap-server", brokers, "--describe", "--offsets", "--group", group]);
    out.lines()
        .filter_map(|line| {
            let f: Vec<&str> = line.split_whitespace().collect();
            if f.len() < 5 || f[0] != group {
                return None;
            }
            Some(ShareOffsets {
                topic: f[1].to_owned(),
                partition: f[2].parse().ok()?,
                start_offset: f[3].parse().ok(),
                lag: f[4].parse().ok(),
            })
        })
        .collect()
}

/// Makes share group `group` start at the earliest offset (a share group
/// starts at the latest unless its `share.auto.offset.reset` says otherwise).
pub fn share_from_earliest(brokers: &str, group: &str) {
    let args = ["--bootstrap-server", brokers, "--alter", "--entity-type", "groups", "--entity-name", group];
    let mut args = args.to_vec();
    args.extend(["--add-config", "share.auto.offset.reset=earliest"]);
    kafka_tool("configs", &args);
}

/// The tests' Kafka Streams application (`scripts/java/StreamsApp.java`, on
/// the streams rebalance protocol) as `app`: it reads `input` into `output`
/// for `seconds`, or until the returned handle is dropped.
pub fn streams_app(brokers: &str, app: &str, input: &str, output: &str, seconds: u32) -> StreamsApp {
    let child = Command::new(repo_root().join("scripts/streams-app.sh"))
        .args([brokers, app, input, output, &seconds.to_string()])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("starting scripts/streams-app.sh");
    StreamsApp(child)
}

/// A running streams application, stopped (killed) on drop.
#[derive(Debug)]
pub struct StreamsApp(std::process::Child);

impl Drop for StreamsApp {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Kafka's console share consumer in `group` reads `messages` records of
/// `topic`, accepting them, or as `how` says (`--reject`, `--release`).
pub fn share_consume(brokers: &str, group: &str, topic: &str, messages: u32, how: Option<&str>) {
    let max = messages.to_string();
    let mut args = vec!["--bootstrap-server", brokers, "--group", group, "--topic", topic];
    args.extend(["--max-messages", &max, "--timeout-ms", "30000"]);
    args.extend(how);
    kafka_tool("console-share-consumer", &args);
}

/// A tool scripts/install.sh puts in the tools cache's `bin/` (or one on
/// the `PATH`), found by running it with `version_arg`; `None` when neither
/// has it.
pub fn tool(name: &str, version_arg: &str) -> Option<PathBuf> {
    let tools = std::env::var("KSHARD_TOOLS_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|_| PathBuf::from(std::env::var("HOME").unwrap_or_default()).join(".cache/kshard-tools"));
    [tools.join("bin").join(name), PathBuf::from(name)]
        .into_iter()
        .find(|p| std::process::Command::new(p).arg(version_arg).output().is_ok_and(|o| o.status.success()))
}

/// A name no other test run uses.
pub fn unique_name(prefix: &str) -> String {
    let nanos = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0);
    format!("{prefix}-{}-{nanos}", std::process::id())
}

/// A plain HTTP/1.0 GET to `addr` (e.g. `127.0.0.1:9308`): the status code and
/// body. Enough for tests of kshard's own endpoints; no client library needed.
pub fn http_get(addr: &str, path: &str) -> std::io::Result<(u16, String)> {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(addr)?;
    stream.set_read_timeout(Some(std::time::Duration::from_secs(30)))?;
    write!(stream, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n")?;
    let mut response = String::new();
    stream.read_to_string(&mut response)?;
    let status = response
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| std::io::Error::other(format!("not an HTTP response: {response:.80}")))?;
    let body = response.split_once("\r\n\r\n").map(|(_, b)| b.to_owned()).unwrap_or_default();
    Ok((status, body))
}

/// Parses Prometheus text into `series → value`, where a series is the metric
/// name with its labels exactly as rendered (`name{a="1",b="2"}`).
pub fn parse_metrics(text: &str) -> BTreeMap<String, f64> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .filter_map(|l| {
            let (series, value) = l.rsplit_once(' ')?;
            Some((series.to_owned(), value.parse().ok()?))
        })
        .collect()
}

/// The address a `kshard serve` says it listens on, read from its log at
/// `log` (the line `serving /metrics … addr=HOST:PORT`), once it is there;
/// fails at `deadline`.
pub fn serve_address_in_log(log: &std::path::Path, deadline: std::time::Instant) -> String {
    loop {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        if let Some(addr) = text
            .lines()
            .find(|l| l.contains("serving /metrics"))
            .and_then(|l| l.split_whitespace().find_map(|w| w.strip_prefix("addr=")))
        {
            return addr.to_owned();
        }
        assert!(std::time::Instant::now() < deadline, "no address in {}", log.display());
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}
