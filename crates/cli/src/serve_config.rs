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
    /// Whose metric names /metrics uses: kshard (default), kminion,
    /// kafka_exporter, kafka_lag_exporter or burrow.
    #[arg(long, env = "KSHARD_METRICS_PROFILE")]
    pub(crate) metrics_profile: Option<String>,
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
    /// TLS and a user for etcd.
    #[command(flatten)]
    pub(crate) etcd_access: crate::etcd_access::EtcdAccessArgs,
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
    metrics_profile: Option<String>,
    cluster_label: Option<String>,
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
    cluster_info: ClusterInfoFile,
    #[serde(default)]
    end_to_end: crate::serve_end_to_end::EndToEndFile,
    #[serde(default)]
    otlp: crate::serve_otlp::OtlpFile,
    #[serde(default)]
    groups: Lists,
    #[serde(default)]
    topics: Lists,
    #[serde(default)]
    pub(crate) tls: TlsFile,
    pub(crate) sasl: Option<SaslFile>,
    /// Extra librdkafka properties, applied last.
    #[serde(default)]
    pub(crate) kafka_properties: crate::connection::Properties,
    /// `clusters:` as written (read by `serve_clusters.rs`).
    #[serde(default, rename = "clusters")]
    _clusters: Option<serde::de::IgnoredAny>,
    /// `clusters:`, each entry merged over the top level.
    #[serde(skip)]
    pub(crate) clusters: Vec<NamedCluster>,
}

/// One entry of `clusters:`.
#[derive(Debug, Default)]
pub(crate) struct NamedCluster {
    pub(crate) name: String,
    pub(crate) file: FileConfig,
    /// The settings the entry sets itself (paths like `tls.ca_file`): they
    /// win over flags and environment variables, which are the top level's.
    pub(crate) own: std::collections::BTreeSet<String>,
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

/// `cluster_info:` in the file: kminion's cluster, broker and topic families.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct ClusterInfoFile {
    enabled: Option<bool>,
    interval_seconds: Option<f64>,
    topic_config_keys: Option<Vec<String>>,
    log_dirs: Option<bool>,
}

/// The cluster-info settings, checked.
fn cluster_info_settings(file: &ClusterInfoFile) -> Result<kshard_lag::ClusterInfoSettings> {
    let defaults = kshard_lag::ClusterInfoSettings::default();
    let interval = file.interval_seconds.unwrap_or(defaults.interval.as_secs_f64());
    if !(interval.is_finite() && (1.0..=3600.0).contains(&interval)) {
        bail!("invalid cluster_info.interval_seconds: {interval} (between 1 and 3600)");
    }
    let keys = file.topic_config_keys.clone().unwrap_or(defaults.topic_config_keys);
    if let Some(bad) =
        keys.iter().find(|k| k.is_empty() || !k.chars().all(|c| c.is_ascii_alphanumeric() || c == '.' || c == '_'))
    {
        bail!("invalid cluster_info.topic_config_keys: {bad:?} is not a topic configuration name like cleanup.policy");
    }
    Ok(kshard_lag::ClusterInfoSettings {
        enabled: file.enabled.unwrap_or(defaults.enabled),
        interval: Duration::from_secs_f64(interval),
        topic_config_keys: keys,
        log_dirs: file.log_dirs.unwrap_or(defaults.log_dirs),
    })
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
#[derive(Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct ClusterFile {
    #[serde(default)]
    etcd: Vec<String>,
    etcd_prefix: Option<String>,
    etcd_ca_file: Option<std::path::PathBuf>,
    etcd_cert_file: Option<std::path::PathBuf>,
    etcd_key_file: Option<std::path::PathBuf>,
    etcd_user: Option<String>,
    etcd_password: Option<String>,
    member_id: Option<String>,
    zone: Option<String>,
    lease_ttl_seconds: Option<u64>,
}

impl std::fmt::Debug for ClusterFile {
    /// Everything but the password.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClusterFile")
            .field("etcd", &self.etcd)
            .field("etcd_prefix", &self.etcd_prefix)
            .field("etcd_user", &self.etcd_user)
            .field("etcd_password", &self.etcd_password.as_ref().map(|_| "…"))
            .field("member_id", &self.member_id)
            .finish_non_exhaustive()
    }
}

impl ClusterFile {
    /// Its etcd TLS and user keys.
    fn access(&self) -> crate::etcd_access::EtcdAccessFile {
        crate::etcd_access::EtcdAccessFile {
            etcd_ca_file: self.etcd_ca_file.clone(),
            etcd_cert_file: self.etcd_cert_file.clone(),
            etcd_key_file: self.etcd_key_file.clone(),
            etcd_user: self.etcd_user.clone(),
            etcd_password: self.etcd_password.clone(),
        }
    }
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

/// The resolved, checked configuration: the process's settings and the
/// clusters it watches (one, unnamed, without `clusters:`).
#[derive(Debug, Clone)]
pub(crate) struct ServeConfig {
    pub(crate) listen: SocketAddr,
    pub(crate) namespace: String,
    pub(crate) profile: kshard_lag::Profile,
    /// The label naming each series' cluster, when not the profile's.
    pub(crate) cluster_label: Option<String>,
    pub(crate) log_format: LogFormat,
    /// The exporter-toolkit web configuration file.
    pub(crate) web_config: Option<PathBuf>,
    /// Where the series are pushed over OTLP, if anywhere.
    pub(crate) otlp: Option<kshard_lag::OtlpSettings>,
    pub(crate) clusters: Vec<ClusterConfig>,
}

/// One watched Kafka cluster's settings, resolved and checked.
#[derive(Debug, Clone)]
pub(crate) struct ClusterConfig {
    /// Its name under `clusters:`.
    pub(crate) name: Option<String>,
    pub(crate) kafka: ClientSettings,
    pub(crate) offsets_topic: String,
    pub(crate) data_dir: Option<PathBuf>,
    pub(crate) scrape_mode: ScrapeMode,
    pub(crate) watermark_interval: Duration,
    pub(crate) monitor: MonitorSettings,
    pub(crate) cluster: Option<kshard_lag::ClusterOptions>,
    pub(crate) recovery_log_topic: Option<String>,
    /// Read `__share_group_state` (offsets-topic mode).
    pub(crate) share_groups: bool,
    /// kminion's cluster, broker and topic families.
    pub(crate) cluster_info: kshard_lag::ClusterInfoSettings,
    /// kminion's end-to-end probe.
    pub(crate) end_to_end: kshard_lag::EndToEndSettings,
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
        let listen = args.listen.clone().or(file.listen.clone()).unwrap_or_else(|| "0.0.0.0:9308".into());
        let listen: SocketAddr = listen
            .parse()
            .with_context(|| format!("invalid listen: {listen:?} is not an address like 0.0.0.0:9308"))?;
        let profile = match args.metrics_profile.clone().or(file.metrics_profile.clone()) {
            Some(p) => p.parse::<kshard_lag::Profile>().map_err(|e| anyhow::anyhow!("invalid metrics_profile: {e}"))?,
            None => kshard_lag::Profile::Kshard,
        };
        let namespace = args
            .metrics_namespace
            .clone()
            .or(file.metrics_namespace.clone())
            .unwrap_or_else(|| profile.default_namespace().into());
        if namespace.is_empty()
            || !namespace.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
            || namespace.starts_with(|c: char| c.is_ascii_digit())
        {
            bail!("invalid metrics_namespace: {namespace:?} (letters, digits and _, not starting with a digit)");
        }
        let log_format = match &args.log_format {
            Some(v) => parse_named("log_format (text or json)", v)?,
            None => file.log_format.unwrap_or_default(),
        };
        let cluster_label = file.cluster_label.clone();
        if let Some(label) = &cluster_label
            && (label.is_empty()
                || label.starts_with("__")
                || label.starts_with(|c: char| c.is_ascii_digit())
                || !label.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'))
        {
            bail!(
                "invalid cluster_label: {label:?} (a Prometheus label name: letters, digits and _, not starting with a digit or __)"
            );
        }
        let web_config = args.web_config_file.clone().or(file.web_config_file.clone());
        let otlp = crate::serve_otlp::otlp_settings(&file.otlp, &|name| std::env::var(name).ok())?;
        let clusters = if file.clusters.is_empty() {
            vec![ClusterConfig::load(None, args, &file)?]
        } else {
            // Each cluster names its own brokers and offsets topic; the other
            // flags apply to every cluster, over the file.
            for (set, what) in [
                (args.kafka.brokers.is_some(), "brokers (--brokers, KSHARD_BROKERS)"),
                (args.kafka.offsets_topic.is_some(), "offsets_topic (--offsets-topic, KSHARD_OFFSETS_TOPIC)"),
                (
                    args.recovery_log_topic.is_some(),
                    "recovery_log_topic (--recovery-log-topic, KSHARD_RECOVERY_LOG_TOPIC)",
                ),
            ] {
                if set {
                    bail!("invalid {what}: the configuration file lists clusters:, and each names its own");
                }
            }
            // data_dir and etcd_prefix (flag or top level) are roots each
            // cluster's go under, unless its entry sets its own.
            let data_root = args.data_dir.clone().or(file.data_dir.clone());
            let prefix_root = args.etcd_prefix.clone().or(file.cluster.etcd_prefix.clone());
            let prefix_root = prefix_root.as_deref().unwrap_or("/kshard/lag").trim_end_matches('/').to_owned();
            let mut names = std::collections::BTreeSet::new();
            let mut clusters = Vec::new();
            for (i, entry) in file.clusters.iter().enumerate() {
                let name = &entry.name;
                if !names.insert(name.as_str()) {
                    bail!("invalid clusters[{i}].name: {name:?} is given twice");
                }
                let own = |key: &str| entry.own.contains(key);
                let args = ServeArgs {
                    data_dir: if own("data_dir") { None } else { data_root.as_ref().map(|d| d.join(name)) },
                    etcd_prefix: (!own("cluster.etcd_prefix")).then(|| format!("{prefix_root}/{name}")),
                    ..entry_wins(args, &entry.own)
                };
                let cluster = ClusterConfig::load(Some(name.clone()), &args, &entry.file)
                    .with_context(|| format!("invalid clusters[{i}] ({name})"))?;
                clusters.push(cluster);
            }
            shards_apart(&clusters)?;
            clusters
        };
        Ok(ServeConfig { listen, namespace, profile, cluster_label, log_format, web_config, otlp, clusters })
    }
}

/// `args` without what a `clusters:` entry sets itself (paths in `own`):
/// the flags and variables are the top level's, and the entry wins.
fn entry_wins(args: &ServeArgs, own: &std::collections::BTreeSet<String>) -> ServeArgs {
    let mut a = args.clone();
    let own = |key: &str| own.contains(key);
    fn clear<T>(set: bool, field: &mut Option<T>) {
        if set {
            *field = None;
        }
    }
    let k = &mut a.kafka;
    clear(own("offsets_topic"), &mut k.offsets_topic);
    clear(own("reader"), &mut k.reader);
    clear(own("sasl.mechanism"), &mut k.sasl_mechanism);
    clear(own("sasl.username"), &mut k.sasl_username);
    clear(own("sasl.password"), &mut k.sasl_password);
    clear(own("tls.enabled"), &mut k.tls_enabled);
    clear(own("tls.ca_file"), &mut k.tls_ca_file);
    clear(own("scrape_mode"), &mut a.scrape_mode);
    clear(own("granularity"), &mut a.granularity);
    clear(own("cluster.member_id"), &mut a.member_id);
    clear(own("cluster.zone"), &mut a.zone);
    clear(own("max_partition_series"), &mut a.max_partition_series);
    clear(own("watermark_interval_seconds"), &mut a.watermark_interval_seconds);
    clear(own("cluster.lease_ttl_seconds"), &mut a.lease_ttl_seconds);
    if own("cluster.etcd") {
        a.etcd.clear();
    }
    let e = &mut a.etcd_access;
    clear(own("cluster.etcd_ca_file"), &mut e.etcd_ca_file);
    clear(own("cluster.etcd_cert_file"), &mut e.etcd_cert_file);
    clear(own("cluster.etcd_key_file"), &mut e.etcd_key_file);
    clear(own("cluster.etcd_user"), &mut e.etcd_user);
    clear(own("cluster.etcd_password"), &mut e.etcd_password);
    a
}

/// Two clusters keeping state must not share a data directory, nor one
/// Kafka cluster's recovery log topic.
fn shards_apart(clusters: &[ClusterConfig]) -> Result<()> {
    let mut dirs = std::collections::BTreeMap::new();
    let mut logs = std::collections::BTreeMap::new();
    for c in clusters.iter().filter(|c| c.data_dir.is_some()) {
        let name = c.name.as_deref().unwrap_or_default();
        if let Some(other) = dirs.insert(c.data_dir.clone(), name) {
            bail!("invalid clusters ({other}, {name}): the same data_dir; give each its own");
        }
        let log = c.recovery_log_topic.clone().unwrap_or_else(|| kshard_lag::recovery_log_topic(&c.offsets_topic));
        if let Some(other) = logs.insert((c.kafka.brokers.clone(), log.clone()), name) {
            bail!(
                "invalid clusters ({other}, {name}): one Kafka cluster, one recovery log topic ({log}); give each its own recovery_log_topic"
            );
        }
    }
    Ok(())
}

impl ClusterConfig {
    /// One cluster's settings: the flags and environment over `file` (for a
    /// named cluster, its entry over the file's top level).
    fn load(name: Option<String>, args: &ServeArgs, file: &FileConfig) -> Result<Self> {
        let kafka = kafka_settings(&args.kafka, file)?;
        let offsets_topic = offsets_topic(&args.kafka, file)?;
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
        let groups = NameFilter::new(&file.groups.allow, &file.groups.ignore)
            .context("invalid groups: a pattern is not a valid regular expression")?;
        let topics = NameFilter::new(&file.topics.allow, &file.topics.ignore)
            .context("invalid topics: a pattern is not a valid regular expression")?;

        let data_dir = args.data_dir.clone().or(file.data_dir.clone());
        let status = status_settings(&file.status)?;
        let history = history_settings(&file.history)?;
        let cluster = cluster(args, &file.cluster, data_dir.is_some(), scrape_mode)?;
        let recovery_log_topic = args.recovery_log_topic.clone().or(file.recovery_log_topic.clone());
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
        Ok(ClusterConfig {
            name,
            kafka,
            offsets_topic,
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
                every_topic_watermarks: false,
            },
            share_groups: file.share_groups.enabled.unwrap_or(true),
            cluster_info: cluster_info_settings(&file.cluster_info)?,
            end_to_end: crate::serve_end_to_end::end_to_end_settings(&file.end_to_end)?,
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
    let member =
        crate::member_identity::member_identity(args.member_id.as_deref().or(file.member_id.as_deref()), &zone)?;
    let ttl = args.lease_ttl_seconds.or(file.lease_ttl_seconds).unwrap_or(10);
    if !(2..=3600).contains(&ttl) {
        bail!("invalid lease_ttl_seconds: {ttl} (between 2 and 3600)");
    }
    let access = args.etcd_access.access(&file.access())?;
    Ok(Some(kshard_lag::ClusterOptions {
        etcd,
        access,
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
    let invalid = || format!("invalid config file {}", path.display());
    // Parsed from the text, so that an error says the line.
    let mut file: FileConfig = serde_norway::from_str(&text).with_context(invalid)?;
    let (_, entries) = crate::serve_clusters::split(crate::serve_clusters::top_level(&text).with_context(invalid)?)
        .with_context(invalid)?;
    for (i, entry) in entries.into_iter().enumerate() {
        let settings = crate::serve_clusters::parse(entry.settings)
            .with_context(|| format!("invalid clusters[{i}] ({})", entry.name))
            .with_context(invalid)?;
        file.clusters.push(NamedCluster { name: entry.name, file: settings, own: entry.own });
    }
    Ok(file)
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
        assert_eq!(c.clusters[0].kafka.brokers, "b:9092");
        assert_eq!(c.listen.to_string(), "127.0.0.1:1000");
        assert_eq!(c.namespace, "kminion");
        assert_eq!(c.clusters[0].monitor.granularity, Granularity::Topic);
        assert_eq!(c.clusters[0].monitor.motion_granularity, Granularity::Topic, "follows granularity");
        assert!(c.clusters[0].monitor.groups.allows("orders-1") && !c.clusters[0].monitor.groups.allows("billing"));
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
        assert!(err("brokers: a:1\ncluster_label: 'kafka-cluster'\n").contains("invalid cluster_label"));
        let e = err("brokers: a:1\nmetrics_profile: prometheus\n");
        assert!(e.contains("invalid metrics_profile") && e.contains("kafka_lag_exporter"), "{e}");
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
        assert!(err("brokers: a:1\ncluster_info:\n  interval_seconds: 0\n").contains("cluster_info.interval_seconds"));
        let e = err("brokers: a:1\ncluster_info:\n  topic_config_keys: ['retention ms']\n");
        assert!(e.contains("cluster_info.topic_config_keys"), "{e}");
    }

    #[test]
    fn history_settings_default_to_an_hour_by_the_minute() {
        let c = load("brokers: a:1\n", ServeArgs::default()).expect("valid");
        assert_eq!(c.clusters[0].monitor.history, kshard_lag::HistorySettings { window_s: 3600, resolution_s: 60 });
        let c = load("brokers: a:1\nhistory:\n  window_seconds: 600\n  resolution_seconds: 5\n", ServeArgs::default())
            .expect("valid");
        assert_eq!(c.clusters[0].monitor.history.points(), 120);
    }

    #[test]
    fn sasl_and_tls_become_client_properties() {
        let c = load(
            "brokers: a:1\nsasl:\n  mechanism: scram-sha-512\n  username: u\n  password: p\ntls:\n  enabled: true\n",
            ServeArgs::default(),
        )
        .expect("valid");
        let rendered = c.clusters[0].kafka.security.properties();
        let get = |k: &str| rendered.iter().find(|(p, _)| *p == k).map(|(_, v)| v.as_str());
        assert_eq!(get("security.protocol"), Some("sasl_ssl"));
        assert_eq!(get("sasl.mechanism"), Some("SCRAM-SHA-512"));
        assert_eq!(get("sasl.username"), Some("u"));
    }

    #[test]
    fn clusters_each_get_their_settings_over_the_top_level() {
        let c = load(
            "listen: 127.0.0.1:9308\ndata_dir: /var/lib/kshard\ngranularity: topic\ncluster:\n  etcd: ['http://127.0.0.1:2379']\n\
             clusters:\n\
             - name: eu\n  brokers: eu:9092\n\
             - name: us\n  brokers: us:9092\n  offsets_topic: offsets-us\n  data_dir: /srv/us\n  granularity: partition\n",
            ServeArgs { member_id: Some("m1".into()), ..Default::default() },
        )
        .expect("valid");
        let [eu, us] = &c.clusters[..] else { panic!("two clusters: {:?}", c.clusters) };
        assert_eq!((eu.name.as_deref(), eu.kafka.brokers.as_str()), (Some("eu"), "eu:9092"));
        assert_eq!(eu.offsets_topic, "__consumer_offsets");
        assert_eq!(eu.monitor.granularity, Granularity::Topic, "inherited");
        assert_eq!(eu.data_dir.as_deref(), Some(Path::new("/var/lib/kshard/eu")), "under the root");
        assert_eq!(eu.cluster.as_ref().map(|c| c.prefix.as_str()), Some("/kshard/lag/eu"));
        assert_eq!(us.offsets_topic, "offsets-us");
        assert_eq!(us.monitor.granularity, Granularity::Partition, "its own");
        assert_eq!(us.data_dir.as_deref(), Some(Path::new("/srv/us")), "its own");
        assert_eq!(us.cluster.as_ref().map(|c| c.prefix.as_str()), Some("/kshard/lag/us"));
        assert_eq!(c.listen.to_string(), "127.0.0.1:9308");
    }

    #[test]
    fn flags_are_the_top_level_and_what_an_entry_sets_wins() {
        let yaml = "clusters:\n- name: a\n  brokers: a:1\n  granularity: partition\n  sasl:\n    mechanism: PLAIN\n    username: ua\n    password: pa\n\
                    - name: b\n  brokers: b:1\n";
        let args = ServeArgs {
            granularity: Some("topic".into()),
            kafka: KafkaArgs { sasl_password: Some("from-env".into()), ..Default::default() },
            ..Default::default()
        };
        let c = load(yaml, args).expect("valid");
        let [a, b] = &c.clusters[..] else { panic!("two clusters") };
        assert_eq!(a.monitor.granularity, Granularity::Partition, "the entry's own");
        assert_eq!(b.monitor.granularity, Granularity::Topic, "the flag, as the top level");
        let password = a.kafka.security.sasl.as_ref().map(|s| s.password.as_str());
        assert_eq!(password, Some("pa"), "an entry's password is not replaced by KSHARD_SASL_PASSWORD");
        let e = err("data_dir: /d\nclusters:\n- name: a\n  brokers: k:1\n- name: b\n  brokers: k:1\n");
        assert!(e.contains("(a, b)") && e.contains("recovery_log_topic"), "one Kafka cluster, one recovery log: {e}");
        let e =
            err("clusters:\n- name: a\n  brokers: k:1\n  data_dir: /d\n- name: b\n  brokers: j:1\n  data_dir: /d\n");
        assert!(e.contains("the same data_dir"), "{e}");
    }

    #[test]
    fn invalid_clusters_name_the_entry_and_the_setting() {
        let two = "clusters:\n- name: a\n  brokers: a:1\n- name: b\n  brokers: b:1\n";
        let e = err(&format!("{two}- name: a\n  brokers: c:1\n"));
        assert!(e.contains("clusters[2].name") && e.contains("twice"), "{e}");
        let e = err("clusters:\n- name: a\n  brokers: a:1\n- name: b\n");
        assert!(e.contains("clusters[1] (b)") && e.contains("brokers"), "{e}");
        let e = err("clusters:\n- name: a\n  brokers: a:1\n  granularity: nope\n");
        assert!(e.contains("clusters[0] (a)") && e.contains("granularity"), "{e}");
        let e = err("clusters:\n- name: a\n  brokers: a:1\n  brokerz: b\n");
        assert!(e.contains("clusters[0] (a)") && e.contains("brokerz"), "{e}");
        let flag = load(
            two,
            ServeArgs { kafka: KafkaArgs { brokers: Some("x:1".into()), ..Default::default() }, ..Default::default() },
        );
        let e = format!("{:#}", flag.expect_err("brokers flag with clusters"));
        assert!(e.contains("invalid brokers") && e.contains("each names its own"), "{e}");
    }
}
