//! The cluster flags every member of a runtime application shares (`--etcd`,
//! `--etcd-prefix`, `--member-id`, `--zone`, `--data-dir`, `--listen`, …), and
//! running one member with them: on etcd when `--etcd` is given, else on an
//! embedded keyspace (one process holds every shard).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use kshard_kafka::Client;
use kshard_runtime::Application;
use kshard_runtime::NodeConfig;
use kshard_runtime::keyspace::EtcdKeyspace;
use kshard_runtime::keyspace::Keyspace;
use kshard_runtime::keyspace::MemoryKeyspace;
use kshard_runtime::{Keys, MemberSpec, ShardSpec};

use crate::member_identity::member_identity;
use kshard_runtime::{Member, ServeError};

/// Where the application's coordination lives, and who this member is.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct ClusterArgs {
    /// etcd endpoints (`http://host:port`, comma-separated). Without it, one
    /// process holds every shard, coordinated in memory.
    #[arg(long, env = "KSHARD_ETCD", value_delimiter = ',')]
    pub(crate) etcd: Vec<String>,
    /// The prefix of every key the application keeps in etcd.
    #[arg(long, env = "KSHARD_ETCD_PREFIX")]
    pub(crate) etcd_prefix: Option<String>,
    /// TLS and a user for etcd.
    #[command(flatten)]
    pub(crate) etcd_access: crate::etcd_access::EtcdAccessArgs,
    /// This member's id (default: the host name); stable across restarts, so
    /// that a restarted member finds its stores.
    #[arg(long, env = "KSHARD_MEMBER_ID")]
    pub(crate) member_id: Option<String>,
    /// This member's zone: replicas of a shard spread across zones.
    #[arg(long, env = "KSHARD_ZONE", default_value = "local")]
    pub(crate) zone: String,
    /// Where the member's stores live (default: `kshard-data/<member-id>`).
    #[arg(long, env = "KSHARD_DATA_DIR")]
    pub(crate) data_dir: Option<PathBuf>,
    /// Where to serve /metrics, /api/shards and /api/replicas.
    #[arg(long, env = "KSHARD_LISTEN", default_value = "127.0.0.1:9096")]
    pub(crate) listen: SocketAddr,
    /// The member's lease: how long after a crash its shards move (seconds).
    #[arg(long, env = "KSHARD_LEASE_TTL", default_value_t = 10)]
    pub(crate) lease_ttl: u64,
    /// The most replicas this member takes.
    #[arg(long, env = "KSHARD_SHARD_LIMIT", default_value_t = 1024)]
    pub(crate) shard_limit: u32,
}

impl ClusterArgs {
    /// The keys of application `app` (default prefix `/kshard/<app>`).
    pub(crate) fn keys(&self, app: &str) -> Result<Keys> {
        let prefix = self.etcd_prefix.clone().unwrap_or_else(|| format!("/kshard/{app}"));
        if !prefix.starts_with('/') || prefix.trim_end_matches('/').is_empty() {
            bail!("invalid etcd_prefix: {prefix:?} must start with / and name something");
        }
        Ok(Keys::new(&prefix))
    }

    fn member_id(&self) -> Result<String> {
        member_identity(self.member_id.as_deref(), &self.zone)
    }
}

/// What runs a member of one application.
pub(crate) struct MemberRun {
    pub(crate) app_name: &'static str,
    pub(crate) app: Arc<dyn Application>,
    pub(crate) shards: Vec<ShardSpec>,
    pub(crate) kafka: Client,
}

/// Runs one member until SIGINT or SIGTERM.
pub(crate) fn run_member(cluster: &ClusterArgs, run: MemberRun) -> Result<()> {
    let member_id = cluster.member_id()?;
    let keys = cluster.keys(run.app_name)?;
    if cluster.lease_ttl == 0 {
        bail!("invalid lease_ttl: must be at least 1 second");
    }
    let data_dir = cluster.data_dir.clone().unwrap_or_else(|| PathBuf::from("kshard-data").join(&member_id));
    std::fs::create_dir_all(&data_dir)
        .with_context(|| format!("invalid data_dir: cannot create {}", data_dir.display()))?;
    let runtime = crate::process_runtime::async_runtime()?;
    runtime.block_on(async {
        let listener = crate::process_runtime::bind(cluster.listen).await?;
        let endpoint = listener.local_addr().context("the listener's address")?;
        let member = MemberSpec {
            id: member_id,
            zone: cluster.zone.clone(),
            shard_limit: cluster.shard_limit,
            endpoint: Some(endpoint.to_string()),
        };
        let ttl = Duration::from_secs(cluster.lease_ttl);
        let config = NodeConfig::new(keys, member, ttl, data_dir, run.kafka.clone());
        tracing::info!(member = %config.member.id, zone = %config.member.zone, %endpoint, data_dir = %config.data_dir.display(), "starting a member");
        if cluster.etcd.is_empty() {
            serve(Arc::new(MemoryKeyspace::new()), config, run, listener).await
        } else {
            let access = cluster.etcd_access.access(&Default::default())?;
            let ks = EtcdKeyspace::connect_with(&cluster.etcd, &access)
                .await
                .with_context(|| format!("invalid etcd: cannot reach {}", cluster.etcd.join(",")))?;
            serve(Arc::new(ks), config, run, listener).await
        }
    })
}

async fn serve<K: Keyspace>(
    ks: Arc<K>,
    config: NodeConfig,
    run: MemberRun,
    listener: tokio::net::TcpListener,
) -> Result<()> {
    let root = config.keys.root().to_owned();
    let member = Member::new(ks, config, run.app).with_shards(run.shards);
    match member.serve(Some(listener), crate::process_runtime::shutdown_signal()).await {
        Err(ServeError::Taken { ours, theirs }) => bail!(
            "invalid etcd_prefix: shard {} under {root} reads {:?} into {}, not {:?} into {} — another \
             application uses these keys; give this one its own --etcd-prefix",
            ours.id,
            theirs.sources,
            theirs.log_name(),
            ours.sources,
            ours.log_name()
        ),
        result => result.map_err(anyhow::Error::from),
    }
}
