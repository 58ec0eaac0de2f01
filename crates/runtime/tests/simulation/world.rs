//! The simulated cluster: members running `node::run` over one embedded
//! keyspace and one in-memory log, on the test's clock. Each incarnation of
//! a member reaches the keyspace, the log and its disk through gates of its
//! own ([`kshard_runtime::faults`]); a crash closes them for good (its
//! leftover tasks can touch nothing) and the next incarnation finds the disk
//! as the last one left it.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use kshard_kafka::ClientSettings;
use kshard_runtime::MemoryDisk;
use kshard_runtime::ReplicaCode;
use kshard_runtime::Store;
use kshard_runtime::faults::{Gate, GatedDisk, GatedKeyspace, GatedPartitions, Passage};
use kshard_runtime::keyspace::MemoryKeyspace;
use kshard_runtime::keyspace::{Keyspace, LeaseId, Result as KsResult, Snapshot, Txn, TxnResponse, WatchStream};
use kshard_runtime::partitions::Partitions;
use kshard_runtime::{AssignmentValue, Hints, Keys, MemberSpec, RecoveryLog, ShardSpec, Source};
use kshard_runtime::{NodeConfig, NodeError, NodeShared};
use tokio::task::JoinHandle;

use super::reference::{Chain, Recording};
use super::sum::{SUMS, Sum, decode};

/// The lease of every member.
pub(crate) const TTL: Duration = Duration::from_secs(3);
pub(crate) const SOURCE: &str = "events";
pub(crate) const LOG: &str = "log";

/// One run of a member process.
struct Life {
    keyspace: Gate,
    log: Gate,
    writes: Gate,
    disk: Gate,
    shared: NodeShared,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: JoinHandle<Result<(), NodeError>>,
}

pub(crate) struct Member {
    pub(crate) id: String,
    zone: String,
    disk: MemoryDisk,
    life: Option<Life>,
}

/// The embedded keyspace a network away: every call takes [`LATENCY`] of the
/// clock before it is made, so a member paused or cut off can be caught with
/// a call in flight (between the allocator's read and its write, say).
#[derive(Debug, Clone)]
pub(crate) struct Distant(MemoryKeyspace);

pub(crate) const LATENCY: Duration = Duration::from_millis(3);

impl Keyspace for Distant {
    async fn get_prefix(&self, prefix: &str) -> KsResult<Snapshot> {
        tokio::time::sleep(LATENCY).await;
        self.0.get_prefix(prefix).await
    }
    async fn txn(&self, txn: Txn) -> KsResult<TxnResponse> {
        tokio::time::sleep(LATENCY).await;
        self.0.txn(txn).await
    }
    async fn grant(&self, ttl: Duration) -> KsResult<LeaseId> {
        tokio::time::sleep(LATENCY).await;
        self.0.grant(ttl).await
    }
    async fn keep_alive(&self, lease: LeaseId) -> KsResult<()> {
        tokio::time::sleep(LATENCY).await;
        self.0.keep_alive(lease).await
    }
    async fn revoke(&self, lease: LeaseId) -> KsResult<()> {
        tokio::time::sleep(LATENCY).await;
        self.0.revoke(lease).await
    }
    async fn watch(&self, prefix: &str, from_revision: i64) -> KsResult<WatchStream> {
        tokio::time::sleep(LATENCY).await;
        self.0.watch(prefix, from_revision).await
    }
}

/// Which of a member's passages a fault acts on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Link {
    Keyspace,
    Log,
    Writes,
    /// Everything (a paused process).
    All,
}

pub(crate) struct World {
    pub(crate) ks: MemoryKeyspace,
    /// Every member's way to the keyspace passes it too: closed, the
    /// keyspace is down for all.
    pub(crate) keyspace_for_all: Gate,
    pub(crate) log: Recording,
    pub(crate) keys: Keys,
    pub(crate) shards: Vec<ShardSpec>,
    pub(crate) members: Vec<Member>,
    /// Each shard's sums, as produced.
    pub(crate) expected: Vec<BTreeMap<Vec<u8>, u64>>,
    /// Each shard's running sums per key, in the order produced: what its
    /// published updates must be.
    pub(crate) running: Vec<BTreeMap<Vec<u8>, Vec<u64>>>,
    next_value: u64,
}

impl World {
    pub(crate) async fn new(members: usize, shards: usize) -> World {
        let ks = MemoryKeyspace::new();
        let keys = Keys::new("/sim");
        let shards: Vec<ShardSpec> = (0..shards)
            .map(|i| ShardSpec {
                hot_standbys: 1,
                max_txn_duration_ms: 50,
                // Snapshots (and the log deleted before the previous one)
                // every few transactions.
                snapshot_min_bytes: 300,
                snapshot_factor: 2,
                ..ShardSpec::new(
                    format!("sum-{i}"),
                    vec![Source { topic: SOURCE.into(), partition: i as i32, min_offset: 0 }],
                    RecoveryLog { topic: LOG.into(), partition: i as i32 },
                )
            })
            .collect();
        for spec in &shards {
            kshard_runtime::create_shard(&ks, &keys, spec).await.expect("the embedded keyspace takes a shard");
        }
        let members = (0..members)
            .map(|i| Member {
                id: format!("m{i}"),
                zone: format!("z{}", i % 2),
                disk: MemoryDisk::default(),
                life: None,
            })
            .collect();
        let expected = vec![BTreeMap::new(); shards.len()];
        let running = vec![BTreeMap::new(); shards.len()];
        let mut world = World {
            ks,
            keyspace_for_all: Gate::default(),
            log: Recording::default(),
            keys,
            shards,
            members,
            expected,
            running,
            next_value: 1,
        };
        for m in 0..world.members.len() {
            world.start(m);
        }
        world
    }

    /// Starts member `m` (if it is not running).
    pub(crate) fn start(&mut self, m: usize) {
        let member = &mut self.members[m];
        if member.life.is_some() {
            return;
        }
        let (keyspace, log, writes, disk) = (Gate::default(), Gate::default(), Gate::default(), Gate::default());
        let ks = GatedKeyspace::new(
            GatedKeyspace::new(Distant(self.ks.clone()), self.keyspace_for_all.clone()),
            keyspace.clone(),
        );
        let partitions = GatedPartitions::new(Arc::new(self.log.clone()), log.clone(), writes.clone());
        let config = NodeConfig {
            keys: self.keys.clone(),
            member: MemberSpec { id: member.id.clone(), zone: member.zone.clone(), shard_limit: 10, endpoint: None },
            lease_ttl: TTL,
            data_dir: "/nonexistent".into(),
            disk: Some(Arc::new(GatedDisk::new(Arc::new(member.disk.clone()), disk.clone()))),
            settings: ClientSettings::new("127.0.0.1:1"),
            partitions: Some(Arc::new(partitions) as Arc<dyn Partitions>),
        };
        let shared = NodeShared::default();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let task =
            tokio::spawn(kshard_runtime::run_node(Arc::new(ks), config, Arc::new(Sum), shared.clone(), async move {
                let _ = stopped.await;
            }));
        member.life = Some(Life { keyspace, log, writes, disk, shared, stop: Some(stop), task });
    }

    /// Kills member `m` at once (kill -9): nothing it does from now reaches
    /// anything; its disk stays as it is.
    pub(crate) fn crash(&mut self, m: usize) {
        if let Some(life) = self.members[m].life.take() {
            for gate in [&life.keyspace, &life.log, &life.writes, &life.disk] {
                gate.set(Passage::Closed);
            }
            life.task.abort();
        }
    }

    /// Stops member `m` cleanly (it tears down and leaves).
    pub(crate) async fn stop(&mut self, m: usize) {
        if let Some(mut life) = self.members[m].life.take() {
            if let Some(stop) = life.stop.take() {
                let _ = stop.send(());
            }
            let _ = life.task.await;
        }
    }

    /// Sets `link` of member `m`, if it runs.
    pub(crate) fn set(&self, m: usize, link: Link, passage: Passage) {
        let Some(life) = &self.members[m].life else { return };
        let gates = match link {
            Link::Keyspace => vec![&life.keyspace],
            Link::Log => vec![&life.log],
            Link::Writes => vec![&life.writes],
            Link::All => vec![&life.keyspace, &life.log],
        };
        for gate in gates {
            gate.set(passage);
        }
    }

    /// Opens every running member's links, and the keyspace and log for all.
    pub(crate) fn heal(&self) {
        self.keyspace_for_all.set(Passage::Open);
        self.log.log.set_available(true);
        for m in 0..self.members.len() {
            self.set(m, Link::All, Passage::Open);
            self.set(m, Link::Writes, Passage::Open);
        }
    }

    /// Appends `n` values to shard `s`'s source.
    pub(crate) fn produce(&mut self, s: usize, n: u64) {
        for _ in 0..n {
            let value = self.next_value;
            self.next_value += 1;
            let key = format!("k{}", value % 3).into_bytes();
            self.log.log.append(SOURCE, s as i32, &key, Some(&value.to_be_bytes())).expect("the source takes values");
            let sum = self.expected[s].entry(key.clone()).or_default();
            *sum += value;
            self.running[s].entry(key).or_default().push(*sum);
        }
    }

    /// Retention deletes shard `s`'s log before `offset`, but not past its
    /// newest snapshot (what is needed to rebuild the shard stays: a cut
    /// past it loses the shard's state, which no runtime can help).
    pub(crate) async fn cut_log(&self, s: usize, offset: i64) {
        let key = self.keys.hints(&self.shards[s].id);
        let hints = self.ks.get_prefix(&key).await.expect("the embedded keyspace reads");
        let newest =
            hints.kvs.iter().find(|kv| kv.key == key).and_then(|kv| serde_json::from_slice::<Hints>(&kv.value).ok());
        if let Some(hints) = newest {
            let log = &self.shards[s].recovery_log;
            let _ = self.log.log.delete_before(&log.topic, log.partition, offset.min(hints.current.offset)).await;
        }
    }

    /// Each shard's log's end.
    pub(crate) fn log_end(&self, s: usize) -> i64 {
        self.log.end(LOG, self.shards[s].recovery_log.partition)
    }

    /// The replicas' statuses as their members hold them: (member, code).
    pub(crate) fn statuses(&self, s: usize) -> Vec<(usize, ReplicaCode)> {
        let id = &self.shards[s].id;
        (0..self.members.len())
            .filter_map(|m| {
                let life = self.members[m].life.as_ref()?;
                Some((m, *life.shared.statuses().get(id)?))
            })
            .collect()
    }

    fn store_name(&self, s: usize) -> String {
        let spec = &self.shards[s];
        format!("{}@{}-{}", spec.id, spec.recovery_log.topic, spec.recovery_log.partition)
    }

    /// What breaks an invariant now, if anything.
    pub(crate) async fn broken(&self) -> Option<String> {
        // At most one slot-0 assignment per shard.
        let assignments = self.ks.get_prefix(&self.keys.assignments()).await.expect("the embedded keyspace reads");
        let mut primaries: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for kv in &assignments.kvs {
            let (Ok(a), Ok(v)) =
                (self.keys.parse_assignment(&kv.key), serde_json::from_slice::<AssignmentValue>(&kv.value))
            else {
                return Some(format!("an assignment that does not parse: {}", kv.key));
            };
            if v.slot == 0 {
                primaries.entry(a.shard).or_default().push(a.member);
            }
        }
        if let Some((shard, members)) = primaries.iter().find(|(_, m)| m.len() > 1) {
            return Some(format!("{shard} has {} slot-0 assignments: {members:?}", members.len()));
        }
        // Every store on every disk is a state of its log's one chain; the
        // store of a replica serving (STANDBY or PRIMARY) holds all of it.
        for s in 0..self.shards.len() {
            let chain = Chain::play(&self.log.records(LOG, self.shards[s].recovery_log.partition));
            let name = self.store_name(s);
            let statuses = self.statuses(s);
            for (m, member) in self.members.iter().enumerate() {
                let Some(store) = member.disk.store(&name) else { continue };
                let Some(checkpoint) = store.checkpoint().expect("a memory store") else { continue };
                let serving =
                    statuses.iter().any(|(sm, c)| *sm == m && matches!(c, ReplicaCode::Standby | ReplicaCode::Primary));
                if let Some(why) = chain.disagrees(&checkpoint, &store, serving) {
                    return Some(format!("{}'s store of {name} ({statuses:?}): {why}", member.id));
                }
            }
            // What a reader of committed records sees of the published sums:
            // each key's running sums, in order, none twice, none missing.
            for (key, published) in self.published(s) {
                let running = self.running[s].get(&key).map_or(&[][..], Vec::as_slice);
                if !running.starts_with(&published) {
                    let key = String::from_utf8_lossy(&key);
                    return Some(format!("shard {s} published {key}'s sums {published:?}, produced {running:?}"));
                }
            }
        }
        None
    }

    /// The sums shard `s` published, per key in order, as a reader of
    /// committed records reads them.
    pub(crate) fn published(&self, s: usize) -> BTreeMap<Vec<u8>, Vec<u64>> {
        let mut out: BTreeMap<Vec<u8>, Vec<u64>> = BTreeMap::new();
        for (_, key, value) in self.log.log.read_committed(SUMS, s as i32) {
            let (Some(key), Some(sum)) = (key, value.as_deref().and_then(decode)) else { continue };
            out.entry(key).or_default().push(sum);
        }
        out
    }

    /// True when every shard has one PRIMARY whose store holds every value
    /// produced, counted once, and the log's chain says the same.
    pub(crate) fn settled(&self) -> Result<(), String> {
        for s in 0..self.shards.len() {
            let name = self.store_name(s);
            let statuses = self.statuses(s);
            let primaries: Vec<usize> =
                statuses.iter().filter(|(_, c)| *c == ReplicaCode::Primary).map(|(m, _)| *m).collect();
            let [primary] = primaries[..] else {
                return Err(format!("{name}: primaries {primaries:?} ({statuses:?})"));
            };
            let store = self.members[primary].disk.store(&name).ok_or("the primary has no store")?;
            let sums: BTreeMap<Vec<u8>, u64> = store
                .scan(None, usize::MAX)
                .map_err(|e| e.to_string())?
                .into_iter()
                .filter_map(|(k, v)| Some((k, decode(&v)?)))
                .collect();
            if sums != self.expected[s] {
                return Err(format!("{name}: the primary holds {sums:?}, produced {:?}", self.expected[s]));
            }
            let chain = Chain::play(&self.log.records(LOG, self.shards[s].recovery_log.partition));
            let logged = chain.last.map(|c| c.data).unwrap_or_default();
            let logged: BTreeMap<Vec<u8>, u64> =
                logged.into_iter().filter_map(|(k, v)| Some((k, decode(&v)?))).collect();
            if logged != self.expected[s] {
                return Err(format!("{name}: the log's chain holds {logged:?}, produced {:?}", self.expected[s]));
            }
            if self.published(s) != self.running[s] {
                return Err(format!("{name}: published {:?}, produced {:?}", self.published(s), self.running[s]));
            }
        }
        Ok(())
    }
}
