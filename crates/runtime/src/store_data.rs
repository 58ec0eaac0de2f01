//! The plain data a store reads and writes, apart from the stores: where
//! its state stands ([`Checkpoint`]: the recovery log's position and the
//! sources' offsets), its entries, and its error. Both the stores
//! (`store.rs`) and their views (`store_view.rs`) speak it.

use serde::{Deserialize, Serialize};

use crate::recovery_log::record::SourceOffset;

/// Where playback of the recovery log stands: the next log offset to read and
/// the chain state after the last applied record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LogPosition {
    /// The next offset of the log's partition to read.
    pub next_offset: i64,
    /// The last applied sequence number.
    pub seq: u64,
    /// The chain's checksum after it.
    pub checksum: u64,
    /// The current author.
    pub author: Option<u64>,
}

/// What a store's state covers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Checkpoint {
    /// Where playback of the log goes on.
    pub log: LogPosition,
    /// The sources' next offsets.
    pub offsets: Vec<SourceOffset>,
    /// Set while the store does not hold the whole state yet: it was played
    /// from a snapshot start found at a truncated log's start, and no
    /// snapshot it played has ended (see `recovery_log::player`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub partial: Option<Partial>,
}

/// A store played from a truncated log's start, before its first complete
/// snapshot.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Partial {
    /// The offset of the snapshot start whose end would make the store whole
    /// (`None` after a hand-off cut that snapshot short: the next one will).
    pub snapshot: Option<i64>,
}

/// A store failure, naming the step.
#[derive(Debug, thiserror::Error)]
#[error("store {step}: {message}")]
pub struct StoreError {
    /// What was being done.
    pub step: &'static str,
    /// The cause.
    pub message: String,
}

/// Keys and values, in key order.
pub type Entries = Vec<(Vec<u8>, Vec<u8>)>;
