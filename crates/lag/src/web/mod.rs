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
use std::time::SystemTime;

pub use config::{WebConfig, WebConfigError};

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
    pub(crate) tls: tls::AcceptorCache,
}

/// A file's modification time and size: when either changes, it is read again.
type Stamp = Option<(SystemTime, u64)>;

#[derive(Debug)]
struct Loaded {
    stamp: Stamp,
    config: Result<Arc<WebConfig>, WebConfigError>,
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
            loaded: Mutex::new(Loaded { stamp, config: Ok(Arc::clone(&config)) }),
            started_with_tls,
            guard: guard::GuardState::default(),
            tls: tls::AcceptorCache::default(),
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
            let (stamp, config) = read(&self.path);
            if let Err(e) = &config {
                tracing::error!(path = %self.path.display(), error = %e, "the web configuration file changed and is invalid: refusing requests until it is fixed");
            } else {
                tracing::info!(path = %self.path.display(), "web configuration file read again");
            }
            *loaded = Loaded { stamp, config };
        }
        loaded.config.clone()
    }
}

fn stamp(path: &Path) -> Stamp {
    let meta = std::fs::metadata(path).ok()?;
    Some((meta.modified().ok()?, meta.len()))
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
