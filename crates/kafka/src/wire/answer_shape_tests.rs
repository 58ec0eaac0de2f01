//! Each shape against the crate's own encoder (the walk ends exactly at the
//! end of a populated answer, and every cut of it is refused), and hostile
//! frames that made the crate abort the process.

use super::*;
use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::api_versions_response::{ApiVersion, FinalizedFeatureKey, SupportedFeatureKey};
use kafka_protocol::messages::consumer_group_describe_response as kip848;
use kafka_protocol::messages::describe_configs_response::{
    DescribeConfigsResourceResult, DescribeConfigsResult, DescribeConfigsSynonym,
};
use kafka_protocol::messages::describe_groups_response::{DescribedGroup as Described, DescribedGroupMember};
use kafka_protocol::messages::describe_log_dirs_response::{
    DescribeLogDirsPartition, DescribeLogDirsResult, DescribeLogDirsTopic,
};
use kafka_protocol::messages::find_coordinator_response::Coordinator;
use kafka_protocol::messages::list_groups_response::ListedGroup;
use kafka_protocol::messages::list_offsets_response::{ListOffsetsPartitionResponse, ListOffsetsTopicResponse};
use kafka_protocol::messages::metadata_response::{
    MetadataResponseBroker, MetadataResponsePartition, MetadataResponseTopic,
};
use kafka_protocol::messages::offset_fetch_response::{
    OffsetFetchResponseGroup, OffsetFetchResponsePartitions, OffsetFetchResponseTopics,
};
use kafka_protocol::messages::share_group_describe_response::{Assignment, DescribedGroup, Member, TopicPartitions};
use kafka_protocol::messages::{BrokerId, GroupId, TopicName};
use kafka_protocol::protocol::{Encodable, StrBytes};

fn s(text: &'static str) -> StrBytes {
    StrBytes::from_static_str(text)
}

/// `answer` encoded at its version fits its shape exactly, every cut of it
/// is refused, and the crate decodes it back.
fn fits<A: Answer + Encodable + PartialEq + std::fmt::Debug>(answer: A, version: i16) {
    let mut body = BytesMut::new();
    answer.encode(&mut body, version).expect("encodes");
    let shape = A::shape(version).expect("a shape");
    check(&body, shape).unwrap_or_else(|e| panic!("{:?} v{version}: {e}", A::API));
    for end in 0..body.len() {
        assert!(check(&body[..end], shape).is_err(), "{:?} cut at {end} of {}", A::API, body.len());
    }
    let mut longer = body.to_vec();
    longer.push(0);
    assert!(check(&longer, shape).is_err(), "a byte too many");
    let decoded = A::decode(&mut Bytes::from(body.to_vec()), version).expect("decodes");
    assert_eq!(decoded, answer);
}

#[test]
fn metadata_v9() {
    let partition = MetadataResponsePartition::default()
        .with_partition_index(3)
        .with_leader_id(BrokerId(1))
        .with_replica_nodes(vec![BrokerId(1), BrokerId(2)])
        .with_isr_nodes(vec![BrokerId(1)])
        .with_offline_replicas(vec![BrokerId(2)]);
    fits(
        MetadataResponse::default()
            .with_brokers(vec![
                MetadataResponseBroker::default().with_node_id(BrokerId(1)).with_host(s("b1")).with_port(9092),
                MetadataResponseBroker::default().with_host(s("b2")).with_rack(Some(s("r1"))),
            ])
            .with_cluster_id(Some(s("c")))
            .with_topics(vec![
                MetadataResponseTopic::default()
                    .with_name(Some(TopicName(s("orders"))))
                    .with_partitions(vec![partition.clone(), partition]),
                MetadataResponseTopic::default().with_error_code(3).with_name(Some(TopicName(s("gone")))),
            ]),
        9,
    );
}

#[test]
fn list_offsets_v7() {
    let partition = ListOffsetsPartitionResponse::default().with_partition_index(1).with_offset(42).with_timestamp(-1);
    fits(
        ListOffsetsResponse::default().with_topics(vec![
            ListOffsetsTopicResponse::default().with_name(TopicName(s("t"))).with_partitions(vec![partition.clone()]),
            ListOffsetsTopicResponse::default().with_name(TopicName(s("u"))).with_partitions(vec![partition; 3]),
        ]),
        7,
    );
}

#[test]
fn api_versions_v3_with_its_known_tags() {
    fits(
        ApiVersionsResponse::default()
            .with_api_keys(vec![ApiVersion::default().with_api_key(1).with_max_version(17); 2])
            .with_supported_features(vec![SupportedFeatureKey::default().with_name(s("f")).with_max_version(2)])
            .with_finalized_features_epoch(7)
            .with_finalized_features(vec![FinalizedFeatureKey::default().with_name(s("f")).with_max_version_level(1)])
            .with_zk_migration_ready(true),
        3,
    );
    fits(
        ApiVersionsResponse::default().with_api_keys(vec![
            ApiVersion::default()
                .with_api_key(1)
                .with_min_version(4)
                .with_max_version(17);
            2
        ]),
        0,
    );
}

#[test]
fn sasl_v1_handshake_and_v2_authenticate() {
    fits(SaslHandshakeResponse::default().with_mechanisms(vec![s("PLAIN"), s("SCRAM-SHA-512")]), 1);
    fits(
        SaslAuthenticateResponse::default()
            .with_error_message(Some(s("no")))
            .with_auth_bytes(Bytes::from_static(b"r=abc"))
            .with_session_lifetime_ms(1000),
        2,
    );
}

#[test]
fn list_groups_v4_and_v5_and_find_coordinator_v4() {
    let group = ListedGroup::default()
        .with_group_id(GroupId(s("g")))
        .with_protocol_type(s("share"))
        .with_group_state(s("Stable"))
        .with_group_type(s("share"));
    fits(ListGroupsResponse::default().with_groups(vec![group.clone(), group.clone()]), 5);
    fits(
        ListGroupsResponse::default()
            .with_groups(vec![group.clone().with_group_type(s("")), group.with_group_type(s(""))]),
        4,
    );
    let coordinator = Coordinator::default()
        .with_key(s("g"))
        .with_node_id(BrokerId(1))
        .with_host(s("h"))
        .with_error_message(Some(s("e")));
    fits(FindCoordinatorResponse::default().with_coordinators(vec![coordinator.clone(), coordinator]), 4);
}

#[test]
fn offset_fetch_v8_and_describe_groups_v5() {
    let partition = OffsetFetchResponsePartitions::default()
        .with_partition_index(3)
        .with_committed_offset(42)
        .with_metadata(Some(s("m")));
    let topic = OffsetFetchResponseTopics::default()
        .with_name(TopicName(s("t")))
        .with_partitions(vec![partition.clone(), partition]);
    let group =
        OffsetFetchResponseGroup::default().with_group_id(GroupId(s("g"))).with_topics(vec![topic.clone(), topic]);
    fits(OffsetFetchResponse::default().with_groups(vec![group.clone(), group]), 8);
    let member = DescribedGroupMember::default()
        .with_member_id(s("m"))
        .with_group_instance_id(Some(s("i")))
        .with_client_id(s("c"))
        .with_client_host(s("/h"))
        .with_member_metadata(Bytes::from_static(b"meta"))
        .with_member_assignment(Bytes::from_static(b"assignment"));
    let group = Described::default()
        .with_group_id(GroupId(s("g")))
        .with_group_state(s("Stable"))
        .with_protocol_type(s("consumer"))
        .with_protocol_data(s("range"))
        .with_members(vec![member.clone(), member]);
    fits(DescribeGroupsResponse::default().with_groups(vec![group.clone(), group]), 5);
}

#[test]
fn consumer_group_describe_v0() {
    let partitions = kip848::TopicPartitions::default().with_topic_name(TopicName(s("t"))).with_partitions(vec![0, 1]);
    let assignment = kip848::Assignment::default().with_topic_partitions(vec![partitions.clone(), partitions]);
    let member = kip848::Member::default()
        .with_member_id(s("m"))
        .with_instance_id(Some(s("i")))
        .with_client_id(s("c"))
        .with_client_host(s("/h"))
        .with_subscribed_topic_names(vec![TopicName(s("t"))])
        .with_subscribed_topic_regex(Some(s("t.*")))
        .with_assignment(assignment.clone())
        .with_target_assignment(assignment);
    let group = kip848::DescribedGroup::default()
        .with_group_id(GroupId(s("g")))
        .with_group_state(s("Stable"))
        .with_assignor_name(s("uniform"))
        .with_members(vec![member.clone(), member]);
    fits(ConsumerGroupDescribeResponse::default().with_groups(vec![group.clone(), group]), 0);
}

#[test]
fn share_group_describe_v1() {
    let member = Member::default()
        .with_member_id(s("m"))
        .with_rack_id(Some(s("r")))
        .with_client_id(s("c"))
        .with_client_host(s("/127.0.0.1"))
        .with_subscribed_topic_names(vec![TopicName(s("t"))])
        .with_assignment(Assignment::default().with_topic_partitions(vec![
            TopicPartitions::default().with_topic_name(TopicName(s("t"))).with_partitions(vec![0, 1, 2]),
        ]));
    fits(
        ShareGroupDescribeResponse::default().with_groups(vec![
            DescribedGroup::default()
                .with_group_id(GroupId(s("sg")))
                .with_group_state(s("Stable"))
                .with_assignor_name(s("simple"))
                .with_members(vec![member.clone(), member]),
        ]),
        1,
    );
}

#[test]
fn describe_configs_v4_and_describe_log_dirs_v4() {
    let config = DescribeConfigsResourceResult::default()
        .with_name(s("max.message.bytes"))
        .with_value(Some(s("1048588")))
        .with_synonyms(vec![DescribeConfigsSynonym::default().with_name(s("message.max.bytes"))])
        .with_documentation(Some(s("doc")));
    fits(
        DescribeConfigsResponse::default().with_results(vec![
            DescribeConfigsResult::default().with_resource_name(s("t")).with_configs(vec![config.clone(), config]),
        ]),
        4,
    );
    let partition = DescribeLogDirsPartition::default().with_partition_index(2).with_partition_size(100);
    fits(
        DescribeLogDirsResponse::default().with_results(vec![
            DescribeLogDirsResult::default().with_log_dir(s("/d")).with_topics(vec![
                DescribeLogDirsTopic::default().with_name(TopicName(s("t"))).with_partitions(vec![partition; 2]),
            ]),
        ]),
        4,
    );
}

#[test]
fn the_writers_answers_produce_v9_init_producer_id_v4_add_partitions_v3_end_txn_v3() {
    use kafka_protocol::messages::add_partitions_to_txn_response::{
        AddPartitionsToTxnPartitionResult, AddPartitionsToTxnTopicResult,
    };
    use kafka_protocol::messages::produce_response::{
        BatchIndexAndErrorMessage, PartitionProduceResponse, TopicProduceResponse,
    };
    use kafka_protocol::messages::{
        AddPartitionsToTxnResponse, EndTxnResponse, InitProducerIdResponse, ProduceResponse, ProducerId,
    };
    let partition = PartitionProduceResponse::default()
        .with_index(2)
        .with_error_code(18)
        .with_base_offset(40)
        .with_log_start_offset(3)
        .with_record_errors(vec![
            BatchIndexAndErrorMessage::default().with_batch_index(1).with_batch_index_error_message(Some(s("bad"))),
        ])
        .with_error_message(Some(s("record too large")));
    fits(
        ProduceResponse::default()
            .with_responses(vec![
                TopicProduceResponse::default()
                    .with_name(TopicName(s("log")))
                    .with_partition_responses(vec![partition, PartitionProduceResponse::default()]),
            ])
            .with_throttle_time_ms(5),
        9,
    );
    fits(
        InitProducerIdResponse::default().with_error_code(51).with_producer_id(ProducerId(7)).with_producer_epoch(3),
        4,
    );
    fits(
        AddPartitionsToTxnResponse::default().with_results_by_topic_v3_and_below(vec![
            AddPartitionsToTxnTopicResult::default().with_name(TopicName(s("out"))).with_results_by_partition(vec![
                AddPartitionsToTxnPartitionResult::default().with_partition_index(1).with_partition_error_code(51),
            ]),
        ]),
        3,
    );
    fits(EndTxnResponse::default().with_error_code(90).with_throttle_time_ms(1), 3);
}

#[test]
fn versions_not_asked_for_have_no_shape() {
    assert!(MetadataResponse::shape(12).is_none());
    assert!(ListOffsetsResponse::shape(6).is_none());
}

/// The measured abort: Metadata with 2^32 − 2 brokers in 13 bytes.
#[test]
fn a_count_past_the_bytes_names_its_field() {
    let mut body = vec![0, 0, 0, 0]; // throttle
    body.extend([0xff, 0xff, 0xff, 0xff, 0x0f]); // brokers: 2^32 − 2
    body.extend([0, 0, 0, 0]);
    let e = check(&body, MetadataResponse::shape(9).expect("v9")).expect_err("refused");
    assert_eq!(e.field, "brokers");
    // A count that fits the bytes but not the least its elements take.
    let mut body = vec![0, 0, 0, 0, 11]; // ten brokers
    body.extend([0u8; 30]);
    assert_eq!(check(&body, MetadataResponse::shape(9).expect("v9")).expect_err("refused").field, "brokers");
}

#[test]
fn a_nested_field_is_named_with_its_path() {
    let partition = ListOffsetsPartitionResponse::default();
    let answer = ListOffsetsResponse::default().with_topics(vec![
        ListOffsetsTopicResponse::default().with_name(TopicName(s("t"))).with_partitions(vec![partition; 2]),
    ]);
    let mut body = BytesMut::new();
    answer.encode(&mut body, 7).expect("encodes");
    // The second partition's tags declare a field of 100 bytes.
    let at = body.len() - 3;
    body[at] = 1;
    let mut body = body.to_vec();
    body.splice(at + 1..at + 1, [5, 100]);
    let e = check(&body, ListOffsetsResponse::shape(7).expect("v7")).expect_err("refused");
    assert_eq!(e.field, "topics[0].partitions[1].tagged fields", "{e}");
}

#[test]
fn a_known_tag_is_checked_inside_its_size() {
    let mut body = vec![0, 0, 1, 0, 0, 0, 0]; // error, no api keys, throttle
    // Tag 0 (supported features), 5 bytes: a count of 2^32 − 2.
    body.extend([1, 0, 5, 0xff, 0xff, 0xff, 0xff, 0x0f]);
    let e = check(&body, ApiVersionsResponse::shape(3).expect("v3")).expect_err("refused");
    assert_eq!(e.field, "tagged fields.tag 0.supported_features", "{e}");
    // A known tag whose fields end before its size does.
    let mut body = vec![0, 0, 1, 0, 0, 0, 0];
    body.extend([1, 3, 2, 1, 0]); // tag 3 (a boolean) declared 2 bytes
    assert!(check(&body, ApiVersionsResponse::shape(3).expect("v3")).is_err());
}

#[test]
fn a_sasl_mechanism_count_past_the_bytes_is_refused() {
    let body = [0, 0, 0x7f, 0xff, 0xff, 0xff, 0, 1, b'P'];
    let e = check(&body, SaslHandshakeResponse::shape(1).expect("v1")).expect_err("refused");
    assert_eq!(e.field, "mechanisms");
}

#[test]
fn an_answer_of_too_many_small_values_is_refused() {
    // SaslHandshake with five million empty mechanisms: 10 MB on the wire,
    // five million Strings decoded.
    let n: usize = 5 << 20;
    let mut body = vec![0, 0];
    body.extend((n as i32).to_be_bytes());
    body.extend(std::iter::repeat_n([0u8, 0], n).flatten());
    let e = check(&body, SaslHandshakeResponse::shape(1).expect("v1")).expect_err("refused");
    assert!(e.field.contains("values past the most"), "{e}");
}
