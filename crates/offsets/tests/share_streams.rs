//! Share-group (types 10–15) and streams-group (17, 19–23) records of
//! `__consumer_offsets`: every value round-trips, truncation is an error, and
//! bytes laid out by hand from Kafka 4.4's schemas decode to what they say.

use std::borrow::Cow;

use kshard_offsets::*;
use proptest::collection::vec;
use proptest::option;
use proptest::prelude::*;

fn s() -> impl Strategy<Value = Cow<'static, str>> {
    "\\PC{0,8}".prop_map(Cow::Owned)
}

fn uuid() -> impl Strategy<Value = Uuid> {
    any::<[u8; 16]>().prop_map(Uuid)
}

fn topic_partitions() -> impl Strategy<Value = Vec<TopicIdPartitions>> {
    vec(
        (uuid(), vec(any::<i32>(), 0..4)).prop_map(|(topic_id, partitions)| TopicIdPartitions {
            topic_id,
            partitions,
            assignment_epochs: None,
        }),
        0..3,
    )
}

fn named(with_partitions: bool) -> impl Strategy<Value = Vec<NamedTopicPartitions<'static>>> {
    vec(
        (uuid(), s(), vec(any::<i32>(), 0..4)).prop_map(move |(topic_id, topic_name, partitions)| {
            NamedTopicPartitions {
                topic_id,
                topic_name,
                partitions: if with_partitions { partitions } else { Vec::new() },
            }
        }),
        0..3,
    )
}

fn assignment_metadata() -> impl Strategy<Value = AssignmentMetadataValue> {
    (0i16..=2, any::<i32>(), any::<i64>()).prop_map(|(version, assignment_epoch, assignment_timestamp)| {
        AssignmentMetadataValue { version, assignment_epoch, assignment_timestamp }
    })
}

fn share_value() -> impl Strategy<Value = RecordValue<'static>> {
    let v = 0i16..=2;
    prop_oneof![
        (v.clone(), option::of(s()), s(), s(), vec(s(), 0..3)).prop_map(
            |(version, rack_id, client_id, host, topics)| {
                RecordValue::ShareGroupMemberMetadata(ShareGroupMemberMetadataValue {
                    version,
                    rack_id,
                    client_id,
                    client_host: host,
                    subscribed_topic_names: topics,
                })
            }
        ),
        (v.clone(), any::<i32>(), any::<i64>()).prop_map(|(version, epoch, metadata_hash)| {
            RecordValue::ShareGroupMetadata(ShareGroupMetadataValue { version, epoch, metadata_hash })
        }),
        assignment_metadata().prop_map(RecordValue::ShareGroupTargetAssignmentMetadata),
        (v.clone(), topic_partitions()).prop_map(|(version, topic_partitions)| {
            RecordValue::ShareGroupTargetAssignmentMember(ShareGroupTargetAssignmentMemberValue {
                version,
                topic_partitions,
            })
        }),
        (v.clone(), any::<i32>(), any::<i32>(), any::<i8>(), topic_partitions()).prop_map(
            |(version, member_epoch, previous_member_epoch, state, assigned_partitions)| {
                RecordValue::ShareGroupCurrentMemberAssignment(ShareGroupCurrentMemberAssignmentValue {
                    version,
                    member_epoch,
                    previous_member_epoch,
                    state,
                    assigned_partitions,
                })
            }
        ),
        (v, named(true), named(true), named(false)).prop_map(|(version, initializing, initialized, deleting)| {
            RecordValue::ShareGroupStatePartitionMetadata(ShareGroupStatePartitionMetadataValue {
                version,
                initializing_topics: initializing,
                initialized_topics: initialized,
                deleting_topics: deleting,
            })
        }),
    ]
}

fn key_values() -> impl Strategy<Value = Vec<KeyValue<'static>>> {
    vec((s(), s()).prop_map(|(key, value)| KeyValue { key, value }), 0..3)
}

fn task_ids() -> impl Strategy<Value = Vec<TaskIds<'static>>> {
    vec(
        (s(), vec(any::<i32>(), 0..4), option::of(vec(any::<i32>(), 0..4))).prop_map(
            |(subtopology_id, partitions, assignment_epochs)| TaskIds { subtopology_id, partitions, assignment_epochs },
        ),
        0..3,
    )
}

fn tasks() -> impl Strategy<Value = Tasks<'static>> {
    (task_ids(), task_ids(), task_ids()).prop_map(|(active, standby, warmup)| Tasks { active, standby, warmup })
}

fn topic_infos() -> impl Strategy<Value = Vec<TopicInfo<'static>>> {
    vec(
        (s(), any::<i32>(), any::<i16>(), key_values()).prop_map(
            |(name, partitions, replication_factor, topic_configs)| TopicInfo {
                name,
                partitions,
                replication_factor,
                topic_configs,
            },
        ),
        0..2,
    )
}

fn subtopology() -> impl Strategy<Value = Subtopology<'static>> {
    let copartition = (vec(any::<i16>(), 0..3), vec(any::<i16>(), 0..3), vec(any::<i16>(), 0..3)).prop_map(
        |(source_topics, source_topic_regex, repartition_source_topics)| CopartitionGroup {
            source_topics,
            source_topic_regex,
            repartition_source_topics,
        },
    );
    (s(), vec(s(), 0..3), vec(s(), 0..2), topic_infos(), vec(s(), 0..2), topic_infos(), vec(copartition, 0..2))
        .prop_map(|(id, sources, regex, changelogs, sinks, repartition_sources, copartition_groups)| Subtopology {
            subtopology_id: id,
            source_topics: sources,
            source_topic_regex: regex,
            state_changelog_topics: changelogs,
            repartition_sink_topics: sinks,
            repartition_source_topics: repartition_sources,
            copartition_groups,
        })
}

fn streams_member() -> impl Strategy<Value = StreamsGroupMemberMetadataValue<'static>> {
    (
        0i16..=2,
        (option::of(s()), option::of(s()), s(), s()),
        (any::<i32>(), any::<i32>(), s()),
        option::of((s(), any::<u16>())),
        key_values(),
    )
        .prop_map(|(version, (instance_id, rack_id, client_id, client_host), (rto, epoch, process), ep, tags)| {
            StreamsGroupMemberMetadataValue {
                version,
                instance_id,
                rack_id,
                client_id,
                client_host,
                rebalance_timeout_ms: rto,
                topology_epoch: epoch,
                process_id: process,
                user_endpoint: ep.map(|(host, port)| Endpoint { host, port }),
                client_tags: tags,
            }
        })
}

fn streams_value() -> impl Strategy<Value = RecordValue<'static>> {
    let v = 0i16..=2;
    prop_oneof![
        (v.clone(), any::<i32>(), any::<i64>(), any::<i32>(), option::of(key_values())).prop_map(
            |(version, epoch, metadata_hash, validated_topology_epoch, last_assignment_configs)| {
                RecordValue::StreamsGroupMetadata(StreamsGroupMetadataValue {
                    version,
                    epoch,
                    metadata_hash,
                    validated_topology_epoch,
                    last_assignment_configs,
                })
            }
        ),
        streams_member().prop_map(RecordValue::StreamsGroupMemberMetadata),
        assignment_metadata().prop_map(RecordValue::StreamsGroupTargetAssignmentMetadata),
        (v.clone(), tasks()).prop_map(|(version, tasks)| {
            RecordValue::StreamsGroupTargetAssignmentMember(StreamsGroupTargetAssignmentMemberValue { version, tasks })
        }),
        (v.clone(), any::<i32>(), any::<i32>(), any::<i8>(), tasks(), tasks()).prop_map(
            |(version, member_epoch, previous_member_epoch, state, tasks, pending)| {
                RecordValue::StreamsGroupCurrentMemberAssignment(StreamsGroupCurrentMemberAssignmentValue {
                    version,
                    member_epoch,
                    previous_member_epoch,
                    state,
                    tasks,
                    tasks_pending_revocation: pending,
                })
            }
        ),
        (v, any::<i32>(), vec(subtopology(), 0..3)).prop_map(|(version, epoch, subtopologies)| {
            RecordValue::StreamsGroupTopology(StreamsGroupTopologyValue { version, epoch, subtopologies })
        }),
    ]
}

/// The key that goes with a share- or streams-group value.
fn record() -> impl Strategy<Value = Record<'static>> {
    (prop_oneof![share_value(), streams_value()], s(), s(), any::<bool>()).prop_map(
        |(value, group_id, member_id, tombstone)| {
            let group = GroupIdKey { group_id: group_id.clone() };
            let member = MemberKey { group_id, member_id };
            let key = match &value {
                RecordValue::ShareGroupMemberMetadata(_) => RecordKey::ShareGroupMemberMetadata(member),
                RecordValue::ShareGroupMetadata(_) => RecordKey::ShareGroupMetadata(group),
                RecordValue::ShareGroupTargetAssignmentMetadata(_) => {
                    RecordKey::ShareGroupTargetAssignmentMetadata(group)
                }
                RecordValue::ShareGroupTargetAssignmentMember(_) => RecordKey::ShareGroupTargetAssignmentMember(member),
                RecordValue::ShareGroupCurrentMemberAssignment(_) => {
                    RecordKey::ShareGroupCurrentMemberAssignment(member)
                }
                RecordValue::ShareGroupStatePartitionMetadata(_) => RecordKey::ShareGroupStatePartitionMetadata(group),
                RecordValue::StreamsGroupMetadata(_) => RecordKey::StreamsGroupMetadata(group),
                RecordValue::StreamsGroupMemberMetadata(_) => RecordKey::StreamsGroupMemberMetadata(member),
                RecordValue::StreamsGroupTargetAssignmentMetadata(_) => {
                    RecordKey::StreamsGroupTargetAssignmentMetadata(group)
                }
                RecordValue::StreamsGroupTargetAssignmentMember(_) => {
                    RecordKey::StreamsGroupTargetAssignmentMember(member)
                }
                RecordValue::StreamsGroupCurrentMemberAssignment(_) => {
                    RecordKey::StreamsGroupCurrentMemberAssignment(member)
                }
                _ => RecordKey::StreamsGroupTopology(group),
            };
            Record { key, value: if tombstone { None } else { Some(value) } }
        },
    )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1024, ..ProptestConfig::default() })]

    #[test]
    fn every_share_and_streams_record_round_trips(record in record()) {
        let (key, value) = record.encode();
        prop_assert_eq!(Record::decode(&key, value.as_deref()), Ok(record.clone()));
        prop_assert!(record.key.record_type().is_kip848());
        prop_assert!(record.key.group_id_key().is_some() != record.key.member_key().is_some());
    }

    #[test]
    fn truncated_values_are_errors(record in record(), cut in any::<prop::sample::Index>()) {
        let (key, value) = record.encode();
        if let Some(value) = value {
            let at = cut.index(value.len());
            prop_assert!(Record::decode(&key, Some(&value[..at])).is_err());
        }
        let at = cut.index(key.len());
        prop_assert!(Record::decode(&key[..at], None).is_err());
    }
}

fn unhex(s: &str) -> Vec<u8> {
    hex::decode(s.replace(' ', "")).expect("valid hex")
}

#[test]
fn share_group_current_assignment_from_the_schema() {
    // Key type 14, group "g", member "m".
    let key = unhex("000e 0001 67 0001 6d");
    // v0: member epoch 3, previous 2, state 0, one topic (uuid 0x11…) with
    // partitions [0, 1], then the struct's and the value's empty tag sections.
    let value = unhex(concat!(
        "0000 00000003 00000002 00",
        "02 11111111111111111111111111111111 03 00000000 00000001 00",
        "00"
    ));
    let record = Record::decode(&key, Some(&value)).expect("decodes");
    assert_eq!(record.key.member_key().map(|k| (&*k.group_id, &*k.member_id)), Some(("g", "m")));
    let Some(RecordValue::ShareGroupCurrentMemberAssignment(v)) = record.value else { panic!("{record:?}") };
    assert_eq!((v.member_epoch, v.previous_member_epoch, v.state), (3, 2, 0));
    assert_eq!(v.assigned_partitions[0].topic_id, Uuid([0x11; 16]));
    assert_eq!(v.assigned_partitions[0].partitions, vec![0, 1]);
}

#[test]
fn streams_member_endpoint_is_a_nullable_struct() {
    let key = unhex("0013 0001 67 0001 6d");
    // v0: instance null, rack null, client "c", host "h", timeout 5, topology
    // epoch 1, process "p", endpoint present: host "e", port 8080, no tags;
    // client tags empty; no tags.
    let value = unhex("0000 00 00 02 63 02 68 00000005 00000001 02 70 01 02 65 1f90 00 01 00");
    let record = Record::decode(&key, Some(&value)).expect("decodes");
    let Some(RecordValue::StreamsGroupMemberMetadata(v)) = record.value else { panic!("{record:?}") };
    assert_eq!(v.user_endpoint, Some(Endpoint { host: "e".into(), port: 8080 }));
    assert_eq!((&*v.process_id, v.topology_epoch), ("p", 1));
    let bad = unhex("0000 00 00 02 63 02 68 00000005 00000001 02 70 07 02 65 1f90 00 01 00");
    let e = Record::decode(&key, Some(&bad)).expect_err("a marker that is neither -1 nor 1");
    assert_eq!(e.field, "user_endpoint");
}

#[test]
fn topology_lists_its_input_topics_once() {
    let sub = |id: &'static str, sources: &[&'static str], repartition: &[&'static str]| Subtopology {
        subtopology_id: id.into(),
        source_topics: sources.iter().map(|s| Cow::Borrowed(*s)).collect(),
        source_topic_regex: vec![],
        state_changelog_topics: vec![],
        repartition_sink_topics: vec![],
        repartition_source_topics: repartition
            .iter()
            .map(|n| TopicInfo { name: (*n).into(), partitions: 0, replication_factor: 0, topic_configs: vec![] })
            .collect(),
        copartition_groups: vec![],
    };
    let t = StreamsGroupTopologyValue {
        version: 0,
        epoch: 1,
        subtopologies: vec![sub("0", &["orders", "users"], &[]), sub("1", &["orders"], &["app-repartition"])],
    };
    assert_eq!(t.input_topics(), vec!["orders", "users", "app-repartition"]);
}
