//! Test support: the real broker, started by the project's own script when the
//! environment does not name one.

use std::path::PathBuf;
use std::process::Command;
use std::time::{SystemTime, UNIX_EPOCH};

use kshard_kafka::ClientSettings;

/// A broker to test against; stops it on drop when this process started it.
pub(crate) struct Broker {
    brokers: String,
    /// The state directory of a broker this test started (stopped on drop).
    started: Option<PathBuf>,
}

fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

impl Broker {
    /// Uses `KSHARD_BROKERS`, or starts a broker with `scripts/broker.sh`.
    pub(crate) fn from_env_or_start() -> Self {
        if let Ok(brokers) = std::env::var("KSHARD_BROKERS") {
            return Broker { brokers, started: None };
        }
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

    /// Client settings for this broker.
    pub(crate) fn settings(&self) -> ClientSettings {
        ClientSettings::new(self.brokers.clone())
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
pub(crate) fn unique_name(prefix: &str) -> String {
    let nanos = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0);
    format!("{prefix}-{}-{nanos}", std::process::id())
}
