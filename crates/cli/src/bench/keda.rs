//! `kshard bench keda`: KEDA's external scaler under many scaled objects.
//! A caught-up `kshard serve --keda-listen` (a child process); `objects`
//! scaled objects, spread over the groups it serves, each asking `IsActive`
//! and `GetMetrics` every `interval` seconds (KEDA's polling), their starts
//! spread over the interval, over a window; each answer's latency (p50, p99,
//! max), and the Kafka requests kshard sent in that window beside an equal
//! window without scaled objects (what the refreshes send anyway), with its
//! CPU in each.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use kshard_lag::keda::proto::GetMetricsRequest;
use kshard_lag::keda::proto::external_scaler_client::ExternalScalerClient;
use kshard_lag::keda::scaled_object;

use super::catch_up::start_serve;
use super::outputs::quantile;
use super::{http_get, process_stats};
use crate::serve_config::KafkaArgs;

/// What `bench keda` measures.
pub(crate) struct KedaBench<'a> {
    pub(crate) kafka: &'a KafkaArgs,
    /// Scaled objects.
    pub(crate) objects: usize,
    /// Seconds between one object's polls.
    pub(crate) interval: u64,
    /// Seconds each window lasts.
    pub(crate) seconds: u64,
}

/// Kafka requests kshard sent so far, and its CPU seconds.
fn sent_and_cpu(addr: &str, pid: u32) -> Result<(f64, f64)> {
    let (_, text) = http_get(addr, "/metrics")?;
    let sent = text
        .lines()
        .filter(|l| l.starts_with("kshard_kafka_requests_sent_total"))
        .filter_map(|l| l.rsplit_once(' ')?.1.parse::<f64>().ok())
        .sum();
    Ok((sent, process_stats(pid)?.cpu_seconds))
}

/// The consumer groups `/api/groups` lists (share groups left out).
fn groups(addr: &str) -> Result<Vec<String>> {
    let (_, body) = http_get(addr, "/api/groups")?;
    let all: serde_json::Value = serde_json::from_str(&body).context("/api/groups is not JSON")?;
    Ok(all
        .as_array()
        .into_iter()
        .flatten()
        .filter(|g| g["protocol_type"] != "share")
        .filter_map(|g| g["group_id"].as_str().map(str::to_owned))
        .collect())
}

/// `bench keda`.
pub(crate) fn keda(b: &KedaBench<'_>) -> Result<()> {
    b.kafka.target()?;
    let keda_addr = super::free_addr()?;
    let args = KafkaArgs { reader: Some(b.kafka.reader.clone().unwrap_or_else(|| "kshard".into())), ..b.kafka.clone() };
    let (run, child) = start_serve(&args, &["--keda-listen", &keda_addr])?;
    let pid = child.0.id();
    let groups = groups(&run.addr)?;
    if groups.is_empty() {
        bail!("kshard serves no consumer group on this broker: run `kshard loadgen` first");
    }
    let (window, interval) = (Duration::from_secs(b.seconds.max(10)), Duration::from_secs(b.interval.max(1)));
    eprintln!("ready in {:.2} s; {} groups; an idle window of {} s", run.seconds, groups.len(), window.as_secs());
    let idle_from = sent_and_cpu(&run.addr, pid)?;
    std::thread::sleep(window);
    let idle_to = sent_and_cpu(&run.addr, pid)?;

    let load_from = sent_and_cpu(&run.addr, pid)?;
    let (mut all, refused) = poll(&keda_addr, &groups, b.objects, interval, window)?;
    let load_to = sent_and_cpu(&run.addr, pid)?;
    drop(child);

    let seconds = window.as_secs_f64();
    println!(
        "{} scaled objects, IsActive + GetMetrics every {} s, {} s: {} answers ({} refused)",
        b.objects,
        interval.as_secs(),
        window.as_secs(),
        all.len(),
        refused
    );
    println!(
        "latency ms: p50 {:.2}, p99 {:.2}, max {:.2}",
        quantile(&mut all, 0.50),
        quantile(&mut all, 0.99),
        all.last().copied().unwrap_or(f64::NAN)
    );
    println!(
        "Kafka requests sent by kshard: {:.0} in the idle window, {:.0} with the scaled objects",
        idle_to.0 - idle_from.0,
        load_to.0 - load_from.0
    );
    println!(
        "kshard's CPU: {:.2}% of a core idle, {:.2}% with the scaled objects",
        (idle_to.1 - idle_from.1) / seconds * 100.0,
        (load_to.1 - load_from.1) / seconds * 100.0
    );
    Ok(())
}

/// `objects` scaled objects on `groups`, each asking IsActive and
/// GetMetrics every `interval` over `window`: every answer's latency in ms,
/// sorted, and how many were refused.
fn poll(
    keda_addr: &str,
    groups: &[String],
    objects: usize,
    interval: Duration,
    window: Duration,
) -> Result<(Vec<f64>, u64)> {
    let runtime = crate::process_runtime::async_runtime()?;
    let latencies: Arc<Mutex<Vec<f64>>> = Arc::default();
    let refused = Arc::new(std::sync::atomic::AtomicU64::new(0));
    runtime.block_on(async {
        // A few connections, as KEDA's operator holds per scaler address.
        let mut channels = Vec::new();
        for _ in 0..4 {
            channels.push(ExternalScalerClient::connect(format!("http://{keda_addr}")).await?);
        }
        let start = tokio::time::Instant::now();
        let mut tasks = Vec::new();
        for i in 0..objects {
            let mut client = channels[i % channels.len()].clone();
            let object = scaled_object(&format!("object-{i}"), &[("consumerGroup", &groups[i % groups.len()])]);
            let (latencies, refused) = (Arc::clone(&latencies), Arc::clone(&refused));
            let first = start + interval.mul_f64(i as f64 / objects as f64);
            tasks.push(tokio::spawn(async move {
                let mut next = first;
                while next < start + window {
                    tokio::time::sleep_until(next).await;
                    for call in 0..2 {
                        let asked = Instant::now();
                        let answered = if call == 0 {
                            client.is_active(object.clone()).await.map(|_| ())
                        } else {
                            let request = GetMetricsRequest {
                                scaled_object_ref: Some(object.clone()),
                                metric_name: String::new(),
                            };
                            client.get_metrics(request).await.map(|_| ())
                        };
                        let ms = asked.elapsed().as_secs_f64() * 1e3;
                        latencies.lock().unwrap_or_else(PoisonError::into_inner).push(ms);
                        if answered.is_err() {
                            refused.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        }
                    }
                    next += interval;
                }
            }));
        }
        for t in tasks {
            t.await?;
        }
        anyhow::Ok(())
    })?;
    let mut all = std::mem::take(&mut *latencies.lock().unwrap_or_else(PoisonError::into_inner));
    all.sort_by(f64::total_cmp);
    Ok((all, refused.load(std::sync::atomic::Ordering::Relaxed)))
}
