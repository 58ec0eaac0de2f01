//! The layout of a lag shard's store, and the unit it holds: pure, bytes in
//! and a [`GroupOffsets`] out, so the rules are tested without a runtime.
//!
//! The store maps each record's key (the raw `__consumer_offsets` key) to its
//! offset (8 bytes, big-endian) and raw value; a tombstone deletes the key —
//! what Kafka's log cleaner keeps of the partition. Beside those, each group's
//! commit count (under [`COMMITS_PREFIX`]) and the records of open
//! transactions ([`pending`]). [`unit_from_store`] rebuilds a unit by applying
//! the entries in offset order (as if reading the compacted partition);
//! [`follow_transaction`] moves a standby's unit by one played transaction
//! to the same state.

pub(crate) mod commit_counts;
pub(crate) mod pending;

use kshard_offsets::cursor::Cursor;
use kshard_runtime::Store;
use kshard_runtime::recovery_log::Mutation;
use tracing::warn;

use crate::group_offsets::GroupOffsets;

/// Bytes scanned per store read when rebuilding a unit.
const SCAN_CHUNK: usize = 4 << 20;

/// Why a store does not rebuild into a unit.
#[derive(Debug, thiserror::Error)]
pub(crate) enum RebuildError {
    /// The store could not be read.
    #[error("reading the store: {0}")]
    Store(#[from] kshard_runtime::StoreError),
    /// An entry is not in the layout above.
    #[error("{0}")]
    Layout(String),
}

/// Store keys of the groups' commit counts start with this: Kafka's keys
/// start with a small version number, so they never do.
pub(crate) const COMMITS_PREFIX: &[u8] = b"\xff\xffcommits/";

/// The store key of `group`'s commit count.
pub(crate) fn commits_key(group: &str) -> Vec<u8> {
    [COMMITS_PREFIX, group.as_bytes()].concat()
}

/// A commit count stored under `key`, if it is one: (group, count).
pub(crate) fn stored_commits<'a>(key: &'a [u8], value: &[u8]) -> Option<(&'a str, u64)> {
    let group = std::str::from_utf8(key.strip_prefix(COMMITS_PREFIX)?).ok()?;
    Some((group, Cursor::new(value).u64().ok()?))
}

/// An open transaction's record set aside (its stored value) or gone
/// (`None`): producer, record key, stored value.
type OpenChange<'a> = (i64, &'a [u8], Option<&'a [u8]>);

/// Applies a standby's transaction to its partition's unit: tombstones first,
/// then the puts in the order of their offsets (what a rebuild from the store
/// would apply; a transaction's commits its primary applied at the marker
/// are older than the position, and are taken only if newer than the
/// offset in place), then the open transactions as stored, then the
/// position moves to the checkpoint.
pub(crate) fn follow_transaction(unit: &mut GroupOffsets, mutations: &[Mutation], next_offset: Option<i64>) {
    let position = unit.next_offset().unwrap_or(0);
    // A transaction the unit is already past (the unit was kept ahead of an
    // older store) changes nothing; nor do records a snapshot puts again.
    if next_offset.is_some_and(|next| next <= position) && unit.next_offset().is_some() {
        return;
    }
    let mut puts: Vec<(i64, &[u8], &[u8])> = Vec::with_capacity(mutations.len());
    let mut counts: Vec<(&[u8], &[u8])> = Vec::new();
    // Open transactions' records set aside (a value) or gone (`None`).
    let mut open: Vec<OpenChange<'_>> = Vec::new();
    for m in mutations {
        match m {
            Mutation::Delete { key } if key.starts_with(COMMITS_PREFIX) => {}
            Mutation::Delete { key } if key.starts_with(pending::PREFIX) => {
                open.extend(pending::parse(key).map(|(p, k)| (p, k, None)));
            }
            Mutation::Delete { key } => {
                let _ = unit.apply_bytes(position.max(1) - 1, Some(key), None);
            }
            Mutation::Put { key, value } if key.starts_with(COMMITS_PREFIX) => counts.push((key, value)),
            Mutation::Put { key, value } if key.starts_with(pending::PREFIX) => {
                open.extend(pending::parse(key).map(|(p, k)| (p, k, Some(value.as_slice()))));
            }
            Mutation::Put { key, value } => {
                if let Some((offset, raw)) = split_stored(value) {
                    puts.push((offset, key, raw));
                }
            }
        }
    }
    puts.sort_unstable_by_key(|(offset, _, _)| *offset);
    for (offset, key, value) in puts {
        // Records that did not decode were counted by the primary.
        if offset >= position {
            let _ = unit.apply_bytes(offset, Some(key), Some(value));
        } else {
            let _ = unit.apply_if_newer(offset, key, value);
        }
    }
    for (producer, key, stored) in open {
        match stored.map(split_stored) {
            Some(Some((offset, value))) => unit.restore_pending(producer, offset, key, value),
            Some(None) => warn!(producer, "a stored record of an open transaction has no offset"),
            None => unit.drop_pending(producer, key),
        }
    }
    for (key, value) in counts {
        if let Some((group, n)) = stored_commits(key, value) {
            unit.set_commits(group, n);
        }
    }
    // Applying moved the position to the last put's; the checkpoint says where
    // the partition was read to (never backwards: a snapshot re-puts old offsets).
    unit.reset_position(next_offset.unwrap_or(position).max(position));
}

/// What the store keeps of the record at `offset`: the offset, then the value.
pub(crate) fn stored_value(offset: i64, value: &[u8]) -> Vec<u8> {
    [&offset.to_be_bytes()[..], value].concat()
}

/// The offset and raw value of what the store keeps, if it has an offset.
pub(crate) fn split_stored(stored: &[u8]) -> Option<(i64, &[u8])> {
    let mut c = Cursor::new(stored);
    Some((c.i64().ok()?, c.rest()))
}

/// Rebuilds a unit from a store: its entries applied in offset order.
pub(crate) fn unit_from_store(store: &dyn Store, next_offset: Option<i64>) -> Result<GroupOffsets, RebuildError> {
    let mut entries: Vec<(i64, Vec<u8>, Vec<u8>)> = Vec::new();
    let mut counts: Vec<(String, u64)> = Vec::new();
    let mut open: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
    let mut after: Option<Vec<u8>> = None;
    loop {
        let chunk = store.scan(after.as_deref(), SCAN_CHUNK)?;
        let Some((last, _)) = chunk.last() else { break };
        after = Some(last.clone());
        for (key, value) in chunk {
            if let Some((group, n)) = stored_commits(&key, &value) {
                counts.push((group.to_owned(), n));
                continue;
            }
            if key.starts_with(pending::PREFIX) {
                open.push((key, value));
                continue;
            }
            let Some((offset, raw)) = split_stored(&value) else {
                return Err(RebuildError::Layout(format!("a stored record of {} bytes has no offset", value.len())));
            };
            entries.push((offset, key, raw.to_vec()));
        }
    }
    entries.sort_unstable_by_key(|(offset, _, _)| *offset);
    let mut unit = GroupOffsets::default();
    for (offset, key, value) in &entries {
        // Records that did not decode when read do not now either (they were
        // counted then); they are kept for a kshard that can.
        let _ = unit.apply_bytes(*offset, Some(key), Some(value));
    }
    for (entry, stored) in &open {
        match (pending::parse(entry), split_stored(stored)) {
            (Some((producer, key)), Some((offset, value))) => unit.restore_pending(producer, offset, key, value),
            _ => {
                return Err(RebuildError::Layout(format!(
                    "a stored record of an open transaction does not read ({} bytes)",
                    stored.len()
                )));
            }
        }
    }
    for (group, n) in counts {
        unit.set_commits(&group, n);
    }
    if let Some(next) = next_offset {
        unit.advance_to(next);
    }
    Ok(unit)
}

#[cfg(test)]
mod tests {
    use kshard_offsets::{OffsetCommitValue, Record, RecordKey};

    use super::*;

    /// The raw key and value of `group`'s commit of `offset` for `t`/0.
    fn commit(group: &str, offset: i64) -> (Vec<u8>, Vec<u8>) {
        let (key, value) = Record::offset_commit(group, "t", 0, Some(OffsetCommitValue::new(3, offset, 1))).encode();
        (key, value.expect("a value"))
    }

    /// What the primary stores for the record at `at`.
    fn stored(at: i64, value: &[u8]) -> Vec<u8> {
        stored_value(at, value)
    }

    #[test]
    fn the_group_is_read_from_every_key() {
        let (key, _) = commit("payments", 5);
        assert_eq!(RecordKey::group_of(&key), Some("payments"));
        assert_eq!(RecordKey::group_of(&[0, 1, 0]), None, "too short");
        assert_eq!(RecordKey::group_of(&[0, 1, 0, 9, b'a']), None, "length past the end");
        assert_eq!(stored_commits(&commits_key("g"), &7u64.to_be_bytes()), Some(("g", 7)));
        assert_eq!(stored_commits(&key, &7u64.to_be_bytes()), None);
    }

    #[test]
    fn a_standby_follows_transactions_like_a_rebuild_from_the_store() {
        let (k1, v1) = commit("a", 10);
        let (k2, v2) = commit("b", 20);
        let (k2b, v2b) = commit("b", 21);
        let mut unit = GroupOffsets::default();
        // Two transactions, the second with b's newer commit and a's offset deleted.
        follow_transaction(
            &mut unit,
            &[
                Mutation::Put { key: k2.clone(), value: stored(101, &v2) },
                Mutation::Put { key: k1.clone(), value: stored(100, &v1) },
                Mutation::Put { key: commits_key("b"), value: 5u64.to_be_bytes().to_vec() },
            ],
            Some(102),
        );
        assert_eq!(unit.next_offset(), Some(102));
        assert_eq!(unit.group("a").and_then(|g| g.offset("t", 0)).map(|c| c.offset), Some(10));
        assert_eq!(unit.group("b").map(|g| g.commits), Some(5), "the stored count wins");
        follow_transaction(
            &mut unit,
            &[Mutation::Delete { key: k1 }, Mutation::Put { key: k2b, value: stored(103, &v2b) }],
            Some(110),
        );
        assert!(unit.group("a").is_none(), "a's only offset was deleted");
        assert_eq!(unit.group("b").and_then(|g| g.offset("t", 0)).map(|c| c.offset), Some(21));
        assert_eq!(unit.next_offset(), Some(110));
        // A snapshot re-puts old records: nothing moves back, no commit is counted again.
        let commits = unit.group("b").map(|g| g.commits);
        follow_transaction(&mut unit, &[Mutation::Put { key: k2.clone(), value: stored(101, &v2) }], Some(110));
        assert_eq!(unit.next_offset(), Some(110));
        assert_eq!(unit.group("b").map(|g| g.commits), commits);
        assert_eq!(unit.group("b").and_then(|g| g.offset("t", 0)).map(|c| c.offset), Some(21));
        // Within a new transaction too, a put older than the position is a re-put.
        follow_transaction(&mut unit, &[Mutation::Put { key: k2, value: stored(101, &v2) }], Some(120));
        assert_eq!(unit.group("b").and_then(|g| g.offset("t", 0)).map(|c| c.offset), Some(21));
        assert_eq!(unit.next_offset(), Some(120));
    }
}
