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
//! itself wins over them.

use std::collections::BTreeSet;

use anyhow::{Context, Result, bail};
use serde_norway::{Mapping, Value};

/// The keys only the top level may set.
const PROCESS_WIDE: [&str; 7] =
    ["listen", "metrics_namespace", "metrics_profile", "cluster_label", "web_config_file", "log_format", "otlp"];

/// The keys whose top-level value is a root each cluster's goes under.
const ROOTS: [&str; 1] = ["data_dir"];

/// The keys each entry must set itself: inherited, they would watch one
/// cluster twice, or mix two clusters' shards in one recovery log.
const PER_CLUSTER: [&str; 2] = ["brokers", "recovery_log_topic"];

/// A cluster's entry, merged over the top level.
#[derive(Debug)]
pub(crate) struct ClusterEntry {
    pub(crate) name: String,
    /// Its settings as a whole file would have them.
    pub(crate) settings: Mapping,
    /// The settings the entry sets itself, as paths (`granularity`,
    /// `tls.ca_file`, `cluster.etcd_prefix`…): flags and environment
    /// variables give the top level's, which these override.
    pub(crate) own: BTreeSet<String>,
}

/// The top level without `clusters:`, and each cluster's entry over it;
/// `clusters` names nothing when the file has none.
pub(crate) fn split(mut top: Mapping) -> Result<(Mapping, Vec<ClusterEntry>)> {
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
    let mut shared = top.clone();
    for key in PROCESS_WIDE.iter().chain(&ROOTS) {
        shared.remove(*key);
    }
    if let Some(Value::Mapping(cluster)) = shared.get_mut("cluster") {
        cluster.remove("etcd_prefix");
    }
    let mut entries = Vec::new();
    for (i, entry) in list.into_iter().enumerate() {
        let Value::Mapping(mut entry) = entry else {
            bail!("invalid clusters[{i}]: a mapping with a name and the cluster's settings");
        };
        let name = match entry.remove("name") {
            Some(Value::String(name)) if kshard_lag::service::valid_cluster_name(&name) => name,
            Some(other) => bail!(
                "invalid clusters[{i}].name: {} (letters, digits, '.', '_' and '-': it is a label value and a path)",
                serde_norway::to_string(&other).unwrap_or_default().trim()
            ),
            None => bail!("invalid clusters[{i}]: no name"),
        };
        if let Some(key) = PROCESS_WIDE.iter().find(|k| entry.contains_key(**k)) {
            bail!("invalid clusters[{i}].{key}: it is the whole process's; set it at the top level");
        }
        let mut own = BTreeSet::new();
        paths(&entry, "", &mut own);
        let settings = merged(shared.clone(), entry);
        entries.push(ClusterEntry { name, settings, own });
    }
    Ok((top, entries))
}

/// The paths of every setting in `m` (`a`, and `a.b` under a mapping).
fn paths(m: &Mapping, prefix: &str, out: &mut BTreeSet<String>) {
    for (key, value) in m {
        let Some(key) = key.as_str() else { continue };
        let path = if prefix.is_empty() { key.to_owned() } else { format!("{prefix}.{key}") };
        if let Value::Mapping(inner) = value {
            paths(inner, &path, out);
        }
        out.insert(path);
    }
}

/// `over` on `base`: mappings merge key by key, anything else replaces.
fn merged(mut base: Mapping, over: Mapping) -> Mapping {
    for (key, value) in over {
        let value = match (base.remove(&key), value) {
            (Some(Value::Mapping(b)), Value::Mapping(o)) => Value::Mapping(merged(b, o)),
            (_, value) => value,
        };
        base.insert(key, value);
    }
    base
}

/// A cluster's merged settings as a file's. Through YAML text, so that an
/// error names the setting (without a line: the text is not the user's).
pub(crate) fn parse<T: serde::de::DeserializeOwned>(settings: Mapping) -> Result<T> {
    let text = serde_norway::to_string(&settings).context("writing the settings")?;
    serde_norway::from_str(&text).map_err(|e| {
        let message = e.to_string();
        let message = message.split(" at line ").next().unwrap_or(&message).to_owned();
        anyhow::anyhow!(message)
    })
}

/// The YAML text's top-level mapping (empty for an empty file).
pub(crate) fn top_level(text: &str) -> Result<Mapping> {
    match serde_norway::from_str::<Value>(text).context("not YAML")? {
        Value::Mapping(m) => Ok(m),
        Value::Null => Ok(Mapping::new()),
        _ => bail!("the file is not a mapping of settings"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn split_text(yaml: &str) -> Result<(Mapping, Vec<ClusterEntry>)> {
        split(top_level(yaml)?)
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
        assert_eq!(eu.name, "eu");
        assert_eq!(get(&eu.settings, &["brokers"]).and_then(Value::as_str), Some("eu:9092"));
        assert_eq!(get(&eu.settings, &["tls", "enabled"]).and_then(Value::as_bool), Some(true), "inherited");
        assert_eq!(get(&eu.settings, &["tls", "ca_file"]).and_then(Value::as_str), Some("/eu.pem"), "its own");
        assert!(get(&eu.settings, &["listen"]).is_none(), "process-wide keys stay at the top");
        assert!(get(&eu.settings, &["data_dir"]).is_none() && !eu.own.contains("data_dir"), "a root, not inherited");
        assert!(us.own.contains("data_dir") && us.own.contains("groups.ignore") && eu.own.contains("tls.ca_file"));
        assert_eq!(get(&us.settings, &["groups", "ignore"]).and_then(Value::as_sequence).map(Vec::len), Some(0));
    }

    #[test]
    fn bad_entries_are_named() {
        let err = |yaml: &str| format!("{:#}", split_text(yaml).expect_err("invalid"));
        assert!(err("clusters: []\n").contains("invalid clusters: empty"));
        assert!(err("clusters: {a: 1}\n").contains("invalid clusters:"));
        assert!(err("clusters:\n- brokers: a:1\n").contains("clusters[0]: no name"));
        assert!(err("clusters:\n- name: a/b\n").contains("clusters[0].name"));
        assert!(err("clusters:\n- name: a\n- name: b\n  listen: 0.0.0.0:1\n").contains("clusters[1].listen"));
        assert!(err("- 1\n").contains("not a mapping"));
        assert!(err("brokers: a:1\nclusters:\n- name: a\n").contains("invalid brokers: with clusters:"));
    }
}
