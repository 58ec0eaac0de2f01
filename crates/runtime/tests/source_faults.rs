//! A source's faults on a running member (the embedded keyspace, the
//! in-memory log and disk): a batch that fails its checksum is skipped and
//! counted under the shard's `refusals: skip`, and fails the replica naming
//! it under `fail`; a source's log cut below the primary's position (an
//! unclean leader election) is read again from its start, the application
//! told in a transaction that can undo what the lost records gave.

mod common;

use std::sync::{Arc, Mutex, PoisonError};

use kshard_runtime::keyspace::{Keyspace, MemoryKeyspace};
use kshard_runtime::partitions::{MemoryPartitions, Partitions};
use kshard_runtime::recovery_log::SourceOffset;
use kshard_runtime::{
    AppError, Application, AssignmentValue, Keys, Member, MemoryDisk, Message, NodeShared, Refusals, ShardApp,
    ShardSpec, Source, Transaction,
};

/// What the application was told, and the offset last committed.
#[derive(Default)]
struct Told {
    skipped: Vec<(String, i32, i64)>,
    resets: Vec<(String, i32, i64, i64)>,
    committed: Option<i64>,
}

type Shared = Arc<Mutex<Told>>;

/// Counts messages by key; forgets every count when a source is cut.
struct Counting(Shared);

impl Application for Counting {
    fn shard(&self, _: &ShardSpec) -> Result<Box<dyn ShardApp>, AppError> {
        Ok(Box::new(CountShard(Arc::clone(&self.0))))
    }
}

struct CountShard(Shared);

impl CountShard {
    fn told(&self) -> std::sync::MutexGuard<'_, Told> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl ShardApp for CountShard {
    fn consume(&mut self, txn: &mut Transaction<'_>, message: &Message<'_>) -> Result<(), AppError> {
        let key = message.key.ok_or("no key")?;
        let n = txn.get(key)?.map_or(0, |b| u64::from_be_bytes(b.try_into().unwrap_or_default()));
        txn.put(key, (n + 1).to_be_bytes());
        Ok(())
    }

    fn source_reset(
        &mut self,
        txn: &mut Transaction<'_>,
        topic: &str,
        partition: i32,
        position: i64,
        log_start: i64,
    ) -> Result<(), AppError> {
        for (key, _) in txn.scan_prefix(b"")? {
            txn.delete(key);
        }
        self.told().resets.push((topic.to_owned(), partition, position, log_start));
        Ok(())
    }

    fn source_skipped(&mut self, topic: &str, partition: i32, offset: i64, _: &str) {
        self.told().skipped.push((topic.to_owned(), partition, offset));
    }

    fn committed(&mut self, offsets: &[SourceOffset]) {
        self.told().committed = offsets.first().map(|o| o.offset);
    }
}

fn shard(id: &str, partition: i32, refusals: Refusals) -> ShardSpec {
    ShardSpec {
        max_txn_duration_ms: 20,
        refusals,
        ..ShardSpec::unlogged(id, vec![Source { topic: "events".into(), partition, min_offset: 0 }])
    }
}

#[test]
fn corrupt_batches_follow_the_refusals_policy_and_a_cut_source_is_read_again() {
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("tokio");
    let (log, ks, keys, disk) = (
        MemoryPartitions::default(),
        Arc::new(MemoryKeyspace::new()),
        Keys::new("/source-faults"),
        MemoryDisk::default(),
    );
    for p in 0..2 {
        for _ in 0..10 {
            log.append("events", p, b"k", None).expect("appends");
        }
        log.corrupt("events", p, 3);
    }
    let told = Shared::default();
    let shared = NodeShared::default();
    let app = Arc::new(Counting(Arc::clone(&told)));
    let member = Member::new(Arc::clone(&ks), common::memory_member(&keys, "m1", &disk, &log), app)
        .with_shards(vec![shard("skip-0", 0, Refusals::Skip), shard("fail-1", 1, Refusals::Fail)])
        .with_shared(shared.clone());
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let task = runtime.spawn(member.serve(None, async move {
        let _ = stopped.await;
    }));
    let count = |key: &[u8]| -> Option<u64> {
        let store = disk.store("skip-0@unlogged")?;
        let value = kshard_runtime::Store::get(&store, key).ok()??;
        Some(u64::from_be_bytes(value.try_into().ok()?))
    };
    let committed_to = |next: i64| {
        let told = Arc::clone(&told);
        move || {
            let at = told.lock().unwrap_or_else(PoisonError::into_inner).committed;
            if at == Some(next) { Ok(()) } else { Err(format!("committed to {at:?}")) }
        }
    };

    common::eventually("the skipping shard reads past the corrupt batch", committed_to(10));
    assert_eq!(count(b"k"), Some(9), "every record but the corrupt one");
    assert_eq!(told.lock().unwrap_or_else(PoisonError::into_inner).skipped, [("events".to_owned(), 0, 3)]);
    common::eventually("the failing shard names the batch", || {
        let snapshot = runtime.block_on(ks.get_prefix(&keys.assignments())).map_err(|e| e.to_string())?;
        let errors: Vec<String> = snapshot
            .kvs
            .iter()
            .filter(|kv| kv.key.contains("fail-1"))
            .filter_map(|kv| serde_json::from_slice::<AssignmentValue>(&kv.value).ok())
            .flat_map(|v| v.status.errors)
            .collect();
        let named = errors.iter().any(|e| e.contains("offset 3") && e.contains("checksum"));
        if named { Ok(()) } else { Err(format!("{errors:?}")) }
    });

    // An unclean election: the log ends at 4, and new records take 4 to 6.
    log.truncate("events", 0, 4);
    for _ in 0..3 {
        log.append("events", 0, b"n", None).expect("appends");
    }
    common::eventually("the cut source read again to its new end", committed_to(7));
    assert_eq!((count(b"k"), count(b"n")), (Some(3), Some(3)), "the lost records' counts undone");
    let resets = told.lock().unwrap_or_else(PoisonError::into_inner).resets.clone();
    assert_eq!(resets.len(), 1, "{resets:?}");
    let (_, _, position, log_start) = &resets[0];
    assert_eq!((*position, *log_start), (10, 0));
    let metrics = shared.metrics.encode();
    for line in [
        r#"kshard_runtime_source_events_total{shard="skip-0",event="reset"} 1"#,
        r#"kshard_runtime_source_events_total{shard="skip-0",event="batch_skipped"} 2"#,
    ] {
        assert!(metrics.contains(line), "{line} in {metrics}");
    }
    let _ = stop.send(());
    runtime.block_on(task).expect("joins").expect("stops cleanly");
}
