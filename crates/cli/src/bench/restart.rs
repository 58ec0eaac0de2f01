//! `kshard bench restart`: `kshard serve --data-dir` on the offsets topic as it
//! is — a cold start (no data directory, no recovery logs: reads everything and
//! writes the logs), then restarts after `kill -9` on the data directory (reads
//! only what is new), next to the plain catch-up without a data directory.

use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use kshard_kafka::Admin;

use super::Run;
use super::catch_up::start_serve;
use super::median;
use crate::serve_config::KafkaArgs;

fn show(what: &str, r: &Run) {
    println!(
        "{what:<44} {:>7.2} s  {:>9} records read  {:>6.2} CPU-s  peak RSS {:>6.1} MB  {:>3} connections",
        r.seconds, r.records, r.stats.cpu_seconds, r.stats.peak_rss_mb, r.connections
    );
}

/// `bench restart`, with each reader in turn (kshard's own and librdkafka's,
/// or only the one `--reader` names).
pub(crate) fn restart(kafka: &KafkaArgs, runs: usize) -> Result<()> {
    for reader in super::readers(kafka) {
        println!("reader: {reader}");
        restart_with(&KafkaArgs { reader: Some(reader), ..kafka.clone() }, runs)?;
    }
    Ok(())
}

fn restart_with(kafka: &KafkaArgs, runs: usize) -> Result<()> {
    let target = kafka.target()?;
    let dir = std::env::temp_dir().join(format!("kshard-bench-restart-{}", std::process::id()));
    let dir_arg = dir.display().to_string();
    // A cold start: no recovery logs from an earlier run either.
    let log_topic = kshard_lag::recovery_log_topic(&target.offsets_topic);
    let admin = Admin::new(&target.kafka, Duration::from_secs(30))?;
    if admin.delete_topic(&log_topic)? {
        let deadline = Instant::now() + Duration::from_secs(60);
        while admin.partition_count(&log_topic)?.is_some() {
            if Instant::now() > deadline {
                bail!("{log_topic} was not deleted within 60 s");
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        // The broker forgets a deleted topic's name a moment after its metadata.
        std::thread::sleep(Duration::from_secs(2));
    }

    let (plain, child) = start_serve(kafka, &[])?;
    drop(child);
    show("catch-up without a data directory", &plain);
    let (cold, child) = start_serve(kafka, &["--data-dir", &dir_arg])?;
    // Let the last transactions reach the recovery logs and the stores.
    std::thread::sleep(Duration::from_secs(2));
    drop(child);
    show("cold start with a new data directory", &cold);
    let mut restarts = Vec::new();
    for i in 0..runs {
        let (r, child) = start_serve(kafka, &["--data-dir", &dir_arg])?;
        std::thread::sleep(Duration::from_millis(500));
        drop(child);
        show(&format!("restart {} on the data directory (after kill -9)", i + 1), &r);
        restarts.push(r);
    }
    let m = |f: fn(&Run) -> f64| median(restarts.iter().map(f).collect());
    println!(
        "restart: median {:.2} s over {runs} runs ({:.0} records read, {:.2} CPU-s, peak RSS {:.1} MB, {:.0} connections); cold start {:.2} s; catch-up without a data directory {:.2} s",
        m(|r| r.seconds),
        m(|r| r.records as f64),
        m(|r| r.stats.cpu_seconds),
        m(|r| r.stats.peak_rss_mb),
        m(|r| r.connections as f64),
        cold.seconds,
        plain.seconds
    );
    println!(
        "cold start / catch-up without a data directory: CPU {:.1}x, peak RSS {:.1}x",
        cold.stats.cpu_seconds / plain.stats.cpu_seconds.max(1e-9),
        cold.stats.peak_rss_mb / plain.stats.peak_rss_mb.max(1e-9)
    );
    std::fs::remove_dir_all(&dir).context("removing the data directory")?;
    Ok(())
}
