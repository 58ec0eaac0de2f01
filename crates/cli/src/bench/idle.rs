//! `kshard bench idle`: what a caught-up `kshard serve` costs while
//! Prometheus scrapes it: started as a child, waited for until `/ready` is
//! 200 and a few seconds more, then its CPU time over a window in which
//! `/metrics` is read every `scrape_seconds` (and over one without scrapes),
//! for each reader.

use std::time::{Duration, Instant};

use anyhow::Result;

use super::catch_up::start_serve;
use super::{http_get, process_stats};
use crate::serve_config::KafkaArgs;

/// What `bench idle` measures.
pub(crate) struct IdleBench<'a> {
    pub(crate) kafka: &'a KafkaArgs,
    /// How long each window lasts.
    pub(crate) seconds: u64,
    /// Seconds between scrapes.
    pub(crate) scrape_seconds: u64,
}

/// Percent of a core a caught-up serve uses over `window`, reading
/// `/metrics` every `every` when given.
fn window(pid: u32, addr: &str, window: Duration, every: Option<Duration>) -> Result<(f64, usize)> {
    let before = process_stats(pid)?.cpu_seconds;
    let started = Instant::now();
    let mut bytes = 0;
    while started.elapsed() < window {
        if let Some(every) = every {
            let (_, body) = http_get(addr, "/metrics")?;
            bytes = body.len();
            std::thread::sleep(every.min(window.saturating_sub(started.elapsed())));
        } else {
            std::thread::sleep(window.saturating_sub(started.elapsed()));
        }
    }
    let cpu = process_stats(pid)?.cpu_seconds - before;
    Ok((cpu / started.elapsed().as_secs_f64() * 100.0, bytes))
}

/// `bench idle`.
pub(crate) fn idle(b: &IdleBench<'_>) -> Result<()> {
    b.kafka.target()?;
    let readers: Vec<String> = match &b.kafka.reader {
        Some(reader) => vec![reader.clone()],
        None => vec!["kshard".into(), "librdkafka".into()],
    };
    let length = Duration::from_secs(b.seconds.max(5));
    let every = Duration::from_secs(b.scrape_seconds.max(1));
    println!(
        "window {} s, /metrics every {} s       % of a core scraped   not scraped   exposition",
        length.as_secs(),
        every.as_secs()
    );
    for reader in readers {
        let args = KafkaArgs { reader: Some(reader.clone()), ..b.kafka.clone() };
        let (run, child) = start_serve(&args, &[])?;
        // Past the first refreshes after ready.
        std::thread::sleep(Duration::from_secs(5));
        let pid = child.0.id();
        let (scraped, bytes) = window(pid, &run.addr, length, Some(every))?;
        let (quiet, _) = window(pid, &run.addr, length, None)?;
        println!(
            "kshard serve (reader: {reader:<10})       {scraped:>8.2}%        {quiet:>8.2}%   {:>8.1} MB",
            bytes as f64 / 1e6
        );
        drop(child);
    }
    Ok(())
}
