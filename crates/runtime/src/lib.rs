//! `kshard-runtime`: shards with a primary replica and hot standbys, in the
//! style of Gazette's consumer framework.
//!
//! Work is split into shards. Each has one primary replica, which reads the
//! shard's sources and runs transactions against a local store, and hot standby
//! replicas, which tail the shard's recovery log so that one of them can take
//! over at once. Assignments and replica status live in a [`keyspace`] (etcd,
//! or an embedded one for a single process).
//!
//! This first part is the pure core, free of I/O so it is tested exhaustively:
//! [`status`] (replica status codes and how two reports reduce), [`backoff`]
//! (the retry schedule of status writes) and [`replica`] (the replica
//! lifecycle as a state machine that takes events and returns what to do), and
//! the [`keyspace`] contract with its embedded and etcd implementations, the
//! [`model`] (shard specs, members, assignments) with its keys, the pure
//! [`allocator`], [`status_writer`] (revision-checked status writes with the
//! seed's backoff), the [`recovery_log`]'s record format and chain rules, and
//! the replica's [`store`] (a contract, and a store on redb).

pub mod allocator;
pub mod allocator_runner;
pub mod application;
pub mod backoff;
pub mod cluster_view;
pub mod keyspace;
pub mod member;
pub mod metrics;
pub mod model;
pub mod node;
pub mod node_http;
pub mod partitions;
pub mod recovery_log;
pub mod replica;
mod replica_log;
pub mod replica_worker;
pub mod status;
pub mod status_writer;
pub mod store;
