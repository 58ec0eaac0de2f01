//! The offsets reader: tracks every partition of the offsets topic with the
//! watermarks it has at start (waiting, not ready, while the brokers cannot be
//! reached or the topic does not exist yet — Kafka creates `__consumer_offsets`
//! when the first group commits), then reads every partition and applies each
//! record to its unit. Run under the supervisor: after a failure it resumes from
//! the positions the units reached.
//!
//! The same reader reads `__share_group_state` ([`Log::ShareState`]) into the
//! share units. That topic exists only once a share group has: when it is not
//! there at start, there is nothing to catch up with, and the refresher hands
//! its partitions over when it appears.

use super::error::WorkerError;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use kshard_kafka::{ClientSettings, TopicPartition};
use tracing::{debug, info, warn};

use crate::brokers::{BrokerAdmin, Connector, RecordSource, SourceEvent};
use crate::catch_up::Log;
use crate::monitor::Monitor;
use crate::readiness::Event;

/// The worker's name in logs and on `/ready`.
pub(crate) const WORKER: &str = "offsets reader";

/// The share-state reader's name in logs and on `/ready`.
pub(crate) const SHARE_WORKER: &str = "share-state reader";

/// The name of the worker that reads `log`.
pub(crate) fn worker(log: Log) -> &'static str {
    match log {
        Log::Offsets => WORKER,
        Log::ShareState => SHARE_WORKER,
    }
}

/// How long to wait before asking again for a topic that is not there yet.
const RETRY: Duration = Duration::from_secs(5);

pub(crate) struct OffsetsReader {
    pub(crate) settings: ClientSettings,
    /// Which log it reads.
    pub(crate) log: Log,
    pub(crate) topic: String,
    pub(crate) timeout: Duration,
    pub(crate) monitor: Arc<Monitor>,
    pub(crate) stop: Arc<AtomicBool>,
    /// Partitions of the topic that appeared later, from the refresher.
    pub(crate) new_partitions: mpsc::Receiver<Vec<i32>>,
    /// With a data directory: read through durable shards; `None`: read
    /// directly, keep nothing.
    pub(crate) durable: Option<crate::shards_reader::Durable>,
    /// Makes the Kafka clients.
    pub(crate) brokers: Arc<dyn Connector>,
}

/// Tracks `partitions` of `topic` (read as `log`) with their current
/// watermarks; returns how many offsets they hold. Fails when the brokers gave
/// no watermarks for one of them (a broker loading its partitions answers so):
/// such a partition is not known to be empty, and must not count as caught up.
pub(crate) fn track_range(
    admin: &dyn BrokerAdmin,
    monitor: &Monitor,
    log: Log,
    topic: &str,
    partitions: std::ops::Range<i32>,
) -> Result<i64, WorkerError> {
    let keys: Vec<TopicPartition> = partitions.map(|p| TopicPartition::new(topic, p)).collect();
    let watermarks = admin.watermarks(&keys)?;
    let missing: Vec<i32> = keys.iter().filter(|k| !watermarks.contains_key(*k)).map(|k| k.partition).collect();
    if !missing.is_empty() {
        return Err(WorkerError::NoWatermarks { topic: topic.to_owned(), partitions: missing });
    }
    let mut total = 0;
    for key in keys {
        let (low, high) = watermarks[&key];
        total += (high - low).max(0);
        monitor.track(log, key.partition, low, high);
    }
    Ok(total)
}

impl OffsetsReader {
    /// One life of the worker: until `stop` (`Ok`) or a failure (`Err`).
    pub(crate) fn run(&mut self) -> Result<(), WorkerError> {
        if !self.monitor.is_log_started(self.log) && !self.wait_for_topic() {
            return Ok(());
        }
        if let Some(durable) = self.durable.clone() {
            if self.log == Log::ShareState && !self.may_read_share_state()? {
                return Ok(());
            }
            return crate::shards_reader::run(self, &durable);
        }
        let start = self.monitor.positions(self.log);
        let mut reader = self.brokers.reader(&self.topic, &start)?;
        let assigned = start.iter().map(|(p, _)| *p).collect();
        self.read(&mut *reader, assigned)
    }

    /// With shards for `__share_group_state`: whether kshard may read it,
    /// asked by one read before the shards start (a shard refused would
    /// fail again at every restart). When it may not, share groups are left
    /// out, said, as without shards (see [`Self::poll_failed`]), until the
    /// service stops (`false`).
    fn may_read_share_state(&self) -> Result<bool, WorkerError> {
        let start = self.monitor.positions(self.log);
        if start.is_empty() {
            return Ok(true);
        }
        let mut reader = self.brokers.reader(&self.topic, &start)?;
        let deadline = Instant::now() + self.timeout;
        let mut answered = false;
        while !answered && Instant::now() < deadline && !self.stop.load(Ordering::Acquire) {
            let polled = reader.poll(Duration::from_millis(250), &mut |event| {
                answered |= !matches!(event, SourceEvent::Idle);
            });
            match polled {
                Ok(()) => {}
                Err(e) if e.is_authorization() => {
                    self.poll_failed(e, &mut Liveness::default())?;
                    return Ok(false);
                }
                Err(e) => {
                    debug!(error = %e, topic = %self.topic, "asking whether the topic may be read; the client retries")
                }
            }
        }
        Ok(true)
    }

    /// Tracks the topic's partitions, retrying until it works; false when the
    /// service stops first.
    fn wait_for_topic(&self) -> bool {
        loop {
            match self.track_all() {
                Ok(()) => {
                    self.settings.clear_access_problem();
                    return true;
                }
                Err(e) => {
                    let reason = self.settings.with_access_problem(e);
                    warn!(error = %reason, topic = %self.topic, "cannot track the offsets topic yet; retrying in 5 s (not ready)");
                    self.monitor.step(Event::Waiting(reason));
                }
            }
            let retry_at = Instant::now() + RETRY;
            while Instant::now() < retry_at {
                if self.stop.load(Ordering::Acquire) {
                    return false;
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        }
    }

    fn track_all(&self) -> Result<(), WorkerError> {
        let admin = self.brokers.checked_admin()?;
        let count = match (admin.partition_count(&self.topic)?, self.log) {
            (Some(count), _) => count,
            // No share group was ever made: no state to read, until the
            // refresher sees the topic.
            (None, Log::ShareState) => 0,
            (None, Log::Offsets) => {
                return Err(WorkerError::NoTopic { topic: self.topic.clone(), brokers: self.settings.brokers.clone() });
            }
        };
        let total = track_range(&*admin, &self.monitor, self.log, &self.topic, 0..count)?;
        self.monitor.start_log(self.log);
        info!(partitions = count, offsets = total, topic = %self.topic, "catching up");
        Ok(())
    }

    /// Reads until `stop`. `assigned` are the partitions the reader was created
    /// with; the refresher may announce some of them again after a restart.
    pub(crate) fn read(
        &self,
        reader: &mut dyn RecordSource,
        mut assigned: std::collections::BTreeSet<i32>,
    ) -> Result<(), WorkerError> {
        let mut log = CatchUpLog::new(&self.monitor, self.log);
        let mut events = 0u64;
        let mut liveness = Liveness::default();
        let mut idle = true;
        while !self.stop.load(Ordering::Acquire) {
            // New partitions are looked for when nothing is read, and now and
            // then while catching up (not once per run of records).
            if idle || events.is_multiple_of(64) {
                self.add_announced(reader, &mut assigned)?;
            }
            // `idle`: nothing arrived, a good moment to check readiness and progress.
            idle = false;
            let polled = reader.poll(Duration::from_millis(250), &mut |event| {
                idle |= self.take(event, &mut liveness);
            });
            idle = match polled {
                Ok(()) => idle,
                Err(e) => self.poll_failed(e, &mut liveness)?,
            };
            // Readiness and progress are checked every 1024 events, not per
            // record: a clock read per record is a measurable share of the CPU.
            events += 1;
            if !log.announced && (events.is_multiple_of(1024) || idle) {
                log.report(&self.monitor);
            }
        }
        Ok(())
    }

    /// Starts reading the partitions the refresher announced that are not
    /// read yet.
    fn add_announced(
        &self,
        reader: &mut dyn RecordSource,
        assigned: &mut std::collections::BTreeSet<i32>,
    ) -> Result<(), WorkerError> {
        while let Ok(mut added) = self.new_partitions.try_recv() {
            added.retain(|p| assigned.insert(*p));
            if added.is_empty() {
                continue;
            }
            let start: Vec<(i32, Option<i64>)> = added.iter().map(|p| (*p, None)).collect();
            reader.add_partitions(&start)?;
            info!(partitions = ?added, topic = %self.topic, "reading new partitions");
        }
        Ok(())
    }

    /// Takes one event of the reader; true when it says nothing arrived.
    fn take(&self, event: SourceEvent<'_>, liveness: &mut Liveness) -> bool {
        match event {
            SourceEvent::Record { partition, offset, key, value, transactional } => {
                if !liveness.progressed || liveness.failing_since.is_some() {
                    self.showed_progress(liveness);
                }
                let record = crate::units::RecordAt { partition, offset, transactional, key, value };
                if let Err(s) = self.monitor.apply_at(self.log, record) {
                    warn!(
                        partition = s.partition,
                        offset = s.offset,
                        reason = s.skipped.reason(),
                        error = %s.skipped,
                        topic = %self.topic,
                        "skipped a record"
                    );
                }
                false
            }
            SourceEvent::EndOfPartition { partition, next_offset } => {
                self.showed_progress(liveness);
                debug!(partition, next_offset, topic = %self.topic, "end of partition");
                self.monitor.end_of(self.log, partition, next_offset);
                false
            }
            SourceEvent::Idle => true,
        }
    }

    /// A record or the end of a partition arrived: this life of the worker
    /// works, and reading no longer fails.
    fn showed_progress(&self, liveness: &mut Liveness) {
        liveness.failing_since = None;
        if !liveness.progressed {
            liveness.progressed = true;
            self.monitor.step(Event::WorkerRunning(worker(self.log)));
        }
    }

    /// A poll failed with `e`: the end of this life when the brokers refuse
    /// the topic, or when polls have failed for longer than watermarks may
    /// be old; else said, and the client retries (`Ok(true)`: idle).
    fn poll_failed(&self, e: kshard_kafka::Error, liveness: &mut Liveness) -> Result<bool, WorkerError> {
        if e.is_authorization() && self.log == Log::ShareState {
            // Share groups' progress is left out, said, rather than the
            // whole service kept from ready (the ACLs of kshard before share
            // groups grant Read on __consumer_offsets only).
            let why = format!(
                "kshard may not Read {}: share groups' progress (their lag) is left out; grant Read on the topic and restart kshard",
                self.topic
            );
            warn!(error = %e, topic = %self.topic, "{why}");
            self.monitor.log_unreadable(Log::ShareState, why);
            self.monitor.step(Event::WorkerRunning(worker(self.log)));
            while !self.stop.load(Ordering::Acquire) {
                std::thread::sleep(Duration::from_millis(200));
            }
            return Ok(true);
        }
        if e.is_authorization() {
            return Err(WorkerError::ReadDenied { topic: self.topic.clone(), source: Box::new(e) });
        }
        // A batch that does not add up was skipped, the next one read: said
        // and counted, not a failing read.
        if let kshard_kafka::Error::CorruptBatch { partition, offset, what, .. } = &e {
            self.monitor.counters(self.log).corrupt_batch.fetch_add(1, Ordering::Relaxed);
            warn!(partition, offset, error = %what, topic = %self.topic, "skipped a record batch that does not add up");
            return Ok(false);
        }
        // The log was truncated under the reader, which reads it again from
        // its start: what the unit holds may come from records the log no
        // longer has.
        if let kshard_kafka::Error::Truncated { partition, offset, log_start, .. } = &e {
            warn!(
                partition,
                offset,
                log_start,
                topic = %self.topic,
                "the log was truncated under the reader: dropping what was read of the partition and reading it again (not ready until done)"
            );
            self.monitor.rebuild(self.log, *partition, *offset, *log_start);
            return Ok(false);
        }
        let since = *liveness.failing_since.get_or_insert_with(Instant::now);
        if since.elapsed() > self.monitor.stale_after() {
            let seconds = since.elapsed().as_secs_f64();
            return Err(WorkerError::ReadFailing { topic: self.topic.clone(), seconds, source: Box::new(e) });
        }
        warn!(error = %e, topic = %self.topic, "reading; the client retries");
        std::thread::sleep(Duration::from_millis(200));
        Ok(true)
    }
}

/// Whether this life of the reader has shown progress (a record or the end
/// of a partition tells the supervisor it works), and since when its polls
/// fail (errors that persist past the staleness limit end it).
#[derive(Debug, Default)]
struct Liveness {
    progressed: bool,
    failing_since: Option<Instant>,
}

/// The log lines of catching up: progress every [`RETRY`], then once
/// "caught up" with the rate.
struct CatchUpLog {
    log: Log,
    started: Instant,
    last: Instant,
    records_at_last: u64,
    announced: bool,
}

impl CatchUpLog {
    fn new(monitor: &Monitor, log: Log) -> Self {
        let now = Instant::now();
        let records = monitor.counters(log).records.load(Ordering::Relaxed);
        let announced = monitor.progress_of(log).is_some_and(|p| p.ready);
        CatchUpLog { log, started: now, last: now, records_at_last: records, announced }
    }

    fn report(&mut self, monitor: &Monitor) {
        let records = monitor.counters(self.log).records.load(Ordering::Relaxed);
        let Some(p) = monitor.progress_of(self.log) else { return };
        let topic = self.log.topic();
        if p.ready {
            self.announced = true;
            let secs = self.started.elapsed().as_secs_f64();
            info!(records, seconds = secs, rate = records as f64 / secs.max(1e-9), topic, "caught up");
        } else if self.last.elapsed() >= RETRY {
            let rate = records.saturating_sub(self.records_at_last) as f64 / self.last.elapsed().as_secs_f64();
            let eta = if rate > 0.0 { p.offsets_remaining as f64 / rate } else { f64::INFINITY };
            info!(
                records,
                rate = rate.round(),
                percent = format!("{:.1}", p.percent),
                partitions_caught_up = p.partitions_caught_up,
                partitions = p.partitions,
                eta_seconds = eta.round(),
                topic,
                "catching up"
            );
            self.last = Instant::now();
            self.records_at_last = records;
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::VecDeque;

    use kshard_offsets::{OffsetCommitValue, Record};

    use super::*;
    use crate::monitor::MonitorSettings;

    /// One scripted event of [`Scripted`].
    enum Next {
        Record(i32, i64, Vec<u8>, Option<Vec<u8>>),
        End(i32, Option<i64>),
        Fail(&'static str),
        /// A batch the reader skipped as corrupt: partition, offset.
        Corrupt(i32, i64),
        /// The log was truncated under the reader: partition, its position,
        /// the log's start.
        Truncated(i32, i64, i64),
    }

    /// A reader that delivers a script, then stops the worker.
    struct Scripted {
        script: VecDeque<Next>,
        stop: Arc<AtomicBool>,
    }

    impl RecordSource for Scripted {
        fn poll(&mut self, _: Duration, take: &mut dyn FnMut(SourceEvent<'_>)) -> Result<(), kshard_kafka::Error> {
            match self.script.pop_front() {
                Some(Next::Record(partition, offset, key, value)) => take(SourceEvent::Record {
                    partition,
                    offset,
                    key: Some(&key),
                    value: value.as_deref(),
                    transactional: None,
                }),
                Some(Next::End(partition, next_offset)) => take(SourceEvent::EndOfPartition { partition, next_offset }),
                Some(Next::Fail(message)) => {
                    return Err(kshard_kafka::Error::Refused { step: "fetching".into(), message: message.into() });
                }
                Some(Next::Corrupt(partition, offset)) => {
                    return Err(kshard_kafka::Error::CorruptBatch {
                        topic: "__consumer_offsets".into(),
                        partition,
                        offset,
                        what: format!("the record batch at offset {offset}: CRC-32C 0badf00d, the batch says 12345678"),
                    });
                }
                Some(Next::Truncated(partition, offset, log_start)) => {
                    return Err(kshard_kafka::Error::Truncated {
                        topic: "__consumer_offsets".into(),
                        partition,
                        offset,
                        log_start,
                    });
                }
                None => {
                    self.stop.store(true, Ordering::Release);
                    take(SourceEvent::Idle);
                }
            }
            Ok(())
        }

        fn add_partitions(&mut self, _: &[(i32, Option<i64>)]) -> Result<(), kshard_kafka::Error> {
            Ok(())
        }
    }

    /// No broker: the tests give the reader its source directly.
    struct Unreachable;

    impl Connector for Unreachable {
        fn admin(&self) -> Result<Box<dyn BrokerAdmin>, kshard_kafka::Error> {
            unreachable!("no admin in these tests")
        }
        fn checked_admin(&self) -> Result<Box<dyn BrokerAdmin>, kshard_kafka::Error> {
            unreachable!("no admin in these tests")
        }
        fn reader(&self, _: &str, _: &[(i32, Option<i64>)]) -> Result<Box<dyn RecordSource>, kshard_kafka::Error> {
            unreachable!("no reader in these tests")
        }
        fn timestamps(&self) -> Result<Box<dyn crate::brokers::RecordTimes>, kshard_kafka::Error> {
            unreachable!("no timestamps in these tests")
        }
    }

    fn reader(monitor: &Arc<Monitor>) -> (OffsetsReader, Arc<AtomicBool>) {
        let stop = Arc::new(AtomicBool::new(false));
        let reader = OffsetsReader {
            settings: ClientSettings::new("127.0.0.1:1"),
            log: Log::Offsets,
            topic: "__consumer_offsets".into(),
            timeout: Duration::from_secs(1),
            monitor: Arc::clone(monitor),
            stop: Arc::clone(&stop),
            new_partitions: mpsc::channel().1,
            durable: None,
            brokers: Arc::new(Unreachable),
        };
        (reader, stop)
    }

    fn commit(group: &str, offset: i64) -> Next {
        commit_to(group, "t", offset)
    }

    fn commit_to(group: &str, topic: &str, offset: i64) -> Next {
        let (key, value) = Record::offset_commit(group, topic, 0, Some(OffsetCommitValue::new(3, offset, 0))).encode();
        Next::Record(0, offset, key, value)
    }

    #[test]
    fn a_log_truncated_under_the_reader_is_read_again_and_not_ready_until_then() {
        let monitor = Arc::new(Monitor::new(MonitorSettings::default()));
        monitor.track_partition(0, 0, 3);
        monitor.start();
        let (reader, stop) = reader(&monitor);
        let script = VecDeque::from([commit("g", 0), commit("g", 1), commit("g", 2), Next::End(0, Some(3))]);
        reader.read(&mut Scripted { script, stop: Arc::clone(&stop) }, [0].into()).expect("reads");
        assert!(monitor.is_caught_up());
        assert_eq!(monitor.committed_topics(), ["t"]);
        // An unclean leader election left a log of one record (offset 0, of
        // another group): g's commits are gone from the log, and from kshard.
        stop.store(false, Ordering::Release);
        let script = VecDeque::from([Next::Truncated(0, 3, 0), commit_to("h", "u", 0)]);
        reader.read(&mut Scripted { script, stop: Arc::clone(&stop) }, [0].into()).expect("reads");
        assert_eq!(monitor.committed_topics(), ["u"], "what the log no longer has is dropped");
        let why = monitor.problem().expect("not ready while the partition is read again");
        assert!(why.contains("__consumer_offsets/0 is read again from offset 0"), "{why}");
        assert!(why.contains("truncated under kshard at offset 3"), "{why}");
        stop.store(false, Ordering::Release);
        let script = VecDeque::from([Next::End(0, Some(1))]);
        reader.read(&mut Scripted { script, stop }, [0].into()).expect("reads");
        assert_eq!(monitor.problem(), None, "read to its end again");
    }

    #[test]
    fn records_are_applied_malformed_ones_counted_and_markers_settled_at_the_end() {
        let monitor = Arc::new(Monitor::new(MonitorSettings::default()));
        monitor.track_partition(0, 0, 3);
        // Partition 1 holds one record, then two transaction markers.
        monitor.track_partition(1, 0, 3);
        monitor.start();
        // A failure before this life: the first event clears it.
        monitor.worker_failed(WORKER, "the previous life failed".into());
        let (reader, stop) = reader(&monitor);
        let (k, v) = Record::offset_commit("h", "t", 0, Some(OffsetCommitValue::new(3, 7, 0))).encode();
        let script = VecDeque::from([
            commit("g", 0),
            Next::Record(0, 1, b"\x00\x01".to_vec(), Some(b"junk".to_vec())),
            commit("g", 2),
            Next::Record(1, 0, k, v),
            Next::Fail("a broker restarted"),
            Next::Corrupt(0, 3),
            Next::End(1, Some(3)),
        ]);
        let mut source = Scripted { script, stop: Arc::clone(&stop) };
        reader.read(&mut source, [0, 1].into()).expect("reads to the end of the script");
        assert!(monitor.is_caught_up(), "{:?}", monitor.verdict());
        assert_eq!(monitor.problem(), None, "the reader showed progress");
        assert_eq!(monitor.units().counters().records.load(Ordering::Relaxed), 4);
        assert_eq!(monitor.units().counters().malformed_key.load(Ordering::Relaxed), 1);
        assert_eq!(monitor.units().counters().corrupt_batch.load(Ordering::Relaxed), 1, "counted, not silent");
        assert_eq!(monitor.units().position(1), Some(3), "past the markers");
        assert_eq!(monitor.committed_topics(), ["t"]);
    }

    #[test]
    fn a_principal_without_read_rights_is_told_what_it_needs() {
        let monitor = Arc::new(Monitor::new(MonitorSettings::default()));
        monitor.track_partition(0, 0, 1);
        monitor.start();
        let (reader, stop) = reader(&monitor);
        let script = VecDeque::from([Next::Fail("Topic Authorization failed")]);
        let mut source = Scripted { script, stop };
        let error = reader.read(&mut source, [0].into()).expect_err("fails").to_string();
        assert!(error.contains("needs Describe and Read on __consumer_offsets"), "{error}");
        assert!(error.contains("scrape_mode: admin_api"), "{error}");
    }
}
