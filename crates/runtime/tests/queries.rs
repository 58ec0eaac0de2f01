//! Reading shards' state over HTTP ([`kshard_runtime::Queries`]) on two
//! members in one process, on the in-memory log and keyspace, with shards
//! generated one per partition of a topic ([`kshard_runtime::PartitionShards`])
//! and followed as it gains one: each member answers for every shard, from
//! its own replica or the primary's member, after the offsets a read has
//! seen; a standby answers a read that accepts its staleness.

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::extract::{Path, Request};
use kshard_runtime::partitions::{MemoryPartitions, Partitions};
use kshard_runtime::{
    AppError, Application, ClientSettings, Keys, Member, MemberSpec, MemoryDisk, MemoryKeyspace, Message, NodeConfig,
    PartitionShards, Queries, RecoveryLog, ShardApp, ShardSpec, Source, StoreView, Transaction,
};

/// Counts each key's messages.
struct Counting;

struct Counter;

impl ShardApp for Counter {
    fn consume(&mut self, txn: &mut Transaction<'_>, message: &Message<'_>) -> Result<(), AppError> {
        let key = message.key.unwrap_or_default();
        let n = txn.get(key)?.map_or(0, |v| u64::from_be_bytes(v.as_slice().try_into().unwrap_or_default()));
        txn.put(key, (n + 1).to_be_bytes());
        Ok(())
    }
}

impl Application for Counting {
    fn shard(&self, _: &ShardSpec) -> Result<Box<dyn ShardApp>, AppError> {
        Ok(Box::new(Counter))
    }

    fn routes(&self, queries: Queries) -> Option<axum::Router> {
        let count = move |Path((partition, key)): Path<(i32, String)>, request: Request| async move {
            let read = move |view: &StoreView| {
                let n = view.get(key.as_bytes())?.map_or(0, |v| u64::from_be_bytes(v.try_into().unwrap_or_default()));
                Ok(n.to_string())
            };
            queries.serve_source("events", partition, request, read).await
        };
        Some(axum::Router::new().route("/count/{partition}/{key}", axum::routing::get(count)))
    }
}

fn shard(p: i32) -> ShardSpec {
    let source = Source { topic: "events".into(), partition: p, min_offset: 0 };
    let mut spec =
        ShardSpec::new(format!("events-{p}"), vec![source], RecoveryLog { topic: "log".into(), partition: p });
    spec.hot_standbys = 1;
    spec.max_txn_duration_ms = 20;
    spec
}

/// A GET: the status, the head and the body.
fn get(endpoint: &str, path: &str) -> (u16, String, String) {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(endpoint).expect("connects");
    stream.set_read_timeout(Some(Duration::from_secs(30))).expect("a timeout");
    write!(stream, "GET {path} HTTP/1.0\r\nHost: {endpoint}\r\n\r\n").expect("asks");
    let mut text = String::new();
    stream.read_to_string(&mut text).expect("an answer");
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head.split_whitespace().nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
    (status, head.to_ascii_lowercase(), body.to_owned())
}

#[test]
fn any_member_answers_for_every_shard_after_what_the_read_has_seen() {
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("tokio");
    let log = MemoryPartitions::default();
    let ks = Arc::new(MemoryKeyspace::new());
    let keys = Keys::new("/queries");
    log.append("events", 0, b"k", Some(b"1")).expect("appends");
    let mut endpoints = Vec::new();
    let mut stops = Vec::new();
    for id in ["a", "b"] {
        let listener = runtime.block_on(tokio::net::TcpListener::bind("127.0.0.1:0")).expect("a port");
        let endpoint = listener.local_addr().expect("an address").to_string();
        let config = NodeConfig {
            keys: keys.clone(),
            member: MemberSpec { id: id.into(), zone: id.into(), shard_limit: 10, endpoint: Some(endpoint.clone()) },
            lease_ttl: Duration::from_secs(2),
            data_dir: std::env::temp_dir(),
            disk: Some(Arc::new(MemoryDisk::default())),
            kafka: ClientSettings::new("127.0.0.1:1").into(),
            partitions: Some(Arc::new(log.clone()) as Arc<dyn Partitions>),
        };
        let generator = PartitionShards::new("events", shard).every(Duration::from_millis(200));
        let member = Member::new(Arc::clone(&ks), config, Arc::new(Counting)).following(generator);
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        runtime.spawn(member.serve(Some(listener), async move {
            let _ = stopped.await;
        }));
        endpoints.push(endpoint);
        stops.push(stop);
    }

    // Partition 0's count, read from either member, the write seen.
    for endpoint in &endpoints {
        let (status, _, body) = get(endpoint, "/count/0/k?seen=events:0:0&wait=30s");
        assert_eq!((status, body.as_str()), (200, "1"), "from {endpoint}");
    }
    // The topic gains partition 1: its shard is made and served.
    let offset = log.append("events", 1, b"k", Some(b"1")).expect("appends").wait(Duration::from_secs(5)).expect("in");
    let mut members = Vec::new();
    for endpoint in &endpoints {
        let started = Instant::now();
        let (status, head, body) = loop {
            let answer = get(endpoint, &format!("/count/1/k?seen=events:1:{offset}&wait=30s"));
            // No shard reads partition 1 until the generator looks again.
            if answer.0 != 404 || started.elapsed() > Duration::from_secs(30) {
                break answer;
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        assert_eq!((status, body.as_str()), (200, "1"), "from {endpoint}: {head}");
        assert!(head.contains("kshard-replica: primary"), "{head}");
        members.push(head.lines().find(|l| l.starts_with("kshard-member:")).map(str::to_owned));
    }
    assert!(members[0].is_some(), "the answer says who answered");
    assert_eq!(members[0], members[1], "one primary answered both, one of them forwarded");

    // A read that accepts a standby's state is answered by the member asked.
    let started = Instant::now();
    let standby = loop {
        let answers: Vec<(u16, String, String)> =
            endpoints.iter().map(|e| get(e, "/count/0/k?stale=10s&wait=5s")).collect();
        if let Some(a) = answers.into_iter().find(|(_, head, _)| head.contains("kshard-replica: standby")) {
            break a;
        }
        assert!(started.elapsed() < Duration::from_secs(30), "no standby answered");
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!((standby.0, standby.2.as_str()), (200, "1"));
    // Bad options and unknown shards say so.
    assert_eq!(get(&endpoints[0], "/count/0/k?wait=2h").0, 400);
    assert_eq!(get(&endpoints[0], "/count/7/k").0, 404);
    for stop in stops {
        let _ = stop.send(());
    }
    runtime.shutdown_timeout(Duration::from_secs(5));
}
