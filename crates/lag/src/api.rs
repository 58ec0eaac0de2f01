//! The JSON shapes of `/ready` and `/api/groups`.

mod share;

use std::collections::BTreeMap;
use std::sync::Arc;

pub use share::{BatchView, ShareView};

use serde::Serialize;

use crate::consumer_status::Status;
use crate::lag_history::LagPoint;
use crate::monitor::Monitor;
use crate::snapshot::GroupLag;

/// `/ready`: readiness with catch-up progress.
#[derive(Debug, Serialize)]
pub struct ReadyReport {
    /// True once caught up and watermarks refreshed since, while every worker
    /// runs and the watermarks are recent.
    pub ready: bool,
    /// Why not ready, in words.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// True once every initial partition was read to its start high watermark.
    pub caught_up: bool,
    /// Partitions of `__consumer_offsets` caught up.
    pub partitions_caught_up: usize,
    /// Partitions of `__consumer_offsets` tracked.
    pub partitions: usize,
    /// Offsets read.
    pub offsets_read: i64,
    /// Offsets left to read.
    pub offsets_remaining: i64,
    /// Percent done.
    pub percent: f64,
    /// Records read so far.
    pub records: u64,
    /// The partitions not caught up yet (at most 50), with where they stand.
    pub behind: Vec<PartitionBehind>,
    /// With a data directory: each partition's shard and its replica's status
    /// here (BACKFILL, STANDBY, PRIMARY, FAILED).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub shards: Option<std::collections::BTreeMap<String, String>>,
    /// With a data directory: the member serving each partition's shard as
    /// PRIMARY. A shard missing here has none (a fail-over under way): its
    /// lag is served from this member's standby copy, as of the last
    /// transaction its primary committed, and turns this 503 once that lasts
    /// past the lease's TTL and a grace.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub primaries: Option<std::collections::BTreeMap<String, String>>,
    /// With a data directory: the age in seconds of the state served here
    /// for each shard, the time since its replica here last applied a record
    /// of its recovery log. A running primary commits about every 2 s, so
    /// an age past 6 s is named below (its primary gone, or stuck) and turns
    /// this 503 once it has lasted the lease's TTL more (so no answer is 200
    /// on state older than 6 s and the TTL).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ages: Option<std::collections::BTreeMap<String, f64>>,
    /// What is normal for a moment but watched (a shard moving, a fail-over),
    /// with how long it has lasted.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub transient: Vec<String>,
    /// Why share groups' progress is left out (kshard may not Read
    /// `__share_group_state`), when it is.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub share_groups_left_out: Option<String>,
}

/// A partition of `__consumer_offsets` still catching up.
#[derive(Debug, Serialize)]
pub struct PartitionBehind {
    /// The partition.
    pub partition: i32,
    /// The next offset to read.
    pub position: i64,
    /// The offset to reach.
    pub target: i64,
}

/// The `/ready` report of `monitor`, with the shards of `member` (what the
/// runtime member running them here shares) when there is one.
pub(crate) fn readiness(monitor: &Monitor, member: Option<&kshard_runtime::NodeShared>) -> ReadyReport {
    let p = monitor.progress();
    let behind = monitor
        .partition_progress()
        .into_iter()
        .filter(|(_, s)| !s.caught_up)
        .take(50)
        .map(|(partition, s)| PartitionBehind { partition, position: s.position, target: s.target })
        .collect();
    let verdict = monitor.verdict();
    let (ready, caught_up, reason) = (verdict.ready, verdict.caught_up, verdict.reason);
    ReadyReport {
        ready,
        reason,
        caught_up,
        partitions_caught_up: p.partitions_caught_up,
        partitions: p.partitions,
        offsets_read: p.offsets_read,
        offsets_remaining: p.offsets_remaining,
        percent: p.percent,
        records: monitor.units().counters().records.get(),
        behind,
        shards: member
            .map(|shared| shared.statuses().into_iter().map(|(shard, code)| (shard, code.name().to_owned())).collect()),
        primaries: member.map(|shared| {
            let cluster = shared.cluster();
            (0..p.partitions as i32)
                .map(|p| crate::log_reader::shard_id(crate::catch_up::Log::Offsets, p))
                .filter_map(|shard| cluster.primary(&shard).map(|m| (shard.clone(), m.to_owned())))
                .collect()
        }),
        ages: member.map(|shared| {
            let now = monitor.now();
            shared
                .progress()
                .into_iter()
                .filter_map(|(shard, p)| Some((shard, now.saturating_duration_since(p.applied?).as_secs_f64())))
                .collect()
        }),
        transient: monitor
            .conditions()
            .into_iter()
            .map(|(why, lasted)| format!("{why} ({:.0} s)", lasted.as_secs_f64()))
            .collect(),
        share_groups_left_out: monitor.share_unreadable(),
    }
}

/// One group in `/api/groups`.
#[derive(Debug, Serialize)]
pub struct GroupView {
    /// The group.
    pub group_id: String,
    /// `Stable`, `Empty`, or `Unknown` when the log has no metadata for it.
    pub state: String,
    /// The protocol type, when known.
    pub protocol_type: Option<String>,
    /// The assignment protocol, when known.
    pub protocol: Option<String>,
    /// Members, when known.
    pub members: usize,
    /// Total lag over the exported topics.
    pub lag: i64,
    /// Burrow's status of the group: the worst of its partitions', STOP,
    /// STALL and REWIND counting as ERR.
    pub status: &'static str,
    /// The most lag in seconds over its partitions, when known.
    pub max_lag_seconds: Option<f64>,
    /// Per topic.
    pub topics: Vec<TopicView>,
}

/// One topic of a group.
#[derive(Debug, Serialize)]
pub struct TopicView {
    /// The topic.
    pub topic: String,
    /// Sum of the partitions' lag.
    pub lag: i64,
    /// The most lag in seconds over the partitions, when known.
    pub max_lag_seconds: Option<f64>,
    /// Per partition.
    pub partitions: Vec<PartitionView>,
}

/// One partition of a group's topic.
#[derive(Debug, Serialize)]
pub struct PartitionView {
    /// The partition.
    pub partition: i32,
    /// The committed offset.
    pub committed_offset: i64,
    /// The high watermark, when known (`null` for a deleted topic).
    pub high_water_mark: Option<i64>,
    /// The lag, when the high watermark is known.
    pub lag: Option<i64>,
    /// When the offset was committed, ms since the epoch.
    pub commit_timestamp: i64,
    /// Burrow's status of the partition (OK, WARN, STOP, STALL, REWIND).
    pub status: &'static str,
    /// Records retention deleted before the group read them (the committed
    /// offset is below the low watermark by this much); 0 when none.
    pub records_lost: i64,
    /// The age of the first record not consumed, in seconds (0 when caught
    /// up), when known.
    pub lag_seconds: Option<f64>,
    /// How `lag_seconds` was found: `record`, `estimate` or `next_record`.
    pub lag_seconds_method: Option<&'static str>,
    /// Seconds since the group last committed this partition (in `admin_api`
    /// mode, since the offset was first seen); `null` when unknown.
    pub commit_age_seconds: Option<f64>,
    /// Records the group consumed per second over `rate_window_seconds`
    /// (its window of recent commits), once two commits are known.
    pub consumed_per_second: Option<f64>,
    /// Records produced to the partition per second over the same window.
    pub produced_per_second: Option<f64>,
    /// The seconds between the first and last commit the rates are over.
    pub rate_window_seconds: Option<f64>,
    /// Seconds until the lag reaches zero at those rates (0 when caught up);
    /// `null` when it is not shrinking or the rates are unknown.
    pub catch_up_seconds: Option<f64>,
    /// A share group's partition: its delivery state (`committed_offset` is
    /// then the share-partition start offset, and `lag` Kafka's share lag).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub share: Option<ShareView>,
}

/// Every exported group as `/api/groups` shows it (whether or not ready).
pub fn groups(monitor: &Monitor) -> Vec<GroupView> {
    let mut out = Vec::new();
    views(monitor, Wanted::All, false, |view, _| out.push(view));
    out.sort_by(|a, b| a.group_id.cmp(&b.group_id));
    out
}

/// The groups `wanted` names as the last refresh's snapshot has them, each
/// as a view and with the snapshot's row, by id;
/// share-partitions with their delivery state in runs when `runs`.
fn views(monitor: &Monitor, wanted: Wanted<'_>, runs: bool, mut each: impl FnMut(GroupView, &GroupLag)) {
    let (snapshot, now_ms) = (monitor.snapshot(), monitor.epoch_ms());
    let derived = monitor.derived();
    let groups: Box<dyn Iterator<Item = GroupLag>> = match wanted {
        Wanted::All => Box::new(snapshot.groups(&derived)),
        Wanted::One(name) => Box::new(snapshot.group(name, &derived).into_iter()),
    };
    for g in groups {
        each(view(&g, runs.then(|| share_runs(monitor, &g.name)), now_ms), &g);
    }
}

/// Which groups [`views`] shows.
enum Wanted<'a> {
    All,
    One(&'a str),
}

/// Share-partitions' delivery state in runs, by topic and partition.
type Runs = BTreeMap<(Arc<str>, i32), Vec<crate::share_partition::Run>>;

/// The delivery state of `group`'s share-partitions, in runs.
fn share_runs(monitor: &Monitor, group: &str) -> Runs {
    let rows = monitor.share_rows(true).into_iter().filter(|r| &*r.group == group);
    rows.filter_map(|r| Some(((r.topic, r.partition), r.runs?))).collect()
}

/// What `/api/groups` shows of `g`.
fn view(g: &GroupLag, mut runs: Option<Runs>, now_ms: i64) -> GroupView {
    let mut topics: BTreeMap<String, Vec<PartitionView>> = BTreeMap::new();
    for s in &g.share {
        let mut p = share::partition(s, now_ms);
        if let (Some(runs), Some(view)) = (runs.as_mut(), p.share.as_mut()) {
            let of_it = runs.remove(&(Arc::clone(&s.row.topic), s.row.partition)).unwrap_or_default();
            view.batches = Some(of_it.iter().map(share::batch).collect());
        }
        topics.entry(s.row.topic.to_string()).or_default().push(p);
    }
    for p in &g.partitions {
        let (lag, age, motion) = (p.lag(), p.lag_seconds(now_ms), p.motion(now_ms));
        topics.entry(p.topic.to_string()).or_default().push(PartitionView {
            partition: p.partition,
            committed_offset: p.committed_offset,
            high_water_mark: p.watermark.map(|w| w.high),
            lag,
            commit_timestamp: p.commit_timestamp,
            status: p.status.name(),
            records_lost: p.records_lost(),
            lag_seconds: age.map(|(s, _)| s),
            lag_seconds_method: age.map(|(_, m)| m.name()),
            commit_age_seconds: motion.commit_age_s,
            consumed_per_second: motion.velocity.map(|v| v.consumed_per_s),
            produced_per_second: motion.velocity.map(|v| v.produced_per_s),
            rate_window_seconds: motion.velocity.map(|v| v.window_s),
            catch_up_seconds: lag.and(motion.catch_up_s),
            share: None,
        });
    }
    let topics: Vec<TopicView> = topics
        .into_iter()
        .map(|(topic, mut partitions)| {
            partitions.sort_by_key(|p| p.partition);
            TopicView {
                topic,
                lag: crate::watermarks::total(partitions.iter().filter_map(|p| p.lag)),
                max_lag_seconds: partitions.iter().filter_map(|p| p.lag_seconds).reduce(f64::max),
                partitions,
            }
        })
        .collect();
    GroupView {
        group_id: g.name.to_string(),
        // No group metadata (a client committing without joining): Kafka
        // lists the group Empty, as /metrics does.
        state: g.info.as_ref().map_or("Empty", |i| i.state()).to_owned(),
        protocol_type: g.info.as_ref().map(|i| i.protocol_type.to_string()).or(g.is_share().then(|| "share".into())),
        protocol: g.info.as_ref().and_then(|i| i.protocol.as_deref().map(str::to_owned)),
        members: g.info.as_ref().map_or(0, |i| i.members().len()),
        lag: g.lag(),
        status: g.status.name(),
        max_lag_seconds: g.max_lag_seconds(now_ms),
        topics,
    }
}

/// One group in `/api/overview`: the page's first table.
#[derive(Debug, Serialize)]
pub struct GroupSummary {
    /// The group.
    pub group_id: String,
    /// `Stable`, `Empty`, or `Unknown`.
    pub state: String,
    /// Burrow's status of the group (OK, WARN or ERR).
    pub status: &'static str,
    /// Members, when known.
    pub members: usize,
    /// Total lag.
    pub lag: i64,
    /// The most lag in seconds over its partitions, when known.
    pub max_lag_seconds: Option<f64>,
    /// Records retention deleted before the group read them, over its partitions.
    pub records_lost: i64,
    /// Partitions the group has committed offsets for.
    pub partitions: usize,
    /// Those with lag.
    pub lagging_partitions: usize,
    /// The topics it consumes.
    pub topics: Vec<String>,
    /// The lag objectives whose whole error budget it has spent in their
    /// window, as this kshard measured them (empty: none).
    pub objectives_missed: Vec<String>,
}

/// Every exported group in brief, the most urgent first: by status (ERR,
/// WARN, OK), then lag in seconds (unknown last), then lag, then name.
pub fn overview(monitor: &Monitor) -> Vec<GroupSummary> {
    let mut out = Vec::new();
    let mut missed = monitor.missed_objectives();
    views(monitor, Wanted::All, false, |g, _| {
        let partitions = || g.topics.iter().flat_map(|t| &t.partitions);
        out.push(GroupSummary {
            objectives_missed: missed.remove(g.group_id.as_str()).unwrap_or_default(),
            records_lost: crate::watermarks::total(partitions().map(|p| p.records_lost)),
            partitions: partitions().count(),
            lagging_partitions: partitions().filter(|p| p.lag.is_some_and(|l| l > 0)).count(),
            topics: g.topics.iter().map(|t| t.topic.clone()).collect(),
            group_id: g.group_id,
            state: g.state,
            status: g.status,
            members: g.members,
            lag: g.lag,
            max_lag_seconds: g.max_lag_seconds,
        });
    });
    let severity = |s: &str| Status::by_name(s).map_or(0, Status::code);
    out.sort_by(|a, b| {
        severity(b.status)
            .cmp(&severity(a.status))
            .then(b.max_lag_seconds.unwrap_or(-1.0).total_cmp(&a.max_lag_seconds.unwrap_or(-1.0)))
            .then(b.lag.cmp(&a.lag))
            .then_with(|| a.group_id.cmp(&b.group_id))
    });
    out
}

/// `/api/group?id=…`: one group whole, for its page.
#[derive(Debug, Serialize)]
pub struct GroupDetail {
    /// What `/api/groups` shows of it.
    #[serde(flatten)]
    pub group: GroupView,
    /// The generation (the group epoch for KIP-848 groups), when known.
    pub generation: Option<i32>,
    /// Its members and their assignments (empty when none or unknown).
    pub member_list: Vec<MemberView>,
    /// A streams group's topology, once known.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub topology: Option<TopologyView>,
    /// Its recent lag.
    pub history: HistoryView,
    /// The lag objectives covering it, as this kshard has measured them since
    /// it started (empty when none does).
    pub objectives: Vec<crate::objective_budget::BudgetView>,
}

/// A member of a group.
#[derive(Debug, Serialize)]
pub struct MemberView {
    /// The member id.
    pub member_id: String,
    /// The static membership id, if any.
    pub group_instance_id: Option<String>,
    /// The client id.
    pub client_id: String,
    /// The client host.
    pub client_host: String,
    /// Assigned partitions by topic (a streams member's: its active tasks'
    /// partitions of their subtopologies' source topics).
    pub assignment: BTreeMap<String, Vec<i32>>,
    /// A streams group's member: its process, endpoint and tasks.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub streams: Option<StreamsMemberView>,
}

/// What a streams group's member runs.
#[derive(Debug, Serialize)]
pub struct StreamsMemberView {
    /// The Kafka Streams process (one per application instance).
    pub process_id: String,
    /// `host:port` for interactive queries, when set.
    pub endpoint: Option<String>,
    /// Active tasks: partitions by subtopology id.
    pub active_tasks: BTreeMap<String, Vec<i32>>,
    /// Standby tasks (state replicas).
    pub standby_tasks: BTreeMap<String, Vec<i32>>,
    /// Warm-up tasks (state being caught up before a move).
    pub warmup_tasks: BTreeMap<String, Vec<i32>>,
}

/// A streams group's topology.
#[derive(Debug, Serialize)]
pub struct TopologyView {
    /// Its epoch.
    pub epoch: i32,
    /// Its subtopologies.
    pub subtopologies: Vec<SubtopologyView>,
}

/// One subtopology.
#[derive(Debug, Serialize)]
pub struct SubtopologyView {
    /// Its id.
    pub id: String,
    /// The topics it reads.
    pub source_topics: Vec<String>,
    /// The repartition topics it reads.
    pub repartition_source_topics: Vec<String>,
    /// Its state stores' changelog topics.
    pub state_changelog_topics: Vec<String>,
}

fn task_map(tasks: &crate::TaskList) -> BTreeMap<String, Vec<i32>> {
    tasks.iter().map(|(s, p)| (s.to_string(), p.clone())).collect()
}

fn names(topics: &[Arc<str>]) -> Vec<String> {
    topics.iter().map(|t| t.to_string()).collect()
}

/// A group's recent lag: one point per `resolution_seconds` over the last
/// `window_seconds`, each the highest seen in its interval.
#[derive(Debug, Serialize)]
pub struct HistoryView {
    /// How far back the history goes, in seconds.
    pub window_seconds: u32,
    /// The width of one point, in seconds.
    pub resolution_seconds: u32,
    /// kshard's clock now, ms since the epoch: the end of the window.
    pub now_ms: i64,
    /// The points, oldest first.
    pub points: Vec<LagPoint>,
}

/// One group whole, `None` when it is unknown (or not exported).
pub fn group(monitor: &Monitor, group_id: &str) -> Option<GroupDetail> {
    let mut found = None;
    views(monitor, Wanted::One(group_id), true, |view, g| {
        let info = g.info.as_ref();
        let member_list = info
            .map(|i| i.members())
            .unwrap_or_default()
            .iter()
            .map(|m| MemberView {
                member_id: m.member_id.to_string(),
                group_instance_id: m.group_instance_id.as_deref().map(str::to_owned),
                client_id: m.client_id.to_string(),
                client_host: m.client_host.to_string(),
                assignment: m.assignment.iter().map(|(t, p)| (t.to_string(), p.clone())).collect(),
                streams: m.streams.as_ref().map(|s| StreamsMemberView {
                    process_id: s.process_id.to_string(),
                    endpoint: s.endpoint.as_deref().map(str::to_owned),
                    active_tasks: task_map(&s.active),
                    standby_tasks: task_map(&s.standby),
                    warmup_tasks: task_map(&s.warmup),
                }),
            })
            .collect();
        let topology = info.and_then(|i| i.topology.as_ref()).map(|t| TopologyView {
            epoch: t.epoch,
            subtopologies: t
                .subtopologies
                .iter()
                .map(|s| SubtopologyView {
                    id: s.id.to_string(),
                    source_topics: names(&s.source_topics),
                    repartition_source_topics: names(&s.repartition_source_topics),
                    state_changelog_topics: names(&s.state_changelog_topics),
                })
                .collect(),
        });
        found = Some((view, info.map(|i| i.generation), member_list, topology));
    });
    let (group, generation, member_list, topology) = found?;
    let (points, settings) = monitor.history(group_id);
    let history = HistoryView {
        window_seconds: settings.window_s,
        resolution_seconds: settings.resolution_s,
        now_ms: monitor.epoch_ms(),
        points,
    };
    let objectives = monitor.budgets(group_id);
    Some(GroupDetail { group, generation, member_list, topology, history, objectives })
}
