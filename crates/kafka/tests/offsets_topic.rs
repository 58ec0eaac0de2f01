//! Against the real broker: produce canonical records of every kind into a
//! compacted topic laid out like `__consumer_offsets` (Kafka refuses client
//! writes to the real one; each record goes to the partition Kafka would pick
//! for its group), read the topic back from the earliest offset to the end of
//! every partition, and check that each record decodes to exactly what was
//! written.
//!
//! The broker is the one in `KSHARD_BROKERS` (set by `scripts/test.sh`), or one
//! this test starts with `scripts/broker.sh` and stops when it ends.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use kshard_kafka::{Admin, Client, PartitionReader, ReadEvent, RecordWriter, TopicSpec};
use kshard_offsets::*;

fn offset_commit(group: &str, partition: i32, version: i16, offset: i64) -> Record<'static> {
    let value = OffsetCommitValue {
        leader_epoch: (version >= 3).then_some(4),
        metadata: Cow::Owned(format!("meta-v{version}")),
        expire_timestamp: (version == 1).then_some(1_758_335_999_999),
        topic_id: (version >= 4).then_some(Uuid([7; 16])),
        ..OffsetCommitValue::new(version, offset, 1_758_335_260_726 + offset)
    };
    Record::offset_commit(group.to_owned(), "orders", partition, Some(value))
}

fn group_metadata(group: &str, version: i16) -> Record<'static> {
    let assigned = vec![TopicPartitions { topic: "orders".into(), partitions: vec![0, 1, 2] }];
    let member = MemberMetadata {
        group_instance_id: if version >= 3 { Some("instance-1".into()) } else { None },
        rebalance_timeout: (version >= 1).then_some(300_000),
        ..MemberMetadata::consumer("member-1", "client-1", vec!["orders".into()], assigned)
    };
    let value = GroupMetadataValue {
        current_state_timestamp: (version >= 2).then_some(1_758_335_260_000),
        ..GroupMetadataValue::consumer(version, 3, vec![member])
    };
    Record::group_metadata(group.to_owned(), Some(value))
}

/// Every kind of record, for groups named `prefix-…`.
fn canonical_records(prefix: &str) -> Vec<Record<'static>> {
    let mut records = Vec::new();
    for version in 0..=4 {
        let group = format!("{prefix}-classic-v{version}");
        records.push(offset_commit(&group, 0, version, 100 + i64::from(version)));
        records.push(offset_commit(&group, 1, version, 200));
        records.push(group_metadata(&group, version));
    }
    // An offset tombstone and a group tombstone.
    let gone = format!("{prefix}-deleted");
    records.push(offset_commit(&gone, 0, 3, 5));
    records.push(Record { key: offset_commit(&gone, 0, 3, 5).key, value: None });
    records
        .push(Record { key: RecordKey::GroupMetadata(GroupMetadataKey { group: gone.clone().into() }), value: None });
    // KIP-848 records.
    let group_id: Cow<'static, str> = format!("{prefix}-kip848").into();
    records.push(Record {
        key: RecordKey::ConsumerGroupMetadata(GroupIdKey { group_id: group_id.clone() }),
        value: Some(RecordValue::ConsumerGroupMetadata(ConsumerGroupMetadataValue {
            version: 0,
            epoch: 9,
            metadata_hash: 42,
            creation_time_ms: -1,
        })),
    });
    records.push(Record {
        key: RecordKey::ConsumerGroupMemberMetadata(MemberKey { group_id: group_id.clone(), member_id: "m".into() }),
        value: Some(RecordValue::ConsumerGroupMemberMetadata(ConsumerGroupMemberMetadataValue {
            version: 0,
            instance_id: None,
            rack_id: Some("rack-a".into()),
            client_id: "c".into(),
            client_host: "/127.0.0.1".into(),
            subscribed_topic_names: vec!["orders".into()],
            subscribed_topic_regex: None,
            rebalance_timeout_ms: 30_000,
            server_assignor: Some("uniform".into()),
            classic_member_metadata: None,
        })),
    });
    records.push(Record {
        key: RecordKey::ConsumerGroupCurrentMemberAssignment(MemberKey {
            group_id: group_id.clone(),
            member_id: "m".into(),
        }),
        value: Some(RecordValue::ConsumerGroupCurrentMemberAssignment(ConsumerGroupCurrentMemberAssignmentValue {
            version: 0,
            member_epoch: 9,
            previous_member_epoch: 8,
            state: 0,
            assigned_partitions: vec![TopicIdPartitions {
                topic_id: Uuid([1; 16]),
                partitions: vec![0, 1],
                assignment_epochs: None,
            }],
            partitions_pending_revocation: vec![],
        })),
    });
    records.push(offset_commit(&group_id, 2, 4, 77));
    // A share-group record: key type 11 (ShareGroupMetadataKey).
    records.push(Record {
        key: RecordKey::ShareGroupMetadata(GroupIdKey { group_id: group_id.clone() }),
        value: Some(RecordValue::ShareGroupMetadata(ShareGroupMetadataValue {
            version: 0,
            epoch: 9,
            metadata_hash: 7,
        })),
    });
    records
}

/// The group a record belongs to, when its key names one.
fn group_of<'r>(key: &'r RecordKey<'_>) -> Option<&'r str> {
    match key {
        RecordKey::OffsetCommit { key, .. } => Some(&key.group),
        RecordKey::GroupMetadata(k) => Some(&k.group),
        other => other.group_id_key().map(|k| &*k.group_id).or_else(|| other.member_key().map(|k| &*k.group_id)),
    }
}

#[test]
#[ignore = "needs the real broker or etcd: scripts/test.sh runs it (or cargo test -- --include-ignored)"]
fn canonical_records_round_trip_through_the_broker() {
    let broker = kshard_testkit::Broker::from_env_or_start();
    let settings = Client::to_brokers(broker.brokers());
    let admin = Admin::new(&settings, Duration::from_secs(30)).expect("admin client");
    let prefix = kshard_testkit::unique_name("offsets-it");
    let topic = format!("{prefix}-offsets");
    assert!(admin.create_topic(&TopicSpec::compacted(&topic, 50)).expect("create the topic"));
    let partitions = admin.partition_count(&topic).expect("metadata").expect("topic exists");
    assert_eq!(partitions, 50);

    let records = canonical_records(&prefix);
    // Share-group record keys are opaque here; route them by the group id they carry.
    let share_group = format!("{prefix}-kip848");
    let writer = RecordWriter::new(&settings).expect("producer");
    let mut expected: BTreeMap<i32, Vec<Record<'static>>> = BTreeMap::new();
    for record in &records {
        let group = group_of(&record.key).unwrap_or(&share_group);
        let partition = kshard_kafka::offsets_partition_for(group, partitions);
        let (key, value) = record.encode();
        writer.send(&topic, partition, &key, value.as_deref()).expect("send");
        expected.entry(partition).or_default().push(record.clone());
    }
    writer.flush(Duration::from_secs(30)).expect("flush");

    let start: Vec<(i32, Option<i64>)> = (0..partitions).map(|p| (p, None)).collect();
    let reader = PartitionReader::new(&settings, &topic, &start).expect("reader");
    let mut at_end = vec![false; partitions as usize];
    let mut read: BTreeMap<i32, Vec<Record<'static>>> = BTreeMap::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    while at_end.iter().any(|e| !e) {
        assert!(Instant::now() < deadline, "not at the end of every partition after 60 s: {at_end:?}");
        match reader.poll(Duration::from_millis(200)).expect("poll") {
            ReadEvent::Record(r) => {
                // The topic is this test's own: every record in it is ours.
                let key = r.key().expect("offsets records have keys");
                let record = Record::decode(key, r.value())
                    .unwrap_or_else(|e| panic!("partition {} offset {}: {e}", r.partition(), r.offset()));
                read.entry(r.partition()).or_default().push(owned(record));
            }
            ReadEvent::EndOfPartition { partition, .. } => at_end[partition as usize] = true,
            ReadEvent::Idle => {}
        }
    }
    assert_eq!(read, expected);
    // Spot checks on what the broker carried.
    let all: Vec<&Record<'_>> = read.values().flatten().collect();
    assert_eq!(all.iter().filter(|r| r.is_tombstone()).count(), 2);
    let versions: Vec<i16> = all
        .iter()
        .filter_map(|r| match &r.value {
            Some(RecordValue::OffsetCommit(v)) => Some(v.version),
            _ => None,
        })
        .collect();
    for v in 0..=4 {
        assert!(versions.contains(&v), "offset commit v{v} read back");
    }
}

/// A decoded record that no longer borrows from the client's buffer.
fn owned(record: Record<'_>) -> Record<'static> {
    let (key, value) = record.encode();
    let key: &'static [u8] = Box::leak(key.into_boxed_slice());
    let value: Option<&'static [u8]> = value.map(|v| &*Box::leak(v.into_boxed_slice()));
    Record::decode(key, value).expect("re-decodes")
}
