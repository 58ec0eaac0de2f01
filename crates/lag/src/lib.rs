//! `kshard-lag`: the consumer-lag application.
//!
//! The state is one [`GroupOffsets`] unit per `__consumer_offsets` partition
//! (committed offsets and metadata of the groups whose records that partition
//! holds), merged only when read; [`CatchUp`] knows when the reader has caught up;
//! [`Watermarks`] hold the topics' watermarks; [`Monitor`] ties them together for
//! the reader and the readers of metrics; [`Metrics`] renders Prometheus text.
//! These are free of I/O; [`service`] feeds them from Kafka and serves them over
//! HTTP.

mod api;
pub mod brokers;
mod catch_up;
mod filter;
mod group_offsets;
mod health;
mod http;
mod metrics;
mod monitor;
mod names;
mod offsets_reader;
mod offsets_shards;
mod readiness;
mod refresher;
pub mod service;
mod shards_reader;
mod supervisor;
mod watermarks;

pub use api::{GroupView, PartitionBehind, PartitionView, ReadyReport, TopicView};
pub use catch_up::{CatchUp, PartitionProgress, Progress};
pub use filter::NameFilter;
pub use group_offsets::{Applied, CommittedOffset, DescribedMember, Group, GroupInfo, GroupOffsets, Member, Skipped};
pub use health::{FAILURES_FORGOTTEN_AFTER, Health, WorkerFailure};
pub use metrics::{Metrics, SelfTimings};
pub use monitor::{
    Clock, DEFAULT_STALE_AFTER, Granularity, Monitor, MonitorSettings, ReadCounters, SkippedRecord, SystemClock,
};
pub use names::{FastMap, Names};
pub use readiness::{Event, Readiness, Verdict};
pub use shards_reader::{ClusterOptions, recovery_log_topic};
pub use watermarks::{Watermark, Watermarks, lag};
