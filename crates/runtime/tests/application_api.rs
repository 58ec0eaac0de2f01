//! The application API on a running member (the embedded keyspace and the
//! in-memory log, which models Kafka's transactions): an application that
//! awaits in `consume_async`, refuses some messages, and publishes from
//! `finalize`, on three shards whose refusals are skipped, dead-lettered
//! and fatal. Shown: each transaction's calls come in order (begin, the
//! messages, finalize, committed); a refused message is undone and skipped
//! (counted), or published once to the dead-letter topic with its reason
//! and origin in headers, or fails the replica naming it; what `finalize`
//! publishes is read by committed readers once per committed transaction.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use kshard_kafka::ClientSettings;
use kshard_runtime::keyspace::{Keyspace, MemoryKeyspace};
use kshard_runtime::partitions::{MemoryPartitions, Partitions};
use kshard_runtime::recovery_log::{LogClients, Player, SourceOffset, play_to_head};
use kshard_runtime::{
    AppError, Application, AssignmentValue, Consuming, Keys, MemberSpec, Message, NodeConfig, NodeShared, OutRecord,
    RecoveryLog, Refusals, ReplicaCode, ShardApp, ShardSpec, Source, Transaction,
};
use kshard_runtime::{MemoryStore, Store};

/// What each shard's replica did, in order.
type Calls = Arc<Mutex<BTreeMap<String, Vec<String>>>>;

/// Sums values by key; refuses the key `bad`; awaits a timer per message;
/// publishes each transaction's message count from `finalize`.
struct Summing {
    calls: Calls,
}

impl Application for Summing {
    fn shard(&self, shard: &ShardSpec) -> Result<Box<dyn ShardApp>, AppError> {
        Ok(Box::new(SumShard { id: shard.id.clone(), calls: Arc::clone(&self.calls), taken: 0 }))
    }
}

struct SumShard {
    id: String,
    calls: Calls,
    /// Messages taken in the open transaction.
    taken: u64,
}

impl SumShard {
    fn note(&self, call: &str) {
        self.calls.lock().unwrap_or_else(PoisonError::into_inner).entry(self.id.clone()).or_default().push(call.into());
    }
}

impl ShardApp for SumShard {
    fn begin(&mut self, _: &mut Transaction<'_>) -> Result<(), AppError> {
        self.note("begin");
        self.taken = 0;
        Ok(())
    }

    fn awaits(&self) -> bool {
        true
    }

    fn consume_async<'a>(&'a mut self, txn: &'a mut Transaction<'_>, message: &'a Message<'a>) -> Consuming<'a> {
        Box::pin(async move {
            // Calls out (a timer stands for a service).
            tokio::time::sleep(Duration::from_millis(1)).await;
            let key = message.key.ok_or("no key")?;
            let value = u64::from_be_bytes(message.value.and_then(|v| v.try_into().ok()).ok_or("not 8 bytes")?);
            // Written before refusing: undone by the runtime.
            txn.put(b"last".to_vec(), value.to_be_bytes());
            if key == b"bad" {
                return Err(AppError::refused(format!("value {value} is bad")));
            }
            let sum = txn.get(key)?.map_or(0, |s| u64::from_be_bytes(s.try_into().unwrap_or_default()));
            txn.put(key, (sum + value).to_be_bytes());
            self.taken += 1;
            self.note("consume");
            Ok(())
        })
    }

    fn finalize(&mut self, txn: &mut Transaction<'_>) -> Result<(), AppError> {
        self.note("finalize");
        txn.publish("counts", 0, OutRecord::new(Some(self.id.as_bytes()), Some(&self.taken.to_be_bytes())));
        Ok(())
    }

    fn committed(&mut self, _: &[SourceOffset]) {
        self.note("committed");
    }
}

fn shard(p: i32, refusals: Refusals) -> ShardSpec {
    ShardSpec {
        max_txn_duration_ms: 30,
        refusals,
        ..ShardSpec::new(
            format!("sum-{p}"),
            vec![Source { topic: "events".into(), partition: p, min_offset: 0 }],
            RecoveryLog { topic: "log".into(), partition: p },
        )
    }
}

fn eventually(what: &str, mut check: impl FnMut() -> Result<(), String>) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        match check() {
            Ok(()) => return,
            Err(e) if Instant::now() > deadline => panic!("{what}: {e}"),
            Err(_) => std::thread::sleep(Duration::from_millis(50)),
        }
    }
}

/// An 8-byte big-endian number.
fn value(v: &[u8]) -> u64 {
    u64::from_be_bytes(v.try_into().unwrap_or_default())
}

#[test]
fn transactions_call_in_order_and_refusals_follow_each_shards_policy() {
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("tokio");
    let log = MemoryPartitions::default();
    let ks = Arc::new(MemoryKeyspace::new());
    let keys = Keys::new("/application-api");
    let specs = [
        shard(0, Refusals::Skip),
        shard(1, Refusals::DeadLetter { topic: "dlq".into(), partition: Some(0) }),
        shard(2, Refusals::Fail),
    ];
    for spec in &specs {
        runtime.block_on(kshard_runtime::create_shard(&*ks, &keys, spec)).expect("the shard");
    }
    // Each source: good values, and a bad one last: what it wrote before
    // refusing would be the last word in the store, unless undone.
    for p in 0..3 {
        for i in 1..=20u64 {
            let key: &[u8] = if i == 20 {
                b"bad"
            } else if i % 2 == 0 {
                b"even"
            } else {
                b"odd"
            };
            log.append("events", p, key, Some(&i.to_be_bytes())).expect("appends");
        }
    }
    let calls: Calls = Arc::default();
    let config = NodeConfig {
        keys: keys.clone(),
        member: MemberSpec { id: "m1".into(), zone: "z".into(), shard_limit: 10, endpoint: None },
        lease_ttl: Duration::from_secs(2),
        data_dir: std::env::temp_dir().join(format!("kshard-application-api-{}", std::process::id())),
        disk: Some(Arc::new(kshard_runtime::MemoryDisk::default())),
        kafka: ClientSettings::new("127.0.0.1:1").into(),
        partitions: Some(Arc::new(log.clone()) as Arc<dyn Partitions>),
    };
    let shared = NodeShared::default();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let app = Arc::new(Summing { calls: Arc::clone(&calls) });
    let task =
        runtime.spawn(kshard_runtime::internals::run_node(Arc::clone(&ks), config, app, shared.clone(), async move {
            let _ = stopped.await;
        }));

    // The outputs a committed reader sees: each transaction's count of messages taken.
    let counts = |shard: &str| -> u64 {
        log.read_committed("counts", 0)
            .into_iter()
            .filter(|(_, k, _)| k.as_deref() == Some(shard.as_bytes()))
            .map(|(_, _, v)| value(&v.unwrap_or_default()))
            .sum()
    };
    eventually("skipped and dead-lettered shards took every good message", || {
        let (a, b) = (counts("sum-0"), counts("sum-1"));
        if (a, b) == (19, 19) { Ok(()) } else { Err(format!("counts {a}, {b} of 19")) }
    });

    // Dead-lettered once, with its reason and origin.
    let dlq = log.read_committed("dlq", 0);
    assert_eq!(dlq.len(), 1, "{dlq:?}");
    let (_, key, value_read) = &dlq[0];
    assert_eq!(key.as_deref(), Some(&b"bad"[..]));
    assert_eq!(value_read.as_deref(), Some(&20u64.to_be_bytes()[..]));
    let reader = log.reader("dlq", &[(0, None)], 64, kshard_kafka::Isolation::Committed).expect("a reader");
    let Ok(kshard_runtime::partitions::Polled::Records(mut run)) = reader.poll(Duration::from_secs(1)) else {
        panic!("the dead letter is not read back")
    };
    let r = run.next_record().expect("reads").expect("the dead letter");
    let headers: BTreeMap<&str, String> = r
        .headers()
        .into_iter()
        .map(|(k, v)| (k, String::from_utf8_lossy(v.unwrap_or_default()).into_owned()))
        .collect();
    let want = [
        ("kshard.refused", "value 20 is bad"),
        ("kshard.shard", "sum-1"),
        ("kshard.source.offset", "19"),
        ("kshard.source.partition", "1"),
        ("kshard.source.topic", "events"),
    ];
    assert_eq!(headers, want.into_iter().map(|(k, v)| (k, v.to_owned())).collect::<BTreeMap<_, _>>());
    drop(r);
    // Skipped and dead-lettered: counted in the member's metrics once the
    // transaction is read back (the next one may be taken meanwhile).
    eventually("the refusals counted", || {
        let metrics = shared.metrics.encode();
        let skipped = r#"kshard_runtime_messages_refused_total{shard="sum-0",outcome="skipped"} 1"#;
        let dead = r#"kshard_runtime_messages_refused_total{shard="sum-1",outcome="dead_lettered"} 1"#;
        if metrics.contains(skipped) && metrics.contains(dead) { Ok(()) } else { Err(metrics) }
    });

    // Fatal: the replica fails naming the message.
    eventually("the shard whose refusals fail is FAILED, naming the message", || {
        let snapshot = runtime.block_on(ks.get_prefix(&keys.assignments())).map_err(|e| e.to_string())?;
        let errors: Vec<String> = snapshot
            .kvs
            .iter()
            .filter(|kv| kv.key.contains("sum-2"))
            .filter_map(|kv| serde_json::from_slice::<AssignmentValue>(&kv.value).ok())
            .flat_map(|v| v.status.errors)
            .collect();
        let named = errors.iter().any(|e| e.contains("events/2 offset 19 (refused)") && e.contains("value 20 is bad"));
        if named { Ok(()) } else { Err(format!("{:?}, errors {errors:?}", shared.statuses().get("sum-2"))) }
    });
    assert_ne!(shared.statuses().get("sum-0"), Some(&ReplicaCode::Failed));

    let _ = stop.send(());
    runtime.block_on(task).expect("joins").expect("stops cleanly");

    // The state the logs hold, played from their start: the refused
    // message's writes undone.
    for p in 0..2 {
        let reader = log.reader("log", &[(p, None)], 256, kshard_kafka::Isolation::Committed).expect("reader");
        let clients =
            LogClients { topic: "log", partition: p, reader: reader.as_ref(), partitions: &log, writer: None };
        let mut player = Player::open(MemoryStore::default()).expect("player");
        runtime.block_on(play_to_head(&clients, &mut player, Duration::from_secs(10))).expect("plays");
        let state: BTreeMap<Vec<u8>, u64> =
            player.store().scan(None, usize::MAX).expect("scans").into_iter().map(|(k, v)| (k, value(&v))).collect();
        let want: BTreeMap<Vec<u8>, u64> =
            [(b"even".to_vec(), 90), (b"odd".to_vec(), 100), (b"last".to_vec(), 19)].into_iter().collect();
        assert_eq!(state, want, "shard sum-{p}");
    }

    // Every transaction of the serving shards: begin, its messages, finalize, then committed.
    let calls = calls.lock().unwrap_or_else(PoisonError::into_inner).clone();
    for shard in ["sum-0", "sum-1"] {
        let seen = calls.get(shard).cloned().unwrap_or_default();
        let text = seen.join(" ");
        let shape = regex_lite(&text);
        assert!(shape, "{shard}: {text}");
        assert_eq!(seen.iter().filter(|c| *c == "consume").count(), 19, "{shard}: each good message once");
    }
}

/// Whether `calls` follow the contract: a transaction's `begin`, its
/// messages, `finalize`; each finalized transaction's `committed` later, in
/// order — at most the one before it still waiting (the next transaction is
/// taken while Kafka commits the last), the last possibly cut short by the stop.
fn regex_lite(calls: &str) -> bool {
    let (mut open, mut waiting) = (false, 0);
    for call in calls.split_whitespace() {
        match call {
            "begin" if !open => open = true,
            "consume" if open => {}
            "finalize" if open && waiting < 2 => {
                open = false;
                waiting += 1;
            }
            "committed" if waiting > 0 => waiting -= 1,
            _ => return false,
        }
    }
    true
}
