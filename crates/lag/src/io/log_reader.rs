//! What both halves of a log's reader share — the worker that asks the
//! brokers (`offsets_reader.rs`) and the shards that read through the
//! runtime (`shards_reader.rs`): the worker's configuration
//! ([`OffsetsReader`]), its name, the shards' ids and where they keep their
//! stores, and whether the brokers let kshard read the log at all.

use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use kshard_kafka::Client;
use tracing::{debug, warn};

use super::error::WorkerError;
use crate::brokers::{Connector, SourceEvent};
use crate::catch_up::Log;
use crate::monitor::Monitor;
use crate::readiness::Event;
use crate::shutdown::Shutdown;

/// The worker's name in logs and on `/ready`.
pub(crate) const WORKER: &str = "offsets reader";

/// The share-state reader's name in logs and on `/ready`.
pub(crate) const SHARE_WORKER: &str = "share-state reader";

/// The name of the worker that reads `log`.
pub(crate) fn worker(log: Log) -> &'static str {
    match log {
        Log::Offsets => WORKER,
        Log::ShareState => SHARE_WORKER,
    }
}

#[derive(Clone)]
pub(crate) struct OffsetsReader {
    pub(crate) kafka: Client,
    /// Which log it reads.
    pub(crate) log: Log,
    pub(crate) topic: String,
    pub(crate) timeout: Duration,
    pub(crate) monitor: Arc<Monitor>,
    pub(crate) shutdown: Shutdown,
    /// Partitions of the topic that appeared later, from the refresher
    /// (taken by each life's partition grower in turn).
    pub(crate) new_partitions: Arc<Mutex<mpsc::Receiver<Vec<i32>>>>,
    /// The shards it reads through, and where they keep their stores.
    pub(crate) shards: Shards,
    /// Makes the Kafka clients.
    pub(crate) brokers: Arc<dyn Connector>,
}

/// Whether the brokers refuse to let kshard read `topic`, asked by one read
/// of the partition `first` (from its offset) for up to `timeout`: the
/// refusal, if they do.
pub(crate) fn refusal(
    brokers: &dyn Connector,
    topic: &str,
    first: (i32, Option<i64>),
    timeout: Duration,
    shutdown: &Shutdown,
) -> Result<Option<kshard_kafka::Error>, WorkerError> {
    let mut reader = brokers.reader(topic, &[first])?;
    let deadline = Instant::now() + timeout;
    let mut answered = false;
    while !answered && Instant::now() < deadline && !shutdown.is_set() {
        let polled = reader.poll(Duration::from_millis(250), &mut |event| {
            answered |= !matches!(event, SourceEvent::Idle);
        });
        match polled {
            Ok(()) => {}
            Err(e) if e.is_authorization() => return Ok(Some(e)),
            Err(e) => debug!(error = %e, topic, "asking whether the topic may be read; the client retries"),
        }
    }
    Ok(None)
}

/// Share groups' progress is left out, said, rather than the whole service
/// kept from ready: kshard may not read `topic` (the ACLs of kshard before
/// share groups grant Read on `__consumer_offsets` only).
pub(crate) fn share_state_unreadable(monitor: &Monitor, topic: &str, e: &kshard_kafka::Error) {
    let why = format!(
        "kshard may not Read {topic}: share groups' progress (their lag) is left out; grant Read on the topic and restart kshard"
    );
    warn!(error = %e, topic, "{why}");
    monitor.log_unreadable(Log::ShareState, why);
    monitor.step(Event::WorkerRunning(worker(Log::ShareState)));
}

/// The id of the shard of partition `p` of `log`.
pub(crate) fn shard_id(log: Log, p: i32) -> String {
    match log {
        Log::Offsets => format!("offsets-{p:03}"),
        Log::ShareState => format!("share-state-{p:03}"),
    }
}

/// Several `kshard serve` processes sharing the shards through etcd.
#[derive(Debug, Clone)]
pub struct ClusterOptions {
    /// etcd endpoints (`http://host:port`, or `https://` with TLS).
    pub etcd: Vec<String>,
    /// TLS and a user for etcd.
    pub access: kshard_runtime::keyspace::EtcdAccess,
    /// The prefix of every key kept in etcd.
    pub prefix: String,
    /// This member's id: stable across restarts (its stores are found by it).
    pub member: String,
    /// Its zone.
    pub zone: String,
    /// Its lease: how long after a crash its primaries move.
    pub lease_ttl: Duration,
    /// Where other members and tools reach its HTTP endpoints.
    pub endpoint: Option<String>,
}

/// Where the shards keep their stores.
#[derive(Debug, Clone)]
pub(crate) enum Stores {
    /// redb files in a data directory, each shard logging its changes to a
    /// partition of the recovery-log topic.
    Durable(std::path::PathBuf),
    /// Memory, without recovery logs (plain `serve`): kept across the
    /// reader's lives in this process, read again from the log when the
    /// process starts.
    Memory(kshard_runtime::MemoryDisk),
}

/// How a log is read through shards.
#[derive(Debug, Clone)]
pub(crate) struct Shards {
    /// Where the shards keep their stores.
    pub(crate) stores: Stores,
    /// The members to share the shards with; `None`: this process alone.
    pub(crate) cluster: Option<ClusterOptions>,
    /// The recovery logs' topic.
    pub(crate) log_topic: String,
    /// Where the member that runs the shards is made known to HTTP.
    pub(crate) member: crate::LocalMember,
}
