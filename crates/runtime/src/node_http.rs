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
            progress.map(|p| p.behind())
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

/// GETs `path` from `endpoint` (`host:port`) and parses its JSON; `None` on
/// any failure or a status other than 200.
pub fn get_json<T: serde::de::DeserializeOwned>(endpoint: &str, path: &str, timeout: Duration) -> Option<T> {
    match http_get(endpoint, path, timeout) {
        Ok((200, body)) => serde_json::from_str(&body).ok(),
        _ => None,
    }
}

/// A plain HTTP/1.0 GET of `path` from `endpoint` (`host:port`): the status
/// and the body. (A member's own small answers do not justify an HTTP client
/// crate; `kshard bench` uses it too.)
pub fn http_get(endpoint: &str, path: &str, timeout: Duration) -> std::io::Result<(u16, String)> {
    let addr = std::net::ToSocketAddrs::to_socket_addrs(endpoint)?
        .next()
        .ok_or_else(|| std::io::Error::new(std::io::ErrorKind::NotFound, format!("no address for {endpoint}")))?;
    let mut stream = TcpStream::connect_timeout(&addr, timeout)?;
    stream.set_read_timeout(Some(timeout))?;
    stream.set_write_timeout(Some(timeout))?;
    write!(stream, "GET {path} HTTP/1.0\r\nHost: {endpoint}\r\n\r\n")?;
    let mut response = Vec::new();
    stream.take(64 << 20).read_to_end(&mut response)?;
    let text = String::from_utf8_lossy(&response);
    let status = text.split_whitespace().nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
    let body = text.split_once("\r\n\r\n").map(|(_, b)| b.to_owned()).unwrap_or_default();
    Ok((status, body))
}
