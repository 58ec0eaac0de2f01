//! `kshard serve` configuration: a YAML file (`--config`), then `KSHARD_…`
//! environment variables, then flags, each source overriding the one before:
//! the flags (clap reads the variables into them) become a layer of the
//! file's keys, merged over the file and checked by the same parser
//! (`settings_file.rs`). Every setting is checked at start; an invalid one
//! fails naming the setting.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use kshard_lag::service::{ProcessOptions, ScrapeMode, ServeOptions};
use kshard_lag::settings::ClusterName;
use kshard_lag::{Granularity, MonitorSettings, NameFilter};
use serde_norway::Value;

pub(crate) use crate::connection::{KafkaArgs, KafkaTarget};
use crate::connection::{kafka_settings, offsets_topic};
use crate::serve_clusters::{over_top, split};
pub(crate) use crate::settings_file::LogFormat;
use crate::settings_file::{
    ClusterFile, ClusterInfoFile, FileConfig, HistoryFile, Layer, ShareGroupsFile, StatusFile, parse, read_file,
    with_flags,
};

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
    /// Address to serve KEDA's external scaler (gRPC) on; not served without it.
    #[arg(long, env = "KSHARD_KEDA_LISTEN")]
    pub(crate) keda_listen: Option<String>,
}

impl ServeArgs {
    /// These flags and variables under the file's keys.
    fn layer(&self) -> Layer {
        let mut layer = Layer::default();
        self.kafka.put(&mut layer);
        layer.set("listen", self.listen.clone());
        layer.set("metrics_namespace", self.metrics_namespace.clone());
        layer.set("metrics_profile", self.metrics_profile.clone());
        layer.set_path("data_dir", self.data_dir.as_deref());
        layer.set("scrape_mode", self.scrape_mode.clone());
        layer.set("granularity", self.granularity.clone());
        layer.set("max_partition_series", self.max_partition_series.map(|n| n as u64));
        layer.set("watermark_interval_seconds", self.watermark_interval_seconds);
        layer.set("log_format", self.log_format.clone());
        layer.set("recovery_log_topic", self.recovery_log_topic.clone());
        let etcd = self.etcd.iter().map(|e| Value::from(e.as_str())).collect::<Vec<_>>();
        layer.set("cluster.etcd", (!etcd.is_empty()).then_some(Value::Sequence(etcd)));
        layer.set("cluster.etcd_prefix", self.etcd_prefix.clone());
        let e = &self.etcd_access;
        layer.set_path("cluster.etcd_ca_file", e.etcd_ca_file.as_deref());
        layer.set_path("cluster.etcd_cert_file", e.etcd_cert_file.as_deref());
        layer.set_path("cluster.etcd_key_file", e.etcd_key_file.as_deref());
        layer.set("cluster.etcd_user", e.etcd_user.clone());
        layer.set("cluster.etcd_password", e.etcd_password.clone());
        layer.set("cluster.member_id", self.member_id.clone());
        layer.set("cluster.zone", self.zone.clone());
        layer.set("cluster.lease_ttl_seconds", self.lease_ttl_seconds);
        layer.set_path("web_config_file", self.web_config_file.as_deref());
        layer.set("keda.listen", self.keda_listen.clone());
        layer
    }
}

/// The cluster-info settings, checked.
fn cluster_info_settings(file: &ClusterInfoFile) -> Result<kshard_lag::ClusterInfoSettings> {
    let defaults = kshard_lag::ClusterInfoSettings::default();
    let keys = file.topic_config_keys.clone().unwrap_or(defaults.topic_config_keys);
    if let Some(bad) =
        keys.iter().find(|k| k.is_empty() || !k.chars().all(|c| c.is_ascii_alphanumeric() || c == '.' || c == '_'))
    {
        bail!("invalid cluster_info.topic_config_keys: {bad:?} is not a topic configuration name like cleanup.policy");
    }
    Ok(kshard_lag::ClusterInfoSettings {
        enabled: file.enabled.unwrap_or(defaults.enabled),
        interval: file.interval_seconds.map_or(defaults.interval, |s| s.get()),
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

/// The history settings, checked.
fn history_settings(file: &HistoryFile) -> Result<kshard_lag::HistorySettings> {
    let defaults = kshard_lag::HistorySettings::default();
    let window = file.window_seconds.unwrap_or(defaults.window_s);
    let resolution = file.resolution_seconds.unwrap_or(defaults.resolution_s);
    Ok(kshard_lag::HistorySettings::checked(window, resolution)?)
}

/// The resolved, checked configuration: the process's settings and the
/// clusters it watches (one, unnamed, without `clusters:`).
#[derive(Debug)]
pub(crate) struct ServeConfig {
    pub(crate) listen: SocketAddr,
    /// Where KEDA's external scaler is served, when it is.
    pub(crate) keda_listen: Option<SocketAddr>,
    pub(crate) log_format: LogFormat,
    pub(crate) process: ProcessOptions,
    pub(crate) clusters: Vec<ServeOptions>,
}

/// The flags that stand for one cluster's own setting: with `clusters:`,
/// each entry sets its own.
const PER_CLUSTER_FLAGS: [(&str, &str); 3] = [
    ("brokers", "--brokers, KSHARD_BROKERS"),
    ("offsets_topic", "--offsets-topic, KSHARD_OFFSETS_TOPIC"),
    ("recovery_log_topic", "--recovery-log-topic, KSHARD_RECOVERY_LOG_TOPIC"),
];

impl ServeConfig {
    /// The file (if any), with the environment and flags over it, and each
    /// `clusters:` entry over that.
    pub(crate) fn load(args: &ServeArgs) -> Result<Self> {
        let (file, entries) = split(read_file(args.kafka.config.as_deref())?)?;
        let flags = args.layer();
        if !entries.is_empty()
            && let Some((key, flag)) = PER_CLUSTER_FLAGS.iter().find(|(key, _)| flags.has(key))
        {
            bail!("invalid {key} ({flag}): the configuration file lists clusters:, and each names its own");
        }
        let (settings, top) = with_flags(file, flags)?;
        let process = process_options(&settings)?;
        let mut clusters = if entries.is_empty() {
            vec![cluster_options(None, &settings)?]
        } else {
            let mut clusters = Vec::new();
            for (i, entry) in entries.iter().enumerate() {
                let name = &entry.name;
                let cluster = parse(over_top(&top, entry))
                    .and_then(|settings| cluster_options(Some(name.clone()), &settings))
                    .with_context(|| format!("invalid clusters[{i}] ({name})"))?;
                clusters.push(cluster);
            }
            shards_apart(&clusters)?;
            clusters
        };
        let objectives = crate::serve_objectives::objectives(&settings.objectives)?;
        for c in &mut clusters {
            let name = c.name.as_ref().map(|n| n.to_string()).unwrap_or_default();
            c.monitor.objectives = objectives.iter().filter(|o| o.covers_cluster(&name)).cloned().collect();
        }
        Ok(ServeConfig {
            listen: settings.listen.unwrap_or_else(|| SocketAddr::from(([0, 0, 0, 0], 9308))),
            keda_listen: settings.keda.listen,
            log_format: settings.log_format.unwrap_or_default(),
            process,
            clusters,
        })
    }
}

/// The whole process's settings (the top level's).
fn process_options(file: &FileConfig) -> Result<ProcessOptions> {
    let profile = match &file.metrics_profile {
        Some(p) => p.parse::<kshard_lag::Profile>().map_err(|e| anyhow::anyhow!("invalid metrics_profile: {e}"))?,
        None => kshard_lag::Profile::Kshard,
    };
    let defaults = ProcessOptions::new(profile);
    Ok(ProcessOptions {
        namespace: file.metrics_namespace.clone().unwrap_or(defaults.namespace),
        cluster_label: file.cluster_label.clone(),
        web_config: file.web_config_file.clone(),
        otlp: crate::serve_otlp::otlp_settings(&file.otlp, &|name| std::env::var(name).ok())?,
        notifiers: crate::serve_notifiers::notifiers(&file.notifiers)?,
        ..ProcessOptions::new(profile)
    })
}

/// Two clusters keeping state must not share a data directory, nor one
/// Kafka cluster's recovery log topic.
fn shards_apart(clusters: &[ServeOptions]) -> Result<()> {
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

/// One cluster's options from its settings (for a named cluster, its entry
/// over the top level).
fn cluster_options(name: Option<ClusterName>, file: &FileConfig) -> Result<ServeOptions> {
    let kafka = kafka_settings(file)?;
    let scrape_mode = file.scrape_mode.unwrap_or(ScrapeMode::OffsetsTopic);
    let granularity = file.granularity.unwrap_or(Granularity::Partition);
    if file.max_partition_series == Some(0) {
        bail!("invalid max_partition_series: 0 (at least 1; for no per-partition series, granularity: topic)");
    }
    let list = |l: &Option<Vec<String>>| l.clone().unwrap_or_default();
    let groups = NameFilter::new(&list(&file.groups.allow), &list(&file.groups.ignore))
        .context("invalid groups: a pattern is not a valid regular expression")?;
    let topics = NameFilter::new(&list(&file.topics.allow), &list(&file.topics.ignore))
        .context("invalid topics: a pattern is not a valid regular expression")?;
    let recovery_log_topic = file.recovery_log_topic.as_ref().map(|t| t.to_string());
    if let Some(topic) = &recovery_log_topic
        && topic.parse::<kshard_lag::settings::TopicName>().is_ok()
        && kshard_lag::share_recovery_log_topic(topic).parse::<kshard_lag::settings::TopicName>().is_err()
    {
        bail!(
            "invalid recovery_log_topic: {topic:?} leaves no room for the share state's log beside it ({:?} is not a Kafka topic name)",
            kshard_lag::share_recovery_log_topic(topic)
        );
    }
    let data_dir = file.data_dir.clone();
    Ok(ServeOptions {
        name,
        offsets_topic: offsets_topic(file),
        share_groups: file.share_groups.enabled.unwrap_or(true),
        mode: scrape_mode,
        watermark_interval: file.watermark_interval_seconds.map_or(Duration::from_secs(5), |s| s.get()),
        monitor: MonitorSettings {
            groups,
            topics,
            granularity,
            motion_granularity: file.motion_granularity.unwrap_or(granularity),
            status: status_settings(&file.status)?,
            history: history_settings(&file.history)?,
            max_partition_series: file.max_partition_series,
            share_delivery_count_limit: delivery_count_limit(&file.share_groups)?,
            every_topic_watermarks: false,
            // Those covering the cluster, once every cluster is read.
            objectives: Default::default(),
        },
        cluster: cluster(&file.cluster, data_dir.is_some(), scrape_mode)?,
        data_dir,
        recovery_log_topic,
        cluster_info: cluster_info_settings(&file.cluster_info)?,
        end_to_end: crate::serve_end_to_end::end_to_end_settings(&file.end_to_end)?,
        ..ServeOptions::new(kafka)
    })
}

/// The settings of a cluster of lag monitors (`cluster:`), checked.
fn cluster(file: &ClusterFile, has_data_dir: bool, mode: ScrapeMode) -> Result<Option<kshard_lag::ClusterOptions>> {
    let etcd = file.etcd.clone().unwrap_or_default();
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
    let prefix = file.etcd_prefix.clone().unwrap_or_else(|| "/kshard/lag".into());
    if !prefix.starts_with('/') || prefix.trim_end_matches('/').is_empty() {
        bail!("invalid etcd_prefix: {prefix:?} must start with / and name something");
    }
    let zone = file.zone.clone().unwrap_or_else(|| "local".into());
    let member = crate::member_identity::member_identity(file.member_id.as_deref(), &zone)?;
    let access = crate::etcd_access::EtcdAccessArgs::default().access(&file.access())?;
    Ok(Some(kshard_lag::ClusterOptions {
        etcd,
        access,
        prefix: prefix.trim_end_matches('/').to_owned(),
        member,
        zone,
        // etcd grants whole seconds: a fraction is rounded up.
        lease_ttl: file
            .lease_ttl_seconds
            .map_or(Duration::from_secs(10), |s| Duration::from_secs(s.get().as_secs_f64().ceil() as u64)),
        // Known once bound (see `serve`).
        endpoint: None,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

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
        assert_eq!(c.process.namespace.as_str(), "kminion");
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
    fn the_types_name_the_setting_and_the_source() {
        let e = err("brokers: a:1\ncluster:\n  etcd: ['http://e:1']\n  lease_ttl_seconds: 1\n");
        assert!(e.contains("invalid cluster.lease_ttl_seconds: 1 (between 2 and 3600 seconds) at line "), "{e}");
        let e = err("brokers: a:1\nmetrics_namespace: 'my-ns'\n");
        assert!(e.contains("invalid metrics_namespace: \"my-ns\" is not a metric namespace"), "{e}");
        let flag = ServeArgs { watermark_interval_seconds: Some(0.0), ..Default::default() };
        let e = format!("{:#}", load("brokers: a:1\n", flag).expect_err("out of range"));
        assert!(
            e.contains("flag or KSHARD_") && e.contains("invalid watermark_interval_seconds: 0 (between 0.1"),
            "{e}"
        );
    }

    #[test]
    fn what_the_file_gives_is_taken_as_given() {
        // A section left empty (its keys commented out) sets nothing.
        let c = load("brokers: a:1\nstatus:\ntls:\ncluster:\n", ServeArgs::default()).expect("valid");
        assert_eq!(c.clusters[0].monitor.status, kshard_lag::StatusSettings::default());
        // A text that YAML would read as a number stays the text.
        let sasl = "sasl:\n  mechanism: PLAIN\n  username: u\n  password: 0x1F\n";
        let c = load(&format!("brokers: a:1\n{sasl}"), ServeArgs::default()).expect("valid");
        let password = |c: &ServeOptions| c.kafka.security.sasl.as_ref().map(|s| s.password.clone());
        assert_eq!(password(&c.clusters[0]).as_deref(), Some("0x1F"));
        let entry = "clusters:\n- name: a\n  brokers: a:1\n  data_dir: 2024\n  sasl:\n    mechanism: PLAIN\n    username: u\n    password: 1e3\n";
        let c = load(entry, ServeArgs::default()).expect("valid");
        assert_eq!(password(&c.clusters[0]).as_deref(), Some("1e3"), "in an entry too");
        assert_eq!(c.clusters[0].data_dir.as_deref(), Some(Path::new("2024")));
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
    fn each_cluster_gets_the_objectives_covering_it() {
        let c = load(
            "objectives:\n\
             - name: everywhere\n  lag_seconds: 30\n  target_percent: 99\n\
             - name: eu-billing\n  selector: 'cluster=\"eu\", group_id=~\"billing-.*\"'\n  lag_seconds: 5\n  target_percent: 99.9\n\
             clusters:\n- name: eu\n  brokers: eu:9092\n- name: us\n  brokers: us:9092\n",
            ServeArgs::default(),
        )
        .expect("valid");
        let names = |o: &ServeOptions| o.monitor.objectives.iter().map(|o| o.name.clone()).collect::<Vec<_>>();
        assert_eq!(names(&c.clusters[0]), ["everywhere", "eu-billing"]);
        assert_eq!(names(&c.clusters[1]), ["everywhere"]);
        let one = load("brokers: k:1\nobjectives:\n- name: eu\n  selector: 'cluster=\"eu\"'\n  lag_seconds: 5\n  target_percent: 99\n", ServeArgs::default())
            .expect("valid");
        assert!(one.clusters[0].monitor.objectives.is_empty(), "an unnamed cluster's series have no cluster label");
        let entry = "clusters:\n- name: a\n  brokers: a:1\n  objectives:\n  - name: x\n    lag_seconds: 5\n    target_percent: 99\n";
        let e = load(entry, ServeArgs::default()).expect_err("the whole process's").to_string();
        assert!(e.contains("clusters[0].objectives"), "{e}");
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
        // What the entry's own text gets wrong is named by its path and line.
        let e = err("clusters:\n- name: a\n  brokers: a:1\n  granularity: nope\n");
        assert!(e.contains("invalid clusters[0].granularity") && e.contains("at line 4"), "{e}");
        let e = err("clusters:\n- name: a\n  brokers: a:1\n  brokerz: b\n");
        assert!(e.contains("clusters[0]") && e.contains("brokerz"), "{e}");
        let flag = load(
            two,
            ServeArgs { kafka: KafkaArgs { brokers: Some("x:1".into()), ..Default::default() }, ..Default::default() },
        );
        let e = format!("{:#}", flag.expect_err("brokers flag with clusters"));
        assert!(e.contains("invalid brokers") && e.contains("each names its own"), "{e}");
    }
}
