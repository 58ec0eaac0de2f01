//! [`Readiness`]: whether the lag kshard exports is current and complete, as
//! one pure state machine in the style of raft-rs's `Ready` — the readers, the
//! watermark refresh, the supervisor and the shards feed it [`Event`]s through
//! [`Readiness::step`], and [`Readiness::verdict`] answers for a given instant
//! (`/ready`, `/api/groups`, which series `/metrics` carries). No I/O, no clock:
//! every rule is tested with hand-written event sequences.
//!
//! The rules:
//! - before the offsets topic can be tracked, not ready, with the reason the
//!   reader gave ([`Event::Waiting`]);
//! - catch-up ([`CatchUp`]): every partition tracked at start read to the high
//!   watermark it had then, or to its end (trailing transaction markers are
//!   never delivered); latched;
//! - then a watermark refresh that began after catching up, so that the first
//!   lag shown is measured against watermarks no older than the state;
//! - all along, no worker down and watermarks younger than the staleness
//!   limit, and no transient condition (a shard moving, a fail-over) past its
//!   grace ([`Health`]), and no reader of a partition of the offsets topic
//!   stalled with records waiting for it for longer than that limit
//!   ([`Stalls`]): otherwise not current, and lag is not exported.

use std::time::{Duration, Instant};

use crate::catch_up::{CatchUp, Log, PartitionProgress, Progress};
use crate::failure::Failure;
use crate::health::Health;
use crate::stalls::Stalls;

/// What happened, as the service's parts report it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Event {
    /// The reader cannot track the offsets topic yet, and why.
    Waiting(String),
    /// `log` is to be read before lag is served (the offsets topic always is).
    Expected(Log),
    /// kshard may not read `log` (only `__share_group_state` can be left
    /// out: the share groups' progress is then not served), and why.
    Unreadable(Log, String),
    /// A partition of `log`, with its watermarks when tracking began.
    Tracked {
        /// The topic.
        log: Log,
        /// The partition.
        partition: i32,
        /// Its low watermark.
        low: i64,
        /// Its high watermark: the offset to reach.
        high: i64,
    },
    /// Every partition `log` had at start is tracked.
    Started(Log),
    /// The state of `partition` reaches up to `next` (the next offset to read).
    Position {
        /// The topic.
        log: Log,
        /// The partition.
        partition: i32,
        /// The next offset to read.
        next: i64,
    },
    /// The reader reached the end of `partition`.
    EndOfPartition {
        /// The topic.
        log: Log,
        /// The partition.
        partition: i32,
        /// The reader's next offset, when the client knows it.
        next: Option<i64>,
    },
    /// Watermarks were refreshed by a refresh that began at `at`;
    /// `caught_up_before`: the state had caught up when it began.
    Refreshed {
        /// When the refresh began.
        at: Instant,
        /// Whether catch-up was complete when it began.
        caught_up_before: bool,
    },
    /// A watermark refresh failed (a failure of the refresher's, counted
    /// as its own though the worker goes on).
    RefreshFailed { worker: &'static str, failure: Failure },
    /// A worker failed at `at` and waits to be restarted.
    WorkerFailed {
        /// The worker.
        worker: &'static str,
        /// Why.
        failure: Failure,
        /// When.
        at: Instant,
    },
    /// A worker showed progress since it (re)started.
    WorkerRunning(&'static str),
    /// A transient condition holds (since `at`, unless it held already): a
    /// problem once it lasts longer than `grace`.
    Hold {
        /// Names the condition.
        key: String,
        /// What to say about it.
        why: String,
        /// How long it may last.
        grace: Duration,
        /// When it was seen.
        at: Instant,
    },
    /// A transient condition no longer holds.
    Release(String),
    /// The log of `partition` was truncated under its reader at `at`: what
    /// was read of it is dropped and it is read again from `from`, not
    /// ready until the reader reaches its end.
    Rebuilding {
        /// The topic.
        log: Log,
        /// The partition.
        partition: i32,
        /// Where reading starts again.
        from: i64,
        /// The reader's position when it heard.
        was_at: i64,
        /// When.
        at: Instant,
    },
    /// A refresh at `at` found the offsets topic's partitions' high
    /// watermarks (`ends`), and the state at these `positions`.
    Observed {
        /// When the refresh began.
        at: Instant,
        /// Each partition's high watermark.
        ends: std::collections::BTreeMap<i32, i64>,
        /// Each partition's next offset to read (`None`: nothing read).
        positions: std::collections::BTreeMap<i32, Option<i64>>,
    },
}

/// The answer at one instant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    /// Lag is current and complete: serve it.
    pub ready: bool,
    /// Catch-up is complete (latched).
    pub caught_up: bool,
    /// No worker is down, watermarks are recent, no condition is overdue.
    pub current: bool,
    /// Why not ready, in words.
    pub reason: Option<String>,
}

/// The readiness state machine.
#[derive(Debug)]
pub(crate) struct Readiness {
    catch_up: CatchUp,
    /// Of `__share_group_state`, when it is read (offsets-topic mode).
    share: Option<CatchUp>,
    /// Why `__share_group_state` is not read, when kshard may not.
    share_unreadable: Option<String>,
    health: Health,
    /// Whether the offsets topic's readers move while records wait; `None`
    /// when the reader cannot be held to the high watermark (librdkafka's
    /// reads committed records only: an open transaction holds it back
    /// for as long as the transaction lasts).
    stalls: Option<Stalls>,
    /// The staleness limit, which a stalled reader is held to as well.
    stale_after: Duration,
    /// A refresh that began after catching up has completed (latched).
    fresh_watermarks: bool,
    waiting: Option<String>,
}

impl Readiness {
    /// Nothing known yet; watermarks older than `stale_after` are stale.
    pub(crate) fn new(stale_after: Duration) -> Self {
        Readiness {
            catch_up: CatchUp::default(),
            share: None,
            share_unreadable: None,
            health: Health::new(stale_after),
            stalls: Some(Stalls::default()),
            stale_after,
            fresh_watermarks: false,
            waiting: None,
        }
    }

    /// Whether stalled readers are watched: only when partitions are read
    /// with kshard's own client, which reads past open transactions.
    pub(crate) fn watch_stalls(&mut self, watch: bool) {
        self.stalls = watch.then(Stalls::default);
    }

    /// Takes one event.
    pub(crate) fn step(&mut self, event: Event) {
        match event {
            Event::Waiting(why) => self.waiting = Some(why),
            Event::Expected(log) => _ = self.log_mut(log),
            Event::Unreadable(Log::ShareState, why) => {
                self.share = None;
                self.share_unreadable = Some(why);
            }
            // The offsets topic is never left out: its reader fails instead.
            Event::Unreadable(Log::Offsets, _) => {}
            Event::Tracked { log, partition, low, high } => self.log_mut(log).track(partition, low, high),
            Event::Started(log) => {
                if log == Log::Offsets {
                    self.waiting = None;
                }
                self.log_mut(log).start();
            }
            // Positions of a log that is not read (admin-API mode fills the
            // share units from the brokers) do not make it read.
            Event::Position { log, partition, next } => {
                if let Some(c) = self.read_log_mut(log) {
                    c.on_record(partition, next - 1);
                }
            }
            Event::EndOfPartition { log, partition, next } => {
                if let Some(c) = self.read_log_mut(log) {
                    c.on_end_of_partition(partition, next);
                }
                self.health.release(&rebuilding_key(log, partition));
            }
            Event::Rebuilding { log, partition, from, was_at, at } => {
                let why = format!(
                    "{}/{partition} is read again from offset {from}: its log was truncated under kshard at offset {was_at} (an unclean leader election, or the topic made again)",
                    log.topic()
                );
                self.health.hold(&rebuilding_key(log, partition), why, Duration::ZERO, at);
            }
            Event::Refreshed { at, caught_up_before } => {
                self.health.refreshed(at);
                self.fresh_watermarks |= caught_up_before;
            }
            Event::RefreshFailed { worker, failure } => self.health.refresh_failed(worker, failure),
            Event::WorkerFailed { worker, failure, at } => {
                self.health.worker_failed(worker, failure, at);
            }
            Event::WorkerRunning(worker) => self.health.worker_running(worker),
            Event::Hold { key, why, grace, at } => self.health.hold(&key, why, grace, at),
            Event::Release(key) => self.health.release(&key),
            Event::Observed { at, ends, positions } => {
                if let Some(stalls) = &mut self.stalls {
                    stalls.observe(at, &ends, &positions);
                }
            }
        }
    }

    fn log_mut(&mut self, log: Log) -> &mut CatchUp {
        match log {
            Log::Offsets => &mut self.catch_up,
            Log::ShareState => self.share.get_or_insert_with(CatchUp::default),
        }
    }

    fn read_log_mut(&mut self, log: Log) -> Option<&mut CatchUp> {
        match log {
            Log::Offsets => Some(&mut self.catch_up),
            Log::ShareState => self.share.as_mut(),
        }
    }

    /// Why `__share_group_state` is not read, when kshard may not read it.
    pub(crate) fn share_unreadable(&self) -> Option<&str> {
        self.share_unreadable.as_deref()
    }

    /// The catch-up of `log`, when it is read.
    pub(crate) fn log(&self, log: Log) -> Option<&CatchUp> {
        match log {
            Log::Offsets => Some(&self.catch_up),
            Log::ShareState => self.share.as_ref(),
        }
    }

    /// Where things stand at `now`.
    pub(crate) fn verdict(&self, now: Instant) -> Verdict {
        let share = self.share.as_ref();
        let caught_up = self.is_caught_up();
        let problem = self.health.problem(now).or_else(|| self.stalled(now));
        let current = problem.is_none();
        let ready = caught_up && self.fresh_watermarks && current;
        let reason = if ready {
            None
        } else if let Some(problem) = problem {
            Some(problem)
        } else if !self.catch_up.is_started() {
            Some(self.waiting.clone().unwrap_or_else(|| "waiting for the brokers and the offsets topic".to_owned()))
        } else if !self.catch_up.is_ready() {
            Some(format!("catching up: {} offsets left to read", self.catch_up.progress().offsets_remaining))
        } else if let Some(share) = share.filter(|s| !s.is_started()) {
            debug_assert!(!share.is_ready());
            Some(format!("waiting for the brokers and {}", Log::ShareState.topic()))
        } else if let Some(share) = share.filter(|s| !s.is_ready()) {
            let left = share.progress().offsets_remaining;
            Some(format!("catching up with {}: {left} offsets left to read", Log::ShareState.topic()))
        } else {
            Some(match self.health.refresh_error() {
                Some(error) => {
                    format!("waiting for a watermark refresh after catching up; the last one failed: {error}")
                }
                None => "waiting for the first watermark refresh after catching up".to_owned(),
            })
        };
        Verdict { ready, caught_up, current, reason }
    }

    /// The offsets topic's partitions whose reader has stalled, in words:
    /// which, where, and since when.
    fn stalled(&self, now: Instant) -> Option<String> {
        let stalled = self.stalls.as_ref()?.stalled(now, self.stale_after);
        if stalled.is_empty() {
            return None;
        }
        let each: Vec<String> = stalled
            .iter()
            .map(|s| {
                let seconds = now.saturating_duration_since(s.since).as_secs();
                format!("{} at offset {} with {} unread, for {seconds} s", s.partition, s.position, s.unread)
            })
            .collect();
        Some(format!(
            "the reader of {} has not moved while records wait (stale after {:.0} s): partition {}",
            Log::Offsets.topic(),
            self.stale_after.as_secs_f64(),
            each.join("; partition ")
        ))
    }

    /// True once the initial partitions are tracked.
    pub(crate) fn is_started(&self) -> bool {
        self.catch_up.is_started()
    }

    /// Catch-up is complete (latched), of every log that is read.
    pub(crate) fn is_caught_up(&self) -> bool {
        self.catch_up.is_ready() && self.share.as_ref().is_none_or(CatchUp::is_ready)
    }

    /// How many times in a row `worker` has failed (0: never, or forgotten).
    pub(crate) fn failures(&self, worker: &str) -> u32 {
        self.health.failures(worker)
    }

    /// Where catching up stands.
    pub(crate) fn progress(&self) -> Progress {
        self.catch_up.progress()
    }

    /// Per-partition catch-up state.
    pub(crate) fn partitions(&self) -> impl Iterator<Item = (&i32, &PartitionProgress)> {
        self.catch_up.partitions().iter()
    }

    /// Worker and watermark health.
    pub(crate) fn health(&self) -> &Health {
        &self.health
    }
}

/// The condition a partition read again after a truncation holds.
fn rebuilding_key(log: Log, partition: i32) -> String {
    format!("rebuilding {}/{partition}", log.topic())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::failure::FailureKind;

    const STALE: Duration = Duration::from_secs(15);

    fn tracked(r: &mut Readiness, partitions: &[(i32, i64, i64)]) {
        for &(partition, low, high) in partitions {
            r.step(Event::Tracked { log: Log::Offsets, partition, low, high });
        }
        r.step(Event::Started(Log::Offsets));
    }

    #[test]
    fn waits_for_the_topic_then_catches_up_then_waits_for_fresh_watermarks() {
        let t = Instant::now();
        let mut r = Readiness::new(STALE);
        assert_eq!(r.verdict(t).reason.as_deref(), Some("waiting for the brokers and the offsets topic"));
        r.step(Event::Waiting("__consumer_offsets does not exist (yet)".into()));
        assert_eq!(r.verdict(t).reason.as_deref(), Some("__consumer_offsets does not exist (yet)"));
        tracked(&mut r, &[(0, 0, 10), (1, 0, 0)]);
        // A refresh that began before catch-up does not count.
        r.step(Event::Refreshed { at: t, caught_up_before: false });
        let v = r.verdict(t);
        assert!(!v.ready && !v.caught_up && v.current);
        assert_eq!(v.reason.as_deref(), Some("catching up: 10 offsets left to read"));
        r.step(Event::Position { log: Log::Offsets, partition: 0, next: 10 });
        let v = r.verdict(t);
        assert!(v.caught_up && !v.ready, "{v:?}");
        assert_eq!(v.reason.as_deref(), Some("waiting for the first watermark refresh after catching up"));
        r.step(Event::RefreshFailed {
            worker: "refresher",
            failure: Failure::new(FailureKind::Transient, "brokers down"),
        });
        assert!(r.verdict(t).reason.is_some_and(|why| why.contains("the last one failed: brokers down")));
        r.step(Event::Refreshed { at: t, caught_up_before: true });
        assert_eq!(r.verdict(t), Verdict { ready: true, caught_up: true, current: true, reason: None });
    }

    #[test]
    fn a_reader_that_stops_moving_while_records_wait_stops_serving_naming_its_partition() {
        let t = Instant::now();
        let s = Duration::from_secs;
        let mut r = Readiness::new(STALE);
        tracked(&mut r, &[(0, 0, 10), (1, 0, 5)]);
        r.step(Event::Position { log: Log::Offsets, partition: 0, next: 10 });
        r.step(Event::Position { log: Log::Offsets, partition: 1, next: 5 });
        let observed = |at, end0| Event::Observed {
            at,
            ends: [(0, end0), (1, 5)].into_iter().collect(),
            positions: [(0, Some(10)), (1, Some(5))].into_iter().collect(),
        };
        r.step(Event::Refreshed { at: t, caught_up_before: true });
        r.step(observed(t, 10));
        assert!(r.verdict(t).ready);
        // Commits arrive at partition 0; its reader never reads them, while
        // refreshes go on (the watermarks stay fresh).
        for i in 1..=4 {
            r.step(Event::Refreshed { at: t + s(5 * i), caught_up_before: true });
            r.step(observed(t + s(5 * i), 14));
        }
        assert!(r.verdict(t + s(20)).ready, "seen behind at 5 s: not stalled before 20 s");
        let v = r.verdict(t + s(21));
        assert!(!v.ready && !v.current, "{v:?}");
        let why = v.reason.expect("a reason");
        assert!(why.contains("partition 0 at offset 10 with 4 unread, for 16 s"), "{why}");
        assert!(!why.contains("partition 1"), "{why}");
        // It reads them: serving again.
        r.step(Event::Refreshed { at: t + s(25), caught_up_before: true });
        r.step(Event::Observed {
            at: t + s(25),
            ends: [(0, 14), (1, 5)].into_iter().collect(),
            positions: [(0, Some(14)), (1, Some(5))].into_iter().collect(),
        });
        assert!(r.verdict(t + s(26)).ready);
    }

    #[test]
    fn a_partition_ending_in_transaction_markers_is_done_at_its_end() {
        let t = Instant::now();
        let mut r = Readiness::new(STALE);
        tracked(&mut r, &[(0, 0, 12)]);
        r.step(Event::Position { log: Log::Offsets, partition: 0, next: 10 });
        assert!(!r.verdict(t).caught_up, "offsets 10 and 11 are markers, never delivered");
        r.step(Event::EndOfPartition { log: Log::Offsets, partition: 0, next: None });
        assert!(r.verdict(t).caught_up);
    }

    #[test]
    fn stale_watermarks_a_failed_worker_and_an_overdue_condition_each_stop_serving() {
        let t = Instant::now();
        let s = Duration::from_secs;
        let mut r = Readiness::new(STALE);
        tracked(&mut r, &[(0, 0, 0)]);
        r.step(Event::Refreshed { at: t, caught_up_before: true });
        assert!(r.verdict(t + s(15)).ready);
        // Watermarks older than the limit: not current, until a refresh.
        let v = r.verdict(t + s(16));
        assert!(!v.ready && !v.current && v.caught_up, "{v:?}");
        assert!(v.reason.is_some_and(|why| why.contains("watermarks are 16 s old")));
        r.step(Event::Refreshed { at: t + s(16), caught_up_before: true });
        assert!(r.verdict(t + s(16)).ready);
        // A worker down, until it shows progress.
        r.step(Event::WorkerFailed {
            worker: "offsets reader",
            failure: Failure::new(FailureKind::Panic, "boom"),
            at: t + s(17),
        });
        assert_eq!(r.failures("offsets reader"), 1);
        assert!(r.verdict(t + s(17)).reason.is_some_and(|why| why.contains("offsets reader failed")));
        r.step(Event::WorkerRunning("offsets reader"));
        assert!(r.verdict(t + s(17)).ready);
        // A shard without a primary: fine for its grace, then a problem.
        let key = "no primary for partition 3".to_owned();
        let why = "shard offsets-003 has no primary".to_owned();
        r.step(Event::Hold { key: key.clone(), why, grace: s(10), at: t + s(17) });
        assert!(r.verdict(t + s(27)).ready, "within its grace");
        assert!(r.verdict(t + s(28)).reason.is_some_and(|why| why.contains("offsets-003 has no primary for 11 s")));
        r.step(Event::Release(key));
        assert!(r.verdict(t + s(28)).ready);
    }

    #[test]
    fn share_state_when_read_is_caught_up_with_too_and_may_not_exist_yet() {
        let t = Instant::now();
        let mut r = Readiness::new(STALE);
        r.step(Event::Expected(Log::ShareState));
        tracked(&mut r, &[(0, 0, 1)]);
        r.step(Event::Position { log: Log::Offsets, partition: 0, next: 1 });
        r.step(Event::Refreshed { at: t, caught_up_before: true });
        let v = r.verdict(t);
        assert!(!v.ready && !v.caught_up, "{v:?}");
        assert_eq!(v.reason.as_deref(), Some("waiting for the brokers and __share_group_state"));
        // The same partition number in the other log is another partition.
        r.step(Event::Tracked { log: Log::ShareState, partition: 0, low: 5, high: 9 });
        r.step(Event::Started(Log::ShareState));
        assert_eq!(
            r.verdict(t).reason.as_deref(),
            Some("catching up with __share_group_state: 4 offsets left to read")
        );
        r.step(Event::EndOfPartition { log: Log::ShareState, partition: 0, next: Some(9) });
        r.step(Event::Refreshed { at: t, caught_up_before: true });
        assert!(r.verdict(t).ready);
        // Share state kshard may not read is left out, said, and not waited for.
        let mut r = Readiness::new(STALE);
        r.step(Event::Expected(Log::ShareState));
        tracked(&mut r, &[(0, 0, 0)]);
        r.step(Event::Tracked { log: Log::ShareState, partition: 0, low: 0, high: 9 });
        r.step(Event::Started(Log::ShareState));
        r.step(Event::Unreadable(Log::ShareState, "denied".into()));
        r.step(Event::Refreshed { at: t, caught_up_before: true });
        assert!(r.verdict(t).ready);
        assert_eq!(r.share_unreadable(), Some("denied"));
        // Positions in share state that is not read change nothing.
        let mut r = Readiness::new(STALE);
        tracked(&mut r, &[(0, 0, 0)]);
        r.step(Event::Position { log: Log::ShareState, partition: 0, next: 3 });
        r.step(Event::Refreshed { at: t, caught_up_before: true });
        assert!(r.verdict(t).ready);
        // A cluster without share groups has no state topic: nothing to read.
        let mut r = Readiness::new(STALE);
        r.step(Event::Expected(Log::ShareState));
        tracked(&mut r, &[(0, 0, 0)]);
        r.step(Event::Started(Log::ShareState));
        r.step(Event::Refreshed { at: t, caught_up_before: true });
        assert!(r.verdict(t).ready);
    }

    #[test]
    fn readiness_latches_across_partitions_added_later() {
        let t = Instant::now();
        let mut r = Readiness::new(STALE);
        tracked(&mut r, &[(0, 0, 1)]);
        r.step(Event::Position { log: Log::Offsets, partition: 0, next: 1 });
        r.step(Event::Refreshed { at: t, caught_up_before: true });
        r.step(Event::Tracked { log: Log::Offsets, partition: 1, low: 0, high: 1000 });
        assert!(r.verdict(t).ready, "a partition added later is read, not waited for");
        assert_eq!(r.progress().offsets_remaining, 1000);
    }
}
