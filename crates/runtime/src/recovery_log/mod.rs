//! The recovery log: a shard's store changes, written by its primary to one
//! partition (Kafka, or memory: see [`crate::partitions`]) and played by every replica. This part is the pure core:
//! the [`record`] format and the [`chain`] rules that decide which records a
//! player applies — so that a zombie primary's late writes are ignored by every
//! player alike, on any Kafka-compatible log.

pub mod chain;
pub mod io;
pub mod lineage;
pub mod player;
pub mod record;
pub mod start;
pub mod topic;
