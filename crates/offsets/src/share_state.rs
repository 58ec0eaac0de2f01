//! The records of `__share_group_state` (KIP-932): the share coordinator's
//! durable state of each share-partition — the start offset below which
//! every record is done, and the delivery state of the records after it.
//!
//! Keys (int16 type, then a non-flexible body: group id, topic id,
//! partition): type 0 `ShareSnapshotKey`, type 1 `ShareUpdateKey`. A
//! snapshot holds the whole state of its share-partition; an update
//! changes the start offset (unless -1) and the state of the batches it
//! names, until the next snapshot. Values are flexible from v0; later
//! versions are read with the v0 layout (KIP-915: they only add tagged
//! fields), unknown tagged fields are skipped. A key of another type comes
//! back as [`ShareStateKey::Opaque`] with its value as
//! [`ShareStateValue::Opaque`], so a newer broker never stops a reader.
//!
//! The layouts are those of Apache Kafka 4.2 and later (share groups'
//! general availability, with `DeliveryCompleteCount`, KIP-1226). Kafka
//! 4.0's early-access share groups wrote another layout under the same
//! version numbers; such records do not decode and are reported as
//! malformed, never misread.

use std::borrow::Cow;

use crate::error::{DecodeError, ErrorKind, Part};
use crate::uuid::Uuid;
use crate::wire::{Reader, Result, Writer, tag_data};

/// The share-partition a key names.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct SharePartitionKey<'a> {
    /// The share group.
    pub group_id: Cow<'a, str>,
    /// The topic's id (share-group state names topics by id only).
    pub topic_id: Uuid,
    /// The partition.
    pub partition: i32,
}

impl<'a> SharePartitionKey<'a> {
    fn decode(r: &mut Reader<'a>) -> Result<Self> {
        Ok(SharePartitionKey {
            group_id: r.string("group_id", false)?,
            topic_id: r.uuid("topic_id")?,
            partition: r.i32("partition")?,
        })
    }

    fn encode(&self, w: &mut Writer<'_>) {
        w.string(&self.group_id, false);
        w.uuid(&self.topic_id);
        w.i32(self.partition);
    }
}

/// A key of `__share_group_state`.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub enum ShareStateKey<'a> {
    /// Type 0: the share-partition's whole state.
    Snapshot(SharePartitionKey<'a>),
    /// Type 1: a change to it since the last snapshot.
    Update(SharePartitionKey<'a>),
    /// A type this codec does not know: its number and raw body.
    Opaque {
        /// The int16 that opens the key.
        key_version: i16,
        /// The key bytes after it.
        body: Cow<'a, [u8]>,
    },
}

impl<'a> ShareStateKey<'a> {
    /// Decodes a key.
    pub fn decode(bytes: &'a [u8]) -> std::result::Result<Self, DecodeError> {
        let r = &mut Reader::new(bytes);
        Self::decode_from(r).map_err(|e| e.in_part(Part::Key))
    }

    fn decode_from(r: &mut Reader<'a>) -> Result<Self> {
        let key_version = r.i16("key_version")?;
        let key = match key_version {
            0 => ShareStateKey::Snapshot(SharePartitionKey::decode(r)?),
            1 => ShareStateKey::Update(SharePartitionKey::decode(r)?),
            _ => {
                let body = r.take("body", r.remaining())?;
                return Ok(ShareStateKey::Opaque { key_version, body: Cow::Borrowed(body) });
            }
        };
        r.finish("end of key")?;
        Ok(key)
    }

    /// The share-partition the key names, unless opaque.
    pub fn share_partition(&self) -> Option<&SharePartitionKey<'a>> {
        match self {
            ShareStateKey::Snapshot(k) | ShareStateKey::Update(k) => Some(k),
            ShareStateKey::Opaque { .. } => None,
        }
    }

    /// The int16 that opens the key.
    pub fn key_version(&self) -> i16 {
        match self {
            ShareStateKey::Snapshot(_) => 0,
            ShareStateKey::Update(_) => 1,
            ShareStateKey::Opaque { key_version, .. } => *key_version,
        }
    }

    /// Appends the encoded key to `out`.
    pub fn encode(&self, out: &mut Vec<u8>) {
        let w = &mut Writer::new(out);
        w.i16(self.key_version());
        match self {
            ShareStateKey::Snapshot(k) | ShareStateKey::Update(k) => k.encode(w),
            ShareStateKey::Opaque { body, .. } => w.out.extend_from_slice(body),
        }
    }
}

/// Where a record of a share-partition stands (`DeliveryState` of a state
/// batch; acquisition is in memory only and never written).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub enum DeliveryState {
    /// 0: to be delivered (again).
    Available,
    /// 2: acknowledged by a consumer: done.
    Acknowledged,
    /// 4: done without success — rejected, or delivered the maximum number
    /// of times (a poison message).
    Archived,
    /// A value this codec does not know.
    Unknown(i8),
}

impl DeliveryState {
    /// The state an int8 of the log stands for.
    pub fn from_i8(v: i8) -> Self {
        match v {
            0 => DeliveryState::Available,
            2 => DeliveryState::Acknowledged,
            4 => DeliveryState::Archived,
            other => DeliveryState::Unknown(other),
        }
    }

    /// The int8 the log holds.
    pub fn as_i8(self) -> i8 {
        match self {
            DeliveryState::Available => 0,
            DeliveryState::Acknowledged => 2,
            DeliveryState::Archived => 4,
            DeliveryState::Unknown(v) => v,
        }
    }
}

/// A run of offsets in one delivery state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct StateBatch {
    /// The first offset of the run.
    pub first_offset: i64,
    /// The last offset of the run (inclusive).
    pub last_offset: i64,
    /// Their delivery state.
    pub delivery_state: DeliveryState,
    /// How many times they were delivered.
    pub delivery_count: i16,
}

/// Bytes a state batch takes at least: two int64, an int8, an int16 and its
/// (empty) tagged fields.
const STATE_BATCH_MIN: usize = 8 + 8 + 1 + 2 + 1;

impl StateBatch {
    fn decode(r: &mut Reader<'_>) -> Result<Self> {
        let batch = StateBatch {
            first_offset: r.i64("first_offset")?,
            last_offset: r.i64("last_offset")?,
            delivery_state: DeliveryState::from_i8(r.i8("delivery_state")?),
            delivery_count: r.i16("delivery_count")?,
        };
        r.tagged_fields("state_batch tagged_fields", |_, _| Ok(false))?;
        Ok(batch)
    }

    fn encode(&self, w: &mut Writer<'_>) {
        w.i64(self.first_offset);
        w.i64(self.last_offset);
        w.i8(self.delivery_state.as_i8());
        w.i16(self.delivery_count);
        w.tagged_fields(&[]);
    }
}

/// Reads the tagged fields of a share value: tag 0 is
/// `DeliveryCompleteCount` (Kafka 4.2+, KIP-1226; -1 when absent).
fn delivery_complete_count(r: &mut Reader<'_>) -> Result<i32> {
    let mut count = -1;
    r.tagged_fields("tagged_fields", |tag, d| match tag {
        0 => d.fixed_tag("delivery_complete_count", tag, 4, |d| d.i32("delivery_complete_count")).map(|n| {
            count = n;
            true
        }),
        _ => Ok(false),
    })?;
    Ok(count)
}

fn encode_delivery_complete_count(w: &mut Writer<'_>, count: i32) {
    if count == -1 {
        w.tagged_fields(&[]);
    } else {
        w.tagged_fields(&[(0, tag_data(|t| t.i32(count)))]);
    }
}

/// `ShareSnapshotValue`: the whole state of a share-partition.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct ShareSnapshotValue {
    /// The value's schema version.
    pub version: i16,
    /// The snapshot epoch: updates after this snapshot carry it.
    pub snapshot_epoch: i32,
    /// The state epoch (a new one when the state is initialized again).
    pub state_epoch: i32,
    /// The leader epoch of the share-partition.
    pub leader_epoch: i32,
    /// Every record below this offset is done.
    pub start_offset: i64,
    /// Offsets at or above the start offset whose delivery is complete (tag
    /// 0, Kafka 4.2+; -1 when not written).
    pub delivery_complete_count: i32,
    /// When the state was created, in ms.
    pub create_timestamp: i64,
    /// When it was written or rewritten, in ms.
    pub write_timestamp: i64,
    /// The delivery state of offsets at and after the start offset that are
    /// not simply available for the first time.
    pub state_batches: Vec<StateBatch>,
}

impl ShareSnapshotValue {
    fn decode(version: i16, r: &mut Reader<'_>) -> Result<Self> {
        let snapshot_epoch = r.i32("snapshot_epoch")?;
        let state_epoch = r.i32("state_epoch")?;
        let leader_epoch = r.i32("leader_epoch")?;
        let start_offset = r.i64("start_offset")?;
        let create_timestamp = r.i64("create_timestamp")?;
        let write_timestamp = r.i64("write_timestamp")?;
        let state_batches = r.array_of("state_batches", true, STATE_BATCH_MIN, StateBatch::decode)?;
        let delivery_complete_count = delivery_complete_count(r)?;
        Ok(ShareSnapshotValue {
            version,
            snapshot_epoch,
            state_epoch,
            leader_epoch,
            start_offset,
            delivery_complete_count,
            create_timestamp,
            write_timestamp,
            state_batches,
        })
    }

    fn encode(&self, w: &mut Writer<'_>) {
        w.i32(self.snapshot_epoch);
        w.i32(self.state_epoch);
        w.i32(self.leader_epoch);
        w.i64(self.start_offset);
        w.i64(self.create_timestamp);
        w.i64(self.write_timestamp);
        w.array_of(&self.state_batches, true, |w, b| b.encode(w));
        encode_delivery_complete_count(w, self.delivery_complete_count);
    }
}

/// `ShareUpdateValue`: a change to a share-partition's state since its last
/// snapshot.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct ShareUpdateValue {
    /// The value's schema version.
    pub version: i16,
    /// The epoch of the snapshot this update follows.
    pub snapshot_epoch: i32,
    /// The leader epoch of the share-partition.
    pub leader_epoch: i32,
    /// The new start offset, or -1 when it does not move.
    pub start_offset: i64,
    /// As in [`ShareSnapshotValue::delivery_complete_count`].
    pub delivery_complete_count: i32,
    /// The batches whose state changed.
    pub state_batches: Vec<StateBatch>,
}

impl ShareUpdateValue {
    fn decode(version: i16, r: &mut Reader<'_>) -> Result<Self> {
        let snapshot_epoch = r.i32("snapshot_epoch")?;
        let leader_epoch = r.i32("leader_epoch")?;
        let start_offset = r.i64("start_offset")?;
        let state_batches = r.array_of("state_batches", true, STATE_BATCH_MIN, StateBatch::decode)?;
        let delivery_complete_count = delivery_complete_count(r)?;
        Ok(ShareUpdateValue {
            version,
            snapshot_epoch,
            leader_epoch,
            start_offset,
            delivery_complete_count,
            state_batches,
        })
    }

    fn encode(&self, w: &mut Writer<'_>) {
        w.i32(self.snapshot_epoch);
        w.i32(self.leader_epoch);
        w.i64(self.start_offset);
        w.array_of(&self.state_batches, true, |w, b| b.encode(w));
        encode_delivery_complete_count(w, self.delivery_complete_count);
    }
}

/// A value of `__share_group_state`.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub enum ShareStateValue<'a> {
    /// For type 0.
    Snapshot(ShareSnapshotValue),
    /// For type 1.
    Update(ShareUpdateValue),
    /// For opaque keys: the version and the raw body.
    Opaque {
        /// The value's int16 version.
        version: i16,
        /// The value bytes after the version.
        body: Cow<'a, [u8]>,
    },
}

impl<'a> ShareStateValue<'a> {
    /// Decodes a (non-null) value with the schema `key` selects.
    pub fn decode(key: &ShareStateKey<'_>, bytes: &'a [u8]) -> std::result::Result<Self, DecodeError> {
        let r = &mut Reader::new(bytes);
        Self::decode_from(key, r).map_err(|e| e.in_part(Part::Value))
    }

    fn decode_from(key: &ShareStateKey<'_>, r: &mut Reader<'a>) -> Result<Self> {
        let version = r.i16("version")?;
        if let ShareStateKey::Opaque { .. } = key {
            let body = r.take("body", r.remaining())?;
            return Ok(ShareStateValue::Opaque { version, body: Cow::Borrowed(body) });
        }
        if version < 0 {
            let record =
                if matches!(key, ShareStateKey::Snapshot(_)) { "ShareSnapshotValue" } else { "ShareUpdateValue" };
            return Err(r.error("version", 0, ErrorKind::UnsupportedVersion { record, version }));
        }
        let value = match key {
            ShareStateKey::Snapshot(_) => ShareStateValue::Snapshot(ShareSnapshotValue::decode(version, r)?),
            _ => ShareStateValue::Update(ShareUpdateValue::decode(version, r)?),
        };
        r.finish("end of value")?;
        Ok(value)
    }

    /// The int16 that opens the value.
    pub fn version(&self) -> i16 {
        match self {
            ShareStateValue::Snapshot(v) => v.version,
            ShareStateValue::Update(v) => v.version,
            ShareStateValue::Opaque { version, .. } => *version,
        }
    }

    /// Appends the encoded value to `out`.
    pub fn encode(&self, out: &mut Vec<u8>) {
        let w = &mut Writer::new(out);
        w.i16(self.version());
        match self {
            ShareStateValue::Snapshot(v) => v.encode(w),
            ShareStateValue::Update(v) => v.encode(w),
            ShareStateValue::Opaque { body, .. } => w.out.extend_from_slice(body),
        }
    }
}

/// One decoded record of `__share_group_state`. A `None` value is a
/// tombstone: the share-partition's state is deleted (its group was).
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct ShareStateRecord<'a> {
    /// The key.
    pub key: ShareStateKey<'a>,
    /// The value, or `None` for a tombstone.
    pub value: Option<ShareStateValue<'a>>,
}

impl<'a> ShareStateRecord<'a> {
    /// Decodes a record from its key and value bytes (`None`: a tombstone).
    pub fn decode(key: &'a [u8], value: Option<&'a [u8]>) -> std::result::Result<Self, DecodeError> {
        let key = ShareStateKey::decode(key)?;
        let value = match value {
            Some(bytes) => Some(ShareStateValue::decode(&key, bytes)?),
            None => None,
        };
        Ok(ShareStateRecord { key, value })
    }

    /// Encodes the record into key bytes and value bytes (`None` for a tombstone).
    pub fn encode(&self) -> (Vec<u8>, Option<Vec<u8>>) {
        let mut key = Vec::new();
        self.key.encode(&mut key);
        let value = self.value.as_ref().map(|v| {
            let mut out = Vec::new();
            v.encode(&mut out);
            out
        });
        (key, value)
    }
}

#[cfg(test)]
mod tests;
