//! The I/O of one replica, as an async task of the member's runtime (a
//! member with hundreds of replicas runs them on a few threads, and a
//! replica with nothing to read costs nothing until its reader says it is
//! readable): it opens the replica's store, plays the recovery log to its
//! head and tails it, and on command hands off, recovers and runs consumer
//! transactions over the shard's sources. It reports [`Event`]s to the
//! replica's state machine and takes its [`Command`]s; the state machine
//! decides. Every wait is on tokio's clock. The store's writes (redb) and
//! the application's callbacks run on the task: they are short and do not
//! wait on the network.
//!
//! The store is the replica's own, named `{shard}@{log topic}-{log
//! partition}` on the member's [`Disk`] (a redb file in its data directory): a replica assigned again on the same member (a restart on
//! its data directory) goes on from the store's checkpoint and plays only what
//! the log holds after it — unless a newer snapshot is closer, or the log no
//! longer holds what follows the checkpoint (see [`crate::recovery_log::replica`]).

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc::UnboundedReceiver;
use tokio::sync::mpsc::error::TryRecvError;

use crate::model::ShardSpec;
use crate::recovery_log::replica::{Log, ReplicaError};
use crate::replica::Event;
use crate::replica_failure::{FailureKind, ReplicaFailure};
use crate::replica_log::{Parts, ReplicaLog};
use crate::sources::Sources;
use crate::unlogged::NoLog;
use crate::worker_context::WorkerContext;

/// What the state machine tells the worker to do next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Command {
    AppendHandOff,
    Follow,
    OpenStore,
    StartSources,
    TearDown,
}

/// How long an idle replica waits before it publishes its progress again.
const IDLE_WAIT: Duration = Duration::from_secs(1);

/// Where a replica's reports go.
pub(crate) type Report = Arc<dyn Fn(Event) + Send + Sync>;

/// Runs one replica's I/O as a task until torn down; reports through
/// `report`, the last report being [`Event::TornDown`].
pub(crate) fn spawn(ctx: Arc<WorkerContext>, spec: ShardSpec, commands: UnboundedReceiver<Command>, report: Report) {
    tokio::spawn(async move {
        // The replica's own task, so that one that panics (an application's
        // panic) fails its replica, like one that returns an error.
        let (c, s, r) = (Arc::clone(&ctx), spec.clone(), Arc::clone(&report));
        let served = tokio::spawn(async move { serve(&c, &s, commands, &*r).await }).await;
        let failure = match served {
            Ok(Ok(())) => None,
            Ok(Err(e)) => Some(ReplicaFailure::new(e.kind(), e.to_string())),
            Err(e) => match e.try_into_panic() {
                Ok(panic) => {
                    let what = panic
                        .downcast_ref::<&str>()
                        .map(|s| (*s).to_owned())
                        .or_else(|| panic.downcast_ref::<String>().cloned())
                        .unwrap_or_default();
                    Some(ReplicaFailure::new(FailureKind::Panic, format!("panicked: {what}")))
                }
                Err(e) => Some(ReplicaFailure::new(FailureKind::Runtime, format!("its task ended: {e}"))),
            },
        };
        if let Some(e) = failure {
            tracing::error!(shard = %spec.id, kind = e.kind.name(), error = %e, "replica failed");
            report(Event::Failed(e));
        }
        ctx.progress.lock().unwrap_or_else(std::sync::PoisonError::into_inner).remove(&spec.id);
        report(Event::TornDown);
    });
}

/// True when a tear-down was asked for (or the state machine is gone).
fn torn_down(commands: &mut UnboundedReceiver<Command>) -> bool {
    matches!(commands.try_recv(), Ok(Command::TearDown) | Err(TryRecvError::Disconnected))
}

async fn serve(
    ctx: &WorkerContext,
    spec: &ShardSpec,
    commands: UnboundedReceiver<Command>,
    report: &(dyn Fn(Event) + Send + Sync),
) -> Result<(), ReplicaError> {
    match &spec.recovery_log {
        Some(log) => serve_with(ctx, spec, &mut Log::open(ctx, spec, log).await?, commands, report).await,
        None => serve_with(ctx, spec, &mut NoLog::open(ctx, spec)?, commands, report).await,
    }
}

/// The replica's life once its store is open, its readers viewing the store
/// meanwhile (a store replaced later, played again from a snapshot, is the
/// same store to them).
async fn serve_with(
    ctx: &WorkerContext,
    spec: &ShardSpec,
    log: &mut impl ReplicaLog,
    commands: UnboundedReceiver<Command>,
    report: &(dyn Fn(Event) + Send + Sync),
) -> Result<(), ReplicaError> {
    let views = log.views();
    if let Some(v) = &views {
        ctx.views.insert(&spec.id, Arc::clone(v));
    }
    let served = run(ctx, spec, log, commands, report).await;
    if let Some(v) = &views {
        ctx.views.remove(&spec.id, v);
    }
    log.stopped();
    served
}

/// The replica's life once its store is open (see [`serve_with`]).
async fn run(
    ctx: &WorkerContext,
    spec: &ShardSpec,
    log: &mut impl ReplicaLog,
    mut commands: UnboundedReceiver<Command>,
    report: &(dyn Fn(Event) + Send + Sync),
) -> Result<(), ReplicaError> {
    if !log.play_to_head(|| torn_down(&mut commands)).await? {
        return Ok(());
    }
    report(Event::PlayedToHead);
    let mut author = None;
    let mut sources: Option<Sources> = None;
    // A command taken while waiting, handled first.
    let mut taken: Option<Command> = None;
    loop {
        let command = match taken.take() {
            Some(c) => Ok(c),
            None => commands.try_recv(),
        };
        match command {
            // The transaction in flight is committed and in the store first.
            Ok(Command::TearDown) | Err(TryRecvError::Disconnected) => return log.finish_commit().await,
            Ok(Command::Follow) => log.follow().await?,
            Ok(Command::AppendHandOff) => {
                author = Some(log.hand_off().await?);
                report(Event::HandedOff);
            }
            // The store is the one playback filled; its checkpoint is the player's.
            Ok(Command::OpenStore) => {
                let offsets = log.offsets().to_vec();
                let Parts { store, app, .. } = log.parts();
                app.recovered(store, &offsets).map_err(|error| ReplicaError::Application {
                    at: "recovering the application's state".into(),
                    error,
                })?;
                report(Event::Recovered);
            }
            Ok(Command::StartSources) => sources = Some(Sources::open(ctx, spec, log.offsets())?),
            Err(TryRecvError::Empty) => {}
        }
        // Wait for records or a command; a command ends the wait (the
        // waits are cancel-safe), never a transaction or a record's play.
        match (&mut sources, author) {
            (Some(s), Some(author)) => {
                if s.drained {
                    // Nothing to take meanwhile: the last commit is waited for now.
                    log.finish_commit().await?;
                    tokio::select! {
                        command = commands.recv() => {
                            taken = Some(command.unwrap_or(Command::TearDown));
                            continue;
                        }
                        _ = tokio::time::timeout(IDLE_WAIT, s.reader.readable()) => {}
                    }
                }
                s.transaction(spec, log, author).await?;
            }
            _ => tokio::select! {
                command = commands.recv() => taken = Some(command.unwrap_or(Command::TearDown)),
                tailed = log.tail(IDLE_WAIT) => tailed?,
            },
        }
    }
}
