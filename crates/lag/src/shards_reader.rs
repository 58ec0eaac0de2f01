//! Reading the offsets topic through `kshard-runtime` (`data_dir` set): one
//! shard per partition, run by one member on an embedded keyspace, each
//! shard's store in the data directory and its recovery log a partition of
//! [`recovery_log_topic`]. A restart on the data directory restores every
//! partition's state from its store and reads only what follows.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use kshard_kafka::{Admin, TopicSpec};
use kshard_runtime::keyspace::memory::MemoryKeyspace;
use kshard_runtime::model::{Keys, MemberSpec, RecoveryLog, ShardSpec, Source};
use kshard_runtime::node::{self, NodeConfig, NodeShared};
use tracing::info;

use crate::offsets_reader::OffsetsReader;
use crate::offsets_shards::OffsetsShards;

/// The recovery-log topic of the shards of `offsets_topic`: one partition per
/// partition of it, records deleted only by the runtime.
pub fn recovery_log_topic(offsets_topic: &str) -> String {
    format!("kshard-lag-log-{offsets_topic}")
}

/// The shard of partition `p`.
fn shard(offsets_topic: &str, log_topic: &str, p: i32) -> ShardSpec {
    ShardSpec {
        // Transactions of at most 200 ms: a restart loses nothing, and at most
        // that much reading is redone by a standby that takes over.
        max_txn_duration_ms: 200,
        ..ShardSpec::new(
            format!("offsets-{p:03}"),
            vec![Source { topic: offsets_topic.to_owned(), partition: p, min_offset: 0 }],
            RecoveryLog { topic: log_topic.to_owned(), partition: p },
        )
    }
}

/// One life of the worker in runtime mode: until `stop` (`Ok`) or a failure.
pub(crate) fn run(reader: &OffsetsReader, data_dir: &Path) -> Result<(), String> {
    let partitions = reader.monitor.resume_positions().len() as i32;
    let log_topic = recovery_log_topic(&reader.topic);
    let admin = Admin::connect(&reader.settings, reader.timeout).map_err(|e| e.to_string())?;
    let spec = TopicSpec {
        name: log_topic.clone(),
        partitions,
        replication: -1,
        configs: vec![("cleanup.policy".into(), "delete".into()), ("retention.ms".into(), "-1".into())],
    };
    admin.create_topic(&spec).map_err(|e| format!("creating the recovery-log topic {log_topic}: {e}"))?;
    // A topic just created shows in the metadata a moment later.
    let deadline = std::time::Instant::now() + reader.timeout;
    let have = loop {
        match admin.partition_count(&log_topic).map_err(|e| e.to_string())? {
            Some(n) => break n,
            None if std::time::Instant::now() < deadline => std::thread::sleep(Duration::from_millis(100)),
            None => return Err(format!("the recovery-log topic {log_topic} does not show in the metadata")),
        }
    };
    if have < partitions {
        return Err(format!(
            "the recovery-log topic {log_topic} has {have} partitions, {} has {partitions}: add partitions to it",
            reader.topic
        ));
    }
    let shards: Vec<ShardSpec> = (0..partitions).map(|p| shard(&reader.topic, &log_topic, p)).collect();
    let app = Arc::new(OffsetsShards::new(Arc::clone(&reader.monitor), partitions, Arc::clone(&reader.stop)));
    let config = NodeConfig {
        keys: Keys::new("/kshard/lag"),
        member: MemberSpec { id: "local".into(), zone: "local".into(), shard_limit: u32::MAX, endpoint: None },
        lease_ttl: Duration::from_secs(10),
        data_dir: data_dir.to_owned(),
        settings: reader.settings.clone(),
        store_faults: Default::default(),
    };
    info!(partitions, %log_topic, data_dir = %data_dir.display(), "reading the offsets topic through durable shards");
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name("kshard-shards")
        .enable_all()
        .build()
        .map_err(|e| format!("starting the shards' runtime: {e}"))?;
    let stop = Arc::clone(&reader.stop);
    let shared = NodeShared::default();
    reader.monitor.set_shards(shared.clone());
    runtime.block_on(async move {
        let ks = Arc::new(MemoryKeyspace::new());
        for s in &shards {
            node::create_shard(&*ks, &config.keys, s).await.map_err(|e| e.to_string())?;
        }
        let shutdown = async move {
            while !stop.load(Ordering::Acquire) {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        };
        node::run(ks, config, app, shared, shutdown).await.map_err(|e| e.to_string())
    })
}
