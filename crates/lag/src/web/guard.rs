//! Every request through the web configuration: its headers on every
//! response, the rate limit (429), then basic authentication (401 with a
//! `WWW-Authenticate` challenge). bcrypt is slow on purpose (about 70 ms at
//! cost 10), so a checked user, hash and password is remembered, as the
//! toolkit does, and the check runs off the async workers; an unknown user
//! costs the same check as a known one, so timing does not tell which users
//! exist.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::WebConfigFile;
use super::config::WebConfig;
use super::rate_limit::TokenBucket;

/// A valid bcrypt hash of a random password, checked against for users
/// that do not exist.
const DECOY_HASH: &str = "$2y$10$QOauhQNbBCuQDKes6eFzPeMqBSjb7Mr5DUmpZ/VcEd00UAV/LDeSi";

/// Results kept at most; the cache starts over when full.
const CACHE_LIMIT: usize = 1024;

/// What the guard keeps between requests.
#[derive(Debug)]
pub(crate) struct GuardState {
    bucket: Mutex<TokenBucket>,
    /// SHA-256 of (user, hash, password) → whether it matched.
    checked: Mutex<HashMap<[u8; 32], bool>>,
}

impl Default for GuardState {
    fn default() -> Self {
        GuardState { bucket: Mutex::new(TokenBucket::new()), checked: Mutex::new(HashMap::new()) }
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
    if let Some(limit) = config.rate_limit {
        let allowed = web.guard.bucket.lock().unwrap_or_else(PoisonError::into_inner).allow(limit, Instant::now());
        if !allowed {
            return with_headers(&config, (StatusCode::TOO_MANY_REQUESTS, "too many requests\n").into_response());
        }
    }
    if !config.users.is_empty() {
        let Some((user, password)) = credentials(request.headers()) else {
            return with_headers(&config, unauthorized());
        };
        if !authenticated(&web, &config, user.clone(), password).await {
            tracing::warn!(user = %user, path = %request.uri().path(), "basic authentication refused");
            return with_headers(&config, unauthorized());
        }
    }
    with_headers(&config, next.run(request).await)
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

async fn authenticated(web: &Arc<WebConfigFile>, config: &WebConfig, user: String, password: String) -> bool {
    let known = config.users.get(&user);
    let hash = known.map_or(DECOY_HASH, String::as_str).trim().to_owned();
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
            let verified = tokio::task::spawn_blocking(move || bcrypt::verify(password, &hash).unwrap_or(false))
                .await
                .unwrap_or(false);
            let mut checked = web.guard.checked.lock().unwrap_or_else(PoisonError::into_inner);
            if checked.len() >= CACHE_LIMIT {
                checked.clear();
            }
            checked.insert(key, verified);
            verified
        }
    };
    matched && known.is_some()
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
    fn the_decoy_is_a_bcrypt_hash() {
        let config = format!("basic_auth_users:\n  nobody: {DECOY_HASH}\n");
        assert!(WebConfig::parse(&config).is_ok());
        assert_eq!(bcrypt::verify("anything", DECOY_HASH).ok(), Some(false));
    }
}
