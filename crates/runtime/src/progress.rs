//! [`Progress`]: where each replica of a member stands in its log, for
//! operators (`kshard shards list`, the member's HTTP endpoints).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

/// Where a replica stands in its log, for operators.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Progress {
    /// The next log offset the replica reads.
    pub next_offset: i64,
    /// The log's end when last asked.
    pub log_end: i64,
    /// When the replica last said so (every second at least while it
    /// tails): an old one is a replica stuck somewhere.
    #[serde(skip)]
    pub published: Option<std::time::Instant>,
    /// When the replica last applied a record of its log. A primary commits
    /// about every [`crate::recovery_log::policy::HEARTBEAT`] while it runs (an empty transaction when
    /// its sources are idle), so this is the age of the state served here,
    /// and an old one means the primary is gone or stuck — seen before its
    /// lease runs out.
    #[serde(skip)]
    pub applied: Option<std::time::Instant>,
}

impl Progress {
    /// Records between the replica's position and its log's end.
    pub fn behind(&self) -> i64 {
        self.log_end.saturating_sub(self.next_offset)
    }
}

/// The replicas' progress on this member, by shard.
pub type ProgressMap = Arc<Mutex<BTreeMap<String, Progress>>>;
