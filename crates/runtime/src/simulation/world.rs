//! The simulated cluster: members running `node::run` over one embedded
//! keyspace and one in-memory log, on the test's clock. Each incarnation of
//! a member reaches the keyspace, the log and its disk through gates of its
//! own ([`kshard_runtime::faults`]); a crash closes them for good (its
//! leftover tasks can touch nothing) and the next incarnation finds the disk
//! as the last one left it.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use kshard_kafka::Client;
use tokio::task::JoinHandle;

use super::failure::Unsettled;
use super::reference::{Chain, Recording};
use super::{Contents, Input, Outputs, Reference};
use crate::faults::{Gate, GatedDisk, GatedKeyspace, GatedPartitions, Passage};
use crate::keyspace::MemoryKeyspace;
use crate::keyspace::{Keyspace, LeaseId, Result as KsResult, Snapshot, Txn, TxnResponse, WatchStream};
use crate::partitions::Partitions;
use crate::{AssignmentValue, Hints, Keys, MemberSpec, ShardSpec};
use crate::{MemoryDisk, ReplicaCode, Store};
use crate::{NodeConfig, NodeError, NodeShared};

/// The lease of every member.
pub(super) const TTL: Duration = Duration::from_secs(3);

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

pub(super) struct Member {
    pub(super) id: String,
    zone: String,
    disk: MemoryDisk,
    life: Option<Life>,
}

/// The embedded keyspace a network away: every call takes [`LATENCY`] of the
/// clock before it is made, so a member paused or cut off can be caught with
/// a call in flight (between the allocator's read and its write, say).
#[derive(Debug, Clone)]
pub(super) struct Distant(MemoryKeyspace);

pub(super) const LATENCY: Duration = Duration::from_millis(3);

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
pub(super) enum Link {
    Keyspace,
    Log,
    Writes,
    /// Everything (a paused process).
    All,
}

pub(super) struct World {
    pub(super) ks: MemoryKeyspace,
    /// Every member's way to the keyspace passes it too: closed, the
    /// keyspace is down for all.
    pub(super) keyspace_for_all: Gate,
    pub(super) log: Recording,
    pub(super) keys: Keys,
    pub(super) shards: Vec<ShardSpec>,
    pub(super) members: Vec<Member>,
    app: super::MakeApp,
    input: Arc<[Input]>,
    /// Records of `input` appended so far.
    produced: usize,
}

impl World {
    pub(super) async fn new(members: usize, shards: Vec<ShardSpec>, app: super::MakeApp, input: Arc<[Input]>) -> World {
        let ks = MemoryKeyspace::new();
        let keys = Keys::new("/sim");
        for spec in &shards {
            crate::create_shard(&ks, &keys, spec).await.expect("the embedded keyspace takes a shard");
        }
        let members = (0..members)
            .map(|i| Member {
                id: format!("m{i}"),
                zone: format!("z{}", i % 2),
                disk: MemoryDisk::default(),
                life: None,
            })
            .collect();
        let mut world = World {
            ks,
            keyspace_for_all: Gate::default(),
            log: Recording::default(),
            keys,
            shards,
            members,
            app,
            input,
            produced: 0,
        };
        for m in 0..world.members.len() {
            world.start(m);
        }
        world
    }

    /// Starts member `m` (if it is not running).
    pub(super) fn start(&mut self, m: usize) {
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
            kafka: Client::to_brokers("127.0.0.1:1"),
            partitions: Some(Arc::new(partitions) as Arc<dyn Partitions>),
        };
        let shared = NodeShared::default();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(crate::node::run(Arc::new(ks), config, (self.app)(), shared.clone(), async move {
            let _ = stopped.await;
        }));
        member.life = Some(Life { keyspace, log, writes, disk, shared, stop: Some(stop), task });
    }

    /// Kills member `m` at once (kill -9): nothing it does from now reaches
    /// anything; its disk stays as it is.
    pub(super) fn crash(&mut self, m: usize) {
        if let Some(life) = self.members[m].life.take() {
            for gate in [&life.keyspace, &life.log, &life.writes, &life.disk] {
                gate.set(Passage::Closed);
            }
            life.task.abort();
        }
    }

    /// Stops member `m` cleanly (it tears down and leaves).
    pub(super) async fn stop(&mut self, m: usize) {
        if let Some(mut life) = self.members[m].life.take() {
            if let Some(stop) = life.stop.take() {
                let _ = stop.send(());
            }
            let _ = life.task.await;
        }
    }

    /// Sets `link` of member `m`, if it runs.
    pub(super) fn set(&self, m: usize, link: Link, passage: Passage) {
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
    pub(super) fn heal(&self) {
        self.keyspace_for_all.set(Passage::Open);
        self.log.log.set_available(true);
        for m in 0..self.members.len() {
            self.set(m, Link::All, Passage::Open);
            self.set(m, Link::Writes, Passage::Open);
        }
    }

    /// Appends the next `n` records of the input (fewer when it runs out).
    pub(super) fn produce(&mut self, n: usize) {
        let end = (self.produced + n).min(self.input.len());
        for r in &self.input[self.produced..end] {
            let key = r.key.as_deref().unwrap_or_default();
            self.log.log.append(&r.topic, r.partition, key, r.value.as_deref()).expect("the memory log takes input");
        }
        self.produced = end;
    }

    /// Records of the input not appended yet.
    pub(super) fn unproduced(&self) -> usize {
        self.input.len() - self.produced
    }

    /// Retention deletes shard `s`'s log before `offset`, but not past its
    /// newest snapshot (what is needed to rebuild the shard stays: a cut
    /// past it loses the shard's state, which no runtime can help).
    pub(super) async fn cut_log(&self, s: usize, offset: i64) {
        let key = self.keys.hints(&self.shards[s].id);
        let hints = self.ks.get_prefix(&key).await.expect("the embedded keyspace reads");
        let newest =
            hints.kvs.iter().find(|kv| kv.key == key).and_then(|kv| serde_json::from_slice::<Hints>(&kv.value).ok());
        if let Some(hints) = newest {
            let log = self.recovery_log(s);
            let _ = self.log.log.delete_before(&log.topic, log.partition, offset.min(hints.current.offset)).await;
        }
    }

    /// Shard `s`'s log's end.
    pub(super) fn log_end(&self, s: usize) -> i64 {
        let log = self.recovery_log(s);
        self.log.end(&log.topic, log.partition)
    }

    /// Every record shard `s`'s log holds: (offset, value).
    fn log_records(&self, s: usize) -> Vec<(i64, Vec<u8>)> {
        let log = self.recovery_log(s);
        self.log.records(&log.topic, log.partition)
    }

    /// The replicas' statuses as their members hold them: (member, code).
    pub(super) fn statuses(&self, s: usize) -> Vec<(usize, ReplicaCode)> {
        let id = &self.shards[s].id;
        (0..self.members.len())
            .filter_map(|m| {
                let life = self.members[m].life.as_ref()?;
                Some((m, *life.shared.statuses().get(id)?))
            })
            .collect()
    }

    fn store_name(&self, s: usize) -> String {
        crate::recovery_log::replica::store_name(&self.shards[s])
    }

    /// Shard `s`'s recovery log: the simulated application's shards all
    /// have one (their standbys and fail-overs are what is checked).
    fn recovery_log(&self, s: usize) -> &crate::model::RecoveryLog {
        self.shards[s].recovery_log.as_ref().expect("the simulation's shards have recovery logs")
    }

    /// What breaks an invariant now, if anything (the outputs checked
    /// against `reference`'s, when there is one).
    pub(super) async fn broken(&self, reference: Option<&Reference>, outputs: &[&str]) -> Option<String> {
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
            let chain = Chain::play(&self.log_records(s));
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
        }
        // What a reader of committed records sees of the outputs: each key's
        // records in each partition, in order, as far as the run without
        // faults went — none twice, none missing before the last.
        let reference = reference?;
        for (at, published) in self.read_outputs(outputs) {
            let want = reference.outputs.get(&at).map_or(&[][..], Vec::as_slice);
            if !want.starts_with(&published) {
                let (topic, partition, key) = &at;
                return Some(format!(
                    "{topic}/{partition} key {:?}: published {} records, not the first of the {} without faults ({:?} against {:?})",
                    String::from_utf8_lossy(key.as_deref().unwrap_or_default()),
                    published.len(),
                    want.len(),
                    published.iter().zip(want).find(|(p, w)| p != w).map(|(p, _)| p),
                    published.iter().zip(want).find(|(p, w)| p != w).map(|(_, w)| w),
                ));
            }
        }
        None
    }

    /// Every committed record of `topics`, by (topic, partition, key), in order.
    pub(super) fn read_outputs(&self, topics: &[&str]) -> Outputs {
        let mut out = Outputs::new();
        for topic in topics {
            for partition in self.log.log.partitions_of(topic) {
                for (_, key, value) in self.log.log.read_committed(topic, partition) {
                    out.entry(((*topic).to_owned(), partition, key)).or_default().push(value);
                }
            }
        }
        out
    }

    /// Each shard's store as its one PRIMARY holds it (an error names a
    /// shard without exactly one).
    pub(super) fn primaries_stores(&self) -> Result<Vec<Contents>, Unsettled> {
        (0..self.shards.len())
            .map(|s| {
                let name = self.store_name(s);
                let statuses = self.statuses(s);
                let primaries: Vec<usize> =
                    statuses.iter().filter(|(_, c)| *c == ReplicaCode::Primary).map(|(m, _)| *m).collect();
                let [primary] = primaries[..] else {
                    return Err(Unsettled::Primaries { store: name, primaries, statuses: format!("{statuses:?}") });
                };
                let store_of = |why: String| Unsettled::Store { store: name.clone(), why };
                let store = self.members[primary].disk.store(&name).ok_or_else(|| store_of("none".into()))?;
                Ok(store.scan(None, usize::MAX).map_err(|e| store_of(e.to_string()))?.into_iter().collect())
            })
            .collect()
    }

    /// Whether every shard has one PRIMARY whose store, and the log's
    /// chain, hold what the run without faults ended with, and the outputs
    /// are that run's.
    pub(super) fn settled(&self, reference: &Reference, outputs: &[&str]) -> Result<(), Unsettled> {
        let stores = self.primaries_stores()?;
        for (s, store) in stores.iter().enumerate() {
            let name = self.store_name(s);
            if *store != reference.stores[s] {
                return Err(Unsettled::PrimaryHolds {
                    store: name,
                    difference: difference(store, &reference.stores[s]),
                });
            }
            let chain = Chain::play(&self.log_records(s));
            let logged = chain.last.map(|c| c.data).unwrap_or_default();
            if logged != reference.stores[s] {
                let difference = difference(&logged, &reference.stores[s]);
                return Err(Unsettled::ChainHolds { store: name, difference });
            }
        }
        let published = self.read_outputs(outputs);
        if published != reference.outputs {
            let differ = reference.outputs.iter().find(|(k, v)| published.get(*k) != Some(*v));
            return Err(Unsettled::Outputs { first: format!("{differ:?}") });
        }
        Ok(())
    }
}

/// The first entry where `got` and `want` differ, said.
fn difference(got: &Contents, want: &Contents) -> String {
    let key = got.keys().chain(want.keys()).find(|k| got.get(*k) != want.get(*k));
    match key {
        Some(k) => format!(
            "{}={:?} where the run without faults has {:?} ({} keys against {})",
            String::from_utf8_lossy(k),
            got.get(k),
            want.get(k),
            got.len(),
            want.len()
        ),
        None => "the same".into(),
    }
}
