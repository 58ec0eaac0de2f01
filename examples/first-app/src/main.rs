//! One member, every shard, its keyspace embedded: `first-app BROKERS`.

use std::sync::Arc;
use std::time::Duration;

use kshard_runtime::{ClientSettings, Keys, Member, MemberSpec, MemoryKeyspace, NodeConfig, NodeShared};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let brokers = std::env::args().nth(1).unwrap_or_else(|| "127.0.0.1:9092".into());
    let me = MemberSpec { id: "solo".into(), zone: "local".into(), shard_limit: 1024, endpoint: None };
    let config = NodeConfig::new(
        Keys::new("/first-app"),
        me,
        Duration::from_secs(10),
        "first-app-data".into(),
        ClientSettings::new(&brokers),
    );
    let member = Member {
        keyspace: Arc::new(MemoryKeyspace::new()),
        config,
        application: Arc::new(first_app::WordCount),
        shards: first_app::shards(4),
        shared: NodeShared::default(),
    };
    let stop = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    member.serve(None, stop).await?;
    Ok(())
}
