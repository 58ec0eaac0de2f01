//! [`kshard_kafka::ShareGroupsAdmin`] against the real broker: a share group
//! (Kafka's console share consumer) accepts and releases records; the group
//! is listed with its state, its start offset and lag equal
//! `kafka-share-groups --describe --offsets`, and ShareGroupDescribe answers
//! for it. A group that is not a share group is not listed.

use std::time::Duration;

use kshard_kafka::{Admin, Client, OffsetCommitter, RecordWriter, ShareGroupsAdmin, TopicSpec};
use kshard_testkit::{Broker, kafka_share_groups, share_consume, share_from_earliest, unique_name};

/// Topic, partition, start offset and lag (`None`: not initialized).
type Row = (String, i32, Option<i64>, Option<i64>);

#[test]
#[ignore = "needs the real broker or etcd: scripts/test.sh runs it (or cargo test -- --include-ignored)"]
fn share_groups_are_listed_and_described_as_kafka_describes_them() {
    let broker = Broker::from_env_or_start();
    let settings = Client::to_brokers(broker.brokers());
    let admin = Admin::new(&settings, Duration::from_secs(30)).expect("admin");
    let (topic, group) = (unique_name("share-admin"), unique_name("share-admin-group"));
    admin
        .create_topic(&TopicSpec { name: topic.clone(), partitions: 2, replication: 1, configs: vec![] })
        .expect("topic");
    let writer = RecordWriter::new(&settings).expect("producer");
    for i in 0..20 {
        writer.send(&topic, i % 2, format!("k{i}").as_bytes(), Some(b"v")).expect("send");
    }
    writer.flush(Duration::from_secs(30)).expect("flush");
    share_from_earliest(broker.brokers(), &group);
    share_consume(broker.brokers(), &group, &topic, 6, None);
    share_consume(broker.brokers(), &group, &topic, 2, Some("--release"));
    // A classic group that commits is not a share group.
    let classic = unique_name("share-admin-classic");
    OffsetCommitter::new(&settings, &classic).expect("committer").commit(&[(&topic, 0, 1)]).expect("commit");

    let share = ShareGroupsAdmin::new(&settings, Duration::from_secs(30)).expect("settings").expect("own client");
    let listed = share.list().expect("ListGroups");
    assert!(listed.iter().any(|g| g.group_id == group && !g.state.is_empty()), "{listed:?}");
    assert!(!listed.iter().any(|g| g.group_id == classic), "{listed:?}");

    // -1 is what Kafka's tool prints as "-": a partition not initialized.
    let known = |n: i64| (n >= 0).then_some(n);
    let mut ours: Vec<Row> = share.offsets(std::slice::from_ref(&group)).expect("offsets")[0]
        .partitions
        .iter()
        .map(|p| (p.topic.clone(), p.partition, known(p.start_offset), known(p.lag)))
        .collect();
    ours.sort();
    let mut kafka: Vec<Row> = kafka_share_groups(broker.brokers(), &group)
        .into_iter()
        .map(|r| (r.topic, r.partition, r.start_offset, r.lag))
        .collect();
    kafka.sort();
    assert!(!kafka.is_empty(), "Kafka describes the group's partitions");
    assert_eq!(ours, kafka);

    let described = share.describe(std::slice::from_ref(&group)).expect("ShareGroupDescribe");
    assert_eq!(described.len(), 1, "{described:?}");
    assert_eq!((described[0].group_id.as_str(), described[0].error.as_deref()), (group.as_str(), None));
    assert!(described[0].epoch > 0, "{described:?}");
}
