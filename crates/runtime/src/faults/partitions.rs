//! A log behind two [`Gate`]s, one for every call and one for appends only
//! (a member whose writes fail while it still reads). Appends made while a
//! gate is held land in order once it opens, as a paused process's queued
//! records do when it resumes; a closed gate fails them.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use kshard_kafka::{Error, Isolation};
use tokio::sync::watch;

use super::{Closed, Gate, Passage};
use crate::partitions::{
    Appended, AppendedOf, Ends, OutBatch, PartitionRead, Partitions, Pending, Polled, Readable, TxnWrite,
};

fn refused(step: &str) -> Error {
    Error::Refused { step: step.to_owned(), message: Closed.to_string() }
}

/// An append waiting for its gates to open.
#[derive(Debug)]
struct Queued {
    topic: String,
    partition: i32,
    key: Vec<u8>,
    value: Option<Vec<u8>>,
    landed: watch::Sender<Option<Result<i64, String>>>,
}

#[derive(Debug, Default)]
struct Queue {
    appends: VecDeque<Queued>,
    /// A task is landing the queue.
    landing: bool,
}

/// `inner` as a member behind `gate` (every call) and `writes` (appends)
/// reaches it.
#[derive(Debug, Clone)]
pub struct GatedPartitions {
    inner: Arc<dyn Partitions>,
    gate: Gate,
    writes: Gate,
    queue: Arc<Mutex<Queue>>,
}

impl GatedPartitions {
    /// `inner`, reached through `gate`; appends through `writes` too.
    pub fn new(inner: Arc<dyn Partitions>, gate: Gate, writes: Gate) -> Self {
        GatedPartitions { inner, gate, writes, queue: Arc::default() }
    }

    /// Both gates passed: `Ok(true)` open, `Ok(false)` held, `Err` closed.
    fn open(&self) -> Result<bool, Error> {
        match (self.gate.now(), self.writes.now()) {
            (Passage::Closed, _) | (_, Passage::Closed) => Err(refused("appending")),
            (Passage::Open, Passage::Open) => Ok(true),
            _ => Ok(false),
        }
    }

    /// Lands the queue in order as the gates open; fails it when one closes.
    async fn land(inner: Arc<dyn Partitions>, gate: Gate, writes: Gate, queue: Arc<Mutex<Queue>>) {
        loop {
            let passed = match gate.pass().await {
                Ok(()) => writes.pass().await,
                Err(e) => Err(e),
            };
            let next = {
                let mut q = queue.lock().unwrap_or_else(PoisonError::into_inner);
                let next = q.appends.pop_front();
                q.landing = next.is_some();
                next
            };
            let Some(next) = next else { return };
            let landed = match passed {
                Ok(()) => inner.append(&next.topic, next.partition, &next.key, next.value.as_deref()),
                Err(_) => Err(refused("appending")),
            };
            let done = match landed {
                Ok(a) => a.delivered().await.map_err(|e| e.to_string()),
                Err(e) => Err(e.to_string()),
            };
            next.landed.send_replace(Some(done));
        }
    }
}

impl Partitions for GatedPartitions {
    fn reader(
        &self,
        topic: &str,
        start: &[(i32, Option<i64>)],
        queue_kbytes: u32,
        isolation: Isolation,
    ) -> Result<Box<dyn PartitionRead>, Error> {
        if self.gate.now() == Passage::Closed {
            return Err(refused("opening a reader"));
        }
        let inner = self.inner.reader(topic, start, queue_kbytes, isolation)?;
        Ok(Box::new(GatedReader { inner, gate: self.gate.clone() }))
    }

    fn append(&self, topic: &str, partition: i32, key: &[u8], value: Option<&[u8]>) -> Result<Appended, Error> {
        let open = self.open()?;
        let mut q = self.queue.lock().unwrap_or_else(PoisonError::into_inner);
        // Behind appends still landing, even once open: records land in order.
        if open && !q.landing {
            return self.inner.append(topic, partition, key, value);
        }
        let (landed, later) = watch::channel(None);
        q.appends.push_back(Queued {
            topic: topic.to_owned(),
            partition,
            key: key.to_vec(),
            value: value.map(<[u8]>::to_vec),
            landed,
        });
        if !q.landing {
            q.landing = true;
            let (inner, gate, writes) = (Arc::clone(&self.inner), self.gate.clone(), self.writes.clone());
            tokio::spawn(Self::land(inner, gate, writes, Arc::clone(&self.queue)));
        }
        Ok(Appended(AppendedOf::Later(later)))
    }

    fn ends<'a>(&'a self, partitions: &'a [(String, i32)]) -> Pending<'a, Ends> {
        Box::pin(async move {
            self.gate.pass().await.map_err(|_| refused("finding partitions' ends"))?;
            self.inner.ends(partitions).await
        })
    }

    fn delete_before<'a>(&'a self, topic: &'a str, partition: i32, offset: i64) -> Pending<'a, i64> {
        Box::pin(async move {
            self.gate.pass().await.map_err(|_| refused("deleting records"))?;
            self.writes.pass().await.map_err(|_| refused("deleting records"))?;
            self.inner.delete_before(topic, partition, offset).await
        })
    }

    fn stable_end<'a>(&'a self, topic: &'a str, partition: i32) -> Pending<'a, i64> {
        Box::pin(async move {
            self.gate.pass().await.map_err(|_| refused("finding the last stable offset"))?;
            self.inner.stable_end(topic, partition).await
        })
    }

    fn partition_count<'a>(&'a self, topic: &'a str) -> Pending<'a, Option<i32>> {
        Box::pin(async move {
            self.gate.pass().await.map_err(|_| refused("counting a topic's partitions"))?;
            self.inner.partition_count(topic).await
        })
    }

    fn transactional<'a>(&'a self, transactional_id: &'a str) -> Pending<'a, Box<dyn TxnWrite>> {
        Box::pin(async move {
            self.gate.pass().await.map_err(|_| refused("initializing a transactional writer"))?;
            self.writes.pass().await.map_err(|_| refused("initializing a transactional writer"))?;
            let inner = self.inner.transactional(transactional_id).await?;
            Ok(Box::new(GatedTxn { inner, gate: self.gate.clone(), writes: self.writes.clone() }) as Box<dyn TxnWrite>)
        })
    }
}

/// A transactional writer behind the gates: each call waits while one is
/// held (a paused process's writes, made when it resumes) and fails when
/// one is closed.
#[derive(Debug)]
struct GatedTxn {
    inner: Box<dyn TxnWrite>,
    gate: Gate,
    writes: Gate,
}

impl GatedTxn {
    async fn pass(&self, step: &str) -> Result<(), Error> {
        self.gate.pass().await.map_err(|_| refused(step))?;
        self.writes.pass().await.map_err(|_| refused(step))
    }
}

impl TxnWrite for GatedTxn {
    fn add_partitions<'a>(&'a mut self, partitions: &'a [(&'a str, i32)]) -> Pending<'a, ()> {
        Box::pin(async move {
            self.pass("adding partitions to a transaction").await?;
            self.inner.add_partitions(partitions).await
        })
    }

    fn send<'a>(&'a mut self, topic: &'a str, partition: i32, records: OutBatch) -> Pending<'a, Appended> {
        Box::pin(async move {
            self.pass("appending").await?;
            self.inner.send(topic, partition, records).await
        })
    }

    fn commit(&mut self) -> Pending<'_, ()> {
        Box::pin(async move {
            self.pass("committing a transaction").await?;
            self.inner.commit().await
        })
    }

    fn abort(&mut self) -> Pending<'_, ()> {
        Box::pin(async move {
            self.pass("aborting a transaction").await?;
            self.inner.abort().await
        })
    }
}

/// A reader behind a gate: nothing comes while it is held; closed, it fails.
#[derive(Debug)]
struct GatedReader {
    inner: Box<dyn PartitionRead>,
    gate: Gate,
}

impl PartitionRead for GatedReader {
    fn poll(&self, timeout: Duration) -> Result<Polled<'_>, Error> {
        match self.gate.now() {
            Passage::Open => self.inner.poll(timeout),
            Passage::Held => Ok(Polled::Idle),
            Passage::Closed => Err(refused("reading")),
        }
    }

    fn readable(&self) -> Readable<'_> {
        Box::pin(async move {
            let now = self.gate.now();
            match now {
                Passage::Open => tokio::select! {
                    () = self.inner.readable() => {}
                    () = self.gate.left(now) => {}
                },
                Passage::Held => self.gate.left(now).await,
                // The next poll says why.
                Passage::Closed => {}
            }
        })
    }

    fn add_partitions(&self, topic: &str, start: &[(i32, Option<i64>)]) -> Result<(), Error> {
        if self.gate.now() == Passage::Closed {
            return Err(refused("adding partitions to a reader"));
        }
        self.inner.add_partitions(topic, start)
    }

    fn known_end(&self, topic: &str, partition: i32) -> Option<i64> {
        if self.gate.now() == Passage::Open { self.inner.known_end(topic, partition) } else { None }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::partitions::memory::MemoryPartitions;

    fn gated() -> (MemoryPartitions, GatedPartitions, Gate, Gate) {
        let log = MemoryPartitions::default();
        let (gate, writes) = (Gate::default(), Gate::default());
        let gated = GatedPartitions::new(Arc::new(log.clone()), gate.clone(), writes.clone());
        (log, gated, gate, writes)
    }

    #[tokio::test]
    async fn open_gates_keep_the_contract() {
        let (_, gated, _, _) = gated();
        crate::partitions::conformance::run_all(&gated, &["a", "b", "c", "d", "e", "f"].map(String::from)).await;
    }

    #[tokio::test(start_paused = true)]
    async fn appends_held_back_land_in_order_when_the_gate_opens() {
        let (log, gated, gate, writes) = gated();
        let key = [("t".to_owned(), 0)];
        gate.set(Passage::Held);
        let first = gated.append("t", 0, b"1", None).expect("queued");
        let reader = gated.reader("t", &[(0, None)], 1, Isolation::Committed).expect("a reader");
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert_eq!(log.ends(&key).await.expect("ends").get(&key[0]), Some(&(0, 0)), "nothing landed while held");
        assert!(matches!(reader.poll(Duration::ZERO), Ok(Polled::Idle)), "nothing read while held");
        gate.set(Passage::Open);
        // Behind the first, though the gate is open now.
        let second = gated.append("t", 0, b"2", None).expect("queued");
        assert_eq!(second.delivered().await.ok(), Some(1));
        assert_eq!(first.delivered().await.ok(), Some(0));
        writes.set(Passage::Closed);
        assert!(gated.append("t", 0, b"3", None).is_err(), "writes closed");
        assert!(matches!(reader.poll(Duration::ZERO), Ok(Polled::Records(_))), "reads go on");
        gate.set(Passage::Closed);
        assert!(reader.poll(Duration::ZERO).is_err(), "closed: reads fail");
    }
}
