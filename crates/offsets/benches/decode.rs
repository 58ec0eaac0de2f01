//! Decode throughput over a realistic `__consumer_offsets` mix: 92% offset
//! commits (v3 and v4, a few v1), 3% group metadata with consumer members, 5%
//! tombstones. Run: `cargo bench -p kshard-offsets --bench decode`.

#![allow(missing_docs)] // criterion_group! generates an undocumented public function.

use std::borrow::Cow;
use std::hint::black_box;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use kshard_offsets::{
    GroupMetadataValue, MemberMetadata, OffsetCommitKey, OffsetCommitValue, Record, RecordKey, RecordValue,
    TopicPartitions,
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
            let assigned = vec![TopicPartitions {
                topic: topic.to_owned().into(),
                partitions: vec![m * 4, m * 4 + 1, m * 4 + 2, m * 4 + 3],
            }];
            MemberMetadata {
                client_host: "/10.0.3.17".into(),
                ..MemberMetadata::consumer(
                    format!("consumer-{group}-{m}-5f1c2a9e-0d3b-4c8e-9a51-{i:012}"),
                    format!("consumer-{group}-{m}"),
                    vec![topic.to_owned().into()],
                    assigned,
                )
            }
        })
        .collect();
    let value = GroupMetadataValue {
        current_state_timestamp: Some(1_758_335_260_726),
        ..GroupMetadataValue::consumer(3, 12, members)
    };
    Record::group_metadata(group.to_owned(), Some(value))
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
