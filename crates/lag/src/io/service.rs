//! The lag monitor as a service: reads the offsets topic through the
//! runtime's shards, refreshes watermarks, and serves `/metrics`, `/ready`,
//! the JSON API and the web page over HTTP until `shutdown` completes. Every
//! worker is a task of the caller's tokio runtime, and one [`Shutdown`]
//! reaches them all.
//!
//! The workers are supervised: one that fails or panics is logged, reported on
//! `/ready` (which turns 503 with the reason) and restarted with backoff; the
//! reader resumes from what it had applied. Watermarks older than the staleness
//! limit ([`ServeOptions::stale_after`]) also turn `/ready` 503 and
//! take lag off `/metrics` and `/api/groups`: when the brokers stop answering,
//! frozen lag is never presented as current.
//!
//! Shape after mini-redis: [`run`] takes a bound listener and a shutdown future,
//! so tests bind port 0 and stop the service by completing the future.

use std::future::Future;
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kshard_kafka::{CONSUMER_OFFSETS_TOPIC, Client, ClientSettings};
use kshard_runtime::http_server::{self, HttpLimits};
use tracing::info;

use crate::brokers::{Connector, Kafka};
use crate::catch_up::Log;
use crate::http;
use crate::metrics::{Metrics, SelfTimings};
use crate::monitor::{Monitor, MonitorSettings};
use crate::refresher;
pub use crate::refresher::ScrapeMode;
use crate::shutdown::Shutdown;
use crate::supervisor::{self, Life};

/// How `kshard serve` watches one cluster ([`run_many`] takes several).
#[derive(Debug)]
pub struct ServeOptions {
    /// The cluster's name under `clusters:`: the `cluster` label on each of
    /// its series, its path (`/clusters/{name}/`) and its name in Burrow's
    /// API. `None`: one cluster, no label, `local` in Burrow's API.
    pub name: Option<String>,
    /// How to reach Kafka.
    pub kafka: ClientSettings,
    /// The topic to read: `__consumer_offsets`, or a topic of the same layout.
    pub offsets_topic: String,
    /// Read share groups' delivery state from `__share_group_state` too
    /// (offsets-topic mode).
    pub share_groups: bool,
    /// Where group offsets come from.
    pub mode: ScrapeMode,
    /// Metric name prefix (`kshard`; `kminion` for drop-in names).
    pub namespace: String,
    /// Whose metric names `/metrics` uses (process-wide).
    pub profile: crate::Profile,
    /// The name of the label naming the cluster of every series (`None`:
    /// `cluster`, or `cluster_name` in the kafka_lag_exporter profile), for
    /// Prometheus setups whose own `cluster` label would collide (process-wide).
    pub cluster_label: Option<String>,
    /// How often watermarks are refreshed.
    pub watermark_interval: Duration,
    /// Filters and granularity.
    pub monitor: MonitorSettings,
    /// Timeout of each admin call.
    pub request_timeout: Duration,
    /// Where to keep each partition's state (durable shards of the runtime,
    /// recovery logs in Kafka), so that a restart reads only what is new;
    /// `None`: keep nothing, read everything at start.
    pub data_dir: Option<std::path::PathBuf>,
    /// With `data_dir`: the topic holding the shards' recovery logs (default
    /// [`crate::recovery_log_topic`] of the offsets topic). Each kshard
    /// deployment on one Kafka cluster needs its own.
    pub recovery_log_topic: Option<String>,
    /// With `data_dir`: several processes share the shards through etcd,
    /// each serving the whole cluster's lag.
    pub cluster: Option<crate::log_reader::ClusterOptions>,
    /// kminion's cluster, broker and topic families: what is asked, how often.
    pub cluster_info: crate::cluster_info::ClusterInfoSettings,
    /// kminion's end-to-end probe (off by default).
    pub end_to_end: crate::EndToEndSettings,
    /// Where the process counts its log messages (`<ns>_log_messages_total`;
    /// the whole process's: the first cluster's is used); `None`: not shown.
    pub log_counts: Option<Arc<crate::LogCounts>>,
    /// Push the series to an OpenTelemetry collector (the whole process's:
    /// the same in every cluster's options); `None`: no export.
    pub otlp: Option<crate::OtlpSettings>,
    /// The exporter-toolkit web configuration file (TLS, basic auth,
    /// headers, rate limit), read again whenever it changes; `None`: plain,
    /// open HTTP.
    pub web_config: Option<std::path::PathBuf>,
}

impl ServeOptions {
    /// Options with kshard's defaults: `__consumer_offsets`, read from the log,
    /// metric names prefixed `kshard`, watermarks every 5 s.
    pub fn new(kafka: ClientSettings) -> Self {
        ServeOptions {
            name: None,
            kafka,
            offsets_topic: CONSUMER_OFFSETS_TOPIC.to_owned(),
            share_groups: true,
            mode: ScrapeMode::OffsetsTopic,
            namespace: "kshard".to_owned(),
            profile: crate::Profile::Kshard,
            cluster_label: None,
            watermark_interval: Duration::from_secs(5),
            monitor: MonitorSettings::default(),
            request_timeout: Duration::from_secs(30),
            data_dir: None,
            recovery_log_topic: None,
            cluster: None,
            cluster_info: crate::cluster_info::ClusterInfoSettings::default(),
            end_to_end: crate::EndToEndSettings::default(),
            otlp: None,
            log_counts: None,
            web_config: None,
        }
    }

    /// How old watermarks may be before lag counts as stale: three refresh
    /// intervals, and at least one interval plus the request timeout, so that
    /// one slow refresh on a big cluster does not turn `/ready` 503.
    pub fn stale_after(&self) -> Duration {
        (self.watermark_interval * 3).max(self.watermark_interval + self.request_timeout)
    }
}

/// Why the service stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// Serving HTTP failed.
    #[error("serving HTTP: {0}")]
    Http(#[source] std::io::Error),
    /// The web configuration file is invalid.
    #[error(transparent)]
    WebConfig(#[from] crate::web::WebConfigError),
    /// A worker's supervisor did not end cleanly at shutdown.
    #[error("stopping a worker: {0}")]
    Worker(#[source] tokio::task::JoinError),
    /// The OTLP export's settings cannot work.
    #[error(transparent)]
    Otlp(#[from] crate::OtlpSettingError),
    /// The clusters given to [`run_many`] do not fit together.
    #[error("invalid clusters: {0}")]
    Clusters(String),
}

/// Why [`lag_once`] could not answer: the step that failed, as `/ready`
/// would say it.
#[derive(Debug, thiserror::Error)]
#[error(transparent)]
pub struct ScrapeError(super::error::WorkerError);

/// Every group's lag now, asked of the brokers the way `scrape_mode:
/// admin_api` asks them (no catch-up: seconds on any cluster), filtered by
/// `monitor`: what `kshard lag` prints.
pub fn lag_once(
    kafka: &Client,
    monitor: MonitorSettings,
    timeout: Duration,
) -> Result<Vec<crate::GroupView>, ScrapeError> {
    let m = Arc::new(Monitor::new(monitor));
    let brokers = Arc::new(Kafka { client: kafka.clone(), timeout });
    refresher::scrape_once(brokers, kafka, &m).map_err(ScrapeError)?;
    Ok(crate::api::groups(&m))
}

/// Runs the lag monitor of one cluster until `shutdown` completes.
pub async fn run(
    options: ServeOptions,
    listener: tokio::net::TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), ServeError> {
    run_many(vec![options], listener, shutdown).await
}

/// Runs the lag monitor of every cluster in `clusters` until `shutdown`
/// completes: each with workers of its own, so that one whose brokers fail
/// leaves the others current. Several clusters must each have a name, and
/// share the namespace and the web configuration file (process-wide).
pub async fn run_many(
    clusters: Vec<ServeOptions>,
    listener: tokio::net::TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), ServeError> {
    let first = fitting_together(&clusters)?;
    // Checked before anything starts: a bad file fails naming its field.
    let web = first.web_config.as_deref().map(crate::web::WebConfigFile::open).transpose()?;
    let (namespace, otlp_settings) = (first.namespace.clone(), first.otlp.clone());
    let log_counts = first.log_counts.clone();
    // So is the OTLP collector's address and TLS files, before any cluster's
    // workers touch Kafka.
    let otlp_settings = match otlp_settings {
        None => None,
        Some(s) => Some((super::otlp_transport::Transport::new(&s).map_err(ServeError::Otlp)?, s)),
    };
    let stop = Shutdown::default();
    // An early return (HTTP failing to start) stops the workers started.
    let _stop_on_return = crate::shutdown::TriggerOnDrop(stop.clone());
    let mut states = Vec::new();
    let mut workers = Vec::new();
    for options in clusters {
        let (state, started) = start(options, &stop);
        states.push(state);
        workers.extend(started);
    }
    // Stopped first: its last export, while the workers still run.
    let otlp_stop = stop.child();
    let mut process = http::ProcessSeries { namespace: Arc::from(namespace.as_str()), logs: log_counts, otlp: None };
    let otlp = match otlp_settings {
        Some((transport, settings)) => {
            if settings.tls.insecure_skip_verify {
                tracing::warn!("otlp.tls.insecure_skip_verify: the collector's certificate is not checked");
            }
            let status = Arc::new(super::otlp_export::OtlpStatus::default());
            process.otlp = Some(Arc::clone(&status));
            let (all, shown) = (states.clone(), process.clone());
            let render: Arc<dyn Fn() -> Result<String, String> + Send + Sync> =
                Arc::new(move || http::root_metrics(&all, Some(&shown)).map_err(|e| format!("rendering: {e}")));
            Some(tokio::spawn(super::otlp_export::run(transport, settings, render, status, otlp_stop.clone())))
        }
        None => None,
    };
    let app = http::app(states, process);
    let addr = listener.local_addr().map_err(ServeError::Http)?;
    let limits = HttpLimits::default().within_descriptors();
    let served = match web {
        None => {
            info!(%addr, "serving /metrics, /ready, /api/groups and the web page");
            http_server::serve(listener, app, limits, shutdown).await
        }
        Some(web) => {
            let tls = web.started_with_tls;
            info!(%addr, tls, "serving /metrics, /ready, /api/groups and the web page, as the web configuration file says");
            let app = app.layer(axum::middleware::from_fn_with_state(Arc::clone(&web), crate::web::guard::guard));
            if tls {
                let listener = crate::web::tls::TlsListener::spawn(listener, web).map_err(ServeError::Http)?;
                http_server::serve(listener, app, limits, shutdown).await
            } else {
                http_server::serve(listener, app, limits, shutdown).await
            }
        }
    }
    .map_err(ServeError::Http);

    // The last export, while the workers still answer.
    otlp_stop.trigger();
    if let Some(task) = otlp {
        let _ = task.await;
    }
    stop.trigger();
    for worker in workers {
        worker.await.map_err(ServeError::Worker)?;
    }
    info!("stopped");
    served
}

/// The first of `clusters`, once they are known to fit together: at least
/// one; several each named, the names distinct; one namespace and one web
/// configuration file.
fn fitting_together(clusters: &[ServeOptions]) -> Result<&ServeOptions, ServeError> {
    let bad = |why: String| Err(ServeError::Clusters(why));
    let Some(first) = clusters.first() else { return bad("no cluster to watch".into()) };
    if clusters.len() > 1 && clusters.iter().any(|c| c.name.is_none()) {
        return bad("watching several clusters, each needs a name".into());
    }
    let mut names = std::collections::BTreeSet::new();
    for c in clusters {
        if let Some(name) = &c.name {
            if !valid_cluster_name(name) {
                return bad(format!("{name:?} is not a cluster name (letters, digits, '.', '_' and '-')"));
            }
            if !names.insert(name.as_str()) {
                return bad(format!("the name {name:?} is given twice"));
            }
        }
        if c.namespace != first.namespace
            || c.web_config != first.web_config
            || c.profile != first.profile
            || c.cluster_label != first.cluster_label
            || c.otlp != first.otlp
        {
            return bad(
                "the metrics namespace and profile, the web configuration file and the OTLP export are the whole process's"
                    .into(),
            );
        }
    }
    Ok(first)
}

/// Whether `name` can name a cluster: in a path, a label value and Burrow's
/// API alike.
pub fn valid_cluster_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 100
        && name.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
        && name != "."
        && name != ".."
}

/// Starts one cluster's workers: what HTTP serves of it, and their tasks.
fn start(options: ServeOptions, stop: &Shutdown) -> (http::AppState, Vec<tokio::task::JoinHandle<()>>) {
    let mut settings = options.monitor.clone();
    settings.every_topic_watermarks |= options.profile == crate::Profile::KafkaExporter;
    let monitor = Arc::new(Monitor::with_stale_after(settings, options.stale_after()));
    // Every client of the cluster's workers shares one handle: one
    // connection per broker for all its readers, one traffic count.
    let kafka = Client::new(options.kafka.clone());
    monitor.watch_stalls(kafka.reads_with_own_client());
    let timings = Arc::new(SelfTimings::default());
    let member = crate::LocalMember::default();
    // Shown for three intervals: one slow or failed answer does not drop the series.
    let cluster_view = options
        .cluster_info
        .enabled
        .then(|| Arc::new(crate::ClusterView::new(options.cluster_info.interval * 3 + options.request_timeout)));
    let probe = options.end_to_end.enabled.then(|| Arc::new(crate::EndToEnd::new(options.end_to_end.slas)));
    let metrics = Arc::new(Metrics::with_profile(
        options.profile,
        &options.namespace,
        Arc::clone(&monitor),
        member.clone(),
        Arc::clone(&timings),
        cluster_view.clone(),
        probe.clone(),
    ));
    let brokers: Arc<dyn Connector> = Arc::new(Kafka { client: kafka.clone(), timeout: options.request_timeout });
    let cluster_brokers = Arc::clone(&brokers);
    // Each worker logs in a span naming its cluster, when there are names.
    let span = match &options.name {
        Some(name) => tracing::info_span!("cluster", name = %name),
        None => tracing::Span::none(),
    };
    let spawn = |name: &'static str, body: Box<dyn FnMut() -> Life + Send>| {
        supervisor::spawn(name, Arc::clone(&monitor), stop.clone(), span.clone(), body)
    };
    // Workers whose failures are not the lag's: never on `/ready`.
    let spawn_beside = |name: &'static str, body: Box<dyn FnMut() -> Life + Send>| {
        supervisor::spawn_beside(name, stop.clone(), span.clone(), body)
    };
    let (new_partitions_tx, new_partitions_rx) = mpsc::channel();
    let mut new_share_partitions = None;
    let mut workers = Vec::new();
    match options.mode {
        ScrapeMode::OffsetsTopic => {
            if options.share_groups {
                // Not ready until the share state is caught up with too.
                monitor.expect(Log::ShareState);
            }
            // Without a data directory, the shards' stores are in memory,
            // kept across the readers' lives.
            let stores = match options.data_dir.clone() {
                Some(dir) => crate::log_reader::Stores::Durable(dir),
                None => crate::log_reader::Stores::Memory(kshard_runtime::MemoryDisk::default()),
            };
            let shards = crate::log_reader::Shards {
                stores,
                cluster: options.cluster.clone(),
                log_topic: options
                    .recovery_log_topic
                    .clone()
                    .unwrap_or_else(|| crate::recovery_log_topic(&options.offsets_topic)),
                member: member.clone(),
            };
            let reader = crate::log_reader::OffsetsReader {
                kafka: kafka.clone(),
                log: Log::Offsets,
                topic: options.offsets_topic.clone(),
                timeout: options.request_timeout,
                monitor: Arc::clone(&monitor),
                shutdown: stop.clone(),
                new_partitions: Arc::new(Mutex::new(new_partitions_rx)),
                shards: shards.clone(),
                brokers: Arc::clone(&brokers),
            };
            workers.push(spawn(crate::log_reader::WORKER, Box::new(move || Box::pin(reader.clone().run()))));
            if options.share_groups {
                let (tx, rx) = mpsc::channel();
                new_share_partitions = Some(tx);
                let reader = crate::log_reader::OffsetsReader {
                    kafka: kafka.clone(),
                    log: Log::ShareState,
                    topic: Log::ShareState.topic().to_owned(),
                    timeout: options.request_timeout,
                    monitor: Arc::clone(&monitor),
                    shutdown: stop.clone(),
                    new_partitions: Arc::new(Mutex::new(rx)),
                    // Shards of their own, run by a second runtime member
                    // (its own keys and recovery logs; not listed by HTTP's
                    // /api/shards, which shows the offsets topic's).
                    shards: crate::log_reader::Shards {
                        log_topic: crate::shards_reader::share_recovery_log_topic(&shards.log_topic),
                        member: crate::LocalMember::default(),
                        ..shards
                    },
                    brokers: Arc::clone(&brokers),
                };
                workers.push(spawn(crate::log_reader::SHARE_WORKER, Box::new(move || Box::pin(reader.clone().run()))));
            }
        }
        ScrapeMode::AdminApi => {
            // Nothing to catch up with: ready once the first scrape has landed.
            monitor.start();
            info!("scrape_mode admin_api: groups and offsets come from ListGroups and OffsetFetch");
        }
    }
    let refresher = refresher::Refresher {
        kafka: kafka.clone(),
        offsets_topic: options.offsets_topic.clone(),
        mode: options.mode,
        interval: options.watermark_interval,
        monitor: Arc::clone(&monitor),
        timings: Arc::clone(&timings),
        shutdown: stop.clone(),
        new_partitions: new_partitions_tx,
        new_share_partitions,
        brokers,
    };
    workers.push(spawn(refresher::WORKER, Box::new(supervisor::blocking(refresher, refresher::Refresher::run))));
    if let Some(view) = cluster_view {
        let worker = crate::cluster_info::ClusterInfoWorker {
            brokers: Arc::clone(&cluster_brokers),
            view,
            settings: options.cluster_info.clone(),
            shutdown: stop.clone(),
        };
        let body = supervisor::blocking(worker, crate::cluster_info::ClusterInfoWorker::run);
        workers.push(spawn_beside(crate::cluster_info::WORKER, Box::new(body)));
    }
    if let Some(probe) = probe {
        let worker = super::end_to_end::EndToEndWorker {
            kafka: kafka.clone(),
            timeout: options.request_timeout,
            settings: options.end_to_end.clone(),
            probe,
            shutdown: stop.clone(),
        };
        let body = supervisor::blocking(worker, super::end_to_end::EndToEndWorker::run);
        workers.push(spawn_beside(super::end_to_end::WORKER, Box::new(body)));
    }

    let state = http::AppState {
        name: options.name.map(Arc::from),
        refresh_seconds: options.watermark_interval.as_secs() as i64,
        cluster_label: options.cluster_label.as_deref().map(Arc::from),
        brokers: Arc::from(options.kafka.brokers.as_str()),
        monitor,
        metrics,
        member,
        namespace: Arc::from(options.namespace.as_str()),
        traffic: kafka.traffic(),
        process: None,
    };
    (state, workers)
}
