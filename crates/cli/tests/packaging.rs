//! What installs kshard: the Helm chart (`helm lint`, and `helm template`
//! rendered and read back: every object, the config kshard reads, the alert
//! rules and dashboard of `deploy/` inside), the systemd unit
//! (`systemd-analyze verify`) and the Dockerfile's shape (multi-stage, the
//! pinned toolchain, the binary only, a non-root user). helm comes from the
//! tools cache (scripts/install.sh builds it from the Go module proxy).

use std::path::{Path, PathBuf};
use std::process::Command;

use serde::Deserialize;
use serde_norway::Value;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn run(program: &Path, args: &[&str]) -> (bool, String) {
    let out = Command::new(program).args(args).output().expect("runs");
    (out.status.success(), format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)))
}

#[test]
fn the_helm_chart_lints_and_renders_what_deploy_holds() {
    let Some(helm) = kshard_testkit::tool("helm", "version") else {
        kshard_testkit::skipped("helm is not installed (scripts/install.sh builds it): the chart was not rendered");
        return;
    };
    let chart = root().join("deploy/helm/kshard");
    let chart = chart.to_str().expect("utf-8 path");
    let (ok, said) = run(&helm, &["lint", "--strict", chart]);
    assert!(ok, "helm lint: {said}");
    let (ok, rendered) = run(
        &helm,
        &[
            "template",
            "lag",
            chart,
            "--set",
            "serviceMonitor.enabled=true,prometheusRule.enabled=true,grafanaDashboard.enabled=true",
            "--set",
            "config.brokers=kafka-1:9092\\,kafka-2:9092,config.metrics_profile=kafka_exporter",
        ],
    );
    assert!(ok, "helm template: {rendered}");
    let docs: Vec<Value> = serde_norway::Deserializer::from_str(&rendered)
        .map(|d| Value::deserialize(d).expect("YAML"))
        .filter(|v| !v.is_null())
        .collect();
    let kinds: Vec<&str> = docs.iter().filter_map(|d| d["kind"].as_str()).collect();
    for kind in ["ConfigMap", "Service", "Deployment", "ServiceMonitor", "PrometheusRule"] {
        assert!(kinds.contains(&kind), "{kind} missing: {kinds:?}");
    }
    let find = |kind: &str, name: &str| {
        docs.iter()
            .find(|d| d["kind"].as_str() == Some(kind) && d["metadata"]["name"].as_str() == Some(name))
            .unwrap_or_else(|| panic!("no {kind} {name}: {rendered}"))
    };
    // The config kshard reads: the values given, as YAML.
    let config = find("ConfigMap", "lag-kshard")["data"]["kshard.yaml"].as_str().expect("kshard.yaml");
    let config: Value = serde_norway::from_str(config).expect("the config is YAML");
    assert_eq!(config["brokers"].as_str(), Some("kafka-1:9092,kafka-2:9092"));
    assert_eq!(config["metrics_profile"].as_str(), Some("kafka_exporter"));
    // The container: non-root, read-only, probes on /healthz and /ready/any.
    let deployment = find("Deployment", "lag-kshard");
    let pod = &deployment["spec"]["template"]["spec"];
    assert_eq!(pod["securityContext"]["runAsNonRoot"].as_bool(), Some(true));
    let container = &pod["containers"][0];
    assert_eq!(container["securityContext"]["readOnlyRootFilesystem"].as_bool(), Some(true));
    assert_eq!(container["livenessProbe"]["httpGet"]["path"].as_str(), Some("/healthz"));
    assert_eq!(container["readinessProbe"]["httpGet"]["path"].as_str(), Some("/ready/any"));
    let args: Vec<&str> = container["args"].as_sequence().expect("args").iter().filter_map(Value::as_str).collect();
    assert_eq!(args[..2], ["serve", "--config=/etc/kshard/kshard.yaml"]);
    // The alert rules and the dashboard are deploy/'s, unchanged.
    let alerts: Value = serde_norway::from_str(
        &std::fs::read_to_string(root().join("deploy/prometheus/kshard-alerts.yaml")).expect("alerts"),
    )
    .expect("YAML");
    assert_eq!(find("PrometheusRule", "lag-kshard")["spec"]["groups"], alerts["groups"]);
    let dashboard = find("ConfigMap", "lag-kshard-dashboard")["data"]["kshard-dashboard.json"].as_str().expect("json");
    let on_disk = std::fs::read_to_string(root().join("deploy/grafana/kshard-dashboard.json")).expect("dashboard");
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(dashboard).expect("JSON"),
        serde_json::from_str::<serde_json::Value>(&on_disk).expect("JSON")
    );
    // More than one replica shares the shards through etcd, or fails to render.
    let (ok, said) = run(&helm, &["template", "lag", chart, "--set", "replicaCount=2"]);
    assert!(!ok && said.contains("config.cluster.etcd"), "{said}");
    let (ok, said) =
        run(&helm, &["template", "lag", chart, "--set", "replicaCount=2,config.cluster.etcd[0]=http://etcd:2379"]);
    assert!(ok, "{said}");
}

#[test]
fn the_systemd_unit_verifies() {
    let Some(analyze) = ["systemd-analyze"]
        .into_iter()
        .map(PathBuf::from)
        .find(|p| Command::new(p).arg("--version").output().is_ok_and(|o| o.status.success()))
    else {
        kshard_testkit::skipped("systemd-analyze is not installed: the unit was not verified");
        return;
    };
    let unit = std::fs::read_to_string(root().join("deploy/systemd/kshard.service")).expect("unit");
    assert!(unit.contains("ExecStart=/usr/local/bin/kshard serve --config /etc/kshard/kshard.yaml"), "{unit}");
    // Verified against this build's binary (verify checks that ExecStart exists).
    let dir = std::env::temp_dir().join(kshard_testkit::unique_name("kshard-unit"));
    std::fs::create_dir_all(&dir).expect("dir");
    let path = dir.join("kshard.service");
    std::fs::write(&path, unit.replace("/usr/local/bin/kshard", env!("CARGO_BIN_EXE_kshard"))).expect("write");
    let (ok, said) = run(&analyze, &["verify", path.to_str().expect("utf-8 path")]);
    let _ = std::fs::remove_dir_all(&dir);
    assert!(ok && said.trim().is_empty(), "systemd-analyze verify: {said}");
}

/// The Dockerfile's shape, read as text: it is not built here (no container
/// engine on the test machines, and base images come from a registry they
/// cannot reach), so this checks what it says, not that it builds.
#[test]
fn the_dockerfile_pins_the_toolchain_and_its_image_holds_the_binary_alone_run_as_non_root() {
    let text = std::fs::read_to_string(root().join("Dockerfile")).expect("Dockerfile");
    let pinned = std::fs::read_to_string(root().join("rust-toolchain.toml")).expect("toolchain");
    let pinned = pinned.lines().find_map(|l| l.strip_prefix("channel = ")).expect("channel").trim_matches('"');
    let lines: Vec<&str> = text.lines().map(str::trim).filter(|l| !l.starts_with('#') && !l.is_empty()).collect();
    let stages: Vec<usize> = lines.iter().enumerate().filter(|(_, l)| l.starts_with("FROM ")).map(|(i, _)| i).collect();
    assert_eq!(stages.len(), 2, "a build stage and a runtime stage: {lines:#?}");
    assert!(
        lines[stages[0]].starts_with(&format!("FROM rust:{pinned}-")),
        "the pinned toolchain: {}",
        lines[stages[0]]
    );
    let runtime = &lines[stages[1]..];
    let copies: Vec<&&str> = runtime.iter().filter(|l| l.starts_with("COPY")).collect();
    assert_eq!(copies, [&"COPY --from=build /out/kshard /usr/local/bin/kshard"], "the binary only");
    let user = runtime.iter().find_map(|l| l.strip_prefix("USER ")).expect("a USER in the runtime stage");
    assert!(!matches!(user.split(':').next(), Some("0" | "root")), "non-root: {user}");
    assert!(runtime.iter().any(|l| l.starts_with("ENTRYPOINT [\"/usr/local/bin/kshard\"]")));
    let ignored = std::fs::read_to_string(root().join(".dockerignore")).expect(".dockerignore");
    assert!(ignored.lines().any(|l| l == "target"), "the build context leaves target/ out");
}
