//! The log lines of catching up with a log: progress every five seconds,
//! then once "caught up" with the rate.

use std::time::{Duration, Instant};

use tracing::info;

use crate::catch_up::Log;
use crate::monitor::Monitor;

/// How often progress is said while catching up.
const EVERY: Duration = Duration::from_secs(5);

/// Where the lines of one log stand.
pub(crate) struct CatchUpLog {
    log: Log,
    started: Instant,
    last: Instant,
    records_at_last: u64,
    /// "caught up" was said (or the log was caught up when this began).
    pub(crate) announced: bool,
}

impl CatchUpLog {
    pub(crate) fn new(monitor: &Monitor, log: Log) -> Self {
        let now = Instant::now();
        let records = monitor.log(log).counters().records.get();
        let announced = monitor.progress_of(log).is_some_and(|p| p.ready);
        CatchUpLog { log, started: now, last: now, records_at_last: records, announced }
    }

    /// Says where catching up stands, when it is time to.
    pub(crate) fn report(&mut self, monitor: &Monitor) {
        let records = monitor.log(self.log).counters().records.get();
        let Some(p) = monitor.progress_of(self.log) else { return };
        let topic = self.log.topic();
        if p.ready {
            self.announced = true;
            let secs = self.started.elapsed().as_secs_f64();
            info!(records, seconds = secs, rate = records as f64 / secs.max(1e-9), topic, "caught up");
        } else if self.last.elapsed() >= EVERY {
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
