//! What the runtime's in-memory tests share: a member's configuration on
//! the embedded keyspace, the in-memory log and an in-memory disk, and a
//! wait on a condition.

#![allow(dead_code)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use kshard_kafka::ClientSettings;
use kshard_runtime::partitions::{MemoryPartitions, Partitions};
use kshard_runtime::{Keys, MemberSpec, MemoryDisk, NodeConfig};

/// Member `id` under `keys`, its stores on `disk`, reading and writing `log`.
pub(crate) fn memory_member(keys: &Keys, id: &str, disk: &MemoryDisk, log: &MemoryPartitions) -> NodeConfig {
    NodeConfig {
        keys: keys.clone(),
        member: MemberSpec { id: id.into(), zone: "z".into(), shard_limit: 10, endpoint: None },
        lease_ttl: Duration::from_secs(2),
        data_dir: std::env::temp_dir().join(format!("kshard-memory-member-{}", std::process::id())),
        disk: Some(Arc::new(disk.clone())),
        kafka: ClientSettings::new("127.0.0.1:1").into(),
        partitions: Some(Arc::new(log.clone()) as Arc<dyn Partitions>),
    }
}

/// Waits up to 60 s for `check` to pass; panics with its last word.
pub(crate) fn eventually(what: &str, mut check: impl FnMut() -> Result<(), String>) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        match check() {
            Ok(()) => return,
            Err(e) if Instant::now() > deadline => panic!("{what}: {e}"),
            Err(_) => std::thread::sleep(Duration::from_millis(20)),
        }
    }
}
