//! The recovery log: a shard's store changes, written by its primary to one
//! partition (Kafka, or memory: see [`crate::partitions`]) and played by
//! every replica — everything about it in one place.
//!
//! The pure core: the `record` format, the `chain` rules that decide
//! which records a `player` applies (so that a zombie primary's late writes
//! are ignored by every player alike, on any Kafka-compatible log), where
//! playback `start`s, a primary's timing and snapshot `policy`, and the
//! settings a log `topic` must have. The I/O:
//! `io` plays, hands off and appends; `lineage` reads a record back to
//! tell whether a store or hint belongs to the log as it is; `replica` is a
//! replica's store and log as its worker uses them (opening at the right
//! place, tailing, snapshots and hints).

pub(crate) mod chain;
pub(crate) mod hints;
pub(crate) mod io;
pub(crate) mod lineage;
pub(crate) mod player;
pub(crate) mod policy;
pub(crate) mod record;
pub(crate) mod recover;
pub(crate) mod replica;
pub(crate) mod start;
pub(crate) mod topic;

pub use chain::{Chain, Skip};
pub use io::{FENCED, LogClients, LogError, WriterSlot, commit, hand_off, play_to_head};
pub use player::{Played, Player};
pub use policy::HEARTBEAT;
pub use record::{Body, LogRecord, Mutation, SourceOffset};
pub use recover::{Recovered, prune_before, prune_point, recover};
pub use replica::transactional_id;
