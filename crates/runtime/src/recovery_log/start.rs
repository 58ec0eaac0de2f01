//! Where a replica's playback starts, decided from what it knows: its store's
//! checkpoint (and whether the log still holds the record it was made from,
//! see [`super::lineage`]), the shard's newest snapshot (hint, checked the
//! same way) and the log's low and high offsets. Pure: the caller reads, this
//! decides.

use crate::model::Hint;

/// What the replica found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Found {
    /// The store's next offset (`None`: an empty store).
    pub position: Option<i64>,
    /// False when the log holds another record where the store's last applied
    /// one was (the log was recreated): the store is of another log.
    pub store_of_this_log: bool,
    /// The newest snapshot, when the log holds it as the hint says.
    pub hint: Option<Hint>,
    /// The log's first offset.
    pub low: i64,
    /// The log's end.
    pub high: i64,
}

/// Where playback starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Start {
    /// From the store's checkpoint (or offset 0 for an empty store on a
    /// whole log).
    Store,
    /// From the newest snapshot, into an emptied store.
    Snapshot(Hint),
    /// From the log's first record, into an emptied store, skipping records
    /// until a snapshot starts (the log was truncated and no hint is usable).
    Bootstrap(i64),
    /// From offset 0, into an emptied store (the store is of another log).
    Fresh,
}

/// Why the store is not played on, for the log line.
pub(crate) fn why(start: &Start, found: &Found) -> Option<&'static str> {
    match start {
        Start::Store => None,
        Start::Snapshot(_) if !found.store_of_this_log => {
            Some("the store is of another log (recreated?): from the newest snapshot")
        }
        Start::Snapshot(_) => Some("starting from the newest snapshot"),
        Start::Bootstrap(_) if !found.store_of_this_log => {
            Some("the store is of another log (recreated?): from the first snapshot the log holds")
        }
        Start::Bootstrap(_) => Some("the log was truncated past the store: from the first snapshot it holds"),
        Start::Fresh => Some("the store is of another log (recreated?): from the log's start"),
    }
}

/// Decides where playback starts.
pub(crate) fn choose(found: &Found) -> Start {
    let ours = found.store_of_this_log && found.position.is_none_or(|p| p <= found.high);
    let position = if ours { found.position.unwrap_or(0) } else { 0 };
    match found.hint {
        // The newest snapshot is further on than the store.
        Some(h) if position < h.offset || !ours => Start::Snapshot(h),
        _ if position < found.low => Start::Bootstrap(found.low),
        _ if ours => Start::Store,
        _ if found.low > 0 => Start::Bootstrap(found.low),
        _ => Start::Fresh,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hint(offset: i64) -> Hint {
        Hint { offset, seq: 3, checksum: 4, author: Some(5), bytes: 6 }
    }

    fn found(position: Option<i64>, ours: bool, hint: Option<Hint>, low: i64, high: i64) -> Found {
        Found { position, store_of_this_log: ours, hint, low, high }
    }

    #[test]
    fn playback_starts_where_the_most_is_kept() {
        // A store on its log goes on; an empty one on a whole log from 0.
        assert_eq!(choose(&found(Some(40), true, None, 0, 50)), Start::Store);
        assert_eq!(choose(&found(None, true, None, 0, 50)), Start::Store);
        // A newer snapshot is closer.
        assert_eq!(choose(&found(Some(10), true, Some(hint(30)), 0, 50)), Start::Snapshot(hint(30)));
        assert_eq!(choose(&found(Some(40), true, Some(hint(30)), 0, 50)), Start::Store);
        // Truncated past the store, no snapshot known: the first one there.
        assert_eq!(choose(&found(Some(10), true, None, 20, 50)), Start::Bootstrap(20));
        // A store of another log is never played on.
        assert_eq!(choose(&found(Some(40), false, Some(hint(30)), 0, 50)), Start::Snapshot(hint(30)));
        assert_eq!(choose(&found(Some(40), false, None, 0, 50)), Start::Fresh);
        assert_eq!(choose(&found(Some(40), false, None, 5, 50)), Start::Bootstrap(5));
        // Ahead of the log's end: of another log, whatever the check said.
        assert_eq!(choose(&found(Some(90), true, None, 0, 50)), Start::Fresh);
    }
}
