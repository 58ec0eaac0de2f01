//! `kshard-lag`: the consumer-lag application.
//!
//! `state/` is pure — no I/O, the time from an injected [`Clock`]: one
//! [`GroupOffsets`] unit per `__consumer_offsets` partition (committed
//! offsets and metadata of the groups whose records that partition holds),
//! merged only when read, held in [`Units`]; [`CatchUp`] and the readiness
//! state machine know when the reader has caught up and whether what it holds
//! is current ([`Verdict`]); [`Watermarks`] hold the topics' watermarks; what
//! each refresh derives (commit windows and statuses, record times for lag in
//! seconds, lag history, and from the windows each group-partition's
//! [`Velocity`] and commit age) is read through a `DerivedView`; [`Monitor`]
//! ties them together; the store layout of durable shards is `shard_store`.
//! [`SharePartition`] folds a share-partition's state from
//! `__share_group_state` as Kafka's share coordinator does, and gives its lag
//! (the service reads that topic beside `__consumer_offsets`). The
//! renderers, also pure: [`Metrics`] (Prometheus text), `api.rs` (JSON) and
//! [`burrow`] (Burrow's API).
//!
//! `io/` feeds the state from Kafka through kshard-kafka's seams — the
//! offsets reader (through shards of `kshard-runtime`: in memory, or durable
//! with a data directory; [`LocalMember`]), the watermark refresher, their
//! supervision — and [`service`] serves it over HTTP.

mod api;
pub mod burrow;
mod io;
mod metrics;
pub mod settings;
mod state;
pub mod web;

// The modules keep short paths inside the crate; the folders show the split.
pub use io::cluster_info::ClusterInfoSettings;
pub use io::end_to_end::EndToEndSettings;
pub use io::keda_server as keda;
pub use io::local_member::LocalMember;
pub use io::notifier_settings::{
    HttpTarget, MailTarget, MailTls, NoticeThreshold, NotifierSettingError, NotifierSettings, Sender as NotifierSender,
};
pub use io::otlp_export::OtlpSettings;
pub use io::otlp_transport::{OtlpProtocol, OtlpSettingError, OtlpTls};
pub(crate) use io::{
    app_state, catch_up_log, cluster_info, cluster_workers, http, log_app, log_reader, log_shards, memory_shard,
    offsets_layout, offsets_reader, refresher, serve_options, shards_reader, share_layout, share_scrape, shutdown,
    supervisor,
};
pub use io::{brokers, service};
pub use metrics::exposition_read::ReadError as ExpositionError;
pub use metrics::otlp::export_bodies as otlp_export_bodies;
pub use metrics::process::LogCounts;
pub(crate) use state::{
    catch_up, cluster_view, consumer_status, derived, end_to_end, failure, filter, group, group_offsets, health,
    invalid_setting, lag_history, lag_time, monitor, monitor_settings, names, notify, objective_budget, objectives,
    open_transactions, readiness, scaler, shard_store, share_partition, share_rows, share_state, share_store, snapshot,
    stalls, striped_count, units, velocity, watermarks,
};

pub use api::{
    BatchView, GroupDetail, GroupSummary, GroupView, HistoryView, MemberView, PartitionBehind, PartitionView,
    ReadyReport, ShareView, TopicView, group as group_detail, groups as group_views, overview as group_overview,
};
pub use catch_up::{CatchUp, Log, Progress};
pub use cluster_view::{ClusterSnapshot, ClusterView};
pub use consumer_status::{Commit, StatusSettings};
pub use end_to_end::{
    CoordinatorProbe, EndToEnd, Histogram, PartitionProbe, ProbeMessage, ProbeSlas, ProbeSnapshot, SLA_EXCEEDED,
    kminion_buckets,
};
pub use filter::NameFilter;
pub use group_offsets::{
    Applied, CommittedOffset, DescribedMember, Group, GroupInfo, GroupOffsets, Member, ReportedGroups, Skipped,
    StreamsMember, SubtopologyInfo, TaskList, Topology, Transactional,
};
pub use invalid_setting::InvalidSetting;
pub use lag_history::{HistorySettings, LagHistory};
pub use log_reader::ClusterOptions;
pub use metrics::{Metrics, Profile, SelfTimings};
pub use monitor::{Clock, DEFAULT_STALE_AFTER, Granularity, Monitor, MonitorSettings, SystemClock};
pub use names::Names;
pub use objective_budget::BudgetView;
pub use objectives::{Matcher, Objective, ObjectiveError, prometheus_rules};
pub use readiness::Verdict;
pub use shards_reader::{recovery_log_topic, share_recovery_log_topic};
pub use share_partition::{Run, SharePartition};
pub use share_rows::{DEFAULT_DELIVERY_COUNT_LIMIT, ShareRow};
pub use share_state::{ShareApplied, ShareKey, ShareState};
pub use striped_count::StripedCount;
pub use units::{LogUnits, ReadCounters, RecordAt, SkippedRecord, Unit, Units};
pub use velocity::{Velocity, commit_age_s};
pub use watermarks::{Watermark, Watermarks, lag};
