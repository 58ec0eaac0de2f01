//! Consumer status (Burrow's rules) and records lost to retention, from real
//! commits through Kafka's group coordinator on the real broker: a consumer
//! that stops committing while behind (STOP), one that commits the same offset
//! again and again while behind (STALL), one rewound with Kafka's own
//! `kafka-consumer-groups --reset-offsets` (REWIND), and one whose unread
//! records are deleted (`DeleteRecords`) before it reads them.

mod common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use common::*;
use kshard_kafka::OffsetCommitter;
use kshard_lag::service::ServeOptions;
use kshard_testkit::{Broker, kafka_tool, unique_name};

/// Each group's status, and each (group, partition)'s status and records
/// lost, from `/api/groups`.
fn statuses(service: &mut TestService) -> (BTreeMap<String, String>, BTreeMap<String, (String, i64)>) {
    let (status, body) = service.get("/api/groups");
    assert_eq!(status, 200, "{body}");
    let groups: serde_json::Value = serde_json::from_str(&body).expect("JSON");
    let mut of_group = BTreeMap::new();
    let mut of_partition = BTreeMap::new();
    for g in groups.as_array().expect("an array") {
        let id = g["group_id"].as_str().expect("id").to_owned();
        of_group.insert(id.clone(), g["status"].as_str().expect("status").to_owned());
        for t in g["topics"].as_array().expect("topics") {
            for p in t["partitions"].as_array().expect("partitions") {
                let status = p["status"].as_str().expect("status").to_owned();
                of_partition.insert(id.clone(), (status, p["records_lost"].as_i64().expect("records_lost")));
            }
        }
    }
    (of_group, of_partition)
}

#[test]
#[ignore = "needs the real broker or etcd: scripts/test.sh runs it (or cargo test -- --include-ignored)"]
fn statuses_and_records_lost_arise_from_real_commit_patterns() {
    let broker = Broker::from_env_or_start();
    let p = unique_name("status");
    let w = Writer::new(broker.brokers(), &p);
    let (topic, doomed) = (format!("{p}-t"), format!("{p}-doomed"));
    w.topic(&topic, &[100]);
    w.topic(&doomed, &[100]);
    w.flush();
    let group = |name: &str| format!("{p}-{name}");
    let committer = |name: &str| OffsetCommitter::new(&w.client, &group(name)).expect("committer");
    let (stopped, stalled, rewound, lost) =
        (committer("stopped"), committer("stalled"), committer("rewound"), committer("lost"));
    lost.commit(&[(&doomed, 0, 10)]).expect("commit");
    let options = ServeOptions {
        watermark_interval: Duration::from_millis(200),
        monitor: only(&p),
        ..ServeOptions::new(w.settings.clone())
    };
    let mut service = TestService::start(options);
    service.wait_ready();

    // Commits 1.1 s apart (the rules look at seconds): "stopped" commits
    // twice and stops, "stalled" commits 10 every time, "rewound" moves on.
    for round in 0..4 {
        if round < 2 {
            stopped.commit(&[(&topic, 0, 10 + 10 * round)]).expect("commit");
        }
        stalled.commit(&[(&topic, 0, 10)]).expect("commit");
        rewound.commit(&[(&topic, 0, 40 + 10 * round)]).expect("commit");
        std::thread::sleep(Duration::from_millis(1100));
    }
    // Kafka's own tool moves "rewound" back to offset 5 (a commit of its own).
    let reset = kafka_tool(
        "consumer-groups",
        &[
            "--bootstrap-server",
            broker.brokers(),
            "--group",
            &group("rewound"),
            "--topic",
            &topic,
            "--reset-offsets",
            "--to-offset",
            "5",
            "--execute",
        ],
    );
    assert!(reset.contains(&group("rewound")), "{reset}");
    // Retention (here DeleteRecords) takes "lost"'s unread records up to 50.
    assert_eq!(w.admin.delete_records(&doomed, 0, 50).expect("delete records"), 50);

    let deadline = Instant::now() + Duration::from_secs(30);
    let mut last_stalled_commit = Instant::now();
    loop {
        // "stalled" keeps committing the same offset, so it is not stopped.
        if last_stalled_commit.elapsed() >= Duration::from_millis(1100) {
            stalled.commit(&[(&topic, 0, 10)]).expect("commit");
            last_stalled_commit = Instant::now();
        }
        let (groups, partitions) = statuses(&mut service);
        let seen = |name: &str| partitions.get(&group(name)).cloned().unwrap_or_default();
        let done = seen("stopped").0 == "STOP"
            && seen("stalled").0 == "STALL"
            && seen("rewound").0 == "REWIND"
            && seen("lost").1 == 40;
        if done {
            for name in ["stopped", "stalled", "rewound"] {
                assert_eq!(groups[&group(name)], "ERR", "{name}: a partition in error makes the group ERR");
            }
            let m = service.metrics();
            let status =
                format!("kshard_kafka_consumer_group_status{{group_id=\"{}\",status=\"ERR\"}}", group("stalled"));
            assert_eq!(m.get(&status), Some(&3.0));
            let lost = format!(
                "kshard_kafka_consumer_group_topic_partition_records_lost{{group_id=\"{}\",topic_name=\"{doomed}\",partition_id=\"0\"}}",
                group("lost")
            );
            assert_eq!(m.get(&lost), Some(&40.0));
            return;
        }
        assert!(
            Instant::now() < deadline,
            "statuses never arose: stopped {:?}, stalled {:?}, rewound {:?}, lost {:?}",
            seen("stopped"),
            seen("stalled"),
            seen("rewound"),
            seen("lost")
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}
