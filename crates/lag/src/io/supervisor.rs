//! Supervised worker threads: a worker that returns an error or panics is
//! logged, reported to [`Readiness`](crate::Readiness) (so `/ready` says why lag is not
//! current), and restarted after a backoff that grows with each failure in a
//! row (1 s, 2 s, 4 s, … up to 30 s) until the service stops.

use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use tracing::{error, info};

use crate::monitor::Monitor;

/// The wait before restart number `failures` (1-based).
pub(crate) fn backoff(failures: u32) -> Duration {
    Duration::from_secs(1u64 << failures.saturating_sub(1).min(5)).min(Duration::from_secs(30))
}

/// Sleeps `wait`, or until `stop` is set, whichever comes first.
pub(crate) fn sleep_unless_stopped(stop: &AtomicBool, wait: Duration) {
    let until = Instant::now() + wait;
    while Instant::now() < until && !stop.load(Ordering::Acquire) {
        std::thread::sleep(Duration::from_millis(50).min(until.saturating_duration_since(Instant::now())));
    }
}

/// Runs `body` on a thread named `name` until `stop` is set. `body` returns
/// `Ok(())` only when it saw `stop`; an error or a panic restarts it after the
/// backoff, which grows with failures in a row (see [`crate::Health`]). `body`
/// reports [`crate::readiness::Event::WorkerRunning`] once it has shown progress.
pub(crate) fn spawn(
    name: &'static str,
    monitor: Arc<Monitor>,
    stop: Arc<AtomicBool>,
    body: impl FnMut() -> Result<(), super::error::WorkerError> + Send + 'static,
) -> std::io::Result<JoinHandle<()>> {
    restarting(name, stop, body, move |error| monitor.worker_failed(name, error))
}

/// [`spawn`] for a worker whose failures are not the lag's (kminion's
/// cluster families, the end-to-end probe): logged and restarted the same
/// way, never reported to readiness, so `/ready` does not depend on them.
pub(crate) fn spawn_beside(
    name: &'static str,
    stop: Arc<AtomicBool>,
    body: impl FnMut() -> Result<(), super::error::WorkerError> + Send + 'static,
) -> std::io::Result<JoinHandle<()>> {
    let mut in_a_row = 0u32;
    restarting(name, stop, body, move |_| {
        in_a_row = in_a_row.saturating_add(1);
        in_a_row
    })
}

/// The loop of [`spawn`]: `failed` hears each failure and says how many
/// came in a row.
fn restarting(
    name: &'static str,
    stop: Arc<AtomicBool>,
    mut body: impl FnMut() -> Result<(), super::error::WorkerError> + Send + 'static,
    mut failed: impl FnMut(String) -> u32 + Send + 'static,
) -> std::io::Result<JoinHandle<()>> {
    std::thread::Builder::new().name(name.replace(' ', "-")).spawn(move || {
        while !stop.load(Ordering::Acquire) {
            let outcome = std::panic::catch_unwind(AssertUnwindSafe(&mut body));
            let error = match outcome {
                Ok(Ok(())) => continue,
                Ok(Err(e)) => e.to_string(),
                Err(panic) => {
                    let what = panic
                        .downcast_ref::<&str>()
                        .map(|s| (*s).to_owned())
                        .or_else(|| panic.downcast_ref::<String>().cloned())
                        .unwrap_or_else(|| "a panic".to_owned());
                    format!("panicked: {what}")
                }
            };
            let failures = failed(error.clone());
            let wait = backoff(failures);
            error!(worker = name, failures, restart_in_seconds = wait.as_secs(), error = %error, "worker failed; restarting");
            sleep_unless_stopped(&stop, wait);
            if !stop.load(Ordering::Acquire) {
                info!(worker = name, "restarting worker");
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_up_to_thirty_seconds() {
        let waits: Vec<u64> = (1..=8).map(|n| backoff(n).as_secs()).collect();
        assert_eq!(waits, [1, 2, 4, 8, 16, 30, 30, 30]);
    }

    #[test]
    fn a_failing_worker_is_reported_and_restarted_until_it_recovers() {
        let monitor = Arc::new(Monitor::new(crate::MonitorSettings::default()));
        let stop = Arc::new(AtomicBool::new(false));
        let runs = Arc::new(std::sync::atomic::AtomicU32::new(0));
        let (m, s, r) = (Arc::clone(&monitor), Arc::clone(&stop), Arc::clone(&runs));
        let handle = spawn("test worker", Arc::clone(&monitor), Arc::clone(&stop), move || {
            if r.fetch_add(1, Ordering::SeqCst) == 0 {
                panic!("first run dies");
            }
            // The second run comes up, says so, and works until told to stop.
            m.step(crate::readiness::Event::WorkerRunning("test worker"));
            while !s.load(Ordering::Acquire) {
                std::thread::sleep(Duration::from_millis(5));
            }
            Ok(())
        })
        .expect("spawn");
        let deadline = Instant::now() + Duration::from_secs(10);
        let problem = loop {
            if let Some(p) = monitor.problem() {
                break p;
            }
            assert!(Instant::now() < deadline, "the failure was never reported");
            std::thread::sleep(Duration::from_millis(5));
        };
        assert!(problem.contains("test worker") && problem.contains("panicked: first run dies"), "{problem}");
        while runs.load(Ordering::SeqCst) < 2 || monitor.problem().is_some() {
            assert!(Instant::now() < deadline, "not restarted, or still reported as failed");
            std::thread::sleep(Duration::from_millis(5));
        }
        stop.store(true, Ordering::Release);
        handle.join().expect("joins");
        assert_eq!(runs.load(Ordering::SeqCst), 2);
    }
}
