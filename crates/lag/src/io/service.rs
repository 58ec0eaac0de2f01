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
use std::sync::Arc;
use std::time::Duration;

use kshard_kafka::Client;
use kshard_runtime::http_server::{self, HttpLimits};
use tracing::info;

use crate::brokers::Kafka;
use crate::http;
use crate::monitor::{Monitor, MonitorSettings};
use crate::refresher;
pub use crate::refresher::ScrapeMode;
pub use crate::serve_options::ServeOptions;
use crate::shutdown::Shutdown;

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
        let (state, started) = crate::cluster_workers::start(options, &stop);
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
