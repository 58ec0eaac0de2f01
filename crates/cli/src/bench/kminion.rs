//! kminion (redpanda-data/kminion, built from its source: see the README's
//! performance section) measured like `kshard serve`: started as a child
//! process on the same broker and data, in `offsetsTopic` mode, until its
//! `/ready` is 200 (it has read `__consumer_offsets` to the end), with its
//! CPU, peak RSS and connections then.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Instant;

use anyhow::{Context, Result};

use super::KillOnDrop;
use super::Run;

/// Runs the kminion binary at `kminion` against `brokers` (PLAINTEXT) to ready.
pub(crate) fn run_kminion(kminion: &Path, brokers: &str, port: u16) -> Result<Run> {
    let addr = super::free_addr()?;
    let (host, listen) = addr.rsplit_once(':').context("a listen address")?;
    let dir = std::env::temp_dir().join(format!("kshard-bench-kminion-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let config = dir.join("kminion.yaml");
    let brokers: Vec<String> = brokers.split(',').map(|b| format!("\"{}\"", b.trim())).collect();
    std::fs::write(
        &config,
        format!(
            "kafka:\n  brokers: [{}]\nminion:\n  consumerGroups:\n    enabled: true\n    scrapeMode: offsetsTopic\n\
             exporter:\n  host: \"{host}\"\n  port: {listen}\nlogger:\n  level: warn\n",
            brokers.join(", ")
        ),
    )?;
    let started = Instant::now();
    let child = KillOnDrop(
        Command::new(kminion)
            .env("CONFIG_FILEPATH", &config)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .with_context(|| format!("starting kminion ({})", kminion.display()))?,
    );
    let pid = child.0.id();
    let (seconds, stats, _) = super::wait_ready(&addr, pid, started, "kminion")?;
    let connections = super::connections_to(pid, port);
    drop(child);
    let _ = std::fs::remove_dir_all(&dir);
    Ok(Run { seconds, stats, records: 0, addr, connections })
}
