//! Debian's Prometheus and Alertmanager, started by `scripts/prometheus.sh`
//! on 127.0.0.1 with a configuration of the test's own, and a
//! [`WebhookReceiver`] that Alertmanager (or any notifier) posts to.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use serde_json::Value;

use std::path::PathBuf;

use super::{Started, http_get, skipped, tool};

/// Why Prometheus gave no answer (or what it said instead), or why a
/// dashboard's query could not be made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueryError(pub String);

impl From<String> for QueryError {
    fn from(s: String) -> Self {
        QueryError(s)
    }
}

impl std::fmt::Display for QueryError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for QueryError {}

/// A Prometheus of the test's own; stopped by PID on drop.
#[derive(Debug)]
pub struct Prometheus {
    address: String,
    _started: Started,
}

impl Prometheus {
    /// Starts Prometheus with `config` (the YAML of `prometheus.yml`: its
    /// scrape targets, rule files and Alertmanagers).
    pub fn start(config: &str) -> Self {
        let (started, settings) = Started::start_configured("prometheus", "start", config);
        let address = settings.get("KSHARD_PROMETHEUS").cloned().expect("prometheus.sh prints KSHARD_PROMETHEUS=");
        Prometheus { address, _started: started }
    }

    /// `127.0.0.1:PORT`.
    pub fn address(&self) -> &str {
        &self.address
    }

    /// `GET path` of its HTTP API: the `data` of a `success` answer, or what
    /// Prometheus said.
    pub fn api(&self, path: &str) -> Result<Value, QueryError> {
        let (status, body) = http_get(&self.address, path).map_err(|e| format!("GET {path}: {e}"))?;
        let answer: Value =
            serde_json::from_str(&body).map_err(|e| format!("GET {path}: {status}, not JSON ({e}): {body:.200}"))?;
        if answer["status"] != "success" {
            return Err(format!("GET {path}: {status} {}: {}", answer["errorType"], answer["error"]).into());
        }
        Ok(answer["data"].clone())
    }

    /// The instant vector (or scalar) `expr` evaluates to now: its samples.
    pub fn query(&self, expr: &str) -> Result<Vec<Value>, QueryError> {
        let data = self.api(&format!("/api/v1/query?query={}", url_encoded(expr)))?;
        Ok(samples(&data))
    }

    /// `expr` over the last `seconds` at `step_seconds`, as Grafana asks a
    /// panel's query: each series' values.
    pub fn query_range(&self, expr: &str, seconds: u64, step_seconds: u64) -> Result<Vec<Value>, QueryError> {
        let end = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_secs();
        let path = format!(
            "/api/v1/query_range?query={}&start={}&end={end}&step={step_seconds}",
            url_encoded(expr),
            end.saturating_sub(seconds)
        );
        Ok(samples(&self.api(&path)?))
    }

    /// The values of `label` over the series `matcher` selects (all series
    /// without one), as Grafana's `label_values` asks them.
    pub fn label_values(&self, label: &str, matcher: Option<&str>) -> Result<Vec<String>, QueryError> {
        let mut path = format!("/api/v1/label/{}/values", url_encoded(label));
        if let Some(m) = matcher {
            path.push_str(&format!("?match[]={}", url_encoded(m)));
        }
        let data = self.api(&path)?;
        Ok(data.as_array().into_iter().flatten().filter_map(|v| v.as_str().map(str::to_owned)).collect())
    }

    /// The alerts its rules hold now (pending or firing), each its labels
    /// and state.
    pub fn alerts(&self) -> Result<Vec<Value>, QueryError> {
        let data = self.api("/api/v1/alerts")?;
        Ok(data["alerts"].as_array().cloned().unwrap_or_default())
    }

    /// The health of every target: `(job, health, last error)`.
    pub fn targets(&self) -> Result<Vec<(String, String, String)>, QueryError> {
        let data = self.api("/api/v1/targets?state=active")?;
        let targets = data["activeTargets"].as_array().cloned().unwrap_or_default();
        Ok(targets
            .iter()
            .map(|t| {
                let s = |v: &Value| v.as_str().unwrap_or_default().to_owned();
                (s(&t["labels"]["job"]), s(&t["health"]), s(&t["lastError"]))
            })
            .collect())
    }
}

fn samples(data: &Value) -> Vec<Value> {
    match &data["result"] {
        Value::Array(a) => a.clone(),
        Value::Null => Vec::new(),
        scalar => vec![scalar.clone()],
    }
}

/// `s` percent-encoded for a URL's query (every byte but the unreserved).
pub fn url_encoded(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// An Alertmanager of the test's own, alone (no gossip); stopped by PID on
/// drop.
#[derive(Debug)]
pub struct Alertmanager {
    address: String,
    _started: Started,
}

impl Alertmanager {
    /// Starts Alertmanager with `config` (the YAML of `alertmanager.yml`).
    pub fn start(config: &str) -> Self {
        let (started, settings) = Started::start_configured("prometheus", "start-alertmanager", config);
        let address = settings.get("KSHARD_ALERTMANAGER").cloned().expect("prometheus.sh prints KSHARD_ALERTMANAGER=");
        Alertmanager { address, _started: started }
    }

    /// `127.0.0.1:PORT`.
    pub fn address(&self) -> &str {
        &self.address
    }
}

/// One HTTP request a [`WebhookReceiver`] was sent.
#[derive(Debug, Clone)]
pub struct Delivery {
    /// `POST /path`.
    pub request_line: String,
    /// Header names lowercased.
    pub headers: BTreeMap<String, String>,
    /// What was posted.
    pub body: String,
}

/// An HTTP server on 127.0.0.1 that answers every request `200` and keeps
/// it: a notifier's receiver. Runs until dropped (a thread per connection).
#[derive(Debug)]
pub struct WebhookReceiver {
    address: String,
    received: Arc<Mutex<Vec<Delivery>>>,
}

impl Default for WebhookReceiver {
    fn default() -> Self {
        Self::start()
    }
}

impl WebhookReceiver {
    /// Listens on a free port.
    pub fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").expect("a port for the receiver");
        let address = listener.local_addr().expect("its address").to_string();
        let received = Arc::new(Mutex::new(Vec::new()));
        let kept = Arc::clone(&received);
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let kept = Arc::clone(&kept);
                std::thread::spawn(move || {
                    if let Some(d) = read_request(stream) {
                        kept.lock().unwrap_or_else(PoisonError::into_inner).push(d);
                    }
                });
            }
        });
        WebhookReceiver { address, received }
    }

    /// `http://127.0.0.1:PORT` followed by `path`.
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.address)
    }

    /// Everything received so far, in order.
    pub fn received(&self) -> Vec<Delivery> {
        self.received.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }
}

/// Reads one request (its body by `Content-Length`, at most 16 MiB) and
/// answers `200 OK`.
fn read_request(mut stream: TcpStream) -> Option<Delivery> {
    stream.set_read_timeout(Some(Duration::from_secs(30))).ok()?;
    let mut reader = BufReader::new(stream.try_clone().ok()?);
    let mut request_line = String::new();
    reader.read_line(&mut request_line).ok()?;
    let mut headers = BTreeMap::new();
    loop {
        let mut line = String::new();
        reader.read_line(&mut line).ok()?;
        let line = line.trim_end();
        if line.is_empty() {
            break;
        }
        if let Some((k, v)) = line.split_once(':') {
            headers.insert(k.trim().to_ascii_lowercase(), v.trim().to_owned());
        }
    }
    let length: u64 = headers.get("content-length").and_then(|v| v.parse().ok()).unwrap_or(0).min(16 << 20);
    let mut body = String::new();
    reader.by_ref().take(length).read_to_string(&mut body).ok()?;
    stream.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n").ok()?;
    Some(Delivery { request_line: request_line.trim_end().to_owned(), headers, body })
}

/// Prometheus's `promtool` (scripts/install.sh takes it out of Debian's
/// prometheus package).
pub fn promtool() -> Option<PathBuf> {
    tool("promtool", "--version")
}

/// `promtool check metrics` of an exposition (`what` names it): `Err` with
/// what promtool says when the text is not valid Prometheus text (lint
/// findings such as missing units are not errors). Without promtool the
/// check is [`skipped`]: said, or a failure under `KSHARD_NO_SKIP` — never
/// an `Ok` a caller could take for a check.
pub fn promtool_check_metrics(text: &str, what: &str) -> Result<(), PromtoolError> {
    use std::io::Write;
    let Some(promtool) = promtool() else {
        skipped(&format!("promtool is not installed: {what} was not checked by it"));
        return Ok(());
    };
    let mut child = std::process::Command::new(promtool)
        .args(["check", "metrics"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .map_err(PromtoolError::Run)?;
    child.stdin.take().map(|mut stdin| stdin.write_all(text.as_bytes())).transpose().map_err(PromtoolError::Run)?;
    let out = child.wait_with_output().map_err(PromtoolError::Run)?;
    let said = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    // Exit 3: lint findings only (no HELP, a unit not in the name, …); 1: the
    // text does not parse.
    match out.status.code() {
        Some(0 | 3) => Ok(()),
        _ => Err(PromtoolError::Refused(said)),
    }
}

/// Why [`promtool_check_metrics`] failed.
#[derive(Debug)]
pub enum PromtoolError {
    /// promtool could not be run, or not given the text.
    Run(std::io::Error),
    /// The text is not valid Prometheus text: what promtool said.
    Refused(String),
}

impl std::fmt::Display for PromtoolError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PromtoolError::Run(e) => write!(f, "running promtool: {e}"),
            PromtoolError::Refused(said) => write!(f, "promtool refused the text: {said}"),
        }
    }
}

impl std::error::Error for PromtoolError {}
