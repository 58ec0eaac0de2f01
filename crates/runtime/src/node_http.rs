//! A member's HTTP endpoints, for operators and their tools:
//!
//! - `GET /metrics`: the runtime's metrics ([`crate::metrics`]);
//! - `GET /api/replicas`: this member's replicas and where each stands in its
//!   recovery log (`{shard: {next_offset, log_end}}`);
//! - `GET /api/shards`: every shard of the application with its replicas, their
//!   members, slots and status from the keyspace, and how far each replica is
//!   behind its log as its member says (`kshard shards list` prints these).

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;

use crate::keyspace::Keyspace;
use crate::model::Keys;
use crate::node::{NodeShared, shard_rows};
use crate::replica_worker::Progress;

struct AppState<K> {
    ks: Arc<K>,
    keys: Keys,
    member: String,
    shared: NodeShared,
}

/// The member's routes.
pub fn router<K: Keyspace>(ks: Arc<K>, keys: Keys, member: String, shared: NodeShared) -> Router {
    let state = Arc::new(AppState { ks, keys, member, shared });
    Router::new()
        .route("/metrics", get(metrics::<K>))
        .route("/api/replicas", get(replicas::<K>))
        .route("/api/shards", get(shards::<K>))
        .with_state(state)
}

async fn metrics<K: Keyspace>(State(state): State<Arc<AppState<K>>>) -> Response {
    let text = state.shared.metrics.encode();
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8")], text).into_response()
}

fn local(shared: &NodeShared) -> BTreeMap<String, Progress> {
    shared.progress.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone()
}

async fn replicas<K: Keyspace>(State(state): State<Arc<AppState<K>>>) -> Response {
    axum::Json(local(&state.shared)).into_response()
}

async fn shards<K: Keyspace>(State(state): State<Arc<AppState<K>>>) -> Response {
    let snapshot = match state.ks.get_prefix(&format!("{}/", state.keys.root())).await {
        Ok(s) => s,
        Err(e) => return (StatusCode::SERVICE_UNAVAILABLE, format!("reading the keyspace: {e}\n")).into_response(),
    };
    let (keys, member, mine) = (state.keys.clone(), state.member.clone(), local(&state.shared));
    let rows = tokio::task::spawn_blocking(move || {
        let mut others = BTreeMap::new();
        shard_rows(&keys, &snapshot, |m, shard| {
            let progress = if m.id == member {
                mine.get(shard).copied()
            } else {
                let theirs =
                    others.entry(m.id.clone()).or_insert_with(|| m.endpoint.as_deref().and_then(fetch_progress));
                theirs.as_ref().and_then(|p: &BTreeMap<String, Progress>| p.get(shard).copied())
            };
            progress.map(|p| p.log_end.saturating_sub(p.next_offset))
        })
    })
    .await;
    match rows {
        Ok(rows) => axum::Json(rows).into_response(),
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, format!("{e}\n")).into_response(),
    }
}

/// Asks the member serving at `endpoint` (`host:port`) where its replicas
/// stand; `None` when it does not answer within a second.
pub fn fetch_progress(endpoint: &str) -> Option<BTreeMap<String, Progress>> {
    get_json(endpoint, "/api/replicas", Duration::from_secs(1))
}

/// GETs `path` from the member at `endpoint` and parses its JSON; `None` on any
/// failure. (A plain HTTP/1.0 GET of a member's own small answers does not
/// justify an HTTP client crate.)
pub fn get_json<T: serde::de::DeserializeOwned>(endpoint: &str, path: &str, timeout: Duration) -> Option<T> {
    let addr = std::net::ToSocketAddrs::to_socket_addrs(endpoint).ok()?.next()?;
    let mut stream = TcpStream::connect_timeout(&addr, timeout).ok()?;
    stream.set_read_timeout(Some(timeout)).ok()?;
    stream.set_write_timeout(Some(timeout)).ok()?;
    write!(stream, "GET {path} HTTP/1.0\r\nHost: {endpoint}\r\n\r\n").ok()?;
    let mut response = Vec::new();
    stream.take(16 << 20).read_to_end(&mut response).ok()?;
    let text = String::from_utf8(response).ok()?;
    let (head, body) = text.split_once("\r\n\r\n")?;
    if !head.starts_with("HTTP/1.1 200") && !head.starts_with("HTTP/1.0 200") {
        return None;
    }
    serde_json::from_str(body).ok()
}
