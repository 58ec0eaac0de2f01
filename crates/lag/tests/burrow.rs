//! The Burrow-compatible API against the shapes of Burrow's HTTP server
//! (linkedin/Burrow `core/internal/httpserver/structs.go` and the
//! `core/protocol` types it serializes): every field Burrow documents, with
//! its JSON type, for each endpoint — so Burrow's clients read kshard
//! unchanged — and Burrow's error envelope for what is not there.

mod common;

use std::time::Duration;

use common::*;
use kshard_testkit::{Broker, unique_name};
use serde_json::Value;

/// The shape of a JSON value: its type, and for objects every key's shape
/// (arrays by their first element).
fn shape(v: &Value) -> String {
    match v {
        Value::Null => "null".into(),
        Value::Bool(_) => "bool".into(),
        Value::Number(n) if n.is_f64() => "float".into(),
        Value::Number(_) => "int".into(),
        Value::String(_) => "string".into(),
        Value::Array(a) => format!("[{}]", a.first().map_or("".into(), shape)),
        Value::Object(o) => {
            let mut keys: Vec<_> = o.iter().map(|(k, v)| format!("{k}: {}", shape(v))).collect();
            keys.sort();
            format!("{{{}}}", keys.join(", "))
        }
    }
}

/// Burrow's envelope around `body` (keys of the body, shaped).
fn envelope(body: &str) -> String {
    let mut keys: Vec<String> =
        vec!["error: bool".into(), "message: string".into(), "request: {host: string, url: string}".into()];
    if !body.is_empty() {
        keys.push(body.to_owned());
    }
    keys.sort();
    format!("{{{}}}", keys.join(", "))
}

fn get(service: &mut TestService, path: &str) -> (u16, Value) {
    let (status, body) = service.get(path);
    (status, serde_json::from_str(&body).unwrap_or_else(|e| panic!("{path}: {e}: {body}")))
}

#[test]
#[ignore = "needs the real broker or etcd: scripts/test.sh runs it (or cargo test -- --include-ignored)"]
fn every_endpoint_answers_in_burrows_shapes() {
    let broker = Broker::from_env_or_start();
    let p = unique_name("burrow");
    let w = Writer::new(broker.brokers(), &p);
    let topic = format!("{p}-t");
    w.topic(&topic, &[100, 50]);
    let group = format!("{p}-g");
    w.commit(&group, &topic, 0, 3, 40);
    w.commit(&group, &topic, 1, 3, 50);
    w.flush();
    let mut service = TestService::start(options(&w, only(&p)));
    service.wait_ready();
    // The status windows fill at watermark refreshes (every 200 ms here).
    std::thread::sleep(Duration::from_millis(600));

    let offset = "{lag: int, offset: int, timestamp: int}";
    let partition_status = format!(
        "{{complete: float, current_lag: int, end: {offset}, owner: string, partition: int, start: {offset}, status: string, topic: string}}"
    );
    let cases = [
        ("/v3/kafka".to_owned(), 200, envelope("clusters: [string]")),
        (
            "/v3/kafka/local".to_owned(),
            200,
            envelope("module: {class-name: string, offset-refresh: int, servers: [string], topic-refresh: int}"),
        ),
        ("/v3/kafka/local/topic".to_owned(), 200, envelope("topics: [string]")),
        (format!("/v3/kafka/local/topic/{topic}"), 200, envelope("offsets: [int]")),
        ("/v3/kafka/local/consumer".to_owned(), 200, envelope("consumers: [string]")),
        (
            format!("/v3/kafka/local/consumer/{group}"),
            200,
            envelope(&format!(
                "topics: {{{topic}: [{{client_id: string, current-lag: int, offsets: [{offset}], owner: string}}]}}"
            )),
        ),
        (
            format!("/v3/kafka/local/consumer/{group}/lag"),
            200,
            envelope(&format!(
                "status: {{cluster: string, complete: float, group: string, maxlag: {partition_status}, partition_count: int, partitions: [{partition_status}], status: string, totallag: int}}"
            )),
        ),
        (format!("/v3/kafka/other/consumer/{group}"), 404, envelope("")),
        ("/v3/kafka/local/consumer/nobody".to_owned(), 404, envelope("")),
        (format!("/v3/kafka/local/topic/{p}-missing"), 404, envelope("")),
    ];
    for (path, status, expected) in &cases {
        let (code, body) = get(&mut service, path);
        assert_eq!(code, *status, "{path}: {body}");
        assert_eq!(shape(&body), *expected, "{path}: {body}");
        assert_eq!(body["request"]["url"], path.as_str(), "{path}");
        assert_eq!(body["error"], *status != 200, "{path}: {body}");
    }

    // The values, as Burrow would give them for these commits.
    let (_, clusters) = get(&mut service, "/v3/kafka");
    assert_eq!(clusters["clusters"], serde_json::json!(["local"]));
    let (_, offsets) = get(&mut service, &format!("/v3/kafka/local/topic/{topic}"));
    assert_eq!(offsets["offsets"], serde_json::json!([100, 50]));
    let (_, consumers) = get(&mut service, "/v3/kafka/local/consumer");
    assert_eq!(consumers["consumers"], serde_json::json!([group]));
    let (_, detail) = get(&mut service, &format!("/v3/kafka/local/consumer/{group}"));
    let partitions = detail["topics"][&topic].as_array().expect("partitions by id");
    assert_eq!(partitions.len(), 2);
    assert_eq!(partitions[0]["current-lag"], 60);
    assert_eq!(partitions[0]["offsets"][0]["offset"], 40);
    assert_eq!(partitions[1]["current-lag"], 0);
    // Partition 0's one commit (written with a time long past) is behind:
    // STOP, the group ERR; partition 1 is caught up.
    let (_, lag) = get(&mut service, &format!("/v3/kafka/local/consumer/{group}/lag"));
    let status = &lag["status"];
    assert_eq!((status["status"].as_str(), status["totallag"].as_i64()), (Some("ERR"), Some(60)));
    assert_eq!(status["partition_count"], 2);
    assert_eq!((status["maxlag"]["partition"].as_i64(), status["maxlag"]["status"].as_str()), (Some(0), Some("STOP")));
    assert_eq!(status["partitions"].as_array().map(Vec::len), Some(2), "…/lag lists every partition");
    let (code, only_bad) = get(&mut service, &format!("/v3/kafka/local/consumer/{group}/status"));
    assert_eq!(code, 200);
    let listed: Vec<i64> = only_bad["status"]["partitions"]
        .as_array()
        .expect("partitions")
        .iter()
        .filter_map(|p| p["partition"].as_i64())
        .collect();
    assert_eq!(listed, [0], "…/status lists WARN or worse only");
    let (code, missing) = get(&mut service, "/v3/kafka/local/consumer/nobody/status");
    assert_eq!((code, missing["status"]["status"].as_str()), (404, Some("NOTFOUND")));
}
