//! A cluster of `kshard example sum run` processes on loopback, on the real
//! broker and (for several members) the real etcd: started, signalled and
//! killed by the test, observed through `kshard shards list --json` and each
//! member's /metrics, checked with `kshard example sum verify`.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use kshard_runtime::ShardRow;
use kshard_testkit::{Broker, unique_name};

/// One test's application: its topics, its etcd prefix, its members.
pub(crate) struct SumCluster {
    /// The broker this cluster started, or none (brokers given).
    _broker: Option<Broker>,
    pub(crate) brokers: String,
    pub(crate) etcd: Option<String>,
    pub(crate) topic: String,
    pub(crate) prefix: String,
    pub(crate) dir: PathBuf,
    pub(crate) partitions: i32,
    pub(crate) lease_ttl: u64,
    /// More flags for `run` (snapshot policy, …).
    pub(crate) run_args: Vec<String>,
    /// The example: `sum` (the default), or `wordcount`.
    pub(crate) app: &'static str,
    /// More flags for `verify`.
    pub(crate) verify_args: Vec<String>,
    members: BTreeMap<String, (Child, String)>,
}

pub(crate) fn kshard() -> Command {
    Command::new(env!("CARGO_BIN_EXE_kshard"))
}

impl SumCluster {
    pub(crate) fn new(name: &str, etcd: Option<&str>, partitions: i32, lease_ttl: u64) -> Self {
        let broker = Broker::from_env_or_start();
        let mut cluster = Self::on(broker.brokers(), name, etcd, partitions, lease_ttl);
        cluster._broker = Some(broker);
        cluster
    }

    /// [`SumCluster::new`] on the brokers `brokers` (a cluster of three, say).
    pub(crate) fn on(brokers: &str, name: &str, etcd: Option<&str>, partitions: i32, lease_ttl: u64) -> Self {
        let topic = unique_name(name);
        let dir = std::env::temp_dir().join(unique_name(&format!("kshard-{name}")));
        std::fs::create_dir_all(&dir).expect("test dir");
        SumCluster {
            brokers: brokers.to_owned(),
            _broker: None,
            etcd: etcd.map(str::to_owned),
            prefix: format!("/kshard-test/{topic}"),
            topic,
            dir,
            partitions,
            lease_ttl,
            run_args: Vec::new(),
            app: "sum",
            verify_args: Vec::new(),
            members: BTreeMap::new(),
        }
    }

    /// The flags naming the broker, the topic and the keyspace.
    fn common(&self, command: &mut Command) {
        command.args([
            "--brokers",
            &self.brokers,
            "--topic",
            &self.topic,
            "--partitions",
            &self.partitions.to_string(),
        ]);
    }

    fn cluster(&self, command: &mut Command) {
        if let Some(etcd) = &self.etcd {
            command.args(["--etcd", etcd, "--etcd-prefix", &self.prefix]);
        }
    }

    /// Starts member `id` (its data in `dir/id`, its log in `dir/id.log`);
    /// its HTTP address (on a port it chose itself, read from its log).
    pub(crate) fn start(&mut self, id: &str, env: &[(&str, &str)]) -> String {
        self.start_with(id, kshard(), env)
    }

    /// [`SumCluster::start`] in the network namespace `ns` (its HTTP address
    /// is then the namespace's own).
    pub(crate) fn start_in(&mut self, id: &str, ns: &kshard_testkit::Namespace) -> String {
        self.start_with(id, ns.command(env!("CARGO_BIN_EXE_kshard")), &[])
    }

    fn start_with(&mut self, id: &str, mut command: Command, env: &[(&str, &str)]) -> String {
        let path = self.dir.join(format!("{id}.log"));
        let logged_before = std::fs::read_to_string(&path).map(|t| t.len()).unwrap_or(0);
        let log = std::fs::OpenOptions::new().create(true).append(true).open(&path).expect("member log");
        command.args(["example", self.app, "run"]);
        self.common(&mut command);
        self.cluster(&mut command);
        command
            .args(["--member-id", id, "--listen", "127.0.0.1:0", "--lease-ttl", &self.lease_ttl.to_string()])
            .arg("--data-dir")
            .arg(self.dir.join(id))
            .args(&self.run_args)
            .env("NO_COLOR", "1")
            .env_remove("KSHARD_ETCD")
            .envs(env.iter().copied())
            .stdout(Stdio::null())
            .stderr(log);
        let mut child = command.spawn().expect("kshard example sum run starts");
        let deadline = Instant::now() + Duration::from_secs(30);
        let listen = loop {
            let text = std::fs::read_to_string(&path).unwrap_or_default();
            let endpoint = text
                .get(logged_before..)
                .and_then(|new| new.lines().find(|l| l.contains("starting a member")))
                .and_then(|l| l.split_whitespace().find_map(|w| w.strip_prefix("endpoint=")));
            if let Some(endpoint) = endpoint {
                break endpoint.to_owned();
            }
            if let Ok(Some(status)) = child.try_wait() {
                panic!("member {id} exited at start ({status}); its log: {}", path.display());
            }
            assert!(Instant::now() < deadline, "member {id} did not say where it listens: {}", path.display());
            std::thread::sleep(Duration::from_millis(20));
        };
        self.members.insert(id.to_owned(), (child, listen.clone()));
        listen
    }

    /// The member's HTTP address.
    pub(crate) fn listen(&self, id: &str) -> &str {
        &self.members[id].1
    }

    /// Sends `signal` (`KILL`, `TERM`, `STOP`, `CONT`) to member `id`.
    pub(crate) fn signal(&self, id: &str, signal: &str) {
        let pid = self.members[id].0.id().to_string();
        let ok = Command::new("kill").args([&format!("-{signal}"), &pid]).status().expect("kill runs").success();
        assert!(ok, "kill -{signal} {id}");
    }

    /// Waits for member `id` to exit (after a signal); its exit status.
    pub(crate) fn reap(&mut self, id: &str) -> std::process::ExitStatus {
        let (mut child, _) = self.members.remove(id).expect("a running member");
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Some(status) = child.try_wait().expect("waits") {
                return status;
            }
            assert!(Instant::now() < deadline, "member {id} did not exit");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Member `id`'s `/metrics`, parsed.
    pub(crate) fn metrics(&self, id: &str) -> BTreeMap<String, f64> {
        let (_, text) = kshard_testkit::http_get(self.listen(id), "/metrics").expect("metrics");
        kshard_testkit::parse_metrics(&text)
    }

    /// Writes `records` increments (the true sums go on accumulating in
    /// `dir/expected.json`).
    pub(crate) fn produce(&self, records: u64) {
        self.producer().produce(records);
    }

    /// What produces to this cluster, to hand to another thread.
    pub(crate) fn producer(&self) -> Producer {
        let mut args: Vec<String> = ["example", self.app, "produce"].map(str::to_owned).to_vec();
        if self.app == "sum" {
            args.extend(["--streams".to_owned(), "40".to_owned()]);
        }
        for (flag, value) in [("--brokers", &self.brokers), ("--topic", &self.topic)] {
            args.extend([flag.to_owned(), value.clone()]);
        }
        args.extend(["--partitions".to_owned(), self.partitions.to_string()]);
        args.extend(["--expected".to_owned(), self.dir.join("expected.json").display().to_string()]);
        Producer { args, count: if self.app == "sum" { "--records" } else { "--lines" } }
    }

    /// `kshard example sum verify`.
    pub(crate) fn verify(&self) -> Output {
        let mut command = kshard();
        command.args(["example", self.app, "verify", "--timeout", "120"]);
        self.common(&mut command);
        command.args(&self.verify_args);
        command.arg("--expected").arg(self.dir.join("expected.json")).output().expect("verify runs")
    }

    /// Asserts that every sum is exact.
    pub(crate) fn assert_exact(&self) {
        let out = self.verify();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "verify: {stdout}{}\nmember logs in {}",
            String::from_utf8_lossy(&out.stderr),
            self.dir.display()
        );
        assert!(stdout.contains("every sum exact") || stdout.contains("every count exact"), "{stdout}");
        eprint!("{stdout}");
    }

    /// `kshard shards list --json`: from etcd, or from member `via`.
    pub(crate) fn shards(&self, via: Option<&str>) -> Vec<ShardRow> {
        let mut command = kshard();
        command.args(["shards", "list", "--json"]).env_remove("KSHARD_ETCD");
        match (&self.etcd, via) {
            (Some(etcd), _) => command.args(["--etcd", etcd, "--etcd-prefix", &self.prefix]),
            (None, Some(member)) => command.args(["--endpoint", self.listen(member)]),
            (None, None) => panic!("without etcd, shards are listed through a member"),
        };
        let out = command.output().expect("shards list runs");
        if !out.status.success() {
            return Vec::new();
        }
        serde_json::from_slice(&out.stdout).expect("shards list --json prints rows")
    }

    /// Polls the shards until `done` holds; the rows then.
    pub(crate) fn until(
        &self,
        via: Option<&str>,
        what: &str,
        timeout: Duration,
        done: impl Fn(&[ShardRow]) -> bool,
    ) -> Vec<ShardRow> {
        let deadline = Instant::now() + timeout;
        loop {
            let rows = self.shards(via);
            if !rows.is_empty() && done(&rows) {
                return rows;
            }
            assert!(
                Instant::now() < deadline,
                "{what}: not within {timeout:?}; shards: {rows:#?}\nmember logs in {}",
                self.dir.display()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// True when every shard has a PRIMARY and `standbys` STANDBYs, all on
    /// distinct members of `members`, and nothing else.
    pub(crate) fn served(rows: &[ShardRow], members: &[&str], standbys: usize) -> bool {
        let mut by_shard: BTreeMap<&str, Vec<&ShardRow>> = BTreeMap::new();
        for r in rows {
            by_shard.entry(&r.shard).or_default().push(r);
        }
        by_shard.values().all(|replicas| {
            let primaries = replicas.iter().filter(|r| r.status == "PRIMARY" && r.slot == Some(0)).count();
            let standing = replicas.iter().filter(|r| r.status == "STANDBY").count();
            let mut holders: Vec<&str> = replicas.iter().map(|r| r.member.as_str()).collect();
            holders.sort_unstable();
            holders.dedup();
            primaries == 1
                && standing == standbys
                && replicas.len() == 1 + standbys
                && holders.len() == replicas.len()
                && holders.iter().all(|h| members.contains(h))
        })
    }

    /// The members holding primaries, with how many each.
    pub(crate) fn primaries(rows: &[ShardRow]) -> BTreeMap<String, usize> {
        let mut out = BTreeMap::new();
        for r in rows.iter().filter(|r| r.status == "PRIMARY") {
            *out.entry(r.member.clone()).or_default() += 1;
        }
        out
    }
}

/// Runs `kshard example sum produce` for one cluster.
pub(crate) struct Producer {
    args: Vec<String>,
    /// The flag that says how many: `--records` (sum) or `--lines` (wordcount).
    count: &'static str,
}

impl Producer {
    /// Writes `records` increments.
    pub(crate) fn produce(&self, records: u64) {
        let out = kshard().args(&self.args).args([self.count, &records.to_string()]).output().expect("produce runs");
        assert!(out.status.success(), "produce: {}", String::from_utf8_lossy(&out.stderr));
    }
}

impl Drop for SumCluster {
    fn drop(&mut self) {
        for (_, (child, _)) in self.members.iter_mut() {
            let _ = child.kill();
            let _ = child.wait();
        }
        if !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}
