//! Decode throughput over a realistic `__consumer_offsets` mix: 92% offset
//! commits (v3 and v4, a few v1), 3% group metadata with consumer members, 5%
//! tombstones. Run: `cargo bench -p kshard-offsets --bench decode`.

#![allow(missing_docs)] // criterion_group! generates an undocumented public function.

use std::borrow::Cow;
use std::hint::black_box;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use kshard_offsets::{
    Assignment, GroupMetadataKey, GroupMetadataValue, MemberMetadata, OffsetCommitKey, OffsetCommitValue, Record,
    RecordKey, RecordValue, Subscription, TopicPartitions,
};

const RECORDS: usize = 10_000;

/// A deterministic stream of encoded records (key, value) in the mix above.
fn mix() -> Vec<(Vec<u8>, Option<Vec<u8>>)> {
    let mut out = Vec::with_capacity(RECORDS);
    for i in 0..RECORDS {
        let group = format!("payments-service-consumer-{}", i % 1000);
        let topic = format!("orders.v2.region-{}", i % 7);
        let record = match i % 100 {
            0..=2 => group_metadata(&group, &topic, i),
            3..=7 => Record {
                key: RecordKey::OffsetCommit {
                    key_version: 1,
                    key: OffsetCommitKey { group: group.into(), topic: topic.into(), partition: (i % 12) as i32 },
                },
                value: None,
            },
            n => {
                let version = match n % 10 {
                    0 => 1,
                    1..=4 => 3,
                    _ => 4,
                };
                Record {
                    key: RecordKey::OffsetCommit {
                        key_version: 1,
                        key: OffsetCommitKey { group: group.into(), topic: topic.into(), partition: (i % 12) as i32 },
                    },
                    value: Some(RecordValue::OffsetCommit(OffsetCommitValue {
                        version,
                        offset: 1_000_000 + i as i64,
                        leader_epoch: (version >= 3).then_some(7),
                        metadata: Cow::Borrowed(""),
                        commit_timestamp: 1_758_335_260_726 + i as i64,
                        expire_timestamp: (version == 1).then_some(-1),
                        topic_id: None,
                    })),
                }
            }
        };
        out.push(record.encode());
    }
    out
}

fn group_metadata(group: &str, topic: &str, i: usize) -> Record<'static> {
    let members = (0..3)
        .map(|m| {
            let subscription = Subscription::to_topics(1, vec![topic.to_owned().into()]).to_bytes();
            let assignment = Assignment {
                version: 1,
                assigned_partitions: vec![TopicPartitions {
                    topic: topic.to_owned().into(),
                    partitions: vec![m * 4, m * 4 + 1, m * 4 + 2, m * 4 + 3],
                }],
                user_data: None,
            }
            .to_bytes();
            MemberMetadata {
                member_id: format!("consumer-{group}-{m}-5f1c2a9e-0d3b-4c8e-9a51-{i:012}").into(),
                group_instance_id: None,
                client_id: format!("consumer-{group}-{m}").into(),
                client_host: "/10.0.3.17".into(),
                rebalance_timeout: Some(300_000),
                session_timeout: 45_000,
                subscription: subscription.into(),
                assignment: assignment.into(),
            }
        })
        .collect();
    Record {
        key: RecordKey::GroupMetadata(GroupMetadataKey { group: group.to_owned().into() }),
        value: Some(RecordValue::GroupMetadata(GroupMetadataValue {
            version: 3,
            protocol_type: "consumer".into(),
            generation: 12,
            protocol: Some("range".into()),
            leader: Some("consumer-1".into()),
            current_state_timestamp: Some(1_758_335_260_726),
            members,
        })),
    }
}

/// Decodes every record; sums the committed offsets so nothing is optimized away.
fn decode_all(records: &[(Vec<u8>, Option<Vec<u8>>)]) -> i64 {
    let mut offsets = 0i64;
    for (key, value) in records {
        if let Ok(Record { value: Some(RecordValue::OffsetCommit(v)), .. }) =
            Record::decode(black_box(key), black_box(value.as_deref()))
        {
            offsets = offsets.wrapping_add(v.offset);
        }
    }
    offsets
}

fn decode(c: &mut Criterion) {
    let records = mix();
    let mut group = c.benchmark_group("decode");
    group.throughput(Throughput::Elements(records.len() as u64));
    group.bench_function("realistic_mix", |b| b.iter(|| decode_all(&records)));
    let commits: Vec<_> = records.iter().filter(|(k, v)| k[1] == 1 && v.is_some()).cloned().collect();
    group.throughput(Throughput::Elements(commits.len() as u64));
    group.bench_function("offset_commits_only", |b| b.iter(|| decode_all(&commits)));
    group.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default();
    targets = decode
}
criterion_main!(benches);
