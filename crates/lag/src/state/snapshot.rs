//! One immutable lag snapshot per watermark refresh, that every output
//! reads: `/metrics` and its profiles, `/api`, Burrow's API, OTLP, the page
//! and `kshard lag`. The join of the units' committed offsets with the
//! refreshed watermarks, the filters, each group-partition's status, the
//! time of its first record not consumed and its rates is made here once,
//! so two outputs can never disagree on one refresh. Ages (lag in seconds,
//! commit age) are counted from those times when shown. Pure: the units,
//! watermarks and derived state come in.

use std::collections::HashMap;
use std::sync::Arc;

use crate::consumer_status::Status;
use crate::derived::{DerivedView, Motion};
use crate::group_offsets::{Group, GroupInfo};
use crate::lag_time::{Method, Written};
use crate::monitor_settings::MonitorSettings;
use crate::share_rows::ShareRow;
use crate::units::Units;
use crate::velocity::{Velocity, commit_age_s};
use crate::watermarks::{Watermark, Watermarks, lag};

/// What every output shows, as of one refresh: the watermarks, and each
/// exported group's committed offsets and metadata as they were then. The
/// rows outputs render ([`GroupLag`]) are joined from it when asked
/// ([`LagSnapshot::groups`]), with the record times and commit windows the
/// same refresh derived: a compact copy of the offsets is kept (40 bytes a
/// group-partition), not of every row.
#[derive(Debug, Default)]
pub(crate) struct LagSnapshot {
    /// The watermarks it was taken with.
    pub(crate) watermarks: Arc<Watermarks>,
    /// Every exported group (the groups filter applied), by name.
    groups: Vec<GroupAt>,
}

/// One group as the refresh found it.
#[derive(Debug)]
struct GroupAt {
    name: Arc<str>,
    coordinator: Option<i32>,
    /// Shared with the units until the metadata next changes.
    info: Option<Arc<GroupInfo>>,
    commits: u64,
    /// Its committed offsets (the topics filter applied), by topic and partition.
    offsets: Vec<CommitAt>,
    /// A share group's partitions (filtered already).
    share: Vec<ShareRow>,
    share_only: bool,
}

/// A committed offset as the refresh found it.
#[derive(Debug)]
struct CommitAt {
    topic: Arc<str>,
    partition: i32,
    offset: i64,
    commit_timestamp: i64,
}

/// The member a partition is assigned to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Owner {
    /// The member's client host.
    pub(crate) host: Arc<str>,
    /// Its member id.
    pub(crate) member_id: Arc<str>,
    /// Its client id.
    pub(crate) client_id: Arc<str>,
}

/// One group as of the snapshot.
#[derive(Debug)]
pub(crate) struct GroupLag {
    /// The group's name.
    pub(crate) name: Arc<str>,
    /// The broker coordinating it, as the offsets topic's leaders say.
    pub(crate) coordinator: Option<i32>,
    /// Its metadata, when the log (or the brokers) told it.
    pub(crate) info: Option<Arc<GroupInfo>>,
    /// Offset commits applied for it since kshard started reading.
    pub(crate) commits: u64,
    /// Its worst partition's status, of those with watermarks.
    pub(crate) status: Status,
    /// Its committed offsets (the topics filter applied), by topic and partition.
    pub(crate) partitions: Vec<PartitionLag>,
    /// A share group's partitions, with their delivery state.
    pub(crate) share: Vec<ShareLag>,
    /// A share group known by its state alone (its metadata is in a
    /// partition not read yet, or was deleted before its state).
    pub(crate) share_only: bool,
}

/// One group-partition with a committed offset.
#[derive(Debug, Clone)]
pub(crate) struct PartitionLag {
    /// The topic.
    pub(crate) topic: Arc<str>,
    /// The partition.
    pub(crate) partition: i32,
    /// The committed offset: the next one the group reads.
    pub(crate) committed_offset: i64,
    /// When it was committed, in ms (0: unknown).
    pub(crate) commit_timestamp: i64,
    /// The partition's watermarks, when refreshed.
    pub(crate) watermark: Option<Watermark>,
    /// When the first record not consumed was written (lag in seconds is
    /// the time since, when shown), and how that was found.
    pub(crate) written: Option<Written>,
    /// Burrow's status of the partition (OK without watermarks).
    pub(crate) status: Status,
    /// When the commit was made (or, without its time, first seen).
    pub(crate) committed_at_ms: Option<i64>,
    /// The group's rates over its window of recent commits.
    pub(crate) velocity: Option<Velocity>,
}

impl PartitionLag {
    /// Records between the committed offset and the high watermark.
    pub(crate) fn lag(&self) -> Option<i64> {
        self.watermark.map(|w| lag(w.high, self.committed_offset))
    }

    /// Lag in seconds at `now_ms`, and how it was found.
    pub(crate) fn lag_seconds(&self, now_ms: i64) -> Option<(f64, Method)> {
        self.written.map(|w| (w.seconds(now_ms), w.method()))
    }

    /// Records retention deleted before the group read them.
    pub(crate) fn records_lost(&self) -> i64 {
        self.watermark.map_or(0, |w| w.low.saturating_sub(self.committed_offset).max(0))
    }

    /// Its commit age at `now_ms`, its rates, and the time to catch up at them.
    pub(crate) fn motion(&self, now_ms: i64) -> Motion {
        Motion {
            commit_age_s: self.committed_at_ms.map(|t| commit_age_s(t, now_ms)),
            velocity: self.velocity,
            catch_up_s: self.velocity.and_then(|v| v.catch_up_s(self.lag().unwrap_or(0))),
        }
    }
}

/// One share-partition of a share group.
#[derive(Debug, Clone)]
pub(crate) struct ShareLag {
    /// Its delivery state.
    pub(crate) row: ShareRow,
    /// Kafka's share lag against the high watermark.
    pub(crate) lag: Option<i64>,
    /// When the record at the start offset was written, and how that was found.
    pub(crate) written: Option<Written>,
    /// The partition's watermarks, when refreshed.
    pub(crate) watermark: Option<Watermark>,
}

impl GroupLag {
    /// Its partitions with lag, summed without overflow.
    pub(crate) fn lag(&self) -> i64 {
        crate::watermarks::total(
            self.partitions.iter().filter_map(PartitionLag::lag).chain(self.share.iter().filter_map(|s| s.lag)),
        )
    }

    /// Its highest lag in seconds at `now_ms`, when any is known.
    pub(crate) fn max_lag_seconds(&self, now_ms: i64) -> Option<f64> {
        self.partitions
            .iter()
            .filter_map(|p| p.written)
            .chain(self.share.iter().filter_map(|s| s.written))
            .map(|w| w.seconds(now_ms))
            .reduce(f64::max)
    }

    /// The member each assigned partition's is, as the group's metadata
    /// lists them: made when an output shows owners (Burrow's API,
    /// kafka-lag-exporter's names), not with every row.
    pub(crate) fn owners(&self) -> HashMap<(Arc<str>, i32), Owner> {
        let mut owners = HashMap::new();
        for m in self.info.as_deref().map(GroupInfo::members).unwrap_or_default() {
            let owner = Owner {
                host: Arc::from(&*m.client_host),
                member_id: Arc::from(&*m.member_id),
                client_id: Arc::from(&*m.client_id),
            };
            for (topic, partitions) in &m.assignment {
                for p in partitions {
                    owners.insert((Arc::clone(topic), *p), owner.clone());
                }
            }
        }
        owners
    }

    /// Its partitions topic by topic (the rows are sorted by topic).
    pub(crate) fn by_topic(&self) -> impl Iterator<Item = &[PartitionLag]> {
        self.partitions.chunk_by(|a, b| a.topic == b.topic)
    }

    /// Whether it is a share group.
    pub(crate) fn is_share(&self) -> bool {
        !self.share.is_empty()
    }
}

impl LagSnapshot {
    /// Takes the committed offsets of `units` (and share groups' `share`
    /// rows, filtered already) beside `watermarks`, as `settings`' filters
    /// allow; `coordinator` gives each unit partition's leader.
    pub(crate) fn take(
        units: &Units,
        share: Vec<ShareRow>,
        settings: &MonitorSettings,
        watermarks: Arc<Watermarks>,
        coordinator: impl Fn(i32) -> Option<i32>,
    ) -> Self {
        let mut groups: Vec<GroupAt> = Vec::new();
        units.for_each(|unit_partition, unit| {
            for (name, g) in unit.groups() {
                if settings.groups.allows(name) {
                    groups.push(group_at(name, g, coordinator(unit_partition), settings));
                }
            }
        });
        groups.sort_by(|a, b| a.name.cmp(&b.name));
        // Share groups: their rows, beside their metadata when it was read
        // (or alone: metadata in a partition not read yet, or deleted).
        let mut alone: Vec<GroupAt> = Vec::new();
        for row in share {
            if let Ok(i) = groups.binary_search_by(|g| g.name.cmp(&row.group)) {
                groups[i].share.push(row);
                continue;
            }
            match alone.last_mut() {
                Some(g) if g.name == row.group => g.share.push(row),
                _ => alone.push(GroupAt {
                    name: Arc::clone(&row.group),
                    coordinator: None,
                    info: None,
                    commits: 0,
                    offsets: Vec::new(),
                    share: vec![row],
                    share_only: true,
                }),
            }
        }
        if !alone.is_empty() {
            groups.extend(alone);
            groups.sort_by(|a, b| a.name.cmp(&b.name));
        }
        groups.shrink_to_fit();
        LagSnapshot { watermarks, groups }
    }

    /// Every group's row, joined with what `derived` holds of the same
    /// refresh, its ages counted at `now_ms`.
    pub(crate) fn groups<'a>(&'a self, derived: &'a DerivedView<'_>) -> impl Iterator<Item = GroupLag> + 'a {
        self.groups.iter().map(move |g| self.join(g, derived))
    }

    /// The group named `name`, joined as [`LagSnapshot::groups`] joins it.
    pub(crate) fn group(&self, name: &str, derived: &DerivedView<'_>) -> Option<GroupLag> {
        let i = self.groups.binary_search_by(|g| (*g.name).cmp(name)).ok()?;
        Some(self.join(&self.groups[i], derived))
    }

    /// The bytes it holds of its own (its vectors; the names, metadata and
    /// watermarks it shares are the units' and the refresh's).
    pub(crate) fn heap_bytes(&self) -> usize {
        use std::mem::size_of;
        let groups = self
            .groups
            .iter()
            .map(|g| g.offsets.capacity() * size_of::<CommitAt>() + g.share.capacity() * size_of::<ShareRow>());
        size_of::<Self>() + self.groups.capacity() * size_of::<GroupAt>() + groups.sum::<usize>()
    }

    /// Every group's name.
    pub(crate) fn names(&self) -> impl Iterator<Item = &Arc<str>> {
        self.groups.iter().map(|g| &g.name)
    }

    /// Each group's total lag and highest lag in seconds at `now_ms`, as
    /// its row has them ([`GroupLag::lag`], [`GroupLag::max_lag_seconds`]),
    /// without making the rows: what the lag history keeps at each refresh.
    pub(crate) fn totals(&self, derived: &DerivedView<'_>, now_ms: i64) -> Vec<(Arc<str>, i64, Option<f64>)> {
        let of = |topic: &Arc<str>, partition: i32, offset: i64, lag: i64| {
            derived.written(topic, partition, offset, lag).map(|w| w.seconds(now_ms))
        };
        self.groups
            .iter()
            .map(|g| {
                let (mut total, mut most) = (0i64, None::<f64>);
                for c in &g.offsets {
                    let Some(w) = self.watermarks.get(&c.topic, c.partition) else { continue };
                    let l = lag(w.high, c.offset);
                    total = total.saturating_add(l);
                    most = crate::lag_time::max_seconds(most, of(&c.topic, c.partition, c.offset, l));
                }
                for row in &g.share {
                    let watermark = self.watermarks.get(&row.topic, row.partition);
                    let Some(l) = watermark.and_then(|w| row.lag(w.high)) else { continue };
                    total = total.saturating_add(l);
                    most = crate::lag_time::max_seconds(most, of(&row.topic, row.partition, row.start_offset, l));
                }
                (Arc::clone(&g.name), total, most)
            })
            .collect()
    }

    /// Every share-partition, joined (without the consumer groups' rows).
    pub(crate) fn share<'a>(&'a self, derived: &'a DerivedView<'_>) -> impl Iterator<Item = ShareLag> + 'a {
        self.groups.iter().flat_map(move |g| g.share.iter().map(move |row| self.share_lag(row, derived)))
    }

    /// One share-partition's row.
    fn share_lag(&self, row: &ShareRow, derived: &DerivedView<'_>) -> ShareLag {
        let watermark = self.watermarks.get(&row.topic, row.partition);
        let lag = watermark.and_then(|w| row.lag(w.high));
        let written = lag.and_then(|l| derived.written(&row.topic, row.partition, row.start_offset, l));
        ShareLag { row: row.clone(), lag, written, watermark }
    }

    /// `g`'s row: its partitions with their watermarks, status, record
    /// times and rates, and its members.
    fn join(&self, g: &GroupAt, derived: &DerivedView<'_>) -> GroupLag {
        let name = &g.name;
        let mut status = Status::Ok;
        let partitions: Vec<PartitionLag> = g
            .offsets
            .iter()
            .map(|c| {
                let (topic, partition) = (&c.topic, c.partition);
                let watermark = self.watermarks.get(topic, partition);
                let l = watermark.map(|w| lag(w.high, c.offset));
                let p_status = l.map_or(Status::Ok, |l| derived.status(name, topic, partition, l));
                if l.is_some() {
                    status = Status::of_group([status, p_status]);
                }
                PartitionLag {
                    topic: Arc::clone(topic),
                    partition,
                    committed_offset: c.offset,
                    commit_timestamp: c.commit_timestamp,
                    watermark,
                    written: l.and_then(|l| derived.written(topic, partition, c.offset, l)),
                    status: p_status,
                    committed_at_ms: derived.committed_at(name, topic, partition, c.commit_timestamp),
                    velocity: derived.velocity(name, topic, partition),
                }
            })
            .collect();
        let share = g.share.iter().map(|row| self.share_lag(row, derived)).collect();
        GroupLag {
            name: Arc::clone(name),
            coordinator: g.coordinator,
            info: g.info.clone(),
            commits: g.commits,
            status,
            partitions,
            share,
            share_only: g.share_only,
        }
    }
}

/// One consumer group as the refresh found it: its offsets by topic and partition.
fn group_at(name: &Arc<str>, g: &Group, coordinator: Option<i32>, settings: &MonitorSettings) -> GroupAt {
    let mut offsets: Vec<CommitAt> = g
        .offsets()
        .filter(|(topic, _, _)| settings.topics.allows(topic))
        .map(|(topic, partition, c)| CommitAt {
            topic: Arc::clone(topic),
            partition,
            offset: c.offset,
            commit_timestamp: c.commit_timestamp,
        })
        .collect();
    offsets.sort_by(|a, b| (&*a.topic, a.partition).cmp(&(&*b.topic, b.partition)));
    offsets.shrink_to_fit();
    GroupAt {
        name: Arc::clone(name),
        coordinator,
        info: g.info.clone(),
        commits: g.commits,
        offsets,
        share: Vec::new(),
        share_only: false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Log;

    /// The lag history's totals are the rows' own.
    #[test]
    fn the_totals_are_the_rows_sums() {
        use kshard_offsets::{OffsetCommitValue, Record};
        let monitor = crate::monitor::Monitor::new(MonitorSettings::default());
        monitor.track(Log::Offsets, 0, 0, 0);
        monitor.start_log(Log::Offsets);
        for (at, (group, topic, partition, offset)) in
            [("a", "t", 0, 5), ("a", "t", 1, 40), ("a", "u", 0, 3), ("b", "t", 0, 100), ("c", "gone", 0, 1)]
                .into_iter()
                .enumerate()
        {
            let v = OffsetCommitValue::new(3, offset, 1_000);
            let (k, v) = Record::offset_commit(group, topic, partition, Some(v)).encode();
            monitor.apply(0, at as i64, Some(&k), v.as_deref()).expect("applies");
        }
        let mut w = Watermarks::default();
        for (topic, partition, high) in [("t", 0, 100), ("t", 1, 50), ("u", 0, 3)] {
            w.insert(topic, partition, Watermark { low: 0, high });
        }
        monitor.set_watermarks(w, true, monitor.now());
        let (snapshot, derived) = (monitor.snapshot(), monitor.derived());
        let now = monitor.epoch_ms();
        let rows: Vec<_> =
            snapshot.groups(&derived).map(|g| (Arc::clone(&g.name), g.lag(), g.max_lag_seconds(now))).collect();
        assert_eq!(snapshot.totals(&derived, now), rows);
        assert_eq!(rows.iter().map(|(g, lag, _)| (&**g, *lag)).collect::<Vec<_>>(), [("a", 105), ("b", 0), ("c", 0)]);
    }

    /// A snapshot holds each group-partition's offset until the next
    /// refresh: what every tracked group-partition costs once more.
    #[test]
    fn an_offset_held_stays_small() {
        assert!(std::mem::size_of::<CommitAt>() <= 40, "{}", std::mem::size_of::<CommitAt>());
    }
}
