//! Serving [`crate::burrow`]'s answers under `/v3/kafka`, in Burrow's envelope;
//! an error (unknown cluster, group or topic; kshard not ready) is Burrow's
//! `{"error": true, "message": …}` with 404 or 503. Every watched cluster is
//! listed and served under its name (`local` without `clusters:`).

use std::sync::Arc;

use axum::Router;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde::Serialize;

use crate::app_state::AppState;
use crate::burrow::{self, Answer, ClusterDetail, ClusterModule, Clusters, Empty, RequestInfo, StatusBody};

type All = Arc<[AppState]>;

/// The `/v3/kafka` routes over every watched cluster.
pub(crate) fn routes(clusters: All) -> Router {
    Router::new()
        .route("/v3/kafka", get(|state: State<All>, headers: HeaderMap| answer(state, headers, String::new())))
        .route("/v3/kafka/", get(|state: State<All>, headers: HeaderMap| answer(state, headers, String::new())))
        .route(
            "/v3/kafka/{*rest}",
            get(|state: State<All>, headers: HeaderMap, Path(rest): Path<String>| answer(state, headers, rest)),
        )
        .with_state(clusters)
}

/// An answer with a body (`error: false`, even for a NOTFOUND status, as Burrow).
fn reply<T: Serialize>(code: StatusCode, request: RequestInfo, message: &str, body: T) -> Response {
    (code, axum::Json(Answer { error: false, message: message.to_owned(), body, request })).into_response()
}

/// An error: no body, `error: true`.
fn fail(code: StatusCode, request: RequestInfo, message: &str) -> Response {
    (code, axum::Json(Answer { error: true, message: message.to_owned(), body: Empty {}, request })).into_response()
}

async fn answer(State(all): State<All>, headers: HeaderMap, rest: String) -> Response {
    let path = format!("/v3/kafka{}{rest}", if rest.is_empty() { "" } else { "/" });
    let host = headers.get(header::HOST).and_then(|h| h.to_str().ok()).unwrap_or_default().to_owned();
    let request = RequestInfo { url: path, host };
    let parts: Vec<&str> = rest.split('/').filter(|s| !s.is_empty()).collect();
    let not_found = |request, what: &str| fail(StatusCode::NOT_FOUND, request, what);
    // The clusters are known from the configuration, current or not.
    let Some(&name) = parts.first() else {
        let clusters = Clusters { clusters: all.iter().map(|c| c.cluster_name().to_owned()).collect() };
        return reply(StatusCode::OK, request, "cluster list returned", clusters);
    };
    let Some(state) = all.iter().find(|c| c.cluster_name() == name) else {
        return not_found(request, "cluster not found");
    };
    let monitor = &state.monitor;
    if !monitor.is_ready() {
        let why = monitor.verdict().reason.unwrap_or_else(|| "not ready".to_owned());
        return fail(
            StatusCode::SERVICE_UNAVAILABLE,
            request,
            &format!("kshard is not ready for cluster {name}: {why}"),
        );
    }
    match parts[1..] {
        [] => {
            let module = ClusterModule {
                class_name: "kshard".to_owned(),
                servers: monitor_servers(state),
                topic_refresh: state.refresh_seconds,
                offset_refresh: state.refresh_seconds,
            };
            reply(StatusCode::OK, request, "cluster module detail returned", ClusterDetail { module })
        }
        ["topic"] => reply(StatusCode::OK, request, "topic list returned", burrow::topics(monitor)),
        ["topic", topic] => match burrow::topic_offsets(monitor, topic) {
            Some(offsets) => reply(StatusCode::OK, request, "topic offsets returned", offsets),
            None => not_found(request, "cluster or topic not found"),
        },
        ["consumer"] => reply(StatusCode::OK, request, "consumer list returned", burrow::consumers(monitor)),
        ["consumer", group] => match burrow::consumer_detail(monitor, group) {
            Some(detail) => reply(StatusCode::OK, request, "consumer detail returned", detail),
            None => not_found(request, "cluster or consumer not found"),
        },
        ["consumer", group, which @ ("status" | "lag")] => {
            let status = burrow::group_status(monitor, name, group, which == "lag");
            let code = if status.status == "NOTFOUND" { StatusCode::NOT_FOUND } else { StatusCode::OK };
            reply(code, request, "consumer status returned", StatusBody { status })
        }
        _ => not_found(request, "invalid request type"),
    }
}

/// The bootstrap servers, as Burrow lists a cluster's.
fn monitor_servers(state: &AppState) -> Vec<String> {
    state.brokers.split(',').map(str::trim).filter(|s| !s.is_empty()).map(str::to_owned).collect()
}
