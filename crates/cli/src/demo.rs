//! `kshard demo`: live consumer groups of every kind against a broker, until
//! interrupted — what `scripts/run.sh` shows the lag monitor. Producers keep
//! writing to three topics, and groups read and commit through the group
//! coordinator:
//!
//! - `demo-orders-fast` (classic protocol) keeps up: lag near zero;
//! - `demo-orders-slow` (classic) reads 20 records/s of 60: lag grows;
//! - `demo-clicks-kip848` (KIP-848, `group.protocol=consumer`) keeps up;
//! - `demo-payments-txn` commits inside transactions (as an exactly-once
//!   processor does), aborting every fifth: aborted commits never count;
//! - `demo-clicks-stalled` (no members) committed once and stopped: lag grows.
//!
//! It also writes `demo-jobs`, one record in a hundred of it `poison`, for
//! `scripts/run.sh`'s share group (`scripts/share-demo.sh`), and makes
//! `demo-orders-upper` for its Kafka Streams application
//! (`scripts/streams-app.sh`): those two run on the JVM, beside it.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use kshard_kafka::{
    Admin, Client, GroupConsumer, GroupProtocol, OffsetCommitter, OffsetSpec, RecordWriter, TopicPartition, TopicSpec,
    TransactionEnd, TransactionalCommitter,
};

/// The demo's topics: name, partitions, records produced per second.
const TOPICS: [(&str, i32, u32); 5] = [
    ("demo-orders", 6, 60),
    ("demo-payments", 3, 20),
    ("demo-clicks", 4, 200),
    ("demo-jobs", 2, 10),
    // The streams application's output: it writes it, the demo does not.
    ("demo-orders-upper", 6, 0),
];

/// The share group's topic, and how often one of its records is poison.
const JOBS: &str = "demo-jobs";
const POISON_EVERY: u64 = 100;

/// Runs the demo for `seconds` (until killed when `None`).
pub(crate) fn run(kafka: &Client, seconds: Option<u64>) -> Result<()> {
    let admin = Admin::connect(kafka, Duration::from_secs(30))?;
    for (name, partitions, _) in TOPICS {
        let spec = TopicSpec { name: name.into(), partitions, replication: 1, configs: vec![] };
        admin.create_topic(&spec)?;
    }
    let stop = Arc::new(AtomicBool::new(false));
    if let Some(seconds) = seconds {
        let stop = Arc::clone(&stop);
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_secs(seconds));
            stop.store(true, Ordering::Relaxed);
        });
    }
    std::thread::scope(|scope| -> Result<()> {
        let workers = vec![
            scope.spawn(|| produce(kafka, &stop)),
            scope.spawn(|| consume(kafka, &stop, "demo-orders-fast", "demo-orders", GroupProtocol::Classic, 1000)),
            scope.spawn(|| consume(kafka, &stop, "demo-orders-slow", "demo-orders", GroupProtocol::Classic, 20)),
            scope.spawn(|| consume(kafka, &stop, "demo-clicks-kip848", "demo-clicks", GroupProtocol::Consumer, 1000)),
            scope.spawn(|| transactional(kafka, &stop)),
            scope.spawn(|| stalled(kafka)),
        ];
        eprintln!("kshard demo: producing to {} topics; 5 groups reading and committing", TOPICS.len());
        for w in workers {
            w.join().map_err(|_| anyhow::anyhow!("a demo thread panicked"))??;
        }
        Ok(())
    })
}

fn produce(kafka: &Client, stop: &AtomicBool) -> Result<()> {
    let writer = RecordWriter::new(kafka)?;
    let mut n = 0u64;
    while !stop.load(Ordering::Relaxed) {
        let started = Instant::now();
        for (topic, partitions, per_second) in TOPICS {
            for i in 0..per_second / 10 {
                let partition = ((n + u64::from(i)) % partitions as u64) as i32;
                let poison = topic == JOBS && n.is_multiple_of(POISON_EVERY);
                let value: &[u8] = if poison { b"poison" } else { b"demo" };
                writer.send(topic, partition, format!("key-{n}-{i}").as_bytes(), Some(value))?;
            }
        }
        n += 1;
        writer.flush(Duration::from_secs(30))?;
        std::thread::sleep(Duration::from_millis(100).saturating_sub(started.elapsed()));
    }
    Ok(())
}

/// A member of `group` reading up to `per_second` records a second and
/// committing what it read every second.
fn consume(
    kafka: &Client,
    stop: &AtomicBool,
    group: &str,
    topic: &str,
    protocol: GroupProtocol,
    per_second: usize,
) -> Result<()> {
    let member = GroupConsumer::with_protocol(kafka, group, &[topic], protocol)?;
    while !stop.load(Ordering::Relaxed) {
        let started = Instant::now();
        member.consume(per_second, Duration::from_secs(1))?;
        if let Err(e) = member.commit() {
            // Nothing read yet, or a rebalance: the next round commits.
            tracing::debug!(group, error = %e, "commit");
        }
        std::thread::sleep(Duration::from_secs(1).saturating_sub(started.elapsed()));
    }
    Ok(())
}

/// Commits offsets of `demo-payments` inside transactions, a little behind the
/// end of each partition, every two seconds; every fifth transaction aborts.
fn transactional(kafka: &Client, stop: &AtomicBool) -> Result<()> {
    let (topic, partitions, _) = TOPICS[1];
    let committer =
        TransactionalCommitter::new(kafka, "demo-payments-txn-1", "demo-payments-txn", Duration::from_secs(60))?;
    let admin = Admin::new(kafka, Duration::from_secs(30))?;
    let keys: Vec<TopicPartition> = (0..partitions).map(|p| TopicPartition::new(topic, p)).collect();
    let mut round = 0u64;
    while !stop.load(Ordering::Relaxed) {
        let ends = admin.list_offsets(&keys, OffsetSpec::Latest)?;
        let offsets: Vec<(&str, i32, i64)> =
            keys.iter().filter_map(|k| ends.get(k).map(|end| (topic, k.partition, (end - 5).max(0)))).collect();
        let end = if round % 5 == 4 { TransactionEnd::Abort } else { TransactionEnd::Commit };
        committer.commit(&offsets, end).context("transactional commit")?;
        round += 1;
        std::thread::sleep(Duration::from_secs(2));
    }
    Ok(())
}

/// A group that committed once and stopped.
fn stalled(kafka: &Client) -> Result<()> {
    let (topic, partitions, _) = TOPICS[2];
    let offsets: Vec<(&str, i32, i64)> = (0..partitions).map(|p| (topic, p, 0)).collect();
    OffsetCommitter::new(kafka, "demo-clicks-stalled")?.commit(&offsets)?;
    Ok(())
}
