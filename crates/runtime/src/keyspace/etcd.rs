//! [`EtcdKeyspace`]: the keyspace on etcd (v3 API, through `etcd-client`), for
//! applications of several processes.
//!
//! A watch follows its stream on a task of its own; when the connection drops,
//! it watches again from the revision after the last one it delivered, with a
//! backoff, so no change is lost or repeated. Only a compacted revision ends it
//! (with [`KeyspaceError::Compacted`]).

use std::time::Duration;

use etcd_client::{Client, Compare as EtcdCompare, CompareOp, EventType, GetOptions, PutOptions, TxnOp, WatchOptions};
use tokio::sync::mpsc;

use super::{
    Compare, KeyValue, Keyspace, KeyspaceError, LeaseId, Op, Result, Snapshot, Txn, TxnResponse, WatchEvent,
    WatchStream,
};

/// The keyspace on an etcd cluster.
#[derive(Clone)]
pub struct EtcdKeyspace {
    connection: std::sync::Arc<Connection>,
}

/// The client, and what to make a new one from when etcd forgets the
/// user's token (an etcd restart loses simple tokens; JWTs expire):
/// etcd-client logs in once, when it connects.
struct Connection {
    client: std::sync::RwLock<Client>,
    endpoints: Vec<String>,
    access: EtcdAccess,
    /// Logins made again, for the tests and the log.
    logins: std::sync::atomic::AtomicU64,
}

/// Whether etcd refused a call for its token: log in again and retry.
fn token_lost(e: &etcd_client::Error) -> bool {
    let text = e.to_string();
    text.contains("invalid auth token") || text.contains("user name is empty")
}

impl EtcdKeyspace {
    /// The client now.
    fn client(&self) -> Client {
        self.connection.client.read().unwrap_or_else(std::sync::PoisonError::into_inner).clone()
    }

    /// When `e` says the token was lost and the keyspace has a user: a new
    /// client, logged in again (true: retry the call with it).
    async fn relogin(&self, e: &etcd_client::Error) -> bool {
        if !token_lost(e) || self.connection.access.user.is_none() {
            return false;
        }
        let Ok(options) = self.connection.access.options(&self.connection.endpoints) else { return false };
        match Client::connect(&self.connection.endpoints, Some(options)).await {
            Ok(client) => {
                *self.connection.client.write().unwrap_or_else(std::sync::PoisonError::into_inner) = client;
                let n = self.connection.logins.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
                tracing::info!(logins = n, "etcd forgot the user's token: logged in again");
                true
            }
            Err(error) => {
                tracing::warn!(%error, "logging in to etcd again");
                false
            }
        }
    }

    /// How many times the keyspace logged in again (see [`EtcdAccess`]).
    pub fn relogins(&self) -> u64 {
        self.connection.logins.load(std::sync::atomic::Ordering::Relaxed)
    }
}

impl std::fmt::Debug for EtcdKeyspace {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdKeyspace").finish_non_exhaustive()
    }
}

fn unavailable(e: etcd_client::Error) -> KeyspaceError {
    KeyspaceError::Unavailable(e.to_string())
}

fn lease_missing(e: &etcd_client::Error) -> bool {
    e.to_string().contains("lease not found")
}

fn key_value(kv: &etcd_client::KeyValue) -> KeyValue {
    KeyValue {
        key: String::from_utf8_lossy(kv.key()).into_owned(),
        value: kv.value().to_vec(),
        create_revision: kv.create_revision(),
        mod_revision: kv.mod_revision(),
        version: kv.version(),
        lease: (kv.lease() != 0).then_some(kv.lease()),
    }
}

fn ops(ops: Vec<Op>) -> Vec<TxnOp> {
    ops.into_iter()
        .map(|op| match op {
            Op::Put { key, value, lease } => {
                let options = lease.map(|l| PutOptions::new().with_lease(l));
                TxnOp::put(key, value, options)
            }
            Op::Delete(key) => TxnOp::delete(key, None),
            Op::DeletePrefix(prefix) => TxnOp::delete(prefix, Some(etcd_client::DeleteOptions::new().with_prefix())),
        })
        .collect()
}

/// How to reach an etcd that asks for more than plain HTTP: TLS (its CA, a
/// client certificate) and a user. With `https://` endpoints TLS is used,
/// with the system's CAs unless `ca_file` names others; a user makes every
/// request carry its token.
#[derive(Clone, Default)]
pub struct EtcdAccess {
    /// The CA (PEM) that signed etcd's certificate.
    pub ca_file: Option<std::path::PathBuf>,
    /// A client certificate (PEM), for an etcd started with `--client-cert-auth`.
    pub cert_file: Option<std::path::PathBuf>,
    /// Its private key (PEM).
    pub key_file: Option<std::path::PathBuf>,
    /// A user and its password (etcd's authentication).
    pub user: Option<(String, String)>,
}

impl std::fmt::Debug for EtcdAccess {
    /// Everything but the password.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdAccess")
            .field("ca_file", &self.ca_file)
            .field("cert_file", &self.cert_file)
            .field("key_file", &self.key_file)
            .field("user", &self.user.as_ref().map(|(user, _)| user))
            .finish()
    }
}

/// An [`EtcdAccess`] that cannot work: the setting, and why.
#[derive(Debug, thiserror::Error)]
#[error("invalid {setting}: {why}")]
pub struct EtcdAccessError {
    /// The setting, as `kshard`'s flags name it (`etcd_ca_file`, …).
    pub setting: &'static str,
    /// What is wrong.
    pub why: String,
}

impl EtcdAccess {
    /// etcd-client's options for `endpoints`, the files read now.
    fn options(&self, endpoints: &[String]) -> std::result::Result<etcd_client::ConnectOptions, EtcdAccessError> {
        let invalid = |setting, why: String| EtcdAccessError { setting, why };
        let https = endpoints.iter().filter(|e| e.starts_with("https://")).count();
        if https != 0 && https != endpoints.len() {
            return Err(invalid("etcd", "every endpoint is https:// or none is".into()));
        }
        let tls_asked = self.ca_file.is_some() || self.cert_file.is_some() || self.key_file.is_some();
        if tls_asked && https == 0 {
            return Err(invalid(
                "etcd",
                "a CA or client certificate is given, but the endpoints are not https://".into(),
            ));
        }
        let read = |setting, path: &std::path::Path| {
            std::fs::read(path).map_err(|e| invalid(setting, format!("cannot read {}: {e}", path.display())))
        };
        let mut options = etcd_client::ConnectOptions::new()
            .with_connect_timeout(Duration::from_secs(5))
            .with_timeout(Duration::from_secs(10))
            .with_keep_alive(Duration::from_secs(5), Duration::from_secs(5));
        if https > 0 {
            let mut tls = etcd_client::TlsOptions::new();
            if let Some(ca) = &self.ca_file {
                tls = tls.ca_certificate(etcd_client::Certificate::from_pem(read("etcd_ca_file", ca)?));
            } else {
                tls = tls.with_native_roots();
            }
            match (&self.cert_file, &self.key_file) {
                (Some(cert), Some(key)) => {
                    let identity =
                        etcd_client::Identity::from_pem(read("etcd_cert_file", cert)?, read("etcd_key_file", key)?);
                    tls = tls.identity(identity);
                }
                (None, None) => {}
                _ => {
                    return Err(invalid(
                        "etcd_cert_file",
                        "a client certificate needs its key, and the key its certificate".into(),
                    ));
                }
            }
            options = options.with_tls(tls);
        }
        if let Some((user, password)) = &self.user {
            options = options.with_user(user.clone(), password.clone());
        }
        Ok(options)
    }
}

impl EtcdKeyspace {
    /// Connects to the etcd cluster at `endpoints` (`http://host:port`).
    pub async fn connect(endpoints: &[String]) -> Result<Self> {
        Self::connect_with(endpoints, &EtcdAccess::default()).await
    }

    /// Connects to the etcd cluster at `endpoints` as `access` says: TLS
    /// for `https://` endpoints, and its user. A setting that cannot work
    /// (a file not read, TLS asked of `http://` endpoints) is
    /// [`KeyspaceError::Invalid`], naming it; a refused password or
    /// certificate is an error too, not a retry.
    pub async fn connect_with(endpoints: &[String], access: &EtcdAccess) -> Result<Self> {
        let options = access.options(endpoints).map_err(|e| KeyspaceError::Invalid(e.to_string()))?;
        let client = Client::connect(endpoints, Some(options)).await.map_err(|e| {
            let text = e.to_string();
            // Credentials etcd refused: no retry makes them right.
            if text.contains("authentication failed") || text.contains("permission denied") {
                KeyspaceError::Invalid(format!("etcd refused the credentials: {text}"))
            } else {
                unavailable(e)
            }
        })?;
        let connection = Connection {
            client: std::sync::RwLock::new(client),
            endpoints: endpoints.to_vec(),
            access: access.clone(),
            logins: std::sync::atomic::AtomicU64::new(0),
        };
        Ok(EtcdKeyspace { connection: std::sync::Arc::new(connection) })
    }
}

/// A call on the keyspace's client, made again once with a new client when
/// etcd had forgotten the user's token.
macro_rules! with_client {
    ($ks:expr, |$client:ident| $call:expr) => {{
        let mut $client = $ks.client();
        match $call.await {
            Err(e) if $ks.relogin(&e).await => {
                let mut $client = $ks.client();
                $call.await
            }
            result => result,
        }
    }};
}

impl Keyspace for EtcdKeyspace {
    async fn get_prefix(&self, prefix: &str) -> Result<Snapshot> {
        let resp = with_client!(self, |client| client.get(prefix, Some(GetOptions::new().with_prefix())))
            .map_err(unavailable)?;
        let revision = resp.header().map_or(0, |h| h.revision());
        Ok(Snapshot { kvs: resp.kvs().iter().map(key_value).collect(), revision })
    }

    async fn txn(&self, txn: Txn) -> Result<TxnResponse> {
        // etcd refuses these too; checking first gives the same error as the
        // embedded keyspace rather than an opaque gRPC one.
        txn.validate()?;
        let leases: Vec<LeaseId> = txn
            .success
            .iter()
            .chain(&txn.failure)
            .filter_map(|op| match op {
                Op::Put { lease, .. } => *lease,
                _ => None,
            })
            .collect();
        let compares: Vec<EtcdCompare> = txn
            .compares
            .into_iter()
            .map(|c| match c {
                Compare::ModRevision(key, r) => EtcdCompare::mod_revision(key, CompareOp::Equal, r),
                Compare::CreateRevision(key, r) => EtcdCompare::create_revision(key, CompareOp::Equal, r),
                Compare::Value(key, v) => EtcdCompare::value(key, CompareOp::Equal, v),
            })
            .collect();
        let request = etcd_client::Txn::new().when(compares).and_then(ops(txn.success)).or_else(ops(txn.failure));
        match with_client!(self, |client| client.txn(request.clone())) {
            Ok(resp) => {
                Ok(TxnResponse { succeeded: resp.succeeded(), revision: resp.header().map_or(0, |h| h.revision()) })
            }
            Err(e) if lease_missing(&e) => Err(KeyspaceError::LeaseNotFound(leases.first().copied().unwrap_or(0))),
            Err(e) => Err(unavailable(e)),
        }
    }

    async fn grant(&self, ttl: Duration) -> Result<LeaseId> {
        let seconds = i64::try_from(ttl.as_secs().max(1)).unwrap_or(i64::MAX);
        Ok(with_client!(self, |client| client.lease_grant(seconds, None)).map_err(unavailable)?.id())
    }

    async fn keep_alive(&self, lease: LeaseId) -> Result<()> {
        let error = |e: etcd_client::Error| {
            if lease_missing(&e) { KeyspaceError::LeaseNotFound(lease) } else { unavailable(e) }
        };
        let (mut keeper, mut stream) = with_client!(self, |client| client.lease_keep_alive(lease)).map_err(error)?;
        keeper.keep_alive().await.map_err(error)?;
        match stream.message().await.map_err(error)? {
            Some(resp) if resp.ttl() > 0 => Ok(()),
            Some(_) => Err(KeyspaceError::LeaseNotFound(lease)),
            None => Err(KeyspaceError::Unavailable("the keep-alive stream ended".into())),
        }
    }

    async fn revoke(&self, lease: LeaseId) -> Result<()> {
        match with_client!(self, |client| client.lease_revoke(lease)) {
            Ok(_) => Ok(()),
            Err(e) if lease_missing(&e) => Err(KeyspaceError::LeaseNotFound(lease)),
            Err(e) => Err(unavailable(e)),
        }
    }

    async fn watch(&self, prefix: &str, from_revision: i64) -> Result<WatchStream> {
        let (tx, rx) = mpsc::unbounded_channel();
        let prefix = prefix.to_owned();
        // The first watch is made here, so that its errors reach the caller.
        let first = start_watch(self, &prefix, from_revision).await?;
        tokio::spawn(follow(self.clone(), prefix, from_revision, first, tx));
        Ok(rx)
    }
}

async fn start_watch(ks: &EtcdKeyspace, prefix: &str, from: i64) -> Result<etcd_client::WatchStream> {
    let options = WatchOptions::new().with_prefix().with_start_revision(from.max(1));
    let (_watcher, stream) =
        with_client!(ks, |client| client.watch(prefix, Some(options.clone()))).map_err(unavailable)?;
    Ok(stream)
}

/// Forwards events until the receiver is dropped or the revision is compacted,
/// watching again after the last delivered revision when the stream breaks.
/// A receiver dropped while nothing changes ends the watch at once (its
/// stream dropped, etcd forgets the watcher): waiting for the next event to
/// notice left one watcher in etcd per watch ever made on a quiet cluster.
async fn follow(
    client: EtcdKeyspace,
    prefix: String,
    mut next: i64,
    mut stream: etcd_client::WatchStream,
    tx: mpsc::UnboundedSender<Result<WatchEvent>>,
) {
    let mut failures = 0u32;
    loop {
        let message = tokio::select! {
            message = stream.message() => message,
            () = tx.closed() => return,
        };
        match message {
            Ok(Some(resp)) => {
                failures = 0;
                if resp.compact_revision() > 0 {
                    let oldest = resp.compact_revision();
                    let _ = tx.send(Err(KeyspaceError::Compacted { requested: next, oldest }));
                    return;
                }
                for event in resp.events() {
                    let Some(kv) = event.kv() else { continue };
                    let e = match event.event_type() {
                        EventType::Put => WatchEvent::Put(key_value(kv)),
                        EventType::Delete => WatchEvent::Delete {
                            key: String::from_utf8_lossy(kv.key()).into_owned(),
                            mod_revision: kv.mod_revision(),
                        },
                    };
                    next = e.revision() + 1;
                    if tx.send(Ok(e)).is_err() {
                        return;
                    }
                }
                if resp.canceled() {
                    // Canceled by the server (not compaction): watch again.
                    stream = match reconnect(&client, &prefix, next, &tx, &mut failures).await {
                        Some(s) => s,
                        None => return,
                    };
                }
            }
            Ok(None) | Err(_) => {
                stream = match reconnect(&client, &prefix, next, &tx, &mut failures).await {
                    Some(s) => s,
                    None => return,
                };
            }
        }
    }
}

/// Watches again from `next`, retrying with a backoff up to 5 s while etcd is
/// away; `None` when the receiver is gone.
async fn reconnect(
    client: &EtcdKeyspace,
    prefix: &str,
    next: i64,
    tx: &mpsc::UnboundedSender<Result<WatchEvent>>,
    failures: &mut u32,
) -> Option<etcd_client::WatchStream> {
    loop {
        if tx.is_closed() {
            return None;
        }
        *failures += 1;
        tokio::time::sleep(Duration::from_millis(100 * u64::from((*failures).min(50)))).await;
        match start_watch(client, prefix, next).await {
            Ok(stream) => return Some(stream),
            Err(e) => tracing::warn!(prefix, next, error = %e, "watching etcd again failed; retrying"),
        }
    }
}
