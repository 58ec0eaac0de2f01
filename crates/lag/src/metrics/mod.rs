//! Prometheus metrics, computed from the monitor's state at each scrape.
//!
//! Names follow kminion's, so existing dashboards work; the prefix is the
//! configured namespace (`kminion` gives kminion's exact names). Group series
//! appear only once the monitor has caught up: before that they would show
//! offsets from the past as if they were current.
//!
//! One function per metric family: [`exporter`] for the exporter's own series
//! (up, records read and skipped, catch-up, health, timings), [`watermark`]
//! for the partitions' watermarks, [`groups`] for the groups' lag, commits,
//! metadata and assignments.

mod burrow_names;
mod cluster;
mod end_to_end;
mod exporter;
pub(crate) mod exposition;
pub(crate) mod exposition_read;
mod groups;
mod kafka_exporter;
mod kafka_lag_exporter;
pub(crate) mod otlp;
pub(crate) mod process;
pub(crate) mod process_resources;
mod profile;
mod profile_rows;
mod share_groups;
mod watermark;

pub use profile::Profile;

use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::registry::Registry;

use crate::LocalMember;
use crate::cluster_view::ClusterView;
use crate::end_to_end::EndToEnd;
use crate::monitor::Monitor;

/// Durations the exporter measures about itself.
#[derive(Debug, Default)]
pub struct SelfTimings {
    /// How long the last watermark refresh took.
    pub watermark_refresh: Mutex<Option<Duration>>,
    /// How long the last `/metrics` render took.
    pub render: Mutex<Option<Duration>>,
}

/// Renders `/metrics` for a monitor.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    timings: Arc<SelfTimings>,
    profile: Profile,
}

impl Metrics {
    /// Metrics for `monitor`, every name prefixed with `namespace_`.
    pub fn new(namespace: &str, monitor: Arc<Monitor>, timings: Arc<SelfTimings>) -> Self {
        Self::with_member(namespace, monitor, LocalMember::default(), timings)
    }

    /// [`Metrics::new`], with the shards of `member` once it runs them.
    pub fn with_member(namespace: &str, monitor: Arc<Monitor>, member: LocalMember, timings: Arc<SelfTimings>) -> Self {
        Self::with_profile(Profile::Kshard, namespace, monitor, member, timings, None, None)
    }

    /// Metrics in `profile`'s names: kshard's own (prefixed `namespace_`), or
    /// another tool's for what kshard knows, beside kshard's health series
    /// (`namespace_exporter_up`, `namespace_catchup_ready`, …); with
    /// `cluster`, kminion's cluster, broker and topic families from it; with
    /// `end_to_end`, kminion's end-to-end probe families.
    pub fn with_profile(
        profile: Profile,
        namespace: &str,
        monitor: Arc<Monitor>,
        member: LocalMember,
        timings: Arc<SelfTimings>,
        cluster: Option<Arc<ClusterView>>,
        end_to_end: Option<Arc<EndToEnd>>,
    ) -> Self {
        let collector = LagCollector { monitor, member, timings: Arc::clone(&timings), profile, cluster, end_to_end };
        let registry = if profile.is_native() {
            let mut registry = Registry::with_prefix(namespace);
            registry.register_collector(Box::new(collector));
            registry
        } else {
            let mut registry = Registry::default();
            let health = HealthCollector(LagCollector {
                profile: Profile::Kshard,
                cluster: None,
                end_to_end: None,
                ..collector.clone()
            });
            registry.sub_registry_with_prefix(namespace).register_collector(Box::new(health));
            registry.register_collector(Box::new(collector));
            registry
        };
        Metrics { registry, timings, profile }
    }

    /// Whose names these are.
    pub fn profile(&self) -> Profile {
        self.profile
    }

    /// The Prometheus text exposition of every metric.
    pub fn render(&self) -> Result<String, std::fmt::Error> {
        let started = Instant::now();
        let mut out = String::with_capacity(1 << 16);
        prometheus_client::encoding::prometheus_text::encode(&mut out, &self.registry)?;
        *self.timings.render.lock().unwrap_or_else(PoisonError::into_inner) = Some(started.elapsed());
        Ok(out)
    }
}

#[derive(Debug, Clone)]
struct LagCollector {
    monitor: Arc<Monitor>,
    member: LocalMember,
    timings: Arc<SelfTimings>,
    profile: Profile,
    cluster: Option<Arc<ClusterView>>,
    end_to_end: Option<Arc<EndToEnd>>,
}

/// kshard's health series alone, beside another tool's names.
#[derive(Debug)]
struct HealthCollector(LagCollector);

impl Collector for HealthCollector {
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> Encoded {
        self.0.health(&mut encoder).map(|_| ())
    }
}

type Encoded = Result<(), std::fmt::Error>;

fn gauge(encoder: &mut DescriptorEncoder<'_>, name: &str, help: &str, value: i64) -> Encoded {
    let g = ConstGauge::new(value);
    g.encode(encoder.encode_descriptor(name, help, None, MetricType::Gauge)?)
}

fn counter(encoder: &mut DescriptorEncoder<'_>, name: &str, help: &str, value: u64) -> Encoded {
    let c = ConstCounter::new(value);
    c.encode(encoder.encode_descriptor(name, help, None, MetricType::Counter)?)
}

impl LagCollector {
    /// The exporter's own series; whether lag is current, and ready.
    fn health(&self, e: &mut DescriptorEncoder<'_>) -> Result<(bool, bool), std::fmt::Error> {
        let m = &*self.monitor;
        exporter::up(e)?;
        exporter::records_consumed(e, m)?;
        exporter::offset_fetch_errors(e, m)?;
        exporter::records_skipped(e, m)?;
        exporter::worker_failures(e, m)?;
        exporter::share_state_records(e, m)?;
        let ready = m.is_ready();
        exporter::catchup_ready(e, ready)?;
        let progress = m.progress();
        exporter::catchup_offsets_remaining(e, &progress)?;
        exporter::catchup_partitions_caught_up(e, &progress)?;
        exporter::offsets_topic_unread_offsets(e, m)?;
        exporter::offsets_topic_open_transactions(e, m)?;
        exporter::timings(e, &self.timings)?;
        // Watermarks the brokers have not confirmed lately are not current: no
        // series rather than frozen ones.
        let current = m.problem().is_none();
        exporter::data_current(e, current)?;
        exporter::watermarks_age(e, m)?;
        exporter::shards_without_primary(e, m, self.member.shared().as_ref())?;
        Ok((current, ready))
    }
}

impl Collector for LagCollector {
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> Encoded {
        let (e, m) = (&mut encoder, &*self.monitor);
        let cluster = self.cluster.as_ref().and_then(|c| c.fresh(m.now()));
        if !self.profile.is_native() {
            if self.profile == Profile::KafkaExporter {
                kafka_exporter::build_info(e)?;
            }
            // Another tool's names: its series only while lag is current and complete.
            if m.problem().is_none() && m.is_ready() {
                let rows = profile_rows::ProfileRows::collect(m, &m.snapshot(), self.profile);
                return match self.profile {
                    Profile::KafkaExporter => kafka_exporter::encode(e, &rows, cluster.as_ref(), &m.settings().topics),
                    Profile::KafkaLagExporter => kafka_lag_exporter::encode(e, &rows, &self.timings),
                    _ => burrow_names::encode(e, &rows),
                };
            }
            return Ok(());
        }
        let (current, ready) = self.health(e)?;
        if let Some(snapshot) = &cluster {
            cluster::families(e, snapshot, &m.settings().topics)?;
        }
        if let Some(probe) = &self.end_to_end {
            end_to_end::families(e, &probe.snapshot())?;
        }
        if !current {
            return Ok(());
        }
        // One refresh's snapshot: the watermarks and every lag with them.
        let snapshot = m.snapshot();
        watermark::partition_watermarks(e, &snapshot.watermarks)?;
        watermark::topic_watermark_sums(e, &snapshot.watermarks)?;
        if !ready {
            return Ok(());
        }
        let mut rows = groups::Rows::collect(m, &snapshot);
        let mut share = share_groups::ShareRows::collect(m, &snapshot);
        // Only per-partition series are capped (the roll-ups count all).
        if let Some(max) = m.settings().max_partition_series
            && m.settings().granularity == crate::monitor::Granularity::Partition
        {
            rows.cap(max, &mut share);
        }
        groups::partition_lag(e, &rows)?;
        groups::topic_lag_and_offset_sum(e, &rows)?;
        groups::lag_seconds(e, &rows)?;
        groups::motion(e, &rows)?;
        groups::dropped(e, &rows)?;
        groups::offset_commits(e, &rows)?;
        groups::status(e, &rows)?;
        groups::records_lost(e, &rows)?;
        groups::info(e, &rows)?;
        groups::members(e, &rows)?;
        groups::topic_assignments(e, &rows)?;
        share_groups::partitions(e, &share)?;
        share_groups::topics(e, &share)
    }
}

/// A small reusable buffer for formatting partition ids without allocating.
fn itoa_buf() -> IdBuf {
    IdBuf(String::with_capacity(12))
}

struct IdBuf(String);

impl IdBuf {
    fn format(&mut self, n: i32) -> &str {
        use std::fmt::Write;
        self.0.clear();
        // Writing to a String cannot fail.
        let _ = write!(self.0, "{n}");
        &self.0
    }
}
