//! Securing kshard's HTTP endpoint with the exporter-toolkit's web
//! configuration file (`--web-config-file`): [`config`] parses it (pure),
//! [`WebConfigFile`] reads it again whenever it changes (as the toolkit
//! does at every request, so a renewed certificate or a new user needs no
//! restart), `guard` checks each request (rate limit, basic auth, headers)
//! and `tls` terminates HTTPS through OpenSSL.

pub mod config;
pub(crate) mod guard;
pub(crate) mod rate_limit;
pub(crate) mod tls;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

pub use config::{WebConfig, WebConfigError};
pub use tls::TlsConnection;

/// A web configuration file, read again when its size or modification time
/// changes. A change that does not parse is refused (requests get 500 and
/// the error is logged) rather than silently dropping TLS or authentication.
#[derive(Debug)]
pub struct WebConfigFile {
    path: PathBuf,
    loaded: Mutex<Loaded>,
    /// Whether the listener was started with TLS: the file cannot turn a
    /// plain listener into an HTTPS one without a restart.
    pub(crate) started_with_tls: bool,
    pub(crate) guard: guard::GuardState,
    /// The web port's acceptor (HTTP/1.1).
    pub(crate) tls: tls::AcceptorCache,
    /// KEDA's scaler port's acceptor: the same settings, offering HTTP/2
    /// (gRPC clients require it by ALPN).
    pub(crate) grpc_tls: tls::AcceptorCache,
}

/// The web configuration file's [`FileStamp`]: when it changes, it is read again.
type Stamp = Option<FileStamp>;

/// What tells that a file changed: its device and inode (an atomic replace,
/// as Kubernetes does for a mounted Secret, brings a new one), its size,
/// and its modification and change times. The change time moves at every
/// write even when a tool sets the modification time back (`cp -p`,
/// `touch -r`, a renewed certificate written in the same second).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct FileStamp {
    device: u64,
    inode: u64,
    len: u64,
    modified: (i64, i64),
    changed: (i64, i64),
}

/// The [`FileStamp`] of `path` (following symbolic links), when it can be read.
pub(crate) fn file_stamp(path: &Path) -> Option<FileStamp> {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::metadata(path).ok()?;
    Some(FileStamp {
        device: meta.dev(),
        inode: meta.ino(),
        len: meta.len(),
        modified: (meta.mtime(), meta.mtime_nsec()),
        changed: (meta.ctime(), meta.ctime_nsec()),
    })
}

/// How long an empty file is taken for one being rewritten (truncated,
/// then written), while the configuration before it stays in force.
const REWRITE_WINDOW: Duration = Duration::from_secs(5);

#[derive(Debug)]
struct Loaded {
    stamp: Stamp,
    config: Result<Arc<WebConfig>, WebConfigError>,
    /// Since when the file has read empty while a configuration was in force.
    empty_since: Option<Instant>,
}

impl WebConfigFile {
    /// Reads and checks the file, and the certificates and keys it names:
    /// an error names the field at fault.
    pub fn open(path: &Path) -> Result<Arc<WebConfigFile>, WebConfigError> {
        let (stamp, config) = read(path);
        let config = config?;
        let started_with_tls = config.tls.is_some();
        let file = WebConfigFile {
            path: path.to_owned(),
            loaded: Mutex::new(Loaded { stamp, config: Ok(Arc::clone(&config)), empty_since: None }),
            started_with_tls,
            guard: guard::GuardState::default(),
            tls: tls::AcceptorCache::new(tls::Alpn::Http1),
            grpc_tls: tls::AcceptorCache::new(tls::Alpn::H2),
        };
        if let Some(tls) = &config.tls {
            file.tls.acceptor(tls)?;
        }
        Ok(Arc::new(file))
    }

    /// The configuration now: read again if the file changed.
    pub fn current(&self) -> Result<Arc<WebConfig>, WebConfigError> {
        let stamp = stamp(&self.path);
        let mut loaded = self.loaded.lock().unwrap_or_else(PoisonError::into_inner);
        if stamp != loaded.stamp || stamp.is_none() {
            // An empty file is one being rewritten, for a while: the
            // configuration in force stays (never a moment without TLS or
            // users), and the file is read again at the next request.
            if stamp.as_ref().is_some_and(|s| s.len == 0) && loaded.config.is_ok() {
                let since = *loaded.empty_since.get_or_insert_with(Instant::now);
                if since.elapsed() < REWRITE_WINDOW {
                    return loaded.config.clone();
                }
                tracing::warn!(path = %self.path.display(), "the web configuration file has been empty for 5 s: applying it");
            }
            let (stamp, config) = read(&self.path);
            if let Err(e) = &config {
                tracing::error!(path = %self.path.display(), error = %e, "the web configuration file changed and is invalid: refusing requests until it is fixed");
            } else {
                tracing::info!(path = %self.path.display(), "web configuration file read again");
            }
            *loaded = Loaded { stamp, config, empty_since: None };
        }
        loaded.config.clone()
    }
}

fn stamp(path: &Path) -> Stamp {
    file_stamp(path)
}

fn read(path: &Path) -> (Stamp, Result<Arc<WebConfig>, WebConfigError>) {
    let stamp = stamp(path);
    let config = std::fs::read_to_string(path)
        .map_err(|e| WebConfigError {
            field: "web_config_file".into(),
            why: format!("cannot read {}: {e}", path.display()),
        })
        .and_then(|text| WebConfig::parse(&text))
        .map(Arc::new);
    (stamp, config)
}
