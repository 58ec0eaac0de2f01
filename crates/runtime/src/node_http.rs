//! A member's HTTP endpoints, for operators and their tools:
//!
//! - `GET /metrics`: the runtime's metrics ([`crate::metrics`]);
//! - `GET /api/replicas`: this member's replicas and where each stands in its
//!   recovery log (`{shard: {next_offset, log_end}}`);
//! - `GET /api/shards`: every shard of the application with its replicas, their
//!   members, slots and status from the member's view of the keyspace, and how
//!   far each replica is behind its log as its member says (`kshard shards
//!   list` prints these).
//!
//! An application with HTTP of its own (the lag monitor) serves the same
//! answers with [`replicas_response`] and [`shards_response`].

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

use crate::cluster_view::ClusterView;
use crate::node_shared::NodeShared;
use crate::progress::Progress;
use crate::shard_row::ShardRow;

/// The member's routes.
pub fn router(member: String, shared: NodeShared) -> Router {
    let state = Arc::new(AppState { member, shared });
    Router::new()
        .route("/metrics", get(metrics))
        .route("/api/replicas", get(replicas))
        .route("/api/shards", get(shards))
        .with_state(state)
}

struct AppState {
    member: String,
    shared: NodeShared,
}

async fn metrics(State(state): State<Arc<AppState>>) -> Response {
    let text = state.shared.metrics.encode();
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8")], text).into_response()
}

async fn replicas(State(state): State<Arc<AppState>>) -> Response {
    replicas_response(&state.shared)
}

async fn shards(State(state): State<Arc<AppState>>) -> Response {
    shards_response(state.shared.clone(), state.member.clone()).await
}

/// `GET /api/replicas` of `shared`'s member: where each of its replicas
/// stands in its recovery log.
pub fn replicas_response(shared: &NodeShared) -> Response {
    axum::Json(shared.progress()).into_response()
}

/// `GET /api/shards` of `member` (sharing `shared`): every shard of its view
/// of the keyspace with its replicas, and how far each is behind its log
/// (see [`shard_table`]). Any application's HTTP serves it with this.
pub async fn shards_response(shared: NodeShared, member: String) -> Response {
    let rows = tokio::task::spawn_blocking(move || {
        let mine = shared.progress();
        shard_table(&shared.cluster(), Some((&member, &mine)))
    })
    .await;
    match rows {
        Ok(rows) => axum::Json(rows).into_response(),
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, format!("{e}\n")).into_response(),
    }
}

/// `kshard shards list` rows of every shard in `view`: one per replica (one
/// for a shard without any), each with how far it is behind its log as its
/// member says — `local`'s member from the progress given, every other
/// member asked once over HTTP at its endpoint (unknown when it does not
/// answer within a second). Blocking.
pub fn shard_table(view: &ClusterView, local: Option<(&str, &BTreeMap<String, Progress>)>) -> Vec<ShardRow> {
    let shards: Vec<String> = view.shards().map(str::to_owned).collect();
    let members = view.members();
    let mut asked: BTreeMap<String, Option<BTreeMap<String, Progress>>> = BTreeMap::new();
    view.rows(&shards, |member, shard| {
        let progress = match local {
            Some((me, mine)) if me == member => Some(mine),
            _ => asked
                .entry(member.to_owned())
                .or_insert_with(|| members.get(member)?.endpoint.as_deref().and_then(fetch_progress))
                .as_ref(),
        };
        progress?.get(shard).map(|p| p.behind())
    })
}

/// A client of a member's HTTP endpoints (of any kshard process, whose
/// endpoints may sit under a path prefix: `host:port[/prefix]`), for
/// operators' tools: `kshard shards list --endpoint`, `kshard bench`.
/// Plain HTTP/1.0, one connection a call: a member's answers are small and
/// do not justify an HTTP client crate.
#[derive(Debug, Clone)]
pub struct MemberClient {
    endpoint: String,
    timeout: Duration,
}

impl MemberClient {
    /// The member at `endpoint`, each call waiting up to `timeout`.
    pub fn new(endpoint: impl Into<String>, timeout: Duration) -> Self {
        MemberClient { endpoint: endpoint.into(), timeout }
    }

    /// Every shard's replicas as the member sees them (`/api/shards`);
    /// `None` when it does not answer them.
    pub fn shards(&self) -> Option<Vec<ShardRow>> {
        get_json(&self.endpoint, "/api/shards", self.timeout)
    }

    /// Where the member's replicas stand in their logs (`/api/replicas`).
    pub fn replicas(&self) -> Option<BTreeMap<String, Progress>> {
        get_json(&self.endpoint, "/api/replicas", self.timeout)
    }

    /// A GET of `path`: the status and the body.
    pub fn get(&self, path: &str) -> std::io::Result<(u16, String)> {
        http_get(&self.endpoint, path, self.timeout)
    }
}

/// Asks the member serving at `endpoint` (`host:port[/prefix]`) where its replicas
/// stand; `None` when it does not answer within a second.
pub(crate) fn fetch_progress(endpoint: &str) -> Option<BTreeMap<String, Progress>> {
    get_json(endpoint, "/api/replicas", Duration::from_secs(1))
}

/// GETs `path` from `endpoint` (`host:port[/prefix]`) and parses its JSON; `None` on
/// any failure or a status other than 200.
pub(crate) fn get_json<T: serde::de::DeserializeOwned>(endpoint: &str, path: &str, timeout: Duration) -> Option<T> {
    match http_get(endpoint, path, timeout) {
        Ok((200, body)) => serde_json::from_str(&body).ok(),
        _ => None,
    }
}

/// A plain HTTP/1.0 GET of `path` from `endpoint` (`host:port`, then a path
/// prefix where the member's endpoints are, as a process watching several
/// Kafka clusters serves each one's under `/clusters/{name}`): the status
/// and the body. (A member's own small answers do not justify an HTTP client
/// crate; `kshard bench` uses it too.)
pub(crate) fn http_get(endpoint: &str, path: &str, timeout: Duration) -> std::io::Result<(u16, String)> {
    let (host, prefix) = split_endpoint(endpoint);
    let addr = std::net::ToSocketAddrs::to_socket_addrs(host)?
        .next()
        .ok_or_else(|| std::io::Error::new(std::io::ErrorKind::NotFound, format!("no address for {host}")))?;
    let mut stream = TcpStream::connect_timeout(&addr, timeout)?;
    stream.set_read_timeout(Some(timeout))?;
    stream.set_write_timeout(Some(timeout))?;
    write!(stream, "GET {prefix}{path} HTTP/1.0\r\nHost: {host}\r\n\r\n")?;
    let mut response = Vec::new();
    stream.take(64 << 20).read_to_end(&mut response)?;
    let text = String::from_utf8_lossy(&response);
    let status = text.split_whitespace().nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
    let body = text.split_once("\r\n\r\n").map(|(_, b)| b.to_owned()).unwrap_or_default();
    Ok((status, body))
}

/// `host:port` and the path prefix after it (`""` when there is none).
pub(crate) fn split_endpoint(endpoint: &str) -> (&str, &str) {
    let endpoint = endpoint.strip_prefix("http://").or_else(|| endpoint.strip_prefix("https://")).unwrap_or(endpoint);
    match endpoint.find('/') {
        Some(i) => (&endpoint[..i], endpoint[i..].trim_end_matches('/')),
        None => (endpoint, ""),
    }
}

#[cfg(test)]
mod tests {
    use super::split_endpoint;

    #[test]
    fn an_endpoint_may_carry_a_path_prefix() {
        assert_eq!(split_endpoint("10.0.0.1:9308"), ("10.0.0.1:9308", ""));
        assert_eq!(split_endpoint("host:9308/clusters/eu"), ("host:9308", "/clusters/eu"));
        assert_eq!(split_endpoint("http://host:9308/clusters/eu/"), ("host:9308", "/clusters/eu"));
    }
}
