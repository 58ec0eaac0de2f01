//! KIP-848 consumer-group records (key types 3–8 and 16): the new rebalance
//! protocol's group epoch, subscriptions, target and current assignments.
//!
//! All values are flexible from v0. Versions above 0 are read with the v0 layout
//! (KIP-915: newer versions only add tagged fields). Unknown tagged fields are
//! skipped; known ones absent from the bytes take the schema's default.

use std::borrow::Cow;

use crate::error::ErrorKind;
use crate::uuid::Uuid;
use crate::wire::{Reader, Result, Writer, tag_data};

/// Key of the group-level records (types 3, 4 and 6).
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct GroupIdKey<'a> {
    /// The group.
    pub group_id: Cow<'a, str>,
}

impl<'a> GroupIdKey<'a> {
    pub(crate) fn decode(r: &mut Reader<'a>) -> Result<Self> {
        Ok(GroupIdKey { group_id: r.string("group_id", false)? })
    }

    pub(crate) fn encode(&self, w: &mut Writer<'_>) {
        w.string(&self.group_id, false);
    }
}

/// Key of the member-level records (types 5, 7 and 8).
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct MemberKey<'a> {
    /// The group.
    pub group_id: Cow<'a, str>,
    /// The member.
    pub member_id: Cow<'a, str>,
}

impl<'a> MemberKey<'a> {
    pub(crate) fn decode(r: &mut Reader<'a>) -> Result<Self> {
        Ok(MemberKey { group_id: r.string("group_id", false)?, member_id: r.string("member_id", false)? })
    }

    pub(crate) fn encode(&self, w: &mut Writer<'_>) {
        w.string(&self.group_id, false);
        w.string(&self.member_id, false);
    }
}

/// Key of `ConsumerGroupRegularExpression` (type 16).
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct RegularExpressionKey<'a> {
    /// The group.
    pub group_id: Cow<'a, str>,
    /// The subscribed regular expression.
    pub regular_expression: Cow<'a, str>,
}

impl<'a> RegularExpressionKey<'a> {
    pub(crate) fn decode(r: &mut Reader<'a>) -> Result<Self> {
        Ok(RegularExpressionKey {
            group_id: r.string("group_id", false)?,
            regular_expression: r.string("regular_expression", false)?,
        })
    }

    pub(crate) fn encode(&self, w: &mut Writer<'_>) {
        w.string(&self.group_id, false);
        w.string(&self.regular_expression, false);
    }
}

/// Ends a flexible struct: reads its tagged fields, skipping all (none are known).
pub(crate) fn no_tags(r: &mut Reader<'_>) -> Result<()> {
    r.tagged_fields("tagged_fields", |_, _| Ok(false))
}

pub(crate) fn int64_tag(data: &mut Reader<'_>, field: &'static str, tag: u32) -> Result<i64> {
    data.fixed_tag(field, tag, 8, |d| d.i64(field))
}

/// `ConsumerGroupMetadataValue` (type 3): the group epoch.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct ConsumerGroupMetadataValue {
    /// The value's schema version.
    pub version: i16,
    /// The group epoch.
    pub epoch: i32,
    /// Hash of the subscribed topics' metadata (tag 0, Kafka 4.1+; default 0).
    pub metadata_hash: i64,
    /// When the group was created, in ms (tag 1, KIP-1282; default -1).
    pub creation_time_ms: i64,
}

impl ConsumerGroupMetadataValue {
    pub(crate) fn decode(version: i16, r: &mut Reader<'_>) -> Result<Self> {
        let mut v =
            ConsumerGroupMetadataValue { version, epoch: r.i32("epoch")?, metadata_hash: 0, creation_time_ms: -1 };
        r.tagged_fields("tagged_fields", |tag, d| match tag {
            0 => int64_tag(d, "metadata_hash", tag).map(|x| v.metadata_hash = x).map(|()| true),
            1 => int64_tag(d, "creation_time_ms", tag).map(|x| v.creation_time_ms = x).map(|()| true),
            _ => Ok(false),
        })?;
        Ok(v)
    }

    pub(crate) fn encode(&self, w: &mut Writer<'_>) {
        w.i32(self.epoch);
        let mut tags = Vec::new();
        if self.metadata_hash != 0 {
            tags.push((0, tag_data(|t| t.i64(self.metadata_hash))));
        }
        if self.creation_time_ms != -1 {
            tags.push((1, tag_data(|t| t.i64(self.creation_time_ms))));
        }
        w.tagged_fields(&tags);
    }
}

/// A partition and the racks of its replicas.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct PartitionMetadata<'a> {
    /// The partition.
    pub partition: i32,
    /// The racks its replicas are on.
    pub racks: Vec<Cow<'a, str>>,
}

/// A subscribed topic as the coordinator saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct TopicMetadata<'a> {
    /// The topic id.
    pub topic_id: Uuid,
    /// The topic name.
    pub topic_name: Cow<'a, str>,
    /// The number of partitions.
    pub num_partitions: i32,
    /// Deprecated after Kafka 4.0: partitions mapped to racks.
    pub partition_metadata: Vec<PartitionMetadata<'a>>,
}

/// `ConsumerGroupPartitionMetadataValue` (type 4): metadata of subscribed topics.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct ConsumerGroupPartitionMetadataValue<'a> {
    /// The value's schema version.
    pub version: i16,
    /// The subscribed topics.
    pub topics: Vec<TopicMetadata<'a>>,
}

impl<'a> ConsumerGroupPartitionMetadataValue<'a> {
    pub(crate) fn decode(version: i16, r: &mut Reader<'a>) -> Result<Self> {
        let topics = r.array_of("topics", true, 16 + 1 + 4 + 1 + 1, |r| {
            let topic = TopicMetadata {
                topic_id: r.uuid("topic_id")?,
                topic_name: r.string("topic_name", true)?,
                num_partitions: r.i32("num_partitions")?,
                partition_metadata: r.array_of("partition_metadata", true, 4 + 1 + 1, |r| {
                    let p = PartitionMetadata { partition: r.i32("partition")?, racks: r.string_array("racks", true)? };
                    no_tags(r)?;
                    Ok(p)
                })?,
            };
            no_tags(r)?;
            Ok(topic)
        })?;
        no_tags(r)?;
        Ok(ConsumerGroupPartitionMetadataValue { version, topics })
    }

    pub(crate) fn encode(&self, w: &mut Writer<'_>) {
        w.array_of(&self.topics, true, |w, t| {
            w.uuid(&t.topic_id);
            w.string(&t.topic_name, true);
            w.i32(t.num_partitions);
            w.array_of(&t.partition_metadata, true, |w, p| {
                w.i32(p.partition);
                w.string_array(&p.racks, true);
                w.tagged_fields(&[]);
            });
            w.tagged_fields(&[]);
        });
        w.tagged_fields(&[]);
    }
}

/// A protocol a classic-protocol member of a consumer group supports.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct ClassicProtocol<'a> {
    /// The protocol name.
    pub name: Cow<'a, str>,
    /// The protocol metadata.
    #[cfg_attr(feature = "serde", serde(serialize_with = "crate::hex::bytes"))]
    pub metadata: Cow<'a, [u8]>,
}

/// Metadata of a member that joined with the classic protocol.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct ClassicMemberMetadata<'a> {
    /// The session timeout in ms.
    pub session_timeout_ms: i32,
    /// The protocols the member supports.
    pub supported_protocols: Vec<ClassicProtocol<'a>>,
}

/// `ConsumerGroupMemberMetadataValue` (type 5): a member's subscription.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct ConsumerGroupMemberMetadataValue<'a> {
    /// The value's schema version.
    pub version: i16,
    /// The static membership id.
    pub instance_id: Option<Cow<'a, str>>,
    /// The member's rack.
    pub rack_id: Option<Cow<'a, str>>,
    /// The client id.
    pub client_id: Cow<'a, str>,
    /// The client's host.
    pub client_host: Cow<'a, str>,
    /// The subscribed topic names.
    pub subscribed_topic_names: Vec<Cow<'a, str>>,
    /// The subscribed topic regular expression.
    pub subscribed_topic_regex: Option<Cow<'a, str>>,
    /// The rebalance timeout in ms.
    pub rebalance_timeout_ms: i32,
    /// The server-side assignor, if any.
    pub server_assignor: Option<Cow<'a, str>>,
    /// Present when the member uses the classic protocol (tag 0).
    pub classic_member_metadata: Option<ClassicMemberMetadata<'a>>,
}

impl<'a> ClassicMemberMetadata<'a> {
    /// Reads the tagged field's data: a presence marker (an unsigned varint, 0
    /// for null, 1 for present), then the struct. Kafka writes the tag with a 0
    /// marker for every member of the consumer protocol: its generated writer
    /// compares the field with an empty struct, not with null (read from the
    /// `ConsumerGroupMemberMetadataValue` class of kafka-group-coordinator 4.4).
    fn decode(r: &mut Reader<'a>) -> Result<Option<Self>> {
        let start = r.position();
        match r.uvarint("classic_member_metadata")? {
            0 => return Ok(None),
            1 => {}
            other => {
                let marker = i64::from(other);
                return Err(r.error("classic_member_metadata", start, ErrorKind::InvalidPresence(marker)));
            }
        }
        let session_timeout_ms = r.i32("session_timeout_ms")?;
        let supported_protocols = r.array_of("supported_protocols", true, 3, |r| {
            let p = ClassicProtocol { name: r.string("name", true)?, metadata: r.bytes("metadata", true)? };
            no_tags(r)?;
            Ok(p)
        })?;
        no_tags(r)?;
        Ok(Some(ClassicMemberMetadata { session_timeout_ms, supported_protocols }))
    }

    fn encode(&self, w: &mut Writer<'_>) {
        w.uvarint(1);
        w.i32(self.session_timeout_ms);
        w.array_of(&self.supported_protocols, true, |w, p| {
            w.string(&p.name, true);
            w.bytes(&p.metadata, true);
            w.tagged_fields(&[]);
        });
        w.tagged_fields(&[]);
    }
}

impl<'a> ConsumerGroupMemberMetadataValue<'a> {
    pub(crate) fn decode(version: i16, r: &mut Reader<'a>) -> Result<Self> {
        let mut v = ConsumerGroupMemberMetadataValue {
            version,
            instance_id: r.nullable_string("instance_id", true)?,
            rack_id: r.nullable_string("rack_id", true)?,
            client_id: r.string("client_id", true)?,
            client_host: r.string("client_host", true)?,
            subscribed_topic_names: r.string_array("subscribed_topic_names", true)?,
            subscribed_topic_regex: r.nullable_string("subscribed_topic_regex", true)?,
            rebalance_timeout_ms: r.i32("rebalance_timeout_ms")?,
            server_assignor: r.nullable_string("server_assignor", true)?,
            classic_member_metadata: None,
        };
        r.tagged_fields("tagged_fields", |tag, d| match tag {
            0 => ClassicMemberMetadata::decode(d).map(|m| v.classic_member_metadata = m).map(|()| true),
            _ => Ok(false),
        })?;
        Ok(v)
    }

    pub(crate) fn encode(&self, w: &mut Writer<'_>) {
        w.nullable_string(self.instance_id.as_deref(), true);
        w.nullable_string(self.rack_id.as_deref(), true);
        w.string(&self.client_id, true);
        w.string(&self.client_host, true);
        w.string_array(&self.subscribed_topic_names, true);
        w.nullable_string(self.subscribed_topic_regex.as_deref(), true);
        w.i32(self.rebalance_timeout_ms);
        w.nullable_string(self.server_assignor.as_deref(), true);
        // As Kafka writes it: a null marker when the member has no classic metadata.
        let classic = match &self.classic_member_metadata {
            Some(m) => tag_data(|t| m.encode(t)),
            None => vec![0],
        };
        w.tagged_fields(&[(0, classic)]);
    }
}

/// `ConsumerGroupTargetAssignmentMetadataValue` (type 6): the target assignment's epoch.
pub type ConsumerGroupTargetAssignmentMetadataValue = AssignmentMetadataValue;

/// A target assignment's epoch: the layout of types 6, 12 (share groups) and 20
/// (streams groups).
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct AssignmentMetadataValue {
    /// The value's schema version.
    pub version: i16,
    /// The assignment epoch.
    pub assignment_epoch: i32,
    /// When the assignment was computed, in ms (tag 0, Kafka 4.3+; default 0).
    pub assignment_timestamp: i64,
}

impl AssignmentMetadataValue {
    pub(crate) fn decode(version: i16, r: &mut Reader<'_>) -> Result<Self> {
        let mut v =
            AssignmentMetadataValue { version, assignment_epoch: r.i32("assignment_epoch")?, assignment_timestamp: 0 };
        r.tagged_fields("tagged_fields", |tag, d| match tag {
            0 => int64_tag(d, "assignment_timestamp", tag).map(|x| v.assignment_timestamp = x).map(|()| true),
            _ => Ok(false),
        })?;
        Ok(v)
    }

    pub(crate) fn encode(&self, w: &mut Writer<'_>) {
        w.i32(self.assignment_epoch);
        if self.assignment_timestamp != 0 {
            w.tagged_fields(&[(0, tag_data(|t| t.i64(self.assignment_timestamp)))]);
        } else {
            w.tagged_fields(&[]);
        }
    }
}

/// A topic (by id) and some of its partitions.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct TopicIdPartitions {
    /// The topic id.
    pub topic_id: Uuid,
    /// The partitions.
    pub partitions: Vec<i32>,
    /// The epoch at which each partition was assigned (tag 0, KIP-1251; current
    /// assignments only).
    pub assignment_epochs: Option<Vec<i32>>,
}

impl TopicIdPartitions {
    fn decode(r: &mut Reader<'_>) -> Result<Self> {
        let mut tp = TopicIdPartitions {
            topic_id: r.uuid("topic_id")?,
            partitions: r.int32_array("partitions", true)?,
            assignment_epochs: None,
        };
        r.tagged_fields("tagged_fields", |tag, d| match tag {
            0 => d
                .nullable_array("assignment_epochs", true, 4, |d| d.i32("assignment_epochs"))
                .map(|e| tp.assignment_epochs = e)
                .map(|()| true),
            _ => Ok(false),
        })?;
        Ok(tp)
    }

    fn encode(&self, w: &mut Writer<'_>) {
        w.uuid(&self.topic_id);
        w.int32_array(&self.partitions, true);
        let tags: Vec<(u32, Vec<u8>)> =
            self.assignment_epochs.iter().map(|e| (0, tag_data(|t| t.int32_array(e, true)))).collect();
        w.tagged_fields(&tags);
    }

    pub(crate) fn decode_list(r: &mut Reader<'_>, field: &'static str) -> Result<Vec<Self>> {
        r.array_of(field, true, 16 + 1 + 1, Self::decode)
    }

    pub(crate) fn encode_list(list: &[Self], w: &mut Writer<'_>) {
        w.array_of(list, true, |w, tp| tp.encode(w));
    }
}

/// `ConsumerGroupTargetAssignmentMemberValue` (type 7): a member's target assignment.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct ConsumerGroupTargetAssignmentMemberValue {
    /// The value's schema version.
    pub version: i16,
    /// The assigned partitions.
    pub topic_partitions: Vec<TopicIdPartitions>,
}

impl ConsumerGroupTargetAssignmentMemberValue {
    pub(crate) fn decode(version: i16, r: &mut Reader<'_>) -> Result<Self> {
        let topic_partitions = TopicIdPartitions::decode_list(r, "topic_partitions")?;
        no_tags(r)?;
        Ok(ConsumerGroupTargetAssignmentMemberValue { version, topic_partitions })
    }

    pub(crate) fn encode(&self, w: &mut Writer<'_>) {
        TopicIdPartitions::encode_list(&self.topic_partitions, w);
        w.tagged_fields(&[]);
    }
}

/// `ConsumerGroupCurrentMemberAssignmentValue` (type 8): what a member owns now.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct ConsumerGroupCurrentMemberAssignmentValue {
    /// The value's schema version.
    pub version: i16,
    /// The member epoch.
    pub member_epoch: i32,
    /// The previous member epoch.
    pub previous_member_epoch: i32,
    /// The member state (Kafka's `MemberState`).
    pub state: i8,
    /// The partitions assigned to (or owned by) the member.
    pub assigned_partitions: Vec<TopicIdPartitions>,
    /// The partitions the member must revoke.
    pub partitions_pending_revocation: Vec<TopicIdPartitions>,
}

impl ConsumerGroupCurrentMemberAssignmentValue {
    pub(crate) fn decode(version: i16, r: &mut Reader<'_>) -> Result<Self> {
        let v = ConsumerGroupCurrentMemberAssignmentValue {
            version,
            member_epoch: r.i32("member_epoch")?,
            previous_member_epoch: r.i32("previous_member_epoch")?,
            state: r.i8("state")?,
            assigned_partitions: TopicIdPartitions::decode_list(r, "assigned_partitions")?,
            partitions_pending_revocation: TopicIdPartitions::decode_list(r, "partitions_pending_revocation")?,
        };
        no_tags(r)?;
        Ok(v)
    }

    pub(crate) fn encode(&self, w: &mut Writer<'_>) {
        w.i32(self.member_epoch);
        w.i32(self.previous_member_epoch);
        w.i8(self.state);
        TopicIdPartitions::encode_list(&self.assigned_partitions, w);
        TopicIdPartitions::encode_list(&self.partitions_pending_revocation, w);
        w.tagged_fields(&[]);
    }
}

/// `ConsumerGroupRegularExpressionValue` (type 16): topics a regex resolved to.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct ConsumerGroupRegularExpressionValue<'a> {
    /// The value's schema version.
    pub version: i16,
    /// The topics the regular expression matched.
    pub topics: Vec<Cow<'a, str>>,
    /// The schema's `Version` field: the metadata version the regex was resolved
    /// at (renamed because `version` is the record's value version).
    pub regex_version: i64,
    /// When the regex was resolved, in ms.
    pub timestamp: i64,
}

impl<'a> ConsumerGroupRegularExpressionValue<'a> {
    pub(crate) fn decode(version: i16, r: &mut Reader<'a>) -> Result<Self> {
        let v = ConsumerGroupRegularExpressionValue {
            version,
            topics: r.string_array("topics", true)?,
            regex_version: r.i64("regex_version")?,
            timestamp: r.i64("timestamp")?,
        };
        no_tags(r)?;
        Ok(v)
    }

    pub(crate) fn encode(&self, w: &mut Writer<'_>) {
        w.string_array(&self.topics, true);
        w.i64(self.regex_version);
        w.i64(self.timestamp);
        w.tagged_fields(&[]);
    }
}
