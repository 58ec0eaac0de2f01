//! [`kshard_kafka::Traffic`] against the real broker: kshard's own
//! connections count each request and answer as they go; a librdkafka
//! producer's statistics (every 10 s) add what it sent. Each test has
//! settings of its own, so its counts are its own.

use std::time::{Duration, Instant};

use kshard_kafka::{Admin, Client, ClusterAdmin, RecordWriter, TopicSpec};
use kshard_testkit::{Broker, unique_name};

#[test]
#[ignore = "needs the real broker or etcd: scripts/test.sh runs it (or cargo test -- --include-ignored)"]
fn kshards_own_requests_are_counted_as_they_go() {
    let broker = Broker::from_env_or_start();
    let settings = Client::to_brokers(broker.brokers());
    assert_eq!(settings.traffic().totals().requests_sent, 0);
    let admin = ClusterAdmin::new(&settings, Duration::from_secs(10)).expect("settings").expect("kshard's client");
    admin.describe(&["cleanup.policy".to_owned()], true).expect("describes");
    let after = settings.traffic().totals();
    assert!(after.requests_sent >= 3, "Metadata, DescribeConfigs, DescribeLogDirs at least: {after:?}");
    assert_eq!(after.requests_sent, after.responses_received, "one answer to each");
    assert!(after.bytes_received > after.bytes_sent, "metadata answers are larger than their requests");
    // Clones share the counters: every client of one cluster adds up.
    let clone = settings.clone();
    ClusterAdmin::new(&clone, Duration::from_secs(10))
        .expect("settings")
        .expect("client")
        .describe(&[], false)
        .expect("describes");
    assert!(settings.traffic().totals().requests_sent > after.requests_sent);
}

#[test]
#[ignore = "needs the real broker or etcd: scripts/test.sh runs it (or cargo test -- --include-ignored)"]
fn a_librdkafka_producer_reports_what_it_sent() {
    let broker = Broker::from_env_or_start();
    let settings = Client::to_brokers(broker.brokers());
    let topic = unique_name("traffic");
    Admin::new(&settings, Duration::from_secs(30))
        .expect("admin")
        .create_topic(&TopicSpec { name: topic.clone(), partitions: 1, replication: 1, configs: Vec::new() })
        .expect("topic");
    let before = settings.traffic().totals();
    let writer = RecordWriter::new(&settings).expect("producer");
    let value = vec![7u8; 1000];
    for _ in 0..100 {
        writer.send(&topic, 0, b"k", Some(&value)).expect("queued");
    }
    writer.flush(Duration::from_secs(30)).expect("written");
    // The producer reports its totals every 10 s.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let now = settings.traffic().totals();
        if now.bytes_sent >= before.bytes_sent + 100 * 1000 {
            assert!(now.requests_sent > before.requests_sent, "{now:?}");
            assert!(now.responses_received > before.responses_received, "{now:?}");
            break;
        }
        assert!(Instant::now() < deadline, "the producer's 100 kB never counted: {now:?}");
        std::thread::sleep(Duration::from_millis(200));
    }
}
