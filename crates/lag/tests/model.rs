//! Property tests of the pure state against simple models: random sequences of
//! commits and tombstones applied to [`GroupOffsets`] agree with a map, and
//! [`CatchUp`] is ready exactly when every initial partition reached its target
//! or its end, and stays ready.

use std::collections::BTreeMap;

use kshard_lag::{CatchUp, GroupOffsets};
use kshard_offsets::*;
use proptest::prelude::*;

#[derive(Debug, Clone)]
enum Op {
    Commit { group: u8, topic: u8, partition: u8, offset: i64 },
    DeleteOffset { group: u8, topic: u8, partition: u8 },
    Metadata { group: u8 },
    DeleteGroup { group: u8 },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (0u8..4, 0u8..3, 0u8..4, 0i64..1000).prop_map(|(group, topic, partition, offset)| Op::Commit { group, topic, partition, offset }),
        2 => (0u8..4, 0u8..3, 0u8..4).prop_map(|(group, topic, partition)| Op::DeleteOffset { group, topic, partition }),
        1 => (0u8..4).prop_map(|group| Op::Metadata { group }),
        1 => (0u8..4).prop_map(|group| Op::DeleteGroup { group }),
    ]
}

fn record(op: &Op) -> Record<'static> {
    let commit = |g: u8, t: u8, p: u8, value: Option<OffsetCommitValue<'static>>| {
        Record::offset_commit(format!("g{g}"), format!("t{t}"), i32::from(p), value)
    };
    let group_key = |g: u8| RecordKey::GroupMetadata(GroupMetadataKey { group: format!("g{g}").into() });
    match *op {
        Op::Commit { group, topic, partition, offset } => {
            commit(group, topic, partition, Some(OffsetCommitValue::new(3, offset, 0)))
        }
        Op::DeleteOffset { group, topic, partition } => commit(group, topic, partition, None),
        Op::Metadata { group } => Record {
            key: group_key(group),
            value: Some(RecordValue::GroupMetadata(GroupMetadataValue {
                version: 2,
                protocol_type: "consumer".into(),
                generation: 1,
                protocol: None,
                leader: None,
                current_state_timestamp: Some(0),
                members: vec![],
            })),
        },
        Op::DeleteGroup { group } => Record { key: group_key(group), value: None },
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn group_offsets_agree_with_a_map(ops in prop::collection::vec(op(), 0..200)) {
        let mut state = GroupOffsets::default();
        let mut offsets: BTreeMap<(u8, u8, u8), i64> = BTreeMap::new();
        let mut metadata: BTreeMap<u8, bool> = BTreeMap::new();
        for (i, op) in ops.iter().enumerate() {
            let (k, v) = record(op).encode();
            state.apply_bytes(i as i64, Some(&k), v.as_deref()).expect("valid records apply");
            match *op {
                Op::Commit { group, topic, partition, offset } => { offsets.insert((group, topic, partition), offset); }
                Op::DeleteOffset { group, topic, partition } => { offsets.remove(&(group, topic, partition)); }
                Op::Metadata { group } => { metadata.insert(group, true); }
                Op::DeleteGroup { group } => { metadata.remove(&group); }
            }
        }
        for g in 0..4u8 {
            let name = format!("g{g}");
            let expected: Vec<_> = offsets.iter().filter(|((gg, _, _), _)| *gg == g).collect();
            match state.group(&name) {
                None => prop_assert!(expected.is_empty() && !metadata.contains_key(&g), "group {} missing", name),
                Some(group) => {
                    prop_assert_eq!(group.info.is_some(), metadata.contains_key(&g));
                    prop_assert_eq!(group.offset_count(), expected.len());
                    for ((_, t, p), offset) in expected {
                        let got = group.offset(&format!("t{t}"), i32::from(*p)).map(|c| c.offset);
                        prop_assert_eq!(got, Some(*offset));
                    }
                }
            }
        }
        prop_assert_eq!(state.offset_count(), offsets.len());
        prop_assert_eq!(state.next_offset(), (!ops.is_empty()).then_some(ops.len() as i64));
    }

    #[test]
    fn catch_up_is_ready_exactly_when_every_partition_is_done(
        partitions in prop::collection::vec((0i64..5, 0i64..8), 1..6),
        events in prop::collection::vec((0usize..6, 0i64..16, any::<bool>()), 0..60),
    ) {
        let mut c = CatchUp::default();
        for (p, (low, len)) in partitions.iter().enumerate() {
            c.track(p as i32, *low, low + len);
        }
        c.start();
        let mut done: Vec<bool> = partitions.iter().map(|(_, len)| *len == 0).collect();
        let mut ever_ready = false;
        for (p, offset, eof) in events {
            let Some((low, len)) = partitions.get(p) else { continue };
            if eof {
                c.on_end_of_partition(p as i32, None);
                done[p] = true;
            } else {
                // Records only exist between the low and high watermark.
                let offset = low + offset % (*len).max(1);
                if *len == 0 { continue; }
                c.on_record(p as i32, offset);
                if offset + 1 >= low + len {
                    done[p] = true;
                }
            }
            let expected = done.iter().all(|d| *d);
            ever_ready |= expected;
            prop_assert_eq!(c.is_ready(), ever_ready, "done: {:?}", done);
            prop_assert!(c.progress().offsets_remaining >= 0);
        }
    }
}
