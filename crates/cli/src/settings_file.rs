//! The settings' one shape: the YAML file's (`--config`), which flags and
//! `KSHARD_…` variables are turned into too ([`Layer`]), so that one merge
//! puts each source over the one before and one parser checks them all.
//! Names, topics and durations are `kshard_lag::settings`' types, which
//! check themselves as they are read; unknown keys are errors, so a typo is
//! not ignored.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use kshard_lag::Granularity;
use kshard_lag::service::ScrapeMode;
use kshard_lag::settings::{ClusterInfoInterval, LabelName, LeaseTtl, MetricNamespace, TopicName, WatermarkInterval};
use serde::{Deserialize, Serialize};
use serde_norway::{Mapping, Value};

/// The settings as a file holds them, or a layer of flags and variables.
#[derive(Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct FileConfig {
    pub(crate) brokers: Option<String>,
    pub(crate) offsets_topic: Option<TopicName>,
    pub(crate) reader: Option<String>,
    pub(crate) listen: Option<SocketAddr>,
    pub(crate) metrics_namespace: Option<MetricNamespace>,
    pub(crate) metrics_profile: Option<String>,
    pub(crate) cluster_label: Option<LabelName>,
    pub(crate) data_dir: Option<PathBuf>,
    pub(crate) web_config_file: Option<PathBuf>,
    pub(crate) recovery_log_topic: Option<TopicName>,
    pub(crate) scrape_mode: Option<ScrapeMode>,
    pub(crate) granularity: Option<Granularity>,
    pub(crate) motion_granularity: Option<Granularity>,
    pub(crate) max_partition_series: Option<usize>,
    pub(crate) watermark_interval_seconds: Option<WatermarkInterval>,
    pub(crate) log_format: Option<LogFormat>,
    #[serde(default)]
    pub(crate) cluster: ClusterFile,
    #[serde(default)]
    pub(crate) status: StatusFile,
    #[serde(default)]
    pub(crate) history: HistoryFile,
    #[serde(default)]
    pub(crate) share_groups: ShareGroupsFile,
    #[serde(default)]
    pub(crate) cluster_info: ClusterInfoFile,
    #[serde(default)]
    pub(crate) end_to_end: crate::serve_end_to_end::EndToEndFile,
    #[serde(default)]
    pub(crate) otlp: crate::serve_otlp::OtlpFile,
    #[serde(default)]
    pub(crate) keda: KedaFile,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) notifiers: Vec<crate::serve_notifiers::NotifierFile>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) objectives: Vec<crate::serve_objectives::ObjectiveFile>,
    #[serde(default)]
    pub(crate) groups: Lists,
    #[serde(default)]
    pub(crate) topics: Lists,
    #[serde(default)]
    pub(crate) tls: TlsFile,
    #[serde(default)]
    pub(crate) sasl: SaslFile,
    /// Extra librdkafka properties, applied last.
    #[serde(default)]
    pub(crate) kafka_properties: Properties,
    /// `clusters:`: each entry a cluster's settings and its `name`, merged
    /// over the top level (`serve_clusters.rs`).
    pub(crate) clusters: Option<Vec<FileConfig>>,
    /// A `clusters:` entry's name (`serve_clusters.rs` refuses it elsewhere).
    pub(crate) name: Option<String>,
}

/// `keda:`: KEDA's external scaler.
#[derive(Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct KedaFile {
    /// Where to serve it (gRPC); not served without it.
    pub(crate) listen: Option<SocketAddr>,
}

/// `cluster:`: etcd, and this member of the lag monitors sharing it.
#[derive(Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ClusterFile {
    pub(crate) etcd: Option<Vec<String>>,
    pub(crate) etcd_prefix: Option<String>,
    pub(crate) etcd_ca_file: Option<PathBuf>,
    pub(crate) etcd_cert_file: Option<PathBuf>,
    pub(crate) etcd_key_file: Option<PathBuf>,
    pub(crate) etcd_user: Option<String>,
    pub(crate) etcd_password: Option<String>,
    pub(crate) member_id: Option<String>,
    pub(crate) zone: Option<String>,
    pub(crate) lease_ttl_seconds: Option<LeaseTtl>,
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
    pub(crate) fn access(&self) -> crate::etcd_access::EtcdAccessFile {
        crate::etcd_access::EtcdAccessFile {
            etcd_ca_file: self.etcd_ca_file.clone(),
            etcd_cert_file: self.etcd_cert_file.clone(),
            etcd_key_file: self.etcd_key_file.clone(),
            etcd_user: self.etcd_user.clone(),
            etcd_password: self.etcd_password.clone(),
        }
    }
}

/// `status:`: how consumer status is judged.
#[derive(Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct StatusFile {
    pub(crate) window: Option<usize>,
    pub(crate) single_commit_stop_seconds: Option<i64>,
}

/// `history:`: each group's lag history for the page's chart.
#[derive(Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct HistoryFile {
    pub(crate) window_seconds: Option<u32>,
    pub(crate) resolution_seconds: Option<u32>,
}

/// `share_groups:`: whether `__share_group_state` is read, and the delivery
/// limit poison messages are counted at.
#[derive(Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ShareGroupsFile {
    pub(crate) enabled: Option<bool>,
    pub(crate) delivery_count_limit: Option<i16>,
}

/// `cluster_info:`: kminion's cluster, broker and topic families.
#[derive(Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ClusterInfoFile {
    pub(crate) enabled: Option<bool>,
    pub(crate) interval_seconds: Option<ClusterInfoInterval>,
    pub(crate) topic_config_keys: Option<Vec<String>>,
    pub(crate) log_dirs: Option<bool>,
}

/// `groups:` and `topics:`: regular expressions matching whole names.
#[derive(Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Lists {
    pub(crate) allow: Option<Vec<String>>,
    pub(crate) ignore: Option<Vec<String>>,
}

/// How logs are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, Default)]
#[serde(rename_all = "snake_case")]
pub(crate) enum LogFormat {
    #[default]
    Text,
    Json,
}

/// `tls:`: TLS to the brokers.
#[derive(Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct TlsFile {
    pub(crate) enabled: Option<bool>,
    pub(crate) ca_file: Option<PathBuf>,
    pub(crate) cert_file: Option<PathBuf>,
    pub(crate) key_file: Option<PathBuf>,
    pub(crate) insecure_skip_verify: Option<bool>,
}

/// `sasl:`: a user for the brokers.
#[derive(Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct SaslFile {
    pub(crate) mechanism: Option<String>,
    pub(crate) username: Option<String>,
    pub(crate) password: Option<String>,
}

impl std::fmt::Debug for SaslFile {
    /// Everything but the password.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SaslFile")
            .field("mechanism", &self.mechanism)
            .field("username", &self.username)
            .field("password", &self.password.as_ref().map(|_| "…"))
            .finish()
    }
}

/// `kafka_properties:`: librdkafka's properties, some of them secrets
/// (`sasl.password`, `ssl.key.password`, OAuth's client secret), so their
/// values are not shown by `Debug`.
#[derive(Clone, Default, Deserialize, Serialize)]
#[serde(transparent)]
pub(crate) struct Properties(pub(crate) std::collections::BTreeMap<String, String>);

impl std::fmt::Debug for Properties {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_map().entries(self.0.keys().map(|k| (k, "…"))).finish()
    }
}

/// Settings given by flags and `KSHARD_…` variables, under the file's keys:
/// each is put where the file would have it, so that they merge over the
/// file's and are checked by the same parser.
#[derive(Default)]
pub(crate) struct Layer(Mapping);

impl std::fmt::Debug for Layer {
    /// The keys set, not their values (passwords among them).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.0.keys().filter_map(Value::as_str)).finish()
    }
}

impl Layer {
    /// Sets `path` (`tls.ca_file`: a key under `tls:`) to `value`, if given.
    pub(crate) fn set(&mut self, path: &str, value: Option<impl Into<Value>>) {
        let Some(value) = value else { return };
        let mut at = &mut self.0;
        let mut keys = path.split('.').peekable();
        while let Some(key) = keys.next() {
            if keys.peek().is_none() {
                at.insert(key.into(), value.into());
                return;
            }
            let inner = at.entry(key.into()).or_insert_with(|| Value::Mapping(Mapping::new()));
            let Value::Mapping(inner) = inner else { return };
            at = inner;
        }
    }

    /// Sets `path` to a path's text, if given.
    pub(crate) fn set_path(&mut self, key: &str, value: Option<&Path>) {
        self.set(key, value.map(|p| p.display().to_string()));
    }

    /// Whether `key` (top level) is set.
    pub(crate) fn has(&self, key: &str) -> bool {
        self.0.contains_key(key)
    }

    /// The settings, as a mapping of the file's keys.
    pub(crate) fn into_mapping(self) -> Mapping {
        self.0
    }
}

/// `over` on `base`: mappings merge key by key, anything else replaces.
pub(crate) fn merged(mut base: Mapping, over: Mapping) -> Mapping {
    for (key, value) in over {
        let value = match (base.remove(&key), value) {
            (Some(Value::Mapping(b)), Value::Mapping(o)) => Value::Mapping(merged(b, o)),
            (_, value) => value,
        };
        base.insert(key, value);
    }
    base
}

/// Settings merged from several sources, as a file's. Through YAML text, so
/// that an error names the setting (without a line: the text is not the
/// user's).
pub(crate) fn parse<T: serde::de::DeserializeOwned>(settings: Mapping) -> Result<T> {
    let text = serde_norway::to_string(&settings).context("writing the settings")?;
    from_yaml(&text, false)
}

/// `text` read as a `T`; an error names the setting's path (as
/// `cluster.lease_ttl_seconds`), and its line when `lines` (the user's text).
pub(crate) fn from_yaml<T: serde::de::DeserializeOwned>(text: &str, lines: bool) -> Result<T> {
    serde_path_to_error::deserialize(serde_norway::Deserializer::from_str(text)).map_err(|e| {
        let path = e.path().to_string();
        let message = e.inner().to_string();
        let (message, at) = match message.split_once(" at line ") {
            Some((m, at)) if lines => (m.to_owned(), format!(" at line {at}")),
            Some((m, _)) => (m.to_owned(), String::new()),
            None => (message, String::new()),
        };
        // The parser's own path, when it gives one, is a part of this one.
        let message = match message.split_once(": ") {
            Some((own, rest)) if path.starts_with(own) && !own.is_empty() => rest.to_owned(),
            _ => message,
        };
        if path == "." { anyhow::anyhow!("{message}{at}") } else { anyhow::anyhow!("invalid {path}: {message}{at}") }
    })
}

/// The file at `path`, checked on its own (so that an error says its line),
/// as a mapping of its keys; `None`: no file.
pub(crate) fn read_file(path: Option<&Path>) -> Result<Mapping> {
    let Some(path) = path else { return Ok(Mapping::new()) };
    let text = std::fs::read_to_string(path).with_context(|| format!("reading the config file {}", path.display()))?;
    settings_of(&text).with_context(|| format!("invalid config file {}", path.display()))
}

/// The settings `text` gives, checked (an error says its line), as a
/// mapping of the keys it sets.
pub(crate) fn settings_of(text: &str) -> Result<Mapping> {
    if !matches!(serde_norway::from_str::<Value>(text).context("not YAML")?, Value::Mapping(_) | Value::Null) {
        bail!("the file is not a mapping of settings");
    }
    let file: FileConfig = from_yaml(text, true)?;
    // Written back from the typed settings, not from the text's YAML values:
    // a text setting stays the text given (`password: 0x1F` is not 31), and
    // what was not given is left out (it overrides nothing).
    match serde_norway::to_value(&file).context("writing the settings")? {
        Value::Mapping(m) => Ok(given(m)),
        _ => bail!("the settings are not a mapping"),
    }
}

/// `m` without what is not set (`null`, as a key left empty reads, and
/// sections with nothing set), at every depth: a setting not given
/// overrides nothing.
pub(crate) fn given(m: Mapping) -> Mapping {
    m.into_iter()
        .filter_map(|(k, v)| {
            let v = match v {
                Value::Null => return None,
                Value::Mapping(inner) => {
                    let inner = given(inner);
                    if inner.is_empty() {
                        return None;
                    }
                    Value::Mapping(inner)
                }
                Value::Sequence(items) => Value::Sequence(
                    items
                        .into_iter()
                        .map(|i| if let Value::Mapping(m) = i { Value::Mapping(given(m)) } else { i })
                        .collect(),
                ),
                other => other,
            };
            Some((k, v))
        })
        .collect()
}

/// The settings of `file` with `flags` over them, checked, and as merged
/// (what `clusters:` entries go over); `flags` are checked on their own
/// first, so that an error names where it came from.
pub(crate) fn with_flags(file: Mapping, flags: Layer) -> Result<(FileConfig, Mapping)> {
    let flags = flags.into_mapping();
    let _: FileConfig = parse(flags.clone()).context("invalid flag or KSHARD_… variable")?;
    let top = merged(file, flags);
    Ok((parse(top.clone())?, top))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_shows_no_secret() {
        let file: SaslFile =
            serde_norway::from_str("mechanism: PLAIN\nusername: u\npassword: s3cret-2\n").expect("parses");
        let properties: Properties = serde_norway::from_str("sasl.password: s3cret-3\n").expect("parses");
        let cluster: ClusterFile = serde_norway::from_str("etcd_password: s3cret-4\n").expect("parses");
        let text = format!("{file:?} {properties:?} {cluster:?}");
        assert!(!text.contains("s3cret"), "{text}");
        assert!(text.contains("sasl.password"), "the keys are shown: {text}");
    }

    #[test]
    fn a_layer_puts_each_setting_where_the_file_has_it() {
        let mut layer = Layer::default();
        layer.set("tls.ca_file", Some("/flag.pem"));
        layer.set("tls.enabled", None::<bool>);
        layer.set("granularity", Some("topic"));
        let file = settings_of("tls:\n  enabled: true\n  ca_file: /file.pem\n").expect("yaml");
        let (c, _) = with_flags(file, layer).expect("valid");
        assert_eq!(c.tls.enabled, Some(true), "the file's, where no flag is given");
        assert_eq!(c.tls.ca_file.as_deref(), Some(Path::new("/flag.pem")), "the flag's");
        assert_eq!(c.granularity, Some(Granularity::Topic));
    }

    #[test]
    fn a_bad_flag_is_named_as_a_flag() {
        let mut layer = Layer::default();
        layer.set("granularity", Some("partitions"));
        let e = format!("{:#}", with_flags(Mapping::new(), layer).expect_err("invalid"));
        assert!(e.contains("flag or KSHARD_") && e.contains("granularity"), "{e}");
    }
}
