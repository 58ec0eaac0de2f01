//! Faults a test puts between a member and the world it talks to. A [`Gate`]
//! is a passage, [`Passage::Open`], [`Passage::Closed`] (calls fail, as with
//! a network cut or a dead process) or [`Passage::Held`] (calls wait until it
//! opens or closes, as with a process paused by a GC or SIGSTOP: nothing it
//! sends arrives meanwhile, and what it sent before the pause lands after).
//! [`GatedKeyspace`], [`GatedPartitions`] and [`GatedDisk`] put a gate before
//! a keyspace, a log and a disk: the simulation in `tests/simulation/`
//! gives each incarnation of a member its own, and a crash closes them for
//! good. A disk's store calls are local and never wait: a held gate lets
//! them through (a paused process touches its disk only once resumed).

mod disk;
mod keyspace;
mod partitions;

pub use disk::GatedDisk;
pub use keyspace::GatedKeyspace;
pub use partitions::GatedPartitions;

use std::sync::Arc;

use tokio::sync::watch;

/// How calls go through a [`Gate`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Passage {
    /// They go through.
    Open,
    /// They fail.
    Closed,
    /// They wait.
    Held,
}

/// A passage calls go through; clones share it.
#[derive(Debug, Clone)]
pub struct Gate {
    passage: Arc<watch::Sender<Passage>>,
}

impl Default for Gate {
    fn default() -> Self {
        Gate { passage: Arc::new(watch::Sender::new(Passage::Open)) }
    }
}

impl Gate {
    /// Sets how calls go through from now on (waiting calls go on at once).
    pub fn set(&self, passage: Passage) {
        self.passage.send_replace(passage);
    }

    /// How calls go through now.
    pub fn now(&self) -> Passage {
        *self.passage.borrow()
    }

    /// Waits while held; `Err` when closed.
    pub async fn pass(&self) -> Result<(), Closed> {
        let mut passage = self.passage.subscribe();
        let now = *passage.wait_for(|p| *p != Passage::Held).await.map_err(|_| Closed)?;
        if now == Passage::Open { Ok(()) } else { Err(Closed) }
    }

    /// Resolves once the passage is no longer `from`.
    pub(crate) async fn left(&self, from: Passage) {
        let mut passage = self.passage.subscribe();
        let _ = passage.wait_for(|p| *p != from).await;
    }
}

/// A call refused by a closed [`Gate`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("cut off by the test's fault gate")]
pub struct Closed;

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_held_gate_makes_calls_wait_until_it_opens_or_closes() {
        let gate = Gate::default();
        assert_eq!(gate.pass().await, Ok(()));
        gate.set(Passage::Held);
        let waiting = tokio::spawn({
            let gate = gate.clone();
            async move { gate.pass().await }
        });
        tokio::time::sleep(std::time::Duration::from_secs(5)).await;
        assert!(!waiting.is_finished(), "a held call waits");
        gate.set(Passage::Closed);
        assert_eq!(waiting.await.expect("joins"), Err(Closed), "and fails when the gate closes");
        gate.set(Passage::Open);
        assert_eq!(gate.pass().await, Ok(()));
    }
}
