//! Every request through the web configuration: its headers on every
//! response, basic authentication (401 with a `WWW-Authenticate`
//! challenge), then the rate limit (429), counted per client.
//!
//! The order and the buckets keep a flood from one client off the others:
//! anonymous requests are refused by authentication before they take a
//! token, and each client address has a bucket of its own (the toolkit
//! has one for all), so neither a stranger nor a busy dashboard can get
//! Prometheus or the kubelet's probes answered 429.
//!
//! bcrypt is slow on purpose (about 70 ms at cost 10, 280 at 12), so a
//! checked user, hash and password is remembered (the most recently used
//! [`CACHE_LIMIT`]), at most [`MOST_CHECKS`] checks run at once, off the
//! async workers, and a client address may start ten checks at once and
//! five a second: a request past either is answered 503 (after a
//! second's wait for a permit at most), so a flood of guessed passwords
//! costs two cores' worth of bcrypt at most, holds no connection long, and
//! leaves other clients' first checks their turn. An unknown user is
//! checked against the hash of the configured user whose cost is highest,
//! so timing does not tell which users exist.

use std::net::IpAddr;
use std::num::NonZeroUsize;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

use axum::extract::{ConnectInfo, Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use lru::LruCache;

use super::WebConfigFile;
use super::config::WebConfig;
use super::rate_limit::TokenBucket;

/// bcrypt results kept: the most recently used.
const CACHE_LIMIT: usize = 1024;

/// Clients with a bucket of their own: the most recently seen.
const CLIENTS_LIMIT: usize = 4096;

/// bcrypt checks running at once.
const MOST_CHECKS: usize = 2;

/// bcrypt checks one client address may start: ten at once, five a second.
const CHECKS_PER_CLIENT: super::config::RateLimit =
    super::config::RateLimit { interval: std::time::Duration::from_millis(200), burst: 10 };

/// How long a check waits for a permit before the request is answered 503.
const CHECK_WAIT: std::time::Duration = std::time::Duration::from_secs(1);

/// What the guard keeps between requests.
#[derive(Debug)]
pub(crate) struct GuardState {
    /// Each client address's rate-limit bucket.
    buckets: Mutex<LruCache<IpAddr, TokenBucket>>,
    /// SHA-256 of (user, hash, password) → whether it matched.
    checked: Mutex<LruCache<[u8; 32], bool>>,
    /// Permits for bcrypt checks.
    checks: Arc<tokio::sync::Semaphore>,
    /// Each client address's bucket of bcrypt checks.
    checks_per_client: Mutex<LruCache<IpAddr, TokenBucket>>,
}

impl Default for GuardState {
    fn default() -> Self {
        let size = |n| NonZeroUsize::new(n).unwrap_or(NonZeroUsize::MIN);
        GuardState {
            buckets: Mutex::new(LruCache::new(size(CLIENTS_LIMIT))),
            checked: Mutex::new(LruCache::new(size(CACHE_LIMIT))),
            checks: Arc::new(tokio::sync::Semaphore::new(MOST_CHECKS)),
            checks_per_client: Mutex::new(LruCache::new(size(CLIENTS_LIMIT))),
        }
    }
}

/// The middleware (`axum::middleware::from_fn_with_state`).
pub(crate) async fn guard(State(web): State<Arc<WebConfigFile>>, request: Request, next: Next) -> Response {
    let config = match web.current() {
        Ok(config) => config,
        Err(_) => return (StatusCode::INTERNAL_SERVER_ERROR, "invalid web configuration file\n").into_response(),
    };
    if config.tls.is_some() != web.started_with_tls {
        tracing::error!("the web configuration file turned TLS on or off: restart kshard to apply it");
        let body = "the web configuration turned TLS on or off; restart to apply it\n";
        return with_headers(&config, (StatusCode::INTERNAL_SERVER_ERROR, body).into_response());
    }
    // The client's address; one bucket for all when it is not known.
    let client = request
        .extensions()
        .get::<ConnectInfo<std::net::SocketAddr>>()
        .map_or(IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED), |c| c.0.ip());
    if !config.users.is_empty() {
        let Some((user, password)) = credentials(request.headers()) else {
            return with_headers(&config, unauthorized());
        };
        match authenticated(&web, &config, client, user.clone(), password).await {
            Checked::Yes => {}
            Checked::No => {
                tracing::warn!(user = %user, path = %request.uri().path(), "basic authentication refused");
                return with_headers(&config, unauthorized());
            }
            Checked::Busy => {
                let mut busy = (StatusCode::SERVICE_UNAVAILABLE, "too many password checks at once\n").into_response();
                busy.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
                return with_headers(&config, busy);
            }
        }
    }
    if let Some(limit) = config.rate_limit {
        let allowed = {
            let mut buckets = web.guard.buckets.lock().unwrap_or_else(PoisonError::into_inner);
            buckets.get_or_insert_mut(client, TokenBucket::new).allow(limit, Instant::now())
        };
        if !allowed {
            return with_headers(&config, (StatusCode::TOO_MANY_REQUESTS, "too many requests\n").into_response());
        }
    }
    with_headers(&config, next.run(request).await)
}

/// What a password check said.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Checked {
    Yes,
    No,
    /// Not checked: as many checks as allowed are running.
    Busy,
}

fn unauthorized() -> Response {
    let mut response = (StatusCode::UNAUTHORIZED, "Unauthorized\n").into_response();
    response.headers_mut().insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Basic"));
    response
}

fn with_headers(config: &WebConfig, mut response: Response) -> Response {
    for (name, value) in &config.headers {
        // Checked when the file was read.
        if let Ok(value) = HeaderValue::from_str(value) {
            response.headers_mut().insert(*name, value);
        }
    }
    response
}

/// The user and password of an `Authorization: Basic …` header.
pub(crate) fn credentials(headers: &axum::http::HeaderMap) -> Option<(String, String)> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, encoded) = value.split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("basic") {
        return None;
    }
    let decoded = openssl::base64::decode_block(encoded.trim()).ok()?;
    let text = String::from_utf8(decoded).ok()?;
    let (user, password) = text.split_once(':')?;
    Some((user.to_owned(), password.to_owned()))
}

async fn authenticated(
    web: &Arc<WebConfigFile>,
    config: &WebConfig,
    client: IpAddr,
    user: String,
    password: String,
) -> Checked {
    let known = config.users.get(&user);
    let Some(hash) = known.or_else(|| costliest(config)).map(|h| h.trim().to_owned()) else {
        return Checked::No;
    };
    let key = {
        let mut hasher = openssl::sha::Sha256::new();
        for part in [user.as_bytes(), hash.as_bytes(), password.as_bytes()] {
            hasher.update(&(part.len() as u64).to_be_bytes());
            hasher.update(part);
        }
        hasher.finish()
    };
    let cached = web.guard.checked.lock().unwrap_or_else(PoisonError::into_inner).get(&key).copied();
    let matched = match cached {
        Some(matched) => matched,
        None => {
            // Checks not answered from the cache cost bcrypt: a client may
            // ask for a few a second, so that one guessing passwords cannot
            // hold the permits every other client's first check needs.
            let allowed = {
                let mut buckets = web.guard.checks_per_client.lock().unwrap_or_else(PoisonError::into_inner);
                buckets.get_or_insert_mut(client, TokenBucket::new).allow(CHECKS_PER_CLIENT, Instant::now())
            };
            if !allowed {
                return Checked::Busy;
            }
            let permit = Arc::clone(&web.guard.checks).acquire_owned();
            let Ok(Ok(permit)) = tokio::time::timeout(CHECK_WAIT, permit).await else { return Checked::Busy };
            let verified = tokio::task::spawn_blocking(move || {
                let verified = bcrypt::verify(password, &hash).unwrap_or(false);
                drop(permit);
                verified
            })
            .await
            .unwrap_or(false);
            web.guard.checked.lock().unwrap_or_else(PoisonError::into_inner).put(key, verified);
            verified
        }
    };
    if matched && known.is_some() { Checked::Yes } else { Checked::No }
}

/// The configured hash of the highest cost: what an unknown user's
/// password is checked against, so that it takes as long as a known one's.
fn costliest(config: &WebConfig) -> Option<&String> {
    config.users.values().max_by_key(|hash| cost_of(hash))
}

/// A bcrypt hash's cost (`$2y$12$…` → 12; 0 when it does not say).
fn cost_of(hash: &str) -> u32 {
    hash.trim().split('$').nth(2).and_then(|cost| cost.parse().ok()).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn basic_credentials_are_read() {
        let mut headers = axum::http::HeaderMap::new();
        assert_eq!(credentials(&headers), None);
        // "alice:s3:cret" — a colon in the password stays in it.
        headers.insert(header::AUTHORIZATION, HeaderValue::from_static("Basic YWxpY2U6czM6Y3JldA=="));
        assert_eq!(credentials(&headers), Some(("alice".into(), "s3:cret".into())));
        headers.insert(header::AUTHORIZATION, HeaderValue::from_static("Bearer YWxpY2U6czM6Y3JldA=="));
        assert_eq!(credentials(&headers), None);
        headers.insert(header::AUTHORIZATION, HeaderValue::from_static("Basic !!!"));
        assert_eq!(credentials(&headers), None);
    }

    #[test]
    fn an_unknown_user_is_checked_against_the_costliest_hash() {
        let cheap = bcrypt::hash("a", 4).expect("hash");
        let dear = bcrypt::hash("b", 6).expect("hash");
        let config =
            WebConfig::parse(&format!("basic_auth_users:\n  cheap: {cheap}\n  dear: {dear}\n")).expect("parses");
        assert_eq!(costliest(&config), Some(&dear));
        assert_eq!((cost_of(&cheap), cost_of(&dear), cost_of("nonsense")), (4, 6, 0));
    }
}
