//! The Grafana dashboard and the Prometheus alert rules in `deploy/`: every
//! kshard metric they name is one kshard exports (the families read from a
//! render of kshard's own metrics, not from a list), the rules have the shape
//! Prometheus loads, and — when `promtool` is installed (scripts/install.sh
//! takes it out of Debian's prometheus package) — `promtool check rules`
//! passes.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use kshard_lag::{Log, Metrics, Monitor, MonitorSettings, SelfTimings, Watermark, Watermarks};
use serde_json::Value;

fn deploy(file: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy").join(file)
}

/// Every metric family kshard renders (ready, with groups and shards), and
/// the runtime's.
fn exported() -> BTreeSet<String> {
    let monitor = Arc::new(Monitor::new(MonitorSettings::default()));
    monitor.track(Log::Offsets, 0, 0, 1);
    monitor.start_log(Log::Offsets);
    let (k, v) =
        kshard_offsets::Record::offset_commit("g", "t", 0, Some(kshard_offsets::OffsetCommitValue::new(3, 1, 0)))
            .encode();
    monitor.apply(0, 0, Some(&k), v.as_deref()).expect("applies");
    let mut w = Watermarks::default();
    w.insert("t", 0, Watermark { low: 0, high: 5 });
    monitor.set_watermarks(w, true, monitor.now());
    let shared = kshard_runtime::NodeShared::default();
    shared.metrics.status("offsets-000", kshard_runtime::ReplicaCode::Primary);
    shared.metrics.behind("offsets-000", 0);
    let member = kshard_lag::LocalMember::default();
    member.set(shared.clone(), "m".into());
    let metrics = Metrics::with_member("kshard", Arc::clone(&monitor), member, Arc::new(SelfTimings::default()));
    let text = metrics.render().expect("renders") + &shared.metrics.encode();
    text.lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split_whitespace().next())
        .map(str::to_owned)
        .collect()
}

/// The `kshard_…` metric names in a PromQL expression.
fn names(expr: &str) -> Vec<String> {
    let mut out = Vec::new();
    let bytes = expr.as_bytes();
    let mut i = 0;
    while let Some(at) = expr[i..].find("kshard_") {
        let start = i + at;
        let boundary = start == 0 || !(bytes[start - 1].is_ascii_alphanumeric() || bytes[start - 1] == b'_');
        let end = start
            + expr[start..].find(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).unwrap_or(expr.len() - start);
        if boundary {
            out.push(expr[start..end].to_owned());
        }
        i = end;
    }
    out
}

/// Is `name` a sample name of an exported family (a counter's `_total` too)?
fn is_exported(name: &str, families: &BTreeSet<String>) -> bool {
    families.contains(name) || name.strip_suffix("_total").is_some_and(|f| families.contains(f))
}

#[test]
fn the_dashboard_names_only_exported_metrics() {
    let families = exported();
    assert!(families.contains("kshard_kafka_consumer_group_status"), "{families:?}");
    let text = std::fs::read_to_string(deploy("grafana/kshard-dashboard.json")).expect("the dashboard");
    let dashboard: Value = serde_json::from_str(&text).expect("the dashboard is JSON");
    let panels = dashboard["panels"].as_array().expect("panels");
    assert!(panels.len() >= 8, "a dashboard worth the name");
    let ids: BTreeSet<i64> = panels.iter().filter_map(|p| p["id"].as_i64()).collect();
    assert_eq!(ids.len(), panels.len(), "panel ids are unique");
    let mut named = 0;
    for panel in panels {
        for target in panel["targets"].as_array().expect("targets") {
            let expr = target["expr"].as_str().expect("expr");
            for name in names(expr) {
                assert!(is_exported(&name, &families), "{}: {name} is not a metric kshard exports", panel["title"]);
                named += 1;
            }
        }
    }
    assert!(named >= 10, "the dashboard reads kshard's metrics");
    let variables: Vec<&str> = dashboard["templating"]["list"]
        .as_array()
        .expect("variables")
        .iter()
        .filter_map(|v| v["name"].as_str())
        .collect();
    assert_eq!(variables, ["datasource", "cluster", "group"]);
    // Every query is filtered by the cluster chosen (several clusters: the same
    // group name in two clusters is two groups).
    for panel in dashboard["panels"].as_array().expect("panels") {
        for target in panel["targets"].as_array().into_iter().flatten() {
            let expr = target["expr"].as_str().expect("expr");
            let selectors = expr.matches("kshard_").count();
            assert_eq!(expr.matches("cluster=~\"$cluster\"").count(), selectors, "{expr}");
            if expr.contains(" by (") {
                assert!(expr.contains(" by (cluster, "), "{expr} keeps the clusters apart");
            }
        }
    }
}

#[test]
fn the_alert_rules_load_and_name_only_exported_metrics() {
    let families = exported();
    let path = deploy("prometheus/kshard-alerts.yaml");
    let rules: serde_json::Value =
        serde_norway::from_str(&std::fs::read_to_string(&path).expect("the rules")).expect("the rules are YAML");
    let mut alerts = BTreeSet::new();
    for group in rules["groups"].as_array().expect("groups") {
        assert!(group["name"].is_string(), "{group}");
        for rule in group["rules"].as_array().expect("rules") {
            let alert = rule["alert"].as_str().expect("an alert name");
            assert!(alerts.insert(alert.to_owned()), "{alert} twice");
            let expr = rule["expr"].as_str().expect("expr");
            let named = names(expr);
            assert!(!named.is_empty(), "{alert} reads a kshard metric");
            for name in named {
                assert!(is_exported(&name, &families), "{alert}: {name} is not a metric kshard exports");
            }
            if let Some(duration) = rule.get("for") {
                let d = duration.as_str().expect("for is a duration");
                assert!(
                    d.len() > 1 && d.ends_with(['s', 'm', 'h']) && d[..d.len() - 1].parse::<u32>().is_ok(),
                    "{alert}: {d}"
                );
            }
            assert!(["warning", "critical"].contains(&rule["labels"]["severity"].as_str().unwrap_or("")), "{alert}");
            assert!(
                rule["annotations"]["summary"].is_string() && rule["annotations"]["description"].is_string(),
                "{alert}"
            );
        }
    }
    for wanted in
        ["KafkaConsumerGroupError", "KafkaConsumerGroupRecordsLost", "KafkaConsumerGroupLagHigh", "KshardNotReady"]
    {
        assert!(alerts.contains(wanted), "{wanted} missing: {alerts:?}");
    }

    // And Prometheus's own checker, where it is installed.
    match kshard_testkit::promtool() {
        Some(promtool) => {
            let out =
                std::process::Command::new(&promtool).args(["check", "rules"]).arg(&path).output().expect("promtool");
            assert!(
                out.status.success(),
                "promtool check rules: {}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        None => kshard_testkit::skipped("promtool is not installed: the rules were checked by this test's parser only"),
    }
}

/// `deploy/prometheus/kshard-objectives.yaml` is what `kshard objectives`
/// makes of `objectives-example.yaml` today, and promtool's tests of it
/// (`kshard-objectives.test.yaml`: a group burning its budget fast alerts,
/// one under the bound keeps its budget) pass.
#[test]
fn the_objectives_rules_are_kshards_and_pass_promtools_tests() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_kshard"))
        .args(["objectives", "--config"])
        .arg(deploy("prometheus/objectives-example.yaml"))
        .env_remove("KSHARD_CONFIG")
        .output()
        .expect("kshard objectives");
    assert!(out.status.success(), "kshard objectives: {}", String::from_utf8_lossy(&out.stderr));
    let made = String::from_utf8(out.stdout).expect("UTF-8");
    let kept = std::fs::read_to_string(deploy("prometheus/kshard-objectives.yaml")).expect("the rules");
    assert_eq!(
        made, kept,
        "deploy/prometheus/kshard-objectives.yaml is stale: run kshard objectives --config deploy/prometheus/objectives-example.yaml"
    );
    let Some(promtool) = kshard_testkit::promtool() else {
        kshard_testkit::skipped("promtool is not installed: the objectives' rules were not tested");
        return;
    };
    for args in [&["check", "rules", "kshard-objectives.yaml"][..], &["test", "rules", "kshard-objectives.test.yaml"]] {
        let out = std::process::Command::new(&promtool)
            .args(args)
            .current_dir(deploy("prometheus"))
            .output()
            .expect("promtool");
        assert!(
            out.status.success(),
            "promtool {}: {}{}",
            args.join(" "),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}
