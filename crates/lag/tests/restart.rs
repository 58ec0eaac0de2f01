//! `data_dir`: the lag monitor's state kept in durable shards of
//! `kshard-runtime` (one per partition of the offsets topic, recovery logs in
//! Kafka). A restart on the data directory reads only what was committed since
//! it stopped and shows the same lag; a data directory deleted between runs, or
//! stores overwritten with garbage, are rebuilt from the recovery logs, again
//! without re-reading the offsets topic.

mod common;

use std::time::Duration;

use common::{TestService, Writer, kshard_metric_lag, only, options};
use kshard_testkit::{Broker, unique_name};

const RECORDS: &str = "kshard_exporter_offset_consumer_records_consumed_total";

fn start(w: &Writer, prefix: &str, data_dir: &std::path::Path) -> TestService {
    let mut opts = options(w, only(prefix));
    opts.data_dir = Some(data_dir.to_owned());
    let mut service = TestService::start(opts);
    service.wait_ready();
    service
}

#[test]
#[ignore = "needs the real broker or etcd: scripts/test.sh runs it (or cargo test -- --include-ignored)"]
fn a_restart_on_the_data_directory_reads_only_what_is_new() {
    let broker = Broker::from_env_or_start();
    let p = unique_name("lag-restart");
    let w = Writer::new(broker.brokers(), &p);
    let topic = format!("{p}-t");
    w.topic(&topic, &[100, 100, 100]);
    for g in 0..40 {
        for part in 0..3 {
            for offset in [10, 20, 30 + g] {
                w.commit(&format!("{p}-g{g:02}"), &topic, part, 3, offset);
            }
        }
    }
    w.flush();
    let written = 40 * 3 * 3;
    let dir = std::env::temp_dir().join(unique_name("kshard-lag-data"));

    let mut first = start(&w, &p, &dir);
    // (At least: a replica retried at start, a new log topic's leaders still
    // being elected, reads its partition again.)
    let read = first.metrics().get(RECORDS).copied().unwrap_or(0.0);
    assert!(read >= written as f64, "the first run reads everything: {read} of {written}");
    // /ready names each partition's shard and its status; /metrics has the runtime's series.
    let (_, ready) = first.get("/ready");
    let ready: serde_json::Value = serde_json::from_str(&ready).expect("JSON");
    let shards = ready["shards"].as_object().expect("shards on /ready");
    assert_eq!(shards.len(), w.offsets_partitions as usize, "{ready}");
    assert!(shards.values().all(|s| s == "PRIMARY"), "{ready}");
    let primary = "kshard_runtime_replica_status{shard=\"offsets-000\",status=\"PRIMARY\"}";
    assert_eq!(first.metrics().get(primary), Some(&1.0));
    // And `kshard shards list --endpoint` reads the same from /api/shards.
    let (status, rows) = first.get("/api/shards");
    let rows: Vec<serde_json::Value> = serde_json::from_str(&rows).expect("JSON rows");
    assert_eq!(status, 200);
    assert_eq!(rows.len(), w.offsets_partitions as usize);
    assert!(rows.iter().all(|r| r["status"] == "PRIMARY" && r["behind"] == 0), "{rows:?}");
    let lag = kshard_metric_lag(&mut first, "kshard", &p);
    assert_eq!(lag.len(), 120);
    drop(first);

    // Restarted on its data directory: only the commits made since are read.
    w.commit(&format!("{p}-g00"), &topic, 0, 4, 99);
    w.commit(&format!("{p}-g01"), &topic, 1, 4, 98);
    w.flush();
    let mut second = start(&w, &p, &dir);
    assert_eq!(second.metrics().get(RECORDS), Some(&2.0), "a restart reads only the new commits");
    let mut expected = lag.clone();
    expected.insert((format!("{p}-g00"), topic.clone(), 0), 1);
    expected.insert((format!("{p}-g01"), topic.clone(), 1), 2);
    assert_eq!(kshard_metric_lag(&mut second, "kshard", &p), expected);
    drop(second);

    // The data directory lost: every partition's state comes back from its
    // recovery log, and still nothing of the offsets topic is read again.
    std::fs::remove_dir_all(&dir).expect("deletes the data directory");
    let mut third = start(&w, &p, &dir);
    assert_eq!(third.metrics().get(RECORDS), Some(&0.0), "rebuilt from the recovery logs");
    assert_eq!(kshard_metric_lag(&mut third, "kshard", &p), expected);
    drop(third);

    // Corrupt stores are set aside and rebuilt from the recovery logs too.
    let mut corrupted = 0;
    for entry in std::fs::read_dir(&dir).expect("lists the data directory").flatten() {
        // (The share-state topic's shards have stores of their own.)
        let offsets = entry.file_name().to_string_lossy().starts_with("offsets-");
        if offsets && entry.path().extension().is_some_and(|e| e == "redb") {
            std::fs::write(entry.path(), vec![0x5a; 4096]).expect("overwrites a store");
            corrupted += 1;
        }
    }
    assert_eq!(corrupted, w.offsets_partitions, "one store per partition of the offsets topic");
    let mut fourth = start(&w, &p, &dir);
    assert_eq!(fourth.metrics().get(RECORDS), Some(&0.0), "rebuilt from the recovery logs");
    assert_eq!(kshard_metric_lag(&mut fourth, "kshard", &p), expected);
    drop(fourth);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
#[ignore = "needs the real broker or etcd: scripts/test.sh runs it (or cargo test -- --include-ignored)"]
fn partitions_added_to_the_offsets_topic_get_shards() {
    let broker = Broker::from_env_or_start();
    let p = unique_name("lag-grow");
    let w = Writer::new(broker.brokers(), &p);
    let topic = format!("{p}-t");
    w.topic(&topic, &[50]);
    w.commit(&format!("{p}-before"), &topic, 0, 3, 10);
    w.flush();
    let dir = std::env::temp_dir().join(unique_name("kshard-lag-grow"));
    let mut service = start(&w, &p, &dir);

    // Two partitions more, and a group whose records land in the last one.
    assert!(w.admin.add_partitions(&w.offsets_topic, w.offsets_partitions + 2).expect("grows the offsets topic"));
    let group = format!("{p}-after");
    let (key, value) = common::commit(&group, &topic, 0, 3, 20).encode();
    // A producer learns of new partitions with its next metadata refresh: a new one, until it does.
    common::until("a producer knows the new partition", Duration::from_secs(30), Duration::from_millis(200), || {
        let writer = kshard_kafka::RecordWriter::new(&w.client).map_err(|e| e.to_string())?;
        writer.send(&w.offsets_topic, w.offsets_partitions + 1, &key, value.as_deref()).map_err(|e| e.to_string())?;
        writer.flush(Duration::from_secs(30)).map_err(|e| e.to_string())
    });
    let lag = common::partition_lag("kshard", &group, &topic, 0);
    service.eventually("the new partition's group is read", |m| m.get(&lag) == Some(&30.0));
    let (_, ready) = service.get("/ready");
    let ready: serde_json::Value = serde_json::from_str(&ready).expect("JSON");
    let shards = ready["shards"].as_object().expect("shards on /ready");
    assert_eq!(shards.len(), w.offsets_partitions as usize + 2, "{ready}");
    drop(service);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
#[ignore = "needs the real broker or etcd: scripts/test.sh runs it (or cargo test -- --include-ignored)"]
fn with_both_the_data_directory_and_the_recovery_logs_lost_the_offsets_topic_is_read_again() {
    let broker = Broker::from_env_or_start();
    let p = unique_name("lag-lost");
    let w = Writer::new(broker.brokers(), &p);
    let topic = format!("{p}-t");
    w.topic(&topic, &[100]);
    for g in 0..5 {
        w.commit(&format!("{p}-g{g}"), &topic, 0, 3, 10 * (g + 1));
    }
    w.flush();
    let dir = std::env::temp_dir().join(unique_name("kshard-lag-lost"));
    let mut first = start(&w, &p, &dir);
    let lag = kshard_metric_lag(&mut first, "kshard", &p);
    assert_eq!(lag.len(), 5);
    drop(first);

    // Both copies gone: the store and its recovery log.
    std::fs::remove_dir_all(&dir).expect("deletes the data directory");
    let log = kshard_lag::recovery_log_topic(&w.offsets_topic);
    assert!(w.admin.delete_topic(&log).expect("deletes the recovery logs"));
    common::until("the recovery-log topic is gone", Duration::from_secs(60), Duration::from_millis(200), || {
        match w.admin.partition_count(&log) {
            Ok(None) => Ok(()),
            other => Err(format!("{other:?}")),
        }
    });
    let mut second = start(&w, &p, &dir);
    let read = second.metrics().get(RECORDS).copied().unwrap_or(0.0);
    assert!(read >= 5.0, "rebuilt from the offsets topic itself: {read} records read");
    assert_eq!(kshard_metric_lag(&mut second, "kshard", &p), lag);
    drop(second);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Two deployments with their own data directories and the same recovery-log
/// topic (both with the default, of the same offsets topic) take each
/// other's logs over: one whose writes are fenced, though it is its
/// deployment's only member, says on `/ready` (503) that another deployment
/// writes to its recovery-log topic.
#[test]
#[ignore = "needs the real broker or etcd: scripts/test.sh runs it (or cargo test -- --include-ignored)"]
fn two_deployments_on_one_recovery_log_topic_are_told_apart() {
    let broker = Broker::from_env_or_start();
    let p = unique_name("lag-two-deployments");
    let w = Writer::new(broker.brokers(), &p);
    let topic = format!("{p}-t");
    w.topic(&topic, &[100]);
    w.commit(&format!("{p}-g"), &topic, 0, 3, 1);
    w.flush();
    let dirs = [0, 1].map(|i| std::env::temp_dir().join(unique_name(&format!("kshard-lag-deployment-{i}"))));
    let mut first = start(&w, &p, &dirs[0]);
    // The second takes every shard's log over as it starts.
    let mut second = start(&w, &p, &dirs[1]);
    let mut offset = 2;
    let told =
        common::until("a deployment is told of the other", Duration::from_secs(90), Duration::from_millis(500), || {
            // Commits make both write, and the one taken over learns it.
            w.commit(&format!("{p}-g"), &topic, 0, 3, offset);
            w.flush();
            offset += 1;
            for service in [&mut first, &mut second] {
                let (status, body) = service.get("/ready");
                if status == 503 && body.contains("another kshard deployment writes to the same recovery-log topic") {
                    return Ok(body);
                }
            }
            Err("neither says so yet".to_owned())
        });
    eprintln!("{told}");
    drop(first);
    drop(second);
    for dir in dirs {
        let _ = std::fs::remove_dir_all(dir);
    }
}
