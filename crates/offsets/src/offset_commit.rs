//! Offset-commit records (key types 0 and 1): the hot path of the lag monitor.
//!
//! Decoding borrows the group, topic and metadata strings from the input and
//! allocates nothing.

use std::borrow::Cow;

use crate::error::ErrorKind;
use crate::uuid::Uuid;
use crate::wire::{Reader, Result, Writer, tag_data};

/// `OffsetCommitKey` (types 0 and 1 share one layout): whose offset this is.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct OffsetCommitKey<'a> {
    /// The consumer group.
    pub group: Cow<'a, str>,
    /// The topic the offset belongs to.
    pub topic: Cow<'a, str>,
    /// The partition the offset belongs to.
    pub partition: i32,
}

impl<'a> OffsetCommitKey<'a> {
    pub(crate) fn decode(r: &mut Reader<'a>) -> Result<Self> {
        Ok(OffsetCommitKey {
            group: r.string("group", false)?,
            topic: r.string("topic", false)?,
            partition: r.i32("partition")?,
        })
    }

    pub(crate) fn encode(&self, w: &mut Writer<'_>) {
        w.string(&self.group, false);
        w.string(&self.topic, false);
        w.i32(self.partition);
    }
}

/// `OffsetCommitValue` v0–v4: a committed offset.
///
/// Fields a version does not have are `None`. Versions above 4 are read with the
/// v4 layout, as KIP-915 prescribes (newer versions only add tagged fields).
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct OffsetCommitValue<'a> {
    /// The value's schema version (the int16 before the body).
    pub version: i16,
    /// The committed offset: the next record the group will read.
    pub offset: i64,
    /// The leader epoch of the last consumed record (v3+; -1 when unknown).
    pub leader_epoch: Option<i32>,
    /// Free-form metadata the committing client attached.
    pub metadata: Cow<'a, str>,
    /// When the commit was made, in milliseconds since the epoch.
    pub commit_timestamp: i64,
    /// When the commit expires (v1 only; later brokers expire by group state).
    pub expire_timestamp: Option<i64>,
    /// The topic id (v4+, tagged field 0; absent when the broker did not write it).
    pub topic_id: Option<Uuid>,
}

const TOPIC_ID_TAG: u32 = 0;

impl<'a> OffsetCommitValue<'a> {
    /// The highest version whose layout this codec knows.
    pub const MAX_KNOWN_VERSION: i16 = 4;

    /// A commit of `offset` at `commit_timestamp` in `version`'s layout, with
    /// that version's defaults: empty metadata, leader epoch -1 (v3+), expire
    /// timestamp -1 (v1 only), no topic id. Set other fields with struct update.
    pub fn new(version: i16, offset: i64, commit_timestamp: i64) -> Self {
        OffsetCommitValue {
            version,
            offset,
            leader_epoch: (version >= 3).then_some(-1),
            metadata: Cow::Borrowed(""),
            commit_timestamp,
            expire_timestamp: (version == 1).then_some(-1),
            topic_id: None,
        }
    }

    pub(crate) fn decode(version: i16, r: &mut Reader<'a>) -> Result<Self> {
        let mut value = match version {
            0 | 2 => OffsetCommitValue {
                version,
                offset: r.i64("offset")?,
                leader_epoch: None,
                metadata: r.string("metadata", false)?,
                commit_timestamp: r.i64("commit_timestamp")?,
                expire_timestamp: None,
                topic_id: None,
            },
            1 => OffsetCommitValue {
                version,
                offset: r.i64("offset")?,
                leader_epoch: None,
                metadata: r.string("metadata", false)?,
                commit_timestamp: r.i64("commit_timestamp")?,
                expire_timestamp: Some(r.i64("expire_timestamp")?),
                topic_id: None,
            },
            3.. => {
                let flexible = version >= 4;
                OffsetCommitValue {
                    version,
                    offset: r.i64("offset")?,
                    leader_epoch: Some(r.i32("leader_epoch")?),
                    metadata: r.string("metadata", flexible)?,
                    commit_timestamp: r.i64("commit_timestamp")?,
                    expire_timestamp: None,
                    topic_id: None,
                }
            }
            _ => {
                return Err(r.error(
                    "version",
                    0,
                    ErrorKind::UnsupportedVersion { record: "OffsetCommitValue", version },
                ));
            }
        };
        if version >= 4 {
            let mut topic_id = None;
            r.tagged_fields("tagged_fields", |tag, data| {
                if tag != TOPIC_ID_TAG {
                    return Ok(false);
                }
                topic_id = Some(data.fixed_tag("topic_id", tag, 16, |d| d.uuid("topic_id"))?);
                Ok(true)
            })?;
            value.topic_id = topic_id;
        }
        if version <= Self::MAX_KNOWN_VERSION {
            r.finish("end of value")?;
        }
        Ok(value)
    }

    pub(crate) fn encode(&self, w: &mut Writer<'_>) {
        let flexible = self.version >= 4;
        w.i64(self.offset);
        if self.version >= 3 {
            w.i32(self.leader_epoch.unwrap_or(-1));
        }
        w.string(&self.metadata, flexible);
        w.i64(self.commit_timestamp);
        if self.version == 1 {
            w.i64(self.expire_timestamp.unwrap_or(-1));
        }
        if flexible {
            let tags: Vec<(u32, Vec<u8>)> =
                self.topic_id.iter().map(|id| (TOPIC_ID_TAG, tag_data(|t| t.uuid(id)))).collect();
            w.tagged_fields(&tags);
        }
    }
}
