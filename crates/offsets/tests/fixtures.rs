//! Byte fixtures, each saying where its bytes came from, and the errors that
//! malformed bytes produce.

use kshard_offsets::*;

fn unhex(s: &str) -> Vec<u8> {
    let clean: String = s.chars().filter(|c| !c.is_whitespace()).collect();
    hex::decode(clean).expect("fixture hex")
}

/// Key `0001 | "g1" | "t1" | partition 10`, hand-assembled from `OffsetCommitKey`.
const KEY_G1_T1_P10: &str = "0001 0002 6731 0002 7431 0000000a";

fn offset_value(hex: &str) -> OffsetCommitValue<'static> {
    let key = unhex(KEY_G1_T1_P10);
    let value = unhex(hex);
    match Record::decode(&key, Some(&value)) {
        Ok(Record { value: Some(RecordValue::OffsetCommit(v)), .. }) => {
            OffsetCommitValue { metadata: v.metadata.into_owned().into(), ..v }
        }
        other => panic!("expected an offset commit, got {other:?}"),
    }
}

#[test]
fn offset_commit_v4_as_written_by_kafka_4_1() {
    // The v4 value quoted in ARCHITECTURE.md, as a Kafka 4.1 broker wrote it:
    // version 4, offset 2217128, leader epoch -1, empty compact metadata,
    // commit timestamp 1758335260726, no tagged fields.
    let v = offset_value("0004 000000000021d4a8 ffffffff 01 0000019964f2d836 00");
    assert_eq!(v.version, 4);
    assert_eq!(v.offset, 2_217_128);
    assert_eq!(v.leader_epoch, Some(-1));
    assert_eq!(v.metadata, "");
    assert_eq!(v.commit_timestamp, 1_758_335_260_726);
    assert_eq!(v.expire_timestamp, None);
    assert_eq!(v.topic_id, None);
}

#[test]
fn offset_commit_v4_with_topic_id_and_an_unknown_tag() {
    // The Kafka 4.1 value above with tagged fields added by hand: tag 0 (topicId,
    // 16 bytes) and tag 7 (unknown to this codec: 2 bytes, skipped).
    let v = offset_value(
        "0004 000000000021d4a8 ffffffff 01 0000019964f2d836
         02 00 10 00000000000000000000000000000001 07 02 abcd",
    );
    let mut id = [0u8; 16];
    id[15] = 1;
    assert_eq!(v.topic_id, Some(Uuid(id)));
    assert_eq!(v.topic_id.map(|u| u.to_string()).as_deref(), Some("AAAAAAAAAAAAAAAAAAAAAQ"));
}

#[test]
fn offset_commit_v4_metadata_longer_than_one_byte_length() {
    // Burrow reads v4's compact-string length as one byte; a 200-byte metadata
    // string has the two-byte varint length 0xc9 0x01 (201 = N + 1).
    let metadata = "m".repeat(200);
    let hex = format!("0004 0000000000000005 00000003 c901 {} 0000000000000001 00", hex::encode(&metadata));
    let v = offset_value(&hex);
    assert_eq!(v.metadata, metadata);
    assert_eq!(v.offset, 5);
    assert_eq!(v.leader_epoch, Some(3));
}

#[test]
fn offset_commit_v0_to_v3_hand_assembled_from_the_schema() {
    // v0 and v2: offset, metadata (int16 length), commit timestamp.
    for version in ["0000", "0002"] {
        let v = offset_value(&format!("{version} 0000000000000064 0002 6869 0000000000000010"));
        assert_eq!((v.offset, v.metadata.as_ref(), v.commit_timestamp), (100, "hi", 16));
        assert_eq!((v.leader_epoch, v.expire_timestamp), (None, None));
    }
    // v1 adds the expire timestamp.
    let v = offset_value("0001 0000000000000064 0000 0000000000000010 0000000000000020");
    assert_eq!(v.expire_timestamp, Some(32));
    // v3 adds the leader epoch before metadata.
    let v = offset_value("0003 0000000000000064 00000007 0000 0000000000000010");
    assert_eq!(v.leader_epoch, Some(7));
}

#[test]
fn offset_commit_newer_than_v4_reads_as_v4() {
    // KIP-915: a v5 value has the v4 layout plus, at most, new tagged fields.
    let v = offset_value("0005 000000000021d4a8 ffffffff 01 0000019964f2d836 01 09 01 ff");
    assert_eq!((v.version, v.offset), (5, 2_217_128));
}

#[test]
fn tombstones_have_no_value() {
    let key = unhex(KEY_G1_T1_P10);
    let record = Record::decode(&key, None).expect("decodes");
    assert!(record.is_tombstone());
    assert_eq!(record.key.record_type(), RecordType::OffsetCommit);
    // A group tombstone: key type 2, group "g1".
    let key = unhex("0002 0002 6731");
    let record = Record::decode(&key, None).expect("decodes");
    assert!(record.is_tombstone());
    assert_eq!(record.key, RecordKey::GroupMetadata(GroupMetadataKey { group: "g1".into() }));
}

#[test]
fn group_metadata_v3_with_a_consumer_member() {
    // Hand-assembled from GroupMetadataValue v3 and the consumer protocol: group
    // "consumer"/"range", generation 5, one static member subscribed (v1) to "t"
    // and assigned (v0) partitions 0 and 1 of "t".
    let subscription = "0001 00000001 0001 74 ffffffff 00000000";
    let assignment = "0000 00000001 0001 74 00000002 00000000 00000001 ffffffff";
    let value = format!(
        "0003 0008 {consumer} 00000005 0005 {range} 0002 6d31 0000000000000063
         00000001 0002 6d31 0002 6931 0001 63 0001 68 00007530 00002710
         {slen:08x} {subscription} {alen:08x} {assignment}",
        consumer = hex::encode("consumer"),
        range = hex::encode("range"),
        slen = unhex(subscription).len(),
        alen = unhex(assignment).len(),
    );
    let key = unhex("0002 0002 6731");
    let value = unhex(&value);
    let Ok(Record { value: Some(RecordValue::GroupMetadata(v)), .. }) = Record::decode(&key, Some(&value)) else {
        panic!("expected group metadata");
    };
    assert_eq!(v.protocol_type, "consumer");
    assert_eq!(v.protocol.as_deref(), Some("range"));
    assert_eq!(v.current_state_timestamp, Some(99));
    let m = &v.members[0];
    assert_eq!(m.group_instance_id.as_deref(), Some("i1"));
    assert_eq!((m.rebalance_timeout, m.session_timeout), (Some(30_000), 10_000));
    let sub = m.consumer_subscription().expect("subscription");
    assert_eq!(sub.topics, vec!["t"]);
    assert_eq!(sub.owned_partitions, Some(vec![]));
    let asg = m.consumer_assignment().expect("assignment").expect("assigned");
    assert_eq!(asg.assigned_partitions, vec![TopicPartitions { topic: "t".into(), partitions: vec![0, 1] }]);
}

#[test]
fn retired_schemaless_and_unknown_types_are_kept_raw() {
    for (key_version, expected) in [
        (24, RecordType::StreamsGroupTargetAssignmentResolvedTopicIds),
        (9, RecordType::Unknown(9)),
        (18, RecordType::Unknown(18)),
        (300, RecordType::Unknown(300)),
    ] {
        let mut key = i16::to_be_bytes(key_version).to_vec();
        key.extend(unhex("0002 6731"));
        let value = unhex("0000 0102");
        let record = Record::decode(&key, Some(&value)).expect("opaque records decode");
        assert_eq!(record.key.record_type(), expected);
        assert_eq!(record.key.key_version(), key_version);
        assert_eq!(record.value, Some(RecordValue::Opaque { version: 0, body: unhex("0102").into() }));
    }
    assert_eq!(RecordType::Unknown(300).name(), "unknown");
    assert_eq!(RecordType::ShareGroupMetadata.name(), "share_group_metadata");
}

fn error(key: &str, value: Option<&str>) -> DecodeError {
    let key = unhex(key);
    let value = value.map(unhex);
    Record::decode(&key, value.as_deref()).expect_err("malformed input must fail")
}

#[test]
fn malformed_input_says_what_and_where() {
    let e = error("00", None);
    assert_eq!((e.part, e.field, e.offset), (Part::Key, "key_version", 0));

    let e = error(KEY_G1_T1_P10, Some("0003 0000000000000064 0000"));
    assert_eq!((e.part, e.field, e.offset), (Part::Value, "leader_epoch", 10));
    assert_eq!(e.kind, ErrorKind::UnexpectedEnd { needed: 4, remaining: 2 });
    assert_eq!(e.to_string(), "value: field `leader_epoch` at byte 10: needs 4 bytes but only 2 remain");

    let e = error(KEY_G1_T1_P10, Some("ffff 00"));
    assert_eq!(e.kind, ErrorKind::UnsupportedVersion { record: "OffsetCommitValue", version: -1 });

    let e = error(KEY_G1_T1_P10, Some("0000 0000000000000064 0002 ff fe 0000000000000010"));
    assert_eq!((e.field, e.kind.clone()), ("metadata", ErrorKind::InvalidUtf8));

    let e = error(KEY_G1_T1_P10, Some("0000 0000000000000064 0000 0000000000000010 00"));
    assert_eq!(e.kind, ErrorKind::TrailingBytes(1));

    let e = error("0001 ffff", None);
    assert_eq!((e.field, e.kind.clone()), ("group", ErrorKind::UnexpectedNull));

    let e = error(KEY_G1_T1_P10, Some("0004 0000000000000064 ffffffff 01 0000000000000010 01 00 03 000000"));
    assert_eq!(e.kind, ErrorKind::TaggedFieldSize { tag: 0, size: 3, expected: 16 });

    let e = error(KEY_G1_T1_P10, Some("0004 0000000000000064 ffffffff ffffffffff 00"));
    assert_eq!(e.kind, ErrorKind::VarintOverflow);
}

#[test]
fn hostile_counts_are_rejected_before_allocating() {
    // A group-metadata value claiming 2^31-1 members in a few bytes: refused by the
    // length check, so no vector of that capacity is ever reserved.
    let e = error("0002 0002 6731", Some("0000 0008 636f6e73756d6572 00000001 ffff ffff 7fffffff 00"));
    assert_eq!(e.field, "members");
    assert!(matches!(e.kind, ErrorKind::UnexpectedEnd { .. }), "{e}");
}

#[test]
fn kip848_member_metadata_as_written_by_kafka_4_4() {
    // Read back from __consumer_offsets of an Apache Kafka 4.4.0 broker (KRaft)
    // after a librdkafka 2.12.1 consumer joined group "g" with
    // group.protocol=consumer, subscribed to topic "events". Kafka writes the
    // ClassicMemberMetadata tag (0) with a null marker (varint 0) for members
    // of the consumer protocol; kshard 0.1 misread that marker as an error.
    let key = unhex("0005 0001 67 0001 6d");
    let value =
        unhex("0000 00 00 07 6b7368617264 0b 2f3132372e302e302e31 02 07 6576656e7473 01 000493e0 00 01 00 01 00");
    let record = Record::decode(&key, Some(&value)).expect("decodes");
    let Some(RecordValue::ConsumerGroupMemberMetadata(v)) = &record.value else { panic!("{record:?}") };
    assert_eq!((v.client_id.as_ref(), v.client_host.as_ref()), ("kshard", "/127.0.0.1"));
    assert_eq!(v.subscribed_topic_names, ["events"]);
    assert_eq!(v.subscribed_topic_regex.as_deref(), Some(""));
    assert_eq!(v.rebalance_timeout_ms, 300_000);
    assert_eq!(v.server_assignor, None);
    assert_eq!(v.classic_member_metadata, None);
    // Encoding gives Kafka's bytes back.
    assert_eq!(record.encode().1.as_deref(), Some(value.as_slice()));
}
