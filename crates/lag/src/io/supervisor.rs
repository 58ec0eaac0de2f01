//! Supervised workers, each a task of the service's runtime: a worker that
//! returns an error or panics is logged and counted with its kind
//! ([`crate::failure::FailureKind`]), reported to
//! [`Readiness`](crate::Readiness) (so `/ready` says why lag is not
//! current), and restarted until the service's [`Shutdown`]: after a backoff
//! that grows with each failure in a row (1 s, 2 s, 4 s, … up to 30 s), or
//! every 30 s for a failure only someone can mend (an ACL, settings). A
//! worker is one life after another: a future ([`spawn`]), or a blocking
//! body run on tokio's blocking pool ([`blocking`]) for the workers that
//! call Kafka's blocking clients.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};

use tokio::task::JoinHandle;
use tracing::{Instrument, error, info};

use super::error::WorkerError;
use super::shutdown::Shutdown;
use crate::monitor::Monitor;

/// One life of a worker: `Ok` once it saw the shutdown, else why it failed.
pub(crate) type Life = Pin<Box<dyn Future<Output = Result<(), WorkerError>> + Send>>;

/// Runs the lives `body` makes until `shutdown`, each in `span`. A life
/// returns `Ok(())` only when it saw `shutdown`; an error or a panic
/// restarts it after the backoff, which grows with failures in a row (see
/// [`crate::Health`]). A life reports [`crate::readiness::Event::WorkerRunning`]
/// once it has shown progress.
pub(crate) fn spawn(
    name: &'static str,
    monitor: Arc<Monitor>,
    shutdown: Shutdown,
    span: tracing::Span,
    body: impl FnMut() -> Life + Send + 'static,
) -> JoinHandle<()> {
    let failed = move |error: &WorkerError| monitor.worker_failed(name, error.failure());
    tokio::spawn(restarting(name, shutdown, body, failed).instrument(span))
}

/// [`spawn`] for a worker whose failures are not the lag's (kminion's
/// cluster families, the end-to-end probe): logged and restarted the same
/// way, never reported to readiness, so `/ready` does not depend on them.
pub(crate) fn spawn_beside(
    name: &'static str,
    shutdown: Shutdown,
    span: tracing::Span,
    body: impl FnMut() -> Life + Send + 'static,
) -> JoinHandle<()> {
    let mut in_a_row = 0u32;
    let failed = move |_: &WorkerError| {
        in_a_row = in_a_row.saturating_add(1);
        in_a_row
    };
    tokio::spawn(restarting(name, shutdown, body, failed).instrument(span))
}

/// The lives of a worker whose body blocks: each runs `run` on `worker`
/// on tokio's blocking pool, in the span of its supervisor.
pub(crate) fn blocking<W: Send + 'static>(
    worker: W,
    run: fn(&mut W) -> Result<(), WorkerError>,
) -> impl FnMut() -> Life + Send + 'static {
    // A life that panicked leaves the worker as it was; the next goes on.
    let worker = Arc::new(Mutex::new(worker));
    move || {
        let (worker, span) = (Arc::clone(&worker), tracing::Span::current());
        Box::pin(async move {
            let life = move || span.in_scope(|| run(&mut worker.lock().unwrap_or_else(PoisonError::into_inner)));
            tokio::task::spawn_blocking(life).await.unwrap_or_else(|e| Err(WorkerError::Panicked(panic_of(e))))
        })
    }
}

/// What a life that did not finish said.
fn panic_of(e: tokio::task::JoinError) -> String {
    if !e.is_panic() {
        return "cancelled".to_owned();
    }
    let panic = e.into_panic();
    let what = panic
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic".to_owned());
    format!("panicked: {what}")
}

/// The loop of [`spawn`]: `failed` hears each failure and says how many
/// came in a row; the failure's kind says how long to wait.
async fn restarting(
    name: &'static str,
    shutdown: Shutdown,
    mut body: impl FnMut() -> Life + Send + 'static,
    mut failed: impl FnMut(&WorkerError) -> u32 + Send + 'static,
) {
    while !shutdown.is_set() {
        // Its own task: a panic ends the life, not the supervisor.
        let life = tokio::spawn(body().in_current_span());
        let error = match life.await {
            Ok(Ok(())) => continue,
            Ok(Err(e)) => e,
            Err(e) => WorkerError::Panicked(panic_of(e)),
        };
        let failures = failed(&error);
        let kind = error.kind();
        let wait = kind.response().wait(failures);
        error!(
            worker = name,
            kind = kind.label(),
            failures,
            restart_in_seconds = wait.as_secs(),
            error = %error,
            "worker failed; restarting"
        );
        if !shutdown.sleep_async(wait).await {
            info!(worker = name, "restarting worker");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU32, Ordering};
    use std::time::Duration;

    /// A worker whose first life panics and whose second works until the shutdown.
    struct Flaky {
        runs: Arc<AtomicU32>,
        monitor: Arc<Monitor>,
        shutdown: Shutdown,
    }

    fn flaky_life(w: &mut Flaky) -> Result<(), WorkerError> {
        if w.runs.fetch_add(1, Ordering::SeqCst) == 0 {
            panic!("first run dies");
        }
        w.monitor.step(crate::readiness::Event::WorkerRunning("test worker"));
        while !w.shutdown.sleep(Duration::from_secs(60)) {}
        Ok(())
    }

    // On the real clock: a blocking life keeps a paused clock from advancing.
    #[tokio::test]
    async fn a_failing_worker_is_reported_and_restarted_until_it_recovers() {
        let monitor = Arc::new(Monitor::new(crate::MonitorSettings::default()));
        let shutdown = Shutdown::default();
        let runs = Arc::new(AtomicU32::new(0));
        let worker = Flaky { runs: Arc::clone(&runs), monitor: Arc::clone(&monitor), shutdown: shutdown.clone() };
        let task = spawn(
            "test worker",
            Arc::clone(&monitor),
            shutdown.clone(),
            tracing::Span::none(),
            blocking(worker, flaky_life),
        );
        let problem = loop {
            if let Some(p) = monitor.problem() {
                break p;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        };
        assert!(problem.contains("test worker") && problem.contains("panicked: first run dies"), "{problem}");
        let counted: Vec<_> = monitor.failure_counts().iter().collect();
        assert_eq!(counted, [("test worker", crate::failure::FailureKind::Panic, 1)]);
        // The backoff (1 s), then the second life.
        while runs.load(Ordering::SeqCst) < 2 || monitor.problem().is_some() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        shutdown.trigger();
        task.await.expect("the supervisor ends");
        assert_eq!(runs.load(Ordering::SeqCst), 2);
    }

    /// A worker refused by an ACL is restarted every 30 s, not after 1 s:
    /// asking again fast does not help until someone grants it.
    #[tokio::test(start_paused = true)]
    async fn a_refused_worker_holds_rather_than_retrying_fast() {
        let monitor = Arc::new(Monitor::new(crate::MonitorSettings::default()));
        let shutdown = Shutdown::default();
        let lives = Arc::new(AtomicU32::new(0));
        let (counted, stop) = (Arc::clone(&lives), shutdown.clone());
        let task = spawn("reader", Arc::clone(&monitor), shutdown.clone(), tracing::Span::none(), move || {
            let (life, stop) = (counted.fetch_add(1, Ordering::SeqCst), stop.clone());
            Box::pin(async move {
                if life == 0 {
                    let source = Box::new(kshard_kafka::Error::Kafka { step: "reading t/0".into(), code: 29 });
                    return Err(WorkerError::ReadDenied { topic: "t".into(), source });
                }
                stop.wait().await;
                Ok(())
            })
        });
        tokio::time::sleep(Duration::from_secs(29)).await;
        assert_eq!(lives.load(Ordering::SeqCst), 1, "held");
        tokio::time::sleep(Duration::from_secs(2)).await;
        assert_eq!(lives.load(Ordering::SeqCst), 2, "tried again after 30 s");
        let counted: Vec<_> = monitor.failure_counts().iter().collect();
        assert_eq!(counted, [("reader", crate::failure::FailureKind::Authorization, 1)]);
        shutdown.trigger();
        task.await.expect("the supervisor ends");
    }

    #[tokio::test(start_paused = true)]
    async fn an_async_worker_stops_at_shutdown_without_a_failure() {
        let shutdown = Shutdown::default();
        let lives = Arc::new(AtomicU32::new(0));
        let (counted, stop) = (Arc::clone(&lives), shutdown.clone());
        let task = spawn_beside("async worker", shutdown.clone(), tracing::Span::none(), move || {
            counted.fetch_add(1, Ordering::SeqCst);
            let stop = stop.clone();
            Box::pin(async move {
                stop.wait().await;
                Ok(())
            })
        });
        tokio::time::sleep(Duration::from_secs(10)).await;
        shutdown.trigger();
        task.await.expect("the supervisor ends");
        assert_eq!(lives.load(Ordering::SeqCst), 1);
    }
}
