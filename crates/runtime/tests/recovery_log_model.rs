//! The recovery log's records and chain rules: records round-trip through
//! their bytes and hostile bytes never panic; and with a primary and a new
//! primary writing concurrently in any interleaving, every player applies the
//! same single branch, in which no record of the old primary follows the new
//! one's hand-off and every transaction comes from the author of the hand-off
//! before it.

use kshard_runtime::recovery_log::Chain;
use kshard_runtime::recovery_log::{Body, LogRecord, Mutation, SourceOffset};
use proptest::prelude::*;

fn mutations() -> impl Strategy<Value = Vec<Mutation>> {
    proptest::collection::vec(
        prop_oneof![
            (proptest::collection::vec(any::<u8>(), 0..8), proptest::collection::vec(any::<u8>(), 0..8))
                .prop_map(|(key, value)| Mutation::Put { key, value }),
            proptest::collection::vec(any::<u8>(), 0..8).prop_map(|key| Mutation::Delete { key }),
        ],
        0..4,
    )
}

fn body() -> impl Strategy<Value = Body> {
    prop_oneof![
        Just(Body::HandOff),
        Just(Body::SnapshotStart),
        Just(Body::SnapshotEnd),
        mutations().prop_map(|mutations| Body::TransactionPart { mutations }),
        (mutations(), proptest::collection::vec(("[a-z]{0,6}", any::<i32>(), any::<i64>()), 0..3)).prop_map(
            |(mutations, offsets)| Body::Transaction {
                mutations,
                offsets: offsets
                    .into_iter()
                    .map(|(topic, partition, offset)| SourceOffset { topic, partition, offset })
                    .collect(),
            }
        ),
    ]
}

#[derive(Debug, Clone)]
enum Step {
    OldWrites,
    NewReads,
    NewHandsOff,
    NewWrites,
    OldReads,
}

fn txn() -> Body {
    Body::Transaction { mutations: vec![Mutation::Put { key: b"k".to_vec(), value: b"v".to_vec() }], offsets: vec![] }
}

/// A writer: its author id and its view of the chain (what it read, plus what
/// it wrote itself, assumed applied).
struct Writer {
    author: u64,
    view: Chain,
    read: usize,
}

impl Writer {
    fn write(&mut self, log: &mut Vec<Vec<u8>>, body: Body) {
        let record = self.view.next(self.author, body);
        let bytes = record.encode();
        // Optimistic: the writer's own record continues its view.
        let _ = self.view.offer(&record, &bytes);
        log.push(bytes);
    }

    /// Reads the log it has not read yet, as a player.
    fn catch_up(&mut self, log: &[Vec<u8>]) {
        let mut view = Chain::default();
        for bytes in log {
            let record = LogRecord::decode(bytes).expect("decodes");
            let _ = view.offer(&record, bytes);
        }
        self.view = view;
        self.read = log.len();
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1024))]

    #[test]
    fn records_round_trip(author in any::<u64>(), seq in any::<u64>(), prev in any::<u64>(), body in body()) {
        let record = LogRecord { author, seq, prev, body };
        prop_assert_eq!(LogRecord::decode(&record.encode()), Ok(record));
    }

    #[test]
    fn hostile_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..200), cut in any::<usize>()) {
        let _ = LogRecord::decode(&bytes);
        let mut valid = LogRecord { author: 1, seq: 2, prev: 3, body: txn() }.encode();
        valid.truncate(cut % (valid.len() + 1));
        let _ = LogRecord::decode(&valid);
    }

    #[test]
    fn one_branch_and_the_old_primary_fenced(steps in proptest::collection::vec(
        prop_oneof![Just(Step::OldWrites), Just(Step::NewReads), Just(Step::NewHandsOff), Just(Step::NewWrites), Just(Step::OldReads)],
        0..40,
    )) {
        let mut log: Vec<Vec<u8>> = Vec::new();
        let mut old = Writer { author: 1, view: Chain::default(), read: 0 };
        let mut new = Writer { author: 2, view: Chain::default(), read: 0 };
        old.write(&mut log, Body::HandOff);
        let mut new_handed_off = false;
        for s in steps {
            match s {
                Step::OldWrites => old.write(&mut log, txn()),
                Step::OldReads => old.catch_up(&log),
                Step::NewReads => new.catch_up(&log),
                Step::NewHandsOff => {
                    new.write(&mut log, Body::HandOff);
                    new_handed_off = true;
                }
                Step::NewWrites if new_handed_off => new.write(&mut log, txn()),
                Step::NewWrites => {}
            }
        }
        // Two players of the same log apply the same records.
        let play = |log: &[Vec<u8>]| {
            let mut chain = Chain::default();
            let mut applied = Vec::new();
            for bytes in log {
                let record = LogRecord::decode(bytes).expect("decodes");
                if chain.offer(&record, bytes).is_ok() {
                    applied.push(record);
                }
            }
            (chain, applied)
        };
        let (a, applied) = play(&log);
        let (b, _) = play(&log);
        prop_assert_eq!(a, b);
        let mut author = None;
        let mut new_took_over = false;
        for (i, r) in applied.iter().enumerate() {
            prop_assert_eq!(r.seq, i as u64 + 1, "applied records form one chain");
            match r.body {
                Body::HandOff => author = Some(r.author),
                Body::Transaction { .. } | Body::TransactionPart { .. } | Body::SnapshotStart | Body::SnapshotEnd => {
                    prop_assert_eq!(Some(r.author), author, "a transaction by the current author")
                }
            }
            if r.author == 2 {
                new_took_over = true;
            }
            prop_assert!(!(new_took_over && r.author == 1), "the old primary's record after the new one's hand-off");
        }
    }
}
