//! Two members over the embedded keyspace and an in-memory log
//! ([`MemoryPartitions`]): no broker, no etcd. A shard summing its source's
//! values runs as a primary and a hot standby; the primary's member is
//! stopped mid-stream and the standby takes over. The recovery log, played
//! from its start into a fresh store, holds every record's value counted
//! exactly once. What the next issue's simulation builds on: the runtime
//! runs whole on the [`Partitions`] seam.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use kshard_kafka::{ClientSettings, Isolation};
use kshard_runtime::keyspace::memory::MemoryKeyspace;
use kshard_runtime::model::{Keys, MemberSpec, RecoveryLog, ShardSpec, Source};
use kshard_runtime::node::{self, NodeConfig, NodeShared};
use kshard_runtime::partitions::Partitions;
use kshard_runtime::partitions::memory::MemoryPartitions;
use kshard_runtime::recovery_log::io::{LogClients, play_to_head};
use kshard_runtime::recovery_log::player::Player;
use kshard_runtime::status::ReplicaCode;
use kshard_runtime::store::{MemoryStore, Store};

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
    let clients = LogClients { topic: "log", partition: 0, reader: reader.as_ref(), partitions: log };
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

#[test]
fn a_standby_takes_over_on_the_memory_log_and_every_value_counts_once() {
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("tokio");
    let log = MemoryPartitions::default();
    let ks = Arc::new(MemoryKeyspace::new());
    let keys = Keys::new("/memory-cluster");
    let spec = ShardSpec {
        hot_standbys: 1,
        max_txn_duration_ms: 50,
        ..ShardSpec::new(
            "sum-0",
            vec![Source { topic: "events".into(), partition: 0, min_offset: 0 }],
            RecoveryLog { topic: "log".into(), partition: 0 },
        )
    };
    runtime.block_on(node::create_shard(&*ks, &keys, &spec)).expect("the shard");
    let dir = std::env::temp_dir().join(format!("kshard-memory-cluster-{}", std::process::id()));
    let mut expected = BTreeMap::new();
    produce(&log, 0, 200, &mut expected);

    let mut members = Vec::new();
    for id in ["m1", "m2"] {
        let config = NodeConfig {
            keys: keys.clone(),
            member: MemberSpec { id: id.into(), zone: id.into(), shard_limit: 10, endpoint: None },
            lease_ttl: Duration::from_secs(2),
            data_dir: dir.join(id),
            disk: None,
            settings: ClientSettings::new("127.0.0.1:1"),
            partitions: Some(Arc::new(log.clone()) as Arc<dyn Partitions>),
            store_faults: BTreeMap::new(),
        };
        let shared = NodeShared::default();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let task = runtime.spawn(node::run(Arc::clone(&ks), config, Arc::new(Sum), shared.clone(), async move {
            let _ = stopped.await;
        }));
        members.push((id, shared, stop, task));
    }
    let status = |shared: &NodeShared| shared.statuses().get("sum-0").copied();
    eventually("a primary and a standby, every value in the log", || {
        let got: Vec<_> = members.iter().map(|(_, s, _, _)| status(s)).collect();
        let roles = got.contains(&Some(ReplicaCode::Primary)) && got.contains(&Some(ReplicaCode::Standby));
        let sums = sums_in_the_log(&log);
        if roles && sums == expected { Ok(()) } else { Err(format!("{got:?}, {sums:?}")) }
    });

    // The primary's member stops; more values come while the standby takes over.
    let primary = members.iter().position(|(_, s, _, _)| status(s) == Some(ReplicaCode::Primary)).expect("a primary");
    let (_, _, stop, task) = members.remove(primary);
    let _ = stop.send(());
    runtime.block_on(task).expect("joins").expect("stops cleanly");
    produce(&log, 200, 300, &mut expected);
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
