//! The published dashboards and alert rules of the exporters kshard stands
//! in for, unchanged (`tests/published/`, their sources in `SOURCES.md`),
//! against Debian's real Prometheus scraping kshard, once per metrics
//! profile, over the real broker: every query of every dashboard, its
//! variables resolved as Grafana resolves them, and the expression of every
//! alert rule, returns data for the test's real groups. The few queries
//! that chart something other than the exporter's lag families (the
//! exporter's own JVM or Go runtime, the brokers' JMX metrics) are listed in
//! [`NOT_KSHARDS`], each with why.

mod common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use common::*;
use kshard_kafka::{Client, GroupConsumer, OffsetCommitter, RecordWriter};
use kshard_lag::service::{ProcessOptions, ServeOptions};
use kshard_lag::{MonitorSettings, NameFilter, Profile};
use kshard_testkit::grafana::Dashboard;
use kshard_testkit::{Broker, Prometheus, unique_name};

/// Each published dashboard, with the profile whose names it queries.
const DASHBOARDS: [(&str, Profile); 7] = [
    ("kafka_exporter_overview.json", Profile::KafkaExporter),
    ("strimzi-kafka-exporter.json", Profile::KafkaExporter),
    ("Kafka_Lag_Exporter_Dashboard.json", Profile::KafkaLagExporter),
    ("kminion-cluster.json", Profile::Kminion),
    ("kminion-groups.json", Profile::Kminion),
    ("kminion-topic.json", Profile::Kminion),
    ("burrow-kafka-lab-kafka_burrow.json", Profile::Burrow),
];

/// Published alert rule files (Prometheus's format, or a PrometheusRule's
/// `spec`).
const RULES: [&str; 2] = [
    "strimzi-prometheus-kafka-exporter-topic-rules-group.yaml",
    "awesome-prometheus-alerts-danielqsj-kafka-exporter.yml",
];

/// Queries of a dashboard that chart what no lag exporter stands in for:
/// (file, a name the query holds, why). Each must match a query.
const NOT_KSHARDS: [(&str, &str, &str); 4] = [
    ("Kafka_Lag_Exporter_Dashboard.json", "jvm_", "the JVM of kafka-lag-exporter itself (kshard is no JVM)"),
    ("burrow-kafka-lab-kafka_burrow.json", "go_", "the Go runtime of Burrow itself (kshard is not in Go)"),
    (
        "strimzi-kafka-exporter.json",
        "kafka_cluster_partition_atminisr",
        "the brokers' own JMX metric (Strimzi's kafka-metrics.yaml on each broker), not kafka_exporter's",
    ),
    (
        "strimzi-kafka-exporter.json",
        "kafka_cluster_partition_underminisr",
        "the brokers' own JMX metric (Strimzi's kafka-metrics.yaml on each broker), not kafka_exporter's",
    ),
];

/// The labels a Kubernetes scrape adds (Strimzi's PodMonitor adds
/// `strimzi_io_cluster`; kafka-lag-exporter's and Strimzi's dashboards
/// choose by `namespace`), as docs/dashboards.md says to add them.
const TARGET_LABELS: &str = "{namespace: kafka, strimzi_io_cluster: my-cluster}";

#[test]
#[ignore = "needs the real broker or etcd: scripts/test.sh runs it (or cargo test -- --include-ignored)"]
fn every_published_dashboard_and_rule_returns_data_from_kshard() {
    let broker = Broker::from_env_or_start();
    let client = Client::to_brokers(broker.brokers());
    let p = unique_name("dash");
    let topic = format!("{p}-orders");
    create_and_fill(&client, &topic, &[20, 20, 20]);
    // A live group that read everything, then fell 5 records behind on each
    // partition; and a group that only commits, behind on two partitions.
    let live = format!("{p}-live");
    let member = GroupConsumer::new(&client, &live, &[&topic]).expect("consumer");
    assert_eq!(member.consume(60, Duration::from_secs(60)).expect("consume"), 60);
    member.commit().expect("commit");
    let simple = format!("{p}-simple");
    OffsetCommitter::new(&client, &simple)
        .expect("committer")
        .commit(&[(&topic, 0, 4), (&topic, 1, 10)])
        .expect("commit");
    produce(&RecordWriter::new(&client).expect("producer"), &topic, &[5, 5, 5]);

    let ours = || MonitorSettings { topics: NameFilter::new(&[format!("{p}.*")], &[]).expect("filter"), ..only(&p) };
    let profiles = [Profile::Kminion, Profile::KafkaExporter, Profile::KafkaLagExporter, Profile::Burrow];
    let mut services: Vec<(Profile, TestService)> = profiles
        .into_iter()
        .map(|profile| {
            let options = ServeOptions {
                watermark_interval: Duration::from_millis(500),
                monitor: ours(),
                ..ServeOptions::new(client.settings().clone())
            };
            (profile, TestService::start_as(ProcessOptions::new(profile), vec![options]))
        })
        .collect();
    for (_, service) in &mut services {
        service.wait_ready();
    }
    let jobs: String = services
        .iter()
        .map(|(profile, service)| {
            format!(
                "  - job_name: kshard-{}\n    static_configs: [{{targets: ['{}'], labels: {TARGET_LABELS}}}]\n",
                profile.name(),
                service.addr()
            )
        })
        .collect();
    let prometheus = Prometheus::start(&format!(
        "global: {{scrape_interval: 1s, evaluation_interval: 1s}}\nscrape_configs:\n{jobs}"
    ));

    let dashboards: Vec<(&str, Dashboard)> = DASHBOARDS
        .iter()
        .map(|(file, _)| (*file, Dashboard::from_json(&published(file)).unwrap_or_else(|e| panic!("{file}: {e}"))))
        .collect();
    for (file, fragment, _) in NOT_KSHARDS {
        let d = &dashboards.iter().find(|(f, _)| *f == file).expect("a listed dashboard").1;
        assert!(d.targets.iter().any(|t| t.expr.contains(fragment)), "{file}: no query holds {fragment}");
    }
    let rules: Vec<(String, String)> = RULES.iter().flat_map(|file| alert_exprs(file)).collect();
    assert!(rules.len() >= 5, "the rule files' alerts: {rules:?}");

    // Everything asked again until each query has data: rates need two
    // scrapes, kshard's groups a refresh or two.
    let deadline = Instant::now() + Duration::from_secs(180);
    let prefer = |v: &str| v.contains(&p);
    loop {
        let mut missing: Vec<String> = Vec::new();
        let mut asked = 0;
        for (file, dashboard) in &dashboards {
            let values = match dashboard.resolve(&prometheus, &prefer) {
                Ok(v) => v,
                Err(e) => {
                    missing.push(format!("{file}: {e}"));
                    continue;
                }
            };
            for target in &dashboard.targets {
                asked += 1;
                let expr = values.interpolate(&target.expr);
                let not_kshards = NOT_KSHARDS.iter().any(|(f, name, _)| f == file && target.expr.contains(name));
                match prometheus.query(&expr) {
                    Ok(samples) if samples.is_empty() == not_kshards => {}
                    // Something else answers a query listed as not kshard's.
                    Ok(_) if not_kshards => panic!("{file}: {expr} has data, but NOT_KSHARDS lists it"),
                    Ok(_) => missing.push(format!("{file}, panel {:?}: no data for {expr}", target.panel)),
                    Err(e) => missing.push(format!("{file}, panel {:?}: {e}", target.panel)),
                }
            }
        }
        for (alert, expr) in &rules {
            asked += 1;
            match prometheus.query(expr) {
                Ok(samples) if !samples.is_empty() => {}
                Ok(_) => missing.push(format!("alert {alert}: no data for {expr}")),
                Err(e) => missing.push(format!("alert {alert}: {e}")),
            }
        }
        // Strimzi's dashboard before 2024-08 took its namespace from kafka_exporter's build info.
        asked += 1;
        if prometheus.label_values("namespace", Some("kafka_exporter_build_info")).unwrap_or_default() != ["kafka"] {
            missing.push("no namespace of kafka_exporter_build_info".to_owned());
        }
        if missing.is_empty() {
            eprintln!("{asked} queries of {} dashboards and {} alert rules answered", dashboards.len(), rules.len());
            break;
        }
        if Instant::now() > deadline {
            let targets = prometheus.targets().unwrap_or_default();
            panic!(
                "{} of {asked} queries without data after 180 s:\n{}\ntargets: {targets:?}",
                missing.len(),
                missing.join("\n")
            );
        }
        std::thread::sleep(Duration::from_secs(2));
    }
    drop(member);
}

/// Each alert rule of a published file (`groups:` at the top, or under a
/// PrometheusRule's `spec`): its name, and its expression without the
/// threshold it compares to (what must have data; the alert need not fire).
fn alert_exprs(file: &str) -> Vec<(String, String)> {
    let doc: serde_json::Value = serde_norway::from_str(&published(file)).unwrap_or_else(|e| panic!("{file}: {e}"));
    let groups = doc.get("spec").unwrap_or(&doc)["groups"].as_array().cloned().unwrap_or_default();
    let threshold = regex::Regex::new(r"\s*(==|!=|>=|<=|>|<)\s*-?[0-9.]+\s*$").expect("a regex");
    let mut out = BTreeMap::new();
    for rule in groups.iter().flat_map(|g| g["rules"].as_array().cloned().unwrap_or_default()) {
        if let (Some(alert), Some(expr)) = (rule["alert"].as_str(), rule["expr"].as_str()) {
            out.insert(format!("{file}: {alert}"), threshold.replace(expr.trim(), "").into_owned());
        }
    }
    out.into_iter().collect()
}

/// Each published file (dashboards, rules, Burrow's notifier templates) is
/// byte for byte the one its repository holds: its
/// git blob id is the one `SOURCES.md` gives with the file's commit.
#[test]
fn the_published_files_are_unchanged() {
    let sources = published("SOURCES.md");
    let templates = ["burrow-default-http-post.tmpl", "burrow-default-http-delete.tmpl", "burrow-default-email.tmpl"];
    for file in DASHBOARDS.iter().map(|(f, _)| *f).chain(RULES).chain(templates) {
        let section = sources.split(&format!("### {file}\n")).nth(1).unwrap_or_else(|| panic!("SOURCES.md: no {file}"));
        let blob = section
            .lines()
            .find_map(|l| l.strip_prefix("- git blob: `")?.strip_suffix('`'))
            .unwrap_or_else(|| panic!("SOURCES.md: no git blob of {file}"));
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/published").join(file);
        let Ok(out) = std::process::Command::new("git").arg("hash-object").arg(&path).output() else {
            kshard_testkit::skipped("git is not installed: the published files' blob ids were not checked");
            return;
        };
        assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), blob, "{file} differs from its source");
    }
}
