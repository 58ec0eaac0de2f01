//! Streams groups (KIP-1071) from a real Kafka Streams application on the
//! streams rebalance protocol (`scripts/java/StreamsApp.java`): `kshard
//! serve` shows the group with its kind, its member's process and active
//! tasks (every partition of the input topic, shown as the member's
//! assignment too), its topology (source topic, the state store's
//! changelog) and the lag of its input topic, which reaches 0 as the
//! application commits.

mod common;

use std::time::Duration;

use common::{TestService, create_and_fill, only, until};
use kshard_kafka::Client;
use kshard_lag::service::ServeOptions;
use kshard_testkit::{Broker, streams_app, unique_name};

#[test]
#[ignore = "needs the real broker or etcd: scripts/test.sh runs it (or cargo test -- --include-ignored)"]
fn a_kafka_streams_application_is_shown_with_its_tasks_and_topology() {
    let broker = Broker::from_env_or_start();
    let settings = Client::to_brokers(broker.brokers());
    let prefix = unique_name("streams");
    let (input, output, app) = (format!("{prefix}-in"), format!("{prefix}-out"), format!("{prefix}-app"));
    create_and_fill(&settings, &input, &[10, 10]);
    create_and_fill(&settings, &output, &[0, 0]);
    let _running = streams_app(broker.brokers(), &app, &input, &output, 120);

    let mut service = TestService::start(ServeOptions {
        watermark_interval: Duration::from_millis(500),
        monitor: only(&prefix),
        ..ServeOptions::new(settings.settings().clone())
    });
    service.wait_ready();
    let detail =
        until("the streams group, its tasks and no lag", Duration::from_secs(90), Duration::from_millis(500), || {
            let (status, body) = service.get(&format!("/api/group?id={app}"));
            if status != 200 {
                return Err(format!("{status}: {body}"));
            }
            let g: serde_json::Value = serde_json::from_str(&body).expect("JSON");
            let members = g["member_list"].as_array().cloned().unwrap_or_default();
            let active = members.first().map(|m| m["streams"]["active_tasks"]["0"].clone());
            let lags: Vec<i64> = g["topics"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|t| t["topic"] == input.as_str())
                .flat_map(|t| t["partitions"].as_array().cloned().unwrap_or_default())
                .filter_map(|p| p["lag"].as_i64())
                .collect();
            let done = g["protocol_type"] == "streams"
                && members.len() == 1
                && active == Some(serde_json::json!([0, 1]))
                && g["topology"].is_object()
                && lags == [0, 0];
            if done { Ok(g) } else { Err(body) }
        });
    let member = &detail["member_list"][0];
    assert!(!member["streams"]["process_id"].as_str().unwrap_or_default().is_empty(), "{member}");
    assert_eq!(member["assignment"][&input], serde_json::json!([0, 1]), "the active tasks' partitions: {member}");
    let sub = &detail["topology"]["subtopologies"][0];
    assert_eq!(sub["source_topics"], serde_json::json!([input]), "{sub}");
    let changelog = sub["state_changelog_topics"][0].as_str().unwrap_or_default();
    assert!(changelog.contains("counts") && changelog.ends_with("-changelog"), "{sub}");
    assert!(detail["generation"].as_i64() > Some(0), "the group's epoch: {detail}");
}
