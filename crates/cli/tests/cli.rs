//! The `kshard` binary as a user runs it: `offsets decode` (no broker needed),
//! and `loadgen` then `offsets dump` against the real broker, both for real
//! commits through the group coordinator and for a synthetic stream in a topic
//! of the test's own.

use std::process::{Command, Output};

use serde_json::Value;

/// `kshard` with `args`, alone (scripts/test.sh exports the test etcd, which
/// would make `serve` a cluster member).
fn kshard(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_kshard")).args(args).env_remove("KSHARD_ETCD").output().expect("kshard runs")
}

fn json(out: &Output) -> Value {
    assert!(out.status.success(), "kshard failed: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).expect("stdout is one JSON object")
}

#[test]
fn decode_prints_the_v4_offset_commit_of_architecture_md() {
    let out = kshard(&[
        "offsets",
        "decode",
        "--key",
        "000100026731000274310000000a",
        "--value",
        "0004000000000021d4a8ffffffff010000019964f2d83600",
    ]);
    let v = json(&out);
    assert_eq!(v["record_type"], "offset_commit");
    assert_eq!(v["key_version"], 1);
    assert_eq!((v["group"].as_str(), v["topic"].as_str(), v["partition"].as_i64()), (Some("g1"), Some("t1"), Some(10)));
    let value = &v["value"];
    assert_eq!(value["version"], 4);
    assert_eq!(value["offset"], 2_217_128);
    assert_eq!(value["leader_epoch"], -1);
    assert_eq!(value["metadata"], "");
    assert_eq!(value["commit_timestamp"], 1_758_335_260_726_i64);
    assert!(value["expire_timestamp"].is_null());
    assert!(value["topic_id"].is_null());
    // Keys come in the documented order: record_type, key_version, key fields, value.
    let keys: Vec<&String> = v.as_object().expect("object").keys().collect();
    assert_eq!(keys, ["record_type", "key_version", "group", "topic", "partition", "value"]);
}

#[test]
fn decode_shows_group_members_with_their_consumer_protocol() {
    // GroupMetadataValue v1 for group "g": one member subscribed to "t" (v0) and
    // assigned t/0 (v0); hand-assembled from the schemas.
    let sub = "0000 00000001 0001 74 ffffffff";
    let asg = "0000 00000001 0001 74 00000001 00000000 ffffffff";
    let hex = |s: &str| s.replace(' ', "");
    let value = format!(
        "0001 0008 {} 00000002 0005 {} 0001 6d 00000001 0001 6d 0001 63 0001 68 000493e0 0000ea60 {:08x}{} {:08x}{}",
        hex::encode("consumer"),
        hex::encode("range"),
        hex(sub).len() / 2,
        hex(sub),
        hex(asg).len() / 2,
        hex(asg),
    );
    let v = json(&kshard(&["offsets", "decode", "--key", "0002000167", "--value", &hex(&value)]));
    assert_eq!(v["record_type"], "group_metadata");
    assert_eq!(v["group"], "g");
    let value = &v["value"];
    assert_eq!((value["protocol_type"].as_str(), value["protocol"].as_str()), (Some("consumer"), Some("range")));
    assert_eq!(value["current_state_timestamp"], Value::Null);
    let member = &value["members"][0];
    assert_eq!(member["member_id"], "m");
    assert_eq!(member["rebalance_timeout"], 300_000);
    assert_eq!(member["session_timeout"], 60_000);
    assert_eq!(member["subscription"]["topics"][0], "t");
    assert_eq!(member["assignment"]["assigned_partitions"][0]["topic"], "t");
    assert_eq!(member["assignment"]["assigned_partitions"][0]["partitions"][0], 0);
}

#[test]
fn decode_of_a_tombstone_and_an_unknown_type_exits_zero() {
    let v = json(&kshard(&["offsets", "decode", "--key", "0002000167"]));
    assert_eq!(v["record_type"], "group_metadata");
    assert!(v["value"].is_null());
    let v = json(&kshard(&["offsets", "decode", "--key", "0063abcd", "--value", "0000ff"]));
    assert_eq!(v["record_type"], "unknown");
    assert_eq!(v["key_version"], 99);
    assert_eq!(v["value"]["version"], 0);
}

#[test]
fn malformed_input_exits_2_with_the_error_on_stderr() {
    let out = kshard(&["offsets", "decode", "--key", "000100026731000274310000000a", "--value", "0003000000000000"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(out.stdout.is_empty());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("value: field `offset` at byte 2"), "{err}");
    let out = kshard(&["offsets", "decode", "--key", "not hex"]);
    assert_eq!(out.status.code(), Some(2));
}

#[test]
#[ignore = "needs the real broker or etcd: scripts/test.sh runs it (or cargo test -- --include-ignored)"]
fn synthetic_loadgen_then_dump_reads_every_record_back() {
    let broker = kshard_testkit::Broker::from_env_or_start();
    let prefix = kshard_testkit::unique_name("cli-it");
    let topic = format!("{prefix}-offsets");
    let out = kshard(&[
        "loadgen",
        "--brokers",
        broker.brokers(),
        "--offsets-topic",
        &topic,
        "--offsets-partitions",
        "5",
        "--groups",
        "20",
        "--partitions",
        "2",
        "--rounds",
        "3",
        "--topics",
        "2",
        "--malformed",
        "2",
        "--prefix",
        &prefix,
    ]);
    assert!(out.status.success(), "loadgen failed: {}", String::from_utf8_lossy(&out.stderr));
    let out = kshard(&["offsets", "dump", "--brokers", broker.brokers(), "--offsets-topic", &topic]);
    assert!(out.status.success(), "dump failed: {}", String::from_utf8_lossy(&out.stderr));
    // The topic is this test's own: every line is one of its records.
    let lines: Vec<Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).expect("each line is JSON"))
        .collect();
    let ours = |kind: &str| lines.iter().filter(|v| v["record_type"] == kind).count();
    // 20 groups × 2 partitions × 3 rounds of commits; malformed commits carry
    // an error instead of a record type; plus 2 offset tombstones.
    assert_eq!(ours("offset_commit"), 20 * 2 * 3 + 2);
    // Group metadata in rounds 0 and 2 (the last).
    assert_eq!(ours("group_metadata"), 20 * 2);
    let malformed: Vec<&Value> = lines.iter().filter(|v| v["error"].is_string()).collect();
    assert_eq!(malformed.len(), 2, "exactly the two malformed records are reported: {malformed:?}");
    assert!(malformed.iter().all(|v| v["log_offset"].is_i64() && v["log_partition"].is_i64()));
    assert!(String::from_utf8_lossy(&out.stderr).contains(&format!("{} records, 2 malformed", lines.len())));
}

#[test]
#[ignore = "needs the real broker or etcd: scripts/test.sh runs it (or cargo test -- --include-ignored)"]
fn loadgen_commits_through_the_coordinator_and_dump_shows_what_kafka_wrote() {
    let broker = kshard_testkit::Broker::from_env_or_start();
    let prefix = kshard_testkit::unique_name("cli-real");
    let out = kshard(&[
        "loadgen",
        "--brokers",
        broker.brokers(),
        "--groups",
        "6",
        "--partitions",
        "2",
        "--rounds",
        "3",
        "--topics",
        "2",
        "--prefix",
        &prefix,
    ]);
    assert!(out.status.success(), "loadgen failed: {}", String::from_utf8_lossy(&out.stderr));
    let out = kshard(&["offsets", "dump", "--brokers", broker.brokers()]);
    assert!(out.status.success(), "dump failed: {}", String::from_utf8_lossy(&out.stderr));
    let commits: Vec<Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).expect("each line is JSON"))
        .filter(|v: &Value| v["record_type"] == "offset_commit")
        .filter(|v| v["group"].as_str().is_some_and(|g| g.starts_with(&prefix)))
        .collect();
    // Kafka wrote one record per committed partition: 6 groups × 2 × 3 rounds
    // (the test broker's eager cleaner may already have compacted some away).
    assert!((6 * 2..=6 * 2 * 3).contains(&commits.len()), "{commits:#?}");
    // Each group's last commit of each partition is round 2's offset (20 + (g + p) % 10).
    for g in 0..6 {
        for p in 0..2 {
            let group = format!("{prefix}-group-{g:05}");
            let last = commits.iter().rfind(|v| v["group"] == group.as_str() && v["partition"] == p).expect("a commit");
            assert_eq!(last["value"]["offset"], 20 + (g + p) % 10, "{last}");
        }
    }
}

#[test]
fn serve_fails_at_start_naming_an_invalid_setting() {
    let out = kshard(&["serve", "--brokers", "127.0.0.1:9", "--granularity", "partitions"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("granularity"), "{err}");
    let dir = std::env::temp_dir().join(kshard_testkit::unique_name("kshard-config"));
    std::fs::create_dir_all(&dir).expect("dir");
    let config = dir.join("kshard.yaml");
    std::fs::write(&config, "brokers: 127.0.0.1:9\nwatermark_intervall_seconds: 5\n").expect("write");
    let out = kshard(&["serve", "--config", config.to_str().expect("utf-8 path")]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("watermark_intervall_seconds"), "the unknown key is named: {err}");
    // A cluster member needs a data directory, an etcd URL and a sane lease.
    for (args, named) in [
        (&["--etcd", "http://127.0.0.1:9"][..], "invalid etcd"),
        (&["--etcd", "127.0.0.1:2379", "--data-dir", "/tmp/x"][..], "invalid etcd"),
        (
            &["--etcd", "http://127.0.0.1:9", "--data-dir", "/tmp/x", "--lease-ttl-seconds", "1"][..],
            "lease_ttl_seconds",
        ),
        (&["--etcd", "http://127.0.0.1:9", "--data-dir", "/tmp/x", "--member-id", "a#b"][..], "member_id"),
        (&["--data-dir", "/tmp/x", "--recovery-log-topic", "no spaces"][..], "recovery_log_topic"),
    ] {
        let out = kshard(&[&["serve", "--brokers", "127.0.0.1:9"][..], args].concat());
        assert!(!out.status.success(), "{args:?} accepted");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(named), "{args:?}: {named} is named: {err}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
#[ignore = "needs the real broker or etcd: scripts/test.sh runs it (or cargo test -- --include-ignored)"]
fn serve_stops_cleanly_on_sigterm() {
    let broker = kshard_testkit::Broker::from_env_or_start();
    let port = std::net::TcpListener::bind("127.0.0.1:0").expect("bind").local_addr().expect("addr").port();
    let addr = format!("127.0.0.1:{port}");
    // __consumer_offsets exists once some group has committed.
    let settings = kshard_kafka::Client::to_brokers(broker.brokers());
    let admin = kshard_kafka::Admin::new(&settings, std::time::Duration::from_secs(30)).expect("admin");
    let topic = kshard_testkit::unique_name("cli-sigterm");
    admin
        .create_topic(&kshard_kafka::TopicSpec { name: topic.clone(), partitions: 1, replication: 1, configs: vec![] })
        .expect("topic");
    let committer = kshard_kafka::OffsetCommitter::new(&settings, &format!("{topic}-g")).expect("committer");
    committer.commit(&[(&topic, 0, 0)]).expect("commit");
    let mut child = Command::new(env!("CARGO_BIN_EXE_kshard"))
        .args(["serve", "--brokers", broker.brokers(), "--listen", &addr])
        .env("KSHARD_LOG", "warn")
        .env_remove("KSHARD_ETCD")
        .spawn()
        .expect("spawn");
    wait_ready(&mut child, &addr);
    stop_with_sigterm(&mut child);
}

/// Waits until `kshard serve` at `addr` answers `/ready` with 200.
fn wait_ready(child: &mut std::process::Child, addr: &str) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        if let Ok((200, _)) = kshard_testkit::http_get(addr, "/ready") {
            return;
        }
        assert!(child.try_wait().expect("wait").is_none(), "kshard serve exited before it was ready");
        assert!(std::time::Instant::now() < deadline, "not ready within 60 s");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

/// SIGTERM, then a clean exit within 15 s.
fn stop_with_sigterm(child: &mut std::process::Child) {
    let killed = Command::new("kill").args(["-TERM", &child.id().to_string()]).status().expect("kill");
    assert!(killed.success());
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(15);
    loop {
        if let Some(status) = child.try_wait().expect("wait") {
            assert!(status.success(), "exit status after SIGTERM: {status}");
            return;
        }
        assert!(std::time::Instant::now() < deadline, "still running 15 s after SIGTERM");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

#[test]
#[ignore = "needs the real broker or etcd: scripts/test.sh runs it (or cargo test -- --include-ignored)"]
fn serve_watches_every_cluster_of_its_config_file() {
    let broker = kshard_testkit::Broker::from_env_or_start();
    let port = std::net::TcpListener::bind("127.0.0.1:0").expect("bind").local_addr().expect("addr").port();
    let addr = format!("127.0.0.1:{port}");
    let settings = kshard_kafka::Client::to_brokers(broker.brokers());
    let topic = kshard_testkit::unique_name("cli-clusters");
    let admin = kshard_kafka::Admin::new(&settings, std::time::Duration::from_secs(30)).expect("admin");
    admin
        .create_topic(&kshard_kafka::TopicSpec { name: topic.clone(), partitions: 1, replication: 1, configs: vec![] })
        .expect("topic");
    let group = format!("{topic}-g");
    let committer = kshard_kafka::OffsetCommitter::new(&settings, &group).expect("committer");
    committer.commit(&[(&topic, 0, 0)]).expect("commit");
    // Two names for the one test broker, with different filters: what each
    // cluster exports is its own.
    let dir = std::env::temp_dir().join(kshard_testkit::unique_name("kshard-clusters"));
    std::fs::create_dir_all(&dir).expect("dir");
    let config = dir.join("kshard.yaml");
    let yaml = format!(
        "listen: {addr}\nwatermark_interval_seconds: 0.2\ncluster_label: kafka_cluster\ngroups:\n  allow: ['{topic}.*']\nclusters:\n\
         - name: eu\n  brokers: {b}\n\
         - name: us\n  brokers: {b}\n  groups:\n    ignore: ['.*']\n",
        b = broker.brokers()
    );
    std::fs::write(&config, yaml).expect("write");
    let child = Command::new(env!("CARGO_BIN_EXE_kshard"))
        .args(["serve", "--config", config.to_str().expect("utf-8 path")])
        .env("KSHARD_LOG", "warn")
        .env_remove("KSHARD_ETCD")
        .env_remove("KSHARD_BROKERS")
        .spawn()
        .expect("spawn");
    let mut child = KillOnDrop(child);
    wait_ready(&mut child.0, &addr);
    let (_, clusters) = kshard_testkit::http_get(&addr, "/api/clusters").expect("clusters");
    let clusters: Value = serde_json::from_str(&clusters).expect("JSON");
    let names: Vec<&str> = clusters.as_array().expect("list").iter().filter_map(|c| c["cluster"].as_str()).collect();
    assert_eq!(names, ["eu", "us"]);
    let (_, metrics) = kshard_testkit::http_get(&addr, "/metrics").expect("metrics");
    // The label's name as cluster_label says, for setups with a `cluster` of their own.
    let series = |cluster: &str| format!("{{kafka_cluster=\"{cluster}\",group_id=\"{group}\"");
    assert!(metrics.contains(&series("eu")), "eu exports the group: {metrics}");
    assert!(!metrics.contains(&series("us")), "us ignores every group: {metrics}");
    // The process's own series: once, without a cluster; each cluster's traffic, labelled.
    let m = kshard_testkit::parse_metrics(&metrics);
    let logged = |level: &str| m.get(&format!("kshard_log_messages_total{{level=\"{level}\"}}")).copied();
    assert_eq!(logged("info"), Some(0.0), "KSHARD_LOG=warn: no info message written");
    assert!(logged("warn").is_some(), "every level shown: {metrics}");
    for cluster in ["eu", "us"] {
        let sent = m.get(&format!("kshard_kafka_requests_sent_total{{kafka_cluster=\"{cluster}\"}}"));
        assert!(sent.is_some_and(|n| *n > 0.0), "{cluster}'s clients' requests: {metrics}");
    }
    let (status, body) = kshard_testkit::http_get(&addr, "/clusters/eu/api/groups").expect("groups");
    assert!(status == 200 && body.contains(&group), "{status} {body}");
    stop_with_sigterm(&mut child.0);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A child process killed if the test fails before it stops it.
struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        if self.0.try_wait().ok().flatten().is_none() {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

#[test]
#[ignore = "needs the real broker or etcd: scripts/test.sh runs it (or cargo test -- --include-ignored)"]
fn demo_runs_groups_of_every_kind_through_the_broker() {
    let broker = kshard_testkit::Broker::start_private(&[]);
    // scripts/run.sh's share group member, once the demo made its topic.
    let brokers = broker.brokers().to_owned();
    let share = std::thread::spawn(move || {
        std::thread::sleep(std::time::Duration::from_secs(3));
        std::process::Command::new(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/share-demo.sh"))
            .args([&brokers, "demo-jobs-workers", "demo-jobs", "10"])
            .output()
            .expect("scripts/share-demo.sh")
    });
    let out = kshard(&["demo", "--brokers", broker.brokers(), "--seconds", "15"]);
    assert!(out.status.success(), "demo failed: {}", String::from_utf8_lossy(&out.stderr));
    let share = share.join().expect("the share demo's thread");
    assert!(share.status.success(), "share-demo.sh failed: {}", String::from_utf8_lossy(&share.stderr));
    let shared = kshard_testkit::kafka_share_groups(broker.brokers(), "demo-jobs-workers");
    assert_eq!(shared.len(), 2, "the share group on both partitions of demo-jobs: {shared:#?}");
    // Rows with a committed offset, as Kafka's own tool reports them.
    let described = kshard_testkit::kafka_consumer_groups(broker.brokers(), "demo-");
    for group in
        ["demo-orders-fast", "demo-orders-slow", "demo-clicks-kip848", "demo-payments-txn", "demo-clicks-stalled"]
    {
        let committed = described.iter().any(|r| r.group == group);
        assert!(committed, "{group} committed: {described:#?}");
    }
}

#[test]
#[ignore = "needs the real broker or etcd: scripts/test.sh runs it (or cargo test -- --include-ignored)"]
fn lag_prints_what_kafkas_tool_reports() {
    let broker = kshard_testkit::Broker::from_env_or_start();
    let settings = kshard_kafka::Client::to_brokers(broker.brokers());
    let admin = kshard_kafka::Admin::new(&settings, std::time::Duration::from_secs(30)).expect("admin");
    let topic = kshard_testkit::unique_name("cli-lag");
    admin
        .create_topic(&kshard_kafka::TopicSpec { name: topic.clone(), partitions: 2, replication: 1, configs: vec![] })
        .expect("topic");
    let writer = kshard_kafka::RecordWriter::new(&settings).expect("producer");
    for p in 0..2 {
        for i in 0..20 {
            writer.send(&topic, p, format!("k{i}").as_bytes(), Some(b"v")).expect("send");
        }
    }
    writer.flush(std::time::Duration::from_secs(30)).expect("flush");
    let group = format!("{topic}-g");
    let committer = kshard_kafka::OffsetCommitter::new(&settings, &group).expect("committer");
    committer.commit(&[(&topic, 0, 5), (&topic, 1, 20)]).expect("commit");

    let out = kshard(&["lag", "--brokers", broker.brokers(), "--group", &group, "--json"]);
    let groups = json_array(&out);
    let rows: Vec<(String, i64, i64, i64)> = groups[0]["topics"][0]["partitions"]
        .as_array()
        .expect("partitions")
        .iter()
        .map(|p| {
            let n = |k: &str| p[k].as_i64().expect("a number");
            (topic.clone(), n("committed_offset"), n("high_water_mark"), n("lag"))
        })
        .collect();
    let kafka: Vec<(String, i64, i64, i64)> = kshard_testkit::kafka_consumer_groups(broker.brokers(), &group)
        .into_iter()
        .map(|r| (r.topic, r.committed, r.log_end, r.lag))
        .collect();
    assert_eq!(rows, kafka, "kshard lag and kafka-consumer-groups");
    assert_eq!(groups.len(), 1, "--group keeps that group only");

    let out = kshard(&["lag", "--brokers", broker.brokers(), "--group", &group]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let table = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<&str> = table.lines().collect();
    assert!(lines[0].starts_with("GROUP") && lines[0].contains("STATUS"), "{table}");
    assert_eq!(lines.len(), 3, "a header and a row per partition: {table}");
    let cells: Vec<&str> = lines[1].split_whitespace().collect();
    assert_eq!(cells.len(), 13, "{table}");
    // COMMIT_AGE_S, RATE and ETA_S need the history `serve` keeps; a group
    // that only commits has no kind.
    assert_eq!(
        [
            cells[0], cells[1], cells[2], cells[3], cells[4], cells[5], cells[7], cells[8], cells[9], cells[10],
            cells[11], cells[12]
        ],
        [group.as_str(), &topic, "0", "5", "20", "15", "-", "-", "-", "0", "OK", "-"],
        "{table}"
    );
    let seconds: f64 = cells[6].parse().expect("lag in seconds");
    assert!((0.0..120.0).contains(&seconds), "the record at offset 5 was written moments ago: {table}");
}

#[test]
#[ignore = "needs the real broker or etcd: scripts/test.sh runs it (or cargo test -- --include-ignored)"]
fn lag_prints_a_share_group_as_kafkas_tool_describes_it() {
    let broker = kshard_testkit::Broker::from_env_or_start();
    let settings = kshard_kafka::Client::to_brokers(broker.brokers());
    let admin = kshard_kafka::Admin::new(&settings, std::time::Duration::from_secs(30)).expect("admin");
    let topic = kshard_testkit::unique_name("cli-share-lag");
    admin
        .create_topic(&kshard_kafka::TopicSpec { name: topic.clone(), partitions: 1, replication: 1, configs: vec![] })
        .expect("topic");
    let writer = kshard_kafka::RecordWriter::new(&settings).expect("producer");
    for i in 0..12 {
        writer.send(&topic, 0, format!("k{i}").as_bytes(), Some(b"v")).expect("send");
    }
    writer.flush(std::time::Duration::from_secs(30)).expect("flush");
    let group = format!("{topic}-sg");
    kshard_testkit::share_from_earliest(broker.brokers(), &group);
    kshard_testkit::share_consume(broker.brokers(), &group, &topic, 5, None);

    let out = kshard(&["lag", "--brokers", broker.brokers(), "--group", &group]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let table = String::from_utf8_lossy(&out.stdout);
    let kafka = kshard_testkit::kafka_share_groups(broker.brokers(), &group);
    let row = &kafka[0];
    let (start, lag) = (row.start_offset.expect("initialized"), row.lag.expect("a lag"));
    let cells: Vec<&str> = table.lines().nth(1).expect("a row").split_whitespace().collect();
    assert_eq!(
        [cells[0], cells[1], cells[3], cells[4], cells[5], cells[12]],
        [group.as_str(), &topic, &start.to_string(), "12", &lag.to_string(), "share"],
        "{table}"
    );
}

fn json_array(out: &Output) -> Vec<Value> {
    assert!(out.status.success(), "kshard failed: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice::<Vec<Value>>(&out.stdout).expect("stdout is a JSON array")
}
