//! `kshard serve` configuration: a YAML file (`--config`), then `KSHARD_…`
//! environment variables, then flags, each source overriding the one before.
//! Every setting is checked at start; an invalid one fails naming the setting.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result, bail};
use kshard_kafka::ClientSettings;

pub(crate) use crate::connection::{KafkaArgs, KafkaTarget};
use crate::connection::{SaslFile, TlsFile, kafka_settings, offsets_topic, valid_topic};
use kshard_lag::service::ScrapeMode;
use kshard_lag::{Granularity, MonitorSettings, NameFilter};
use serde::Deserialize;

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
    /// At most this many group-partitions get per-partition series (those
    /// with the most lag in seconds, then records); roll-ups cover them all.
    #[arg(long, env = "KSHARD_MAX_PARTITION_SERIES")]
    pub(crate) max_partition_series: Option<usize>,
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
    /// A web configuration file in the Prometheus exporter-toolkit format:
    /// TLS (`tls_server_config`), users (`basic_auth_users`, bcrypt hashes),
    /// response headers and a rate limit, for every HTTP endpoint.
    #[arg(long, env = "KSHARD_WEB_CONFIG_FILE")]
    pub(crate) web_config_file: Option<PathBuf>,
}

/// The YAML file's shape. Unknown keys are errors, so a typo is not ignored.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct FileConfig {
    pub(crate) brokers: Option<String>,
    pub(crate) offsets_topic: Option<String>,
    pub(crate) reader: Option<String>,
    listen: Option<String>,
    metrics_namespace: Option<String>,
    data_dir: Option<PathBuf>,
    web_config_file: Option<PathBuf>,
    recovery_log_topic: Option<String>,
    scrape_mode: Option<ScrapeMode>,
    granularity: Option<Granularity>,
    motion_granularity: Option<Granularity>,
    max_partition_series: Option<usize>,
    watermark_interval_seconds: Option<f64>,
    log_format: Option<LogFormat>,
    #[serde(default)]
    cluster: ClusterFile,
    #[serde(default)]
    status: StatusFile,
    #[serde(default)]
    history: HistoryFile,
    #[serde(default)]
    share_groups: ShareGroupsFile,
    #[serde(default)]
    groups: Lists,
    #[serde(default)]
    topics: Lists,
    #[serde(default)]
    pub(crate) tls: TlsFile,
    pub(crate) sasl: Option<SaslFile>,
    /// Extra librdkafka properties, applied last.
    #[serde(default)]
    pub(crate) kafka_properties: std::collections::BTreeMap<String, String>,
}

/// `status:` in the file: how consumer status is judged.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct StatusFile {
    window: Option<usize>,
    single_commit_stop_seconds: Option<i64>,
}

/// `share_groups:` in the file: whether `__share_group_state` is read, and
/// the delivery limit poison messages are counted at.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct ShareGroupsFile {
    enabled: Option<bool>,
    delivery_count_limit: Option<i16>,
}

/// The delivery count limit, checked against Kafka's range for it.
fn delivery_count_limit(file: &ShareGroupsFile) -> Result<Option<i16>> {
    match file.delivery_count_limit {
        Some(n) if !(2..=10).contains(&n) => {
            bail!("invalid share_groups.delivery_count_limit: {n} (Kafka allows 2 to 10; its default is 5)")
        }
        limit => Ok(limit),
    }
}

/// The status settings, checked.
fn status_settings(file: &StatusFile) -> Result<kshard_lag::StatusSettings> {
    let defaults = kshard_lag::StatusSettings::default();
    let window = file.window.unwrap_or(defaults.window);
    let stop = file.single_commit_stop_seconds.unwrap_or(defaults.single_commit_stop_s);
    Ok(kshard_lag::StatusSettings::checked(window, stop)?)
}

/// `history:` in the file: each group's lag history for the page's chart.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct HistoryFile {
    window_seconds: Option<u32>,
    resolution_seconds: Option<u32>,
}

/// The history settings, checked.
fn history_settings(file: &HistoryFile) -> Result<kshard_lag::HistorySettings> {
    let defaults = kshard_lag::HistorySettings::default();
    let window = file.window_seconds.unwrap_or(defaults.window_s);
    let resolution = file.resolution_seconds.unwrap_or(defaults.resolution_s);
    Ok(kshard_lag::HistorySettings::checked(window, resolution)?)
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
    /// Read `__share_group_state` (offsets-topic mode).
    pub(crate) share_groups: bool,
    /// The exporter-toolkit web configuration file.
    pub(crate) web_config: Option<PathBuf>,
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
            None => file.granularity.unwrap_or(Granularity::Partition),
        };
        let max_partition_series = args.max_partition_series.or(file.max_partition_series);
        if max_partition_series == Some(0) {
            bail!("invalid max_partition_series: 0 (at least 1; for no per-partition series, granularity: topic)");
        }
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
        if let Some(topic) = &recovery_log_topic
            && !valid_topic(&kshard_lag::share_recovery_log_topic(topic))
        {
            bail!(
                "invalid recovery_log_topic: {topic:?} leaves no room for the share state's log beside it ({:?} is not a Kafka topic name)",
                kshard_lag::share_recovery_log_topic(topic)
            );
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
                granularity,
                motion_granularity: file.motion_granularity.unwrap_or(granularity),
                status,
                history,
                max_partition_series,
                share_delivery_count_limit: delivery_count_limit(&file.share_groups)?,
            },
            share_groups: file.share_groups.enabled.unwrap_or(true),
            web_config: args.web_config_file.clone().or(file.web_config_file),
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

pub(crate) fn read_file(path: &Path) -> Result<FileConfig> {
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
        assert_eq!(c.monitor.motion_granularity, Granularity::Topic, "follows granularity");
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
        assert!(err("brokers: a:1\nmax_partition_series: 0\n").contains("max_partition_series"));
        assert!(err("brokers: a:1\nmotion_granularity: group\n").contains("motion_granularity"));
        let long = format!("brokers: a:1\nrecovery_log_topic: {}\n", "l".repeat(240));
        assert!(err(&long).contains("share state's log"), "{}", err(&long));
        let limit = err("brokers: a:1\nshare_groups:\n  delivery_count_limit: 11\n");
        assert!(limit.contains("share_groups.delivery_count_limit: 11"), "{limit}");
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
        let rendered = c.kafka.security.properties();
        let get = |k: &str| rendered.iter().find(|(p, _)| *p == k).map(|(_, v)| v.as_str());
        assert_eq!(get("security.protocol"), Some("sasl_ssl"));
        assert_eq!(get("sasl.mechanism"), Some("SCRAM-SHA-512"));
        assert_eq!(get("sasl.username"), Some("u"));
    }
}
