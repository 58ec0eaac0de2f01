//! How to reach Kafka, as every command that talks to it is told: the
//! connection flags and `KSHARD_…` variables they share ([`KafkaArgs`]),
//! over the `--config` file's `brokers`, `tls`, `sasl`, `kafka_properties`,
//! `reader` and `offsets_topic`, checked and turned into
//! [`ClientSettings`] with a typed [`Security`]. The file's shape is
//! `settings_file.rs`'s; the flags go over it as a layer of its keys.

use std::path::PathBuf;

use anyhow::{Context, Result, bail};
use kshard_kafka::{Client, ClientSettings, Mechanism, Protocol, Sasl, Security};

use crate::settings_file::{FileConfig, Layer, read_file};

/// How to reach Kafka: the flags and environment variables every command that
/// talks to Kafka shares, over the `--config` file's settings (flags win).
#[derive(Clone, Default, clap::Args)]
pub(crate) struct KafkaArgs {
    /// YAML configuration file; flags and KSHARD_… variables override it.
    #[arg(long, env = "KSHARD_CONFIG")]
    pub(crate) config: Option<PathBuf>,
    /// Kafka bootstrap servers, `host:port[,host:port…]`.
    #[arg(long, env = "KSHARD_BROKERS")]
    pub(crate) brokers: Option<String>,
    /// SASL mechanism: PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512.
    #[arg(long, env = "KSHARD_SASL_MECHANISM")]
    pub(crate) sasl_mechanism: Option<String>,
    /// SASL user name.
    #[arg(long, env = "KSHARD_SASL_USERNAME")]
    pub(crate) sasl_username: Option<String>,
    /// SASL password (prefer the environment variable to the flag).
    #[arg(long, env = "KSHARD_SASL_PASSWORD", hide_env_values = true)]
    pub(crate) sasl_password: Option<String>,
    /// Use TLS to reach the brokers.
    #[arg(long, env = "KSHARD_TLS_ENABLED")]
    pub(crate) tls_enabled: Option<bool>,
    /// CA certificate file (PEM) to verify the brokers with.
    #[arg(long, env = "KSHARD_TLS_CA_FILE")]
    pub(crate) tls_ca_file: Option<PathBuf>,
    /// The topic holding committed offsets (default `__consumer_offsets`); another
    /// topic of the same layout for tests and synthetic data.
    #[arg(long, env = "KSHARD_OFFSETS_TOPIC")]
    pub(crate) offsets_topic: Option<String>,
    /// Which client reads partitions: `kshard` (its own Fetch requests, one
    /// connection per broker; the default) or `librdkafka`.
    #[arg(long, env = "KSHARD_READER")]
    pub(crate) reader: Option<String>,
}

impl std::fmt::Debug for KafkaArgs {
    /// Everything but the password.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KafkaArgs")
            .field("config", &self.config)
            .field("brokers", &self.brokers)
            .field("sasl_mechanism", &self.sasl_mechanism)
            .field("sasl_username", &self.sasl_username)
            .field("sasl_password", &self.sasl_password.as_ref().map(|_| "…"))
            .field("tls_enabled", &self.tls_enabled)
            .field("tls_ca_file", &self.tls_ca_file)
            .field("offsets_topic", &self.offsets_topic)
            .field("reader", &self.reader)
            .finish()
    }
}

/// Where and how to reach Kafka, and which topic holds the offsets.
#[derive(Debug, Clone)]
pub(crate) struct KafkaTarget {
    /// One handle for every client the command makes.
    pub(crate) kafka: Client,
    pub(crate) offsets_topic: String,
}

impl KafkaArgs {
    /// The client settings and offsets topic from the file (if any), with
    /// the environment and flags over it.
    pub(crate) fn target(&self) -> Result<KafkaTarget> {
        let mut flags = Layer::default();
        self.put(&mut flags);
        let (file, _) = crate::settings_file::with_flags(read_file(self.config.as_deref())?, flags)?;
        Ok(KafkaTarget { kafka: Client::new(kafka_settings(&file)?), offsets_topic: offsets_topic(&file) })
    }

    /// Puts these flags in `layer` under the file's keys.
    pub(crate) fn put(&self, layer: &mut Layer) {
        layer.set("brokers", self.brokers.clone());
        layer.set("sasl.mechanism", self.sasl_mechanism.clone());
        layer.set("sasl.username", self.sasl_username.clone());
        layer.set("sasl.password", self.sasl_password.clone());
        layer.set("tls.enabled", self.tls_enabled);
        layer.set_path("tls.ca_file", self.tls_ca_file.as_deref());
        layer.set("offsets_topic", self.offsets_topic.clone());
        layer.set("reader", self.reader.clone());
    }

    /// Hands these settings to a child `kshard` process: as flags, except the
    /// password, which goes in the environment (never on a command line that
    /// `ps` shows).
    pub(crate) fn pass_to(&self, child: &mut std::process::Command) {
        let mut flag = |name: &str, value: Option<String>| {
            if let Some(v) = value {
                child.arg(name).arg(v);
            }
        };
        flag("--config", self.config.as_ref().map(|p| p.display().to_string()));
        flag("--brokers", self.brokers.clone());
        flag("--sasl-mechanism", self.sasl_mechanism.clone());
        flag("--sasl-username", self.sasl_username.clone());
        flag("--tls-enabled", self.tls_enabled.map(|b| b.to_string()));
        flag("--tls-ca-file", self.tls_ca_file.as_ref().map(|p| p.display().to_string()));
        flag("--offsets-topic", self.offsets_topic.clone());
        flag("--reader", self.reader.clone());
        if let Some(password) = &self.sasl_password {
            child.env("KSHARD_SASL_PASSWORD", password);
        }
    }
}

/// The offsets topic the settings name (checked as they were read).
pub(crate) fn offsets_topic(file: &FileConfig) -> String {
    file.offsets_topic.as_deref().unwrap_or(kshard_kafka::CONSUMER_OFFSETS_TOPIC).to_owned()
}

/// Brokers, TLS, SASL and extra properties, checked.
pub(crate) fn kafka_settings(file: &FileConfig) -> Result<ClientSettings> {
    let brokers = file
        .brokers
        .clone()
        .context("brokers is not set (--brokers, KSHARD_BROKERS or brokers: in the config file)")?;
    if brokers.trim().is_empty() {
        bail!("invalid brokers: empty");
    }
    let mut kafka = ClientSettings::new(brokers);
    kafka.security = security(file)?;
    kafka.properties.extend(file.kafka_properties.0.clone());
    if let Some(reader) = &file.reader {
        kafka.reader = reader.parse().map_err(|e| anyhow::anyhow!("invalid reader: {e}"))?;
    }
    Ok(kafka)
}

/// TLS and SASL, checked.
fn security(file: &FileConfig) -> Result<Security> {
    let tls_enabled = file.tls.enabled.unwrap_or(false);
    let sasl = file.sasl.clone();
    let (mechanism, username, password) = (sasl.mechanism, sasl.username, sasl.password);
    let mut security = Security { protocol: Protocol::new(tls_enabled, mechanism.is_some()), ..Security::default() };
    if let Some(mechanism) = mechanism {
        let Ok(parsed) = mechanism.parse::<Mechanism>() else {
            bail!("invalid sasl.mechanism: {mechanism:?} (PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512)");
        };
        let username = username.context("sasl.username is required with sasl.mechanism")?;
        let password = password.context("sasl.password is required with sasl.mechanism")?;
        security.sasl = Some(Sasl { mechanism: parsed, username, password });
    }
    if tls_enabled {
        let tls = &mut security.tls;
        for (setting, path, field) in [
            ("tls.ca_file", file.tls.ca_file.clone(), &mut tls.ca),
            ("tls.cert_file", file.tls.cert_file.clone(), &mut tls.certificate),
            ("tls.key_file", file.tls.key_file.clone(), &mut tls.key),
        ] {
            if let Some(path) = path {
                if !path.is_file() {
                    bail!("invalid {setting}: {} is not a readable file", path.display());
                }
                *field = Some(path);
            }
        }
        tls.verify_certificate = !file.tls.insecure_skip_verify.unwrap_or(false);
    }
    Ok(security)
}

#[cfg(test)]
mod secret_tests {
    use super::*;

    #[test]
    fn debug_shows_no_secret() {
        let args = KafkaArgs { sasl_password: Some("s3cret-1".into()), ..Default::default() };
        let text = format!("{args:?}");
        assert!(!text.contains("s3cret"), "{text}");
    }
}
