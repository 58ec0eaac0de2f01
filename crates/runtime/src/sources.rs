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

use crate::application::{ShardApp, Transaction};
use crate::metrics::{Metrics, SourceEvent};
use crate::model::{Refusals, ShardSpec};
use crate::partitions::{PartitionRead, Polled, RecordRun, next_event};
use crate::recovery_log::policy::{self, Timing};
use crate::recovery_log::record::SourceOffset;
use crate::recovery_log::replica::{Done, InFlight, ReplicaError, kafka};
use crate::replica_log::{Parts, ReplicaLog};
use crate::source_message::{OwnedMessage, Refused, application, consume, consume_now, message_of};
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
        let Parts { store, in_flight, app } = log.parts();
        // Over the transaction before, while Kafka commits it.
        let txn = Transaction::over(store, in_flight.map(|f| &f.overlay));
        let mut t = UnderWay { txn, app, begun: false, moved: false, refused: Refused::default() };
        let mut pace = Pace::new(spec, in_flight);
        self.drained = false;
        while let Some(wait) = pace.before_poll() {
            // (What a poll gives borrows the reader: gone, with the block,
            // before anything is awaited.)
            let step = {
                // What is ready is taken without a future (most records,
                // while a source is read ahead); the wait is awaited.
                let first = self.reader.poll(Duration::ZERO);
                let ready = if matches!(first, Ok(Polled::Idle)) {
                    drop(first);
                    next_event(self.reader.as_ref(), wait).await
                } else {
                    first
                };
                take(ready, &mut t, &mut self.next, &mut pace, (&self.metrics, spec))?
            };
            let end = match step {
                Step::Go => None,
                Step::End(end) => Some(end),
                Step::Await(owned) => {
                    let headers = owned.headers();
                    let message = owned.message(&headers);
                    t.txn.count_message();
                    consume(&mut *t.app, spec, &mut t.txn, &message, &mut t.refused).await?;
                    pace.polled(policy::Polled::Message { bytes: t.txn.bytes() })
                }
            };
            if let Some(end) = end {
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

/// What the transaction does after a poll.
enum Step {
    /// Polls again.
    Go,
    /// Ends.
    End(policy::End),
    /// Awaits the application's `consume_async` of this message, taken out
    /// of the reader (the rest of its run is the next poll's).
    Await(OwnedMessage),
}

/// Takes what a poll gave into `t`: every record of a run while the
/// transaction lasts, or one event.
fn take(
    ready: Result<Polled<'_>, kshard_kafka::Error>,
    t: &mut UnderWay<'_, '_>,
    next: &mut Positions,
    pace: &mut Pace<'_>,
    (metrics, spec): (&Metrics, &ShardSpec),
) -> Result<Step, ReplicaError> {
    let event = match ready {
        Ok(event) => event,
        Err(e) => return skip_corrupt(e, pace, metrics, spec, &mut *t.app),
    };
    let polled = match event {
        Polled::Records(run) => return take_run(run, t, next, pace, (metrics, spec)),
        Polled::Reset { topic, partition, position, log_start } => {
            if reset(next, metrics, spec, (&topic, partition), (position, log_start)) {
                t.moved = true;
                begin_once(&mut *t.app, &mut t.txn, &mut t.begun)?;
                let reset = t.app.source_reset(&mut t.txn, &topic, partition, position, log_start);
                reset.map_err(application("undoing what a cut source gave"))?;
            }
            policy::Polled::EndOfSource
        }
        Polled::EndOfPartition { partition, next_offset } => {
            if let Some((topic, past)) = end_of_partition(next, spec, partition, next_offset) {
                t.moved |= past;
                t.app.end_of_source(topic, partition, next_offset);
            }
            policy::Polled::EndOfSource
        }
        Polled::Idle => policy::Polled::Idle,
    };
    Ok(pace.polled(polled).map_or(Step::Go, Step::End))
}

/// Takes a run's records into `t` (each one polled, for the clock) until
/// it ends, or the transaction does: its position is looked up once, and
/// the records left are the next poll's. A record of no source, or before
/// its source's position (a re-read after a reset: taking it would count a
/// message twice), is passed over.
fn take_run(
    mut run: RecordRun<'_>,
    t: &mut UnderWay<'_, '_>,
    next: &mut Positions,
    pace: &mut Pace<'_>,
    (metrics, spec): (&Metrics, &ShardSpec),
) -> Result<Step, ReplicaError> {
    // A run is of one partition: its position is looked up at the first
    // record (`next` is given up for it).
    let (mut next, mut position) = (Some(next), None);
    loop {
        let r = match run.next_record() {
            Ok(Some(r)) => r,
            Ok(None) => return Ok(Step::Go),
            Err(e) => return skip_corrupt(e, pace, metrics, spec, &mut *t.app),
        };
        let at = position.get_or_insert_with(|| {
            next.take().and_then(|next| next.get_mut(r.topic())).and_then(|p| p.get_mut(&r.partition()))
        });
        let taken = match at {
            Some(at) if r.offset() >= **at => {
                **at = r.offset() + 1;
                begin_once(&mut *t.app, &mut t.txn, &mut t.begun)?;
                if t.app.awaits() {
                    // Owned, and awaited once the run's borrow of the reader is gone.
                    return Ok(Step::Await(OwnedMessage::of(&r)));
                }
                let headers = r.headers();
                t.txn.count_message();
                consume_now(&mut *t.app, spec, &mut t.txn, &message_of(&r, &headers), &mut t.refused)?;
                t.txn.bytes()
            }
            // Counted as one taken for the clock (a long re-read reads it too).
            _ => 0,
        };
        if let Some(end) = pace.polled(policy::Polled::Message { bytes: taken }) {
            return Ok(Step::End(end));
        }
        if pace.over() {
            return Ok(Step::Go);
        }
    }
}

/// A source batch that failed its checksum, skipped by the reader (which
/// reads on), as the shard's refusals say: counted, logged and told to the
/// application, unless refusals fail the replica; for the clock, the end of
/// a source. Any other error stands.
fn skip_corrupt(
    e: kshard_kafka::Error,
    pace: &mut Pace<'_>,
    metrics: &Metrics,
    spec: &ShardSpec,
    app: &mut dyn ShardApp,
) -> Result<Step, ReplicaError> {
    match e {
        kshard_kafka::Error::CorruptBatch { topic, partition, offset, what } if spec.refusals != Refusals::Fail => {
            tracing::warn!(shard = %spec.id, topic, partition, offset, error = %what, "skipped a source batch that failed its checksum");
            metrics.source_event(&spec.id, SourceEvent::BatchSkipped);
            app.source_skipped(&topic, partition, offset, &what);
            pace.clock.polled(policy::Polled::EndOfSource);
            Ok(Step::Go)
        }
        e => Err(kafka("reading a source")(e).into()),
    }
}

/// A transaction's pace: its age, read on its clock as seldom as
/// [`policy::ClockReads`] allows, against the shard's [`Timing`].
struct Pace<'f> {
    timing: Timing,
    started: Instant,
    /// The transaction before, while Kafka commits it.
    in_flight: Option<&'f InFlight>,
    /// The transaction's age, as last read.
    elapsed: Duration,
    clock: policy::ClockReads,
}

impl<'f> Pace<'f> {
    fn new(spec: &ShardSpec, in_flight: Option<&'f InFlight>) -> Self {
        let timing = Timing::of(spec);
        Pace { timing, started: Instant::now(), in_flight, elapsed: Duration::ZERO, clock: Default::default() }
    }

    fn committing(&self) -> bool {
        self.in_flight.is_some_and(InFlight::committing)
    }

    /// How long the next poll may wait; `None`: the transaction is over.
    fn before_poll(&mut self) -> Option<Duration> {
        self.read_clock();
        self.timing.before_poll(self.elapsed, self.committing())
    }

    /// Whether the transaction is as long as it may be (the next record of a
    /// run is then the next transaction's).
    fn over(&mut self) -> bool {
        self.read_clock();
        self.timing.before_poll(self.elapsed, false).is_none()
    }

    fn read_clock(&mut self) {
        if self.clock.due() {
            self.elapsed = self.started.elapsed();
            self.clock.read(self.elapsed);
        }
    }

    /// A poll gave `polled`: whether the transaction ends.
    fn polled(&mut self, polled: policy::Polled) -> Option<policy::End> {
        self.clock.polled(polled);
        // (A message ends it by its size alone: the commit is not asked after.)
        let committing = !matches!(polled, policy::Polled::Message { .. }) && self.committing();
        self.timing.after_poll(self.elapsed, polled, committing)
    }
}

/// Each source's next offset, by topic and partition.
type Positions = BTreeMap<String, BTreeMap<i32, i64>>;

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
