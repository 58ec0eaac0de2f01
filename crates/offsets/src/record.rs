//! A whole `__consumer_offsets` record: the key's type picks the value's schema.

use std::borrow::Cow;

use crate::consumer_group::{
    AssignmentMetadataValue, ConsumerGroupCurrentMemberAssignmentValue, ConsumerGroupMemberMetadataValue,
    ConsumerGroupMetadataValue, ConsumerGroupPartitionMetadataValue, ConsumerGroupRegularExpressionValue,
    ConsumerGroupTargetAssignmentMemberValue, GroupIdKey, MemberKey, RegularExpressionKey,
};
use crate::cursor::Cursor;
use crate::error::{DecodeError, ErrorKind, Part};
use crate::group_metadata::{GroupMetadataKey, GroupMetadataValue};
use crate::offset_commit::{OffsetCommitKey, OffsetCommitValue};
use crate::record_type::RecordType;
use crate::share_group::{
    ShareGroupCurrentMemberAssignmentValue, ShareGroupMemberMetadataValue, ShareGroupMetadataValue,
    ShareGroupStatePartitionMetadataValue, ShareGroupTargetAssignmentMemberValue,
};
use crate::streams_group::{
    StreamsGroupCurrentMemberAssignmentValue, StreamsGroupMemberMetadataValue, StreamsGroupMetadataValue,
    StreamsGroupTargetAssignmentMemberValue, StreamsGroupTopologyValue,
};
use crate::wire::{Reader, Result, Writer};

/// A record's key, typed by the int16 that opens it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RecordKey<'a> {
    /// Types 0 and 1: a committed offset; `key_version` tells which.
    OffsetCommit {
        /// 0 (pre-0.10 brokers) or 1; both have the same layout.
        key_version: i16,
        /// The group, topic and partition.
        key: OffsetCommitKey<'a>,
    },
    /// Type 2: classic group metadata.
    GroupMetadata(GroupMetadataKey<'a>),
    /// Type 3.
    ConsumerGroupMetadata(GroupIdKey<'a>),
    /// Type 4.
    ConsumerGroupPartitionMetadata(GroupIdKey<'a>),
    /// Type 5.
    ConsumerGroupMemberMetadata(MemberKey<'a>),
    /// Type 6.
    ConsumerGroupTargetAssignmentMetadata(GroupIdKey<'a>),
    /// Type 7.
    ConsumerGroupTargetAssignmentMember(MemberKey<'a>),
    /// Type 8.
    ConsumerGroupCurrentMemberAssignment(MemberKey<'a>),
    /// Type 10: a share-group member.
    ShareGroupMemberMetadata(MemberKey<'a>),
    /// Type 11: a share group's epoch.
    ShareGroupMetadata(GroupIdKey<'a>),
    /// Type 12.
    ShareGroupTargetAssignmentMetadata(GroupIdKey<'a>),
    /// Type 13.
    ShareGroupTargetAssignmentMember(MemberKey<'a>),
    /// Type 14.
    ShareGroupCurrentMemberAssignment(MemberKey<'a>),
    /// Type 15: which share-partitions have state.
    ShareGroupStatePartitionMetadata(GroupIdKey<'a>),
    /// Type 16.
    ConsumerGroupRegularExpression(RegularExpressionKey<'a>),
    /// Type 17: a streams group's epoch.
    StreamsGroupMetadata(GroupIdKey<'a>),
    /// Type 19: a streams-group member.
    StreamsGroupMemberMetadata(MemberKey<'a>),
    /// Type 20.
    StreamsGroupTargetAssignmentMetadata(GroupIdKey<'a>),
    /// Type 21.
    StreamsGroupTargetAssignmentMember(MemberKey<'a>),
    /// Type 22.
    StreamsGroupCurrentMemberAssignment(MemberKey<'a>),
    /// Type 23: a streams group's topology.
    StreamsGroupTopology(GroupIdKey<'a>),
    /// Type 24 (no schema in Kafka 4.4), retired (9, 18) and never-seen types:
    /// kept as the type and the raw key body.
    Opaque {
        /// The key's int16 type.
        key_version: i16,
        /// The key bytes after the type.
        body: Cow<'a, [u8]>,
    },
}

/// A record's value, decoded with the schema the key's type selects.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RecordValue<'a> {
    /// For types 0 and 1.
    OffsetCommit(OffsetCommitValue<'a>),
    /// For type 2.
    GroupMetadata(GroupMetadataValue<'a>),
    /// For type 3.
    ConsumerGroupMetadata(ConsumerGroupMetadataValue),
    /// For type 4.
    ConsumerGroupPartitionMetadata(ConsumerGroupPartitionMetadataValue<'a>),
    /// For type 5.
    ConsumerGroupMemberMetadata(ConsumerGroupMemberMetadataValue<'a>),
    /// For type 6.
    ConsumerGroupTargetAssignmentMetadata(AssignmentMetadataValue),
    /// For type 7.
    ConsumerGroupTargetAssignmentMember(ConsumerGroupTargetAssignmentMemberValue),
    /// For type 8.
    ConsumerGroupCurrentMemberAssignment(ConsumerGroupCurrentMemberAssignmentValue),
    /// For type 10.
    ShareGroupMemberMetadata(ShareGroupMemberMetadataValue<'a>),
    /// For type 11.
    ShareGroupMetadata(ShareGroupMetadataValue),
    /// For type 12.
    ShareGroupTargetAssignmentMetadata(AssignmentMetadataValue),
    /// For type 13.
    ShareGroupTargetAssignmentMember(ShareGroupTargetAssignmentMemberValue),
    /// For type 14.
    ShareGroupCurrentMemberAssignment(ShareGroupCurrentMemberAssignmentValue),
    /// For type 15.
    ShareGroupStatePartitionMetadata(ShareGroupStatePartitionMetadataValue<'a>),
    /// For type 16.
    ConsumerGroupRegularExpression(ConsumerGroupRegularExpressionValue<'a>),
    /// For type 17.
    StreamsGroupMetadata(StreamsGroupMetadataValue<'a>),
    /// For type 19.
    StreamsGroupMemberMetadata(StreamsGroupMemberMetadataValue<'a>),
    /// For type 20.
    StreamsGroupTargetAssignmentMetadata(AssignmentMetadataValue),
    /// For type 21.
    StreamsGroupTargetAssignmentMember(StreamsGroupTargetAssignmentMemberValue<'a>),
    /// For type 22.
    StreamsGroupCurrentMemberAssignment(StreamsGroupCurrentMemberAssignmentValue<'a>),
    /// For type 23.
    StreamsGroupTopology(StreamsGroupTopologyValue<'a>),
    /// For opaque keys: the version and the raw body.
    Opaque {
        /// The value's int16 version.
        version: i16,
        /// The value bytes after the version.
        body: Cow<'a, [u8]>,
    },
}

/// One decoded record. A `None` value is a tombstone: the key's entry is deleted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record<'a> {
    /// The key.
    pub key: RecordKey<'a>,
    /// The value, or `None` for a tombstone.
    pub value: Option<RecordValue<'a>>,
}

impl<'a> RecordKey<'a> {
    /// Decodes a key.
    pub fn decode(bytes: &'a [u8]) -> std::result::Result<Self, DecodeError> {
        Self::decode_from(&mut Reader::new(bytes)).map_err(|e| e.in_part(Part::Key))
    }

    fn decode_from(r: &mut Reader<'a>) -> Result<Self> {
        let key_version = r.i16("key_version")?;
        use RecordType as T;
        let record_type = RecordType::from_key_version(key_version);
        let key = match record_type {
            T::OffsetCommit => RecordKey::OffsetCommit { key_version, key: OffsetCommitKey::decode(r)? },
            T::GroupMetadata => RecordKey::GroupMetadata(GroupMetadataKey::decode(r)?),
            T::ConsumerGroupRegularExpression => {
                RecordKey::ConsumerGroupRegularExpression(RegularExpressionKey::decode(r)?)
            }
            T::ConsumerGroupMetadata => RecordKey::ConsumerGroupMetadata(GroupIdKey::decode(r)?),
            T::ConsumerGroupPartitionMetadata => RecordKey::ConsumerGroupPartitionMetadata(GroupIdKey::decode(r)?),
            T::ConsumerGroupTargetAssignmentMetadata => {
                RecordKey::ConsumerGroupTargetAssignmentMetadata(GroupIdKey::decode(r)?)
            }
            T::ShareGroupMetadata => RecordKey::ShareGroupMetadata(GroupIdKey::decode(r)?),
            T::ShareGroupTargetAssignmentMetadata => {
                RecordKey::ShareGroupTargetAssignmentMetadata(GroupIdKey::decode(r)?)
            }
            T::ShareGroupStatePartitionMetadata => RecordKey::ShareGroupStatePartitionMetadata(GroupIdKey::decode(r)?),
            T::StreamsGroupMetadata => RecordKey::StreamsGroupMetadata(GroupIdKey::decode(r)?),
            T::StreamsGroupTargetAssignmentMetadata => {
                RecordKey::StreamsGroupTargetAssignmentMetadata(GroupIdKey::decode(r)?)
            }
            T::StreamsGroupTopology => RecordKey::StreamsGroupTopology(GroupIdKey::decode(r)?),
            T::ConsumerGroupMemberMetadata => RecordKey::ConsumerGroupMemberMetadata(MemberKey::decode(r)?),
            T::ConsumerGroupTargetAssignmentMember => {
                RecordKey::ConsumerGroupTargetAssignmentMember(MemberKey::decode(r)?)
            }
            T::ConsumerGroupCurrentMemberAssignment => {
                RecordKey::ConsumerGroupCurrentMemberAssignment(MemberKey::decode(r)?)
            }
            T::ShareGroupMemberMetadata => RecordKey::ShareGroupMemberMetadata(MemberKey::decode(r)?),
            T::ShareGroupTargetAssignmentMember => RecordKey::ShareGroupTargetAssignmentMember(MemberKey::decode(r)?),
            T::ShareGroupCurrentMemberAssignment => RecordKey::ShareGroupCurrentMemberAssignment(MemberKey::decode(r)?),
            T::StreamsGroupMemberMetadata => RecordKey::StreamsGroupMemberMetadata(MemberKey::decode(r)?),
            T::StreamsGroupTargetAssignmentMember => {
                RecordKey::StreamsGroupTargetAssignmentMember(MemberKey::decode(r)?)
            }
            T::StreamsGroupCurrentMemberAssignment => {
                RecordKey::StreamsGroupCurrentMemberAssignment(MemberKey::decode(r)?)
            }
            T::StreamsGroupTargetAssignmentResolvedTopicIds | T::Unknown(_) => {
                let body = r.take("body", r.remaining())?;
                return Ok(RecordKey::Opaque { key_version, body: Cow::Borrowed(body) });
            }
        };
        r.finish("end of key")?;
        Ok(key)
    }

    /// The group a raw key names, read without decoding the rest: every key
    /// version Kafka writes to `__consumer_offsets` begins, after its int16
    /// version, with the group id (an int16 length, then UTF-8 bytes).
    /// `None` for bytes too short or not UTF-8.
    pub fn group_of(bytes: &[u8]) -> Option<&str> {
        let mut c = Cursor::new(bytes);
        c.skip(2).ok()?;
        c.str16().ok()?
    }

    /// The key of a group-level KIP-848 record (types 3, 4, 6, 11, 12, 15, 17,
    /// 20 and 23): the group id alone.
    pub fn group_id_key(&self) -> Option<&GroupIdKey<'a>> {
        match self {
            RecordKey::ConsumerGroupMetadata(k)
            | RecordKey::ConsumerGroupPartitionMetadata(k)
            | RecordKey::ConsumerGroupTargetAssignmentMetadata(k)
            | RecordKey::ShareGroupMetadata(k)
            | RecordKey::ShareGroupTargetAssignmentMetadata(k)
            | RecordKey::ShareGroupStatePartitionMetadata(k)
            | RecordKey::StreamsGroupMetadata(k)
            | RecordKey::StreamsGroupTargetAssignmentMetadata(k)
            | RecordKey::StreamsGroupTopology(k) => Some(k),
            _ => None,
        }
    }

    /// The key of a member-level KIP-848 record (types 5, 7, 8, 10, 13, 14, 19,
    /// 21 and 22): the group and member ids.
    pub fn member_key(&self) -> Option<&MemberKey<'a>> {
        match self {
            RecordKey::ConsumerGroupMemberMetadata(k)
            | RecordKey::ConsumerGroupTargetAssignmentMember(k)
            | RecordKey::ConsumerGroupCurrentMemberAssignment(k)
            | RecordKey::ShareGroupMemberMetadata(k)
            | RecordKey::ShareGroupTargetAssignmentMember(k)
            | RecordKey::ShareGroupCurrentMemberAssignment(k)
            | RecordKey::StreamsGroupMemberMetadata(k)
            | RecordKey::StreamsGroupTargetAssignmentMember(k)
            | RecordKey::StreamsGroupCurrentMemberAssignment(k) => Some(k),
            _ => None,
        }
    }

    /// The int16 that opens the key.
    pub fn key_version(&self) -> i16 {
        match self {
            RecordKey::OffsetCommit { key_version, .. } | RecordKey::Opaque { key_version, .. } => *key_version,
            other => other.record_type().key_version(),
        }
    }

    /// The kind of record this key introduces.
    pub fn record_type(&self) -> RecordType {
        match self {
            RecordKey::OffsetCommit { .. } => RecordType::OffsetCommit,
            RecordKey::GroupMetadata(_) => RecordType::GroupMetadata,
            RecordKey::ConsumerGroupMetadata(_) => RecordType::ConsumerGroupMetadata,
            RecordKey::ConsumerGroupPartitionMetadata(_) => RecordType::ConsumerGroupPartitionMetadata,
            RecordKey::ConsumerGroupMemberMetadata(_) => RecordType::ConsumerGroupMemberMetadata,
            RecordKey::ConsumerGroupTargetAssignmentMetadata(_) => RecordType::ConsumerGroupTargetAssignmentMetadata,
            RecordKey::ConsumerGroupTargetAssignmentMember(_) => RecordType::ConsumerGroupTargetAssignmentMember,
            RecordKey::ConsumerGroupCurrentMemberAssignment(_) => RecordType::ConsumerGroupCurrentMemberAssignment,
            RecordKey::ConsumerGroupRegularExpression(_) => RecordType::ConsumerGroupRegularExpression,
            RecordKey::ShareGroupMemberMetadata(_) => RecordType::ShareGroupMemberMetadata,
            RecordKey::ShareGroupMetadata(_) => RecordType::ShareGroupMetadata,
            RecordKey::ShareGroupTargetAssignmentMetadata(_) => RecordType::ShareGroupTargetAssignmentMetadata,
            RecordKey::ShareGroupTargetAssignmentMember(_) => RecordType::ShareGroupTargetAssignmentMember,
            RecordKey::ShareGroupCurrentMemberAssignment(_) => RecordType::ShareGroupCurrentMemberAssignment,
            RecordKey::ShareGroupStatePartitionMetadata(_) => RecordType::ShareGroupStatePartitionMetadata,
            RecordKey::StreamsGroupMetadata(_) => RecordType::StreamsGroupMetadata,
            RecordKey::StreamsGroupMemberMetadata(_) => RecordType::StreamsGroupMemberMetadata,
            RecordKey::StreamsGroupTargetAssignmentMetadata(_) => RecordType::StreamsGroupTargetAssignmentMetadata,
            RecordKey::StreamsGroupTargetAssignmentMember(_) => RecordType::StreamsGroupTargetAssignmentMember,
            RecordKey::StreamsGroupCurrentMemberAssignment(_) => RecordType::StreamsGroupCurrentMemberAssignment,
            RecordKey::StreamsGroupTopology(_) => RecordType::StreamsGroupTopology,
            RecordKey::Opaque { key_version, .. } => RecordType::from_key_version(*key_version),
        }
    }

    /// Appends the encoded key to `out`.
    pub fn encode(&self, out: &mut Vec<u8>) {
        let w = &mut Writer::new(out);
        w.i16(self.key_version());
        match self {
            RecordKey::OffsetCommit { key, .. } => key.encode(w),
            RecordKey::GroupMetadata(k) => k.encode(w),
            RecordKey::ConsumerGroupRegularExpression(k) => k.encode(w),
            RecordKey::Opaque { body, .. } => w.out.extend_from_slice(body),
            other => {
                if let Some(k) = other.group_id_key() {
                    k.encode(w);
                } else if let Some(k) = other.member_key() {
                    k.encode(w);
                }
            }
        }
    }
}

impl<'a> RecordValue<'a> {
    /// Decodes a (non-null) value with the schema `key` selects.
    pub fn decode(key: &RecordKey<'_>, bytes: &'a [u8]) -> std::result::Result<Self, DecodeError> {
        let r = &mut Reader::new(bytes);
        Self::decode_from(key.record_type(), r).map_err(|e| e.in_part(Part::Value))
    }

    fn decode_from(record_type: RecordType, r: &mut Reader<'a>) -> Result<Self> {
        let version = r.i16("version")?;
        if let RecordType::OffsetCommit = record_type {
            return OffsetCommitValue::decode(version, r).map(RecordValue::OffsetCommit);
        }
        if let RecordType::GroupMetadata = record_type {
            return GroupMetadataValue::decode(version, r).map(RecordValue::GroupMetadata);
        }
        if !record_type.is_kip848() {
            let body = r.take("body", r.remaining())?;
            return Ok(RecordValue::Opaque { version, body: Cow::Borrowed(body) });
        }
        // KIP-848 values (and share and streams groups'): v0 is the only
        // layout; later versions add tagged fields only.
        if version < 0 {
            return Err(r.error("version", 0, ErrorKind::UnsupportedVersion { record: record_type.name(), version }));
        }
        let value = Self::decode_kip848(record_type, version, r)?;
        if version == 0 {
            r.finish("end of value")?;
        }
        Ok(value)
    }

    fn decode_kip848(record_type: RecordType, version: i16, r: &mut Reader<'a>) -> Result<Self> {
        use RecordType as T;
        use RecordValue as V;
        Ok(match record_type {
            T::ConsumerGroupMetadata => V::ConsumerGroupMetadata(ConsumerGroupMetadataValue::decode(version, r)?),
            T::ConsumerGroupPartitionMetadata => {
                V::ConsumerGroupPartitionMetadata(ConsumerGroupPartitionMetadataValue::decode(version, r)?)
            }
            T::ConsumerGroupMemberMetadata => {
                V::ConsumerGroupMemberMetadata(ConsumerGroupMemberMetadataValue::decode(version, r)?)
            }
            T::ConsumerGroupTargetAssignmentMetadata => {
                V::ConsumerGroupTargetAssignmentMetadata(AssignmentMetadataValue::decode(version, r)?)
            }
            T::ConsumerGroupTargetAssignmentMember => {
                V::ConsumerGroupTargetAssignmentMember(ConsumerGroupTargetAssignmentMemberValue::decode(version, r)?)
            }
            T::ConsumerGroupCurrentMemberAssignment => {
                V::ConsumerGroupCurrentMemberAssignment(ConsumerGroupCurrentMemberAssignmentValue::decode(version, r)?)
            }
            T::ConsumerGroupRegularExpression => {
                V::ConsumerGroupRegularExpression(ConsumerGroupRegularExpressionValue::decode(version, r)?)
            }
            T::ShareGroupMemberMetadata => {
                V::ShareGroupMemberMetadata(ShareGroupMemberMetadataValue::decode(version, r)?)
            }
            T::ShareGroupMetadata => V::ShareGroupMetadata(ShareGroupMetadataValue::decode(version, r)?),
            T::ShareGroupTargetAssignmentMetadata => {
                V::ShareGroupTargetAssignmentMetadata(AssignmentMetadataValue::decode(version, r)?)
            }
            T::ShareGroupTargetAssignmentMember => {
                V::ShareGroupTargetAssignmentMember(ShareGroupTargetAssignmentMemberValue::decode(version, r)?)
            }
            T::ShareGroupCurrentMemberAssignment => {
                V::ShareGroupCurrentMemberAssignment(ShareGroupCurrentMemberAssignmentValue::decode(version, r)?)
            }
            T::ShareGroupStatePartitionMetadata => {
                V::ShareGroupStatePartitionMetadata(ShareGroupStatePartitionMetadataValue::decode(version, r)?)
            }
            T::StreamsGroupMetadata => V::StreamsGroupMetadata(StreamsGroupMetadataValue::decode(version, r)?),
            T::StreamsGroupMemberMetadata => {
                V::StreamsGroupMemberMetadata(StreamsGroupMemberMetadataValue::decode(version, r)?)
            }
            T::StreamsGroupTargetAssignmentMetadata => {
                V::StreamsGroupTargetAssignmentMetadata(AssignmentMetadataValue::decode(version, r)?)
            }
            T::StreamsGroupTargetAssignmentMember => {
                V::StreamsGroupTargetAssignmentMember(StreamsGroupTargetAssignmentMemberValue::decode(version, r)?)
            }
            T::StreamsGroupCurrentMemberAssignment => {
                V::StreamsGroupCurrentMemberAssignment(StreamsGroupCurrentMemberAssignmentValue::decode(version, r)?)
            }
            _ => V::StreamsGroupTopology(StreamsGroupTopologyValue::decode(version, r)?),
        })
    }

    /// The value's int16 version.
    pub fn version(&self) -> i16 {
        match self {
            RecordValue::OffsetCommit(v) => v.version,
            RecordValue::GroupMetadata(v) => v.version,
            RecordValue::ConsumerGroupMetadata(v) => v.version,
            RecordValue::ConsumerGroupPartitionMetadata(v) => v.version,
            RecordValue::ConsumerGroupMemberMetadata(v) => v.version,
            RecordValue::ConsumerGroupTargetAssignmentMetadata(v) => v.version,
            RecordValue::ConsumerGroupTargetAssignmentMember(v) => v.version,
            RecordValue::ConsumerGroupCurrentMemberAssignment(v) => v.version,
            RecordValue::ConsumerGroupRegularExpression(v) => v.version,
            RecordValue::ShareGroupMemberMetadata(v) => v.version,
            RecordValue::ShareGroupMetadata(v) => v.version,
            RecordValue::ShareGroupTargetAssignmentMetadata(v) => v.version,
            RecordValue::ShareGroupTargetAssignmentMember(v) => v.version,
            RecordValue::ShareGroupCurrentMemberAssignment(v) => v.version,
            RecordValue::ShareGroupStatePartitionMetadata(v) => v.version,
            RecordValue::StreamsGroupMetadata(v) => v.version,
            RecordValue::StreamsGroupMemberMetadata(v) => v.version,
            RecordValue::StreamsGroupTargetAssignmentMetadata(v) => v.version,
            RecordValue::StreamsGroupTargetAssignmentMember(v) => v.version,
            RecordValue::StreamsGroupCurrentMemberAssignment(v) => v.version,
            RecordValue::StreamsGroupTopology(v) => v.version,
            RecordValue::Opaque { version, .. } => *version,
        }
    }

    /// Appends the encoded value to `out`, in the layout of its version.
    pub fn encode(&self, out: &mut Vec<u8>) {
        let w = &mut Writer::new(out);
        w.i16(self.version());
        match self {
            RecordValue::OffsetCommit(v) => v.encode(w),
            RecordValue::GroupMetadata(v) => v.encode(w),
            RecordValue::ConsumerGroupMetadata(v) => v.encode(w),
            RecordValue::ConsumerGroupPartitionMetadata(v) => v.encode(w),
            RecordValue::ConsumerGroupMemberMetadata(v) => v.encode(w),
            RecordValue::ConsumerGroupTargetAssignmentMetadata(v)
            | RecordValue::ShareGroupTargetAssignmentMetadata(v)
            | RecordValue::StreamsGroupTargetAssignmentMetadata(v) => v.encode(w),
            RecordValue::ConsumerGroupTargetAssignmentMember(v) | RecordValue::ShareGroupTargetAssignmentMember(v) => {
                v.encode(w)
            }
            RecordValue::ConsumerGroupCurrentMemberAssignment(v) => v.encode(w),
            RecordValue::ConsumerGroupRegularExpression(v) => v.encode(w),
            RecordValue::ShareGroupMemberMetadata(v) => v.encode(w),
            RecordValue::ShareGroupMetadata(v) => v.encode(w),
            RecordValue::ShareGroupCurrentMemberAssignment(v) => v.encode(w),
            RecordValue::ShareGroupStatePartitionMetadata(v) => v.encode(w),
            RecordValue::StreamsGroupMetadata(v) => v.encode(w),
            RecordValue::StreamsGroupMemberMetadata(v) => v.encode(w),
            RecordValue::StreamsGroupTargetAssignmentMember(v) => v.encode(w),
            RecordValue::StreamsGroupCurrentMemberAssignment(v) => v.encode(w),
            RecordValue::StreamsGroupTopology(v) => v.encode(w),
            RecordValue::Opaque { body, .. } => w.out.extend_from_slice(body),
        }
    }
}

impl<'a> Record<'a> {
    /// An offset-commit record for `group`, `topic` and `partition`; `value: None`
    /// is the tombstone that deletes the offset. The key is version 0 for a v0
    /// value (as pre-0.10 brokers wrote it), else 1.
    pub fn offset_commit(
        group: impl Into<Cow<'a, str>>,
        topic: impl Into<Cow<'a, str>>,
        partition: i32,
        value: Option<OffsetCommitValue<'a>>,
    ) -> Self {
        let key_version = if value.as_ref().is_some_and(|v| v.version == 0) { 0 } else { 1 };
        Record {
            key: RecordKey::OffsetCommit {
                key_version,
                key: OffsetCommitKey { group: group.into(), topic: topic.into(), partition },
            },
            value: value.map(RecordValue::OffsetCommit),
        }
    }

    /// A group-metadata record for `group`; `value: None` is the tombstone that
    /// deletes the group's metadata.
    pub fn group_metadata(group: impl Into<Cow<'a, str>>, value: Option<GroupMetadataValue<'a>>) -> Self {
        Record {
            key: RecordKey::GroupMetadata(GroupMetadataKey { group: group.into() }),
            value: value.map(RecordValue::GroupMetadata),
        }
    }

    /// Decodes a record from its key and value bytes (`None`: a tombstone).
    pub fn decode(key: &'a [u8], value: Option<&'a [u8]>) -> std::result::Result<Self, DecodeError> {
        let key = RecordKey::decode(key)?;
        let value = match value {
            Some(bytes) => Some(RecordValue::decode(&key, bytes)?),
            None => None,
        };
        Ok(Record { key, value })
    }

    /// True when the value is null: the key's entry is deleted.
    pub fn is_tombstone(&self) -> bool {
        self.value.is_none()
    }

    /// Encodes the record into key bytes and value bytes (`None` for a tombstone),
    /// each in the layout of its version.
    ///
    /// # Panics
    /// When a string, bytes or array is too long for its version's layout (e.g. a
    /// string over 32,767 bytes in a classic layout).
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
