//! The lag monitor as a service: reads `__consumer_offsets` on a thread of its
//! own, refreshes watermarks on another, and serves `/metrics`, `/ready`, the
//! JSON API and the web page over HTTP until `shutdown` completes.
//!
//! Shape after mini-redis: [`run`] takes a bound listener and a shutdown future,
//! so tests bind port 0 and stop the service by completing the future.

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use kshard_kafka::{Admin, CONSUMER_OFFSETS_TOPIC, ClientSettings, PartitionReader, ReadEvent};
use tracing::{debug, info, warn};

use crate::http;
use crate::metrics::{Metrics, SelfTimings};
use crate::monitor::{Monitor, MonitorSettings};
use crate::watermarks::{Watermark, Watermarks};

/// Where group offsets come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ScrapeMode {
    /// Read `__consumer_offsets` (the default: fast, complete, with metadata).
    #[default]
    OffsetsTopic,
    /// Ask the brokers (ListGroups, OffsetFetch) at every refresh, for clusters
    /// whose `__consumer_offsets` cannot be read. Ready after the first scrape.
    AdminApi,
}

/// How `kshard serve` runs.
#[derive(Debug)]
pub struct ServeOptions {
    /// How to reach Kafka.
    pub kafka: ClientSettings,
    /// Where group offsets come from.
    pub mode: ScrapeMode,
    /// Metric name prefix (`kshard`; `kminion` for drop-in names).
    pub namespace: String,
    /// How often watermarks are refreshed.
    pub watermark_interval: Duration,
    /// Filters and granularity.
    pub monitor: MonitorSettings,
    /// Timeout of each admin call.
    pub request_timeout: Duration,
    /// When set, reading waits until this future completes. Embedders and tests
    /// use it to observe the service before catch-up begins.
    pub hold_reading: Option<tokio::sync::oneshot::Receiver<()>>,
}

/// Why the service stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// A Kafka call failed at start.
    #[error(transparent)]
    Kafka(#[from] kshard_kafka::Error),
    /// `__consumer_offsets` is not there.
    #[error("{CONSUMER_OFFSETS_TOPIC} does not exist on {0}; if this cluster hides it, use scrape_mode: admin_api")]
    NoOffsetsTopic(String),
    /// Serving HTTP failed.
    #[error("serving HTTP: {0}")]
    Http(#[source] std::io::Error),
    /// A worker thread failed.
    #[error("{0}")]
    Worker(String),
}

/// Runs the lag monitor until `shutdown` completes.
pub async fn run(
    mut options: ServeOptions,
    listener: tokio::net::TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), ServeError> {
    let monitor = Arc::new(Monitor::new(options.monitor.clone()));
    let timings = Arc::new(SelfTimings::default());
    let metrics = Arc::new(Metrics::new(&options.namespace, Arc::clone(&monitor), Arc::clone(&timings)));

    let hold = options.hold_reading.take();
    let stop = Arc::new(AtomicBool::new(false));
    let (new_partitions_tx, new_partitions_rx) = mpsc::channel();
    let reader = match options.mode {
        ScrapeMode::OffsetsTopic => {
            Some(spawn_reader(&options, Arc::clone(&monitor), Arc::clone(&stop), new_partitions_rx, hold)?)
        }
        ScrapeMode::AdminApi => {
            // Nothing to catch up with: ready once the first scrape has landed.
            monitor.start();
            info!("scrape_mode admin_api: groups and offsets come from ListGroups and OffsetFetch");
            None
        }
    };
    let refresher =
        spawn_refresher(&options, Arc::clone(&monitor), Arc::clone(&timings), Arc::clone(&stop), new_partitions_tx)?;

    let addr = listener.local_addr().map_err(ServeError::Http)?;
    info!(%addr, "serving /metrics, /ready, /api/groups and the web page");
    let served = axum::serve(listener, http::router(Arc::clone(&monitor), metrics))
        .with_graceful_shutdown(shutdown)
        .await
        .map_err(ServeError::Http);

    stop.store(true, Ordering::Release);
    let workers = [("reader", reader), ("watermark refresher", Some(refresher))];
    for (name, worker) in workers {
        let Some(worker) = worker else { continue };
        let joined = tokio::task::spawn_blocking(move || worker.join()).await;
        match joined {
            Ok(Ok(Ok(()))) => {}
            Ok(Ok(Err(e))) => return Err(ServeError::Worker(format!("{name}: {e}"))),
            Ok(Err(_)) | Err(_) => return Err(ServeError::Worker(format!("{name} thread panicked"))),
        }
    }
    info!("stopped");
    served
}

/// Tracks every partition of `__consumer_offsets` with its current watermarks;
/// returns the partition count.
fn track_offsets_partitions(kafka: &ClientSettings, timeout: Duration, monitor: &Monitor) -> Result<i32, ServeError> {
    let admin = Admin::new(kafka, timeout)?;
    let count = admin
        .partition_count(CONSUMER_OFFSETS_TOPIC)?
        .ok_or_else(|| ServeError::NoOffsetsTopic(kafka.brokers.clone()))?;
    let total = track_range(&admin, monitor, 0..count)?;
    monitor.start();
    info!(partitions = count, offsets = total, "catching up with {CONSUMER_OFFSETS_TOPIC}");
    Ok(count)
}

/// Tracks `partitions` of `__consumer_offsets` with their current watermarks;
/// returns how many offsets they hold.
fn track_range(admin: &Admin, monitor: &Monitor, partitions: std::ops::Range<i32>) -> Result<i64, kshard_kafka::Error> {
    let keys: Vec<(String, i32)> = partitions.map(|p| (CONSUMER_OFFSETS_TOPIC.to_owned(), p)).collect();
    let watermarks = admin.watermarks(&keys)?;
    let mut total = 0;
    for key in keys {
        let (low, high) = watermarks.get(&key).copied().unwrap_or((0, 0));
        total += (high - low).max(0);
        monitor.track_partition(key.1, low, high);
    }
    Ok(total)
}

/// Starts the reader thread: it tracks the partitions of `__consumer_offsets`
/// (waiting, not ready, while the brokers cannot be reached or the topic does not
/// exist yet — Kafka creates it when the first group commits), then reads.
fn spawn_reader(
    options: &ServeOptions,
    monitor: Arc<Monitor>,
    stop: Arc<AtomicBool>,
    new_partitions: mpsc::Receiver<Vec<i32>>,
    hold: Option<tokio::sync::oneshot::Receiver<()>>,
) -> Result<JoinHandle<Result<(), String>>, ServeError> {
    let settings = options.kafka.clone();
    let timeout = options.request_timeout;
    std::thread::Builder::new()
        .name("offsets-reader".into())
        .spawn(move || {
            let Some(partitions) = wait_for_offsets_topic(&settings, timeout, &monitor, &stop) else {
                return Ok(());
            };
            if let Some(hold) = hold {
                // A dropped sender releases the hold too.
                let _ = hold.blocking_recv();
            }
            let start: Vec<(i32, Option<i64>)> = (0..partitions).map(|p| (p, None)).collect();
            let reader = PartitionReader::new(&settings, CONSUMER_OFFSETS_TOPIC, &start).map_err(|e| e.to_string())?;
            read_offsets(&reader, &monitor, &stop, &new_partitions)
        })
        .map_err(|e| ServeError::Worker(format!("starting the reader thread: {e}")))
}

/// Tracks `__consumer_offsets`, retrying every 5 s until it works; `None` when
/// the service stops first.
fn wait_for_offsets_topic(
    settings: &ClientSettings,
    timeout: Duration,
    monitor: &Monitor,
    stop: &AtomicBool,
) -> Option<i32> {
    loop {
        match track_offsets_partitions(settings, timeout, monitor) {
            Ok(count) => return Some(count),
            Err(e) => warn!(error = %e, "cannot track {CONSUMER_OFFSETS_TOPIC} yet; retrying in 5 s (not ready)"),
        }
        let retry_at = Instant::now() + Duration::from_secs(5);
        while Instant::now() < retry_at {
            if stop.load(Ordering::Acquire) {
                return None;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

fn read_offsets(
    reader: &PartitionReader,
    monitor: &Monitor,
    stop: &AtomicBool,
    new_partitions: &mpsc::Receiver<Vec<i32>>,
) -> Result<(), String> {
    let started = Instant::now();
    let mut last_log = Instant::now();
    let mut records_at_last_log = 0u64;
    let mut announced_ready = false;
    let mut events = 0u64;
    while !stop.load(Ordering::Acquire) {
        while let Ok(added) = new_partitions.try_recv() {
            let start: Vec<(i32, Option<i64>)> = added.iter().map(|p| (*p, None)).collect();
            reader.add_partitions(CONSUMER_OFFSETS_TOPIC, &start).map_err(|e| e.to_string())?;
            info!(partitions = ?added, "reading new partitions of {CONSUMER_OFFSETS_TOPIC}");
        }
        // `idle`: nothing arrived, a good moment to check readiness and progress.
        let idle = match reader.poll(Duration::from_millis(100)) {
            Ok(ReadEvent::Record(r)) => {
                if let Err(s) = monitor.apply(r.partition(), r.offset(), r.key(), r.value()) {
                    warn!(
                        partition = s.partition,
                        offset = s.offset,
                        reason = s.skipped.reason(),
                        error = %s.skipped,
                        "skipped a record of {CONSUMER_OFFSETS_TOPIC}"
                    );
                }
                false
            }
            Ok(ReadEvent::EndOfPartition { partition, next_offset }) => {
                debug!(partition, next_offset, "end of partition");
                monitor.end_of_partition(partition, next_offset);
                false
            }
            Ok(ReadEvent::Idle) => true,
            Err(e) => {
                warn!(error = %e, "reading {CONSUMER_OFFSETS_TOPIC}; the client retries");
                std::thread::sleep(Duration::from_millis(200));
                true
            }
        };
        // Readiness and progress are checked every 1024 events, not per record:
        // a clock read per record is a measurable share of the reader's CPU.
        events += 1;
        if announced_ready || !(events.is_multiple_of(1024) || idle) {
            continue;
        }
        if monitor.is_caught_up() {
            announced_ready = true;
            let records = monitor.counters().records.load(Ordering::Relaxed);
            let secs = started.elapsed().as_secs_f64();
            info!(records, seconds = secs, rate = records as f64 / secs.max(1e-9), "caught up");
        } else if last_log.elapsed() >= Duration::from_secs(5) {
            let p = monitor.progress();
            let records = monitor.counters().records.load(Ordering::Relaxed);
            let rate = (records - records_at_last_log) as f64 / last_log.elapsed().as_secs_f64();
            let eta = if rate > 0.0 { p.offsets_remaining as f64 / rate } else { f64::INFINITY };
            info!(
                records,
                rate = rate.round(),
                percent = format!("{:.1}", p.percent),
                partitions_caught_up = p.partitions_caught_up,
                partitions = p.partitions,
                eta_seconds = eta.round(),
                "catching up"
            );
            last_log = Instant::now();
            records_at_last_log = records;
        }
    }
    Ok(())
}

fn spawn_refresher(
    options: &ServeOptions,
    monitor: Arc<Monitor>,
    timings: Arc<SelfTimings>,
    stop: Arc<AtomicBool>,
    new_partitions: mpsc::Sender<Vec<i32>>,
) -> Result<JoinHandle<Result<(), String>>, ServeError> {
    let admin = Admin::new(&options.kafka, options.request_timeout)?;
    let interval = options.watermark_interval;
    let mode = options.mode;
    std::thread::Builder::new()
        .name("watermarks".into())
        .spawn(move || {
            let mut next = Instant::now();
            let mut refreshed_since_catch_up = false;
            let mut last_attempt: Option<Instant> = None;
            while !stop.load(Ordering::Acquire) {
                let caught_up = monitor.is_caught_up();
                // Refresh on schedule, and at once when catch-up completes (retrying
                // at most every second), so that readiness waits for watermarks no
                // older than the catch-up.
                let retry = last_attempt.is_none_or(|t| t.elapsed() >= Duration::from_secs(1));
                if Instant::now() >= next || (caught_up && !refreshed_since_catch_up && retry) {
                    let started = Instant::now();
                    last_attempt = Some(started);
                    let scraped = match mode {
                        ScrapeMode::AdminApi => scrape_groups(&admin, &monitor),
                        ScrapeMode::OffsetsTopic => Ok(()),
                    };
                    let refreshed = scraped.and_then(|()| refresh(&admin, &monitor, mode, &new_partitions));
                    match refreshed {
                        Ok(watermarks) => {
                            monitor.set_watermarks(watermarks, caught_up);
                            refreshed_since_catch_up |= caught_up;
                            *timings.watermark_refresh.lock().unwrap_or_else(PoisonError::into_inner) =
                                Some(started.elapsed());
                            // Names of deleted groups and topics are otherwise kept
                            // for the life of the process.
                            monitor.sweep_names();
                        }
                        Err(e) => warn!(error = %e, "refreshing groups and watermarks"),
                    }
                    next = started + interval;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            Ok(())
        })
        .map_err(|e| ServeError::Worker(format!("starting the watermark thread: {e}")))
}

/// Admin-API mode: every group (ListGroups) and its committed offsets
/// (OffsetFetch), replacing the monitor's one unit of state.
fn scrape_groups(admin: &Admin, monitor: &Monitor) -> Result<(), kshard_kafka::Error> {
    let listings = admin.list_groups()?;
    let ids: Vec<String> =
        listings.iter().map(|g| g.group_id.clone()).filter(|g| monitor.settings().groups.allows(g)).collect();
    let offsets = admin.group_offsets(&ids)?;
    let mut unit = crate::group_offsets::GroupOffsets::default();
    for listing in listings.iter().filter(|g| monitor.settings().groups.allows(&g.group_id)) {
        let protocol_type = if listing.simple { "" } else { "consumer" };
        unit.set_reported_state(&listing.group_id, protocol_type, &listing.state);
    }
    for group in offsets {
        if let Some(error) = &group.error {
            warn!(group = %group.group_id, %error, "fetching a group's offsets");
        }
        for (topic, partition, offset) in &group.offsets {
            unit.set_committed(&group.group_id, topic, *partition, *offset);
        }
    }
    debug!(groups = ids.len(), "groups scraped");
    monitor.replace_unit(0, unit);
    Ok(())
}

/// One refresh: topics and partition counts (one Metadata request), then the
/// earliest and latest offsets of every partition of every topic some group
/// committed to (ListOffsets, batched per leader). Also notices new partitions
/// of `__consumer_offsets` and hands them to the reader.
fn refresh(
    admin: &Admin,
    monitor: &Monitor,
    mode: ScrapeMode,
    new_partitions: &mpsc::Sender<Vec<i32>>,
) -> Result<Watermarks, kshard_kafka::Error> {
    let topics = admin.topics()?;
    // Growth of __consumer_offsets is the reader's to handle once it tracks the
    // topic; before that, the reader's own start-up tracks every partition.
    let offsets_topic =
        topics.get(CONSUMER_OFFSETS_TOPIC).filter(|_| mode == ScrapeMode::OffsetsTopic && monitor.is_started());
    if offsets_topic.is_some() {
        monitor.set_coordinators(admin.leaders(CONSUMER_OFFSETS_TOPIC)?);
    }
    if let Some(&count) = offsets_topic {
        let known = monitor.progress().partitions as i32;
        if count > known {
            track_range(admin, monitor, known..count)?;
            // The reader has gone when this fails, and is stopping anyway.
            let _ = new_partitions.send((known..count).collect());
        }
    }
    let wanted: Vec<(String, i32)> = monitor
        .committed_topics()
        .into_iter()
        .filter_map(|t| topics.get(&t).map(|&n| (t, n)))
        .flat_map(|(t, n)| (0..n).map(move |p| (t.clone(), p)))
        .collect();
    let mut watermarks = Watermarks::default();
    for ((topic, partition), (low, high)) in admin.watermarks(&wanted)? {
        watermarks.insert(&topic, partition, Watermark { low, high });
    }
    debug!(partitions = watermarks.partition_count(), "watermarks refreshed");
    Ok(watermarks)
}
