//! `kshard-runtime`: shards with a primary replica and hot standbys, in the
//! style of Gazette's consumer framework.
//!
//! Work is split into shards. Each has one primary replica, which reads the
//! shard's sources and runs transactions against a local store, and hot standby
//! replicas, which tail the shard's recovery log so that one of them can take
//! over at once. Assignments and replica status live in a [`keyspace`] (etcd,
//! or an embedded one for a single process).
//!
//! An application implements [`Application`] and starts a member with
//! [`Member::serve`]; its HTTP handlers read shards' state from any member
//! through [`Queries`] ([`StoreView`]s, forwarded to the primary when it is
//! elsewhere), and [`PartitionShards`] makes a shard per partition of a
//! topic. Everything these name is re-exported here, and the modules are
//! private but for these namespaces: [`keyspace`] and [`partitions`] (the
//! contracts with their implementations), the [`recovery_log`], the pure
//! state machines [`allocator`] and [`replica`], which tests drive on their
//! own, what `kshard shards` does ([`shard_specs`], [`unassign`]), and
//! [`http_server`], the HTTP server a member serves on; with the feature
//! `testing`, `faults` and `simulation` too.
//!
//! The modules, by what they are:
//! - pure, tested against models: `status` (replica status codes and how two
//!   reports reduce), `backoff`, [`replica`] (the replica lifecycle: events
//!   in, actions out), [`allocator`], `model` (shard specs, members,
//!   assignments, hints and their keys), `cluster_view` (every shard's
//!   replicas as the keyspace says), and the [`recovery_log`]'s record
//!   format, chain, player, start and policy;
//! - the contracts, each with a real and an in-memory implementation and a
//!   conformance suite (feature `testing`): [`keyspace`] (etcd, or
//!   embedded), [`partitions`] (Kafka, or memory), `store` (redb, or
//!   memory) and `disk`, where a member keeps its stores;
//! - the I/O around them, async on tokio: `serve` ([`Member::serve`]) starts
//!   a member; `node` runs it (joins, runs `allocator_runner` when elected,
//!   follows its assignments); each replica's I/O is a task
//!   (`replica_worker`); `status_writer` writes statuses checked against the
//!   assignment's revision; `member` is its membership (a key under its
//!   lease, leadership); `node_http` and `metrics` show it to operators;
//! - for tests only (feature `testing`): `faults`, wrappers that hold back
//!   or fail what passes through them.
//!
//! Features: `etcd` (on by default) is the keyspace on etcd, for members of
//! a deployment; without it (`default-features = false`) a single process
//! with the embedded keyspace builds without etcd-client, tonic or protoc.
//! `testing` adds the conformance suites and the fault wrappers. Minimum
//! Rust: 1.95 (`rust-version`).

pub mod allocator;
// Reached from outside only through `internals`, for tests (feature `testing`).
#[cfg_attr(not(feature = "testing"), allow(unreachable_pub, dead_code))]
mod allocator_runner;
mod app_error;
mod application;
mod backoff;
mod cluster_view;
mod disk;
#[cfg(any(test, feature = "testing"))]
pub mod faults;
mod generator;
pub mod http_server;
pub mod keyspace;
// Reached from outside only through `internals`, for tests (feature `testing`).
#[cfg_attr(not(feature = "testing"), allow(unreachable_pub, dead_code))]
mod member;
mod metrics;
mod model;
mod node;
mod node_http;
mod node_shared;
mod outputs;
pub mod partitions;
mod progress;
mod queries;
pub mod recovery_log;
pub mod replica;
mod replica_failure;
mod replica_log;
mod replica_worker;
mod resolver;
mod selector;
mod serve;
mod shard_row;
pub mod shard_specs;
#[cfg(any(test, feature = "testing"))]
pub mod simulation;
mod source_message;
mod sources;
mod status;
// Reached from outside only through `internals`, for tests (feature `testing`).
#[cfg_attr(not(feature = "testing"), allow(unreachable_pub, dead_code))]
mod status_writer;
mod store;
mod store_data;
mod store_view;
pub mod unassign;
mod unlogged;
mod worker_context;

// The Kafka types the API names (a member's settings, the log topic's admin),
// and axum, whose Router an application's routes are.
pub use axum;
pub use kshard_kafka::{Admin, Client, ClientSettings, TopicSpec};

pub use application::{
    AppError, Application, Consuming, Isolation, Message, OutRecord, Output, ShardApp, Transaction, Transactional,
};
pub use cluster_view::{ClusterView, ReplicaView};
pub use disk::{Disk, MemoryDisk, RedbDisk};
pub use generator::{FOLLOW_EVERY, PartitionShards};
#[cfg(feature = "etcd")]
pub use keyspace::EtcdKeyspace;
pub use keyspace::{Keyspace, KeyspaceError, MemoryKeyspace};
pub use member::MemberError;
pub use metrics::{Metrics, Playback};
pub use model::{
    Assignment, AssignmentKey, AssignmentValue, Hint, Hints, KeyError, Keys, MemberSpec, RecoveryLog, Refusals,
    ShardSpec, Source, valid_id,
};
pub use node::{Created, NodeConfig, NodeError, create_shard, read_hints};
pub use node_http::{MemberClient, replicas_response, router as http_router, shard_table, shards_response};
pub use node_shared::NodeShared;
pub use progress::{Progress, ProgressMap};
pub use queries::Queries;
pub use recovery_log::hints::HintsError;
pub use replica_failure::{FailureKind, ReplicaFailure};
pub use resolver::{DEFAULT_WAIT, InvalidReadOption, MAX_WAIT, ReadOptions};
pub use selector::Selector;
pub use serve::{Member, ServeError};
pub use shard_row::ShardRow;
pub use status::{ReplicaCode, ReplicaStatus};
pub use store::{Checkpoint, Entries, LogPosition, MemoryStore, Partial, RedbStore, Store, StoreError};
pub use store_view::{StoreRead, StoreView, StoreViews};

/// The runtime's parts below [`Member`], for its own integration tests
/// (feature `testing`): not part of the library's API.
#[cfg(feature = "testing")]
#[doc(hidden)]
pub mod internals {
    pub use crate::allocator_runner::{AllocatorRunner, Round, failure_backoff};
    pub use crate::member::{Leadership, Membership, become_leader};
    pub use crate::node::run as run_node;
    pub use crate::status_writer::{StatusWriteError, Written, write_status};
}
