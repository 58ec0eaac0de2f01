//! The OTLP metrics export: every `interval`, the series `/metrics` shows
//! (every cluster's, labelled as there) are read from that same text and
//! pushed to an OpenTelemetry collector, in requests of bounded size. A
//! request the collector may take later (it is down, busy, slow) is tried
//! again with backoff until the next export is due, then dropped: the next
//! one carries the counters' new totals anyway. One last export goes out
//! at shutdown. Failures are logged and counted
//! (`<namespace>_otlp_exports_total{outcome}`); they never touch `/ready`.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::shutdown::Shutdown;
use tracing::{info, warn};

pub use super::otlp_settings::OtlpSettings;
use super::otlp_transport::{Failure, Sink};
use crate::metrics::exposition_read;
use crate::metrics::otlp::{Envelope, points, requests};

/// What the export has done, for `/metrics`.
#[derive(Debug, Default)]
pub(crate) struct OtlpStatus {
    succeeded: AtomicU64,
    failed: AtomicU64,
    points: AtomicU64,
    rejected: AtomicU64,
    last_success_ms: AtomicU64,
}

impl OtlpStatus {
    /// The export's own series, in Prometheus text, named under `namespace`.
    pub(crate) fn render(&self, namespace: &str) -> String {
        use crate::metrics::process::family;
        let n = |a: &AtomicU64| a.load(Ordering::Relaxed) as f64;
        let one = |value: f64| [(String::new(), value)];
        let mut out = String::new();
        let outcomes = [
            ("outcome=\"success\"".to_owned(), n(&self.succeeded)),
            ("outcome=\"failure\"".to_owned(), n(&self.failed)),
        ];
        let help = "OTLP export requests, by outcome (a failure after its retries).";
        family(&mut out, namespace, "otlp_exports_total", help, "counter", &outcomes);
        let help = "Data points sent in accepted requests.";
        family(&mut out, namespace, "otlp_data_points_total", help, "counter", &one(n(&self.points)));
        let help = "Data points the collector refused in a partial success.";
        family(&mut out, namespace, "otlp_data_points_rejected_total", help, "counter", &one(n(&self.rejected)));
        let help = "When an export last succeeded, Unix seconds (0: never).";
        let last = n(&self.last_success_ms) / 1000.0;
        family(&mut out, namespace, "otlp_last_success_timestamp_seconds", help, "gauge", &one(last));
        out
    }
}

fn unix_ns() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64)
}

/// The wait before retry `attempt` (1-based) of a failure, or `None` when
/// it is not worth retrying or would end after `left`: 1 s doubling to
/// 16 s, or what the collector asked for.
pub(crate) fn retry_wait(failure: &Failure, attempt: u32, left: Duration) -> Option<Duration> {
    if !failure.retryable {
        return None;
    }
    let backoff = Duration::from_secs(1 << attempt.saturating_sub(1).min(4));
    let wait = failure.retry_after.unwrap_or(backoff);
    (wait < left).then_some(wait)
}

/// The export loop: every `settings.interval` (the first at once, a last
/// when `stop` is triggered), `render`'s text to `sink`.
pub(crate) async fn run<S: Sink>(
    sink: S,
    settings: OtlpSettings,
    render: Arc<dyn Fn() -> Result<String, String> + Send + Sync>,
    status: Arc<OtlpStatus>,
    stop: Shutdown,
) {
    let start_ns = unix_ns();
    let mut ticks = tokio::time::interval(settings.interval);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    info!(endpoint = %settings.endpoint, protocol = ?settings.protocol, interval_seconds = settings.interval.as_secs_f64(), "exporting metrics over OTLP");
    let mut failing = false;
    loop {
        let last = tokio::select! {
            biased;
            () = stop.wait() => true,
            _ = ticks.tick() => false,
        };
        let outcome = if last {
            // The process is stopping: one try, all of it within one timeout.
            let deadline = tokio::time::Instant::now();
            let once = export_once(&sink, &settings, &render, &status, start_ns, deadline, stop.clone());
            tokio::time::timeout(settings.timeout, once)
                .await
                .unwrap_or_else(|_| Err(format!("the last export took over {:?}; given up", settings.timeout)))
        } else {
            let deadline = tokio::time::Instant::now() + settings.interval;
            export_once(&sink, &settings, &render, &status, start_ns, deadline, stop.clone()).await
        };
        match (&outcome, failing) {
            (Ok(()), true) => info!(endpoint = %settings.endpoint, "OTLP export works again"),
            (Err(e), false) => {
                warn!(endpoint = %settings.endpoint, error = %e, "OTLP export failed; trying again at the next interval")
            }
            _ => {}
        }
        failing = outcome.is_err();
        if last {
            return;
        }
    }
}

/// One export: every request, each retried until `deadline` or until `stop`.
async fn export_once<S: Sink>(
    sink: &S,
    settings: &OtlpSettings,
    render: &Arc<dyn Fn() -> Result<String, String> + Send + Sync>,
    status: &OtlpStatus,
    start_ns: u64,
    deadline: tokio::time::Instant,
    stop: Shutdown,
) -> Result<(), String> {
    // Rendering, reading back and mapping 100k series takes a while: off
    // the async workers, as `/metrics` is.
    let (render, resource, max_points) =
        (Arc::clone(render), settings.resource.clone(), settings.max_points_per_request);
    let built = tokio::task::spawn_blocking(move || {
        let text = render()?;
        let families = exposition_read::read(&text).map_err(|e| format!("reading kshard's own series: {e}"))?;
        let envelope = Envelope { resource: &resource, start_ns, now_ns: unix_ns(), max_points };
        Ok::<_, String>(requests(&families, &envelope))
    });
    let built = built.await.map_err(|e| format!("building the export: {e}"))??;
    let mut first_error = None;
    for request in built {
        let points: u64 = request
            .resource_metrics
            .iter()
            .flat_map(|r| &r.scope_metrics)
            .flat_map(|s| &s.metrics)
            .map(|m| points(m) as u64)
            .sum();
        let mut attempt = 0;
        loop {
            attempt += 1;
            match sink.export(request.clone()).await {
                Ok(accepted) => {
                    status.succeeded.fetch_add(1, Ordering::Relaxed);
                    status.points.fetch_add(points, Ordering::Relaxed);
                    if accepted.rejected > 0 || !accepted.message.is_empty() {
                        status.rejected.fetch_add(accepted.rejected.max(0) as u64, Ordering::Relaxed);
                        warn!(rejected = accepted.rejected, message = %accepted.message, "the OTLP collector refused part of an export");
                    }
                    let ms = unix_ns() / 1_000_000;
                    status.last_success_ms.store(ms, Ordering::Relaxed);
                    break;
                }
                Err(failure) => {
                    let left = deadline.saturating_duration_since(tokio::time::Instant::now());
                    let give_up = match retry_wait(&failure, attempt, left) {
                        Some(wait) => tokio::select! {
                            _ = tokio::time::sleep(wait) => false,
                            () = stop.wait() => true,
                        },
                        None => true,
                    };
                    if give_up {
                        status.failed.fetch_add(1, Ordering::Relaxed);
                        first_error.get_or_insert(failure.message);
                        break;
                    }
                }
            }
        }
    }
    first_error.map_or(Ok(()), Err)
}

#[cfg(test)]
mod tests {
    use std::collections::VecDeque;
    use std::sync::Mutex;

    use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;

    use super::super::otlp_settings::OtlpProtocol;
    use super::super::otlp_transport::Accepted;
    use super::*;

    /// Answers from a script, keeping what it was sent.
    #[derive(Clone, Default)]
    struct Script {
        answers: Arc<Mutex<VecDeque<Result<Accepted, Failure>>>>,
        sent: Arc<Mutex<Vec<(tokio::time::Instant, ExportMetricsServiceRequest)>>>,
    }

    impl Sink for Script {
        async fn export(&self, request: ExportMetricsServiceRequest) -> Result<Accepted, Failure> {
            self.sent.lock().expect("lock").push((tokio::time::Instant::now(), request));
            let next = self.answers.lock().expect("lock").pop_front();
            next.unwrap_or(Ok(Accepted { rejected: 0, message: String::new() }))
        }
    }

    fn unavailable() -> Result<Accepted, Failure> {
        Err(Failure { retryable: true, retry_after: None, message: "503".into() })
    }

    #[test]
    fn retries_follow_the_specification() {
        let busy = Failure { retryable: true, retry_after: None, message: String::new() };
        let waits: Vec<_> = (1..=7).map(|a| retry_wait(&busy, a, Duration::from_secs(60))).collect();
        let secs = |s| Some(Duration::from_secs(s));
        assert_eq!(waits, [secs(1), secs(2), secs(4), secs(8), secs(16), secs(16), secs(16)]);
        assert_eq!(retry_wait(&busy, 5, Duration::from_secs(10)), None, "would end after the next export");
        let told = Failure { retry_after: Some(Duration::from_secs(7)), ..busy.clone() };
        assert_eq!(retry_wait(&told, 1, Duration::from_secs(60)), secs(7), "Retry-After wins");
        let refused = Failure { retryable: false, ..busy };
        assert_eq!(retry_wait(&refused, 1, Duration::from_secs(60)), None);
    }

    #[tokio::test(start_paused = true)]
    async fn exports_every_interval_retries_and_flushes_at_stop() {
        let sink = Script::default();
        sink.answers.lock().expect("lock").extend([unavailable(), unavailable()]);
        let mut settings = OtlpSettings::new("http://collector:4318/v1/metrics", OtlpProtocol::HttpProtobuf);
        settings.interval = Duration::from_secs(30);
        let status = Arc::new(OtlpStatus::default());
        let stop = Shutdown::default();
        let render: Arc<dyn Fn() -> Result<String, String> + Send + Sync> =
            Arc::new(|| Ok("# TYPE kshard_up gauge\nkshard_up 1\n".to_owned()));
        let task = tokio::spawn(run(sink.clone(), settings, render, Arc::clone(&status), stop.clone()));
        let t0 = tokio::time::Instant::now();
        tokio::time::sleep(Duration::from_secs(65)).await;
        stop.trigger();
        task.await.expect("ends");
        let at: Vec<u64> = sink.sent.lock().expect("lock").iter().map(|(t, _)| (*t - t0).as_secs()).collect();
        // At 0 s (refused), 1 s (refused), 3 s (taken); 30 s, 60 s; 65 s at stop.
        assert_eq!(at, [0, 1, 3, 30, 60, 65]);
        let text = status.render("kshard");
        assert!(text.contains("kshard_otlp_exports_total{outcome=\"success\"} 4\n"), "{text}");
        assert!(text.contains("kshard_otlp_exports_total{outcome=\"failure\"} 0\n"), "{text}");
        assert!(text.contains("kshard_otlp_data_points_total 4\n"), "{text}");
    }

    #[tokio::test(start_paused = true)]
    async fn a_collector_down_for_good_is_given_up_each_interval() {
        let sink = Script::default();
        sink.answers.lock().expect("lock").extend((0..100).map(|_| unavailable()));
        let mut settings = OtlpSettings::new("http://collector:4318/v1/metrics", OtlpProtocol::HttpProtobuf);
        settings.interval = Duration::from_secs(10);
        let status = Arc::new(OtlpStatus::default());
        let stop = Shutdown::default();
        let render: Arc<dyn Fn() -> Result<String, String> + Send + Sync> = Arc::new(|| Ok(String::new()));
        let task = tokio::spawn(run(sink.clone(), settings, render, Arc::clone(&status), stop.clone()));
        let t0 = tokio::time::Instant::now();
        tokio::time::sleep(Duration::from_secs(25)).await;
        stop.trigger();
        task.await.expect("ends");
        let at: Vec<u64> = sink.sent.lock().expect("lock").iter().map(|(t, _)| (*t - t0).as_secs()).collect();
        // Given up when the next wait would pass the next export; the stop
        // cuts the third short; the last is tried once.
        assert_eq!(at, [0, 1, 3, 7, 10, 11, 13, 17, 20, 21, 23, 25]);
        assert!(status.render("k").contains("k_otlp_exports_total{outcome=\"failure\"} 4\n"));
    }
}
