//! The layout of a share-state shard's store (one per partition of
//! `__share_group_state`, with `data_dir`), and the [`ShareState`] unit it
//! holds: pure, bytes in and a unit out, so the rules are tested without a
//! runtime.
//!
//! `__share_group_state` is not compacted: the share coordinator deletes
//! what precedes each snapshot, so the records still in the log do not hold
//! what was counted before (the records archived, poison messages among
//! them). The store keeps instead each share-partition's folded state, one
//! entry per share-partition: the key is Kafka's snapshot key of it, the
//! value a format byte, the archived counts by delivery count, then the
//! state as a snapshot value in Kafka's own encoding. A tombstone deletes
//! the entry. A rebuild, and a standby following a played transaction, put
//! each entry back in its unit: every entry is a whole state, so their
//! order does not matter.

use kshard_offsets::cursor::Cursor;
use kshard_offsets::{
    SharePartitionKey, ShareSnapshotValue, ShareStateKey, ShareStateRecord, ShareStateValue, StateBatch, Uuid,
};
use kshard_runtime::Store;
use kshard_runtime::recovery_log::Mutation;
use tracing::warn;

use crate::shard_store::RebuildError;
use crate::share_partition::SharePartition;
use crate::share_state::ShareState;

/// The format byte opening each stored value.
const FORMAT: u8 = 1;

/// Bytes scanned per store read when rebuilding a unit.
const SCAN_CHUNK: usize = 4 << 20;

/// The store key of a share-partition: Kafka's snapshot key of it.
pub(crate) fn store_key(group: &str, topic_id: Uuid, partition: i32) -> Vec<u8> {
    let key = SharePartitionKey { group_id: group.into(), topic_id, partition };
    let mut out = Vec::new();
    ShareStateKey::Snapshot(key).encode(&mut out);
    out
}

/// What the store keeps of a share-partition's state.
pub(crate) fn stored_state(state: &SharePartition) -> Vec<u8> {
    let mut out = vec![FORMAT];
    out.extend_from_slice(&(state.archived.len() as u16).to_be_bytes());
    for (deliveries, n) in &state.archived {
        out.extend_from_slice(&deliveries.to_be_bytes());
        out.extend_from_slice(&n.to_be_bytes());
    }
    let snapshot = ShareSnapshotValue {
        version: 0,
        snapshot_epoch: 0,
        state_epoch: state.state_epoch,
        leader_epoch: state.leader_epoch,
        start_offset: state.start_offset,
        delivery_complete_count: state.delivery_complete_count,
        create_timestamp: 0,
        write_timestamp: state.write_timestamp,
        state_batches: state
            .runs
            .iter()
            .map(|r| StateBatch {
                first_offset: r.first,
                last_offset: r.last,
                delivery_state: r.state,
                delivery_count: r.deliveries,
            })
            .collect(),
    };
    ShareStateValue::Snapshot(snapshot).encode(&mut out);
    out
}

/// The store's entry for the share-partition `raw_key` names, as `unit`
/// holds it now: its key, and its stored state (`None`: it has none, delete
/// the entry). `None` for a key that does not name a share-partition.
pub(crate) fn entry_after(unit: &ShareState, raw_key: &[u8]) -> Option<(Vec<u8>, Option<Vec<u8>>)> {
    let key = ShareStateKey::decode(raw_key).ok()?;
    let k = key.share_partition()?;
    let state = unit.get(&k.group_id, k.topic_id, k.partition).map(stored_state);
    Some((store_key(&k.group_id, k.topic_id, k.partition), state))
}

/// Puts the state stored under `key` into `unit`.
fn restore(unit: &mut ShareState, key: &[u8], stored: &[u8]) -> Result<(), String> {
    let mut c = Cursor::new(stored);
    let layout = |what: &str| format!("a stored share-partition state ({} bytes): {what}", stored.len());
    let format = c.u8().map_err(|_| layout("empty"))?;
    if format != FORMAT {
        return Err(layout(&format!("format {format}, this kshard reads {FORMAT}")));
    }
    let count = c.u16().map_err(|_| layout("no archived counts"))?;
    let mut archived = std::collections::BTreeMap::new();
    for _ in 0..count {
        let (Ok(deliveries), Ok(n)) = (c.i16(), c.u64()) else { return Err(layout("archived counts cut short")) };
        archived.insert(deliveries, n);
    }
    let record = ShareStateRecord::decode(key, Some(c.rest())).map_err(|e| layout(&e.to_string()))?;
    let (ShareStateKey::Snapshot(k), Some(ShareStateValue::Snapshot(v))) = (&record.key, &record.value) else {
        return Err(layout("not a snapshot"));
    };
    let mut state = SharePartition::default();
    state.apply_snapshot(v);
    // The counts as they were, not what the snapshot's batches alone say.
    state.archived = archived;
    unit.restore(&k.group_id, k.topic_id, k.partition, state);
    Ok(())
}

/// Rebuilds a unit from a store: every share-partition's state, at the
/// store's checkpoint `next_offset`.
pub(crate) fn share_unit_from_store(store: &dyn Store, next_offset: Option<i64>) -> Result<ShareState, RebuildError> {
    let mut unit = ShareState::default();
    let mut after: Option<Vec<u8>> = None;
    loop {
        let chunk = store.scan(after.as_deref(), SCAN_CHUNK)?;
        let Some((last, _)) = chunk.last() else { break };
        after = Some(last.clone());
        for (key, value) in chunk {
            restore(&mut unit, &key, &value).map_err(RebuildError::Layout)?;
        }
    }
    if let Some(next) = next_offset {
        unit.advance_to(next);
    }
    Ok(unit)
}

/// Applies a standby's played transaction to its partition's unit, then
/// moves the position to the checkpoint (never back: the unit may be ahead).
pub(crate) fn follow_share_transaction(unit: &mut ShareState, mutations: &[Mutation], next_offset: Option<i64>) {
    for m in mutations {
        match m {
            Mutation::Put { key, value } => {
                if let Err(why) = restore(unit, key, value) {
                    warn!(error = %why, "a played share-state entry does not read: skipped");
                }
            }
            Mutation::Delete { key } => {
                if let Ok(ShareStateKey::Snapshot(k)) = ShareStateKey::decode(key) {
                    unit.remove(&k.group_id, k.topic_id, k.partition);
                }
            }
        }
    }
    if let Some(next) = next_offset {
        unit.advance_to(next);
    }
}

#[cfg(test)]
mod tests {
    use kshard_offsets::{DeliveryState, ShareUpdateValue};
    use kshard_runtime::{Checkpoint, LogPosition};

    use super::*;

    const TOPIC: Uuid = Uuid([3; 16]);

    fn update(group: &str, start: i64, batches: Vec<StateBatch>) -> (Vec<u8>, Vec<u8>) {
        let key = SharePartitionKey { group_id: group.to_owned().into(), topic_id: TOPIC, partition: 1 };
        let value = ShareUpdateValue {
            version: 0,
            snapshot_epoch: 0,
            leader_epoch: 4,
            start_offset: start,
            delivery_complete_count: -1,
            state_batches: batches,
        };
        let (k, v) =
            ShareStateRecord { key: ShareStateKey::Update(key), value: Some(ShareStateValue::Update(value)) }.encode();
        (k, v.expect("a value"))
    }

    fn batch(first: i64, last: i64, state: DeliveryState, count: i16) -> StateBatch {
        StateBatch { first_offset: first, last_offset: last, delivery_state: state, delivery_count: count }
    }

    fn checkpoint() -> Checkpoint {
        Checkpoint {
            log: LogPosition { next_offset: 0, seq: 0, checksum: 0, author: None },
            offsets: vec![],
            partial: None,
        }
    }

    /// A unit that read `records`, and the store a primary wrote for it.
    fn read(records: &[(Vec<u8>, Vec<u8>)]) -> (ShareState, kshard_runtime::MemoryStore) {
        let mut unit = ShareState::default();
        let mut store = kshard_runtime::MemoryStore::default();
        for (offset, (k, v)) in records.iter().enumerate() {
            unit.apply_bytes(offset as i64, Some(k), Some(v)).expect("applies");
            let (key, state) = entry_after(&unit, k).expect("a share-partition");
            let m = match state {
                Some(value) => Mutation::Put { key, value },
                None => Mutation::Delete { key },
            };
            store.apply(&[m], &checkpoint()).expect("stores");
        }
        (unit, store)
    }

    #[test]
    fn a_rebuild_keeps_the_archived_counts_the_log_no_longer_holds() {
        let (unit, store) = read(&[
            update("g", 0, vec![batch(0, 4, DeliveryState::Archived, 5)]),
            update("g", 0, vec![batch(5, 6, DeliveryState::Archived, 1)]),
            // The start offset passes the archived records: the runs forget
            // them, the counts do not.
            update("g", 10, vec![batch(10, 11, DeliveryState::Available, 2)]),
            update("h", 3, vec![]),
        ]);
        let rebuilt = share_unit_from_store(&store, Some(4)).expect("rebuilds");
        let (g, h) = (rebuilt.get("g", TOPIC, 1).expect("g"), rebuilt.get("h", TOPIC, 1).expect("h"));
        assert_eq!(g, unit.get("g", TOPIC, 1).expect("g read"), "the whole state comes back");
        assert_eq!((g.poison(5), g.archived_total(), g.start_offset), (5, 7, 10));
        assert_eq!((g.in_flight(), g.redelivered(), g.lag(20)), (2, 2, Some(10)));
        assert_eq!(h.start_offset, 3);
        assert_eq!(rebuilt.next_offset(), Some(4));
        // An update after the rebuild merges into the restored state.
        let mut rebuilt = rebuilt;
        let (k, v) = update("g", -1, vec![batch(10, 11, DeliveryState::Archived, 5)]);
        rebuilt.apply_bytes(4, Some(&k), Some(&v)).expect("applies");
        assert_eq!(rebuilt.get("g", TOPIC, 1).map(|g| g.poison(5)), Some(7));
    }

    #[test]
    fn a_standby_follows_puts_and_deletes_to_the_primarys_state() {
        let (primary, _) = read(&[update("g", 2, vec![batch(2, 3, DeliveryState::Acknowledged, 1)])]);
        let mut standby = ShareState::default();
        let key = store_key("g", TOPIC, 1);
        let value = stored_state(primary.get("g", TOPIC, 1).expect("g"));
        follow_share_transaction(&mut standby, &[Mutation::Put { key: key.clone(), value }], Some(9));
        assert_eq!(standby.get("g", TOPIC, 1), primary.get("g", TOPIC, 1));
        assert_eq!(standby.next_offset(), Some(9));
        follow_share_transaction(&mut standby, &[Mutation::Delete { key }], Some(5));
        assert_eq!(standby.get("g", TOPIC, 1), None);
        assert_eq!(standby.next_offset(), Some(9), "never back");
    }

    #[test]
    fn a_stored_value_that_does_not_read_is_named_not_panicked_on() {
        let mut store = kshard_runtime::MemoryStore::default();
        let m = Mutation::Put { key: store_key("g", TOPIC, 0), value: vec![FORMAT, 0, 9] };
        store.apply(&[m], &checkpoint()).expect("stores");
        let e = share_unit_from_store(&store, None).expect_err("cut short");
        assert!(e.to_string().contains("archived counts cut short"), "{e}");
        let mut unit = ShareState::default();
        follow_share_transaction(&mut unit, &[Mutation::Put { key: vec![1], value: vec![7] }], None);
        assert_eq!(unit.partitions().count(), 0);
    }
}
