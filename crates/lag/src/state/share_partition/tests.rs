use std::collections::BTreeMap;

use kshard_offsets::{DeliveryState, ShareSnapshotValue, ShareUpdateValue, StateBatch};
use proptest::collection::vec;
use proptest::prelude::*;

use super::{Run, SharePartition};

fn batch(first: i64, last: i64, state: DeliveryState, count: i16) -> StateBatch {
    StateBatch { first_offset: first, last_offset: last, delivery_state: state, delivery_count: count }
}

fn snapshot(start: i64, dcc: i32, batches: Vec<StateBatch>) -> ShareSnapshotValue {
    ShareSnapshotValue {
        version: 1,
        snapshot_epoch: 0,
        state_epoch: 0,
        leader_epoch: 0,
        start_offset: start,
        delivery_complete_count: dcc,
        create_timestamp: 0,
        write_timestamp: 0,
        state_batches: batches,
    }
}

fn update(start: i64, dcc: i32, batches: Vec<StateBatch>) -> ShareUpdateValue {
    ShareUpdateValue {
        version: 1,
        snapshot_epoch: 0,
        leader_epoch: -1,
        start_offset: start,
        delivery_complete_count: dcc,
        state_batches: batches,
    }
}

use DeliveryState::{Acknowledged, Archived, Available};

#[test]
fn accepted_released_and_rejected_records_as_kafka_counts_them() {
    let mut p = SharePartition::default();
    // Ten records fetched: 0–4 acknowledged, 5–6 released (available again
    // after one delivery), 7 rejected, 8–9 delivered five times and archived.
    p.apply_snapshot(&snapshot(
        0,
        -1,
        vec![
            batch(0, 4, Acknowledged, 1),
            batch(5, 6, Available, 1),
            batch(7, 7, Archived, 1),
            batch(8, 9, Archived, 5),
        ],
    ));
    // The start offset cannot pass 5–6: complete are 0–4, 7, 8–9.
    assert_eq!(p.complete(), 8);
    assert_eq!(p.lag(20), Some(20 - 8));
    assert_eq!(p.in_flight(), 2);
    assert_eq!(p.redelivered(), 2);
    assert_eq!((p.archived_total(), p.poison(5)), (3, 2));
    // The coordinator moves the start offset to 5 and counts 3 complete after it.
    p.apply_update(&update(5, 3, vec![batch(5, 6, Acknowledged, 2)]), false);
    assert_eq!(p.runs.first().map(|r| r.first), Some(5), "runs before the start offset are dropped");
    assert_eq!(p.lag(20), Some(20 - 5 - 3));
    assert_eq!(p.in_flight(), 0);
    assert_eq!(p.archived_total(), 3, "archived records are counted once");
}

#[test]
fn an_uninitialized_partition_has_no_lag_and_an_update_alone_is_a_state() {
    let mut p = SharePartition { start_offset: -1, ..SharePartition::default() };
    assert_eq!(p.lag(10), None);
    p.apply_update(&update(4, 0, vec![]), true);
    assert_eq!(p.lag(10), Some(6));
}

#[test]
fn overlapping_batches_take_the_higher_delivery_count_then_state() {
    let mut p = SharePartition::default();
    p.apply_snapshot(&snapshot(0, -1, vec![batch(0, 9, Available, 2)]));
    // An older view of 3–5 (fewer deliveries) loses; archived 8 at the same count wins.
    p.apply_update(&update(-1, -1, vec![batch(3, 5, Acknowledged, 1), batch(8, 8, Archived, 2)]), false);
    let runs: Vec<(i64, i64, DeliveryState, i16)> =
        p.runs.iter().map(|r| (r.first, r.last, r.state, r.deliveries)).collect();
    assert_eq!(runs, vec![(0, 7, Available, 2), (8, 8, Archived, 2), (9, 9, Available, 2)]);
}

/// The per-offset model of Kafka's rules.
#[derive(Default)]
struct Model {
    start: i64,
    offsets: BTreeMap<i64, (i16, i8)>,
    archived: BTreeMap<i16, u64>,
}

impl Model {
    fn apply(&mut self, snapshot: bool, start: i64, batches: &[StateBatch]) {
        let before: BTreeMap<i64, (i16, i8)> = std::mem::take(&mut self.offsets);
        let mut now: BTreeMap<i64, (i16, i8)> = if snapshot { BTreeMap::new() } else { before.clone() };
        if snapshot || start != -1 {
            self.start = start;
        }
        for b in batches {
            for o in b.first_offset..=b.last_offset {
                let p = (b.delivery_count, b.delivery_state.as_i8());
                let e = now.entry(o).or_insert(p);
                *e = (*e).max(p);
            }
        }
        if self.start != -1 {
            now.retain(|o, _| *o >= self.start);
        }
        for (o, (count, state)) in &now {
            if *state == 4 && before.get(o).map(|b| b.1) != Some(4) {
                *self.archived.entry(*count).or_default() += 1;
            }
        }
        self.offsets = now;
    }
}

fn batches() -> impl Strategy<Value = Vec<StateBatch>> {
    vec(
        (0i64..40, 0i64..6, prop_oneof![Just(Available), Just(Acknowledged), Just(Archived)], 0i16..4)
            .prop_map(|(first, len, state, count)| batch(first, first + len, state, count)),
        0..5,
    )
}

proptest! {
    /// The range folding agrees with Kafka's rules applied offset by offset.
    #[test]
    fn folding_runs_matches_the_per_offset_model(
        first in (0i64..10, batches()),
        steps in vec((any::<bool>(), prop_oneof![Just(-1i64), 0i64..40], batches()), 0..8),
    ) {
        let mut p = SharePartition::default();
        let mut m = Model::default();
        p.apply_snapshot(&snapshot(first.0, -1, first.1.clone()));
        m.apply(true, first.0, &first.1);
        for (is_snapshot, start, b) in steps {
            if is_snapshot && start >= 0 {
                p.apply_snapshot(&snapshot(start, -1, b.clone()));
                m.apply(true, start, &b);
            } else {
                p.apply_update(&update(start, -1, b.clone()), false);
                m.apply(false, start, &b);
            }
            let expanded: BTreeMap<i64, (i16, i8)> = p
                .runs
                .iter()
                .flat_map(|r: &Run| (r.first..=r.last).map(move |o| (o, (r.deliveries, r.state.as_i8()))))
                .collect();
            prop_assert_eq!(&expanded, &m.offsets);
            prop_assert!(p.runs.windows(2).all(|w| w[0].last < w[1].first), "sorted and disjoint: {:?}", p.runs);
            prop_assert_eq!(&p.archived, &m.archived);
            let complete = m.offsets.values().filter(|(_, s)| *s == 2 || *s == 4).count() as i64;
            prop_assert_eq!(p.complete(), complete);
        }
    }
}
