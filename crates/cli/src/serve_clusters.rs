//! `clusters:` in the configuration file: one process watching several Kafka
//! clusters. Each entry has a `name` and the settings of that cluster, over
//! the file's top level, which holds what they share: a mapping (`tls:`,
//! `groups:`, …) merges key by key, anything else the entry sets replaces
//! the top level's. `listen`, `metrics_namespace`, `metrics_profile`,
//! `cluster_label`, `web_config_file`, `log_format` and `otlp` are the whole
//! process's: top level only. `data_dir` and `cluster.etcd_prefix` at the
//! top level are roots: each cluster keeps its state in `<data_dir>/<name>`
//! and its keys under `<etcd_prefix>/<name>` unless its entry sets its own. `brokers` and
//! `recovery_log_topic` are each entry's own: at the top level, an error.
//! Flags and `KSHARD_…` variables are the top level's: what an entry sets
//! itself wins over them (they are merged over the top level first).

use std::path::Path;

use anyhow::{Context, Result, bail};
use kshard_lag::settings::ClusterName;
use serde_norway::{Mapping, Value};

use crate::settings_file::merged;
#[cfg(test)]
use crate::settings_file::settings_of;

/// The keys only the top level may set.
const PROCESS_WIDE: [&str; 10] = [
    "listen",
    "metrics_namespace",
    "metrics_profile",
    "cluster_label",
    "web_config_file",
    "log_format",
    "otlp",
    "keda",
    "notifiers",
    "objectives",
];

/// The keys whose top-level value is a root each cluster's goes under.
const ROOTS: [&str; 1] = ["data_dir"];

/// The keys each entry must set itself: inherited, they would watch one
/// cluster twice, or mix two clusters' shards in one recovery log.
const PER_CLUSTER: [&str; 2] = ["brokers", "recovery_log_topic"];

/// A cluster's entry as written.
pub(crate) struct ClusterEntry {
    pub(crate) name: ClusterName,
    /// The settings it sets itself.
    pub(crate) settings: Mapping,
}

impl std::fmt::Debug for ClusterEntry {
    /// Its name and the keys it sets, not their values (passwords among them).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let keys: Vec<&str> = self.settings.keys().filter_map(Value::as_str).collect();
        f.debug_struct("ClusterEntry").field("name", &self.name).field("sets", &keys).finish()
    }
}

/// The top level without `clusters:`, and each cluster's entry; no entry
/// when the file has no `clusters:`.
pub(crate) fn split(mut top: Mapping) -> Result<(Mapping, Vec<ClusterEntry>)> {
    if top.contains_key("name") {
        bail!("invalid name: only an entry of clusters: has one");
    }
    let Some(list) = top.remove("clusters") else { return Ok((top, Vec::new())) };
    let Value::Sequence(list) = list else {
        bail!("invalid clusters: a list of clusters, each with a name and its settings");
    };
    if list.is_empty() {
        bail!("invalid clusters: empty (leave it out to watch the one cluster of the top level)");
    }
    if let Some(key) = PER_CLUSTER.iter().find(|k| top.contains_key(**k)) {
        bail!("invalid {key}: with clusters:, each cluster sets its own (move it into each entry)");
    }
    let mut entries = Vec::new();
    for (i, entry) in list.into_iter().enumerate() {
        let Value::Mapping(mut settings) = entry else {
            bail!("invalid clusters[{i}]: a mapping with a name and the cluster's settings");
        };
        let name = match settings.remove("name") {
            Some(Value::String(name)) => {
                name.parse::<ClusterName>().with_context(|| format!("invalid clusters[{i}].name"))?
            }
            Some(other) => bail!(
                "invalid clusters[{i}].name: {} is not a cluster name",
                serde_norway::to_string(&other).unwrap_or_default().trim()
            ),
            None => bail!("invalid clusters[{i}]: no name"),
        };
        if settings.contains_key("clusters") {
            bail!("invalid clusters[{i}].clusters: an entry is one cluster");
        }
        if let Some(key) = PROCESS_WIDE.iter().find(|k| settings.contains_key(**k)) {
            bail!("invalid clusters[{i}].{key}: it is the whole process's; set it at the top level");
        }
        if entries.iter().any(|e: &ClusterEntry| e.name == name) {
            bail!("invalid clusters[{i}].name: {:?} is given twice", name.as_str());
        }
        entries.push(ClusterEntry { name, settings });
    }
    Ok((top, entries))
}

/// `entry`'s settings over `top` (the file's top level with the flags and
/// variables over it): what the entry sets wins; the process's settings stay
/// at the top; the roots get the entry's name appended.
pub(crate) fn over_top(top: &Mapping, entry: &ClusterEntry) -> Mapping {
    let mut shared = top.clone();
    for key in PROCESS_WIDE.iter().chain(&ROOTS) {
        shared.remove(*key);
    }
    let mut root_prefix = None;
    if let Some(Value::Mapping(cluster)) = shared.get_mut("cluster") {
        root_prefix = cluster.remove("etcd_prefix");
    }
    let mut settings = merged(shared, entry.settings.clone());
    let name = entry.name.as_str();
    if let (None, Some(Value::String(root))) = (settings.get("data_dir"), top.get("data_dir")) {
        let dir = Path::new(root).join(name).display().to_string();
        settings.insert("data_dir".into(), dir.into());
    }
    let cluster = settings.entry("cluster".into()).or_insert_with(|| Value::Mapping(Mapping::new()));
    if let Value::Mapping(cluster) = cluster
        && !cluster.contains_key("etcd_prefix")
    {
        let root = root_prefix.as_ref().and_then(Value::as_str).unwrap_or("/kshard/lag").trim_end_matches('/');
        cluster.insert("etcd_prefix".into(), format!("{root}/{name}").into());
    }
    settings
}

#[cfg(test)]
mod tests {
    use super::*;

    fn split_text(yaml: &str) -> Result<(Mapping, Vec<ClusterEntry>)> {
        split(settings_of(yaml)?)
    }

    fn get<'a>(m: &'a Mapping, path: &[&str]) -> Option<&'a Value> {
        let (last, parents) = path.split_last()?;
        let mut at = m;
        for p in parents {
            at = at.get(*p)?.as_mapping()?;
        }
        at.get(*last)
    }

    #[test]
    fn entries_merge_over_the_top_level() {
        let (top, entries) = split_text(
            "listen: 0.0.0.0:1\ndata_dir: /var/lib/kshard\ntls:\n  enabled: true\n  ca_file: /ca.pem\n\
             groups:\n  ignore: ['tmp-.*']\nclusters:\n\
             - name: eu\n  brokers: eu:9092\n  tls:\n    ca_file: /eu.pem\n\
             - name: us\n  brokers: us:9092\n  data_dir: /srv/us\n  groups:\n    ignore: []\n",
        )
        .expect("valid");
        assert!(top.get("clusters").is_none() && top.get("listen").is_some());
        let [eu, us] = &entries[..] else { panic!("two clusters: {entries:?}") };
        assert_eq!(eu.name.as_str(), "eu");
        let (eu, us) = (over_top(&top, eu), over_top(&top, us));
        assert_eq!(get(&eu, &["brokers"]).and_then(Value::as_str), Some("eu:9092"));
        assert_eq!(get(&eu, &["tls", "enabled"]).and_then(Value::as_bool), Some(true), "inherited");
        assert_eq!(get(&eu, &["tls", "ca_file"]).and_then(Value::as_str), Some("/eu.pem"), "its own");
        assert!(get(&eu, &["listen"]).is_none(), "process-wide keys stay at the top");
        assert_eq!(get(&eu, &["data_dir"]).and_then(Value::as_str), Some("/var/lib/kshard/eu"), "under the root");
        assert_eq!(get(&us, &["data_dir"]).and_then(Value::as_str), Some("/srv/us"), "its own");
        assert_eq!(get(&eu, &["cluster", "etcd_prefix"]).and_then(Value::as_str), Some("/kshard/lag/eu"));
        assert_eq!(get(&us, &["groups", "ignore"]).and_then(Value::as_sequence).map(Vec::len), Some(0));
    }

    #[test]
    fn bad_entries_are_named() {
        let err = |yaml: &str| format!("{:#}", split_text(yaml).expect_err("invalid"));
        assert!(err("clusters: []\n").contains("invalid clusters: empty"));
        assert!(err("clusters: {a: 1}\n").contains("invalid clusters:"));
        assert!(err("clusters:\n- brokers: a:1\n").contains("clusters[0]: no name"));
        assert!(err("clusters:\n- name: a/b\n").contains("clusters[0].name"));
        assert!(err("clusters:\n- name: a\n- name: a\n").contains("clusters[1].name"));
        assert!(err("clusters:\n- name: a\n- name: b\n  listen: 0.0.0.0:1\n").contains("clusters[1].listen"));
        assert!(err("- 1\n").contains("not a mapping"));
        assert!(err("brokers: a:1\nclusters:\n- name: a\n").contains("invalid brokers: with clusters:"));
    }
}
