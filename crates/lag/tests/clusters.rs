//! One process watching two Kafka clusters (`clusters:`), against two real
//! brokers: every series carries its `cluster` label and `/metrics` stays
//! valid Prometheus text (promtool), each cluster has its endpoints under
//! `/clusters/{name}/`, Burrow's `/v3/kafka` lists both; then one broker is
//! killed: `/ready` turns 503 naming that cluster while the other's lag stays
//! current (a new commit shows), and it comes back by itself.

mod common;

use std::time::Duration;

use common::*;
use kshard_kafka::{Client, OffsetCommitter};
use kshard_lag::service::ServeOptions;
use kshard_testkit::{API_VERSIONS_NULL_LIST, Broker, HostileBroker, METADATA_2_POW_32_BROKERS, unique_name};

fn options(name: &str, settings: &Client, prefix: &str) -> ServeOptions {
    ServeOptions {
        name: Some(name.parse().expect("a cluster name")),
        watermark_interval: Duration::from_millis(200),
        // Stale after one interval plus the request timeout: about 5 s.
        request_timeout: Duration::from_secs(5),
        monitor: only(prefix),
        ..ServeOptions::new(settings.settings().clone())
    }
}

/// The lag of `group` on partition 0 of `topic` in `/clusters/{cluster}/api/groups`.
fn api_lag(service: &mut TestService, cluster: &str, group: &str) -> Result<i64, String> {
    let (status, body) = service.get(&format!("/clusters/{cluster}/api/groups"));
    if status != 200 {
        return Err(format!("{status}: {body}"));
    }
    let groups: serde_json::Value = serde_json::from_str(&body).map_err(|e| e.to_string())?;
    groups
        .as_array()
        .and_then(|gs| gs.iter().find(|g| g["group_id"] == group))
        .and_then(|g| g["topics"][0]["partitions"][0]["lag"].as_i64())
        .ok_or_else(|| format!("no lag of {group}: {body}"))
}

fn lag_series(cluster: &str, group: &str, topic: &str) -> String {
    format!(
        "kshard_kafka_consumer_group_topic_partition_lag{{cluster=\"{cluster}\",group_id=\"{group}\",topic_name=\"{topic}\",partition_id=\"0\"}}"
    )
}

#[test]
#[ignore = "needs the real broker or etcd: scripts/test.sh runs it (or cargo test -- --include-ignored)"]
fn two_clusters_one_broker_killed_the_other_stays_current() {
    let main = Broker::from_env_or_start();
    let spare = Broker::start_private(&[]);
    let p = unique_name("clusters");
    let (topic, group) = (format!("{p}-t"), format!("{p}-g"));
    let mut committers = Vec::new();
    for (broker, records, committed) in [(&main, 50, 20), (&spare, 30, 10)] {
        let settings = Client::to_brokers(broker.brokers());
        create_and_fill(&settings, &topic, &[records]);
        let committer = OffsetCommitter::new(&settings, &group).expect("committer");
        committer.commit(&[(&topic, 0, committed)]).expect("commit");
        committers.push(committer);
    }
    let mut service = TestService::start_many(vec![
        options("main", &Client::to_brokers(main.brokers()), &p),
        options("spare", &Client::to_brokers(spare.brokers()), &p),
    ]);
    service.wait_ready();

    // Both clusters, each series labelled, one family header each.
    let (_, text) = service.get("/metrics");
    if let Err(e) = kshard_testkit::promtool_check_metrics(&text, "the clusters' /metrics") {
        panic!("promtool check metrics: {e}");
    }
    assert_eq!(text.matches("# TYPE kshard_kafka_consumer_group_topic_partition_lag gauge").count(), 1);
    let m = kshard_testkit::parse_metrics(&text);
    assert_eq!(m.get(&lag_series("main", &group, &topic)), Some(&30.0), "{text}");
    assert_eq!(m.get(&lag_series("spare", &group, &topic)), Some(&20.0), "{text}");
    // Every series is a cluster's but the runtime's and the process's own (`process_*`).
    let of_a_cluster = |k: &&String| !k.starts_with("kshard_runtime") && !k.starts_with("process_");
    assert!(m.keys().filter(of_a_cluster).all(|k| k.contains("{cluster=\"")), "{text}");

    // Each cluster's endpoints under its path; the root API asks which.
    assert_eq!(api_lag(&mut service, "main", &group), Ok(30));
    assert_eq!(api_lag(&mut service, "spare", &group), Ok(20));
    let (status, body) = service.get("/api/groups");
    assert!(status == 404 && body.contains("\"main\"") && body.contains("\"spare\""), "{status} {body}");
    assert_eq!(service.get("/clusters/main").0, 308, "to the page under /clusters/main/");
    assert!(service.get("/clusters/main/").1.contains("consumer lag"));
    assert!(service.get("/").1.contains("api/clusters"), "the root lists the clusters");
    let (_, burrow) = service.get("/v3/kafka");
    assert!(burrow.contains(r#""clusters":["main","spare"]"#), "{burrow}");
    let (status, body) = service.get(&format!("/v3/kafka/spare/consumer/{group}/lag"));
    assert!(status == 200 && body.contains(r#""cluster":"spare""#), "{status} {body}");

    // The spare cluster's broker dies: /ready names it; main stays current.
    spare.kill();
    let body =
        until("/ready names the spare cluster", Duration::from_secs(60), Duration::from_millis(200), || match service
            .get("/ready")
        {
            (503, body) if body.contains("cluster spare:") => Ok(body),
            (status, body) => Err(format!("{status}: {body}")),
        });
    assert!(!body.contains("cluster main:"), "main is fine: {body}");
    assert_eq!(service.get("/ready/any").0, 200, "the probe keeps the process in the Service");
    assert_eq!(service.get("/clusters/main/ready").0, 200);
    assert_eq!(service.get("/clusters/spare/ready").0, 503);
    assert_eq!(service.get("/clusters/spare/api/groups").0, 503, "no stale lag served as current");
    assert_eq!(service.get("/v3/kafka/spare/consumer").0, 503);
    assert_eq!(service.get("/v3/kafka/main/consumer").0, 200);
    committers[0].commit(&[(&topic, 0, 45)]).expect("commit on main");
    until("main's new commit shows", Duration::from_secs(30), Duration::from_millis(200), || {
        match api_lag(&mut service, "main", &group) {
            Ok(5) => Ok(()),
            other => Err(format!("{other:?}")),
        }
    });
    let m = service.metrics();
    assert_eq!(m.get(&lag_series("main", &group, &topic)), Some(&5.0));
    assert_eq!(m.get(&lag_series("spare", &group, &topic)), None, "no frozen lag for the dead cluster");
    assert_eq!(m.get("kshard_data_current{cluster=\"main\"}"), Some(&1.0));
    assert_eq!(m.get("kshard_data_current{cluster=\"spare\"}"), Some(&0.0));

    // Back by itself.
    spare.resume();
    service.wait_ready();
    until("spare's lag is back", Duration::from_secs(60), Duration::from_millis(200), || {
        match api_lag(&mut service, "spare", &group) {
            Ok(20) => Ok(()),
            other => Err(format!("{other:?}")),
        }
    });
}

/// A cluster whose "broker" answers every request with bytes no broker
/// sends (a count of 2^32 − 2 in 13 bytes, which once aborted the whole
/// process), and one whose ApiVersions answer aborts a process in which
/// librdkafka reads it (its admin client was once in the lag monitor's
/// path): the other cluster is served as if it were alone, and the
/// readiness probe keeps the process in the Service.
#[test]
#[ignore = "needs the real broker or etcd: scripts/test.sh runs it (or cargo test -- --include-ignored)"]
fn a_hostile_cluster_stops_no_other_cluster() {
    let main = Broker::from_env_or_start();
    let hostile = HostileBroker::answering(METADATA_2_POW_32_BROKERS);
    // And one whose ApiVersions answer aborts a process in which librdkafka
    // reads it: the lag monitor's admin calls are kshard's own.
    let aborting = HostileBroker::with_api_versions(API_VERSIONS_NULL_LIST, METADATA_2_POW_32_BROKERS);
    let p = unique_name("hostile");
    let (topic, group) = (format!("{p}-t"), format!("{p}-g"));
    let settings = Client::to_brokers(main.brokers());
    create_and_fill(&settings, &topic, &[40]);
    let committer = OffsetCommitter::new(&settings, &group).expect("committer");
    committer.commit(&[(&topic, 0, 15)]).expect("commit");
    let mut service = TestService::start_many(vec![
        options("main", &settings, &p),
        options("hostile", &Client::to_brokers(hostile.address()), &p),
        options("aborting", &Client::to_brokers(aborting.address()), &p),
    ]);
    until("main is ready", Duration::from_secs(60), Duration::from_millis(200), || {
        match service.get("/clusters/main/ready") {
            (200, _) => Ok(()),
            (status, body) => Err(format!("{status}: {body}")),
        }
    });
    until("main's lag", Duration::from_secs(30), Duration::from_millis(200), || {
        match api_lag(&mut service, "main", &group) {
            Ok(25) => Ok(()),
            other => Err(format!("{other:?}")),
        }
    });
    let (status, body) = service.get("/ready");
    assert!(status == 503 && body.contains("cluster hostile:") && !body.contains("cluster main:"), "{status} {body}");
    assert!(body.contains("cluster aborting:"), "{status} {body}");
    assert_eq!(service.get("/ready/any").0, 200);
    let m = service.metrics();
    assert_eq!(m.get(&lag_series("main", &group, &topic)), Some(&25.0));
    assert!(
        m.get("kshard_kafka_malformed_answers_total{cluster=\"hostile\"}").is_some_and(|n| *n >= 1.0),
        "the hostile cluster's answers are counted as malformed"
    );
    committer.commit(&[(&topic, 0, 35)]).expect("commit");
    until("main's new commit shows", Duration::from_secs(30), Duration::from_millis(200), || {
        match api_lag(&mut service, "main", &group) {
            Ok(5) => Ok(()),
            other => Err(format!("{other:?}")),
        }
    });
}
