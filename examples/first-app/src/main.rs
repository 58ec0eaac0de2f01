//! One member, every shard, its keyspace embedded, its HTTP on port 9700:
//! `first-app BROKERS`.

use std::sync::Arc;
use std::time::Duration;

use kshard_runtime::partitions::{ensure_log_topic, ensure_output_topic};
use kshard_runtime::{Admin, Client, Keys, Member, MemberSpec, MemoryKeyspace, NodeConfig};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let brokers = std::env::args().nth(1).unwrap_or_else(|| "127.0.0.1:9092".into());
    // One handle on the cluster: the admin client and every reader and
    // writer of the member share its connections.
    let kafka = Client::to_brokers(&brokers);
    let admin = Admin::new(&kafka, Duration::from_secs(30))?;
    // The log topic as a recovery log needs it (no retention, large records,
    // replicated), the counts as durable; `lines` is the producer's.
    ensure_log_topic(&admin, "counts-log", 4, &[])?;
    ensure_output_topic(&admin, "counts", 4)?;
    let http = tokio::net::TcpListener::bind("127.0.0.1:9700").await?;
    let endpoint = Some(http.local_addr()?.to_string());
    let me = MemberSpec { id: "solo".into(), zone: "local".into(), shard_limit: 1024, endpoint };
    let config = NodeConfig::new(Keys::new("/first-app"), me, Duration::from_secs(10), "first-app-data".into(), kafka);
    let member = Member::new(Arc::new(MemoryKeyspace::new()), config, Arc::new(first_app::WordCount))
        .with_shards(first_app::shards(4));
    let stop = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    member.serve(Some(http), stop).await?;
    Ok(())
}
