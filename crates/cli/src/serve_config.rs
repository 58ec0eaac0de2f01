//! `kshard serve` configuration: a YAML file (`--config`), then `KSHARD_…`
//! environment variables, then flags, each source overriding the one before.
//! Every setting is checked at start; an invalid one fails naming the setting.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result, bail};
use kshard_kafka::ClientSettings;
use kshard_lag::{Granularity, MonitorSettings, NameFilter};
use serde::Deserialize;

/// How to reach Kafka: the flags and environment variables every command that
/// talks to Kafka shares, over the `--config` file's settings (flags win).
#[derive(Debug, Clone, Default, clap::Args)]
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

/// Where and how to reach Kafka, and which topic holds the offsets.
#[derive(Debug, Clone)]
pub(crate) struct KafkaTarget {
    pub(crate) settings: ClientSettings,
    pub(crate) offsets_topic: String,
}

impl KafkaArgs {
    /// The client settings and offsets topic from the file (if any), the
    /// environment and flags.
    pub(crate) fn target(&self) -> Result<KafkaTarget> {
        let file = match &self.config {
            Some(path) => read_file(path)?,
            None => FileConfig::default(),
        };
        Ok(KafkaTarget { settings: kafka_settings(self, &file)?, offsets_topic: offsets_topic(self, &file)? })
    }
}

impl KafkaArgs {
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

fn offsets_topic(args: &KafkaArgs, file: &FileConfig) -> Result<String> {
    let topic = args
        .offsets_topic
        .clone()
        .or_else(|| file.offsets_topic.clone())
        .unwrap_or_else(|| kshard_kafka::CONSUMER_OFFSETS_TOPIC.to_owned());
    if !valid_topic(&topic) {
        bail!("invalid offsets_topic: {topic:?} is not a Kafka topic name");
    }
    Ok(topic)
}

/// True for a legal Kafka topic name.
fn valid_topic(topic: &str) -> bool {
    let legal = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-');
    !topic.is_empty() && topic.len() <= 249 && topic.chars().all(legal) && topic != "." && topic != ".."
}

/// Flags and environment variables of `kshard serve` (clap reads both; flags win).
#[derive(Debug, Clone, Default, clap::Args)]
pub(crate) struct ServeArgs {
    #[command(flatten)]
    pub(crate) kafka: KafkaArgs,
    /// Address to serve HTTP on (default 0.0.0.0:9308).
    #[arg(long, env = "KSHARD_LISTEN")]
    pub(crate) listen: Option<String>,
    /// Prefix of every metric name (default `kshard`; `kminion` gives kminion's names).
    #[arg(long, env = "KSHARD_METRICS_NAMESPACE")]
    pub(crate) metrics_namespace: Option<String>,
    /// Directory for kshard's local state.
    #[arg(long, env = "KSHARD_DATA_DIR")]
    pub(crate) data_dir: Option<PathBuf>,
    /// `offsets_topic` (read __consumer_offsets) or `admin_api` (ListGroups and
    /// OffsetFetch, for clusters whose __consumer_offsets cannot be read); default
    /// `offsets_topic`.
    #[arg(long, env = "KSHARD_SCRAPE_MODE")]
    pub(crate) scrape_mode: Option<String>,
    /// `partition` (default) or `topic`: which lag series to export.
    #[arg(long, env = "KSHARD_GRANULARITY")]
    pub(crate) granularity: Option<String>,
    /// Seconds between watermark refreshes (default 5).
    #[arg(long, env = "KSHARD_WATERMARK_INTERVAL_SECONDS")]
    pub(crate) watermark_interval_seconds: Option<f64>,
    /// `text` (default) or `json` logs; the level comes from KSHARD_LOG (default `info`).
    #[arg(long, env = "KSHARD_LOG_FORMAT")]
    pub(crate) log_format: Option<String>,
    /// With data_dir: the topic of the shards' recovery logs (default
    /// `kshard-lag-log-<offsets topic>`); each kshard deployment on one Kafka
    /// cluster needs its own.
    #[arg(long, env = "KSHARD_RECOVERY_LOG_TOPIC")]
    pub(crate) recovery_log_topic: Option<String>,
    /// etcd endpoints (`http://host:port`, comma-separated): several processes
    /// share the partitions' shards, each with a hot standby on every other,
    /// and each serves the whole cluster's lag. Needs data_dir.
    #[arg(long, env = "KSHARD_ETCD", value_delimiter = ',')]
    pub(crate) etcd: Vec<String>,
    /// The prefix of every key kept in etcd (default `/kshard/lag`): one per
    /// Kafka cluster monitored.
    #[arg(long, env = "KSHARD_ETCD_PREFIX")]
    pub(crate) etcd_prefix: Option<String>,
    /// This member's id (default: the host name), stable across restarts.
    #[arg(long, env = "KSHARD_MEMBER_ID")]
    pub(crate) member_id: Option<String>,
    /// This member's zone (default `local`).
    #[arg(long, env = "KSHARD_ZONE")]
    pub(crate) zone: Option<String>,
    /// Seconds after a crash before the member's primaries move (default 10).
    #[arg(long, env = "KSHARD_LEASE_TTL_SECONDS")]
    pub(crate) lease_ttl_seconds: Option<u64>,
}

/// The YAML file's shape. Unknown keys are errors, so a typo is not ignored.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileConfig {
    brokers: Option<String>,
    offsets_topic: Option<String>,
    reader: Option<String>,
    listen: Option<String>,
    metrics_namespace: Option<String>,
    data_dir: Option<PathBuf>,
    recovery_log_topic: Option<String>,
    scrape_mode: Option<ScrapeMode>,
    granularity: Option<GranularityName>,
    watermark_interval_seconds: Option<f64>,
    log_format: Option<LogFormat>,
    #[serde(default)]
    cluster: ClusterFile,
    #[serde(default)]
    status: StatusFile,
    #[serde(default)]
    history: HistoryFile,
    #[serde(default)]
    groups: Lists,
    #[serde(default)]
    topics: Lists,
    #[serde(default)]
    tls: Tls,
    sasl: Option<Sasl>,
    /// Extra librdkafka properties, applied last.
    #[serde(default)]
    kafka_properties: std::collections::BTreeMap<String, String>,
}

/// `status:` in the file: how consumer status is judged.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct StatusFile {
    window: Option<usize>,
    single_commit_stop_seconds: Option<i64>,
}

/// The status settings, checked.
fn status_settings(file: &StatusFile) -> Result<kshard_lag::StatusSettings> {
    let defaults = kshard_lag::StatusSettings::default();
    let window = file.window.unwrap_or(defaults.window);
    if !(2..=100).contains(&window) {
        bail!("invalid status.window: {window} (between 2 and 100 commits)");
    }
    let stop = file.single_commit_stop_seconds.unwrap_or(defaults.single_commit_stop_s);
    if !(1..=86_400).contains(&stop) {
        bail!("invalid status.single_commit_stop_seconds: {stop} (between 1 and 86400)");
    }
    Ok(kshard_lag::StatusSettings { window, recent_watermarks: window, single_commit_stop_s: stop })
}

/// `history:` in the file: each group's lag history for the page's chart.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct HistoryFile {
    window_seconds: Option<u32>,
    resolution_seconds: Option<u32>,
}

/// The history settings, checked: at most 1440 points (about 23 KB) a group.
fn history_settings(file: &HistoryFile) -> Result<kshard_lag::HistorySettings> {
    let defaults = kshard_lag::HistorySettings::default();
    let window = file.window_seconds.unwrap_or(defaults.window_s);
    if !(60..=86_400).contains(&window) {
        bail!("invalid history.window_seconds: {window} (between 60 and 86400)");
    }
    let resolution = file.resolution_seconds.unwrap_or(defaults.resolution_s);
    if !(1..=3600).contains(&resolution) || window / resolution > 1440 || resolution > window {
        bail!(
            "invalid history.resolution_seconds: {resolution} (between 1 and 3600, at most the window, \
             and at most 1440 points: window_seconds / resolution_seconds)"
        );
    }
    Ok(kshard_lag::HistorySettings { window_s: window, resolution_s: resolution })
}

/// `cluster:` in the file.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct ClusterFile {
    #[serde(default)]
    etcd: Vec<String>,
    etcd_prefix: Option<String>,
    member_id: Option<String>,
    zone: Option<String>,
    lease_ttl_seconds: Option<u64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct Lists {
    #[serde(default)]
    allow: Vec<String>,
    #[serde(default)]
    ignore: Vec<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct Tls {
    enabled: Option<bool>,
    ca_file: Option<PathBuf>,
    cert_file: Option<PathBuf>,
    key_file: Option<PathBuf>,
    #[serde(default)]
    insecure_skip_verify: bool,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct Sasl {
    mechanism: Option<String>,
    username: Option<String>,
    password: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum ScrapeMode {
    OffsetsTopic,
    AdminApi,
}

#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(rename_all = "snake_case")]
enum GranularityName {
    Partition,
    Topic,
}

/// How logs are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub(crate) enum LogFormat {
    #[default]
    Text,
    Json,
}

/// The resolved, checked configuration.
#[derive(Debug, Clone)]
pub(crate) struct ServeConfig {
    pub(crate) kafka: ClientSettings,
    pub(crate) offsets_topic: String,
    pub(crate) listen: SocketAddr,
    pub(crate) namespace: String,
    pub(crate) data_dir: Option<PathBuf>,
    pub(crate) scrape_mode: ScrapeMode,
    pub(crate) watermark_interval: Duration,
    pub(crate) monitor: MonitorSettings,
    pub(crate) log_format: LogFormat,
    pub(crate) cluster: Option<kshard_lag::ClusterOptions>,
    pub(crate) recovery_log_topic: Option<String>,
}

/// Parses a value the way the YAML file would, naming the setting on error.
fn parse_named<T: for<'de> Deserialize<'de>>(setting: &str, value: &str) -> Result<T> {
    serde_norway::from_str(value).with_context(|| format!("invalid {setting}: {value:?}"))
}

impl ServeConfig {
    /// Reads the file (if any) and applies the environment and flags over it.
    pub(crate) fn load(args: &ServeArgs) -> Result<Self> {
        let file = match &args.kafka.config {
            Some(path) => read_file(path)?,
            None => FileConfig::default(),
        };
        let kafka = kafka_settings(&args.kafka, &file)?;
        let offsets_topic = offsets_topic(&args.kafka, &file)?;
        let listen = args.listen.clone().or(file.listen).unwrap_or_else(|| "0.0.0.0:9308".into());
        let listen: SocketAddr = listen
            .parse()
            .with_context(|| format!("invalid listen: {listen:?} is not an address like 0.0.0.0:9308"))?;
        let namespace = args.metrics_namespace.clone().or(file.metrics_namespace).unwrap_or_else(|| "kshard".into());
        if namespace.is_empty()
            || !namespace.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
            || namespace.starts_with(|c: char| c.is_ascii_digit())
        {
            bail!("invalid metrics_namespace: {namespace:?} (letters, digits and _, not starting with a digit)");
        }
        let scrape_mode = match &args.scrape_mode {
            Some(v) => parse_named("scrape_mode (offsets_topic or admin_api)", v)?,
            None => file.scrape_mode.unwrap_or(ScrapeMode::OffsetsTopic),
        };
        let granularity = match &args.granularity {
            Some(v) => parse_named("granularity (partition or topic)", v)?,
            None => file.granularity.unwrap_or(GranularityName::Partition),
        };
        let interval = args.watermark_interval_seconds.or(file.watermark_interval_seconds).unwrap_or(5.0);
        if !(interval.is_finite() && (0.1..=3600.0).contains(&interval)) {
            bail!("invalid watermark_interval_seconds: {interval} (between 0.1 and 3600)");
        }
        let log_format = match &args.log_format {
            Some(v) => parse_named("log_format (text or json)", v)?,
            None => file.log_format.unwrap_or_default(),
        };
        let groups = NameFilter::new(&file.groups.allow, &file.groups.ignore)
            .context("invalid groups: a pattern is not a valid regular expression")?;
        let topics = NameFilter::new(&file.topics.allow, &file.topics.ignore)
            .context("invalid topics: a pattern is not a valid regular expression")?;

        let data_dir = args.data_dir.clone().or(file.data_dir);
        let status = status_settings(&file.status)?;
        let history = history_settings(&file.history)?;
        let cluster = cluster(args, &file.cluster, data_dir.is_some(), scrape_mode)?;
        let recovery_log_topic = args.recovery_log_topic.clone().or(file.recovery_log_topic);
        if let Some(topic) = &recovery_log_topic
            && !valid_topic(topic)
        {
            bail!("invalid recovery_log_topic: {topic:?} is not a Kafka topic name");
        }
        Ok(ServeConfig {
            kafka,
            offsets_topic,
            listen,
            namespace,
            data_dir,
            scrape_mode,
            watermark_interval: Duration::from_secs_f64(interval),
            monitor: MonitorSettings {
                groups,
                topics,
                granularity: match granularity {
                    GranularityName::Partition => Granularity::Partition,
                    GranularityName::Topic => Granularity::Topic,
                },
                status,
                history,
            },
            log_format,
            cluster,
            recovery_log_topic,
        })
    }
}

/// The cluster settings: flags and environment over the file's `cluster:`.
fn cluster(
    args: &ServeArgs,
    file: &ClusterFile,
    has_data_dir: bool,
    mode: ScrapeMode,
) -> Result<Option<kshard_lag::ClusterOptions>> {
    let etcd = if args.etcd.is_empty() { file.etcd.clone() } else { args.etcd.clone() };
    if etcd.is_empty() {
        return Ok(None);
    }
    if let Some(bad) = etcd.iter().find(|e| !(e.starts_with("http://") || e.starts_with("https://"))) {
        bail!("invalid etcd: {bad:?} is not an endpoint like http://127.0.0.1:2379");
    }
    if !has_data_dir {
        bail!("invalid etcd: a cluster keeps each partition's state in its shards, which need data_dir");
    }
    if mode == ScrapeMode::AdminApi {
        bail!("invalid etcd: scrape_mode admin_api keeps no state to share; use offsets_topic");
    }
    let prefix = args.etcd_prefix.clone().or(file.etcd_prefix.clone()).unwrap_or_else(|| "/kshard/lag".into());
    if !prefix.starts_with('/') || prefix.trim_end_matches('/').is_empty() {
        bail!("invalid etcd_prefix: {prefix:?} must start with / and name something");
    }
    let zone = args.zone.clone().or(file.zone.clone()).unwrap_or_else(|| "local".into());
    let member = crate::cluster::member_identity(args.member_id.as_deref().or(file.member_id.as_deref()), &zone)?;
    let ttl = args.lease_ttl_seconds.or(file.lease_ttl_seconds).unwrap_or(10);
    if !(2..=3600).contains(&ttl) {
        bail!("invalid lease_ttl_seconds: {ttl} (between 2 and 3600)");
    }
    Ok(Some(kshard_lag::ClusterOptions {
        etcd,
        prefix: prefix.trim_end_matches('/').to_owned(),
        member,
        zone,
        lease_ttl: Duration::from_secs(ttl),
        // Known once bound (see `serve`).
        endpoint: None,
    }))
}

/// Brokers, TLS, SASL and extra properties: flags and environment over the file.
fn kafka_settings(args: &KafkaArgs, file: &FileConfig) -> Result<ClientSettings> {
    let brokers = args
        .brokers
        .clone()
        .or_else(|| file.brokers.clone())
        .context("brokers is not set (--brokers, KSHARD_BROKERS or brokers: in the config file)")?;
    if brokers.trim().is_empty() {
        bail!("invalid brokers: empty");
    }
    let mut kafka = ClientSettings::new(brokers);
    let tls_enabled = args.tls_enabled.or(file.tls.enabled).unwrap_or(false);
    let ca_file = args.tls_ca_file.clone().or_else(|| file.tls.ca_file.clone());
    let sasl = file.sasl.clone().unwrap_or_default();
    let mechanism = args.sasl_mechanism.clone().or(sasl.mechanism);
    let username = args.sasl_username.clone().or(sasl.username);
    let password = args.sasl_password.clone().or(sasl.password);
    let protocol = match (tls_enabled, mechanism.is_some()) {
        (false, false) => "plaintext",
        (true, false) => "ssl",
        (false, true) => "sasl_plaintext",
        (true, true) => "sasl_ssl",
    };
    kafka.properties.push(("security.protocol".into(), protocol.into()));
    if let Some(mechanism) = mechanism {
        let upper = mechanism.to_ascii_uppercase();
        if !["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"].contains(&upper.as_str()) {
            bail!("invalid sasl.mechanism: {mechanism:?} (PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512)");
        }
        let username = username.context("sasl.username is required with sasl.mechanism")?;
        let password = password.context("sasl.password is required with sasl.mechanism")?;
        kafka.properties.push(("sasl.mechanism".into(), upper));
        kafka.properties.push(("sasl.username".into(), username));
        kafka.properties.push(("sasl.password".into(), password));
    }
    if tls_enabled {
        for (setting, path, property) in [
            ("tls.ca_file", ca_file, "ssl.ca.location"),
            ("tls.cert_file", file.tls.cert_file.clone(), "ssl.certificate.location"),
            ("tls.key_file", file.tls.key_file.clone(), "ssl.key.location"),
        ] {
            if let Some(path) = path {
                if !path.is_file() {
                    bail!("invalid {setting}: {} is not a readable file", path.display());
                }
                kafka.properties.push((property.into(), path.display().to_string()));
            }
        }
        if file.tls.insecure_skip_verify {
            kafka.properties.push(("enable.ssl.certificate.verification".into(), "false".into()));
        }
    }
    kafka.properties.extend(file.kafka_properties.clone());
    if let Some(reader) = args.reader.as_ref().or(file.reader.as_ref()) {
        kafka.reader = reader.parse().map_err(|e| anyhow::anyhow!("invalid reader: {e}"))?;
    }
    Ok(kafka)
}

fn read_file(path: &Path) -> Result<FileConfig> {
    let text = std::fs::read_to_string(path).with_context(|| format!("reading the config file {}", path.display()))?;
    serde_norway::from_str(&text).with_context(|| format!("invalid config file {}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(yaml: &str, args: ServeArgs) -> Result<ServeConfig> {
        let dir = std::env::temp_dir().join(format!("kshard-config-{}-{}", std::process::id(), yaml.len()));
        std::fs::create_dir_all(&dir)?;
        let path = dir.join("kshard.yaml");
        std::fs::write(&path, yaml)?;
        let result =
            ServeConfig::load(&ServeArgs { kafka: KafkaArgs { config: Some(path), ..args.kafka.clone() }, ..args });
        let _ = std::fs::remove_dir_all(&dir);
        result
    }

    fn err(yaml: &str) -> String {
        format!("{:#}", load(yaml, ServeArgs::default()).expect_err("invalid config"))
    }

    #[test]
    fn flags_override_the_file() {
        let c = load(
            "brokers: a:9092\nlisten: 127.0.0.1:1000\ngranularity: topic\ngroups:\n  allow: ['orders-.*']\n",
            ServeArgs {
                kafka: KafkaArgs { brokers: Some("b:9092".into()), ..Default::default() },
                metrics_namespace: Some("kminion".into()),
                ..Default::default()
            },
        )
        .expect("valid");
        assert_eq!(c.kafka.brokers, "b:9092");
        assert_eq!(c.listen.to_string(), "127.0.0.1:1000");
        assert_eq!(c.namespace, "kminion");
        assert_eq!(c.monitor.granularity, Granularity::Topic);
        assert!(c.monitor.groups.allows("orders-1") && !c.monitor.groups.allows("billing"));
    }

    #[test]
    fn invalid_settings_name_the_setting() {
        assert!(
            err("brokers: a:1\ngranularity: partitions\n").contains("granularity"),
            "{}",
            err("brokers: a:1\ngranularity: partitions\n")
        );
        assert!(err("brokers: a:1\nlisten: nowhere\n").contains("listen"));
        assert!(err("brokers: a:1\nmetrics_namespace: 'my-ns'\n").contains("metrics_namespace"));
        assert!(err("brokers: a:1\nbrokerz: b\n").contains("brokerz"));
        assert!(err("brokers: a:1\ngroups:\n  allow: ['(']\n").contains("groups"));
        assert!(
            err("brokers: a:1\nsasl:\n  mechanism: GSSAPI\n  username: u\n  password: p\n").contains("sasl.mechanism")
        );
        assert!(err("brokers: a:1\nsasl:\n  mechanism: PLAIN\n").contains("sasl.username"));
        assert!(err("brokers: a:1\ntls:\n  enabled: true\n  ca_file: /nonexistent/ca.pem\n").contains("tls.ca_file"));
        assert!(err("listen: 0.0.0.0:1\n").contains("brokers"));
        assert!(err("brokers: a:1\nwatermark_interval_seconds: 0\n").contains("watermark_interval_seconds"));
        assert!(err("brokers: a:1\nscrape_mode: zookeeper\n").contains("scrape_mode"));
        assert!(err("brokers: a:1\nreader: java\n").contains("invalid reader"));
        assert!(err("brokers: a:1\noffsets_topic: 'no spaces'\n").contains("offsets_topic"));
        assert!(err("brokers: a:1\nhistory:\n  window_seconds: 10\n").contains("history.window_seconds"));
        assert!(err("brokers: a:1\nhistory:\n  resolution_seconds: 1\n").contains("history.resolution_seconds"));
        assert!(err("brokers: a:1\nhistory:\n  resolution: 1\n").contains("resolution"));
    }

    #[test]
    fn history_settings_default_to_an_hour_by_the_minute() {
        let c = load("brokers: a:1\n", ServeArgs::default()).expect("valid");
        assert_eq!(c.monitor.history, kshard_lag::HistorySettings { window_s: 3600, resolution_s: 60 });
        let c = load("brokers: a:1\nhistory:\n  window_seconds: 600\n  resolution_seconds: 5\n", ServeArgs::default())
            .expect("valid");
        assert_eq!(c.monitor.history.points(), 120);
    }

    #[test]
    fn sasl_and_tls_become_client_properties() {
        let c = load(
            "brokers: a:1\nsasl:\n  mechanism: scram-sha-512\n  username: u\n  password: p\ntls:\n  enabled: true\n",
            ServeArgs::default(),
        )
        .expect("valid");
        let get = |k: &str| c.kafka.properties.iter().find(|(p, _)| p == k).map(|(_, v)| v.as_str());
        assert_eq!(get("security.protocol"), Some("sasl_ssl"));
        assert_eq!(get("sasl.mechanism"), Some("SCRAM-SHA-512"));
        assert_eq!(get("sasl.username"), Some("u"));
    }
}
