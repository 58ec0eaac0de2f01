//! docs/settings.md (with docs/otlp.md for `otlp:`) is checked against the
//! settings' model: every key of
//! the file's shape and every flag and variable of `kshard serve` is in it,
//! every setting its table names is one of the model's, and every example
//! in it parses. A setting cannot be added without its documentation, nor
//! left in the table once it is gone.

use std::collections::BTreeSet;

use clap::CommandFactory;
use serde_norway::{Mapping, Value};

use crate::settings_file::FileConfig;

/// docs/`name`.
fn page(name: &str) -> String {
    let path = format!("{}/../../docs/{name}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// docs/settings.md, and the page it sends `otlp:` to.
fn settings_md() -> String {
    ["settings.md", "otlp.md"].map(page).join("\n")
}

/// The YAML examples of the page.
fn examples(page: &str) -> Vec<String> {
    page.split("```yaml\n").skip(1).filter_map(|block| block.split("\n```").next()).map(str::to_owned).collect()
}

/// Every key path under `m` (`a` and `a.b`), down to what is not a
/// mapping of settings; `maps` are keys whose mappings are data (their keys
/// are the user's), not settings.
fn paths(m: &Mapping, prefix: &str, maps: &[&str], out: &mut BTreeSet<String>) {
    for (key, value) in m {
        let Some(key) = key.as_str() else { continue };
        let path = if prefix.is_empty() { key.to_owned() } else { format!("{prefix}.{key}") };
        match value {
            Value::Mapping(inner) if !maps.contains(&path.as_str()) => paths(inner, &path, maps, out),
            _ => {
                out.insert(path);
            }
        }
    }
}

/// The settings whose values are mappings of the user's keys.
const DATA_MAPS: [&str; 3] = ["kafka_properties", "otlp.headers", "otlp.resource_attributes"];

/// Every key the model has, as paths.
fn model_keys() -> BTreeSet<String> {
    let Value::Mapping(model) = serde_norway::to_value(FileConfig::default()).expect("serializes") else {
        panic!("the model is a mapping")
    };
    let mut keys = BTreeSet::new();
    paths(&model, "", &DATA_MAPS, &mut keys);
    keys.insert("clusters".to_owned());
    keys
}

/// Every key the page names: in a code span, or in an example.
fn documented_keys(page: &str) -> BTreeSet<String> {
    let mut keys: BTreeSet<String> = page.split('`').skip(1).step_by(2).map(str::to_owned).collect();
    for example in examples(page) {
        let Ok(Value::Mapping(m)) = serde_norway::from_str::<Value>(&example) else { continue };
        paths(&m, "", &DATA_MAPS, &mut keys);
        // `clusters:` entries are settings too, under the same keys.
        if let Some(Value::Sequence(entries)) = m.get("clusters") {
            for entry in entries.iter().filter_map(Value::as_mapping) {
                paths(entry, "", &DATA_MAPS, &mut keys);
            }
        }
    }
    keys
}

#[test]
fn every_setting_of_the_model_is_documented() {
    let page = settings_md();
    let documented = documented_keys(&page);
    let missing: Vec<_> = model_keys().into_iter().filter(|k| !documented.contains(k)).collect();
    assert!(missing.is_empty(), "settings not in docs/settings.md (in an example or a code span): {missing:?}");
}

#[test]
fn every_setting_the_table_names_is_the_models() {
    let page = page("settings.md");
    let model = model_keys();
    let mut unknown = Vec::new();
    for row in page.lines().filter(|l| l.starts_with("| `")) {
        let first = row.split('|').nth(1).unwrap_or_default();
        for key in first.split('`').skip(1).step_by(2) {
            if !model.contains(key) && !model.iter().any(|k| k.starts_with(&format!("{key}."))) {
                unknown.push(key.to_owned());
            }
        }
    }
    assert!(unknown.is_empty(), "settings in docs/settings.md's table that the model does not have: {unknown:?}");
}

#[test]
fn every_flag_and_variable_of_serve_is_documented() {
    let page = settings_md();
    let cli = crate::Cli::command();
    let serve = cli.find_subcommand("serve").expect("serve");
    let mut missing = Vec::new();
    for arg in serve.get_arguments() {
        if let Some(long) = arg.get_long() {
            let flag = format!("`--{long}`");
            if !page.contains(&flag) {
                missing.push(flag);
            }
        }
        if let Some(env) = arg.get_env().and_then(|e| e.to_str())
            && !page.contains(&format!("`{env}`"))
        {
            missing.push(env.to_owned());
        }
    }
    assert!(missing.is_empty(), "flags and variables of serve not in docs/settings.md: {missing:?}");
}

#[test]
fn every_example_is_a_valid_configuration() {
    for example in examples(&settings_md()) {
        let top = crate::settings_file::settings_of(&example).unwrap_or_else(|e| panic!("{e:#}\n{example}"));
        let (top, entries) = crate::serve_clusters::split(top).unwrap_or_else(|e| panic!("{e:#}\n{example}"));
        let parsed: anyhow::Result<FileConfig> = crate::settings_file::parse(top.clone());
        parsed.unwrap_or_else(|e| panic!("{e:#}\n{example}"));
        for entry in &entries {
            let parsed: anyhow::Result<FileConfig> =
                crate::settings_file::parse(crate::serve_clusters::over_top(&top, entry));
            parsed.unwrap_or_else(|e| panic!("{}: {e:#}\n{example}", entry.name));
        }
    }
}
