//! Share groups in the JSON API: each share-partition as a [`PartitionView`]
//! whose `committed_offset` is the share-partition start offset and whose
//! lag is Kafka's share lag, with the delivery state in [`ShareView`].

use kshard_offsets::DeliveryState;
use serde::Serialize;

use super::PartitionView;
use crate::share_partition::Run;
use crate::snapshot::ShareLag;

/// What a share-partition's state says, beside its lag.
#[derive(Debug, Serialize)]
pub struct ShareView {
    /// Records after the start offset whose delivery is complete
    /// (acknowledged or archived).
    pub delivery_complete: i64,
    /// Records delivered and not yet acknowledged.
    pub in_flight: u64,
    /// Records after the start offset delivered more than once.
    pub redelivered: u64,
    /// Records archived since kshard first read the state.
    pub archived: u64,
    /// Of those, the ones at the delivery count limit: poison messages.
    pub poison: u64,
    /// The delivery state of the records after the start offset, in runs
    /// (on `/api/group` only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub batches: Option<Vec<BatchView>>,
}

/// A run of records in one delivery state.
#[derive(Debug, Serialize)]
pub struct BatchView {
    /// The first offset.
    pub first_offset: i64,
    /// The last offset (inclusive).
    pub last_offset: i64,
    /// `available`, `acknowledged`, `archived` (or the state's number).
    pub state: String,
    /// How many times the records were delivered.
    pub delivery_count: i16,
}

pub(super) fn batch(r: &Run) -> BatchView {
    let state = match r.state {
        DeliveryState::Available => "available".to_owned(),
        DeliveryState::Acknowledged => "acknowledged".to_owned(),
        DeliveryState::Archived => "archived".to_owned(),
        DeliveryState::Unknown(v) => v.to_string(),
    };
    BatchView { first_offset: r.first, last_offset: r.last, state, delivery_count: r.deliveries }
}

/// One share-partition as the API shows it (without its runs).
pub(super) fn partition(s: &ShareLag, now_ms: i64) -> PartitionView {
    let row = &s.row;
    let age = s.written.map(|w| (w.seconds(now_ms), w.method()));
    PartitionView {
        partition: row.partition,
        committed_offset: row.start_offset,
        high_water_mark: s.watermark.map(|w| w.high),
        lag: s.lag,
        commit_timestamp: -1,
        status: crate::consumer_status::Status::Ok.name(),
        records_lost: 0,
        lag_seconds: age.map(|(s, _)| s),
        lag_seconds_method: age.map(|(_, m)| m.name()),
        commit_age_seconds: None,
        consumed_per_second: None,
        produced_per_second: None,
        rate_window_seconds: None,
        catch_up_seconds: None,
        share: Some(ShareView {
            delivery_complete: row.complete,
            in_flight: row.in_flight,
            redelivered: row.redelivered,
            archived: row.archived,
            poison: row.poison,
            batches: None,
        }),
    }
}
