//! The shard spec file `kshard shards apply` reads and `kshard shards list
//! --format yaml` writes: a `common` mapping merged under every shard (its
//! `labels` key by key), and `shards`, each a spec (as `ShardSpec`'s fields),
//! or `{id, delete: true}`, either with the `revision` it was read at to be
//! applied only if the shard is still at it. A field no spec has is refused
//! by name, as is any entry that does not read.
//!
//! ```yaml
//! common:
//!   hot_standbys: 1
//!   labels: {app: sum}
//! shards:
//!   - id: sum-000
//!     sources: [{topic: events, partition: 0}]
//!     recovery_log: {topic: sum-log, partition: 0}
//!   - id: sum-009
//!     delete: true
//! ```

use anyhow::{Context, Result, bail};
use kshard_runtime::shard_specs::{Current, Desired};
use kshard_runtime::{RecoveryLog, ShardSpec};
use serde_norway::{Mapping, Value};

/// The shards `text` (a spec file) wants.
pub(crate) fn parse(text: &str) -> Result<Vec<Desired>> {
    let file: Value = serde_norway::from_str(text).context("the file is not YAML")?;
    let Value::Mapping(mut file) = file else { bail!("the file is not a mapping of `common` and `shards`") };
    if let Some(key) = file.keys().find(|k| !matches!(k.as_str(), Some("common" | "shards"))) {
        bail!("unknown key {} at the file's top (`common` and `shards` are)", name(key));
    }
    let common = match file.remove("common") {
        None | Some(Value::Null) => Mapping::new(),
        Some(Value::Mapping(m)) => m,
        Some(_) => bail!("`common` is not a mapping"),
    };
    let shards = match file.remove("shards") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Sequence(s)) => s,
        Some(_) => bail!("`shards` is not a list"),
    };
    let known = spec_fields();
    shards
        .into_iter()
        .enumerate()
        .map(|(i, entry)| {
            let id = entry.get("id").and_then(Value::as_str).unwrap_or("?").to_owned();
            desired(entry, &common, &known).with_context(|| format!("shard {} ({id})", i + 1))
        })
        .collect()
}

/// A mapping's key, quoted.
fn name(key: &Value) -> String {
    key.as_str().map_or_else(|| format!("{key:?}"), |k| format!("{k:?}"))
}

/// The fields of a spec, as it serializes.
fn spec_fields() -> Vec<String> {
    let spec = ShardSpec::new("x", vec![], RecoveryLog { topic: String::new(), partition: 0 });
    let mut fields: Vec<String> = match serde_norway::to_value(&spec) {
        Ok(Value::Mapping(m)) => m.keys().filter_map(Value::as_str).map(str::to_owned).collect(),
        _ => Vec::new(),
    };
    fields.push("refusals".into());
    fields
}

fn desired(entry: Value, common: &Mapping, known: &[String]) -> Result<Desired> {
    let Value::Mapping(mut entry) = entry else { bail!("not a mapping") };
    let revision = match entry.remove("revision") {
        None => None,
        Some(v) => Some(v.as_i64().context("`revision` is not a number")?),
    };
    let delete = match entry.remove("delete") {
        None => false,
        Some(v) => v.as_bool().context("`delete` is not true or false")?,
    };
    if let Some(key) =
        entry.keys().chain(common.keys()).find(|k| !k.as_str().is_some_and(|k| known.iter().any(|f| f == k)))
    {
        bail!("unknown field {} (a spec has {})", name(key), known.join(", "));
    }
    if delete {
        let id = entry.get("id").and_then(Value::as_str).context("no `id`")?;
        return Ok(Desired::Delete { id: id.to_owned(), revision });
    }
    let mut merged = common.clone();
    for (key, value) in entry {
        match (merged.get_mut(&key), value) {
            (Some(Value::Mapping(under)), Value::Mapping(over)) if key.as_str() == Some("labels") => {
                under.extend(over);
            }
            (_, value) => {
                merged.insert(key, value);
            }
        }
    }
    let spec: ShardSpec = serde_norway::from_value(Value::Mapping(merged)).context("not a shard spec")?;
    Ok(Desired::Put { spec, revision })
}

/// `shards` as a spec file, each with the revision it was read at.
pub(crate) fn write(shards: &[Current]) -> Result<String> {
    let mut entries = Vec::new();
    for c in shards {
        let Value::Mapping(mut m) = serde_norway::to_value(&c.spec)? else { bail!("a spec is not a mapping") };
        m.insert("revision".into(), c.revision.into());
        entries.push(Value::Mapping(m));
    }
    let mut file = Mapping::new();
    file.insert("shards".into(), Value::Sequence(entries));
    Ok(serde_norway::to_string(&Value::Mapping(file))?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn common_fields_go_under_every_shard_and_labels_merge_key_by_key() {
        let text = "common:\n  hot_standbys: 2\n  labels: {app: sum, env: prod}\nshards:\n  - id: a\n    sources: [{topic: t, partition: 0}]\n    recovery_log: {topic: l, partition: 0}\n    labels: {env: dev}\n    revision: 7\n  - id: b\n    delete: true\n";
        let wanted = parse(text).expect("parses");
        let Desired::Put { spec, revision } = &wanted[0] else { panic!("a put: {wanted:?}") };
        assert_eq!((spec.hot_standbys, *revision), (2, Some(7)));
        assert_eq!(spec.labels.get("app").map(String::as_str), Some("sum"));
        assert_eq!(spec.labels.get("env").map(String::as_str), Some("dev"), "the shard's own wins");
        assert_eq!(spec.max_txn_duration_ms, 1000, "a spec's default");
        assert_eq!(wanted[1], Desired::Delete { id: "b".into(), revision: None });
    }

    #[test]
    fn a_listed_file_reads_back_as_the_same_shards_at_their_revisions() {
        let source = kshard_runtime::Source { topic: "t".into(), partition: 1, min_offset: 0 };
        let mut spec = ShardSpec::new("s-001", vec![source], RecoveryLog { topic: "l".into(), partition: 1 });
        spec.labels.insert("app".into(), "x".into());
        let text = write(&[Current { spec: spec.clone(), revision: 12 }]).expect("writes");
        assert_eq!(parse(&text).expect("parses"), vec![Desired::Put { spec, revision: Some(12) }]);
    }

    #[test]
    fn a_typo_or_a_bad_entry_is_refused_by_name() {
        let typo = "shards:\n  - id: a\n    hot_standby: 1\n";
        let e = format!("{:#}", parse(typo).expect_err("a typo"));
        assert!(e.contains("shard 1 (a)") && e.contains("hot_standby"), "{e}");
        let missing = "shards:\n  - id: a\n    hot_standbys: 1\n";
        let e = format!("{:#}", parse(missing).expect_err("no sources"));
        assert!(e.contains("not a shard spec") && e.contains("sources"), "{e}");
        assert!(parse("shard: []").is_err());
        assert!(parse("shards: {}").is_err());
    }
}
