//! `kshard bench runtime`: the runtime's targets, measured with `kshard
//! example sum` members as child processes on the real broker (and etcd):
//!
//! - restart: a member stopped (SIGTERM) and started again on its data
//!   directory, from spawn to every shard PRIMARY — it plays only what follows
//!   its stores' checkpoints, whatever the size of the log;
//! - cold start: the same with the data directory deleted — the stores are
//!   rebuilt from the recovery logs (from their newest snapshots);
//! - fail-over (with `--etcd`): two members, `kill -9` of the one holding
//!   primaries, until every shard is PRIMARY on the other — bounded by the
//!   member lease's TTL, after which the standbys take over.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use kshard_runtime::ShardRow;
use kshard_runtime::get_json;

use super::{KillOnDrop, free_addr, http_get, median, metric_sum};
use crate::serve_config::KafkaArgs;

/// What `bench runtime` measures with.
pub(crate) struct RuntimeBench {
    pub(crate) kafka: KafkaArgs,
    pub(crate) etcd: Vec<String>,
    pub(crate) records: u64,
    pub(crate) runs: usize,
    pub(crate) lease_ttl: u64,
    pub(crate) partitions: i32,
    pub(crate) streams: u32,
    pub(crate) batches: u64,
}

struct Setup<'a> {
    bench: &'a RuntimeBench,
    topic: String,
    dir: PathBuf,
}

impl Setup<'_> {
    fn kshard(&self, args: &[&str]) -> Command {
        let mut command = Command::new(std::env::current_exe().unwrap_or_else(|_| "kshard".into()));
        command.args(["example", "sum"]).args(args);
        self.bench.kafka.pass_to(&mut command);
        command.args(["--topic", &self.topic, "--partitions", &self.bench.partitions.to_string()]);
        command
    }

    fn produce(&self, records: u64) -> Result<()> {
        let expected = self.dir.join("expected.json");
        let out = self
            .kshard(&["produce", "--streams", &self.bench.streams.to_string(), "--records", &records.to_string()])
            .arg("--expected")
            .arg(&expected)
            .output()
            .context("running produce")?;
        if !out.status.success() {
            bail!("produce failed: {}", String::from_utf8_lossy(&out.stderr));
        }
        Ok(())
    }

    /// Starts member `id` on etcd (`clustered`) or alone; its HTTP address.
    fn start(&self, id: &str, clustered: bool) -> Result<(KillOnDrop, String)> {
        let listen = free_addr()?;
        let log = std::fs::OpenOptions::new().create(true).append(true).open(self.dir.join(format!("{id}.log")))?;
        let mut command = self.kshard(&["run", "--member-id", id, "--listen", &listen]);
        command.arg("--data-dir").arg(self.dir.join(id)).args(["--lease-ttl", &self.bench.lease_ttl.to_string()]);
        // Snapshots from 1 MiB of log (not 8): the bench's logs are a few MB.
        command.args(["--snapshot-min-bytes", "1048576"]);
        command.env_remove("KSHARD_ETCD").env_remove("KSHARD_ETCD_PREFIX");
        if clustered {
            command.args([
                "--etcd",
                &self.bench.etcd.join(","),
                "--etcd-prefix",
                &format!("/kshard-bench/{}", self.topic),
            ]);
        }
        let child = command.stdout(Stdio::null()).stderr(log).spawn().context("starting a member")?;
        Ok((KillOnDrop(child), listen))
    }

    /// Waits until every shard is PRIMARY on a member of `members` (and, with
    /// `standbys`, has a STANDBY), asking the member at `via`.
    fn served(&self, via: &str, members: &[&str], standbys: bool, limit: Duration) -> Result<()> {
        let started = Instant::now();
        loop {
            let rows: Vec<ShardRow> = get_json(via, "/api/shards", Duration::from_secs(2)).unwrap_or_default();
            let shards: std::collections::BTreeSet<&str> = rows.iter().map(|r| r.shard.as_str()).collect();
            let ok = !rows.is_empty()
                && shards.iter().all(|s| {
                    let of = |status: &str| {
                        rows.iter().any(|r| r.shard == *s && r.status == status && members.contains(&r.member.as_str()))
                    };
                    of("PRIMARY") && (!standbys || of("STANDBY"))
                });
            if ok {
                return Ok(());
            }
            if started.elapsed() > limit {
                bail!("not served within {limit:?} (member logs in {})", self.dir.display());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn stop(&self, mut member: KillOnDrop) -> Result<()> {
        let pid = member.0.id().to_string();
        Command::new("kill").args(["-TERM", &pid]).status().context("kill -TERM")?;
        let status = member.0.wait()?;
        if !status.success() {
            bail!("the member exited with {status}");
        }
        Ok(())
    }
}

fn played(addr: &str) -> u64 {
    let Ok((200, text)) = http_get(addr, "/metrics") else { return 0 };
    metric_sum(&text, "kshard_runtime_playback_records_total") as u64
}

/// `bench runtime`.
pub(crate) fn runtime(bench: &RuntimeBench) -> Result<()> {
    let topic = format!("kshard-bench-sum-{}", std::process::id());
    let dir = std::env::temp_dir().join(&topic);
    std::fs::create_dir_all(&dir)?;
    let setup = Setup { bench, topic, dir };
    let result = measure(&setup);
    if result.is_ok() {
        let _ = std::fs::remove_dir_all(&setup.dir);
    }
    result
}

fn measure(setup: &Setup<'_>) -> Result<()> {
    let bench = setup.bench;
    let limit = Duration::from_secs(300);
    let (member, addr) = setup.start("solo", false)?;
    setup.served(&addr, &["solo"], false, limit)?;
    println!(
        "producing {} records of {} streams to {} ({} partitions = shards) in {} batches while a member consumes",
        bench.records, bench.streams, setup.topic, bench.partitions, bench.batches
    );
    let started = Instant::now();
    let batches = bench.batches.max(1);
    for b in 0..batches {
        setup.produce(bench.records / batches + u64::from(b < bench.records % batches))?;
    }
    wait_consumed(setup, &addr)?;
    println!("produced and consumed in {:.1} s", started.elapsed().as_secs_f64());
    setup.stop(member)?;
    let (log_records, log_total) = log_records(setup)?;
    println!("recovery logs: {log_records} records now ({log_total} written; the rest deleted behind snapshots)");

    let (mut restarts, mut colds, mut restart_played, mut cold_played) = (vec![], vec![], vec![], vec![]);
    for _ in 0..bench.runs {
        let started = Instant::now();
        let (member, addr) = setup.start("solo", false)?;
        setup.served(&addr, &["solo"], false, limit)?;
        restarts.push(started.elapsed().as_secs_f64());
        restart_played.push(played(&addr) as f64);
        setup.stop(member)?;
        std::fs::remove_dir_all(setup.dir.join("solo")).context("deleting the data directory")?;
        let started = Instant::now();
        let (member, addr) = setup.start("solo", false)?;
        setup.served(&addr, &["solo"], false, limit)?;
        colds.push(started.elapsed().as_secs_f64());
        cold_played.push(played(&addr) as f64);
        setup.stop(member)?;
    }
    println!(
        "restart on the data directory: {:.2} s median of {} (records replayed: {}); cold start without it: {:.2} s (replayed {})",
        median(restarts),
        bench.runs,
        median(restart_played),
        median(colds),
        median(cold_played)
    );
    if bench.etcd.is_empty() {
        println!("fail-over: not measured (give --etcd)");
        return Ok(());
    }
    let mut members = vec![Some(setup.start("a", true)?), Some(setup.start("b", true)?)];
    setup.served(&members[0].as_ref().map_or(String::new(), |m| m.1.clone()), &["a", "b"], true, limit)?;
    let mut failovers = Vec::new();
    for run in 0..bench.runs {
        // Kill whoever holds the first shard's primary.
        let (victim, survivor) = primary_of_first(setup, &members)?;
        let (child, _) = members[victim].take().context("a running member")?;
        let mut child = child;
        let _ = child.0.kill();
        let killed = Instant::now();
        let _ = child.0.wait();
        let names = ["a", "b"];
        let survivor_addr = members[survivor].as_ref().map_or(String::new(), |m| m.1.clone());
        setup.served(&survivor_addr, &[names[survivor]], false, limit)?;
        failovers.push(killed.elapsed().as_secs_f64());
        println!("  fail-over {}: {:.2} s", run + 1, killed.elapsed().as_secs_f64());
        // Start the killed member again: it joins once its old lease expires.
        members[victim] = Some(setup.start(names[victim], true)?);
        setup.served(&survivor_addr, &["a", "b"], true, limit)?;
    }
    println!(
        "fail-over after kill -9: {:.2} s median of {} (lease TTL {} s)",
        median(failovers),
        bench.runs,
        bench.lease_ttl
    );
    Ok(())
}

/// Waits until the member has consumed every source record.
fn wait_consumed(setup: &Setup<'_>, addr: &str) -> Result<()> {
    let started = Instant::now();
    loop {
        if started.elapsed() > Duration::from_secs(600) {
            bail!("the member did not consume {} records in 600 s", setup.bench.records);
        }
        let Ok((200, text)) = http_get(addr, "/metrics") else {
            std::thread::sleep(Duration::from_millis(100));
            continue;
        };
        let consumed = metric_sum(&text, "kshard_runtime_transaction_messages_total");
        if consumed as u64 >= setup.bench.records {
            return Ok(());
        }
        if started.elapsed() > Duration::from_secs(600) {
            bail!("consumed {consumed} of {} records in 600 s", setup.bench.records);
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Records in the recovery logs now, and ever written.
fn log_records(setup: &Setup<'_>) -> Result<(i64, i64)> {
    let settings = setup.bench.kafka.target()?.settings;
    let admin = kshard_kafka::Admin::new(&settings, Duration::from_secs(30))?;
    let keys: Vec<kshard_kafka::TopicPartition> = (0..setup.bench.partitions)
        .map(|p| kshard_kafka::TopicPartition::new(format!("{}-log", setup.topic), p))
        .collect();
    let marks = admin.watermarks(&keys)?;
    Ok((marks.values().map(|(low, high)| high - low).sum(), marks.values().map(|(_, high)| high).sum()))
}

/// (index of the member holding sum-000's primary, index of the other).
fn primary_of_first(setup: &Setup<'_>, members: &[Option<(KillOnDrop, String)>]) -> Result<(usize, usize)> {
    let addr = members.iter().flatten().next().map(|m| m.1.clone()).context("no member")?;
    let rows: Vec<ShardRow> = get_json(&addr, "/api/shards", Duration::from_secs(2)).context("no answer")?;
    let holder = rows
        .iter()
        .find(|r| r.shard == crate::example_sum::shard_id(0) && r.status == "PRIMARY")
        .map(|r| r.member.clone())
        .with_context(|| format!("no primary (logs in {})", setup.dir.display()))?;
    Ok(if holder == "a" { (0, 1) } else { (1, 0) })
}
