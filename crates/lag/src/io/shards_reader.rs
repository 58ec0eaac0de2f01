//! Reading a log through `kshard-runtime`: one shard per partition. With
//! `data_dir`, each shard's store is in the data directory and its recovery
//! log a partition of [`recovery_log_topic`]: a restart on the data
//! directory restores every partition's state from its store and reads only
//! what follows. Without, the shards have no recovery log and keep their
//! stores in memory ([`Stores::Memory`]): a restart reads the log again.
//! Alone, the process is the one member of an embedded keyspace;
//! with etcd ([`ClusterOptions`]) the members share the shards — each shard
//! primary on one member and followed by a standby on every other (see
//! [`crate::log_shards`]).
//!
//! The offsets topic's shards and the share-state topic's are run by two
//! runtime members of this process, each with its own keys (the share
//! state's under `<prefix>/share-state`) and recovery-log topic, read by the
//! two workers of the service: one log failing leaves the other served.

use super::error::WorkerError;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use kshard_kafka::Admin;
use kshard_runtime::Application;
use kshard_runtime::keyspace::EtcdKeyspace;
use kshard_runtime::keyspace::Keyspace;
use kshard_runtime::keyspace::MemoryKeyspace;
use kshard_runtime::{Keys, MemberSpec, RecoveryLog, ShardSpec, Source};
use kshard_runtime::{Member, ServeError};
use kshard_runtime::{NodeConfig, NodeShared};
use tracing::info;

use crate::catch_up::Log;
use crate::log_reader::{OffsetsReader, Shards, Stores, shard_id};
use crate::log_shards::{Layout, LogShards};
use crate::offsets_layout::OffsetsLayout;
use crate::readiness::Event;
use crate::share_layout::ShareLayout;

/// The recovery-log topic of the shards of `offsets_topic`: one partition per
/// partition of it, records deleted only by the runtime.
pub fn recovery_log_topic(offsets_topic: &str) -> String {
    format!("kshard-lag-log-{offsets_topic}")
}

/// The recovery-log topic of the share-state topic's shards, beside the
/// offsets topic's `offsets_log_topic`.
pub fn share_recovery_log_topic(offsets_log_topic: &str) -> String {
    format!("{offsets_log_topic}-share-state")
}

/// Makes sure the recovery-log topic exists with at least `partitions`
/// partitions (creating it, or growing it after the log it follows grew).
fn ensure_log_topic(admin: &Admin, log_topic: &str, partitions: i32) -> Result<(), WorkerError> {
    if partitions == 0 {
        // Nothing to follow yet (no share group was ever made).
        return Ok(());
    }
    // Records up to 16 MiB, in segments that hold them: the runtime's sizes.
    kshard_runtime::partitions::ensure_log_topic(admin, log_topic, partitions, &[])?;
    let have = admin.partition_count(log_topic)?.unwrap_or(0);
    if have < partitions {
        admin.add_partitions(log_topic, partitions).map_err(|source| WorkerError::Grow {
            topic: log_topic.to_owned(),
            to: format!(" to {partitions} partitions"),
            source: Box::new(source),
        })?;
    }
    Ok(())
}

/// More hot standbys than any cluster has members: a replica of every shard
/// on every member.
const EVERY_MEMBER: u32 = 1024;

/// The shard of partition `p` of `log`, read from `topic`.
pub(crate) fn shard(log: Log, topic: &str, shards: &Shards, p: i32) -> ShardSpec {
    let (id, sources) = (shard_id(log, p), vec![Source { topic: topic.to_owned(), partition: p, min_offset: 0 }]);
    let spec = match &shards.stores {
        Stores::Durable(_) => ShardSpec {
            hot_standbys: EVERY_MEMBER,
            ..ShardSpec::new(id, sources, RecoveryLog { topic: shards.log_topic.clone(), partition: p })
        },
        Stores::Memory(_) => ShardSpec::unlogged(id, sources),
    };
    ShardSpec {
        // Transactions of at most 200 ms: a restart loses nothing, and at most
        // that much reading is redone by a standby that takes over.
        max_txn_duration_ms: 200,
        // A batch that fails its checksum is counted and skipped, as
        // malformed records are: the rest of the partition is still read.
        refusals: kshard_runtime::Refusals::Skip,
        ..spec
    }
}

/// One life of the worker: until the shutdown (`Ok`) or a failure.
pub(crate) async fn run(reader: &OffsetsReader) -> Result<(), WorkerError> {
    let isolation = reader.kafka.isolation_for(kshard_runtime::Isolation::Uncommitted);
    match reader.log {
        Log::Offsets => run_log(reader, OffsetsLayout { isolation }).await,
        Log::ShareState => run_log(reader, ShareLayout { isolation }).await,
    }
}

/// The keys of `log`'s shards under `root`.
fn keys_of(log: Log, root: &str) -> Keys {
    match log {
        Log::Offsets => Keys::new(root),
        Log::ShareState => Keys::new(&format!("{}/share-state", root.trim_end_matches('/'))),
    }
}

async fn run_log<L: Layout>(reader: &OffsetsReader, layout: L) -> Result<(), WorkerError> {
    match reader.shards.cluster.clone() {
        None => {
            let member = MemberSpec { id: "local".into(), zone: "local".into(), shard_limit: u32::MAX, endpoint: None };
            // One process on an embedded keyspace: a lease that only a long
            // stall of this process could lose.
            let ttl = Duration::from_secs(120);
            let keys = keys_of(L::LOG, "/kshard/lag");
            run_on(reader, layout, Arc::new(MemoryKeyspace::new()), keys, member, ttl).await
        }
        Some(cluster) => {
            let ks = EtcdKeyspace::connect_with(&cluster.etcd, &cluster.access)
                .await
                .map_err(|source| WorkerError::Etcd { endpoints: cluster.etcd.join(","), source })?;
            let member = MemberSpec {
                id: cluster.member.clone(),
                zone: cluster.zone.clone(),
                shard_limit: u32::MAX,
                endpoint: cluster.endpoint.clone(),
            };
            let keys = keys_of(L::LOG, &cluster.prefix);
            run_on(reader, layout, Arc::new(ks), keys, member, cluster.lease_ttl).await
        }
    }
}

/// Runs `f` on tokio's blocking pool (Kafka's admin client blocks).
async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, WorkerError> + Send + 'static,
) -> Result<T, WorkerError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|_| WorkerError::Panicked("a recovery-log topic step panicked".into()))?
}

async fn run_on<K: Keyspace, L: Layout>(
    reader: &OffsetsReader,
    layout: L,
    ks: Arc<K>,
    keys: Keys,
    member: MemberSpec,
    lease_ttl: Duration,
) -> Result<(), WorkerError> {
    let shards = &reader.shards;
    let partitions = reader.monitor.log(L::LOG).positions().len() as i32;
    let log_topic = shards.log_topic.clone();
    let specs: Vec<ShardSpec> = (0..partitions).map(|p| shard(L::LOG, &reader.topic, shards, p)).collect();
    let mut app = LogShards::new(layout, Arc::clone(&reader.monitor), partitions, reader.shutdown.clone());
    app.in_memory = matches!(shards.stores, Stores::Memory(_));
    let app = Arc::new(app);
    // The recovery logs' topic is made and grown with it: durable shards only.
    let (log_topic_cluster, config) = match &shards.stores {
        Stores::Durable(data_dir) => {
            let (settings, timeout, topic) = (reader.kafka.clone(), reader.timeout, log_topic.clone());
            // The admin client (librdkafka's: threads and buffers) is
            // dropped once the topic is checked, before the replicas start,
            // and made again only when the log grows.
            blocking(move || {
                let admin = Admin::connect(&settings, timeout)?;
                ensure_log_topic(&admin, &topic, partitions)
            })
            .await?;
            info!(partitions, topic = %reader.topic, %log_topic, data_dir = %data_dir.display(), member = %member.id, "reading through durable shards");
            let config = NodeConfig::new(keys.clone(), member, lease_ttl, data_dir.clone(), reader.kafka.clone());
            (Some(reader.kafka.clone()), config)
        }
        Stores::Memory(disk) => {
            info!(partitions, topic = %reader.topic, "reading through shards kept in memory");
            let config = NodeConfig::new(keys.clone(), member, lease_ttl, std::env::temp_dir(), reader.kafka.clone());
            (None, NodeConfig { disk: Some(Arc::new(disk.clone())), ..config })
        }
    };
    let shared = NodeShared::default();
    shards.member.set(shared.clone(), config.member.id.clone());
    // Stops the grower when the member stops, or with the service.
    let member_stopped = reader.shutdown.child();
    // Also when this life ends otherwise (a panic, the task dropped): a
    // grower left running would keep the announced partitions to itself.
    let _stop_grower = crate::shutdown::TriggerOnDrop(member_stopped.clone());
    let grower = Grower {
        shutdown: member_stopped.clone(),
        topic: reader.topic.clone(),
        log_topic_cluster,
        brokers: Arc::clone(&reader.brokers),
        timeout: reader.timeout,
        shards: shards.clone(),
        app: Arc::clone(&app),
        ks: Arc::clone(&ks),
        keys: keys.clone(),
        runtime: tokio::runtime::Handle::current(),
        shared: shared.clone(),
        // A fail-over takes the lease's TTL; a primary missing much longer
        // than that is a problem.
        no_primary_grace: lease_ttl + Duration::from_secs(15),
        // A primary that dies stops its heartbeat a TTL before its standby
        // takes over: state older than STATE_OLD for a TTL more is frozen.
        state_grace: lease_ttl,
    };
    // Partitions the offsets topic gains later (the refresher tracks them
    // and says so) get a log partition and a shard.
    let announced = Arc::clone(&reader.new_partitions);
    let grower = tokio::task::spawn_blocking(move || {
        let announced = announced.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        grower.grow(&announced)
    });
    let root = keys.root().to_owned();
    let application = Arc::new(crate::log_app::LogApp(Arc::clone(&app))) as Arc<dyn Application>;
    let member = Member::new(ks, config, application).with_shards(specs).with_shared(shared);
    let served = member.serve(None, reader.shutdown.stopped()).await.map_err(|e| worker_error(e, &root));
    // The member stopped: so does the grower.
    member_stopped.trigger();
    let grown = grower.await.unwrap_or_else(|_| Err(WorkerError::Panicked("the partition grower panicked".into())));
    served.and(grown)
}

/// How the worker says why its member stopped.
fn worker_error(e: ServeError, root: &str) -> WorkerError {
    match e {
        ServeError::Taken { theirs, .. } => WorkerError::ShardTaken(format!(
            "shard {} under {root} reads {:?} into {}: another kshard uses these etcd keys (set etcd_prefix)",
            theirs.id,
            theirs.sources.iter().map(|s| format!("{}/{}", s.topic, s.partition)).collect::<Vec<_>>(),
            theirs.log_name()
        )),
        ServeError::Create(e) => WorkerError::Keyspace(e),
        ServeError::Node(e) => WorkerError::Node(e),
        ServeError::Http(e) => WorkerError::Runtime(e),
        other => WorkerError::Runtime(std::io::Error::other(other.to_string())),
    }
}

/// The condition ([`Event::Hold`]) of new partitions of `log` not given
/// shards yet.
fn unsharded(log: Log) -> String {
    match log {
        Log::Offsets => "new partitions without shards".to_owned(),
        Log::ShareState => format!("new partitions of {} without shards", log.topic()),
    }
}

/// Gives partitions the refresher announces a log partition and a shard, and
/// watches that every shard has a primary somewhere. Blocking (Kafka's admin
/// client blocks): run on tokio's blocking pool for the member's life.
struct Grower<K, L> {
    /// Triggered when the member stops, or with the service.
    shutdown: crate::shutdown::Shutdown,
    topic: String,
    /// The cluster of the recovery logs' topic, to make an admin client for
    /// when the log grows (durable shards).
    log_topic_cluster: Option<kshard_kafka::Client>,
    /// Makes the reader that asks whether a log that had no partitions may
    /// be read, when its first ones appear.
    brokers: Arc<dyn crate::brokers::Connector>,
    timeout: Duration,
    shards: Shards,
    app: Arc<LogShards<L>>,
    ks: Arc<K>,
    keys: Keys,
    runtime: tokio::runtime::Handle,
    shared: NodeShared,
    no_primary_grace: Duration,
    /// How long state older than [`crate::log_shards::STATE_OLD`] may be
    /// served before `/ready` is 503.
    state_grace: Duration,
}

impl<K: Keyspace, L: Layout> Grower<K, L> {
    /// Until the service or the member stops. Failures are retried (the
    /// announced partitions stay pending) and said on `/ready` meanwhile.
    fn grow(self, announced: &std::sync::mpsc::Receiver<Vec<i32>>) -> Result<(), WorkerError> {
        let mut pending = std::collections::BTreeSet::new();
        let mut fenced = std::collections::BTreeMap::new();
        let mut log_admin = None;
        let mut catch_up = crate::catch_up_log::CatchUpLog::new(&self.app.monitor, L::LOG);
        while !self.shutdown.is_set() {
            if !catch_up.announced {
                catch_up.report(&self.app.monitor);
            }
            let partitions = self.app.partitions.load(Ordering::Acquire);
            let cluster = self.shared.cluster();
            let (log, monitor) = (L::LOG, &self.app.monitor);
            crate::log_shards::watch_primaries(log, monitor, &cluster, partitions, self.no_primary_grace);
            crate::log_shards::watch_foreign_writers(log, monitor, &cluster, partitions, &mut fenced);
            let (statuses, progress) = (self.shared.statuses(), self.shared.progress());
            crate::log_shards::watch_standbys(log, monitor, &statuses, &progress, partitions, self.app.grace);
            crate::log_shards::watch_ages(log, monitor, &statuses, &progress, partitions, self.state_grace);
            pending.extend(announced.try_iter().flatten());
            if self.unreadable(&pending)? {
                // Left out, said; nothing more to give shards to.
                pending.clear();
            }
            if let Some(&last) = pending.iter().next_back() {
                match self.give_shards(&pending, last, &mut log_admin) {
                    Ok(()) => {
                        pending.clear();
                        // Done growing: the admin client goes until the next time.
                        log_admin = None;
                        self.app.monitor.step(Event::Release(unsharded(L::LOG)));
                        self.app.settle();
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, partitions = ?pending, "giving new partitions shards; retrying");
                        // Retried here, not a failure of the reader: a
                        // condition, at once a problem, released once done.
                        let why = format!("partitions {pending:?} of {} have no shard yet: {e}", self.topic);
                        let at = self.app.monitor.now();
                        let hold = Event::Hold { key: unsharded(L::LOG), why, grace: Duration::ZERO, at };
                        self.app.monitor.step(hold);
                        self.shutdown.sleep(Duration::from_secs(1));
                    }
                }
            }
            self.shutdown.sleep(Duration::from_millis(200));
        }
        Ok(())
    }

    /// Whether the first partitions of the share state's topic (it had
    /// none at start: no share group yet) may not be read: asked once, and
    /// said on `/ready` as at start ([`crate::log_reader::share_state_unreadable`]).
    fn unreadable(&self, pending: &std::collections::BTreeSet<i32>) -> Result<bool, WorkerError> {
        if L::LOG != Log::ShareState {
            return Ok(false);
        }
        if self.app.monitor.share_unreadable().is_some() {
            return Ok(true);
        }
        let Some(&first) = pending.iter().next() else { return Ok(false) };
        if self.app.partitions.load(Ordering::Acquire) > 0 {
            return Ok(false);
        }
        match crate::log_reader::refusal(&*self.brokers, &self.topic, (first, None), self.timeout, &self.shutdown)? {
            Some(e) => {
                crate::log_reader::share_state_unreadable(&self.app.monitor, &self.topic, &e);
                Ok(true)
            }
            None => Ok(false),
        }
    }

    /// Gives `partitions` shards, growing the recovery logs' topic to
    /// `last` + 1 partitions first with `log_admin` (made at the first try,
    /// kept through the retries: a librdkafka client costs threads).
    fn give_shards(
        &self,
        partitions: &std::collections::BTreeSet<i32>,
        last: i32,
        log_admin: &mut Option<Admin>,
    ) -> Result<(), WorkerError> {
        // Created with the first partitions of a log that had none.
        if let Some(kafka) = &self.log_topic_cluster {
            if log_admin.is_none() {
                *log_admin = Some(Admin::connect(kafka, self.timeout)?);
            }
            if let Some(admin) = log_admin.as_ref() {
                ensure_log_topic(admin, &self.shards.log_topic, last + 1)?;
            }
        }
        self.app.partitions.fetch_max(last + 1, Ordering::AcqRel);
        for &p in partitions {
            let spec = shard(L::LOG, &self.topic, &self.shards, p);
            self.runtime.block_on(kshard_runtime::create_shard(&*self.ks, &self.keys, &spec))?;
            info!(partition = p, shard = %spec.id, topic = %self.topic, "a new partition gets a shard");
        }
        Ok(())
    }
}
