//! [`Delivery`]: one written record's outcome, to wait for — its offset, or
//! why it was not written. Both writers fill it: librdkafka's producer
//! (its delivery callback, one slot per record) and kshard's own
//! ([`crate::Writer`], one slot per batch, each record its index in it).

use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use crate::error::{Error, Result};

/// Why a record was not written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Failure {
    /// The broker answered with Kafka's error `code` (kshard's writer).
    Kafka(i16),
    /// Anything else, in the writer's words.
    Other(String),
}

/// The outcome of one record, or of one batch, filled once by the writer.
#[derive(Debug, Default)]
pub(crate) struct Delivered {
    /// Someone waits for this record (else its failure is only logged).
    pub(crate) tracked: bool,
    /// The first record's offset, or why nothing was written.
    outcome: Mutex<Option<std::result::Result<i64, Failure>>>,
    /// When the writer reported the outcome (set before it).
    at: std::sync::OnceLock<Instant>,
    done: std::sync::Condvar,
    /// Wakes the task awaiting the outcome ([`Delivery::delivered`]).
    arrived: tokio::sync::Notify,
}

impl Delivered {
    /// A slot someone waits on.
    pub(crate) fn tracked() -> Arc<Self> {
        Arc::new(Delivered { tracked: true, ..Delivered::default() })
    }

    /// Sets the outcome (the first one set stays) and wakes the waiters.
    pub(crate) fn resolve(&self, outcome: std::result::Result<i64, Failure>) {
        let mut slot = self.outcome.lock().unwrap_or_else(PoisonError::into_inner);
        if slot.is_some() {
            return;
        }
        let _ = self.at.set(Instant::now());
        *slot = Some(outcome);
        drop(slot);
        self.done.notify_all();
        self.arrived.notify_waiters();
    }
}

/// One appended record's delivery: wait for its offset, or why it failed.
/// Waiting for one record does not wait for the others a shared writer
/// holds (a member's 50 shards append through one writer).
#[derive(Debug)]
pub struct Delivery {
    slot: Arc<Delivered>,
    /// The record's place in its batch (0 for librdkafka's, one slot each).
    index: i64,
    /// Where it went, for errors.
    to: String,
}

impl Delivery {
    pub(crate) fn new(slot: Arc<Delivered>, index: i64, to: String) -> Self {
        Delivery { slot, index, to }
    }

    /// The record's offset once the broker acknowledged it (−1 when the
    /// broker said it had the batch already without saying where); an
    /// error naming the reason when it was not written (too large, no
    /// leader within the writer's timeout, refused, fenced), or when
    /// `timeout` passed.
    pub fn wait(&self, timeout: Duration) -> Result<i64> {
        let deadline = Instant::now() + timeout;
        let mut outcome = self.slot.outcome.lock().unwrap_or_else(PoisonError::into_inner);
        loop {
            if let Some(result) = self.result(outcome.as_ref()) {
                return result;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(Error::Refused {
                    step: format!("delivering a record to {}", self.to),
                    message: format!("not acknowledged within {} ms", timeout.as_millis()),
                });
            }
            outcome = self.slot.done.wait_timeout(outcome, left).unwrap_or_else(PoisonError::into_inner).0;
        }
    }

    /// [`Delivery::wait`] for an async task, without a timeout of its own
    /// (the writer's own timeout ends every record's wait; the caller may
    /// bound it with its own timer). Cancel-safe.
    pub async fn delivered(&self) -> Result<i64> {
        loop {
            // Asked for before looking, so an outcome set between the look
            // and the wait still wakes it.
            let arrived = self.slot.arrived.notified();
            tokio::pin!(arrived);
            arrived.as_mut().enable();
            if let Some(result) = self.result(self.slot.outcome.lock().unwrap_or_else(PoisonError::into_inner).as_ref())
            {
                return result;
            }
            arrived.await;
        }
    }

    /// The outcome and when the writer reported it, if it has; never waits.
    pub fn answered(&self) -> Option<(Result<i64>, Instant)> {
        let outcome = self.slot.outcome.lock().unwrap_or_else(PoisonError::into_inner);
        let result = self.result(outcome.as_ref())?;
        Some((result, self.slot.at.get().copied().unwrap_or_else(Instant::now)))
    }

    fn result(&self, outcome: Option<&std::result::Result<i64, Failure>>) -> Option<Result<i64>> {
        let step = || format!("delivering a record to {}", self.to);
        Some(match outcome? {
            Ok(base) if *base < 0 => Ok(-1),
            Ok(base) => Ok(base + self.index),
            Err(Failure::Kafka(code)) => Err(Error::Kafka { step: step(), code: *code }),
            Err(Failure::Other(why)) => Err(Error::Refused { step: step(), message: why.clone() }),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_record_of_a_batch_gets_its_own_offset_and_the_first_outcome_stays() {
        let slot = Delivered::tracked();
        let (first, third) =
            (Delivery::new(Arc::clone(&slot), 0, "t/0".into()), Delivery::new(Arc::clone(&slot), 2, "t/0".into()));
        assert!(first.answered().is_none());
        slot.resolve(Ok(40));
        slot.resolve(Err(Failure::Kafka(6)));
        assert_eq!(first.wait(Duration::ZERO).expect("written"), 40);
        assert_eq!(third.wait(Duration::ZERO).expect("written"), 42);
    }

    #[test]
    fn a_failure_keeps_kafkas_code() {
        let slot = Delivered::tracked();
        let d = Delivery::new(Arc::clone(&slot), 0, "t/1".into());
        slot.resolve(Err(Failure::Kafka(90)));
        match d.wait(Duration::ZERO) {
            Err(Error::Kafka { code: 90, step }) => assert_eq!(step, "delivering a record to t/1"),
            other => panic!("{other:?}"),
        }
        assert!(d.wait(Duration::ZERO).expect_err("fenced").is_fenced());
    }

    #[test]
    fn an_async_waiter_wakes_when_the_outcome_is_set_from_another_thread() {
        let slot = Delivered::tracked();
        let d = Delivery::new(Arc::clone(&slot), 1, "t/2".into());
        let setter = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(20));
            slot.resolve(Ok(9));
        });
        let offset = futures_executor::block_on(d.delivered()).expect("written");
        setter.join().expect("joins");
        assert_eq!(offset, 10);
    }
}
