//! [`ShareRow`]: one share-partition as kshard exports it — its group, its
//! topic by name, and what its state from `__share_group_state` says — taken
//! from the share units in one pass, for `/metrics`, the API and the record
//! times lag in seconds wants. Pure.

use std::sync::Arc;

use kshard_offsets::Uuid;

use crate::group_offsets::GroupOffsets;
use crate::monitor_settings::MonitorSettings;
use crate::names::FastMap;
use crate::share_partition::{Run, SharePartition};
use crate::share_state::ShareState;
use crate::units::Units;

/// Kafka's default `group.share.delivery.count.limit`: a record archived at
/// this many deliveries is a poison message.
pub const DEFAULT_DELIVERY_COUNT_LIMIT: i16 = 5;

/// One share-partition, as exported.
#[derive(Debug, Clone, PartialEq)]
pub struct ShareRow {
    /// The share group.
    pub group: Arc<str>,
    /// The topic's name (its id, when no record has named it).
    pub topic: Arc<str>,
    /// The partition.
    pub partition: i32,
    /// The share-partition start offset (-1: not initialized).
    pub start_offset: i64,
    /// Records at or after the start offset whose delivery is complete.
    pub complete: i64,
    /// Records delivered and available again, not yet acknowledged.
    pub in_flight: u64,
    /// Records at or after the start offset delivered more than once.
    pub redelivered: u64,
    /// Records archived since kshard first read the state.
    pub archived: u64,
    /// Of those, the ones archived at the delivery count limit: poison messages.
    pub poison: u64,
    /// The delivery state of the records after the start offset, when asked for.
    pub runs: Option<Vec<Run>>,
    /// Admin-API mode: Kafka's lag as reported (-1: unknown).
    pub reported_lag: Option<i64>,
}

impl ShareRow {
    fn of(group: &Arc<str>, topic: Arc<str>, partition: i32, s: &SharePartition, limit: i16, runs: bool) -> Self {
        ShareRow {
            group: Arc::clone(group),
            topic,
            partition,
            start_offset: s.start_offset,
            complete: s.complete(),
            in_flight: s.in_flight(),
            redelivered: s.redelivered(),
            archived: s.archived_total(),
            poison: s.poison(limit),
            runs: runs.then(|| s.runs.clone()),
            reported_lag: s.reported_lag,
        }
    }

    /// Kafka's share lag against the partition's end `high` (as
    /// `kafka-share-groups --describe`); `None` before the state is initialized.
    pub fn lag(&self, high: i64) -> Option<i64> {
        if let Some(reported) = self.reported_lag {
            return (self.start_offset >= 0 && reported >= 0).then_some(reported);
        }
        (self.start_offset >= 0).then(|| high.saturating_sub(self.start_offset).saturating_sub(self.complete))
    }
}

/// Every share-partition the settings export, sorted by group, topic and
/// partition; with each one's runs when `runs`.
pub(crate) fn share_rows(
    units: &Units<GroupOffsets>,
    share: &Units<ShareState>,
    settings: &MonitorSettings,
    runs: bool,
) -> Vec<ShareRow> {
    let mut names: FastMap<Uuid, Arc<str>> = FastMap::default();
    let mut rows = Vec::new();
    let limit = settings.share_delivery_count_limit.unwrap_or(DEFAULT_DELIVERY_COUNT_LIMIT);
    share.for_each(|_, unit| {
        for ((group, topic_id, partition), state) in unit.partitions() {
            if !settings.groups.allows(group) {
                continue;
            }
            if names.is_empty() {
                units.for_each(|_, u| names.extend(u.topic_ids().map(|(id, n)| (*id, Arc::clone(n)))));
            }
            let topic = names.entry(*topic_id).or_insert_with(|| Arc::from(topic_id.to_string()));
            if settings.topics.allows(topic) {
                rows.push(ShareRow::of(group, Arc::clone(topic), *partition, state, limit, runs));
            }
        }
    });
    rows.sort_by(|a, b| (&a.group, &a.topic, a.partition).cmp(&(&b.group, &b.topic, b.partition)));
    rows
}
