//! `kshard-testkit`: test support shared by the crates' integration tests.
//!
//! [`Broker`] is the real broker: the one `KSHARD_BROKERS` names (as
//! `scripts/test.sh` sets it), or one started with `scripts/broker.sh` on
//! 127.0.0.1 in a fresh state directory and stopped by PID when dropped. It is
//! not a fake: integration tests run against the real thing.

use std::path::PathBuf;
use std::process::Command;
use std::time::{SystemTime, UNIX_EPOCH};

/// A broker to test against; stops it on drop when this process started it.
#[derive(Debug)]
pub struct Broker {
    brokers: String,
    /// The state directory of a broker this test started (stopped on drop).
    started: Option<PathBuf>,
}

fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

impl Broker {
    /// Uses `KSHARD_BROKERS`, or starts a broker with `scripts/broker.sh`.
    pub fn from_env_or_start() -> Self {
        if let Ok(brokers) = std::env::var("KSHARD_BROKERS") {
            return Broker { brokers, started: None };
        }
        Self::start_private()
    }

    /// Always starts a broker of this test's own, for tests that may leave a
    /// broker unusable and must not take other tests down with it.
    pub fn start_private() -> Self {
        let state = std::env::temp_dir().join(unique_name("kshard-test-broker"));
        let out = Command::new(repo_root().join("scripts/broker.sh"))
            .arg("start")
            .env("KSHARD_STATE_DIR", &state)
            .output()
            .expect("running scripts/broker.sh (install the broker with scripts/install.sh)");
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "scripts/broker.sh start failed:\n{}", String::from_utf8_lossy(&out.stderr));
        let brokers = stdout
            .lines()
            .find_map(|l| l.strip_prefix("KSHARD_BROKERS="))
            .expect("broker.sh prints KSHARD_BROKERS=")
            .to_owned();
        Broker { brokers, started: Some(state) }
    }

    /// The bootstrap address, `127.0.0.1:PORT`.
    pub fn brokers(&self) -> &str {
        &self.brokers
    }
}

impl Drop for Broker {
    fn drop(&mut self) {
        if let Some(state) = &self.started {
            let _ =
                Command::new(repo_root().join("scripts/broker.sh")).arg("stop").env("KSHARD_STATE_DIR", state).status();
            let _ = std::fs::remove_dir_all(state);
        }
    }
}

/// A name no other test run uses.
pub fn unique_name(prefix: &str) -> String {
    let nanos = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0);
    format!("{prefix}-{}-{nanos}", std::process::id())
}

/// A plain HTTP/1.0 GET to `addr` (e.g. `127.0.0.1:9308`): the status code and
/// body. Enough for tests of kshard's own endpoints; no client library needed.
pub fn http_get(addr: &str, path: &str) -> std::io::Result<(u16, String)> {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(addr)?;
    stream.set_read_timeout(Some(std::time::Duration::from_secs(30)))?;
    write!(stream, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n")?;
    let mut response = String::new();
    stream.read_to_string(&mut response)?;
    let status = response
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| std::io::Error::other(format!("not an HTTP response: {response:.80}")))?;
    let body = response.split_once("\r\n\r\n").map(|(_, b)| b.to_owned()).unwrap_or_default();
    Ok((status, body))
}

/// Parses Prometheus text into `series → value`, where a series is the metric
/// name with its labels exactly as rendered (`name{a="1",b="2"}`).
pub fn parse_metrics(text: &str) -> std::collections::BTreeMap<String, f64> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .filter_map(|l| {
            let (series, value) = l.rsplit_once(' ')?;
            Some((series.to_owned(), value.parse().ok()?))
        })
        .collect()
}
