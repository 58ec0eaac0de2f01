//! What the lag monitor exports, fixed at start ([`MonitorSettings`]), and
//! where its decisions read the time ([`Clock`]): read by the monitor and
//! by everything that derives from its state.

use crate::consumer_status::StatusSettings;
use crate::filter::NameFilter;
use crate::lag_history::HistorySettings;

/// Where the monitor's decisions read the time: the system's, or a test's.
pub trait Clock: Send + Sync + std::fmt::Debug {
    /// The current instant.
    fn now(&self) -> std::time::Instant;

    /// The wall-clock time, in ms since the epoch (commit times are on it).
    fn epoch_ms(&self) -> i64 {
        let since = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
        i64::try_from(since.as_millis()).unwrap_or(i64::MAX)
    }
}

/// The system's monotonic clock.
#[derive(Debug, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> std::time::Instant {
        std::time::Instant::now()
    }
}

/// Which lag series to export (`partition` or `topic` in a configuration
/// file).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Deserialize, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Granularity {
    /// Per partition and per topic.
    #[default]
    Partition,
    /// Per topic only.
    Topic,
}

/// What the monitor exports, fixed at start.
#[derive(Debug, Clone, Default)]
pub struct MonitorSettings {
    /// Groups to export.
    pub groups: NameFilter,
    /// Topics to export.
    pub topics: NameFilter,
    /// Partition or topic series.
    pub granularity: Granularity,
    /// How consumer status is judged.
    pub status: StatusSettings,
    /// How much of each group's lag history the page's chart gets.
    pub history: HistorySettings,
    /// Which commit-age, rate and catch-up series to export: per partition
    /// (with `granularity: partition`) and per topic, or per topic only — four
    /// families fewer per group-partition (`/api` and the page keep them).
    pub motion_granularity: Granularity,
    /// At most this many group-partitions get per-partition series in
    /// `/metrics` (those with the most lag in seconds, then in records); the
    /// per-topic and per-group roll-ups always cover every one. `None`: all.
    pub max_partition_series: Option<usize>,
    /// The share groups' `share.delivery.count.limit` (Kafka's
    /// `group.share.delivery.count.limit`): records archived at this many
    /// deliveries count as poison messages. `None`: Kafka's default, 5.
    pub share_delivery_count_limit: Option<i16>,
    /// Watermarks of every topic the `topics` filter allows, not only of
    /// those some group committed to: the `kafka_exporter` profile's topic
    /// families cover every topic, as kafka_exporter's do.
    pub every_topic_watermarks: bool,
    /// The lag objectives covering this cluster's groups (see
    /// [`crate::prometheus_rules`]): their budgets as measured here are on
    /// each group's page. Only their `group_id` matchers are read.
    pub objectives: std::sync::Arc<[crate::objectives::Objective]>,
}
