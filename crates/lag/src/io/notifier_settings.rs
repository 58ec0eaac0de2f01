//! A notifier's settings (`notifiers:`), after Burrow's: which groups it
//! tells about and when, its templates, and where it sends (an HTTP
//! endpoint, or mail through an SMTP server). Checked when made: a template
//! that does not parse fails at start, naming the notifier.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use crate::filter::NameFilter;
use crate::notify::incidents::{BurrowStatus, NoticeRules};
use crate::notify::notice_data;

/// One notifier.
#[derive(Debug, Clone)]
pub struct NotifierSettings {
    /// Its name (in logs and metrics).
    pub name: String,
    /// Only this cluster's groups (its name under `clusters:`); all without.
    pub cluster: Option<String>,
    /// The groups it tells about (Burrow's `group-allowlist`, `group-denylist`).
    pub groups: NameFilter,
    /// Open notices from this status up.
    pub threshold: NoticeThreshold,
    /// How often each group is looked at (Burrow's `interval`).
    pub interval: Duration,
    /// At most one open notice per group per this (Burrow's `send-interval`).
    pub repeat: Duration,
    /// A close notice when a group told about is OK again (`send-close`).
    pub send_close: bool,
    /// Values the templates read as `.Extras` (`extras`).
    pub extras: BTreeMap<String, String>,
    /// The open notice's template (Go's text/template, as Burrow's).
    pub template_open: String,
    /// The close notice's template (needed with `send_close`).
    pub template_close: Option<String>,
    /// Where it sends.
    pub sender: Sender,
}

/// Burrow's `threshold`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum NoticeThreshold {
    /// WARN and worse (Burrow's 2, its default).
    #[default]
    Warn,
    /// ERR (STOP, STALL, REWIND) only (Burrow's 3).
    Err,
}

/// Where a notifier sends.
#[derive(Debug, Clone)]
pub enum Sender {
    /// An HTTP request per notice.
    Http(HttpTarget),
    /// A mail per notice.
    Email(MailTarget),
}

/// Burrow's HTTP notifier.
#[derive(Clone)]
pub struct HttpTarget {
    /// The open notice's URL (a template itself, as Burrow's).
    pub url_open: String,
    /// The close notice's URL (needed with `send_close`).
    pub url_close: Option<String>,
    /// `POST` unless set.
    pub method_open: String,
    /// `POST` unless set (Burrow's default too).
    pub method_close: String,
    /// Extra request headers (`Content-Type` is `application/json` unless set).
    pub headers: Vec<(String, String)>,
    /// Basic authentication.
    pub basic_auth: Option<(String, String)>,
    /// The whole request's limit.
    pub timeout: Duration,
    /// A CA file to verify an `https://` endpoint with (Burrow's `extra-ca`).
    pub ca_file: Option<PathBuf>,
    /// Burrow's `noverify`.
    pub insecure_skip_verify: bool,
}

/// How mail reaches the SMTP server.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum MailTls {
    /// STARTTLS, required (submission, port 587).
    #[default]
    StartTls,
    /// TLS from the first byte (port 465).
    Tls,
    /// No TLS (a relay on the same host only).
    None,
}

/// Burrow's email notifier.
#[derive(Clone)]
pub struct MailTarget {
    /// The SMTP server's host.
    pub server: String,
    /// Its port.
    pub port: u16,
    /// TLS.
    pub tls: MailTls,
    /// User and password (SASL PLAIN or LOGIN, as the server offers).
    pub credentials: Option<(String, String)>,
    /// The sender.
    pub from: String,
    /// The recipients.
    pub to: Vec<String>,
    /// A CA file to verify the server with (`extra-ca`).
    pub ca_file: Option<PathBuf>,
    /// Burrow's `noverify`.
    pub insecure_skip_verify: bool,
    /// The whole exchange's limit.
    pub timeout: Duration,
}

// Passwords are never shown.
impl std::fmt::Debug for HttpTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpTarget")
            .field("url_open", &self.url_open)
            .field("url_close", &self.url_close)
            .field("methods", &(&self.method_open, &self.method_close))
            .field("headers", &self.headers.iter().map(|(k, _)| k).collect::<Vec<_>>())
            .field("user", &self.basic_auth.as_ref().map(|(u, _)| u))
            .field("timeout", &self.timeout)
            .field("ca_file", &self.ca_file)
            .field("insecure_skip_verify", &self.insecure_skip_verify)
            .finish_non_exhaustive()
    }
}

impl std::fmt::Debug for MailTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MailTarget")
            .field("server", &self.server)
            .field("port", &self.port)
            .field("tls", &self.tls)
            .field("user", &self.credentials.as_ref().map(|(u, _)| u))
            .field("from", &self.from)
            .field("to", &self.to)
            .field("ca_file", &self.ca_file)
            .field("insecure_skip_verify", &self.insecure_skip_verify)
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

/// Why a notifier's settings cannot work.
#[derive(Debug, thiserror::Error)]
#[error("invalid notifiers[{index}] ({name}).{field}: {why}")]
pub struct NotifierSettingError {
    /// Its place in the list.
    pub index: usize,
    /// Its name.
    pub name: String,
    /// The setting.
    pub field: &'static str,
    /// Why.
    pub why: String,
}

/// A notifier ready to run: its settings and parsed templates.
pub(crate) struct Notifier {
    pub(crate) settings: NotifierSettings,
    pub(crate) rules: NoticeRules,
    pub(crate) open: gotmpl::Template,
    pub(crate) close: Option<gotmpl::Template>,
    /// The HTTP notifier's URLs, parsed as templates.
    pub(crate) url_open: Option<gotmpl::Template>,
    pub(crate) url_close: Option<gotmpl::Template>,
}

/// Every notifier of `settings` ready, or the first that cannot work.
pub(crate) fn prepare_all(
    settings: &[NotifierSettings],
    clusters: &[String],
) -> Result<Vec<Notifier>, NotifierSettingError> {
    settings.iter().cloned().enumerate().map(|(i, n)| n.prepare(i, clusters)).collect()
}

impl NotifierSettings {
    /// Checks the settings (its cluster among `clusters`) and parses the
    /// templates.
    pub(crate) fn prepare(self, index: usize, clusters: &[String]) -> Result<Notifier, NotifierSettingError> {
        let fail =
            |field: &'static str, why: String| NotifierSettingError { index, name: self.name.clone(), field, why };
        let template = |field: &'static str, text: &str| {
            notice_data::parse(field, text).map_err(|e| fail(field, format!("the template does not parse: {e}")))
        };
        if self.name.is_empty() || !self.name.chars().all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c)) {
            return Err(fail("name", "letters, digits, -, _ and . only".into()));
        }
        if self.interval.is_zero() {
            return Err(fail("interval_seconds", "must be above 0".into()));
        }
        if let Some(c) = &self.cluster
            && !clusters.contains(c)
        {
            return Err(fail("cluster", format!("{c:?} is none of the clusters watched ({})", clusters.join(", "))));
        }
        let readable = |field: &'static str, file: &Option<PathBuf>| match file {
            Some(f) => std::fs::File::open(f).map(drop).map_err(|e| fail(field, format!("{}: {e}", f.display()))),
            None => Ok(()),
        };
        match &self.sender {
            Sender::Http(h) => {
                for (field, method) in [("http.method_open", &h.method_open), ("http.method_close", &h.method_close)] {
                    hyper::Method::from_bytes(method.as_bytes())
                        .map_err(|e| fail(field, format!("{method:?}: {e}")))?;
                }
                for (k, v) in &h.headers {
                    hyper::header::HeaderName::from_bytes(k.as_bytes())
                        .map_err(|e| fail("http.headers", format!("{k:?}: {e}")))?;
                    hyper::header::HeaderValue::from_str(v)
                        .map_err(|e| fail("http.headers", format!("the value of {k:?}: {e}")))?;
                }
                readable("http.ca_file", &h.ca_file)?;
            }
            Sender::Email(m) => {
                for address in std::iter::once(&m.from).chain(&m.to) {
                    address
                        .parse::<lettre::Address>()
                        .map_err(|e| fail("email", format!("{address:?} is not an address: {e}")))?;
                }
                readable("email.ca_file", &m.ca_file)?;
            }
        }
        let open = template("template_open", &self.template_open)?;
        let close = match (&self.template_close, self.send_close) {
            (Some(text), _) => Some(template("template_close", text)?),
            (None, true) => return Err(fail("template_close", "send_close needs a close template".into())),
            (None, false) => None,
        };
        let (url_open, url_close) = match &self.sender {
            Sender::Http(h) => {
                let url_close = match (&h.url_close, self.send_close) {
                    (Some(u), _) => Some(template("http.url_close", u)?),
                    (None, true) => return Err(fail("http.url_close", "send_close needs url_close".into())),
                    (None, false) => None,
                };
                (Some(template("http.url_open", &h.url_open)?), url_close)
            }
            Sender::Email(m) => {
                if m.to.is_empty() || m.from.is_empty() {
                    return Err(fail("email", "from and to are needed".into()));
                }
                (None, None)
            }
        };
        let threshold = match self.threshold {
            NoticeThreshold::Warn => BurrowStatus::Warn,
            NoticeThreshold::Err => BurrowStatus::Err,
        };
        let rules = NoticeRules { threshold, repeat: self.repeat, send_close: self.send_close };
        Ok(Notifier { settings: self, rules, open, close, url_open, url_close })
    }
}
