//! `kshard-runtime`: shards with a primary replica and hot standbys, in the
//! style of Gazette's consumer framework.
//!
//! Work is split into shards. Each has one primary replica, which reads the
//! shard's sources and runs transactions against a local store, and hot standby
//! replicas, which tail the shard's recovery log so that one of them can take
//! over at once. Assignments and replica status live in a [`keyspace`] (etcd,
//! or an embedded one for a single process).
//!
//! The pure core, free of I/O and tested against models: [`status`] (replica
//! status codes and how two reports reduce), [`backoff`], [`replica`] (the
//! replica lifecycle as a state machine: events in, actions out),
//! [`allocator`], [`model`] (shard specs, members, assignments, hints and
//! their keys) and the [`recovery_log`]'s record format, chain and player.
//!
//! The contracts, each with a real and an in-memory implementation and one
//! conformance suite: [`keyspace`] (etcd, or embedded), [`partitions`] (Kafka,
//! or memory) [`store`] (redb, or memory) and [`disk`], where a member keeps its stores.
//!
//! The I/O around them, async on tokio: [`node`] runs a member (joins, runs
//! [`allocator_runner`] when elected, follows its assignments), each replica's
//! I/O is a task ([`replica_worker`]), [`status_writer`] writes statuses
//! checked against the assignment's revision, and [`node_http`], [`metrics`]
//! and [`cluster_view`] show the member to operators; [`member`] is its
//! membership (a key under its lease, leadership). An application implements
//! [`application::Application`].

pub mod allocator;
pub mod allocator_runner;
pub mod application;
pub mod backoff;
pub mod cluster_view;
pub mod disk;
#[cfg(any(test, feature = "testing"))]
pub mod faults;
pub mod keyspace;
pub mod member;
pub mod metrics;
pub mod model;
pub mod node;
pub mod node_http;
pub mod partitions;
pub mod recovery_log;
pub mod replica;
pub mod replica_worker;
pub mod serve;
pub mod status;
pub mod status_writer;
pub mod store;
