//! A primary's sources and its consumer transactions: it reads every
//! source from the checkpoint on, takes messages into a transaction for the
//! shard's minimum to maximum duration, hands each to the application (a
//! refusal undone, then skipped or dead-lettered as the shard says), and
//! commits the transaction where the replica keeps its state
//! ([`ReplicaLog::commit`]: its recovery log, or its store alone).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::application::{Message, OutRecord, ShardApp, Transaction};
use crate::metrics::{Metrics, SourceEvent};
use crate::model::{Refusals, ShardSpec};
use crate::partitions::{PartitionRead, Polled, next_event};
use crate::recovery_log::policy::{self, Timing};
use crate::recovery_log::record::SourceOffset;
use crate::recovery_log::replica::{Done, InFlight, ReplicaError, kafka};
use crate::replica_log::{Parts, ReplicaLog};
use crate::worker_context::{READER_QUEUE_KBYTES, WorkerContext};

/// A primary's readers of its sources, and their next offsets (topic →
/// partition → offset: looked up per message without allocating).
pub(crate) struct Sources {
    pub(crate) reader: Box<dyn PartitionRead>,
    /// The member's metrics.
    metrics: Arc<Metrics>,
    next: Positions,
    /// The last transaction read everything the reader had: the next one
    /// waits until it is readable.
    pub(crate) drained: bool,
    /// When the last transaction was committed (or the sources opened).
    committed: Instant,
}

impl Sources {
    /// Reads every source from its checkpointed offset (or its minimum offset).
    pub(crate) fn open(
        ctx: &WorkerContext,
        spec: &ShardSpec,
        checkpoint: &[SourceOffset],
    ) -> Result<Self, ReplicaError> {
        let mut next: BTreeMap<String, BTreeMap<i32, i64>> = BTreeMap::new();
        for s in &spec.sources {
            let from = checkpoint
                .iter()
                .find(|c| c.topic == s.topic && c.partition == s.partition)
                .map_or(s.min_offset, |c| c.offset.max(s.min_offset));
            next.entry(s.topic.clone()).or_default().insert(s.partition, from);
        }
        let mut topics = next.iter();
        let Some((first, start)) = topics.next() else {
            return Err(ReplicaError::NoSources);
        };
        let from = |partitions: &BTreeMap<i32, i64>| -> Vec<(i32, Option<i64>)> {
            partitions.iter().map(|(p, o)| (*p, Some(*o))).collect()
        };
        let reader = ctx
            .partitions
            .reader(first, &from(start), READER_QUEUE_KBYTES, ctx.app.isolation())
            .map_err(kafka("opening a source reader"))?;
        for (topic, start) in topics {
            reader.add_partitions(topic, &from(start)).map_err(kafka("opening a source reader"))?;
        }
        Ok(Sources { reader, metrics: Arc::clone(&ctx.metrics), next, drained: false, committed: Instant::now() })
    }

    /// Every source's next offset.
    fn offsets(&self) -> Vec<SourceOffset> {
        self.next
            .iter()
            .flat_map(|(topic, partitions)| {
                partitions.iter().map(|(partition, offset)| SourceOffset {
                    topic: topic.clone(),
                    partition: *partition,
                    offset: *offset,
                })
            })
            .collect()
    }

    /// Runs one consumer transaction: takes messages for at least the shard's
    /// minimum transaction duration and at most its maximum (ending early once
    /// the minimum has passed and nothing more is ready), then commits them
    /// where the replica keeps its state. Nothing is committed when no
    /// message came and no source position moved, unless the last commit is
    /// a [`policy::HEARTBEAT`] old.
    pub(crate) async fn transaction(
        &mut self,
        spec: &ShardSpec,
        log: &mut impl ReplicaLog,
        author: u64,
    ) -> Result<(), ReplicaError> {
        let timing = Timing::of(spec);
        let started = Instant::now();
        let Parts { store, in_flight, app } = log.parts();
        // Over the transaction before, while Kafka commits it.
        let txn = Transaction::over(store, in_flight.map(|f| &f.overlay));
        let mut t = UnderWay { txn, app, begun: false, moved: false, refused: Refused::default(), awaiting: None };
        self.drained = false;
        // The transaction's age, as last read (see `policy::ClockReads`).
        let (mut elapsed, mut clock) = (Duration::ZERO, policy::ClockReads::default());
        loop {
            if clock.due() {
                elapsed = started.elapsed();
                clock.read(elapsed);
            }
            let committing = in_flight.is_some_and(InFlight::committing);
            let Some(wait) = timing.before_poll(elapsed, committing) else { break };
            // (`event` borrows the reader: gone, with the block, before
            // anything is awaited.)
            let polled = {
                // What is ready is taken without a future (most records,
                // while a source is read ahead); the wait is awaited.
                let first = self.reader.poll(Duration::ZERO);
                let ready = if matches!(first, Ok(Polled::Idle)) {
                    drop(first);
                    next_event(self.reader.as_ref(), wait).await
                } else {
                    first
                };
                match ready {
                    Err(kshard_kafka::Error::CorruptBatch { topic, partition, offset, what })
                        if spec.refusals != Refusals::Fail =>
                    {
                        batch_skipped(&self.metrics, spec, &mut *t.app, (&topic, partition, offset), &what);
                        None
                    }
                    event => Some(take(
                        event.map_err(kafka("reading a source"))?,
                        &mut t,
                        &mut self.next,
                        &self.metrics,
                        spec,
                    )?),
                }
            };
            let Some(polled) = polled else {
                clock.polled(policy::Polled::EndOfSource);
                continue;
            };
            // Not a source, or before the position (a re-read after a reset):
            // counted as one taken for the clock (a long re-read reads it too).
            let Some(polled) = polled else {
                clock.polled(policy::Polled::Message { bytes: 0 });
                continue;
            };
            if let Some(owned) = t.awaiting.take() {
                let headers = owned.headers();
                let message = owned.message(&headers);
                t.txn.count_message();
                consume(&mut *t.app, spec, &mut t.txn, &message, &mut t.refused).await?;
            }
            let polled = match polled {
                policy::Polled::Message { .. } => policy::Polled::Message { bytes: t.txn.bytes() },
                other => other,
            };
            clock.polled(polled);
            if let Some(end) = timing.after_poll(elapsed, polled, committing) {
                self.drained = end.drained;
                break;
            }
        }
        let finished = t.finish()?;
        self.commit(log, author, finished).await
    }

    /// Ends a transaction of `log`'s: committed when it took messages,
    /// moved a position, or the log needs a heartbeat; else nothing is written.
    async fn commit(&mut self, log: &mut impl ReplicaLog, author: u64, t: Finished) -> Result<(), ReplicaError> {
        let Finished { begun, moved, refused, messages, mutations, outputs } = t;
        if !policy::commits(messages, moved, self.committed.elapsed()) {
            return log.idle().await;
        }
        let offsets = self.offsets();
        let done = Done {
            begun: begun.then(|| offsets.clone()),
            messages,
            moved,
            refused: (refused.skipped, refused.dead_lettered),
        };
        log.commit(author, (mutations, offsets), outputs, done).await?;
        self.committed = Instant::now();
        Ok(())
    }
}

/// A consumer transaction under way.
struct UnderWay<'t, 'a> {
    txn: Transaction<'t>,
    app: &'a mut dyn ShardApp,
    /// Begun at the first message: a heartbeat is no transaction of the application's.
    begun: bool,
    /// A source's position moved.
    moved: bool,
    refused: Refused,
    /// A message for an application that awaits, taken out of the reader.
    awaiting: Option<OwnedMessage>,
}

impl UnderWay<'_, '_> {
    /// The transaction, finalized by the application when it began.
    fn finish(mut self) -> Result<Finished, ReplicaError> {
        if self.begun {
            self.app.finalize(&mut self.txn).map_err(application("finalizing a transaction"))?;
        }
        let messages = self.txn.messages();
        let (mutations, outputs) = self.txn.into_parts();
        let (begun, moved, refused) = (self.begun, self.moved, self.refused);
        Ok(Finished { begun, moved, refused, messages, mutations, outputs })
    }
}

/// A transaction the application is done with, to commit.
struct Finished {
    begun: bool,
    moved: bool,
    refused: Refused,
    messages: usize,
    mutations: Vec<crate::recovery_log::record::Mutation>,
    outputs: Vec<crate::application::Output>,
}

/// Takes one polled event into `t`: what it was, for the clock; `None` for
/// a record of no source, or before its source's position (a re-read after a
/// reset: taking it would count a message twice).
fn take(
    event: Polled<'_>,
    t: &mut UnderWay<'_, '_>,
    next: &mut Positions,
    metrics: &Metrics,
    spec: &ShardSpec,
) -> Result<Option<policy::Polled>, ReplicaError> {
    Ok(Some(match event {
        Polled::Reset { topic, partition, position, log_start } => {
            if reset(next, metrics, spec, (&topic, partition), (position, log_start)) {
                t.moved = true;
                begin_once(&mut *t.app, &mut t.txn, &mut t.begun)?;
                let reset = t.app.source_reset(&mut t.txn, &topic, partition, position, log_start);
                reset.map_err(application("undoing what a cut source gave"))?;
            }
            policy::Polled::EndOfSource
        }
        Polled::Record(r) => {
            let Some(next) = next.get_mut(r.topic()).and_then(|p| p.get_mut(&r.partition())) else { return Ok(None) };
            if r.offset() < *next {
                return Ok(None);
            }
            *next = r.offset() + 1;
            begin_once(&mut *t.app, &mut t.txn, &mut t.begun)?;
            if t.app.awaits() {
                // Owned, and awaited once the record's borrow of the reader is gone.
                t.awaiting = Some(OwnedMessage::of(&r));
            } else {
                let headers = r.headers();
                t.txn.count_message();
                consume_now(&mut *t.app, spec, &mut t.txn, &message_of(&r, &headers), &mut t.refused)?;
            }
            policy::Polled::Message { bytes: t.txn.bytes() }
        }
        Polled::EndOfPartition { partition, next_offset } => {
            if let Some((topic, past)) = end_of_partition(next, spec, partition, next_offset) {
                t.moved |= past;
                t.app.end_of_source(topic, partition, next_offset);
            }
            policy::Polled::EndOfSource
        }
        Polled::Idle => policy::Polled::Idle,
    }))
}

/// Each source's next offset, by topic and partition.
type Positions = BTreeMap<String, BTreeMap<i32, i64>>;

/// A source batch that failed its checksum, at `(topic, partition,
/// offset)`: skipped by the reader, which reads on; counted, logged and
/// told to the application.
fn batch_skipped(metrics: &Metrics, spec: &ShardSpec, app: &mut dyn ShardApp, at: (&str, i32, i64), what: &str) {
    let (topic, partition, offset) = at;
    tracing::warn!(shard = %spec.id, topic, partition, offset, error = %what, "skipped a source batch that failed its checksum");
    metrics.source_event(&spec.id, SourceEvent::BatchSkipped);
    app.source_skipped(topic, partition, offset, what);
}

/// A source's log was cut below `position` (it starts at `log_start` now):
/// its records from the start are new ones. False when it is not a source
/// of the shard.
fn reset(
    next: &mut Positions,
    metrics: &Metrics,
    spec: &ShardSpec,
    source: (&str, i32),
    (position, log_start): (i64, i64),
) -> bool {
    let (topic, partition) = source;
    let Some(next) = next.get_mut(topic).and_then(|p| p.get_mut(&partition)) else { return false };
    tracing::warn!(shard = %spec.id, topic, partition, position, log_start, "a source's log was cut below the position: reading it again from its start");
    metrics.source_event(&spec.id, SourceEvent::Reset);
    *next = log_start;
    true
}

/// A source partition read to its end, `next_offset` its position: its
/// topic, and whether the position moved (past transaction markers, never
/// delivered: committed, so that replicas and the next primary know the
/// source was read to its end). `None` when the partition number is not one
/// source's: the event names the partition only, and a number two source
/// topics share cannot be told apart.
fn end_of_partition<'s>(
    next: &mut Positions,
    spec: &'s ShardSpec,
    partition: i32,
    next_offset: Option<i64>,
) -> Option<(&'s str, bool)> {
    let mut candidates = spec.sources.iter().filter(|s| s.partition == partition);
    let topic = match (candidates.next(), candidates.next()) {
        (Some(s), None) => s.topic.as_str(),
        _ => return None,
    };
    let next = next.get_mut(topic).and_then(|p| p.get_mut(&partition));
    let moved = match (next, next_offset) {
        (Some(next), Some(end)) if end > *next => {
            *next = end;
            true
        }
        _ => false,
    };
    Some((topic, moved))
}

/// Begins the application's transaction at its first message (a heartbeat
/// is no transaction of the application's).
fn begin_once(app: &mut dyn ShardApp, txn: &mut Transaction<'_>, begun: &mut bool) -> Result<(), ReplicaError> {
    if !*begun {
        app.begin(txn).map_err(application("beginning a transaction"))?;
        *begun = true;
    }
    Ok(())
}

/// The message `r` is, its headers given.
fn message_of<'a>(r: &'a crate::partitions::LogRecord<'_>, headers: &'a [(&'a str, Option<&'a [u8]>)]) -> Message<'a> {
    let (timestamp_ms, log_append_time) = r.timestamp();
    Message {
        topic: r.topic(),
        partition: r.partition(),
        offset: r.offset(),
        timestamp_ms,
        log_append_time,
        headers,
        key: r.key(),
        value: r.value(),
        transactional: r.transactional(),
    }
}

/// Messages a transaction refused, by what became of them.
#[derive(Debug, Default)]
struct Refused {
    skipped: u64,
    dead_lettered: u64,
}

/// An application's error at `at`, failing the replica.
fn application(at: &'static str) -> impl FnOnce(crate::application::AppError) -> ReplicaError {
    move |error| ReplicaError::Application { at: at.to_owned(), error }
}

/// Where a message is, for errors and logs.
fn at(message: &Message<'_>) -> String {
    format!("{}/{} offset {}", message.topic, message.partition, message.offset)
}

/// Takes `message` into `txn` through the application's `consume`,
/// handling a refusal as the shard's policy says.
fn consume_now(
    app: &mut dyn ShardApp,
    spec: &ShardSpec,
    txn: &mut Transaction<'_>,
    message: &Message<'_>,
    refused: &mut Refused,
) -> Result<(), ReplicaError> {
    mark_undoable(spec, txn);
    let consumed = app.consume(txn, message);
    settle(spec, txn, message, consumed, refused)
}

/// [`consume_now`] through the application's `consume_async`, awaited.
async fn consume(
    app: &mut dyn ShardApp,
    spec: &ShardSpec,
    txn: &mut Transaction<'_>,
    message: &Message<'_>,
    refused: &mut Refused,
) -> Result<(), ReplicaError> {
    mark_undoable(spec, txn);
    let consumed = app.consume_async(txn, message).await;
    settle(spec, txn, message, consumed, refused)
}

/// Keeps what the next message changes, so that a refusal can undo it —
/// only where a refusal is not the replica's end.
fn mark_undoable(spec: &ShardSpec, txn: &mut Transaction<'_>) {
    if spec.refusals != Refusals::Fail {
        txn.mark();
    }
}

/// What the application's answer to `message` makes of it: taken, refused
/// (undone, then skipped or dead-lettered), or the replica's failure.
fn settle(
    spec: &ShardSpec,
    txn: &mut Transaction<'_>,
    message: &Message<'_>,
    consumed: Result<(), crate::application::AppError>,
    refused: &mut Refused,
) -> Result<(), ReplicaError> {
    let error = match consumed {
        Ok(()) => return Ok(()),
        Err(error) => error,
    };
    match &spec.refusals {
        _ if !error.is_refusal() => Err(ReplicaError::Application { at: at(message), error }),
        Refusals::Fail => Err(ReplicaError::Application { at: format!("{} (refused)", at(message)), error }),
        Refusals::Skip => {
            txn.undo();
            tracing::warn!(shard = %spec.id, topic = message.topic, partition = message.partition, offset = message.offset, reason = %error, "skipping a message the application refused");
            refused.skipped += 1;
            Ok(())
        }
        Refusals::DeadLetter { topic, partition } => {
            txn.undo();
            tracing::warn!(shard = %spec.id, topic = message.topic, partition = message.partition, offset = message.offset, reason = %error, dead_letter = %topic, "publishing a message the application refused to the dead-letter topic");
            let bytes = |b: Option<&[u8]>| b.map(bytes::Bytes::copy_from_slice);
            let mut headers: Vec<(String, Option<bytes::Bytes>)> =
                message.headers.iter().map(|(k, v)| ((*k).to_owned(), bytes(*v))).collect();
            for (name, value) in [
                ("kshard.refused", error.to_string()),
                ("kshard.source.topic", message.topic.to_owned()),
                ("kshard.source.partition", message.partition.to_string()),
                ("kshard.source.offset", message.offset.to_string()),
                ("kshard.shard", spec.id.clone()),
            ] {
                headers.push((name.to_owned(), Some(bytes::Bytes::from(value))));
            }
            let record = OutRecord {
                key: bytes(message.key),
                value: bytes(message.value),
                headers,
                timestamp_ms: message.timestamp_ms,
            };
            txn.publish(topic, partition.unwrap_or(message.partition), record);
            refused.dead_lettered += 1;
            Ok(())
        }
    }
}

/// A message copied out of its reader's buffer, for an application that awaits.
struct OwnedMessage {
    topic: String,
    partition: i32,
    offset: i64,
    timestamp: (i64, bool),
    headers: Vec<(String, Option<Vec<u8>>)>,
    key: Option<Vec<u8>>,
    value: Option<Vec<u8>>,
    transactional: Option<crate::application::Transactional>,
}

impl OwnedMessage {
    fn of(r: &crate::partitions::LogRecord<'_>) -> Self {
        OwnedMessage {
            topic: r.topic().to_owned(),
            partition: r.partition(),
            offset: r.offset(),
            timestamp: r.timestamp(),
            headers: r.headers().into_iter().map(|(k, v)| (k.to_owned(), v.map(<[u8]>::to_vec))).collect(),
            key: r.key().map(<[u8]>::to_vec),
            value: r.value().map(<[u8]>::to_vec),
            transactional: r.transactional(),
        }
    }

    fn headers(&self) -> Vec<(&str, Option<&[u8]>)> {
        self.headers.iter().map(|(k, v)| (k.as_str(), v.as_deref())).collect()
    }

    fn message<'a>(&'a self, headers: &'a [(&'a str, Option<&'a [u8]>)]) -> Message<'a> {
        Message {
            topic: &self.topic,
            partition: self.partition,
            offset: self.offset,
            timestamp_ms: self.timestamp.0,
            log_append_time: self.timestamp.1,
            headers,
            key: self.key.as_deref(),
            value: self.value.as_deref(),
            transactional: self.transactional,
        }
    }
}
