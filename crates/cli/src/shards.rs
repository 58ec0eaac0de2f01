//! `kshard shards list`: every shard of a runtime application, each replica's
//! member, slot and status, and how far a replica is behind its recovery log —
//! from etcd (`--etcd`), or from any member's `/api/shards` (`--endpoint`, the
//! only way into a single process's embedded keyspace).

use std::io::Write;
use std::time::Duration;

use anyhow::{Context, Result};
use kshard_runtime::ClusterView;
use kshard_runtime::ShardRow;
use kshard_runtime::keyspace::EtcdKeyspace;
use kshard_runtime::keyspace::Keyspace;
use kshard_runtime::{get_json, shard_table};

/// `kshard shards …`.
#[derive(Debug, clap::Subcommand)]
pub(crate) enum ShardsCommand {
    /// List shards and replicas (a table, or JSON with --json).
    List {
        /// etcd endpoints (`http://host:port`, comma-separated).
        #[arg(long, env = "KSHARD_ETCD", value_delimiter = ',')]
        etcd: Vec<String>,
        /// The application's prefix in etcd (default `/kshard/<app>`).
        #[arg(long, env = "KSHARD_ETCD_PREFIX")]
        etcd_prefix: Option<String>,
        /// TLS and a user for etcd.
        #[command(flatten)]
        etcd_access: crate::etcd_access::EtcdAccessArgs,
        /// The application (for the default prefix).
        #[arg(long, default_value = "sum")]
        app: String,
        /// Without --etcd: a member's HTTP address (`host:port`; then
        /// `/clusters/NAME` for one of the clusters a `serve` watches).
        #[arg(long, default_value = "127.0.0.1:9096")]
        endpoint: String,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
}

pub(crate) fn run(command: &ShardsCommand) -> Result<()> {
    let ShardsCommand::List { etcd, etcd_prefix, etcd_access, app, endpoint, json } = command;
    let rows = if etcd.is_empty() {
        get_json::<Vec<ShardRow>>(endpoint, "/api/shards", Duration::from_secs(10))
            .with_context(|| format!("no answer from a member at {endpoint} (GET /api/shards)"))?
    } else {
        let prefix = etcd_prefix.clone().unwrap_or_else(|| format!("/kshard/{app}"));
        let keys = kshard_runtime::Keys::new(&prefix);
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
        let access = etcd_access.access(&Default::default())?;
        let snapshot = runtime.block_on(async {
            let ks = EtcdKeyspace::connect_with(etcd, &access).await?;
            ks.get_prefix(&format!("{}/", keys.root())).await
        });
        let snapshot = snapshot.with_context(|| format!("reading {prefix} from etcd"))?;
        shard_table(&ClusterView::from_snapshot(&keys, &snapshot), None)
    };
    let mut out = std::io::stdout().lock();
    if *json {
        writeln!(out, "{}", serde_json::to_string_pretty(&rows)?)?;
        return Ok(());
    }
    writeln!(
        out,
        "{:<16} {:<20} {:<10} {:>4} {:<9} {:>8}  ERRORS",
        "SHARD", "MEMBER", "ZONE", "SLOT", "STATUS", "BEHIND"
    )?;
    for r in rows {
        let slot = r.slot.map_or("-".into(), |s| s.to_string());
        let behind = r.behind.map_or("?".into(), |b| b.to_string());
        writeln!(
            out,
            "{:<16} {:<20} {:<10} {:>4} {:<9} {:>8}  {}",
            r.shard,
            r.member,
            r.zone,
            slot,
            r.status,
            behind,
            r.errors.join("; ")
        )?;
    }
    Ok(())
}
