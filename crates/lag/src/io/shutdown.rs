//! The service's one shutdown signal. Every task of a cluster's service
//! holds a [`Shutdown`]: async tasks wait on it ([`Shutdown::wait`]), the
//! blocking workers (Kafka's clients block) sleep on it
//! ([`Shutdown::sleep`]) and wake the moment it is triggered, not at their
//! next poll. A [`Shutdown::child`] stops with its parent, or alone (a
//! member's grower with its member; the OTLP export before the workers).

use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;

/// A shutdown signal, shared by cloning (see the module's doc).
#[derive(Debug, Clone, Default)]
pub(crate) struct Shutdown {
    token: CancellationToken,
    /// Wakes blocking sleepers; shared by a signal and its children.
    wake: Arc<(Mutex<()>, Condvar)>,
}

impl Shutdown {
    /// Triggers this signal and its children's.
    pub(crate) fn trigger(&self) {
        self.token.cancel();
        // Under the lock: a sleeper is either before its check (and sees the
        // token cancelled) or waiting (and is woken).
        let _guard = self.wake.0.lock().unwrap_or_else(PoisonError::into_inner);
        self.wake.1.notify_all();
    }

    /// Whether the signal was triggered.
    pub(crate) fn is_set(&self) -> bool {
        self.token.is_cancelled()
    }

    /// Blocks for `wait`, or until the signal is triggered; whether it was.
    pub(crate) fn sleep(&self, wait: Duration) -> bool {
        let until = Instant::now() + wait;
        let mut guard = self.wake.0.lock().unwrap_or_else(PoisonError::into_inner);
        loop {
            if self.is_set() {
                return true;
            }
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return false;
            }
            guard = self.wake.1.wait_timeout(guard, left).unwrap_or_else(PoisonError::into_inner).0;
        }
    }

    /// Until the signal is triggered.
    pub(crate) async fn wait(&self) {
        self.token.cancelled().await;
    }

    /// Sleeps `wait` unless triggered first; whether it was.
    pub(crate) async fn sleep_async(&self, wait: Duration) -> bool {
        tokio::select! {
            () = self.token.cancelled() => true,
            () = tokio::time::sleep(wait) => self.is_set(),
        }
    }

    /// A signal triggered with this one, or on its own.
    pub(crate) fn child(&self) -> Shutdown {
        Shutdown { token: self.token.child_token(), wake: Arc::clone(&self.wake) }
    }

    /// The signal as a future, for an API that takes one.
    pub(crate) fn stopped(&self) -> impl std::future::Future<Output = ()> + Send + 'static {
        self.token.clone().cancelled_owned()
    }
}

/// Triggers its signal when dropped: a life that ends by a panic, or a
/// future dropped before its end, still stops what it started.
#[derive(Debug)]
pub(crate) struct TriggerOnDrop(pub(crate) Shutdown);

impl Drop for TriggerOnDrop {
    fn drop(&mut self) {
        self.0.trigger();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_blocking_sleep_ends_when_triggered_not_at_its_end() {
        let shutdown = Shutdown::default();
        let other = shutdown.clone();
        let started = Instant::now();
        let trigger = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(50));
            other.trigger();
        });
        assert!(shutdown.sleep(Duration::from_secs(60)));
        assert!(started.elapsed() < Duration::from_secs(30), "woken by the trigger");
        trigger.join().expect("joins");
        assert!(shutdown.sleep(Duration::from_secs(60)), "set: no wait at all");
    }

    #[test]
    fn a_sleep_untriggered_lasts_its_time() {
        let shutdown = Shutdown::default();
        let started = Instant::now();
        assert!(!shutdown.sleep(Duration::from_millis(20)));
        assert!(started.elapsed() >= Duration::from_millis(20));
    }

    #[test]
    fn a_child_stops_with_its_parent_and_alone_without_it() {
        let (parent, alone) = (Shutdown::default(), Shutdown::default());
        let (child, other) = (parent.child(), alone.child());
        other.trigger();
        assert!(other.is_set() && !alone.is_set(), "a child stops alone");
        let sleeping = std::thread::spawn(move || child.sleep(Duration::from_secs(60)));
        std::thread::sleep(Duration::from_millis(20));
        parent.trigger();
        assert!(sleeping.join().expect("joins"), "woken by its parent");
    }

    #[test]
    fn a_guard_dropped_by_a_panic_triggers() {
        let shutdown = Shutdown::default();
        let guarded = shutdown.clone();
        let died = std::thread::spawn(move || {
            let _guard = TriggerOnDrop(guarded);
            panic!("a life dies");
        });
        assert!(died.join().is_err());
        assert!(shutdown.is_set());
    }

    #[tokio::test(start_paused = true)]
    async fn an_async_sleep_ends_when_triggered() {
        let shutdown = Shutdown::default();
        assert!(!shutdown.sleep_async(Duration::from_secs(5)).await);
        let other = shutdown.clone();
        tokio::spawn(async move { other.trigger() });
        assert!(shutdown.sleep_async(Duration::from_secs(3600)).await);
        shutdown.wait().await;
        shutdown.stopped().await;
    }
}
