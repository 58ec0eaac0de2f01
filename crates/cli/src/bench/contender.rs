//! The two systems `bench runtime` sets side by side, as child processes on
//! the same broker: a `kshard example sum|wordcount run` member, or an
//! instance of scripts/java/StreamsBench.java (Kafka Streams, exactly-once
//! v2, one standby, RocksDB) — started, asked whether it processes and which
//! instance holds source partition 0, stopped or killed.

use std::io::BufRead;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use kshard_runtime::{MemberClient, ShardRow};

use super::{KillOnDrop, ProcessStats, free_addr, process_stats};
use crate::serve_config::KafkaArgs;

/// Which system.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum System {
    Kshard,
    Streams,
}

impl System {
    pub(crate) fn name(self) -> &'static str {
        match self {
            System::Kshard => "kshard",
            System::Streams => "Kafka Streams",
        }
    }
}

/// Which application.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum App {
    Sum,
    WordCount,
}

impl App {
    pub(crate) fn name(self) -> &'static str {
        match self {
            App::Sum => "sum",
            App::WordCount => "wordcount",
        }
    }

    /// The topic its outputs go to, of input `topic` (on both systems).
    pub(crate) fn output(self, topic: &str) -> String {
        match self {
            App::Sum => format!("{topic}-sums"),
            App::WordCount => format!("{topic}-counts"),
        }
    }
}

/// What every instance of one system and application shares.
pub(crate) struct Deployment<'a> {
    pub(crate) system: System,
    pub(crate) app: App,
    pub(crate) kafka: &'a KafkaArgs,
    pub(crate) bootstrap: String,
    pub(crate) topic: String,
    pub(crate) partitions: i32,
    pub(crate) dir: PathBuf,
    /// etcd endpoints for kshard members that fail over (none: alone).
    pub(crate) etcd: Vec<String>,
    /// kshard's member lease, Kafka Streams' session timeout.
    pub(crate) lease_ttl: u64,
    pub(crate) streams_script: PathBuf,
    pub(crate) threads: u32,
    /// kshard's longest transaction, Kafka Streams' commit interval (ms).
    pub(crate) commit_ms: u64,
}

/// One running instance.
pub(crate) struct Instance {
    pub(crate) name: String,
    child: KillOnDrop,
    /// kshard's HTTP address.
    addr: Option<String>,
    /// Kafka Streams' last "RUNNING …" or "state …" line.
    last_line: Arc<Mutex<String>>,
}

impl Deployment<'_> {
    /// Starts instance `name` (its data or state directory kept across
    /// restarts).
    pub(crate) fn start(&self, name: &str) -> Result<Instance> {
        let data = self.dir.join(format!("{}-{name}", self.topic));
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.join(format!("{}-{name}.log", self.topic)))?;
        match self.system {
            System::Kshard => {
                let listen = free_addr()?;
                let mut command = Command::new(std::env::current_exe().unwrap_or_else(|_| "kshard".into()));
                command.args(["example", self.app.name(), "run"]);
                self.kafka.pass_to(&mut command);
                command.args(["--topic", &self.topic, "--partitions", &self.partitions.to_string()]);
                command.args(["--member-id", name, "--listen", &listen, "--lease-ttl", &self.lease_ttl.to_string()]);
                command.arg("--data-dir").arg(&data).args(["--max-txn-ms", &self.commit_ms.to_string()]);
                command.env_remove("KSHARD_ETCD").env_remove("KSHARD_ETCD_PREFIX");
                if !self.etcd.is_empty() {
                    let prefix = format!("/kshard-bench/{}", self.topic);
                    command.args(["--etcd", &self.etcd.join(","), "--etcd-prefix", &prefix]);
                }
                let child = command.stdout(Stdio::null()).stderr(log).spawn().context("starting a member")?;
                Ok(Instance {
                    name: name.to_owned(),
                    child: KillOnDrop(child),
                    addr: Some(listen),
                    last_line: Arc::default(),
                })
            }
            System::Streams => {
                let session_ms = (self.lease_ttl * 1000).to_string();
                let mut child = Command::new("bash")
                    .arg(&self.streams_script)
                    .args([self.app.name(), &self.bootstrap, &format!("{}-app", self.topic), &self.topic])
                    .arg(self.app.output(&self.topic))
                    .arg(&data)
                    .args([&self.threads.to_string(), &session_ms, "1", &self.commit_ms.to_string()])
                    .stdout(Stdio::piped())
                    .stderr(log)
                    .spawn()
                    .context("starting a Kafka Streams instance")?;
                let last_line = Arc::new(Mutex::new(String::new()));
                if let Some(out) = child.stdout.take() {
                    let last = Arc::clone(&last_line);
                    std::thread::spawn(move || {
                        for line in std::io::BufReader::new(out).lines().map_while(Result::ok) {
                            *last.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = line;
                        }
                    });
                }
                Ok(Instance { name: name.to_owned(), child: KillOnDrop(child), addr: None, last_line })
            }
        }
    }
}

impl Instance {
    pub(crate) fn pid(&self) -> u32 {
        self.child.0.id()
    }

    pub(crate) fn stats(&self) -> ProcessStats {
        process_stats(self.pid()).unwrap_or(ProcessStats { cpu_seconds: 0.0, peak_rss_mb: 0.0 })
    }

    fn shards(&self) -> Vec<ShardRow> {
        self.addr.as_deref().and_then(|a| MemberClient::new(a, Duration::from_secs(2)).shards()).unwrap_or_default()
    }

    fn line(&self) -> String {
        self.last_line.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone()
    }

    /// Kafka Streams' tasks from its last RUNNING line (active, standby).
    fn tasks(&self) -> Option<(Vec<String>, Vec<String>)> {
        let line = self.line();
        let rest = line.strip_prefix("RUNNING ")?;
        let list = |name: &str| -> Vec<String> {
            rest.split(' ')
                .find_map(|f| f.strip_prefix(name))
                .map(|l| l.split(',').filter(|t| !t.is_empty()).map(str::to_owned).collect())
                .unwrap_or_default()
        };
        Some((list("active="), list("standby=")))
    }

    /// Whether every shard (task) of the deployment is processing on one of
    /// `members`, each with a hot standby when `standbys` (asked of this
    /// instance for kshard, of each for Kafka Streams).
    pub(crate) fn serving(&self, members: &[&Instance], standbys: bool) -> bool {
        if self.addr.is_some() {
            let rows = self.shards();
            let names: Vec<&str> = members.iter().map(|m| m.name.as_str()).collect();
            let shards: std::collections::BTreeSet<&str> = rows.iter().map(|r| r.shard.as_str()).collect();
            return !rows.is_empty()
                && shards.iter().all(|s| {
                    let of = |status: &str| {
                        rows.iter().any(|r| r.shard == *s && r.status == status && names.contains(&r.member.as_str()))
                    };
                    of("PRIMARY") && (!standbys || of("STANDBY"))
                });
        }
        let Some(tasks) = members.iter().map(|m| m.tasks()).collect::<Option<Vec<_>>>() else { return false };
        let active: Vec<&String> = tasks.iter().flat_map(|(a, _)| a).collect();
        let standby: Vec<&String> = tasks.iter().flat_map(|(_, s)| s).collect();
        !active.is_empty() && (!standbys || active.iter().all(|t| standby.contains(t)))
    }

    /// Whether this instance processes source partition 0 (kshard: holds
    /// the primary of its first shard; Kafka Streams: active task 0_0).
    pub(crate) fn holds_first(&self, app: App) -> bool {
        if self.addr.is_some() {
            let first = match app {
                App::Sum => crate::example_sum::shard_id(0),
                App::WordCount => "split-000".to_owned(),
            };
            return self.shards().iter().any(|r| r.shard == first && r.status == "PRIMARY" && r.member == self.name);
        }
        self.tasks().is_some_and(|(active, _)| active.iter().any(|t| t == "0_0"))
    }

    /// Waits until `ready` holds, checking the process lives.
    pub(crate) fn wait(&mut self, what: &str, limit: Duration, ready: impl Fn(&Instance) -> bool) -> Result<()> {
        let started = Instant::now();
        loop {
            if ready(self) {
                return Ok(());
            }
            self.alive().with_context(|| format!("before {what}"))?;
            if started.elapsed() > limit {
                bail!("{} not {what} within {limit:?}", self.name);
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// An error once the process has exited.
    pub(crate) fn alive(&mut self) -> Result<()> {
        match self.child.0.try_wait()? {
            Some(status) => bail!("{} exited with {status}", self.name),
            None => Ok(()),
        }
    }

    /// SIGTERM, and waits for a clean exit.
    pub(crate) fn stop(mut self) -> Result<()> {
        let pid = self.pid().to_string();
        Command::new("kill").args(["-TERM", &pid]).status().context("kill -TERM")?;
        let status = self.child.0.wait()?;
        // The JVM exits with 143 after its shutdown hooks on SIGTERM.
        if !status.success() && status.code() != Some(143) {
            bail!("{} exited with {status}", self.name);
        }
        Ok(())
    }

    /// SIGKILL.
    pub(crate) fn kill(mut self) {
        let _ = self.child.0.kill();
        let _ = self.child.0.wait();
    }
}
