//! `kshard bench catch-up`: the raw drain and `kshard serve` to ready, each a
//! child process on the same broker and data, alternating; medians.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

use super::{KillOnDrop, Run, median, process_stats};
use crate::serve_config::KafkaArgs;

/// Runs `kshard bench drain` as a child and measures it.
fn run_drain(kafka: &KafkaArgs) -> Result<Run> {
    let exe = std::env::current_exe()?;
    let started = Instant::now();
    let mut command = Command::new(exe);
    command.args(["bench", "drain"]);
    kafka.pass_to(&mut command);
    let mut child = command.stdout(Stdio::piped()).stderr(Stdio::inherit()).spawn().context("starting the drain")?;
    let pid = child.id();
    // Sample the stats just before the child exits: poll until it prints its result.
    let mut last = process_stats(pid)?;
    loop {
        if let Some(status) = child.try_wait()? {
            if !status.success() {
                bail!("the drain failed: {status}");
            }
            break;
        }
        // A process that has exited but not been reaped has no VmHWM any more:
        // keep the highest figures seen while it ran.
        if let Ok(s) = process_stats(pid) {
            last.cpu_seconds = last.cpu_seconds.max(s.cpu_seconds);
            last.peak_rss_mb = last.peak_rss_mb.max(s.peak_rss_mb);
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let seconds = started.elapsed().as_secs_f64();
    let mut out = String::new();
    std::io::Read::read_to_string(child.stdout.as_mut().context("drain stdout")?, &mut out)?;
    let records = out.trim().parse().with_context(|| format!("drain printed {out:?}"))?;
    Ok(Run { seconds, stats: last, records, addr: String::new(), connections: 0 })
}

/// Starts `kshard serve` as a child, measures time to a 200 on `/ready`, and the
/// child's CPU and peak RSS at that moment.
fn run_serve(kafka: &KafkaArgs) -> Result<Run> {
    Ok(start_serve(kafka, &[])?.0)
}

/// Starts `kshard serve` (with `args`) as a child and measures it until `/ready`
/// is 200; the run, and the child (killed when dropped).
pub(crate) fn start_serve(kafka: &KafkaArgs, args: &[&str]) -> Result<(Run, KillOnDrop)> {
    let addr = super::free_addr()?;
    let exe = std::env::current_exe()?;
    let started = Instant::now();
    let mut command = Command::new(exe);
    // A member of a cluster only when `args` say so (with --etcd).
    command.args(["serve", "--listen", &addr]).args(args).env_remove("KSHARD_ETCD");
    kafka.pass_to(&mut command);
    let child = KillOnDrop(
        command
            .env("KSHARD_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .context("starting kshard serve")?,
    );
    let pid = child.0.id();
    let (seconds, stats, body) = super::wait_ready(&addr, pid, started, "kshard serve")?;
    let records = serde_json::from_str::<serde_json::Value>(&body)?["records"].as_u64().unwrap_or(0);
    let connections = super::connections_to(pid, broker_port(kafka));
    Ok((Run { seconds, stats, records, addr, connections }, child))
}

/// The port of the first bootstrap broker (0 when it names none).
pub(crate) fn broker_port(kafka: &KafkaArgs) -> u16 {
    let brokers = kafka.target().map(|t| t.kafka.brokers().to_owned()).unwrap_or_default();
    brokers.split(',').next().and_then(|b| b.trim().rsplit_once(':')).and_then(|(_, p)| p.parse().ok()).unwrap_or(0)
}

/// `bench catch-up`: the drain, then `serve` with each reader (kshard's
/// own and librdkafka's, or only the one `--reader` names), then kminion
/// when given, alternating, `runs` times each.
pub(crate) fn catch_up(kafka: &KafkaArgs, runs: usize, kminion: Option<&std::path::Path>) -> Result<()> {
    // Fail here, with the reason, rather than in a child.
    let brokers = kafka.target()?.kafka.brokers().to_owned();
    let readers = super::readers(kafka);
    let mut drains = Vec::new();
    let mut kminions = Vec::new();
    let mut serves: Vec<Vec<Run>> = vec![Vec::new(); readers.len()];
    let say = |i: usize, what: &str, r: &Run| {
        eprintln!(
            "run {}: {what:<18} {:>8} records in {:.2} s, {:.2} CPU-s, peak RSS {:.1} MB, {} connections to the broker",
            i + 1,
            r.records,
            r.seconds,
            r.stats.cpu_seconds,
            r.stats.peak_rss_mb,
            r.connections
        );
    };
    for i in 0..runs {
        let d = run_drain(kafka)?;
        say(i, "drain", &d);
        drains.push(d);
        for (reader, runs) in readers.iter().zip(serves.iter_mut()) {
            let args = KafkaArgs { reader: Some(reader.clone()), ..kafka.clone() };
            let s = run_serve(&args)?;
            say(i, &format!("serve ({reader})"), &s);
            runs.push(s);
        }
        if let Some(path) = kminion {
            let k = super::kminion::run_kminion(path, &brokers, broker_port(kafka))?;
            say(i, "kminion", &k);
            kminions.push(k);
        }
    }
    let records = serves.iter().flatten().map(|r| r.records).max().unwrap_or(0).max(1);
    let m = |runs: &[Run], f: fn(&Run) -> f64| median(runs.iter().map(f).collect());
    let per_million = |cpu: f64| cpu / records as f64 * 1e6;
    let row = |name: &str, runs: &[Run]| {
        let (t, c, r) = (m(runs, |r| r.seconds), m(runs, |r| r.stats.cpu_seconds), m(runs, |r| r.stats.peak_rss_mb));
        let conns = m(runs, |r| r.connections as f64);
        println!("{name:<28} {t:>7.2} s  {c:>7.2}   {:>13.2}  {r:>7.1} MB  {conns:>4.0}", per_million(c));
    };
    println!("records in __consumer_offsets: {records}");
    println!("medians over {runs} runs           time      CPU-s   CPU-s/M records  peak RSS  connections");
    row("raw drain", &drains);
    for (reader, runs) in readers.iter().zip(&serves) {
        row(&format!("kshard serve ({reader}) ready"), runs);
    }
    if !kminions.is_empty() {
        row("kminion (offsetsTopic) ready", &kminions);
    }
    if let Some(first) = serves.first() {
        let ratio = m(first, |r| r.seconds) / m(&drains, |r| r.seconds).max(1e-9);
        println!("time to ready ({}) / raw drain: {ratio:.2}", readers[0]);
        if !kminions.is_empty() {
            let of = |f: fn(&Run) -> f64| m(&kminions, f) / m(first, f).max(1e-9);
            println!(
                "kminion / kshard ({}): time {:.1}x, CPU {:.1}x, peak RSS {:.1}x",
                readers[0],
                of(|r| r.seconds),
                of(|r| r.stats.cpu_seconds),
                of(|r| r.stats.peak_rss_mb)
            );
        }
    }
    Ok(())
}
