//! `kshard-lag`: the consumer-lag application.
//!
//! The state is one [`GroupOffsets`] unit per `__consumer_offsets` partition
//! (committed offsets and metadata of the groups whose records that partition
//! holds), merged only when read; [`CatchUp`] knows when the reader has caught up;
//! [`Watermarks`] hold the topics' watermarks; [`Monitor`] ties them together for
//! the reader and the readers of metrics; [`Readiness`] decides whether what
//! they hold is current and complete; [`Metrics`] renders Prometheus text.
//! These, in `state/` (and the renderers in `metrics/` and `api.rs`), are free
//! of I/O; `io/` feeds them from Kafka — directly, or through durable shards of
//! `kshard-runtime` — and [`service`] serves them over HTTP.

mod api;
pub mod burrow;
mod io;
mod metrics;
mod state;

// The modules keep short paths inside the crate; the folders show the split.
pub use io::local_member::LocalMember;
pub use io::{brokers, service};
pub(crate) use io::{http, offsets_reader, offsets_shards, refresher, shards_reader, supervisor};
pub(crate) use state::{
    catch_up, consumer_status, derived, filter, group_offsets, health, lag_history, lag_time, monitor, names,
    open_transactions, readiness, shard_store, units, watermarks,
};

pub use api::{
    GroupDetail, GroupSummary, GroupView, HistoryView, MemberView, PartitionBehind, PartitionView, ReadyReport,
    TopicView, group as group_detail, groups as group_views, overview as group_overview,
};
pub use catch_up::{CatchUp, PartitionProgress, Progress};
pub use consumer_status::{Commit, CommitWindow, Status, StatusSettings};
pub use derived::{Derived, DerivedView};
pub use filter::NameFilter;
pub use group_offsets::{
    Applied, CommittedOffset, DescribedMember, Group, GroupInfo, GroupOffsets, Member, Skipped, Transactional,
};
pub use health::{FAILURES_FORGOTTEN_AFTER, Health, WorkerFailure};
pub use lag_history::{HistorySettings, LagHistory, LagPoint};
pub use lag_time::{LagTimes, Method};
pub use metrics::{Metrics, SelfTimings};
pub use monitor::{Clock, DEFAULT_STALE_AFTER, Granularity, Monitor, MonitorSettings, SystemClock};
pub use names::{FastMap, Names};
pub use open_transactions::{OpenTransactions, PendingCommit};
pub use readiness::{Event, Readiness, Verdict};
pub use shards_reader::{ClusterOptions, recovery_log_topic};
pub use units::{ReadCounters, RecordAt, SkippedRecord, Units};
pub use watermarks::{Watermark, Watermarks, lag};
