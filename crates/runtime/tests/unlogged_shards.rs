//! Shards without a recovery log ([`ShardSpec::unlogged`]) on a running
//! member (the embedded keyspace, the in-memory log and disk): the store is
//! the state, committed transaction by transaction with the sources'
//! offsets, and nothing is written anywhere else. Shown: a member that runs
//! the shard again on the same disk goes on from the store's checkpoint
//! (every message counted once); a member with a disk of its own reads the
//! sources again from their minimum offsets and reaches the same state;
//! shards move to a member that joins, no replica failing on the way; a
//! shard that publishes fails, saying why; a spec with standbys is refused.

mod common;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};

use kshard_runtime::keyspace::{Keyspace, MemoryKeyspace};
use kshard_runtime::partitions::{MemoryPartitions, Partitions};
use kshard_runtime::recovery_log::SourceOffset;
use kshard_runtime::{
    AppError, Application, AssignmentValue, Keys, Member, MemoryDisk, Message, NodeShared, OutRecord, ShardApp,
    ShardSpec, Source, Store, Transaction,
};

/// What the replicas saw: the count each found in its store when it
/// recovered, and the offsets last committed, by shard.
#[derive(Default)]
struct Seen {
    recovered: Vec<(String, Option<u64>, Vec<SourceOffset>)>,
    committed: BTreeMap<String, i64>,
}

type Shared = Arc<Mutex<Seen>>;

/// Counts messages by key; publishes a message keyed `publish`.
struct Counting(Shared);

impl Application for Counting {
    fn shard(&self, shard: &ShardSpec) -> Result<Box<dyn ShardApp>, AppError> {
        Ok(Box::new(CountShard { id: shard.id.clone(), seen: Arc::clone(&self.0) }))
    }
}

struct CountShard {
    id: String,
    seen: Shared,
}

fn count(bytes: Option<Vec<u8>>) -> Option<u64> {
    bytes.map(|b| u64::from_be_bytes(b.try_into().unwrap_or_default()))
}

impl ShardApp for CountShard {
    fn consume(&mut self, txn: &mut Transaction<'_>, message: &Message<'_>) -> Result<(), AppError> {
        let key = message.key.ok_or("no key")?;
        if key == b"publish" {
            txn.publish("out", 0, OutRecord::new(Some(key), None));
            return Ok(());
        }
        let n = count(txn.get(key)?).unwrap_or(0);
        txn.put(key, (n + 1).to_be_bytes());
        Ok(())
    }

    fn recovered(&mut self, store: &dyn Store, offsets: &[SourceOffset]) -> Result<(), AppError> {
        let n = count(store.get(b"k")?);
        self.seen.lock().unwrap_or_else(PoisonError::into_inner).recovered.push((self.id.clone(), n, offsets.to_vec()));
        Ok(())
    }

    fn committed(&mut self, offsets: &[SourceOffset]) {
        let next = offsets.iter().map(|o| o.offset).max().unwrap_or(0);
        self.seen.lock().unwrap_or_else(PoisonError::into_inner).committed.insert(self.id.clone(), next);
    }
}

fn counted() -> ShardSpec {
    ShardSpec {
        max_txn_duration_ms: 20,
        ..ShardSpec::unlogged("count-0", vec![Source { topic: "events".into(), partition: 0, min_offset: 0 }])
    }
}

fn publishing() -> ShardSpec {
    ShardSpec {
        max_txn_duration_ms: 20,
        ..ShardSpec::unlogged("publish-1", vec![Source { topic: "events".into(), partition: 1, min_offset: 0 }])
    }
}

/// One member's life on `disk`: started, then stopped once `until` holds.
struct Run<'a> {
    runtime: &'a tokio::runtime::Runtime,
    ks: &'a Arc<MemoryKeyspace>,
    keys: &'a Keys,
    events: &'a MemoryPartitions,
}

impl Run<'_> {
    fn member(&self, id: &str, disk: &MemoryDisk, seen: &Shared, until: impl FnMut() -> Result<(), String>) {
        let config = common::memory_member(self.keys, id, disk, self.events);
        let app = Arc::new(Counting(Arc::clone(seen)));
        let member = Member::new(Arc::clone(self.ks), config, app).with_shards(vec![counted(), publishing()]);
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let task = self.runtime.spawn(member.serve(None, async move {
            let _ = stopped.await;
        }));
        common::eventually(&format!("member {id}"), until);
        let _ = stop.send(());
        self.runtime.block_on(task).expect("joins").expect("stops cleanly");
    }
}

fn committed_to(seen: &Shared, next: i64) -> impl FnMut() -> Result<(), String> {
    let seen = Arc::clone(seen);
    move || {
        let at = seen.lock().unwrap_or_else(PoisonError::into_inner).committed.get("count-0").copied();
        if at == Some(next) { Ok(()) } else { Err(format!("committed to {at:?}, not {next}")) }
    }
}

fn stored_count(disk: &MemoryDisk) -> Option<u64> {
    let store = disk.store("count-0@unlogged").expect("the shard's store is on the disk");
    count(store.get(b"k").expect("reads"))
}

#[test]
fn an_unlogged_shard_goes_on_from_its_store_or_reads_its_sources_again() {
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("tokio");
    let (events, ks, keys) = (MemoryPartitions::default(), Arc::new(MemoryKeyspace::new()), Keys::new("/unlogged"));
    let run = Run { runtime: &runtime, ks: &ks, keys: &keys, events: &events };
    for _ in 0..50 {
        events.append("events", 0, b"k", None).expect("appends");
    }
    events.append("events", 1, b"publish", None).expect("appends");
    let (disk, seen) = (MemoryDisk::default(), Shared::default());

    // The shard that publishes fails, saying why.
    let publish_errors = || -> Vec<String> {
        let snapshot = runtime.block_on(ks.get_prefix(&keys.assignments())).expect("reads");
        snapshot
            .kvs
            .iter()
            .filter(|kv| kv.key.contains("publish-1"))
            .filter_map(|kv| serde_json::from_slice::<AssignmentValue>(&kv.value).ok())
            .flat_map(|v| v.status.errors)
            .collect()
    };
    let mut counted_all = committed_to(&seen, 50);
    run.member("m1", &disk, &seen, || {
        counted_all()?;
        let errors = publish_errors();
        if errors.iter().any(|e| e.contains("no recovery log")) { Ok(()) } else { Err(format!("{errors:?}")) }
    });
    assert_eq!(stored_count(&disk), Some(50));
    // Nothing but the sources was written: no log, no snapshot hints, no output.
    let topics: Vec<&str> = ["log", "out"].into_iter().filter(|t| !events.partitions_of(t).is_empty()).collect();
    assert!(topics.is_empty(), "written: {topics:?}");
    let hints = runtime.block_on(ks.get_prefix(&format!("{}/hints", keys.root()))).expect("reads");
    assert!(hints.kvs.is_empty(), "hints of an unlogged shard: {:?}", hints.kvs);

    // Again on the same disk: from the store's checkpoint, each message once.
    for _ in 0..10 {
        events.append("events", 0, b"k", None).expect("appends");
    }
    run.member("m1", &disk, &seen, committed_to(&seen, 60));
    assert_eq!(stored_count(&disk), Some(60), "the 50 are not counted twice");

    // Elsewhere, on a disk of its own: the sources read again from their start.
    let (elsewhere, seen_elsewhere) = (MemoryDisk::default(), Shared::default());
    run.member("m2", &elsewhere, &seen_elsewhere, committed_to(&seen_elsewhere, 60));
    assert_eq!(stored_count(&elsewhere), Some(60));

    let recovered = |s: &Shared| -> Vec<(Option<u64>, Vec<i64>)> {
        let seen = s.lock().unwrap_or_else(PoisonError::into_inner);
        seen.recovered
            .iter()
            .filter(|(id, ..)| id == "count-0")
            .map(|(_, n, offsets)| (*n, offsets.iter().map(|o| o.offset).collect()))
            .collect()
    };
    assert_eq!(recovered(&seen), vec![(None, vec![]), (Some(50), vec![50])]);
    assert_eq!(recovered(&seen_elsewhere), vec![(None, vec![])]);
}

#[test]
fn an_unlogged_shard_has_one_replica_and_no_standbys_in_its_spec() {
    let spec = ShardSpec { hot_standbys: 2, ..counted() };
    assert_eq!(spec.replicas(), 1, "no standby can follow a store");
    assert_eq!(spec.log_name(), "none");
    let plan =
        kshard_runtime::shard_specs::plan(&[], &[kshard_runtime::shard_specs::Desired::Put { spec, revision: None }]);
    let refused = plan.expect_err("refused").to_string();
    assert!(refused.contains("no hot standbys"), "{refused}");
}

/// Shards `move-0` … `move-3`, unlogged, each reading its partition of `moves`.
fn moving(p: i32) -> ShardSpec {
    ShardSpec {
        max_txn_duration_ms: 20,
        ..ShardSpec::unlogged(format!("move-{p}"), vec![Source { topic: "moves".into(), partition: p, min_offset: 0 }])
    }
}

#[test]
fn unlogged_shards_move_to_a_member_that_joins_and_read_again_there() {
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("tokio");
    let (events, ks, keys) = (MemoryPartitions::default(), Arc::new(MemoryKeyspace::new()), Keys::new("/moving"));
    for p in 0..4 {
        for _ in 0..20 {
            events.append("moves", p, b"k", None).expect("appends");
        }
    }
    let start = |id: &str, disk: &MemoryDisk, seen: &Shared, shared: &NodeShared| {
        let config = common::memory_member(&keys, id, disk, &events);
        let app = Arc::new(Counting(Arc::clone(seen)));
        let member = Member::new(Arc::clone(&ks), config, app)
            .with_shards((0..4).map(moving).collect())
            .with_shared(shared.clone());
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let task = runtime.spawn(member.serve(None, async move {
            let _ = stopped.await;
        }));
        (stop, task)
    };
    let all_read = |seen: &Shared, shards: usize| {
        let seen = Arc::clone(seen);
        move || {
            let committed = seen.lock().unwrap_or_else(PoisonError::into_inner).committed.clone();
            let done = committed.iter().filter(|(id, at)| id.starts_with("move-") && **at == 20).count();
            if done >= shards { Ok(()) } else { Err(format!("{committed:?}")) }
        }
    };
    let (first, second) = ((MemoryDisk::default(), Shared::default()), (MemoryDisk::default(), Shared::default()));
    let shared = [NodeShared::default(), NodeShared::default()];
    let (stop_first, task_first) = start("m1", &first.0, &first.1, &shared[0]);
    common::eventually("the first member reads every shard", all_read(&first.1, 4));
    let (stop_second, task_second) = start("m2", &second.0, &second.1, &shared[1]);
    // Balanced: some shards move to the member that joined, and are read
    // again there from the start, none failing on the way.
    common::eventually("shards moved to the second member and read there", all_read(&second.1, 1));
    let snapshot = runtime.block_on(ks.get_prefix(&keys.assignments())).expect("reads");
    let failed: Vec<String> = snapshot
        .kvs
        .iter()
        .filter_map(|kv| serde_json::from_slice::<AssignmentValue>(&kv.value).ok())
        .flat_map(|v| v.status.errors)
        .collect();
    assert!(failed.is_empty(), "{failed:?}");
    for member in &shared {
        let metrics = member.metrics.encode();
        let failures: Vec<&str> =
            metrics.lines().filter(|l| l.starts_with("kshard_runtime_replica_failures_total{")).collect();
        assert!(failures.is_empty(), "no replica failed on the way: {failures:?}");
    }
    for (stop, task) in [(stop_second, task_second), (stop_first, task_first)] {
        let _ = stop.send(());
        runtime.block_on(task).expect("joins").expect("stops cleanly");
    }
    // (A replica added there and taken off again before it was promoted
    // leaves an empty store: only the shards it read are looked at.)
    let read_there = second.1.lock().unwrap_or_else(PoisonError::into_inner).committed.clone();
    assert!(!read_there.is_empty());
    for shard in read_there.keys() {
        let store = second.0.store(&format!("{shard}@unlogged")).expect("a store");
        assert_eq!(count(store.get(b"k").expect("reads")), Some(20), "{shard}: read again from the start");
    }
}
