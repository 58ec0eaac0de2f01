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
use crate::monitor::MonitorSettings;
use crate::share_rows::ShareRow;
use crate::units::Units;
use crate::velocity::{Velocity, commit_age_s};
use crate::watermarks::{Watermark, Watermarks, lag};

/// What every output shows, as of one refresh.
#[derive(Debug, Default)]
pub(crate) struct LagSnapshot {
    /// The watermarks it was taken with.
    pub(crate) watermarks: Arc<Watermarks>,
    /// Every exported group (the groups filter applied), by name.
    pub(crate) groups: Vec<GroupLag>,
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
    pub(crate) info: Option<GroupInfo>,
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
    /// The members its partitions are assigned to (each row names one by
    /// its index here: a member's names are kept once, not per partition).
    pub(crate) owners: Vec<Owner>,
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
    /// The member it is assigned to, when the group's metadata says: an
    /// index into [`GroupLag::owners`].
    pub(crate) owner: Option<u32>,
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
    /// The member it is assigned to (see [`PartitionLag::owner`]).
    pub(crate) owner: Option<u32>,
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

    /// The member a row's `owner` names.
    pub(crate) fn owner(&self, owner: Option<u32>) -> Option<&Owner> {
        self.owners.get(usize::try_from(owner?).ok()?)
    }

    /// Whether it is a share group.
    pub(crate) fn is_share(&self) -> bool {
        !self.share.is_empty()
    }
}

impl LagSnapshot {
    /// The group named `name`.
    pub(crate) fn group(&self, name: &str) -> Option<&GroupLag> {
        self.groups.binary_search_by(|g| (*g.name).cmp(name)).ok().map(|i| &self.groups[i])
    }

    /// Joins `units` (and share groups' `share` rows, filtered already) with `watermarks` as
    /// `settings`' filters allow, `derived` giving statuses, lag in seconds
    /// and rates, `coordinator` each unit partition's leader.
    pub(crate) fn build(
        units: &Units,
        share: Vec<ShareRow>,
        settings: &MonitorSettings,
        watermarks: Arc<Watermarks>,
        derived: &DerivedView<'_>,
        coordinator: impl Fn(i32) -> Option<i32>,
    ) -> Self {
        let mut groups: Vec<GroupLag> = Vec::new();
        units.for_each(|unit_partition, unit| {
            for (name, g) in unit.groups() {
                if settings.groups.allows(name) {
                    groups.push(group_lag(name, g, coordinator(unit_partition), settings, &watermarks, derived));
                }
            }
        });
        groups.sort_by(|a, b| a.name.cmp(&b.name));
        // Share groups: their rows, beside their metadata when it was read
        // (or alone: metadata in a partition not read yet, or deleted).
        let mut by_group: HashMap<Arc<str>, Vec<ShareLag>> = HashMap::new();
        for row in share {
            let watermark = watermarks.get(&row.topic, row.partition);
            let lag = watermark.and_then(|w| row.lag(w.high));
            let written = lag.and_then(|l| derived.written(&row.topic, row.partition, row.start_offset, l));
            let owner = None;
            by_group.entry(Arc::clone(&row.group)).or_default().push(ShareLag { row, lag, written, watermark, owner });
        }
        let mut alone = Vec::new();
        for (name, mut share) in by_group {
            match groups.binary_search_by(|g| g.name.cmp(&name)) {
                Ok(i) => {
                    let assigned = assigned(groups[i].info.as_ref());
                    for s in &mut share {
                        s.owner = assigned.get(&(Arc::clone(&s.row.topic), s.row.partition)).copied();
                    }
                    groups[i].share = share;
                }
                Err(_) => alone.push(GroupLag {
                    name,
                    coordinator: None,
                    info: None,
                    commits: 0,
                    status: Status::Ok,
                    partitions: Vec::new(),
                    share,
                    share_only: true,
                    owners: Vec::new(),
                }),
            }
        }
        if !alone.is_empty() {
            groups.extend(alone);
            groups.sort_by(|a, b| a.name.cmp(&b.name));
        }
        LagSnapshot { watermarks, groups }
    }
}

/// One consumer group's row: its partitions by topic and partition.
fn group_lag(
    name: &Arc<str>,
    g: &Group,
    coordinator: Option<i32>,
    settings: &MonitorSettings,
    watermarks: &Watermarks,
    derived: &DerivedView<'_>,
) -> GroupLag {
    let assigned = assigned(g.info.as_ref());
    let mut status = Status::Ok;
    let mut partitions = Vec::new();
    for (topic, partition, c) in g.offsets() {
        if !settings.topics.allows(topic) {
            continue;
        }
        let watermark = watermarks.get(topic, partition);
        let l = watermark.map(|w| lag(w.high, c.offset));
        let p_status = l.map_or(Status::Ok, |l| derived.status(name, topic, partition, l));
        if l.is_some() {
            status = Status::of_group([status, p_status]);
        }
        partitions.push(PartitionLag {
            topic: Arc::clone(topic),
            partition,
            committed_offset: c.offset,
            commit_timestamp: c.commit_timestamp,
            watermark,
            written: l.and_then(|l| derived.written(topic, partition, c.offset, l)),
            status: p_status,
            committed_at_ms: derived.committed_at(name, topic, partition, c.commit_timestamp),
            velocity: derived.velocity(name, topic, partition),
            owner: assigned.get(&(Arc::clone(topic), partition)).copied(),
        });
    }
    partitions.sort_by(|a, b| (&*a.topic, a.partition).cmp(&(&*b.topic, b.partition)));
    GroupLag {
        name: Arc::clone(name),
        coordinator,
        info: g.info.clone(),
        commits: g.commits,
        status,
        partitions,
        share: Vec::new(),
        share_only: false,
        owners: owners(g.info.as_ref()),
    }
}

/// The group's members, in the order its metadata lists them.
fn owners(info: Option<&GroupInfo>) -> Vec<Owner> {
    let members = info.map(GroupInfo::members).unwrap_or_default();
    members
        .iter()
        .map(|m| Owner {
            host: Arc::from(&*m.client_host),
            member_id: Arc::from(&*m.member_id),
            client_id: Arc::from(&*m.client_id),
        })
        .collect()
}

/// Each assigned partition's member: its index in [`owners`].
fn assigned(info: Option<&GroupInfo>) -> HashMap<(Arc<str>, i32), u32> {
    let mut assigned = HashMap::new();
    for (i, member) in info.map(GroupInfo::members).unwrap_or_default().iter().enumerate() {
        let Ok(i) = u32::try_from(i) else { break };
        for (topic, partitions) in &member.assignment {
            for p in partitions {
                assigned.insert((Arc::clone(topic), *p), i);
            }
        }
    }
    assigned
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A snapshot holds a row per group-partition until the next refresh:
    /// its size is what every tracked group-partition costs once more.
    #[test]
    fn a_row_stays_small() {
        assert!(std::mem::size_of::<PartitionLag>() <= 136, "{}", std::mem::size_of::<PartitionLag>());
    }
}
