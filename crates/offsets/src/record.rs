//! A whole `__consumer_offsets` record: the key's type picks the value's schema.

use std::borrow::Cow;

use crate::consumer_group::{
    ConsumerGroupCurrentMemberAssignmentValue, ConsumerGroupMemberMetadataValue, ConsumerGroupMetadataValue,
    ConsumerGroupPartitionMetadataValue, ConsumerGroupRegularExpressionValue, ConsumerGroupTargetAssignmentMemberValue,
    ConsumerGroupTargetAssignmentMetadataValue, GroupIdKey, MemberKey, RegularExpressionKey,
};
use crate::cursor::Cursor;
use crate::error::{DecodeError, ErrorKind, Part};
use crate::group_metadata::{GroupMetadataKey, GroupMetadataValue};
use crate::offset_commit::{OffsetCommitKey, OffsetCommitValue};
use crate::record_type::RecordType;
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
    /// Type 16.
    ConsumerGroupRegularExpression(RegularExpressionKey<'a>),
    /// Share-group (10–15), streams-group (17, 19–24), retired (9, 18) and
    /// never-seen types: kept as the type and the raw key body.
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
    ConsumerGroupTargetAssignmentMetadata(ConsumerGroupTargetAssignmentMetadataValue),
    /// For type 7.
    ConsumerGroupTargetAssignmentMember(ConsumerGroupTargetAssignmentMemberValue),
    /// For type 8.
    ConsumerGroupCurrentMemberAssignment(ConsumerGroupCurrentMemberAssignmentValue),
    /// For type 16.
    ConsumerGroupRegularExpression(ConsumerGroupRegularExpressionValue<'a>),
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
        let key = match RecordType::from_key_version(key_version) {
            RecordType::OffsetCommit => RecordKey::OffsetCommit { key_version, key: OffsetCommitKey::decode(r)? },
            RecordType::GroupMetadata => RecordKey::GroupMetadata(GroupMetadataKey::decode(r)?),
            RecordType::ConsumerGroupMetadata => RecordKey::ConsumerGroupMetadata(GroupIdKey::decode(r)?),
            RecordType::ConsumerGroupPartitionMetadata => {
                RecordKey::ConsumerGroupPartitionMetadata(GroupIdKey::decode(r)?)
            }
            RecordType::ConsumerGroupMemberMetadata => RecordKey::ConsumerGroupMemberMetadata(MemberKey::decode(r)?),
            RecordType::ConsumerGroupTargetAssignmentMetadata => {
                RecordKey::ConsumerGroupTargetAssignmentMetadata(GroupIdKey::decode(r)?)
            }
            RecordType::ConsumerGroupTargetAssignmentMember => {
                RecordKey::ConsumerGroupTargetAssignmentMember(MemberKey::decode(r)?)
            }
            RecordType::ConsumerGroupCurrentMemberAssignment => {
                RecordKey::ConsumerGroupCurrentMemberAssignment(MemberKey::decode(r)?)
            }
            RecordType::ConsumerGroupRegularExpression => {
                RecordKey::ConsumerGroupRegularExpression(RegularExpressionKey::decode(r)?)
            }
            _ => {
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
            RecordKey::ConsumerGroupMetadata(k)
            | RecordKey::ConsumerGroupPartitionMetadata(k)
            | RecordKey::ConsumerGroupTargetAssignmentMetadata(k) => k.encode(w),
            RecordKey::ConsumerGroupMemberMetadata(k)
            | RecordKey::ConsumerGroupTargetAssignmentMember(k)
            | RecordKey::ConsumerGroupCurrentMemberAssignment(k) => k.encode(w),
            RecordKey::ConsumerGroupRegularExpression(k) => k.encode(w),
            RecordKey::Opaque { body, .. } => w.out.extend_from_slice(body),
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
        if !record_type.is_consumer_group() {
            let body = r.take("body", r.remaining())?;
            return Ok(RecordValue::Opaque { version, body: Cow::Borrowed(body) });
        }
        // KIP-848 values: v0 is the only layout; later versions add tagged fields only.
        if version < 0 {
            return Err(r.error("version", 0, ErrorKind::UnsupportedVersion { record: record_type.name(), version }));
        }
        let value = match record_type {
            RecordType::ConsumerGroupMetadata => {
                RecordValue::ConsumerGroupMetadata(ConsumerGroupMetadataValue::decode(version, r)?)
            }
            RecordType::ConsumerGroupPartitionMetadata => {
                RecordValue::ConsumerGroupPartitionMetadata(ConsumerGroupPartitionMetadataValue::decode(version, r)?)
            }
            RecordType::ConsumerGroupMemberMetadata => {
                RecordValue::ConsumerGroupMemberMetadata(ConsumerGroupMemberMetadataValue::decode(version, r)?)
            }
            RecordType::ConsumerGroupTargetAssignmentMetadata => RecordValue::ConsumerGroupTargetAssignmentMetadata(
                ConsumerGroupTargetAssignmentMetadataValue::decode(version, r)?,
            ),
            RecordType::ConsumerGroupTargetAssignmentMember => RecordValue::ConsumerGroupTargetAssignmentMember(
                ConsumerGroupTargetAssignmentMemberValue::decode(version, r)?,
            ),
            RecordType::ConsumerGroupCurrentMemberAssignment => RecordValue::ConsumerGroupCurrentMemberAssignment(
                ConsumerGroupCurrentMemberAssignmentValue::decode(version, r)?,
            ),
            _ => RecordValue::ConsumerGroupRegularExpression(ConsumerGroupRegularExpressionValue::decode(version, r)?),
        };
        if version == 0 {
            r.finish("end of value")?;
        }
        Ok(value)
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
            RecordValue::ConsumerGroupTargetAssignmentMetadata(v) => v.encode(w),
            RecordValue::ConsumerGroupTargetAssignmentMember(v) => v.encode(w),
            RecordValue::ConsumerGroupCurrentMemberAssignment(v) => v.encode(w),
            RecordValue::ConsumerGroupRegularExpression(v) => v.encode(w),
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
