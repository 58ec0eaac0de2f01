//! What `bench runtime` sees of a system: its committed outputs, read as a
//! consumer of committed records reads them (kshard's reader,
//! `read_committed`), each checked by the [`Workload`] and timed against
//! its input's timestamp (both systems stamp an output with its input's).
//!
//! [`Load`] writes the inputs, in bulk or at a steady rate, from this
//! process (librdkafka's producer, its defaults).

use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use kshard_kafka::{Client, PartitionReader, ReadEvent, RecordWriter};

use super::workload::Workload;

/// A workload shared by the load and the tail.
pub(crate) type Shared = Arc<Mutex<Box<dyn Workload>>>;

/// A mutex's guard, poisoned or not (a panicked holder left nothing half-done
/// that matters to a bench).
pub(crate) fn lock<T: ?Sized>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Milliseconds since the epoch, as record timestamps count.
pub(crate) fn now_ms() -> i64 {
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    i64::try_from(now.as_millis()).unwrap_or(i64::MAX)
}

#[derive(Default)]
struct Seen {
    /// Input units the outputs reflect.
    reflected: AtomicU64,
    /// Latencies (ms) of outputs whose input came at or after this (ms); -1: off.
    timed_from: AtomicI64,
    latencies: Mutex<Vec<f64>>,
    /// Armed: the first output of (source partition, input at or after ms).
    watch: Mutex<Option<(Option<i32>, i64)>>,
    seen_at: Mutex<Option<Instant>>,
    error: Mutex<Option<String>>,
    stop: AtomicBool,
}

/// A reader of one output topic's committed records, on its own thread.
pub(crate) struct Tail {
    seen: Arc<Seen>,
    thread: Option<JoinHandle<()>>,
}

impl Tail {
    pub(crate) fn start(kafka: &Client, topic: &str, partitions: i32, workload: Shared) -> Result<Self> {
        let start: Vec<(i32, Option<i64>)> = (0..partitions).map(|p| (p, Some(0))).collect();
        let reader = PartitionReader::new(kafka, topic, &start).context("reading the outputs")?;
        let seen = Arc::new(Seen { timed_from: AtomicI64::new(-1), ..Seen::default() });
        let inner = Arc::clone(&seen);
        let topic = topic.to_owned();
        let thread = std::thread::spawn(move || {
            while !inner.stop.load(Ordering::Relaxed) {
                let record = match reader.poll(Duration::from_millis(100)) {
                    Ok(ReadEvent::Record(r)) => r,
                    Ok(_) => continue,
                    Err(e) => {
                        *lock(&inner.error) = Some(format!("reading {topic}: {e:#}"));
                        return;
                    }
                };
                let arrived = (Instant::now(), now_ms());
                let (input_ms, _) = record.timestamp();
                let (taken, partition) = {
                    let mut w = lock(&workload);
                    (w.take(record.key(), record.value()), record.key().and_then(|k| w.source_partition(k)))
                };
                match taken {
                    Ok(units) => inner.reflected.fetch_add(units, Ordering::Relaxed),
                    Err(e) => {
                        let at = format!("{topic}/{} offset {}", record.partition(), record.offset());
                        *lock(&inner.error) = Some(format!("{at}: {e}"));
                        return;
                    }
                };
                let from = inner.timed_from.load(Ordering::Relaxed);
                if from >= 0 && input_ms >= from {
                    let mut l = lock(&inner.latencies);
                    l.push((arrived.1 - input_ms) as f64);
                }
                let mut watch = lock(&inner.watch);
                if let Some((want, after)) = *watch
                    && input_ms >= after
                    && (want.is_none() || want == partition)
                {
                    *lock(&inner.seen_at) = Some(arrived.0);
                    *watch = None;
                }
            }
        });
        Ok(Tail { seen, thread: Some(thread) })
    }

    /// Input units reflected so far; an error once an output was wrong.
    pub(crate) fn reflected(&self) -> Result<u64> {
        if let Some(e) = lock(&self.seen.error).clone() {
            bail!("{e}");
        }
        Ok(self.seen.reflected.load(Ordering::Relaxed))
    }

    /// Waits until `units` are reflected (or `limit` passes).
    pub(crate) fn wait_for(&self, units: u64, limit: Duration) -> Result<()> {
        let started = Instant::now();
        loop {
            let got = self.reflected()?;
            if got >= units {
                return Ok(());
            }
            if started.elapsed() > limit {
                bail!("the outputs reflect {got} of {units} input units after {limit:?}");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Times outputs of inputs from `from_ms` on (`None`: stops timing).
    pub(crate) fn time_from(&self, from_ms: Option<i64>) {
        self.seen.timed_from.store(from_ms.unwrap_or(-1), Ordering::Relaxed);
    }

    /// The latencies timed so far (ms), taken.
    pub(crate) fn latencies(&self) -> Vec<f64> {
        std::mem::take(&mut *lock(&self.seen.latencies))
    }

    /// Watches for the first output of an input of `partition` (any: `None`)
    /// appended at or after `after_ms`.
    pub(crate) fn watch(&self, partition: Option<i32>, after_ms: i64) {
        *lock(&self.seen.seen_at) = None;
        *lock(&self.seen.watch) = Some((partition, after_ms));
    }

    /// When the watched output arrived, waiting up to `limit`.
    pub(crate) fn watched(&self, limit: Duration) -> Result<Instant> {
        let started = Instant::now();
        loop {
            self.reflected()?;
            if let Some(at) = *lock(&self.seen.seen_at) {
                return Ok(at);
            }
            if started.elapsed() > limit {
                bail!("no output of a new input within {limit:?}");
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

impl Drop for Tail {
    fn drop(&mut self) {
        self.seen.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Writes a workload's inputs to a topic.
pub(crate) struct Load {
    writer: Arc<RecordWriter>,
    topic: String,
    workload: Shared,
}

/// A load at a steady rate, on its own thread until dropped.
pub(crate) struct Paced {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<Result<()>>>,
}

impl Load {
    pub(crate) fn new(kafka: &Client, topic: &str, workload: Shared) -> Result<Self> {
        let writer = Arc::new(RecordWriter::new(kafka).context("connecting a producer")?);
        Ok(Load { writer, topic: topic.to_owned(), workload })
    }

    /// Writes `records` as fast as the producer takes them, and waits for them.
    pub(crate) fn bulk(&self, records: u64) -> Result<()> {
        for _ in 0..records {
            let (partition, key, value) = lock(&self.workload).next();
            self.writer.send(&self.topic, partition, &key, Some(&value)).context("producing")?;
        }
        self.writer.flush(Duration::from_secs(300)).context("waiting for the records to be written")
    }

    /// Writes `per_second` records a second, in 10 ms steps, until dropped.
    pub(crate) fn paced(&self, per_second: u64) -> Paced {
        let stop = Arc::new(AtomicBool::new(false));
        let (writer, topic, workload, halt) =
            (Arc::clone(&self.writer), self.topic.clone(), Arc::clone(&self.workload), Arc::clone(&stop));
        let thread = std::thread::spawn(move || -> Result<()> {
            let started = Instant::now();
            let mut sent = 0u64;
            while !halt.load(Ordering::Relaxed) {
                let due = (started.elapsed().as_secs_f64() * per_second as f64) as u64;
                while sent < due {
                    let (partition, key, value) = lock(&workload).next();
                    writer.send(&topic, partition, &key, Some(&value)).context("producing")?;
                    sent += 1;
                }
                std::thread::sleep(Duration::from_millis(10));
            }
            writer.flush(Duration::from_secs(300)).context("waiting for the records to be written")
        });
        Paced { stop, thread: Some(thread) }
    }
}

impl Paced {
    /// Stops the load once what it sent is written.
    pub(crate) fn finish(mut self) -> Result<()> {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.take().map_or(Ok(()), |t| t.join().unwrap_or_else(|_| bail!("the load panicked")))
    }
}

impl Drop for Paced {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The `q` quantile (0..=1) of `values`, nearest rank.
pub(crate) fn quantile(values: &mut [f64], q: f64) -> f64 {
    if values.is_empty() {
        return f64::NAN;
    }
    values.sort_by(f64::total_cmp);
    let rank = ((q * values.len() as f64).ceil() as usize).clamp(1, values.len());
    values[rank - 1]
}
