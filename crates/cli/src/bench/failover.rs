//! `kshard bench failover`: three `kshard serve --etcd` members on the offsets
//! topic as it is; then, `runs` times, SIGKILL of the member holding the most
//! primaries, timed until every shard is PRIMARY on a survivor — while one
//! survivor's `/metrics` is scraped every 100 ms to count lag series lost —
//! and the member restarted on its data directory before the next run.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

use super::Run;
use super::catch_up::start_serve;
use super::{KillOnDrop, http_get, median};
use crate::serve_config::KafkaArgs;

/// How `bench failover` runs.
pub(crate) struct FailoverBench<'a> {
    pub(crate) kafka: &'a KafkaArgs,
    pub(crate) etcd: &'a [String],
    pub(crate) runs: usize,
    pub(crate) lease_ttl: u64,
}

/// A member: its id, address and process.
struct Member {
    id: String,
    addr: String,
    child: KillOnDrop,
}

/// The primaries each member holds, from `addr`'s `/ready`; with the number of shards.
fn primaries(addr: &str) -> Result<(usize, BTreeMap<String, usize>)> {
    let (_, body) = http_get(addr, "/ready")?;
    let ready: serde_json::Value = serde_json::from_str(&body)?;
    let shards = ready["shards"].as_object().map_or(0, serde_json::Map::len);
    let mut per_member = BTreeMap::new();
    for m in ready["primaries"].as_object().into_iter().flat_map(|p| p.values()) {
        *per_member.entry(m.as_str().unwrap_or_default().to_owned()).or_default() += 1;
    }
    Ok((shards, per_member))
}

/// Lag series on `addr`'s `/metrics`.
fn lag_series(addr: &str) -> Result<usize> {
    let (_, text) = http_get(addr, "/metrics")?;
    Ok(text.lines().filter(|l| l.starts_with("kshard_kafka_consumer_group_topic_partition_lag{")).count())
}

/// Waits until every shard has a primary on one of `members`, spread so that
/// each holds at least a third of them, rounded down.
fn wait_balanced(members: &[Member]) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(300);
    loop {
        let (shards, per_member) = primaries(&members[0].addr)?;
        let least = shards / members.len();
        let placed: usize = members.iter().map(|m| per_member.get(&m.id).copied().unwrap_or(0)).sum();
        if shards > 0
            && placed == shards
            && members.iter().all(|m| per_member.get(&m.id).copied().unwrap_or(0) >= least)
        {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!("primaries not spread over the members within 300 s: {per_member:?}");
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// `bench failover`, with each reader in turn (kshard's own and
/// librdkafka's, or only the one `--reader` names).
pub(crate) fn failover(b: &FailoverBench<'_>) -> Result<()> {
    if b.etcd.is_empty() {
        bail!("bench failover needs --etcd (KSHARD_ETCD)");
    }
    for reader in super::readers(b.kafka) {
        println!("reader: {reader}");
        let kafka = KafkaArgs { reader: Some(reader), ..b.kafka.clone() };
        failover_with(&FailoverBench { kafka: &kafka, ..*b })?;
    }
    Ok(())
}

/// One fail-over: who was killed (and where it stood among the members),
/// how many primaries it held of how many shards, the seconds until every
/// shard was PRIMARY on a survivor, and a survivor's lag series before and
/// at the fewest meanwhile.
struct Takeover {
    victim: String,
    index: usize,
    held: usize,
    shards: usize,
    seconds: f64,
    series_before: usize,
    fewest: usize,
}

/// Kills the member holding the most primaries (SIGKILL, by dropping its
/// child) and times the survivors' takeover, watching a survivor's series.
fn takeover(members: &mut Vec<Member>) -> Result<Takeover> {
    let (shards, per_member) = primaries(&members[0].addr)?;
    let (victim, held) =
        per_member.iter().max_by_key(|(_, n)| **n).map(|(m, n)| (m.clone(), *n)).context("no primaries")?;
    let index = members.iter().position(|m| m.id == victim).context("the victim is not a member")?;
    let killed = members.remove(index);
    let survivor = members[0].addr.clone();
    let series_before = lag_series(&survivor)?;
    let started = Instant::now();
    drop(killed.child);
    let mut fewest = series_before;
    let seconds = loop {
        fewest = fewest.min(lag_series(&survivor)?);
        let (_, now) = primaries(&survivor)?;
        let on_survivors: usize = members.iter().map(|m| now.get(&m.id).copied().unwrap_or(0)).sum();
        if on_survivors == shards {
            break started.elapsed().as_secs_f64();
        }
        if started.elapsed() > Duration::from_secs(300) {
            bail!("the shards of {victim} were not taken over within 300 s: {now:?}");
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    Ok(Takeover { victim, index, held, shards, seconds, series_before, fewest })
}

fn failover_with(b: &FailoverBench<'_>) -> Result<()> {
    b.kafka.target()?;
    // Each reader's run on etcd keys, a log topic and data of its own.
    let reader = b.kafka.reader.clone().unwrap_or_default();
    let run_id = format!("kshard-bench-failover-{}-{reader}", std::process::id());
    let dir = std::env::temp_dir().join(&run_id);
    let start = |id: &str| -> Result<(Run, Member)> {
        let data = dir.join(id).display().to_string();
        let args = [
            "--etcd",
            &b.etcd.join(","),
            "--etcd-prefix",
            &format!("/{run_id}"),
            "--recovery-log-topic",
            &run_id,
            "--member-id",
            id,
            "--lease-ttl-seconds",
            &b.lease_ttl.to_string(),
            "--data-dir",
            &data,
        ];
        let (run, child) = start_serve(b.kafka, &args)?;
        let addr = run.addr.clone();
        Ok((run, Member { id: id.to_owned(), addr, child }))
    };
    let mut members = Vec::new();
    for id in ["a", "b", "c"] {
        let (run, member) = start(id)?;
        println!(
            "member {id} ready in {:.2} s ({} records read, {:.2} CPU-s, peak RSS {:.1} MB, {} connections to the broker)",
            run.seconds, run.records, run.stats.cpu_seconds, run.stats.peak_rss_mb, run.connections
        );
        members.push(member);
    }
    wait_balanced(&members)?;
    let mut times = Vec::new();
    for run in 1..=b.runs {
        let Takeover { victim, index, held, shards, seconds, series_before, fewest } = takeover(&mut members)?;
        println!(
            "run {run}: SIGKILL of {victim} ({held} of {shards} primaries): every shard PRIMARY on a survivor after {seconds:.2} s (lease {} s); lag series on a survivor: {series_before} before, {fewest} at the fewest",
            b.lease_ttl
        );
        times.push(seconds);
        let (back, member) = start(&victim)?;
        println!(
            "run {run}: {victim} restarted on its data directory, ready in {:.2} s ({:.2} CPU-s, peak RSS {:.1} MB, {} connections)",
            back.seconds, back.stats.cpu_seconds, back.stats.peak_rss_mb, back.connections
        );
        members.insert(index.min(members.len()), member);
        wait_balanced(&members)?;
    }
    println!(
        "fail-over: median {:.2} s over {} runs with a {} s lease (target: lease + 2 s = {} s)",
        median(times),
        b.runs,
        b.lease_ttl,
        b.lease_ttl + 2
    );
    drop(members);
    let _ = std::fs::remove_dir_all(&dir);
    let target = b.kafka.target()?;
    let admin = kshard_kafka::Admin::new(&target.kafka, Duration::from_secs(30))?;
    if let Err(e) = admin.delete_topic(&run_id) {
        eprintln!("deleting the recovery-log topic {run_id}: {e}");
    }
    Ok(())
}
