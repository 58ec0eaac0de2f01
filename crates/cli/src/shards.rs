//! `kshard shards …`: a runtime application's shards, as `gazctl shards`
//! manages Gazette's. `list` shows every shard (or those a label selector
//! picks) with each replica's member, slot, status and how far it is behind
//! its recovery log — from etcd (`--etcd`), or from any member's
//! `/api/shards` (`--endpoint`, the only way into a single process's
//! embedded keyspace); `--format yaml` writes the specs as a file `apply`
//! takes back, each at the revision it was read at. `apply` makes etcd hold
//! the specs of a file (created, updated or deleted; `--dry-run` prints the
//! difference), every write checked against the revision it read, so that
//! two operators cannot overwrite each other; `edit` does the same through
//! `$EDITOR`.

use std::io::Write;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use kshard_runtime::keyspace::EtcdKeyspace;
use kshard_runtime::keyspace::Keyspace;
use kshard_runtime::shard_specs::{self, Current, Desired};
use kshard_runtime::unassign::Unassign;
use kshard_runtime::{ClusterView, Keys, Selector, ShardRow};
use kshard_runtime::{MemberClient, shard_table};

/// Where an application's shards are kept.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct Target {
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
}

impl Target {
    fn keys(&self) -> Keys {
        Keys::new(&self.etcd_prefix.clone().unwrap_or_else(|| format!("/kshard/{}", self.app)))
    }

    /// Runs `work` on the application's etcd.
    fn on_etcd<T>(&self, work: impl AsyncFnOnce(&EtcdKeyspace, &Keys) -> Result<T>) -> Result<T> {
        if self.etcd.is_empty() {
            bail!("--etcd (KSHARD_ETCD) is needed: shard specs live in etcd");
        }
        let keys = self.keys();
        let access = self.etcd_access.access(&Default::default())?;
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
        runtime.block_on(async {
            let ks = EtcdKeyspace::connect_with(&self.etcd, &access)
                .await
                .with_context(|| format!("connecting to etcd at {}", self.etcd.join(",")))?;
            work(&ks, &keys).await
        })
    }
}

/// How `list` prints.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Format {
    /// A table of replicas.
    Table,
    /// The replicas as JSON.
    Json,
    /// The specs as a file `apply` takes (with each one's revision).
    Yaml,
}

/// `kshard shards …`.
#[derive(Debug, clap::Subcommand)]
pub(crate) enum ShardsCommand {
    /// List shards and replicas (a table, JSON, or the specs as YAML).
    List {
        #[command(flatten)]
        target: Target,
        /// Only the shards whose labels match (`app=sum,env in (a,b),!canary`;
        /// the shard's id is the label `id`).
        #[arg(long, short = 'l', default_value = "")]
        selector: String,
        /// Without --etcd: a member's HTTP address (`host:port`; then
        /// `/clusters/NAME` for one of the clusters a `serve` watches).
        #[arg(long, default_value = "127.0.0.1:9096")]
        endpoint: String,
        /// What to print.
        #[arg(long, value_enum, default_value = "table")]
        format: Format,
        /// Print JSON (the same as --format json).
        #[arg(long)]
        json: bool,
    },
    /// Make etcd hold the shard specs of a file: create, update or delete
    /// each one named, checked against the revision read (or the file's).
    Apply {
        #[command(flatten)]
        target: Target,
        /// The spec file (YAML; `-` for standard input).
        #[arg(long, short = 'f')]
        file: String,
        /// Print the changes, write nothing.
        #[arg(long)]
        dry_run: bool,
    },
    /// Move primaries away (the allocator promotes a ready standby): of the
    /// shards a selector picks, or every one on --member (for maintenance);
    /// or remove FAILED replicas, to start them again now.
    Unassign {
        #[command(flatten)]
        target: Target,
        /// Only the shards whose labels match.
        #[arg(long, short = 'l', default_value = "")]
        selector: String,
        /// Only primaries on this member.
        #[arg(long)]
        member: Option<String>,
        /// FAILED replicas instead of primaries.
        #[arg(long)]
        failed: bool,
        /// Move a primary even without a STANDBY ready (the shard is down
        /// until a new replica rebuilds its state).
        #[arg(long)]
        force: bool,
        /// Print what would move, write nothing.
        #[arg(long)]
        dry_run: bool,
    },
    /// Write a shard's store, rebuilt from its recovery log (from its newest
    /// snapshot), to DIR/<shard>.redb: to read, back up or seed.
    Recover {
        #[command(flatten)]
        target: Target,
        /// Kafka, where the recovery log is.
        #[command(flatten)]
        kafka: crate::connection::KafkaArgs,
        /// The shard.
        #[arg(long)]
        shard: String,
        /// The directory (the store's file must not exist yet).
        #[arg(long)]
        dir: std::path::PathBuf,
    },
    /// Delete each picked shard's recovery-log records that no replica needs:
    /// those before the previous snapshot its hints name (the newest stays,
    /// and the one before as a backup), as a primary does after a snapshot.
    Prune {
        #[command(flatten)]
        target: Target,
        /// Kafka, where the recovery logs are.
        #[command(flatten)]
        kafka: crate::connection::KafkaArgs,
        /// Only the shards whose labels match.
        #[arg(long, short = 'l', default_value = "")]
        selector: String,
        /// Print what would be deleted, delete nothing.
        #[arg(long)]
        dry_run: bool,
    },
    /// Edit the specs a selector picks in $EDITOR, then apply them,
    /// checked against the revisions they were read at.
    Edit {
        #[command(flatten)]
        target: Target,
        /// Only the shards whose labels match.
        #[arg(long, short = 'l', default_value = "")]
        selector: String,
    },
}

pub(crate) fn run(command: &ShardsCommand) -> Result<()> {
    match command {
        ShardsCommand::List { target, selector, endpoint, format, json } => {
            let selector: Selector = selector.parse().map_err(anyhow::Error::msg)?;
            let format = if *json { Format::Json } else { *format };
            list(target, &selector, endpoint, format)
        }
        ShardsCommand::Apply { target, file, dry_run } => {
            let text = if file == "-" {
                std::io::read_to_string(std::io::stdin()).context("reading standard input")?
            } else {
                std::fs::read_to_string(file).with_context(|| format!("reading {file}"))?
            };
            let desired = crate::shards_file::parse(&text).with_context(|| format!("reading {file}"))?;
            apply(target, &desired, *dry_run)
        }
        ShardsCommand::Unassign { target, selector, member, failed, force, dry_run } => {
            let selector: Selector = selector.parse().map_err(anyhow::Error::msg)?;
            let what = Unassign { shards: None, member: member.clone(), failed: *failed, force: *force };
            unassign(target, &selector, what, *dry_run)
        }
        ShardsCommand::Recover { target, kafka, shard, dir } => recover(target, kafka, shard, dir),
        ShardsCommand::Prune { target, kafka, selector, dry_run } => {
            let selector: Selector = selector.parse().map_err(anyhow::Error::msg)?;
            prune(target, kafka, &selector, *dry_run)
        }
        ShardsCommand::Edit { target, selector } => {
            let selector: Selector = selector.parse().map_err(anyhow::Error::msg)?;
            edit(target, &selector)
        }
    }
}

fn picked(shards: Vec<Current>, selector: &Selector) -> Vec<Current> {
    shards.into_iter().filter(|c| selector.matches(&c.spec.id, &c.spec.labels)).collect()
}

fn list(target: &Target, selector: &Selector, endpoint: &str, format: Format) -> Result<()> {
    let mut out = std::io::stdout().lock();
    if format == Format::Yaml {
        let shards = target.on_etcd(async |ks, keys| Ok(shard_specs::read(ks, keys).await?))?;
        write!(out, "{}", crate::shards_file::write(&picked(shards, selector))?)?;
        return Ok(());
    }
    let (rows, specs) = if target.etcd.is_empty() {
        let rows = MemberClient::new(endpoint, Duration::from_secs(10))
            .shards()
            .with_context(|| format!("no answer from a member at {endpoint} (GET /api/shards)"))?;
        (rows, None)
    } else {
        target.on_etcd(async |ks, keys| {
            let snapshot = ks.get_prefix(&format!("{}/", keys.root())).await?;
            let view = ClusterView::from_snapshot(keys, &snapshot);
            let (specs, unreadable) = shard_specs::read_checked(ks, keys).await?;
            for u in unreadable {
                eprintln!("warning: {} is not a shard spec, and no shard runs from it: {}", u.key, u.reason);
            }
            Ok((shard_table(&view, None), Some(specs)))
        })?
    };
    let rows: Vec<ShardRow> = match specs {
        // The table's rows carry no labels: the specs say which shards match.
        Some(specs) => {
            let ids: std::collections::BTreeSet<String> =
                picked(specs, selector).into_iter().map(|c| c.spec.id).collect();
            rows.into_iter().filter(|r| ids.contains(&r.shard)).collect()
        }
        None if *selector != Selector::default() => bail!("--selector needs --etcd (the specs' labels live there)"),
        None => rows,
    };
    if format == Format::Json {
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

fn apply(target: &Target, desired: &[Desired], dry_run: bool) -> Result<()> {
    target.on_etcd(async |ks, keys| {
        let current = shard_specs::read(ks, keys).await?;
        let changes = shard_specs::plan(&current, desired)?;
        let mut out = std::io::stdout().lock();
        for change in &changes {
            writeln!(out, "{change}")?;
        }
        if dry_run {
            writeln!(out, "{} changes (dry run: nothing written)", changes.len())?;
            return Ok(());
        }
        let applied = shard_specs::apply(ks, keys, &changes).await?;
        writeln!(out, "{} changes applied (revision {})", applied.written, applied.revision)?;
        Ok(())
    })
}

fn unassign(target: &Target, selector: &Selector, mut what: Unassign, dry_run: bool) -> Result<()> {
    target.on_etcd(async |ks, keys| {
        let shards = picked(shard_specs::read(ks, keys).await?, selector);
        what.shards = Some(shards.into_iter().map(|c| c.spec.id).collect());
        let (remove, kept) = kshard_runtime::unassign::pick(&kshard_runtime::unassign::read(ks, keys).await?, &what);
        let mut out = std::io::stdout().lock();
        for a in &remove {
            let which = if what.failed { "FAILED replica" } else { "primary" };
            writeln!(out, "- {}: its {which} on {}", a.key.shard, a.key.member)?;
        }
        for why in &kept {
            writeln!(out, "= {why}")?;
        }
        if dry_run {
            writeln!(out, "{} to unassign (dry run: nothing written)", remove.len())?;
            return Ok(());
        }
        let removed = kshard_runtime::unassign::remove(ks, keys, &remove).await?;
        writeln!(out, "{removed} unassigned")?;
        if removed < remove.len() {
            bail!("{} changed since they were read and stay: run it again", remove.len() - removed);
        }
        Ok(())
    })
}

/// Shard `id`'s snapshot hints (`None`: none written yet).
async fn read_hints(ks: &EtcdKeyspace, keys: &Keys, id: &str) -> Result<Option<kshard_runtime::Hints>> {
    Ok(kshard_runtime::read_hints(ks, keys, id).await?.map(|(hints, _)| hints))
}

fn recover(target: &Target, kafka: &crate::connection::KafkaArgs, shard: &str, dir: &std::path::Path) -> Result<()> {
    let client = kafka.target()?.kafka;
    let path = dir.join(format!("{shard}.redb"));
    if path.exists() {
        bail!("{} exists: recover into a new file", path.display());
    }
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    target.on_etcd(async |ks, keys| {
        let specs = shard_specs::read(ks, keys).await?;
        let spec = specs.into_iter().find(|c| c.spec.id == shard).with_context(|| format!("no shard {shard}"))?.spec;
        let Some(log) = spec.recovery_log else {
            bail!("shard {shard} has no recovery log: its state is only on the member that runs it");
        };
        let hints = read_hints(ks, keys, shard).await?;
        let partitions = kshard_runtime::partitions::KafkaPartitions::new(client, Duration::from_secs(30));
        let store = kshard_runtime::RedbStore::open(&path)?;
        let recovered =
            kshard_runtime::recovery_log::recover(&partitions, &log, hints.as_ref(), store, Duration::from_secs(120))
                .await;
        let (player, recovered) = match recovered {
            Ok(done) => done,
            Err(e) => {
                let _ = std::fs::remove_file(&path);
                return Err(e).with_context(|| format!("recovering {shard}"));
            }
        };
        let keys_held = kshard_runtime::Store::scan(player.store(), None, usize::MAX)?.len();
        drop(player);
        let from = if recovered.from_snapshot { "its newest snapshot" } else { "the log's first record" };
        println!(
            "{shard}: {} records of {log} played from offset {} ({from}) to {}: {keys_held} keys in {}",
            recovered.records,
            recovered.from,
            recovered.to,
            path.display()
        );
        Ok(())
    })
}

fn prune(target: &Target, kafka: &crate::connection::KafkaArgs, selector: &Selector, dry_run: bool) -> Result<()> {
    use kshard_runtime::partitions::Partitions as _;
    let client = kafka.target()?.kafka;
    target.on_etcd(async |ks, keys| {
        let partitions = kshard_runtime::partitions::KafkaPartitions::new(client, Duration::from_secs(30));
        let (mut out, mut pruned) = (std::io::stdout().lock(), 0);
        for c in picked(shard_specs::read(ks, keys).await?, selector) {
            let id = &c.spec.id;
            let Some(log) = &c.spec.recovery_log else {
                writeln!(out, "= {id}: no recovery log, nothing to prune")?;
                continue;
            };
            let Some(hints) = read_hints(ks, keys, id).await? else {
                writeln!(out, "= {id}: no snapshot yet, nothing to prune")?;
                continue;
            };
            let (low, keep) =
                kshard_runtime::recovery_log::prune_point(&partitions, log, &hints, Duration::from_secs(30))
                    .await
                    .with_context(|| format!("{id}: where its log may be cut"))?;
            let Some(keep) = keep else {
                writeln!(out, "= {id}: {log} starts at {low}: nothing before its previous snapshot")?;
                continue;
            };
            writeln!(out, "- {id}: {log} records {low} to {} deleted", keep - 1)?;
            if !dry_run {
                partitions
                    .delete_before(&log.topic, log.partition, keep)
                    .await
                    .with_context(|| format!("{id}: deleting {log} before {keep}"))?;
                pruned += 1;
            }
        }
        if dry_run {
            writeln!(out, "(dry run: nothing deleted)")?;
        } else {
            writeln!(out, "{pruned} logs pruned")?;
        }
        Ok(())
    })
}

fn edit(target: &Target, selector: &Selector) -> Result<()> {
    let shards = target.on_etcd(async |ks, keys| Ok(shard_specs::read(ks, keys).await?))?;
    let text = crate::shards_file::write(&picked(shards, selector))?;
    let file = tempfile::Builder::new().prefix("kshard-shards-").suffix(".yaml").tempfile()?;
    std::fs::write(file.path(), &text)?;
    let editor = std::env::var("EDITOR").unwrap_or_else(|_| "vi".into());
    let status = std::process::Command::new("sh")
        .arg("-c")
        .arg(format!("{editor} \"$1\""))
        .arg("sh")
        .arg(file.path())
        .status()
        .with_context(|| format!("running {editor}"))?;
    if !status.success() {
        bail!("{editor} exited with {status}: nothing applied");
    }
    let edited = std::fs::read_to_string(file.path())?;
    if edited == text {
        println!("no change");
        return Ok(());
    }
    let desired = crate::shards_file::parse(&edited).context("the edited specs")?;
    apply(target, &desired, false)
}
