//! [`Queries`]: how an application's HTTP handlers read its shards' state.
//! A handler names the shard (or a source partition, for the shard reading
//! it) and a function of a read-only [`StoreView`]; [`Queries::serve`]
//! answers the request from this member's replica when the resolver says so
//! (waiting for the offsets the request has seen), forwards it to the
//! primary's member otherwise, and answers 503 with the reason while no
//! member can ([`crate::resolver`] decides; this module does the I/O).
//!
//! The query parameters `seen`, `stale` and `wait` are the runtime's (see
//! [`ReadOptions`]). An answer from a view carries headers saying where it
//! came from: `Kshard-Shard`, `Kshard-Member`, `Kshard-Replica` (`primary`
//! or `standby`) and `Kshard-Applied`, the last offset of each source the
//! state has applied (`topic:partition:offset,…`), which a client passes
//! back as `seen` to never read an older state than one it has read.

use std::time::Duration;

use axum::body::Body;
use axum::extract::Request;
use axum::http::{HeaderName, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use tokio::time::Instant;

use crate::app_error::AppError;
use crate::node_shared::NodeShared;
use crate::resolver::{LocalReplica, ReadOptions, Route, not_read, resolve, unapplied};
use crate::store_view::StoreView;

/// The header a forwarded read carries: the member that forwarded it.
const FORWARDED_BY: &str = "kshard-forwarded-by";

/// The largest request body a read forwards.
const MAX_BODY: usize = 1 << 20;

/// How often a waiting read looks again.
const POLL: Duration = Duration::from_millis(10);

/// The pauses between looks at a cluster that cannot answer yet.
const BACKOFF_FROM: Duration = Duration::from_millis(50);
const BACKOFF_TO: Duration = Duration::from_secs(1);

/// How long connecting to another member may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);

/// Headers of one connection, not passed on by a forwarding member.
const HOP_BY_HOP: [&str; 8] = [
    "connection",
    "keep-alive",
    "proxy-authenticate",
    "proxy-authorization",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
];

/// How long a forwarded read may take beyond the wait it asked for.
const FORWARD_SLACK: Duration = Duration::from_secs(5);

/// An application's way to its shards' state, handed to
/// [`crate::Application::routes`] (cheap to clone: one per handler).
#[derive(Debug, Clone)]
pub struct Queries {
    member: String,
    shared: NodeShared,
}

impl Queries {
    /// The queries of member `member`, which shares `shared`.
    pub fn new(member: String, shared: NodeShared) -> Self {
        Queries { member, shared }
    }

    /// This member's id.
    pub fn member(&self) -> &str {
        &self.member
    }

    /// The shard reading `topic`'s `partition`, as the keyspace says.
    pub fn shard_reading(&self, topic: &str, partition: i32) -> Option<String> {
        self.shared.with_cluster(|c| c.shard_reading(topic, partition).map(str::to_owned))
    }

    /// Answers `request` with `read` of the state of the shard reading
    /// `topic`'s `partition` (404 when no shard does): see [`Queries::serve`].
    pub async fn serve_source<R, F>(&self, topic: &str, partition: i32, request: Request, read: F) -> Response
    where
        R: IntoResponse,
        F: FnOnce(&StoreView) -> Result<R, AppError> + Send + 'static,
    {
        self.answer_read(Target::Source(topic, partition), request, read).await
    }

    /// Answers `request` with `read` of `shard`'s state, here or at the
    /// primary's member (see the module's doc). `read` runs on a blocking
    /// thread; its error (a [`crate::StoreError`] with `?`, or the
    /// application's) is a 500 naming it.
    pub async fn serve<R, F>(&self, shard: &str, request: Request, read: F) -> Response
    where
        R: IntoResponse,
        F: FnOnce(&StoreView) -> Result<R, AppError> + Send + 'static,
    {
        self.answer_read(Target::Shard(shard), request, read).await
    }

    async fn answer_read<R, F>(&self, target: Target<'_>, request: Request, read: F) -> Response
    where
        R: IntoResponse,
        F: FnOnce(&StoreView) -> Result<R, AppError> + Send + 'static,
    {
        let options = match ReadOptions::parse(request.uri().query()) {
            Ok(options) => options,
            Err(e) => return unavailable(StatusCode::BAD_REQUEST, e.to_string()),
        };
        let forwarded = request.headers().contains_key(FORWARDED_BY);
        let deadline = Instant::now() + options.wait;
        // The body, kept to forward again after a failed attempt.
        let (parts, body) = request.into_parts();
        let body = match axum::body::to_bytes(body, MAX_BODY).await {
            Ok(body) => body,
            Err(e) => return unavailable(StatusCode::PAYLOAD_TOO_LARGE, format!("the request's body: {e}")),
        };
        // Waiting on this member's own replica looks again soon; waiting on
        // the cluster (a fail-over) or on a member that did not answer backs off.
        let mut pause = POLL;
        let (shard, view, standby) = loop {
            let (shard, route) = match self.route(target, &options, forwarded) {
                Ok(routed) => routed,
                Err((status, e)) => return unavailable(status, e),
            };
            let why = match route {
                Route::NoShard => return unavailable(StatusCode::NOT_FOUND, format!("no shard {shard}")),
                Route::Local { standby } => match self.here(&shard, standby, &options) {
                    Here::View(view) => break (shard, view, standby),
                    Here::Wait(why) => {
                        pause = POLL;
                        why
                    }
                },
                Route::Forward { member, endpoint } => {
                    let request = Request::from_parts(parts.clone(), Body::from(body.clone()));
                    let timeout = deadline.saturating_duration_since(Instant::now()) + FORWARD_SLACK;
                    match forward(&endpoint, &self.member, request, timeout).await {
                        Ok(response) => return response,
                        Err(e) => {
                            pause = (pause * 2).clamp(BACKOFF_FROM, BACKOFF_TO);
                            format!("forwarding to {member} at {endpoint}: {e}")
                        }
                    }
                }
                Route::Unavailable(why) => {
                    pause = (pause * 2).clamp(BACKOFF_FROM, BACKOFF_TO);
                    why
                }
            };
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return unavailable(StatusCode::SERVICE_UNAVAILABLE, why);
            }
            tokio::time::sleep(pause.min(left)).await;
        };
        answer(&self.member, &shard, standby, view, read).await
    }

    /// The shard `target` names and where its read goes, as this member's
    /// view says now (read under its lock, not copied); `Err`: the read's
    /// answer (no shard reads its partition, or it names one the shard
    /// does not read).
    fn route(
        &self,
        target: Target<'_>,
        options: &ReadOptions,
        forwarded: bool,
    ) -> Result<(String, Route), (StatusCode, String)> {
        let local = |shard: &str| self.local(shard);
        self.shared.with_cluster(|cluster| {
            let shard = match target {
                Target::Shard(shard) => shard.to_owned(),
                Target::Source(topic, partition) => match cluster.shard_reading(topic, partition) {
                    Some(shard) => shard.to_owned(),
                    // Known only once the view is loaded (this member in it).
                    None if cluster.members().contains_key(&self.member) => {
                        let e = format!("no shard reads {topic}:{partition}");
                        return Err((StatusCode::NOT_FOUND, e));
                    }
                    None => {
                        let why = format!("this member's view of the keyspace is loading: {topic}:{partition}'s shard is not known yet");
                        return Ok((format!("{topic}:{partition}"), Route::Unavailable(why)));
                    }
                },
            };
            if cluster.has_shard(&shard)
                && let Some(s) = not_read(cluster, &shard, &options.seen)
            {
                let e = format!("invalid seen: shard {shard} does not read {}:{}", s.topic, s.partition);
                return Err((StatusCode::BAD_REQUEST, e));
            }
            let route = resolve(cluster, &self.member, &shard, local(&shard), options, forwarded);
            Ok((shard, route))
        })
    }

    /// This member's replica of `shard`, when it has one.
    fn local(&self, shard: &str) -> Option<LocalReplica> {
        let code = self.shared.statuses().get(shard).copied()?;
        let progress =
            self.shared.progress.lock().unwrap_or_else(std::sync::PoisonError::into_inner).get(shard).copied();
        Some(LocalReplica {
            code,
            applied_ago: progress.and_then(|p| p.applied).map(|at| at.elapsed()),
            behind: progress.map_or(i64::MAX, |p| p.behind()),
            viewable: self.shared.views(shard).is_some(),
        })
    }

    /// A view of this member's replica of `shard` that has applied what
    /// the read has seen.
    fn here(&self, shard: &str, standby: bool, options: &ReadOptions) -> Here {
        let view = match self.shared.views(shard).map(|v| v.view()) {
            Some(Ok(view)) => view,
            Some(Err(e)) => return Here::Wait(format!("viewing shard {shard}'s store: {e}")),
            None => return Here::Wait(format!("shard {shard}'s replica here has no store")),
        };
        let role = if standby { "standby" } else { "primary" };
        match unapplied(&options.seen, view.offsets()) {
            None => Here::View(view),
            Some(s) => Here::Wait(format!(
                "shard {shard}'s {role} on {} has not applied {}:{}:{} yet",
                self.member, s.topic, s.partition, s.offset
            )),
        }
    }
}

/// What a read is of.
#[derive(Clone, Copy)]
enum Target<'a> {
    Shard(&'a str),
    Source(&'a str, i32),
}

enum Here {
    View(StoreView),
    Wait(String),
}

/// `read` of `view`, on a blocking thread, with the headers saying where the
/// answer came from.
async fn answer<R, F>(member: &str, shard: &str, standby: bool, view: StoreView, read: F) -> Response
where
    R: IntoResponse,
    F: FnOnce(&StoreView) -> Result<R, AppError> + Send + 'static,
{
    let applied: Vec<String> = view
        .offsets()
        .iter()
        .filter(|o| o.offset > 0)
        .map(|o| format!("{}:{}:{}", o.topic, o.partition, o.offset - 1))
        .collect();
    let mut response = match tokio::task::spawn_blocking(move || read(&view).map(IntoResponse::into_response)).await {
        Ok(Ok(response)) => response,
        Ok(Err(e)) => unavailable(StatusCode::INTERNAL_SERVER_ERROR, format!("shard {shard}: {e}")),
        Err(e) => unavailable(StatusCode::INTERNAL_SERVER_ERROR, format!("shard {shard}'s read failed: {e}")),
    };
    let headers = response.headers_mut();
    for (name, value) in [
        ("kshard-shard", shard.to_owned()),
        ("kshard-member", member.to_owned()),
        ("kshard-replica", if standby { "standby" } else { "primary" }.to_owned()),
        ("kshard-applied", applied.join(",")),
    ] {
        if let Ok(value) = HeaderValue::from_str(&value) {
            headers.insert(HeaderName::from_static(name), value);
        }
    }
    response
}

/// A JSON error answer (`{"error": …}`); a 503 says when to ask again.
fn unavailable(status: StatusCode, error: String) -> Response {
    let mut response = (status, axum::Json(serde_json::json!({ "error": error }))).into_response();
    if status == StatusCode::SERVICE_UNAVAILABLE {
        response.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    }
    response
}

/// Sends `request` to the member at `endpoint` (`host:port[/prefix]`) over
/// one HTTP/1.1 connection, marked as forwarded by `me`, and returns its
/// answer as it streams back.
async fn forward(endpoint: &str, me: &str, request: Request, timeout: Duration) -> Result<Response, String> {
    let (host, prefix) = crate::node_http::split_endpoint(endpoint);
    let exchange = async {
        let stream = tokio::time::timeout(CONNECT_TIMEOUT, tokio::net::TcpStream::connect(host))
            .await
            .map_err(|_| format!("no connection within {CONNECT_TIMEOUT:?}"))?
            .map_err(|e| e.to_string())?;
        let _ = stream.set_nodelay(true);
        let (mut sender, connection) = hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
            .await
            .map_err(|e| e.to_string())?;
        tokio::spawn(connection);
        let (mut parts, body) = request.into_parts();
        let path = parts.uri.path_and_query().map_or("/", |p| p.as_str());
        parts.uri = format!("{prefix}{path}").parse().map_err(|e| format!("{e}"))?;
        parts.version = axum::http::Version::HTTP_11;
        let value = |v: &str| HeaderValue::from_str(v).map_err(|e| e.to_string());
        for name in HOP_BY_HOP {
            parts.headers.remove(name);
        }
        parts.headers.insert(header::HOST, value(host)?);
        parts.headers.insert(HeaderName::from_static(FORWARDED_BY), value(me)?);
        let response = sender.send_request(Request::from_parts(parts, body)).await.map_err(|e| e.to_string())?;
        let mut response = response.map(Body::new);
        for name in HOP_BY_HOP {
            response.headers_mut().remove(name);
        }
        Ok::<_, String>(response)
    };
    tokio::time::timeout(timeout, exchange).await.map_err(|_| format!("no answer within {timeout:?}"))?
}
