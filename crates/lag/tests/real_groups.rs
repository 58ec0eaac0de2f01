//! `kshard serve` against groups that commit through Kafka's group coordinator —
//! classic consumer groups, KIP-848 groups (`group.protocol=consumer`), plain
//! commits without membership, and transactional commits, committed, aborted
//! and left open (a producer killed inside its transaction: see
//! `open_transactions.rs`) — so every record kshard reads was written by Kafka itself.
//! The oracle is Kafka's own `kafka-consumer-groups --describe`: kshard's
//! `/api/groups` and `/metrics` must agree with it exactly, in both scrape modes.

mod common;

use std::time::Duration;

use common::*;
use kshard_kafka::{Client, GroupConsumer, GroupProtocol, OffsetCommitter, TransactionEnd, TransactionalCommitter};
use kshard_lag::service::{ScrapeMode, ServeOptions};
use kshard_testkit::{Broker, KafkaLag, kafka_consumer_groups, unique_name};

fn serve(settings: &Client, mode: ScrapeMode, prefix: &str) -> TestService {
    TestService::start(ServeOptions {
        mode,
        watermark_interval: Duration::from_millis(200),
        monitor: only(prefix),
        ..ServeOptions::new(settings.settings().clone())
    })
}

/// Waits until kshard's API and metrics report exactly what Kafka's tool does.
fn assert_agrees_with_kafka(service: &mut TestService, expected: &[KafkaLag], prefix: &str, mode: &str) {
    let by_key: std::collections::BTreeMap<(String, String, i32), i64> =
        expected.iter().map(|r| ((r.group.clone(), r.topic.clone(), r.partition), r.lag)).collect();
    until(mode, Duration::from_secs(30), Duration::from_millis(200), || {
        let api = kshard_api_lag(service, prefix);
        let metrics = kshard_metric_lag(service, "kshard", prefix);
        if api == expected && metrics == by_key {
            Ok(())
        } else {
            Err(format!(
                "kshard disagrees with kafka-consumer-groups\nkafka:  {expected:#?}\n/api/groups: {api:#?}\n/metrics: {metrics:#?}"
            ))
        }
    });
}

#[test]
#[ignore = "needs the real broker or etcd: scripts/test.sh runs it (or cargo test -- --include-ignored)"]
fn lag_of_real_groups_equals_kafka_consumer_groups_in_both_modes() {
    let broker = Broker::from_env_or_start();
    let settings = Client::to_brokers(broker.brokers());
    let p = unique_name("real");
    let orders = format!("{p}-orders");
    let events = format!("{p}-events");
    create_and_fill(&settings, &orders, &[40, 40, 40]);
    create_and_fill(&settings, &events, &[30, 30]);

    // A classic group that stays a member, and a KIP-848 group.
    let classic = format!("{p}-classic");
    let classic_member = GroupConsumer::new(&settings, &classic, &[&orders]).expect("classic consumer");
    assert_eq!(classic_member.consume(50, Duration::from_secs(60)).expect("consume"), 50);
    classic_member.commit().expect("commit");
    let kip848 = format!("{p}-kip848");
    let kip848_member = GroupConsumer::with_protocol(&settings, &kip848, &[&events], GroupProtocol::Consumer)
        .expect("KIP-848 consumer");
    assert_eq!(kip848_member.consume(20, Duration::from_secs(60)).expect("consume"), 20);
    kip848_member.commit().expect("commit");
    // Plain commits by a group without members.
    let simple = format!("{p}-simple");
    OffsetCommitter::new(&settings, &simple)
        .expect("committer")
        .commit(&[(&orders, 0, 5), (&orders, 1, 7)])
        .expect("commit");
    // Transactional commits: one committed, then one aborted.
    let txn = format!("{p}-txn");
    let committer =
        TransactionalCommitter::new(&settings, &format!("{p}-txid"), &txn, Duration::from_secs(60)).expect("txn");
    committer.commit(&[(&events, 0, 11), (&events, 1, 3)], TransactionEnd::Commit).expect("committed transaction");
    committer.commit(&[(&events, 0, 15)], TransactionEnd::Abort).expect("aborted transaction");

    let kafka = kafka_consumer_groups(broker.brokers(), &p);
    let row = |group: &str, topic: &str, partition: i32| {
        kafka.iter().find(|r| r.group == group && r.topic == topic && r.partition == partition).cloned()
    };
    assert_eq!(row(&txn, &events, 0).map(|r| r.committed), Some(11), "the aborted commit never counts: {kafka:#?}");
    assert_eq!(row(&simple, &orders, 1).map(|r| (r.committed, r.lag)), Some((7, 33)));
    assert!(kafka.iter().any(|r| r.group == classic) && kafka.iter().any(|r| r.group == kip848), "{kafka:#?}");

    let mut service = serve(&settings, ScrapeMode::OffsetsTopic, &p);
    service.wait_ready();
    assert_agrees_with_kafka(&mut service, &kafka, &p, "offsets_topic mode");
    let info = |service: &mut TestService, group: &str| {
        let head = format!("kshard_kafka_consumer_group_info{{group_id=\"{group}\",");
        service.metrics().into_iter().find(|(k, _)| k.starts_with(&head)).map(|(k, _)| k)
    };
    let classic_info = info(&mut service, &classic).expect("info of the classic group");
    assert!(classic_info.contains("state=\"Stable\""), "{classic_info}");
    // The KIP-848 group's member and its assignment (by topic id in the log,
    // named through the ids offset commits carry), like a classic group's.
    let m = service.metrics();
    assert_eq!(m.get(&format!("kshard_kafka_consumer_group_members{{group_id=\"{kip848}\"}}")), Some(&1.0));
    let assigned = format!(
        "kshard_kafka_consumer_group_topic_assigned_partitions{{group_id=\"{kip848}\",topic_name=\"{events}\"}}"
    );
    assert_eq!(m.get(&assigned), Some(&2.0), "{m:#?}");
    // Everything Kafka wrote decodes (KIP-848 member records included).
    let skipped: Vec<(String, f64)> = service
        .metrics()
        .into_iter()
        .filter(|(k, v)| k.starts_with("kshard_offsets_records_skipped") && *v > 0.0)
        .collect();
    assert!(skipped.is_empty(), "records Kafka wrote were skipped: {skipped:?}");
    drop(service);

    let mut service = serve(&settings, ScrapeMode::AdminApi, &p);
    service.wait_ready();
    assert_agrees_with_kafka(&mut service, &kafka, &p, "admin_api mode");
    let classic_info = info(&mut service, &classic).expect("info of the classic group");
    assert!(classic_info.contains("state=\"Stable\""), "{classic_info}");
    // DescribeGroups: members and assignments of both kinds of group.
    let m = service.metrics();
    let assigned = |group: &str, topic: &str| {
        m.get(&format!(
            "kshard_kafka_consumer_group_topic_assigned_partitions{{group_id=\"{group}\",topic_name=\"{topic}\"}}"
        ))
        .copied()
    };
    assert_eq!(assigned(&classic, &orders), Some(3.0), "{m:#?}");
    assert_eq!(assigned(&kip848, &events), Some(2.0), "{m:#?}");
    assert!(classic_info.contains("protocol=\"range\""), "the assignor: {classic_info}");
    drop((classic_member, kip848_member));
}
