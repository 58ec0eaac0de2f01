//! A member process at work: it joins (a key under its lease), runs the
//! allocator when elected, follows its assignments in the keyspace and drives
//! one [`Replica`] state machine per assigned shard, performing its actions —
//! a task per replica for the I/O ([`crate::replica_worker`]), status
//! writes checked against the assignment's revision ([`write_status`]).
//!
//! When the member's lease is lost (the keyspace unreachable for longer than
//! its TTL) it stops every replica — its assignments are gone for everyone else
//! — and joins again. On shutdown it tears every replica down (readers stopped,
//! appends flushed, stores closed) and then revokes its lease, which deletes its
//! key and its assignments: nothing of it stays in the keyspace.

use std::collections::BTreeMap;
use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use kshard_kafka::Client;
use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender, unbounded_channel};
use tokio::time::Instant;

use crate::allocator_runner::AllocatorRunner;
use crate::application::Application;
use crate::disk::{Disk, RedbDisk};
use crate::keyspace::{Compare, Keyspace, KeyspaceError, LeaseId, Op, Snapshot, Txn, WatchEvent};
use crate::member::{MemberError, Membership, become_leader};
use crate::model::{AssignmentValue, Hints, Keys, MemberSpec, ShardSpec};
use crate::node_shared::NodeShared;
use crate::partitions::Partitions;
use crate::partitions::kafka::KafkaPartitions;
use crate::recovery_log::hints::{HintBoard, HintCall, HintsError};
use crate::replica::{Action, AssignmentId, Event, FailureKind, Replica, ReplicaFailure, State};
use crate::replica_worker::{self, Command};
use crate::status::ReplicaCode;
use crate::status_writer::write_status;
use crate::worker_context::WorkerContext;

/// How a member runs.
#[derive(Debug, Clone)]
pub struct NodeConfig {
    /// The application's keys.
    pub keys: Keys,
    /// This member.
    pub member: MemberSpec,
    /// Its lease's TTL: how long after a crash its shards move.
    pub lease_ttl: Duration,
    /// Where its replicas' stores live.
    pub data_dir: PathBuf,
    /// Where its replicas' stores live instead of redb files under
    /// `data_dir` (a [`crate::disk::MemoryDisk`] in tests); `None`: redb.
    pub disk: Option<Arc<dyn Disk>>,
    /// How to reach Kafka (recovery logs and sources): the member's readers
    /// share its connections with every other client made from it.
    pub kafka: Client,
    /// Where the recovery logs are and the sources come from instead of
    /// Kafka through `kafka` (a [`crate::partitions::memory::MemoryPartitions`]
    /// in tests); `None`: Kafka.
    pub partitions: Option<Arc<dyn Partitions>>,
}

impl NodeConfig {
    /// A member on Kafka (through `kafka`: a [`Client`], or the
    /// [`kshard_kafka::ClientSettings`] to make one from) keeping redb
    /// stores in `data_dir`. Pass the [`Client`] the rest of the process
    /// uses: a handle made from settings shares no connection, traffic
    /// count or access problem with any other.
    pub fn new(
        keys: Keys,
        member: MemberSpec,
        lease_ttl: Duration,
        data_dir: PathBuf,
        kafka: impl Into<Client>,
    ) -> Self {
        NodeConfig { keys, member, lease_ttl, data_dir, disk: None, kafka: kafka.into(), partitions: None }
    }
}

/// Why a member stopped.
#[derive(Debug, thiserror::Error)]
pub enum NodeError {
    /// Joining failed for good.
    #[error(transparent)]
    Member(#[from] MemberError),
    /// The keyspace failed.
    #[error(transparent)]
    Keyspace(#[from] KeyspaceError),
}

/// What [`create_shard`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Created {
    /// The shard was new.
    Created,
    /// The same shard existed.
    Existed,
    /// A shard of that id exists with other sources or another recovery log:
    /// another application under the same keys.
    Conflict(Box<ShardSpec>),
}

/// Puts `spec` unless a shard of that id exists. An existing shard reading the
/// same sources into the same recovery log is kept as it is (its serving
/// settings too: the first member's win); one that reads other sources or
/// logs elsewhere is a [`Created::Conflict`].
pub async fn create_shard<K: Keyspace>(ks: &K, keys: &Keys, spec: &ShardSpec) -> Result<Created, KeyspaceError> {
    let key = keys.shard(&spec.id);
    let value = serde_json::to_vec(spec).unwrap_or_default();
    let txn = Txn {
        compares: vec![Compare::CreateRevision(key.clone(), 0)],
        success: vec![Op::Put { key: key.clone(), value, lease: None }],
        failure: vec![],
    };
    if ks.txn(txn).await?.succeeded {
        return Ok(Created::Created);
    }
    let existing = ks.get_prefix(&key).await?.kvs.into_iter().find(|kv| kv.key == key);
    let existing = existing.and_then(|kv| serde_json::from_slice::<ShardSpec>(&kv.value).ok());
    Ok(match existing {
        Some(e) if e.sources == spec.sources && e.recovery_log == spec.recovery_log => Created::Existed,
        Some(e) => Created::Conflict(Box::new(e)),
        // Deleted meanwhile, or not a spec: nothing to compare with.
        None => Created::Existed,
    })
}

type Report = (String, u64, Event);

/// One shard's replica on this member: its state machine and its worker.
#[derive(Default)]
struct Slot {
    machine: Replica,
    /// The assignment's key and create revision, as last seen.
    assignment: Option<(String, AssignmentId)>,
    worker: Option<UnboundedSender<Command>>,
    generation: u64,
    /// When the replica was told to become primary.
    promotion_asked: Option<Instant>,
}

struct Driver<K: Keyspace> {
    ks: Arc<K>,
    config: NodeConfig,
    shared: NodeShared,
    worker: Arc<WorkerContext>,
    specs: BTreeMap<String, ShardSpec>,
    slots: BTreeMap<String, Slot>,
    reports: UnboundedSender<Report>,
    lost: tokio::sync::watch::Receiver<bool>,
}

impl<K: Keyspace> Driver<K> {
    fn step(&mut self, shard: &str, event: Event) {
        let slot = self.slots.entry(shard.to_owned()).or_default();
        if let Event::Assigned { slot: 0, .. } = event
            && matches!(slot.machine.state(), State::Standby { .. } | State::Backfill { promote: false, .. })
        {
            slot.promotion_asked = Some(Instant::now());
        }
        let actions = slot.machine.step(event);
        for action in actions {
            self.act(shard, action);
        }
    }

    fn act(&mut self, shard: &str, action: Action) {
        let Some(slot) = self.slots.get_mut(shard) else { return };
        match action {
            Action::StartPlayback => {
                let Some(spec) = self.specs.get(shard).cloned() else {
                    self.step(
                        shard,
                        Event::Failed(ReplicaFailure::new(FailureKind::Spec, format!("no spec for shard {shard}"))),
                    );
                    return;
                };
                slot.generation += 1;
                let (commands, receive) = unbounded_channel();
                slot.worker = Some(commands);
                let (ctx, reports, generation) = (Arc::clone(&self.worker), self.reports.clone(), slot.generation);
                let id = spec.id.clone();
                let report = Arc::new(move |event| {
                    let _ = reports.send((id.clone(), generation, event));
                });
                replica_worker::spawn(ctx, spec, receive, report);
            }
            Action::AppendHandOff | Action::Follow | Action::OpenStore | Action::StartSources | Action::TearDown => {
                let command = match action {
                    Action::AppendHandOff => Command::AppendHandOff,
                    Action::Follow => Command::Follow,
                    Action::OpenStore => Command::OpenStore,
                    Action::StartSources => Command::StartSources,
                    _ => Command::TearDown,
                };
                match &slot.worker {
                    Some(worker) => {
                        // A worker that already ended reports TornDown anyway.
                        let _ = worker.send(command);
                    }
                    None if command == Command::TearDown => {
                        let _ = self.reports.send((shard.to_owned(), slot.generation, Event::TornDown));
                    }
                    None => {}
                }
            }
            Action::CountFailure(kind) => self.shared.metrics.failure(shard, kind),
            Action::WriteStatus(id, status) => {
                let metrics = &self.shared.metrics;
                metrics.status(shard, status.code);
                self.shared.set_status(shard, status.code);
                if status.code == ReplicaCode::Primary
                    && let Some(asked) = slot.promotion_asked.take()
                {
                    let seconds = asked.elapsed().as_secs_f64();
                    metrics.failover(shard, seconds);
                    tracing::info!(shard, seconds, "promoted to primary");
                } else {
                    tracing::info!(shard, status = ?status.code, errors = ?status.errors, "replica status");
                }
                let Some((key, _)) = slot.assignment.clone() else { return };
                let ks = Arc::clone(&self.ks);
                let mut lost = self.lost.clone();
                tokio::spawn(async move {
                    let until = async move {
                        let _ = lost.wait_for(|l| *l).await;
                    };
                    if let Err(e) = write_status(&*ks, &key, id, &status, until).await {
                        tracing::debug!(key, error = %e, "status not written");
                    }
                });
            }
        }
    }

    /// A worker's report; stale ones (of an earlier worker) are dropped.
    fn report(&mut self, shard: &str, generation: u64, event: Event) {
        let Some(slot) = self.slots.get_mut(shard) else { return };
        if generation != slot.generation {
            return;
        }
        if event == Event::TornDown {
            slot.worker = None;
            if let State::TearingDown { next: None } = slot.machine.state() {
                self.shared.metrics.status(shard, ReplicaCode::Idle);
                self.shared.set_status(shard, ReplicaCode::Idle);
            }
        }
        self.step(shard, event);
    }

    /// Applies one change of a key under the root.
    fn apply(&mut self, event: WatchEvent) {
        let keys = &self.config.keys;
        self.shared.cluster.lock().unwrap_or_else(std::sync::PoisonError::into_inner).apply(keys, &event);
        let key = event.key().to_owned();
        if key.starts_with(&keys.shards()) {
            let id = key[keys.shards().len()..].to_owned();
            match event {
                WatchEvent::Put(kv) => match serde_json::from_slice::<ShardSpec>(&kv.value) {
                    Ok(spec) if spec.id == id && crate::model::valid_id(&id) => {
                        self.specs.insert(id, spec);
                    }
                    Ok(spec) => tracing::warn!(key, id = %spec.id, "skipping a shard spec whose id is not its key's"),
                    Err(e) => tracing::warn!(key, error = %e, "skipping a shard spec that does not parse"),
                },
                WatchEvent::Delete { .. } => {
                    self.specs.remove(&id);
                }
            }
            return;
        }
        if !key.starts_with(&keys.assignments()) {
            return;
        }
        let Ok(a) = keys.parse_assignment(&key) else {
            tracing::warn!(key, "skipping an assignment key that does not parse");
            return;
        };
        if a.member != self.config.member.id {
            return;
        }
        match event {
            WatchEvent::Put(kv) => match serde_json::from_slice::<AssignmentValue>(&kv.value) {
                Ok(value) => {
                    tracing::debug!(key, created = kv.create_revision, modified = kv.mod_revision, slot = value.slot, status = ?value.status.code, "assignment");
                    self.slots.entry(a.shard.clone()).or_default().assignment = Some((key, kv.create_revision));
                    self.step(&a.shard, Event::Assigned { assignment: kv.create_revision, slot: value.slot });
                }
                Err(e) => tracing::warn!(key, error = %e, "skipping an assignment that does not parse"),
            },
            WatchEvent::Delete { .. } => self.step(&a.shard, Event::Unassigned),
        }
    }

    /// Brings the view to `snapshot`: every key in it is put; replicas whose
    /// assignment is missing from it are unassigned.
    fn resync(&mut self, snapshot: Snapshot) {
        self.specs.clear();
        self.shared.cluster.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clear();
        let mut assigned = Vec::new();
        // Specs first: an assignment needs its shard's spec (keys sort
        // `assign/` before `shards/`).
        let shards = self.config.keys.shards();
        let (specs, others): (Vec<_>, Vec<_>) = snapshot.kvs.into_iter().partition(|kv| kv.key.starts_with(&shards));
        for kv in specs.into_iter().chain(others) {
            if let Ok(a) = self.config.keys.parse_assignment(&kv.key)
                && a.member == self.config.member.id
            {
                assigned.push((a.shard, kv.create_revision));
            }
            self.apply(WatchEvent::Put(kv));
        }
        // This member's assignments missing from the snapshot went while the
        // watch was down: the replicas working (or about to start) under them stop.
        let gone: Vec<String> = self
            .slots
            .iter()
            .filter(|(shard, slot)| {
                let id = match slot.machine.state() {
                    State::TearingDown { next: Some((id, _)) } => Some(*id),
                    _ => slot.machine.assignment(),
                };
                id.is_some_and(|id| !assigned.iter().any(|(s, a)| s == *shard && *a == id))
            })
            .map(|(shard, _)| shard.clone())
            .collect();
        for shard in gone {
            self.step(&shard, Event::Unassigned);
        }
    }

    /// True when no replica runs.
    fn all_down(&self) -> bool {
        self.slots
            .values()
            .all(|s| s.worker.is_none() && matches!(s.machine.state(), State::Idle | State::Failed { .. }))
    }
}

/// Hints in the keyspace, for the replicas' tasks.
struct KeyspaceHints<K> {
    ks: Arc<K>,
    keys: Keys,
}

/// How long a replica waits for the keyspace about hints.
const HINTS_TIMEOUT: Duration = Duration::from_secs(5);

/// Awaits `call` for at most [`HINTS_TIMEOUT`].
async fn within<T>(call: impl Future<Output = Result<T, KeyspaceError>>) -> Result<T, HintsError> {
    match tokio::time::timeout(HINTS_TIMEOUT, call).await {
        Ok(result) => Ok(result?),
        Err(_) => Err(HintsError::Timeout(HINTS_TIMEOUT)),
    }
}

impl<K: Keyspace> HintBoard for KeyspaceHints<K> {
    fn read<'a>(&'a self, shard: &'a str) -> HintCall<'a, Option<(Hints, i64)>> {
        Box::pin(read_hints(&*self.ks, &self.keys, shard))
    }

    fn write<'a>(&'a self, shard: &'a str, hints: &'a Hints, revision: i64) -> HintCall<'a, bool> {
        Box::pin(async move {
            let key = self.keys.hints(shard);
            let value = serde_json::to_vec(hints).map_err(HintsError::Encode)?;
            let put = Txn {
                compares: vec![Compare::ModRevision(key.clone(), revision)],
                success: vec![Op::Put { key, value, lease: None }],
                failure: vec![],
            };
            Ok(within(self.ks.txn(put)).await?.succeeded)
        })
    }
}

/// Shard `shard`'s snapshot hints and their key's revision (`None`: none
/// written yet); hints that do not parse are an error naming their key.
pub async fn read_hints<K: Keyspace>(ks: &K, keys: &Keys, shard: &str) -> Result<Option<(Hints, i64)>, HintsError> {
    let key = keys.hints(shard);
    let snapshot = within(ks.get_prefix(&key)).await?;
    match snapshot.kvs.into_iter().find(|kv| kv.key == key) {
        Some(kv) => serde_json::from_slice(&kv.value)
            .map(|h| Some((h, kv.mod_revision)))
            .map_err(|source| HintsError::Malformed { key, source }),
        None => Ok(None),
    }
}

/// Runs the member until `shutdown` completes: joins, serves its assignments,
/// and on shutdown tears down and leaves.
// Reached from outside only through `internals`, for tests (feature `testing`).
#[cfg_attr(not(feature = "testing"), allow(unreachable_pub))]
pub async fn run<K: Keyspace>(
    ks: Arc<K>,
    config: NodeConfig,
    app: Arc<dyn Application>,
    shared: NodeShared,
    shutdown: impl Future<Output = ()>,
) -> Result<(), NodeError> {
    tokio::pin!(shutdown);
    let worker = Arc::new(WorkerContext {
        partitions: config.partitions.clone().unwrap_or_else(|| {
            Arc::new(KafkaPartitions::new(config.kafka.clone(), crate::recovery_log::replica::KAFKA_TIMEOUT))
        }),
        disk: config.disk.clone().unwrap_or_else(|| Arc::new(RedbDisk::new(config.data_dir.clone()))),
        app,
        metrics: Arc::clone(&shared.metrics),
        progress: Arc::clone(&shared.progress),
        views: shared.views.clone(),
        hints: Arc::new(KeyspaceHints { ks: Arc::clone(&ks), keys: config.keys.clone() }),
    });
    let (reports, mut reported) = unbounded_channel();
    let mut slots = BTreeMap::new();
    // A lost lease, revoked before joining again.
    let mut stale: Option<LeaseId> = None;
    loop {
        let Some(membership) = join(&ks, &config, &mut shutdown, &mut stale).await? else { return Ok(()) };
        let membership = Arc::new(membership);
        tracing::info!(member = %config.member.id, zone = %config.member.zone, lease = membership.lease, "joined");
        let allocator = tokio::spawn(allocate(Arc::clone(&ks), config.keys.clone(), Arc::clone(&membership)));
        let mut driver = Driver {
            ks: Arc::clone(&ks),
            config: config.clone(),
            shared: shared.clone(),
            worker: Arc::clone(&worker),
            specs: BTreeMap::new(),
            slots: std::mem::take(&mut slots),
            reports: reports.clone(),
            lost: membership.lost(),
        };
        let stopped = follow(&mut driver, &mut reported, &mut shutdown).await;
        allocator.abort();
        // Tear every replica down, then leave (or join again when the lease was lost).
        let shards: Vec<String> = driver.slots.keys().cloned().collect();
        for shard in shards {
            driver.step(&shard, Event::Unassigned);
        }
        let deadline = Instant::now() + Duration::from_secs(60);
        while !driver.all_down() {
            match tokio::time::timeout_at(deadline, reported.recv()).await {
                Ok(Some((shard, generation, event))) => driver.report(&shard, generation, event),
                _ => break,
            }
        }
        slots = std::mem::take(&mut driver.slots);
        match stopped {
            Stopped::Shutdown => {
                if let Err(e) = membership.leave(&*ks).await {
                    tracing::warn!(error = %e, "leaving: the lease will expire instead");
                }
                tracing::info!(member = %config.member.id, "left");
                return Ok(());
            }
            Stopped::Lost => {
                // After an outage of the keyspace, the lease may still be
                // there (etcd extends leases when it comes back): `join`
                // revokes it first, so the old key and assignments go, and
                // joining again is not refused as taken until it expires.
                stale = Some(membership.lease);
                tracing::warn!(member = %config.member.id, "lost the member's lease; joining again");
            }
        }
    }
}

/// Joins, retrying while the keyspace is unreachable or a previous process of
/// this member still holds the key (until its lease expires); first revokes
/// `stale`, this process's own lost lease, once the keyspace answers. `None`
/// on shutdown.
async fn join<K: Keyspace>(
    ks: &Arc<K>,
    config: &NodeConfig,
    shutdown: &mut std::pin::Pin<&mut impl Future<Output = ()>>,
    stale: &mut Option<LeaseId>,
) -> Result<Option<Membership>, NodeError> {
    let mut attempts = 0u32;
    loop {
        if let Some(lease) = *stale {
            match ks.revoke(lease).await {
                Ok(()) | Err(KeyspaceError::LeaseNotFound(_)) => *stale = None,
                Err(e) => tracing::debug!(lease, error = %e, "revoking the lost lease; retrying"),
            }
        }
        match Membership::join(Arc::clone(ks), &config.keys, config.member.clone(), config.lease_ttl).await {
            Ok(m) => return Ok(Some(m)),
            Err(e @ (MemberError::Taken(_) | MemberError::Keyspace { .. })) => {
                // Say so at once, then every ten seconds.
                if attempts.is_multiple_of(20) {
                    tracing::warn!(error = %e, "joining; retrying");
                }
                attempts += 1;
            }
        }
        tokio::select! {
            () = shutdown.as_mut() => return Ok(None),
            () = tokio::time::sleep(Duration::from_millis(500)) => {}
        }
    }
}

/// Runs the allocator whenever this member leads, until its lease is lost.
async fn allocate<K: Keyspace>(ks: Arc<K>, keys: Keys, membership: Arc<Membership>) {
    let lost = membership.lost();
    let mut runner = AllocatorRunner::default();
    while !*lost.borrow() {
        match become_leader(&*ks, &keys, &membership).await {
            Ok(Some(term)) => {
                tracing::info!(member = %membership.spec.id, term = term.created, "leading the allocator");
                if let Err(e) = runner.run(&*ks, &keys, &term, || !*lost.borrow()).await {
                    tracing::warn!(error = %e, "allocator round failed; retrying");
                }
            }
            Ok(None) => return,
            Err(e) => tracing::warn!(error = %e, "electing the allocator's leader; retrying"),
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

enum Stopped {
    Shutdown,
    Lost,
}

/// Follows the keyspace and the workers until shutdown or the lease is lost.
async fn follow<K: Keyspace>(
    driver: &mut Driver<K>,
    reported: &mut UnboundedReceiver<Report>,
    shutdown: &mut std::pin::Pin<&mut impl Future<Output = ()>>,
) -> Stopped {
    let root = format!("{}/", driver.config.keys.root());
    let mut lost = driver.lost.clone();
    loop {
        // Read everything, then follow changes from there; read again when the
        // watch ends (a compacted revision) or the keyspace fails.
        let watch = match driver.ks.get_prefix(&root).await {
            Ok(snapshot) => {
                let from = snapshot.revision + 1;
                driver.resync(snapshot);
                driver.ks.watch(&root, from).await
            }
            Err(e) => Err(e),
        };
        let mut watch = match watch {
            Ok(w) => Some(w),
            Err(e) => {
                tracing::warn!(error = %e, "reading the keyspace; retrying");
                None
            }
        };
        let retry = tokio::time::sleep(if watch.is_some() {
            Duration::from_secs(365 * 86_400)
        } else {
            Duration::from_secs(1)
        });
        tokio::pin!(retry);
        loop {
            tokio::select! {
                () = shutdown.as_mut() => return Stopped::Shutdown,
                _ = lost.wait_for(|l| *l) => return Stopped::Lost,
                Some((shard, generation, event)) = reported.recv() => driver.report(&shard, generation, event),
                event = async { watch.as_mut()?.recv().await }, if watch.is_some() => match event {
                    Some(Ok(event)) => driver.apply(event),
                    Some(Err(e)) => {
                        tracing::warn!(error = %e, "watching the keyspace; reading it again");
                        break;
                    }
                    None => break,
                },
                () = &mut retry => break,
            }
        }
    }
}
