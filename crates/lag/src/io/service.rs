//! The lag monitor as a service: reads the offsets topic through the
//! runtime's shards, refreshes watermarks, and serves `/metrics`, `/ready`,
//! the JSON API and the web page over HTTP until `shutdown` completes. Every
//! worker is a task of the caller's tokio runtime, and one `Shutdown`
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
pub use crate::settings::ProcessOptions;
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
    /// A notifier's settings cannot work.
    #[error(transparent)]
    Notifier(#[from] crate::NotifierSettingError),
    /// Serving KEDA's external scaler failed.
    #[error("serving KEDA's external scaler: {0}")]
    Keda(#[source] tonic::transport::Error),
}

/// Where a `serve` process listens: HTTP, and KEDA's external scaler
/// (gRPC) when it serves one.
#[derive(Debug)]
pub struct Listeners {
    /// `/metrics`, `/ready`, the API and the page.
    pub http: tokio::net::TcpListener,
    /// KEDA's external scaler; `None`: not served.
    pub keda: Option<tokio::net::TcpListener>,
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
    process: ProcessOptions,
    options: ServeOptions,
    listener: tokio::net::TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), ServeError> {
    run_many(process, vec![options], listener, shutdown).await
}

/// Runs the lag monitor of every cluster in `clusters` until `shutdown`
/// completes: each with workers of its own, so that one whose brokers fail
/// leaves the others current. Several clusters must each have a name, each
/// its own.
pub async fn run_many(
    process: ProcessOptions,
    clusters: Vec<ServeOptions>,
    listener: tokio::net::TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), ServeError> {
    run_listening(process, clusters, Listeners { http: listener, keda: None }, shutdown).await
}

/// [`run_many`] on `listeners`: HTTP, and KEDA's external scaler when
/// given a listener for it.
pub async fn run_listening(
    process: ProcessOptions,
    clusters: Vec<ServeOptions>,
    listeners: Listeners,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), ServeError> {
    let Listeners { http: listener, keda } = listeners;
    named_apart(&clusters)?;
    // Checked before anything starts: a bad file fails naming its field.
    let web = process.web_config.as_deref().map(crate::web::WebConfigFile::open).transpose()?;
    // And the notifiers' templates, files and clusters.
    let names = clusters.iter().map(|c| c.name.as_ref().map_or(crate::burrow::CLUSTER.to_owned(), |n| n.to_string()));
    let notifiers = super::notifier_settings::prepare_all(&process.notifiers, &names.collect::<Vec<_>>())?;
    // So is the OTLP collector's address and TLS files, before any cluster's
    // workers touch Kafka.
    let otlp_settings = match &process.otlp {
        None => None,
        Some(s) => Some((super::otlp_transport::Transport::new(s).map_err(ServeError::Otlp)?, s.clone())),
    };
    let stop = Shutdown::default();
    // An early return (HTTP failing to start) stops the workers started.
    let _stop_on_return = crate::shutdown::TriggerOnDrop(stop.clone());
    let mut states = Vec::new();
    let mut workers = Vec::new();
    for options in clusters {
        let (state, started) = crate::cluster_workers::start(&process, options, &stop);
        states.push(state);
        workers.extend(started);
    }
    // Stopped first: its last export, while the workers still run.
    let otlp_stop = stop.child();
    let (notified, notifier_task) = match notifiers.is_empty() {
        true => (None, None),
        false => {
            let (status, task) = super::notifier::spawn(notifiers, states.clone(), stop.child());
            (Some(status), Some(task))
        }
    };
    let mut shown = http::ProcessSeries {
        namespace: Arc::from(process.namespace.as_str()),
        logs: process.log_counts.clone(),
        otlp: None,
        notifiers: notified,
    };
    let otlp = match otlp_settings {
        Some((transport, settings)) => {
            if settings.tls.insecure_skip_verify {
                tracing::warn!("otlp.tls.insecure_skip_verify: the collector's certificate is not checked");
            }
            let status = Arc::new(super::otlp_export::OtlpStatus::default());
            shown.otlp = Some(Arc::clone(&status));
            let (all, series) = (states.clone(), shown.clone());
            let render: Arc<dyn Fn() -> Result<String, String> + Send + Sync> =
                Arc::new(move || http::root_metrics(&all, Some(&series)).map_err(|e| format!("rendering: {e}")));
            Some(tokio::spawn(super::otlp_export::run(transport, settings, render, status, otlp_stop.clone())))
        }
        None => None,
    };
    let keda = keda.map(|listener| super::keda_server::spawn(listener, states.clone(), stop.child(), web.clone()));
    let served = serve_http(listener, http::app(states, shown), web, shutdown).await;

    // The last export, while the workers still answer.
    otlp_stop.trigger();
    if let Some(task) = otlp {
        let _ = task.await;
    }
    stop.trigger();
    if let Some(task) = notifier_task {
        task.await.map_err(ServeError::Worker)?;
    }
    if let Some(task) = keda {
        task.await.map_err(ServeError::Worker)?.map_err(ServeError::Keda)?;
    }
    for worker in workers {
        worker.await.map_err(ServeError::Worker)?;
    }
    info!("stopped");
    served
}

/// Serves `app` on `listener` (as the web configuration file says, when
/// there is one) until `shutdown` completes.
async fn serve_http(
    listener: tokio::net::TcpListener,
    app: axum::Router,
    web: Option<Arc<crate::web::WebConfigFile>>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), ServeError> {
    let addr = listener.local_addr().map_err(ServeError::Http)?;
    let limits = HttpLimits::default().within_descriptors();
    match web {
        None => {
            info!(%addr, "serving /metrics, /ready, /api/groups and the web page");
            http_server::serve(listener, app, limits, shutdown).await
        }
        Some(web) => {
            let tls = web.started_with_tls;
            info!(%addr, tls, "serving /metrics, /ready, /api/groups and the web page, as the web configuration file says");
            let app = app.layer(axum::middleware::from_fn_with_state(Arc::clone(&web), crate::web::guard::guard));
            if tls {
                let listener = crate::web::tls::TlsListener::spawn(listener, web, crate::web::tls::Alpn::Http1);
                http_server::serve(listener, app, limits, shutdown).await
            } else {
                http_server::serve(listener, app, limits, shutdown).await
            }
        }
    }
    .map_err(ServeError::Http)
}

/// Several clusters each named, the names distinct.
fn named_apart(clusters: &[ServeOptions]) -> Result<(), ServeError> {
    let bad = |why: String| Err(ServeError::Clusters(why));
    if clusters.is_empty() {
        return bad("no cluster to watch".into());
    }
    if clusters.len() > 1 && clusters.iter().any(|c| c.name.is_none()) {
        return bad("watching several clusters, each needs a name".into());
    }
    let mut names = std::collections::BTreeSet::new();
    if let Some(twice) = clusters.iter().filter_map(|c| c.name.as_ref()).find(|n| !names.insert(n.as_str())) {
        return bad(format!("the name {twice:?} is given twice"));
    }
    Ok(())
}
