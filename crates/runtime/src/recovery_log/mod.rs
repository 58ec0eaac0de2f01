//! The recovery log: a shard's store changes, written by its primary to one
//! partition (Kafka, or memory: see [`crate::partitions`]) and played by
//! every replica — everything about it in one place.
//!
//! The pure core: the [`record`] format, the [`chain`] rules that decide
//! which records a [`player`] applies (so that a zombie primary's late writes
//! are ignored by every player alike, on any Kafka-compatible log), where
//! playback [`start`]s, a primary's timing and snapshot [`policy`], and the
//! settings a log [`topic`] must have. The I/O:
//! [`io`] plays, hands off and appends; [`lineage`] reads a record back to
//! tell whether a store or hint belongs to the log as it is; `replica` is a
//! replica's store and log as its worker uses them (opening at the right
//! place, tailing, snapshots and hints).

pub mod chain;
pub mod io;
pub mod lineage;
pub mod player;
pub mod policy;
pub mod record;
pub(crate) mod replica;
pub mod start;
pub mod topic;
