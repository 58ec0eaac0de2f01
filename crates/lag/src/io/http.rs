//! HTTP: `/metrics` (Prometheus text), `/ready` (503 with progress until caught
//! up, then 200), `/api/groups`, `/api/group?id=G` and `/api/overview`
//! (JSON), `/api/shards` and `/api/replicas` (with a data directory),
//! `/healthz`, and a web page at `/`.
//!
//! Watching several clusters (`clusters:`), each cluster's endpoints and page
//! are under `/clusters/{name}/`; at the root, `/metrics` has every
//! cluster's series (each with its `cluster` label), `/ready` is 200 only
//! when every cluster is ready and says which is not (`/ready/any`, for
//! probes, while at least one is), `/` lists the clusters,
//! and the API asks which cluster is meant. `/api/clusters` lists them in
//! every case; Burrow's `/v3/kafka` serves them all. The label is `cluster`
//! (`cluster_name` in the kafka-lag-exporter profile, which like Burrow's
//! always has it).

use std::sync::Arc;

use axum::Router;
use axum::extract::{Query, State};
use axum::http::{StatusCode, header};
use axum::response::{Html, IntoResponse, Redirect, Response};
use axum::routing::get;
use serde::Serialize;

use crate::api;
pub(crate) use crate::app_state::{AppState, ProcessSeries, root_metrics};
use crate::monitor::Monitor;

/// Every cluster's routes, and the root's (with the process's own series).
pub(crate) fn app(clusters: Vec<AppState>, process: ProcessSeries) -> Router {
    let all: Arc<[AppState]> = clusters.into();
    let mut app = Router::new();
    for cluster in all.iter() {
        if let Some(name) = &cluster.name {
            let prefix = format!("/clusters/{name}");
            // Relative, so that it holds behind a proxy serving kshard under a path.
            let slash = format!("{name}/");
            app = app
                .route(&prefix, get(move || async move { Redirect::permanent(&slash) }))
                .merge(cluster_routes(&prefix, cluster.clone()));
        }
    }
    let app = match &all[..] {
        [one] => app.merge(cluster_routes("", AppState { process: Some(process), ..one.clone() })),
        _ => app.merge(root_routes(Arc::clone(&all), process)),
    };
    let listed = Arc::clone(&all);
    let probed = Arc::clone(&all);
    app.route("/api/clusters", get(move || async move { axum::Json(cluster_list(&listed)) }))
        .route("/ready/any", get(move || any_ready(State(Arc::clone(&probed)))))
        .route("/healthz", get(|| async { "ok\n" }))
        .merge(super::burrow_http::routes(all))
}

/// One cluster's endpoints under `prefix` (`""` or `/clusters/{name}`).
fn cluster_routes(prefix: &str, state: AppState) -> Router {
    let at = |path: &str| format!("{prefix}{path}");
    Router::new()
        .route(&at("/"), get(page))
        .route(&at("/metrics"), {
            let cache = Arc::new(RenderCache::default());
            get(move |state: State<AppState>| metrics_text(state, Arc::clone(&cache)))
        })
        .route(&at("/ready"), get(ready))
        .route(&at("/api/groups"), get(groups))
        .route(&at("/api/group"), get(group))
        .route(&at("/api/overview"), get(overview))
        .route(&at("/api/shards"), get(shards))
        .route(&at("/api/replicas"), get(replicas))
        .with_state(state)
}

/// The root of a process watching several clusters.
fn root_routes(all: Arc<[AppState]>, process: ProcessSeries) -> Router {
    Router::new()
        .route("/", get(|| async { Html(include_str!("clusters.html")) }))
        .route("/metrics", {
            let cache = Arc::new(RenderCache::default());
            get(move |all: State<Arc<[AppState]>>| all_metrics(all, process.clone(), Arc::clone(&cache)))
        })
        .route("/ready", get(all_ready))
        .route("/api/{*rest}", get(which_cluster))
        .with_state(all)
}

/// `/api/clusters`: each cluster, whether it is ready, and where its page is.
#[derive(Serialize)]
struct ClusterEntry {
    cluster: String,
    ready: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    reason: Option<String>,
    brokers: String,
    /// Its page; its endpoints are under this path.
    path: String,
}

fn cluster_list(all: &[AppState]) -> Vec<ClusterEntry> {
    all.iter()
        .map(|c| {
            let verdict = c.monitor.verdict();
            ClusterEntry {
                cluster: c.cluster_name().to_owned(),
                ready: verdict.ready,
                reason: verdict.reason,
                brokers: c.brokers.to_string(),
                path: c.name.as_ref().map_or_else(|| "/".to_owned(), |n| format!("/clusters/{n}/")),
            }
        })
        .collect()
}

async fn which_cluster(State(all): State<Arc<[AppState]>>) -> Response {
    let names: Vec<&str> = all.iter().map(AppState::cluster_name).collect();
    let body = serde_json::json!({
        "error": "kshard watches several clusters: ask /clusters/{name}/api/…",
        "clusters": names,
    });
    (StatusCode::NOT_FOUND, axum::Json(body)).into_response()
}

const TEXT_FORMAT: &str = "text/plain; version=0.0.4; charset=utf-8";

/// How often one `/metrics` route renders at most: scrapes within a second
/// of a render get it. At 100,000 partitions a render is over 100 MB and a
/// second of CPU; a few dashboards or a flood of scrapes must not multiply it.
const RENDER_AT_MOST_EVERY: std::time::Duration = std::time::Duration::from_secs(1);

/// One `/metrics` route's last render, and the one render in progress:
/// concurrent scrapes wait for it and share it. A render runs to its end
/// and is kept even when the scrape that asked for it goes away, so that
/// scrapers that give up and ask again do not pile renders up.
#[derive(Default)]
pub(crate) struct RenderCache {
    /// When, and the text (shared by every answer: no copy per scrape).
    last: Arc<tokio::sync::Mutex<Option<(std::time::Instant, axum::body::Bytes)>>>,
}

impl RenderCache {
    /// The text rendered less than [`RENDER_AT_MOST_EVERY`] ago, or a new
    /// render (off the async workers: it takes tens of milliseconds at
    /// 100,000 series).
    async fn text(&self, render: impl FnOnce() -> Result<String, std::fmt::Error> + Send + 'static) -> Response {
        let mut last = Arc::clone(&self.last).lock_owned().await;
        if let Some((at, text)) = last.as_ref()
            && at.elapsed() < RENDER_AT_MOST_EVERY
        {
            return ([(header::CONTENT_TYPE, TEXT_FORMAT)], text.clone()).into_response();
        }
        // Its own task, holding the lock until the render is kept.
        let rendering = tokio::spawn(async move {
            let text = match tokio::task::spawn_blocking(render).await {
                Ok(Ok(text)) => axum::body::Bytes::from(text),
                Ok(Err(_)) | Err(_) => return None,
            };
            *last = Some((std::time::Instant::now(), text.clone()));
            Some(text)
        });
        match rendering.await {
            Ok(Some(text)) => ([(header::CONTENT_TYPE, TEXT_FORMAT)], text).into_response(),
            Ok(None) | Err(_) => (StatusCode::INTERNAL_SERVER_ERROR, "rendering metrics failed\n").into_response(),
        }
    }
}

async fn metrics_text(State(state): State<AppState>, cache: Arc<RenderCache>) -> Response {
    cache
        .text(move || {
            let process = state.process.clone();
            root_metrics(std::slice::from_ref(&state), process.as_ref())
        })
        .await
}

/// Every cluster's series, one family at a time.
async fn all_metrics(State(all): State<Arc<[AppState]>>, process: ProcessSeries, cache: Arc<RenderCache>) -> Response {
    cache.text(move || root_metrics(&all, Some(&process))).await
}

/// `/ready` of several clusters: each one's report, ready only when all are.
#[derive(Serialize)]
struct AllReady {
    ready: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    reason: Option<String>,
    clusters: Vec<NamedReport>,
}

#[derive(Serialize)]
struct NamedReport {
    cluster: String,
    #[serde(flatten)]
    report: api::ReadyReport,
}

async fn all_ready(State(all): State<Arc<[AppState]>>) -> Response {
    clusters_ready(&all, false)
}

/// `/ready/any`: 200 while at least one cluster is ready. What a probe that
/// decides whether the process gets traffic asks (the Helm chart's
/// readiness probe): one cluster whose brokers are down or hostile must
/// not take every other cluster's series off the scrape.
async fn any_ready(State(all): State<Arc<[AppState]>>) -> Response {
    clusters_ready(&all, true)
}

/// Every cluster's report; ready when all are (`any`: when one is).
fn clusters_ready(all: &[AppState], any: bool) -> Response {
    let clusters: Vec<NamedReport> = all
        .iter()
        .map(|c| NamedReport {
            cluster: c.cluster_name().to_owned(),
            report: api::readiness(&c.monitor, c.member.shared().as_ref()),
        })
        .collect();
    let not_ready: Vec<String> = clusters
        .iter()
        .filter(|c| !c.report.ready)
        .map(|c| format!("cluster {}: {}", c.cluster, c.report.reason.as_deref().unwrap_or("not ready")))
        .collect();
    let ready = if any { not_ready.len() < clusters.len() } else { not_ready.is_empty() };
    let status = if ready { StatusCode::OK } else { StatusCode::SERVICE_UNAVAILABLE };
    let reason = (!not_ready.is_empty()).then(|| not_ready.join("; "));
    (status, axum::Json(AllReady { ready, reason, clusters })).into_response()
}

/// With a data directory: the partitions' shards, as `kshard shards list
/// --endpoint` reads them.
async fn shards(State(state): State<AppState>) -> Response {
    match state.member.get() {
        Some((shared, member)) => kshard_runtime::shards_response(shared, member).await,
        None => no_shards(),
    }
}

/// With a data directory: this member's replicas and where each stands in its
/// recovery log (what `kshard shards list --etcd` asks each member).
async fn replicas(State(state): State<AppState>) -> Response {
    match state.member.shared() {
        Some(shared) => kshard_runtime::replicas_response(&shared),
        None => no_shards(),
    }
}

fn no_shards() -> Response {
    (StatusCode::NOT_FOUND, "no shards: kshard serve runs without a data directory\n").into_response()
}

async fn ready(State(state): State<AppState>) -> Response {
    let body = api::readiness(&state.monitor, state.member.shared().as_ref());
    let status = if body.ready { StatusCode::OK } else { StatusCode::SERVICE_UNAVAILABLE };
    (status, axum::Json(body)).into_response()
}

async fn groups(State(state): State<AppState>) -> Response {
    when_ready(&state, api::groups)
}

/// Every group in brief, the most urgent first (the page's overview).
async fn overview(State(state): State<AppState>) -> Response {
    when_ready(&state, api::overview)
}

/// One group whole, with members and recent lag (the page's group view).
async fn group(State(state): State<AppState>, Query(query): Query<GroupQuery>) -> Response {
    if !state.monitor.is_ready() {
        return not_ready(&state);
    }
    let group = query.id;
    match api::group(&state.monitor, &group) {
        Some(detail) => axum::Json(detail).into_response(),
        None => (StatusCode::NOT_FOUND, axum::Json(serde_json::json!({ "error": "no such group", "group_id": group })))
            .into_response(),
    }
}

/// `/api/group?id=G`: the id as a query parameter, so that any group id works
/// (`.`, `..`, `a/b`).
#[derive(serde::Deserialize)]
struct GroupQuery {
    id: String,
}

/// `view` of the state once lag is current and complete; else 503 with the
/// readiness report (what is missing), never a partial answer.
fn when_ready<T: serde::Serialize>(state: &AppState, view: impl FnOnce(&Monitor) -> T) -> Response {
    if !state.monitor.is_ready() {
        return not_ready(state);
    }
    axum::Json(view(&state.monitor)).into_response()
}

fn not_ready(state: &AppState) -> Response {
    (StatusCode::SERVICE_UNAVAILABLE, axum::Json(api::readiness(&state.monitor, state.member.shared().as_ref())))
        .into_response()
}

async fn page() -> Html<&'static str> {
    Html(include_str!("page.html"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn concurrent_scrapes_share_one_render_and_a_second_old_one_is_kept() {
        let cache = Arc::new(RenderCache::default());
        let renders = Arc::new(AtomicUsize::new(0));
        let scrape = |cache: Arc<RenderCache>, renders: Arc<AtomicUsize>| async move {
            cache
                .text(move || {
                    let n = renders.fetch_add(1, Ordering::SeqCst) + 1;
                    // As slow as a large render, so that the others arrive meanwhile.
                    std::thread::sleep(std::time::Duration::from_millis(200));
                    Ok(format!("render {n}\n"))
                })
                .await
        };
        let scrapes: Vec<_> = (0..20).map(|_| tokio::spawn(scrape(Arc::clone(&cache), Arc::clone(&renders)))).collect();
        for s in scrapes {
            assert_eq!(s.await.expect("a scrape").status(), StatusCode::OK);
        }
        assert_eq!(renders.load(Ordering::SeqCst), 1, "twenty scrapes at once, one render");
        tokio::time::sleep(RENDER_AT_MOST_EVERY + std::time::Duration::from_millis(100)).await;
        scrape(Arc::clone(&cache), Arc::clone(&renders)).await;
        assert_eq!(renders.load(Ordering::SeqCst), 2, "a render older than the interval is not served");
    }
}
