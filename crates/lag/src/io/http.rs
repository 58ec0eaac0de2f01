//! HTTP: `/metrics` (Prometheus text), `/ready` (503 with progress until caught
//! up, then 200), `/api/groups`, `/api/group?id=G` and `/api/overview`
//! (JSON), `/api/shards` and `/api/replicas` (with a data directory),
//! `/healthz`, and a web page at `/`.

use std::sync::Arc;

use axum::Router;
use axum::extract::{Query, State};
use axum::http::{StatusCode, header};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::get;

use crate::LocalMember;
use crate::api;
use crate::metrics::Metrics;
use crate::monitor::Monitor;

#[derive(Clone)]
pub(crate) struct AppState {
    pub(crate) monitor: Arc<Monitor>,
    metrics: Arc<Metrics>,
    /// With a data directory: the runtime member running the shards.
    pub(crate) member: LocalMember,
    /// The bootstrap servers (Burrow's cluster detail lists them).
    pub(crate) brokers: Arc<str>,
    /// Seconds between watermark refreshes (Burrow's offset refresh).
    pub(crate) refresh_seconds: i64,
}

/// The service's routes.
pub(crate) fn router(
    monitor: Arc<Monitor>,
    metrics: Arc<Metrics>,
    member: LocalMember,
    brokers: &str,
    refresh: std::time::Duration,
) -> Router {
    let refresh_seconds = refresh.as_secs() as i64;
    let state = AppState { monitor, metrics, member, brokers: Arc::from(brokers), refresh_seconds };
    Router::new()
        .route("/", get(page))
        .route("/metrics", get(metrics_text))
        .route("/ready", get(ready))
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/api/groups", get(groups))
        .route("/api/group", get(group))
        .route("/api/overview", get(overview))
        .route("/api/shards", get(shards))
        .route("/api/replicas", get(replicas))
        .merge(super::burrow_http::routes())
        .with_state(state)
}

async fn metrics_text(State(state): State<AppState>) -> Response {
    // Rendering 100k series takes tens of milliseconds: keep it off the async workers.
    let rendered = tokio::task::spawn_blocking(move || {
        let mut text = state.metrics.render()?;
        // With a data directory, the shards' runtime metrics follow.
        if let Some(shards) = state.member.shared() {
            text.push_str(&shards.metrics.encode());
        }
        Ok::<_, std::fmt::Error>(text)
    });
    match rendered.await {
        Ok(Ok(text)) => ([(header::CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8")], text).into_response(),
        Ok(Err(_)) | Err(_) => (StatusCode::INTERNAL_SERVER_ERROR, "rendering metrics failed\n").into_response(),
    }
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
