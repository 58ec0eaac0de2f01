//! Transactions of the offsets topic read past, against Kafka's rule written
//! out here on its own: for any run of plain commits, transactional commits,
//! markers and offset tombstones, a primary's unit (restarted on its store
//! now and then, reading on), its store rebuilt at the end, and a standby
//! following the primary's transactions all hold what Kafka's coordinator
//! holds, record offsets included.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::sync::Arc;

use kshard_offsets::{OffsetCommitKey, OffsetCommitValue, Record, RecordKey, RecordValue};
use kshard_runtime::recovery_log::SourceOffset;
use kshard_runtime::{Checkpoint, LogPosition, MemoryStore, Store};
use kshard_runtime::{Message, Transaction, Transactional};
use proptest::prelude::*;

use crate::group_offsets::GroupOffsets;
use crate::log_shards::Layout;
use crate::monitor::{Monitor, MonitorSettings};
use crate::offsets_layout::{OffsetsLayout, OffsetsShards};
use crate::shard_store::commit_counts::CommitCounts;
use crate::shard_store::{follow_transaction, unit_from_store};

/// One record of the partition.
#[derive(Debug, Clone)]
enum Op {
    /// A plain commit of (group, partition, offset).
    Plain(u8, i32, i64),
    /// A commit inside producer's transaction.
    InTxn(i64, u8, i32, i64),
    /// Producer's marker: COMMIT or ABORT.
    End(i64, bool),
    /// An offset tombstone of (group, partition).
    Delete(u8, i32),
}

fn op() -> impl Strategy<Value = Op> {
    let group = 0u8..2;
    let partition = 0i32..2;
    prop_oneof![
        3 => (group.clone(), partition.clone(), 0i64..1000).prop_map(|(g, p, o)| Op::Plain(g, p, o)),
        4 => (1i64..4, group.clone(), partition.clone(), 0i64..1000).prop_map(|(pr, g, p, o)| Op::InTxn(pr, g, p, o)),
        2 => (1i64..4, any::<bool>()).prop_map(|(pr, c)| Op::End(pr, c)),
        1 => (group, partition).prop_map(|(g, p)| Op::Delete(g, p)),
    ]
}

fn group(g: u8) -> String {
    format!("group-{g}")
}

/// The raw key and value of a commit (`None`: its tombstone).
fn raw(g: u8, p: i32, offset: Option<i64>) -> (Vec<u8>, Option<Vec<u8>>) {
    let value = offset.map(|offset| {
        RecordValue::OffsetCommit(OffsetCommitValue {
            version: 3,
            offset,
            leader_epoch: Some(0),
            metadata: Cow::Borrowed(""),
            commit_timestamp: 1,
            expire_timestamp: None,
            topic_id: None,
        })
    });
    let key = OffsetCommitKey { group: Cow::Owned(group(g)), topic: Cow::Borrowed("t"), partition: p };
    Record { key: RecordKey::OffsetCommit { key_version: 1, key }, value }.encode()
}

/// Offsets by (group, partition): (offset, record offset).
type Offsets = BTreeMap<(String, i32), (i64, i64)>;

/// What Kafka's coordinator holds: committed offsets, and open transactions'
/// by producer.
#[derive(Debug, Default)]
struct Kafka {
    committed: Offsets,
    pending: BTreeMap<i64, Offsets>,
}

impl Kafka {
    fn replay(&mut self, at: i64, op: &Op) {
        match *op {
            Op::Plain(g, p, o) => {
                self.committed.insert((group(g), p), (o, at));
            }
            Op::InTxn(pr, g, p, o) => {
                self.pending.entry(pr).or_default().insert((group(g), p), (o, at));
            }
            Op::End(pr, committed) => {
                let Some(pending) = self.pending.remove(&pr) else { return };
                if !committed {
                    return;
                }
                for (key, (o, record)) in pending {
                    if self.committed.get(&key).is_none_or(|&(_, in_place)| record > in_place) {
                        self.committed.insert(key, (o, record));
                    }
                }
            }
            Op::Delete(g, p) => {
                self.committed.remove(&(group(g), p));
                for pending in self.pending.values_mut() {
                    pending.remove(&(group(g), p));
                }
            }
        }
    }
}

/// A unit's committed offsets and open transactions, as the model has them:
/// (offset, record offset) by (group, partition).
type Held = (Offsets, BTreeMap<i64, Offsets>);

fn held(unit: &GroupOffsets) -> Held {
    let mut committed = BTreeMap::new();
    for (name, g) in unit.groups() {
        for (_, p, c) in g.offsets() {
            committed.insert((name.to_string(), p), (c.offset, c.record_offset));
        }
    }
    let mut open = BTreeMap::new();
    for (producer, commits) in unit.open_transactions().iter() {
        if !commits.is_empty() {
            let commits = commits
                .iter()
                .map(|c| ((c.group.to_string(), c.partition), (c.committed.offset, c.committed.record_offset)))
                .collect();
            open.insert(producer, commits);
        }
    }
    (committed, open)
}

fn expected(kafka: &Kafka) -> Held {
    let open = kafka.pending.iter().filter(|(_, p)| !p.is_empty()).map(|(pr, p)| (*pr, p.clone())).collect();
    (kafka.committed.clone(), open)
}

fn checkpoint(next: i64) -> Checkpoint {
    Checkpoint {
        log: LogPosition { next_offset: 0, seq: 0, checksum: 0, author: None },
        offsets: vec![SourceOffset { topic: "__consumer_offsets".into(), partition: 0, offset: next }],
        partial: None,
    }
}

fn unit_of(monitor: &Monitor) -> Held {
    let mut out = None;
    monitor.units().for_each(|_, unit| out = Some(held(unit)));
    out.unwrap_or_default()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]
    #[test]
    fn every_mode_holds_what_kafkas_coordinator_holds(
        ops in proptest::collection::vec(op(), 1..60),
        batch in 1usize..6,
        restarts in proptest::collection::vec(any::<bool>(), 12),
    ) {
        let monitor = Arc::new(Monitor::new(MonitorSettings::default()));
        let app = OffsetsShards::new(OffsetsLayout::default(), Arc::clone(&monitor), 1, crate::shutdown::Shutdown::default());
        let (mut store, mut standby, mut kafka) = (MemoryStore::default(), GroupOffsets::default(), Kafka::default());
        for (n, chunk) in ops.chunks(batch).enumerate() {
            let first = (n * batch) as i64;
            let mut txn = Transaction::new(&store);
            let mut counts = CommitCounts::default();
            for (i, op) in chunk.iter().enumerate() {
                let at = first + i as i64;
                kafka.replay(at, op);
                let (key, value, transactional) = match *op {
                    Op::Plain(g, p, o) => { let (k, v) = raw(g, p, Some(o)); (Some(k), v, None) }
                    Op::InTxn(pr, g, p, o) => {
                        let (k, v) = raw(g, p, Some(o));
                        (Some(k), v, Some(Transactional::Record { producer_id: pr }))
                    }
                    Op::End(pr, committed) => (None, None, Some(Transactional::Marker { producer_id: pr, committed })),
                    Op::Delete(g, p) => { let (k, v) = raw(g, p, None); (Some(k), v, None) }
                };
                let message = Message {
                    transactional,
                    ..Message::new("__consumer_offsets", 0, at, key.as_deref(), value.as_deref())
                };
                app.consume(&mut counts, &mut txn, &message).expect("consumes");
            }
            OffsetsLayout::finalize(&mut counts, &mut txn);
            let mutations = txn.into_mutations();
            let next = first + chunk.len() as i64;
            store.apply(&mutations, &checkpoint(next)).expect("applies");
            follow_transaction(&mut standby, &mutations, Some(next));
            // Now and then the primary restarts on its store and reads on.
            if restarts[n % restarts.len()] {
                monitor.units().replace(0, unit_from_store(&store, Some(next)).expect("rebuilds"));
            }
        }
        let want = expected(&kafka);
        prop_assert_eq!(&unit_of(&monitor), &want, "the primary's unit");
        let next = Some(ops.len() as i64);
        let restored = unit_from_store(&store, next).expect("rebuilds");
        prop_assert_eq!(&held(&restored), &want, "rebuilt from the store");
        prop_assert_eq!(restored.next_offset(), next);
        prop_assert_eq!(&held(&standby), &want, "the standby");
    }
}
