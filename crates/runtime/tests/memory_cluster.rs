//! Two members over the embedded keyspace and an in-memory log
//! ([`MemoryPartitions`]): no broker, no etcd. A shard summing its source's
//! values runs as a primary and a hot standby; the primary's member is
//! stopped mid-stream and the standby takes over. The recovery log, played
//! from its start into a fresh store, holds every record's value counted
//! exactly once. What the next issue's simulation builds on: the runtime
//! runs whole on the [`Partitions`] seam. And a replica whose store fails
//! (through the member's [`Disk`]) is FAILED and retried with its backoff.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::{Duration, Instant};

use kshard_kafka::{ClientSettings, Isolation};
use kshard_runtime::ReplicaCode;
use kshard_runtime::keyspace::MemoryKeyspace;
use kshard_runtime::partitions::MemoryPartitions;
use kshard_runtime::partitions::Partitions;
use kshard_runtime::recovery_log::Mutation;
use kshard_runtime::recovery_log::Player;
use kshard_runtime::recovery_log::{LogClients, play_to_head};
use kshard_runtime::{Checkpoint, Entries, MemoryStore, Store, StoreError};
use kshard_runtime::{Disk, MemoryDisk};
use kshard_runtime::{Keys, MemberSpec, RecoveryLog, ShardSpec, Source};
use kshard_runtime::{NodeConfig, NodeError, NodeShared};

/// The simulation's application: each key's values summed.
#[path = "simulation/sum.rs"]
mod sum;
use sum::{Sum, decode};

fn produce(log: &MemoryPartitions, from: u64, to: u64, expected: &mut BTreeMap<Vec<u8>, u64>) {
    for i in from..to {
        let key = format!("k{}", i % 5).into_bytes();
        log.append("events", 0, &key, Some(&i.to_be_bytes())).expect("append");
        *expected.entry(key).or_default() += i;
    }
}

/// The sums the recovery log holds, played from its start into a fresh store.
fn sums_in_the_log(log: &MemoryPartitions) -> BTreeMap<Vec<u8>, u64> {
    let reader = log.reader("log", &[(0, None)], 256, Isolation::Committed).expect("reader");
    let clients = LogClients { topic: "log", partition: 0, reader: reader.as_ref(), partitions: log, writer: None };
    let mut player = Player::open(MemoryStore::default()).expect("player");
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("tokio");
    runtime.block_on(play_to_head(&clients, &mut player, Duration::from_secs(10))).expect("plays");
    let entries = player.store().scan(None, usize::MAX).expect("scan");
    entries.into_iter().filter_map(|(k, v)| Some((k, decode(&v)?))).collect()
}

fn eventually(what: &str, mut check: impl FnMut() -> Result<(), String>) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        match check() {
            Ok(()) => return,
            Err(e) if Instant::now() > deadline => panic!("{what}: {e}"),
            Err(_) => std::thread::sleep(Duration::from_millis(100)),
        }
    }
}

/// The shard the tests run: each key's values of `events` summed.
fn sum_shard(hot_standbys: u32) -> ShardSpec {
    ShardSpec {
        hot_standbys,
        max_txn_duration_ms: 50,
        ..ShardSpec::new(
            "sum-0",
            vec![Source { topic: "events".into(), partition: 0, min_offset: 0 }],
            RecoveryLog { topic: "log".into(), partition: 0 },
        )
    }
}

/// A running member: what it shares, how to stop it, its task.
type Running = (NodeShared, tokio::sync::oneshot::Sender<()>, tokio::task::JoinHandle<Result<(), NodeError>>);

/// Starts member `id` on the memory log, its stores in `data_dir` or on `disk`.
fn start_member(
    runtime: &tokio::runtime::Runtime,
    ks: &Arc<MemoryKeyspace>,
    keys: &Keys,
    log: &MemoryPartitions,
    id: &str,
    data_dir: std::path::PathBuf,
    disk: Option<Arc<dyn Disk>>,
) -> Running {
    let config = NodeConfig {
        keys: keys.clone(),
        member: MemberSpec { id: id.into(), zone: id.into(), shard_limit: 10, endpoint: None },
        lease_ttl: Duration::from_secs(2),
        data_dir,
        disk,
        kafka: ClientSettings::new("127.0.0.1:1").into(),
        partitions: Some(Arc::new(log.clone()) as Arc<dyn Partitions>),
    };
    let shared = NodeShared::default();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let task = runtime.spawn(kshard_runtime::internals::run_node(
        Arc::clone(ks),
        config,
        Arc::new(Sum),
        shared.clone(),
        async move {
            let _ = stopped.await;
        },
    ));
    (shared, stop, task)
}

#[test]
fn a_standby_takes_over_on_the_memory_log_and_every_value_counts_once() {
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("tokio");
    let log = MemoryPartitions::default();
    let ks = Arc::new(MemoryKeyspace::new());
    let keys = Keys::new("/memory-cluster");
    let spec = sum_shard(1);
    runtime.block_on(kshard_runtime::create_shard(&*ks, &keys, &spec)).expect("the shard");
    let dir = std::env::temp_dir().join(format!("kshard-memory-cluster-{}", std::process::id()));
    let mut expected = BTreeMap::new();
    produce(&log, 0, 200, &mut expected);

    let mut members = Vec::new();
    for id in ["m1", "m2"] {
        let (shared, stop, task) = start_member(&runtime, &ks, &keys, &log, id, dir.join(id), None);
        members.push((id, shared, stop, task));
    }
    let status = |shared: &NodeShared| shared.statuses().get("sum-0").copied();
    eventually("a primary and a standby, every value in the log", || {
        let got: Vec<_> = members.iter().map(|(_, s, _, _)| status(s)).collect();
        let roles = got.contains(&Some(ReplicaCode::Primary)) && got.contains(&Some(ReplicaCode::Standby));
        let sums = sums_in_the_log(&log);
        if roles && sums == expected { Ok(()) } else { Err(format!("{got:?}, {sums:?}")) }
    });

    // The primary's member stops mid-stream: values keep coming while it
    // consumes them, and it stops once some of them are in the log, with
    // the producer still going (so some are in flight); the standby takes
    // over.
    let primary = members.iter().position(|(_, s, _, _)| status(s) == Some(ReplicaCode::Primary)).expect("a primary");
    let (_, _, stop, task) = members.remove(primary);
    let before = expected.clone();
    let done = Arc::new(AtomicBool::new(false));
    let producer = {
        let (log, done) = (log.clone(), Arc::clone(&done));
        // Values until told to stop: in flight whenever the primary stops.
        std::thread::spawn(move || {
            let mut more = BTreeMap::new();
            let mut next = 200;
            while !done.load(Ordering::Acquire) {
                produce(&log, next, next + 100, &mut more);
                next += 100;
                std::thread::sleep(Duration::from_millis(2));
            }
            more
        })
    };
    eventually("the primary consuming the new values", || {
        let sums = sums_in_the_log(&log);
        if sums != before { Ok(()) } else { Err("none of them in the log yet".to_owned()) }
    });
    let _ = stop.send(());
    runtime.block_on(task).expect("joins").expect("stops cleanly");
    // More while the standby takes over, then no more.
    std::thread::sleep(Duration::from_millis(200));
    done.store(true, Ordering::Release);
    for (key, sum) in producer.join().expect("the producer") {
        *expected.entry(key).or_default() += sum;
    }
    let (_, survivor, _, _) = &members[0];
    eventually("the standby is primary and counted every value once", || {
        let sums = sums_in_the_log(&log);
        if status(survivor) == Some(ReplicaCode::Primary) && sums == expected {
            Ok(())
        } else {
            Err(format!("{:?}, {sums:?} (want {expected:?})", status(survivor)))
        }
    });
    for (_, _, stop, task) in members {
        let _ = stop.send(());
        runtime.block_on(task).expect("joins").expect("stops cleanly");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// A disk whose stores fail their next `failures` applies, between them.
#[derive(Debug)]
struct FlakyDisk {
    inner: MemoryDisk,
    failures: Arc<AtomicU32>,
}

impl Disk for FlakyDisk {
    fn open(&self, name: &str, fresh: bool) -> Result<(Box<dyn Store>, Option<String>), StoreError> {
        let (inner, replaced) = self.inner.open(name, fresh)?;
        Ok((Box::new(FlakyStore { inner, failures: Arc::clone(&self.failures) }), replaced))
    }
}

struct FlakyStore {
    inner: Box<dyn Store>,
    failures: Arc<AtomicU32>,
}

impl Store for FlakyStore {
    fn apply(&mut self, mutations: &[Mutation], checkpoint: &Checkpoint) -> Result<(), StoreError> {
        if self.failures.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1)).is_ok() {
            return Err(StoreError { step: "applying a transaction", message: "injected fault".into() });
        }
        self.inner.apply(mutations, checkpoint)
    }

    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>, StoreError> {
        self.inner.get(key)
    }

    fn checkpoint(&self) -> Result<Option<Checkpoint>, StoreError> {
        self.inner.checkpoint()
    }

    fn scan(&self, after: Option<&[u8]>, max_bytes: usize) -> Result<Entries, StoreError> {
        self.inner.scan(after, max_bytes)
    }

    fn clear(&mut self) -> Result<(), StoreError> {
        self.inner.clear()
    }

    fn views(&self) -> Option<std::sync::Arc<dyn kshard_runtime::StoreViews>> {
        self.inner.views()
    }
}

/// A replica whose store fails is FAILED with the store's error, and the
/// allocator retries it after its backoff (1 s, then 2 s) until it serves;
/// every value counted once. (Before, the binary took these faults from an
/// environment variable, a test seam in production.)
#[test]
fn a_failed_replica_is_retried_with_backoff_until_it_serves() {
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("tokio");
    let log = MemoryPartitions::default();
    let ks = Arc::new(MemoryKeyspace::new());
    let keys = Keys::new("/memory-cluster-failed");
    let spec = sum_shard(0);
    runtime.block_on(kshard_runtime::create_shard(&*ks, &keys, &spec)).expect("the shard");
    let mut expected = BTreeMap::new();
    produce(&log, 0, 100, &mut expected);
    // The first two store writes fail.
    let disk = FlakyDisk { inner: MemoryDisk::default(), failures: Arc::new(AtomicU32::new(2)) };
    let unused = std::env::temp_dir().join("kshard-memory-cluster-unused");
    let (shared, stop, task) = start_member(&runtime, &ks, &keys, &log, "m1", unused, Some(Arc::new(disk)));
    let status = || shared.statuses().get("sum-0").copied();
    let mut failed_at = None;
    let mut errors = Vec::new();
    eventually("FAILED, then retried until PRIMARY with every value", || {
        if status() == Some(ReplicaCode::Failed) && failed_at.is_none() {
            failed_at = Some(Instant::now());
        }
        if errors.is_empty() {
            errors =
                shared.cluster().rows(&["sum-0".to_owned()], |_, _| None).into_iter().flat_map(|r| r.errors).collect();
        }
        let sums = sums_in_the_log(&log);
        if failed_at.is_some() && status() == Some(ReplicaCode::Primary) && sums == expected {
            Ok(())
        } else {
            Err(format!("{:?}, {sums:?}", status()))
        }
    });
    assert!(errors.iter().any(|e| e.contains("injected fault")), "FAILED says why: {errors:?}");
    let waited = failed_at.map(|at| at.elapsed()).unwrap_or_default();
    assert!(waited >= Duration::from_secs(1), "retried after its backoff, not at once ({waited:?})");
    let metrics = shared.metrics.encode();
    assert!(
        metrics.contains("kshard_runtime_replica_failures_total{shard=\"sum-0\",kind=\"store\"} 2"),
        "counted as the store's: {metrics}"
    );
    let _ = stop.send(());
    runtime.block_on(task).expect("joins").expect("stops cleanly");
}
