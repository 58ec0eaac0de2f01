//! `kshard bench runtime`: kshard's runtime beside Kafka Streams, on the same
//! broker and the same data, each system a child process: `kshard example
//! sum` and `example wordcount` members, and scripts/java/StreamsBench.java
//! (with `--streams-app`; exactly-once v2, one standby, RocksDB). Every
//! output is read back as a consumer of committed records reads it and
//! checked (each sum in sequence and the last exact, each count's update
//! once), so both sides are measured doing the same, correct work:
//!
//! Both commit at least every `--commit-ms` (kshard's longest transaction,
//! Kafka Streams' commit interval; 100 ms, Kafka Streams' default under
//! exactly-once) and publish alike: the latest sum per stream per commit
//! (Kafka Streams' record cache, flushed at each commit), every count.
//!
//! - steady state: a backlog of records drained by one instance — records
//!   per second and CPU-seconds per million from processing (every shard
//!   PRIMARY; RUNNING) to the last output, the process's peak RSS;
//! - end-to-end latency, input append to committed output (the output
//!   carries its input's timestamp), at a steady rate once caught up;
//! - restart on kept state of `--keys` keys (sum): SIGTERM, start, until
//!   processing (kshard: every shard PRIMARY; Kafka Streams: RUNNING) and
//!   until the first committed output of a record written after the start;
//! - fail-over (sum; kshard with `--etcd`): two instances, `kill -9` of the
//!   one processing partition 0, until the first committed output of a
//!   partition-0 record written after the kill — the lease (kshard) or
//!   session timeout (Kafka Streams) is the same `--lease-ttl`.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use kshard_kafka::{Admin, Client, TopicSpec};

use super::contender::{App, Deployment, Instance, System};
use super::median;
use super::outputs::{Load, Shared, Tail, lock, now_ms, quantile};
use super::workload::{CountWorkload, SumWorkload, Workload};
use crate::serve_config::KafkaArgs;

/// What `bench runtime` measures with.
#[derive(Debug, clap::Args)]
pub(crate) struct RuntimeBench {
    #[command(flatten)]
    pub(crate) kafka: KafkaArgs,
    /// etcd endpoints, for kshard's fail-over (two members).
    #[arg(long, env = "KSHARD_ETCD", value_delimiter = ',')]
    pub(crate) etcd: Vec<String>,
    /// Sum: records in the backlog each system drains.
    #[arg(long, default_value_t = 2_000_000)]
    pub(crate) records: u64,
    /// Word count: lines in the backlog (1 to 12 words each).
    #[arg(long, default_value_t = 250_000)]
    pub(crate) lines: u64,
    /// Sum: the keys of state a restart keeps.
    #[arg(long, default_value_t = 1_000_000)]
    pub(crate) keys: u32,
    /// Runs of the restart and of the fail-over.
    #[arg(long, default_value_t = 3)]
    pub(crate) runs: usize,
    /// kshard's lease TTL and Kafka Streams' session timeout (seconds).
    #[arg(long, default_value_t = 10)]
    pub(crate) lease_ttl: u64,
    /// Source partitions (= kshard's shards, Kafka Streams' tasks).
    #[arg(long, default_value_t = 4)]
    pub(crate) partitions: i32,
    /// Sum: streams (keys) of the steady-state load.
    #[arg(long, default_value_t = 1_000)]
    pub(crate) streams: u32,
    /// Word count: distinct words.
    #[arg(long, default_value_t = 500)]
    pub(crate) vocabulary: u32,
    /// Records a second while latency is timed (and during fail-overs).
    #[arg(long, default_value_t = 5_000)]
    pub(crate) rate: u64,
    /// Seconds latency is timed.
    #[arg(long, default_value_t = 20)]
    pub(crate) latency_seconds: u64,
    /// scripts/streams-bench.sh: run Kafka Streams beside kshard.
    #[arg(long)]
    pub(crate) streams_app: Option<std::path::PathBuf>,
    /// Kafka Streams' stream threads.
    #[arg(long, default_value_t = 2)]
    pub(crate) threads: u32,
    /// kshard's longest transaction and Kafka Streams' commit interval
    /// (ms; 100 is Kafka Streams' default under exactly-once).
    #[arg(long, default_value_t = 100)]
    pub(crate) commit_ms: u64,
}

const LIMIT: Duration = Duration::from_secs(900);

/// A steady-state run's figures.
struct Steady {
    records_per_second: f64,
    cpu_per_million: f64,
    peak_rss_mb: f64,
    p50_ms: f64,
    p99_ms: f64,
}

struct Bench<'a> {
    bench: &'a RuntimeBench,
    client: Client,
    admin: Admin,
    dir: PathBuf,
    run: String,
}

impl Bench<'_> {
    fn deployment(&self, system: System, app: App, phase: &str, etcd: bool) -> Deployment<'_> {
        let tag = if system == System::Kshard { "kshard" } else { "streams" };
        Deployment {
            system,
            app,
            kafka: &self.bench.kafka,
            bootstrap: self.client.brokers().to_owned(),
            topic: format!("{}-{}-{phase}-{tag}", self.run, app.name()),
            partitions: self.bench.partitions,
            dir: self.dir.clone(),
            etcd: if etcd { self.bench.etcd.clone() } else { Vec::new() },
            lease_ttl: self.bench.lease_ttl,
            streams_script: self.bench.streams_app.clone().unwrap_or_default(),
            threads: self.bench.threads,
            commit_ms: self.bench.commit_ms,
        }
    }

    fn workload(&self, app: App, streams: u32, every_stream: bool) -> Result<Shared> {
        let w: Box<dyn Workload> = match app {
            App::Sum => Box::new(SumWorkload::new(self.bench.partitions, streams, every_stream)?),
            App::WordCount => Box::new(CountWorkload::new(self.bench.partitions, self.bench.vocabulary)?),
        };
        Ok(Arc::new(Mutex::new(w)))
    }

    /// The input and output topics (the outputs read from their start).
    fn topics(&self, d: &Deployment<'_>) -> Result<()> {
        for name in [d.topic.clone(), d.app.output(&d.topic)] {
            let spec = TopicSpec { name: name.clone(), partitions: d.partitions, replication: -1, configs: vec![] };
            self.admin.create_topic(&spec).with_context(|| format!("creating {name}"))?;
        }
        Ok(())
    }

    fn steady(&self, system: System, app: App) -> Result<Steady> {
        let d = self.deployment(system, app, "steady", false);
        self.topics(&d)?;
        let workload = self.workload(app, self.bench.streams, false)?;
        let load = Load::new(&self.client, &d.topic, Arc::clone(&workload))?;
        let records = if app == App::Sum { self.bench.records } else { self.bench.lines };
        load.bulk(records)?;
        let tail = Tail::start(&self.client, &app.output(&d.topic), d.partitions, Arc::clone(&workload))?;
        let units = lock(&workload).units();
        let mut instance = d.start("solo")?;
        let started = Instant::now();
        // From processing (every shard PRIMARY, or RUNNING) to the last
        // output: the start-up of neither system counted.
        let mut processing = None;
        loop {
            let reflected = tail.reflected()?;
            if processing.is_none() && instance.serving(&[&instance], false) {
                processing = Some((Instant::now(), instance.stats().cpu_seconds));
            }
            if reflected >= units {
                break;
            }
            if started.elapsed() > LIMIT {
                bail!("{}: {reflected} of {units} input units out after {LIMIT:?}", system.name());
            }
            instance.alive()?;
            std::thread::sleep(Duration::from_millis(20));
        }
        let (since, cpu_then) = processing.unwrap_or((started, 0.0));
        let seconds = since.elapsed().as_secs_f64();
        let records_per_second = records as f64 / seconds.max(1e-3);
        let cpu_per_million = (instance.stats().cpu_seconds - cpu_then) / records as f64 * 1e6;
        println!(
            "  {}: processing after {:.1} s, then {records} records drained in {seconds:.2} s: {records_per_second:.0} records/s, {cpu_per_million:.2} CPU-s per million",
            system.name(),
            since.duration_since(started).as_secs_f64()
        );
        // Caught up: a steady rate, timed from two seconds in.
        tail.time_from(Some(now_ms() + 2_000));
        let paced = load.paced(self.bench.rate);
        std::thread::sleep(Duration::from_secs(self.bench.latency_seconds + 2));
        paced.finish()?;
        tail.wait_for(units_of(&workload), Duration::from_secs(120))?;
        let mut latencies = tail.latencies();
        exact(&workload)?;
        let peak_rss_mb = instance.stats().peak_rss_mb;
        instance.stop()?;
        let (p50_ms, p99_ms) = (quantile(&mut latencies, 0.5), quantile(&mut latencies, 0.99));
        println!(
            "  {}: at {} records/s, {} outputs timed: p50 {p50_ms:.0} ms, p99 {p99_ms:.0} ms; peak RSS {peak_rss_mb:.1} MB; outputs exact",
            system.name(),
            self.bench.rate,
            latencies.len()
        );
        Ok(Steady { records_per_second, cpu_per_million, peak_rss_mb, p50_ms, p99_ms })
    }

    /// Restarts on `--keys` keys: (until processing, until the first new
    /// output), medians.
    fn restart(&self, system: System) -> Result<(f64, f64)> {
        let d = self.deployment(system, App::Sum, "restart", false);
        self.topics(&d)?;
        let workload = self.workload(App::Sum, self.bench.keys, true)?;
        let load = Load::new(&self.client, &d.topic, Arc::clone(&workload))?;
        load.bulk(u64::from(self.bench.keys))?;
        let tail = Tail::start(&self.client, &App::Sum.output(&d.topic), d.partitions, Arc::clone(&workload))?;
        let started = Instant::now();
        let mut instance = d.start("solo")?;
        tail.wait_for(units_of(&workload), LIMIT)?;
        instance.wait("processing", LIMIT, |i| i.serving(&[i], false))?;
        println!(
            "  {}: {} keys' state built in {:.1} s",
            system.name(),
            self.bench.keys,
            started.elapsed().as_secs_f64()
        );
        instance.stop()?;
        let paced = load.paced(self.bench.rate.min(1_000));
        let (mut ready, mut first) = (Vec::new(), Vec::new());
        for run in 0..self.bench.runs {
            tail.watch(None, now_ms());
            let spawned = Instant::now();
            let mut instance = d.start("solo")?;
            instance.wait("processing", LIMIT, |i| i.serving(&[i], false))?;
            ready.push(spawned.elapsed().as_secs_f64());
            first.push(tail.watched(LIMIT)?.duration_since(spawned).as_secs_f64());
            println!(
                "  {} restart {}: processing after {:.2} s, first new output after {:.2} s",
                system.name(),
                run + 1,
                ready[run],
                first[run]
            );
            instance.stop()?;
        }
        paced.finish()?;
        let instance = d.start("solo")?;
        tail.wait_for(units_of(&workload), LIMIT)?;
        exact(&workload)?;
        instance.stop()?;
        Ok((median(ready), median(first)))
    }

    /// Fail-overs after `kill -9`: the first new output of partition 0, median.
    fn failover(&self, system: System) -> Result<f64> {
        let d = self.deployment(system, App::Sum, "failover", true);
        self.topics(&d)?;
        let workload = self.workload(App::Sum, self.bench.streams, false)?;
        let load = Load::new(&self.client, &d.topic, Arc::clone(&workload))?;
        load.bulk(self.bench.records / 10)?;
        let tail = Tail::start(&self.client, &App::Sum.output(&d.topic), d.partitions, Arc::clone(&workload))?;
        let mut members = vec![d.start("a")?, d.start("b")?];
        wait_served(&mut members, &tail, &workload)?;
        let paced = load.paced(self.bench.rate);
        let mut times = Vec::new();
        for run in 0..self.bench.runs {
            let victim = holder_of_first(&members)?;
            let dead = members.remove(victim);
            let name = dead.name.clone();
            dead.kill();
            let killed = Instant::now();
            tail.watch(Some(0), now_ms());
            let took = tail.watched(LIMIT)?.duration_since(killed).as_secs_f64();
            println!("  {} fail-over {}: first output of partition 0 after {took:.2} s", system.name(), run + 1);
            times.push(took);
            members.push(d.start(&name)?);
            wait_served(&mut members, &tail, &workload)?;
        }
        paced.finish()?;
        tail.wait_for(units_of(&workload), LIMIT)?;
        exact(&workload)?;
        for m in members {
            m.stop()?;
        }
        Ok(median(times))
    }
}

/// Whether every output taken matches the truth.
fn exact(workload: &Shared) -> Result<()> {
    lock(workload).exact().map_err(anyhow::Error::msg).context("the outputs are not exact")
}

/// Which member processes partition 0, waiting while none says (Kafka
/// Streams rebalancing: its instances then name no tasks).
fn holder_of_first(members: &[Instance]) -> Result<usize> {
    let started = Instant::now();
    loop {
        if let Some(i) = members.iter().position(|m| m.holds_first(App::Sum)) {
            return Ok(i);
        }
        if started.elapsed() > LIMIT {
            bail!("no member processes partition 0 after {LIMIT:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The input units produced so far (the lock let go before the tail,
/// which takes it for every output, is waited on).
fn units_of(workload: &Shared) -> u64 {
    lock(workload).units()
}

/// Waits until both members serve every partition with a standby, and the
/// outputs are caught up; then lets the standbys settle.
fn wait_served(members: &mut [Instance], tail: &Tail, workload: &Shared) -> Result<()> {
    let (first, rest) = members.split_first_mut().context("no member")?;
    let others: Vec<&Instance> = rest.iter().collect();
    first.wait("served with standbys", LIMIT, |i| {
        let mut all = vec![i];
        all.extend(others.iter().copied());
        i.serving(&all, true)
    })?;
    tail.wait_for(units_of(workload), LIMIT)?;
    std::thread::sleep(Duration::from_secs(3));
    Ok(())
}

/// `bench runtime`.
pub(crate) fn runtime(bench: &RuntimeBench) -> Result<()> {
    let client = bench.kafka.target()?.kafka;
    let admin = Admin::new(&client, Duration::from_secs(30))?;
    let run = format!("kshard-bench-rt-{}", std::process::id());
    let dir = std::env::temp_dir().join(&run);
    std::fs::create_dir_all(&dir)?;
    let mut systems = vec![System::Kshard];
    if let Some(script) = &bench.streams_app {
        let compiled = std::process::Command::new("bash").arg(script).arg("--compile").status();
        if !compiled.is_ok_and(|s| s.success()) {
            bail!("{} --compile failed (is Kafka Streams installed? scripts/install.sh)", script.display());
        }
        systems.push(System::Streams);
    }
    let b = Bench { bench, client, admin, dir, run };
    let result = measure(&b, &systems);
    if result.is_ok() {
        let _ = std::fs::remove_dir_all(&b.dir);
    } else {
        eprintln!("logs in {}", b.dir.display());
    }
    result
}

fn measure(b: &Bench<'_>, systems: &[System]) -> Result<()> {
    let bench = b.bench;
    println!(
        "{} partitions; sum: {} records of {} streams; word count: {} lines of a {}-word vocabulary; latency at {} records/s for {} s",
        bench.partitions,
        bench.records,
        bench.streams,
        bench.lines,
        bench.vocabulary,
        bench.rate,
        bench.latency_seconds
    );
    let mut rows = Vec::new();
    for app in [App::Sum, App::WordCount] {
        println!("{}, steady state:", app.name());
        for &system in systems {
            rows.push((app, system, b.steady(system, app)?));
        }
    }
    println!("{}, restart with {} keys of state:", App::Sum.name(), bench.keys);
    let mut restarts = Vec::new();
    for &system in systems {
        restarts.push((system, b.restart(system)?));
    }
    let mut failovers = Vec::new();
    if bench.etcd.is_empty() {
        println!("fail-over: not measured (give --etcd)");
    } else {
        println!("{}, fail-over after kill -9 (lease / session timeout {} s):", App::Sum.name(), bench.lease_ttl);
        for &system in systems {
            failovers.push((system, b.failover(system)?));
        }
    }
    println!();
    println!("| app | system | records/s | CPU-s per million | peak RSS | e2e p50 | e2e p99 |");
    println!("| --- | --- | --- | --- | --- | --- | --- |");
    for (app, system, s) in &rows {
        println!(
            "| {} | {} | {:.0} | {:.2} | {:.1} MB | {:.0} ms | {:.0} ms |",
            app.name(),
            system.name(),
            s.records_per_second,
            s.cpu_per_million,
            s.peak_rss_mb,
            s.p50_ms,
            s.p99_ms
        );
    }
    for app in [App::Sum, App::WordCount] {
        let of = |system| rows.iter().find(|r| r.0 == app && r.1 == system).map(|r| &r.2);
        if let (Some(k), Some(s)) = (of(System::Kshard), of(System::Streams)) {
            println!(
                "{}: kshard / Kafka Streams: records per CPU-second {:.1}x, peak RSS {:.2}x, p99 {:.2}x",
                app.name(),
                (1.0 / k.cpu_per_million) / (1.0 / s.cpu_per_million),
                k.peak_rss_mb / s.peak_rss_mb,
                k.p99_ms / s.p99_ms
            );
        }
    }
    for (system, (ready, first)) in &restarts {
        println!(
            "restart with {} keys, {}: processing after {ready:.2} s, first new output after {first:.2} s (median of {})",
            bench.keys,
            system.name(),
            bench.runs
        );
    }
    for (system, took) in &failovers {
        println!(
            "fail-over, {}: first output of the successor {took:.2} s after kill -9 (median of {}; lease / session {} s)",
            system.name(),
            bench.runs,
            bench.lease_ttl
        );
    }
    Ok(())
}
