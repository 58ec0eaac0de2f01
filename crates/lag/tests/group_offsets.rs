//! The state of one `__consumer_offsets` partition, driven by encoded records:
//! Kafka's semantics for commits, both kinds of tombstone, group metadata and
//! KIP-848 members, and bad input.

use std::borrow::Cow;

use kshard_lag::{Applied, DescribedMember, GroupOffsets, ReportedGroups, Skipped};
use kshard_offsets::*;

fn commit(group: &str, topic: &str, partition: i32, offset: i64) -> Record<'static> {
    let value = OffsetCommitValue {
        leader_epoch: Some(3),
        metadata: Cow::Borrowed("m"),
        ..OffsetCommitValue::new(4, offset, 77)
    };
    Record::offset_commit(group.to_owned(), topic.to_owned(), partition, Some(value))
}

fn tombstone(record: Record<'static>) -> Record<'static> {
    Record { key: record.key, value: None }
}

fn metadata(group: &str, protocol_type: &str, members: Vec<MemberMetadata<'static>>) -> Record<'static> {
    let value = GroupMetadataValue {
        protocol_type: protocol_type.to_owned().into(),
        leader: None,
        current_state_timestamp: Some(5),
        ..GroupMetadataValue::consumer(3, 7, members)
    };
    Record::group_metadata(group.to_owned(), Some(value))
}

fn member(id: &str, assignment: Vec<u8>) -> MemberMetadata<'static> {
    // Raw assignment bytes: tests give malformed ones too.
    MemberMetadata {
        client_host: "h".into(),
        rebalance_timeout: Some(1),
        session_timeout: 1,
        assignment: assignment.into(),
        ..MemberMetadata::consumer(id.to_owned(), "c", vec!["t".into()], vec![])
    }
}

fn apply(state: &mut GroupOffsets, offset: i64, record: &Record<'_>) -> Result<Applied, Skipped> {
    let (k, v) = record.encode();
    state.apply_bytes(offset, Some(&k), v.as_deref())
}

#[test]
fn commits_update_and_offset_tombstones_delete() {
    let mut s = GroupOffsets::default();
    assert_eq!(apply(&mut s, 0, &commit("g", "t", 1, 10)), Ok(Applied::OffsetCommitted));
    apply(&mut s, 1, &commit("g", "t", 1, 12)).expect("applies");
    apply(&mut s, 2, &commit("g", "t", 0, 4)).expect("applies");
    let g = s.group("g").expect("group");
    let c = g.offset("t", 1).expect("offset");
    assert_eq!((c.offset, c.commit_timestamp, c.leader_epoch, c.metadata.as_deref()), (12, 77, 3, Some("m")));
    assert_eq!(g.commits, 3);
    assert_eq!(s.offset_count(), 2);
    assert_eq!(apply(&mut s, 3, &tombstone(commit("g", "t", 1, 0))), Ok(Applied::OffsetDeleted));
    assert!(s.group("g").expect("group").offset("t", 1).is_none());
    apply(&mut s, 4, &tombstone(commit("g", "t", 0, 0))).expect("applies");
    assert!(s.group("g").is_none(), "a group with neither offsets nor metadata is gone");
    assert_eq!(s.next_offset(), Some(5));
    // The names of the group and its topic are no longer used: swept once.
    assert_eq!(s.sweep_names(), 2, "\"g\" and \"t\" are dropped");
    assert_eq!(s.sweep_names(), 0);
}

#[test]
fn a_group_tombstone_deletes_metadata_but_keeps_offsets() {
    let mut s = GroupOffsets::default();
    apply(&mut s, 0, &metadata("g", "consumer", vec![member("m1", vec![])])).expect("applies");
    apply(&mut s, 1, &commit("g", "t", 0, 9)).expect("applies");
    let gone = Record { key: RecordKey::GroupMetadata(GroupMetadataKey { group: "g".into() }), value: None };
    assert_eq!(apply(&mut s, 2, &gone), Ok(Applied::GroupDeleted));
    let g = s.group("g").expect("offsets keep the group");
    assert!(g.info.is_none());
    assert_eq!(g.offset("t", 0).map(|c| c.offset), Some(9));
    apply(&mut s, 3, &tombstone(commit("g", "t", 0, 0))).expect("applies");
    assert!(s.group("g").is_none());
}

#[test]
fn members_and_assignments_from_consumer_group_metadata() {
    let mut s = GroupOffsets::default();
    let assignment = Assignment {
        version: 0,
        assigned_partitions: vec![TopicPartitions { topic: "t".into(), partitions: vec![0, 2] }],
        user_data: None,
    }
    .to_bytes();
    // A client may put anything in its assignment: a "topic" of 30 KB, or
    // one with bytes no topic name has, would be a label of any size.
    let named = |topic: String| {
        Assignment {
            version: 0,
            assigned_partitions: vec![
                TopicPartitions { topic: "t".into(), partitions: vec![1] },
                TopicPartitions { topic: topic.into(), partitions: vec![0] },
            ],
            user_data: None,
        }
        .to_bytes()
    };
    let members = vec![
        member("m1", assignment.clone()),
        member("m2", vec![]),
        member("m3", vec![0xff, 0x00]),
        member("m4", named("x".repeat(30_000))),
        member("m5", named("a\"b}\n".into())),
    ];
    apply(&mut s, 0, &metadata("g", "consumer", members)).expect("applies");
    let info = s.group("g").and_then(|g| g.info.as_ref()).expect("info");
    assert_eq!((info.generation, info.state(), info.protocol.as_deref()), (7, "Stable", Some("range")));
    let m = info.members();
    assert_eq!(m.len(), 5);
    assert!(m[3].assignment.is_empty() && m[4].assignment.is_empty(), "names no topic can have are no assignment");
    assert_eq!(m[0].assignment.len(), 1);
    assert_eq!(&*m[0].assignment[0].0, "t");
    assert_eq!(m[0].assignment[0].1, vec![0, 2]);
    assert!(m[1].assignment.is_empty(), "no assignment yet");
    assert!(m[2].assignment.is_empty(), "undecodable client bytes leave the assignment empty");

    // A Connect group's bytes are not the consumer protocol: not decoded.
    apply(&mut s, 1, &metadata("c", "connect", vec![member("w1", assignment)])).expect("applies");
    let info = s.group("c").and_then(|g| g.info.as_ref()).expect("info");
    assert!(info.members()[0].assignment.is_empty());
    assert_eq!(&*info.protocol_type, "connect");

    apply(&mut s, 2, &metadata("g", "consumer", vec![])).expect("applies");
    assert_eq!(s.group("g").and_then(|g| g.info.as_ref()).map(|i| i.state()), Some("Empty"));
}

#[test]
fn kip_848_members_come_and_go() {
    let mut s = GroupOffsets::default();
    let key = |m: &str| {
        RecordKey::ConsumerGroupMemberMetadata(MemberKey { group_id: "g".into(), member_id: m.to_owned().into() })
    };
    let value = RecordValue::ConsumerGroupMemberMetadata(ConsumerGroupMemberMetadataValue {
        version: 0,
        instance_id: None,
        rack_id: None,
        client_id: "c".into(),
        client_host: "h".into(),
        subscribed_topic_names: vec!["t".into()],
        subscribed_topic_regex: None,
        rebalance_timeout_ms: 1,
        server_assignor: None,
        classic_member_metadata: None,
    });
    apply(&mut s, 0, &Record { key: key("a"), value: Some(value.clone()) }).expect("applies");
    apply(&mut s, 1, &Record { key: key("b"), value: Some(value.clone()) }).expect("applies");
    apply(&mut s, 2, &Record { key: key("a"), value: Some(value) }).expect("applies");
    let epoch = Record {
        key: RecordKey::ConsumerGroupMetadata(GroupIdKey { group_id: "g".into() }),
        value: Some(RecordValue::ConsumerGroupMetadata(ConsumerGroupMetadataValue {
            version: 0,
            epoch: 12,
            metadata_hash: 0,
            creation_time_ms: -1,
        })),
    };
    apply(&mut s, 3, &epoch).expect("applies");
    let info = s.group("g").and_then(|g| g.info.as_ref()).expect("info");
    assert_eq!((info.members().len(), info.generation, &*info.protocol_type), (2, 12, "consumer"));
    apply(&mut s, 4, &Record { key: key("a"), value: None }).expect("applies");
    assert_eq!(s.group("g").and_then(|g| g.info.as_ref()).map(|i| i.members().len()), Some(1));
}

#[test]
fn bad_input_is_skipped_with_a_reason_and_the_position_moves() {
    let mut s = GroupOffsets::default();
    assert_eq!(s.apply_bytes(0, None, Some(b"x")), Err(Skipped::NullKey));
    let err = s.apply_bytes(1, Some(&[0, 1, 0]), None).expect_err("malformed key");
    assert_eq!(err.reason(), "malformed_key");
    let (k, _) = commit("g", "t", 0, 1).encode();
    let err = s.apply_bytes(2, Some(&k), Some(&[0, 3, 0])).expect_err("malformed value");
    assert_eq!(err.reason(), "malformed_value");
    assert!(err.to_string().contains("value: field `offset`"), "{err}");
    assert_eq!(s.next_offset(), Some(3));
    // Target assignments (what a group moves to) and unknown records are not errors.
    let target = Record {
        key: RecordKey::StreamsGroupTargetAssignmentMetadata(GroupIdKey { group_id: "g".into() }),
        value: None,
    };
    assert_eq!(apply(&mut s, 3, &target), Ok(Applied::Ignored(RecordType::StreamsGroupTargetAssignmentMetadata)));
    let unknown = Record { key: RecordKey::Opaque { key_version: 99, body: vec![].into() }, value: None };
    assert_eq!(apply(&mut s, 4, &unknown), Ok(Applied::Ignored(RecordType::Unknown(99))));
    // A negative or absurd partition id from the wire is not stored.
    apply(&mut s, 5, &commit("g", "t", -1, 1)).expect("applies");
    apply(&mut s, 6, &commit("g", "t", i32::MAX, 1)).expect("applies");
    assert_eq!(s.offset_count(), 0);
}

fn kip848_member(group: &str, member: &str) -> Record<'static> {
    Record {
        key: RecordKey::ConsumerGroupMemberMetadata(MemberKey {
            group_id: group.to_owned().into(),
            member_id: member.to_owned().into(),
        }),
        value: Some(RecordValue::ConsumerGroupMemberMetadata(ConsumerGroupMemberMetadataValue {
            version: 0,
            instance_id: None,
            rack_id: None,
            client_id: "c".into(),
            client_host: "/127.0.0.1".into(),
            subscribed_topic_names: vec!["events".into()],
            subscribed_topic_regex: None,
            rebalance_timeout_ms: 30_000,
            server_assignor: None,
            classic_member_metadata: None,
        })),
    }
}

fn kip848_assignment(group: &str, member: &str, topic_id: Uuid, partitions: Vec<i32>) -> Record<'static> {
    Record {
        key: RecordKey::ConsumerGroupCurrentMemberAssignment(MemberKey {
            group_id: group.to_owned().into(),
            member_id: member.to_owned().into(),
        }),
        value: Some(RecordValue::ConsumerGroupCurrentMemberAssignment(ConsumerGroupCurrentMemberAssignmentValue {
            version: 0,
            member_epoch: 2,
            previous_member_epoch: 1,
            state: 0,
            assigned_partitions: vec![TopicIdPartitions { topic_id, partitions, assignment_epochs: None }],
            partitions_pending_revocation: vec![],
        })),
    }
}

fn assignment_of(unit: &GroupOffsets, group: &str) -> Vec<(String, Vec<i32>)> {
    let info = unit.group(group).and_then(|g| g.info.as_ref()).expect("group info");
    info.members().iter().flat_map(|m| m.assignment.iter().map(|(t, p)| (t.to_string(), p.clone()))).collect()
}

#[test]
fn kip848_assignments_are_named_through_the_topic_ids_of_offset_commits() {
    let id = Uuid([9; 16]);
    let mut unit = GroupOffsets::default();
    unit.apply(&kip848_member("g", "m1"));
    unit.apply(&kip848_assignment("g", "m1", id, vec![0, 1]));
    assert_eq!(assignment_of(&unit, "g"), [], "the id is not known yet");
    // An offset commit (v4) names the topic of that id: the assignment resolves.
    let value = OffsetCommitValue { topic_id: Some(id), ..OffsetCommitValue::new(4, 5, 77) };
    unit.apply(&Record::offset_commit("other-group", "events", 0, Some(value)));
    assert_eq!(assignment_of(&unit, "g"), [("events".to_owned(), vec![0, 1])]);
    // A new member record keeps the assignment; a new assignment replaces it;
    // a tombstone of the assignment clears it.
    unit.apply(&kip848_member("g", "m1"));
    assert_eq!(assignment_of(&unit, "g"), [("events".to_owned(), vec![0, 1])]);
    unit.apply(&kip848_assignment("g", "m1", id, vec![1]));
    assert_eq!(assignment_of(&unit, "g"), [("events".to_owned(), vec![1])]);
    let key = kip848_assignment("g", "m1", id, vec![]).key;
    unit.apply(&Record { key, value: None });
    assert_eq!(assignment_of(&unit, "g"), []);
    // An assignment of a member the group does not have creates nothing.
    unit.apply(&kip848_assignment("h", "ghost", id, vec![0]));
    assert!(unit.group("h").is_none());
}

#[test]
fn a_kip848_assignment_read_before_its_member_waits_for_it() {
    // After compaction, a member's assignment record can precede its metadata.
    let id = Uuid([4; 16]);
    let mut unit = GroupOffsets::default();
    let value = OffsetCommitValue { topic_id: Some(id), ..OffsetCommitValue::new(4, 5, 77) };
    unit.apply(&Record::offset_commit("g", "events", 0, Some(value)));
    unit.apply(&kip848_assignment("g", "m1", id, vec![2, 3]));
    unit.apply(&kip848_member("g", "m1"));
    assert_eq!(assignment_of(&unit, "g"), [("events".to_owned(), vec![2, 3])]);
}

#[test]
fn a_kip848_member_tombstone_creates_no_group() {
    let mut unit = GroupOffsets::default();
    let key = kip848_member("g", "m1").key;
    unit.apply(&Record { key: key.clone(), value: None });
    assert!(unit.group("g").is_none(), "a tombstone of an unknown member creates nothing");
    unit.apply(&kip848_member("g", "m1"));
    unit.apply(&Record { key, value: None });
    let info = unit.group("g").and_then(|g| g.info.as_ref()).expect("the group stays");
    assert!(info.members().is_empty(), "the member left");
}

#[test]
fn a_described_assignment_naming_no_legal_topic_is_no_assignment() {
    let mut s = ReportedGroups::default();
    let good = [("t".to_owned(), 0), ("t".to_owned(), 1)];
    let bad = [("t".to_owned(), 2), ("x".repeat(30_000), 0)];
    let member = |id, assigned| DescribedMember { member_id: id, instance: None, client_id: "c", host: "/h", assigned };
    s.set_described("g", "consumer", "range", "Stable", &[member("m1", &good), member("m2", &bad)]);
    let s = s.into_unit();
    let info = s.group("g").and_then(|g| g.info.as_ref()).expect("info");
    assert_eq!(info.members()[0].assignment.len(), 1, "t, partitions 0 and 1");
    assert!(info.members()[1].assignment.is_empty(), "admin-API answers are client bytes too");
}
