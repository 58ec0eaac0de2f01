//! Share-group records (key types 10–15, KIP-932): members, the group epoch,
//! target and current assignments, and which share-partitions have state.
//!
//! The layouts are Kafka 4.2+'s (share groups left early access in 4.2): all
//! values are flexible from v0; unknown tagged fields are skipped. The keys are
//! the consumer-group ones ([`GroupIdKey`](crate::GroupIdKey) for 11, 12 and 15,
//! [`MemberKey`](crate::MemberKey) for 10, 13 and 14).

use std::borrow::Cow;

use crate::consumer_group::{TopicIdPartitions, no_tags};
use crate::uuid::Uuid;
use crate::wire::{Reader, Result, Writer};

/// `ShareGroupMemberMetadataValue` (type 10): a member and its subscription.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct ShareGroupMemberMetadataValue<'a> {
    /// The value's schema version.
    pub version: i16,
    /// The member's rack.
    pub rack_id: Option<Cow<'a, str>>,
    /// The client id.
    pub client_id: Cow<'a, str>,
    /// The client's host.
    pub client_host: Cow<'a, str>,
    /// The subscribed topic names.
    pub subscribed_topic_names: Vec<Cow<'a, str>>,
}

impl<'a> ShareGroupMemberMetadataValue<'a> {
    pub(crate) fn decode(version: i16, r: &mut Reader<'a>) -> Result<Self> {
        let v = ShareGroupMemberMetadataValue {
            version,
            rack_id: r.nullable_string("rack_id", true)?,
            client_id: r.string("client_id", true)?,
            client_host: r.string("client_host", true)?,
            subscribed_topic_names: r.string_array("subscribed_topic_names", true)?,
        };
        no_tags(r)?;
        Ok(v)
    }

    pub(crate) fn encode(&self, w: &mut Writer<'_>) {
        w.nullable_string(self.rack_id.as_deref(), true);
        w.string(&self.client_id, true);
        w.string(&self.client_host, true);
        w.string_array(&self.subscribed_topic_names, true);
        w.tagged_fields(&[]);
    }
}

/// `ShareGroupMetadataValue` (type 11): the group epoch.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct ShareGroupMetadataValue {
    /// The value's schema version.
    pub version: i16,
    /// The group epoch.
    pub epoch: i32,
    /// Hash of the subscribed topics' metadata.
    pub metadata_hash: i64,
}

impl ShareGroupMetadataValue {
    pub(crate) fn decode(version: i16, r: &mut Reader<'_>) -> Result<Self> {
        let v = ShareGroupMetadataValue { version, epoch: r.i32("epoch")?, metadata_hash: r.i64("metadata_hash")? };
        no_tags(r)?;
        Ok(v)
    }

    pub(crate) fn encode(&self, w: &mut Writer<'_>) {
        w.i32(self.epoch);
        w.i64(self.metadata_hash);
        w.tagged_fields(&[]);
    }
}

/// `ShareGroupTargetAssignmentMemberValue` (type 13): a member's target
/// assignment, in the layout of the consumer groups' type 7.
pub type ShareGroupTargetAssignmentMemberValue = crate::consumer_group::ConsumerGroupTargetAssignmentMemberValue;

/// `ShareGroupCurrentMemberAssignmentValue` (type 14): what a member owns now.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct ShareGroupCurrentMemberAssignmentValue {
    /// The value's schema version.
    pub version: i16,
    /// The member epoch.
    pub member_epoch: i32,
    /// The previous member epoch.
    pub previous_member_epoch: i32,
    /// The member state (Kafka's `MemberState`).
    pub state: i8,
    /// The partitions assigned to the member.
    pub assigned_partitions: Vec<TopicIdPartitions>,
}

impl ShareGroupCurrentMemberAssignmentValue {
    pub(crate) fn decode(version: i16, r: &mut Reader<'_>) -> Result<Self> {
        let v = ShareGroupCurrentMemberAssignmentValue {
            version,
            member_epoch: r.i32("member_epoch")?,
            previous_member_epoch: r.i32("previous_member_epoch")?,
            state: r.i8("state")?,
            assigned_partitions: TopicIdPartitions::decode_list(r, "assigned_partitions")?,
        };
        no_tags(r)?;
        Ok(v)
    }

    pub(crate) fn encode(&self, w: &mut Writer<'_>) {
        w.i32(self.member_epoch);
        w.i32(self.previous_member_epoch);
        w.i8(self.state);
        TopicIdPartitions::encode_list(&self.assigned_partitions, w);
        w.tagged_fields(&[]);
    }
}

/// A topic, by id and name, and some of its partitions.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct NamedTopicPartitions<'a> {
    /// The topic id.
    pub topic_id: Uuid,
    /// The topic name.
    pub topic_name: Cow<'a, str>,
    /// The partitions (empty for a topic being deleted).
    pub partitions: Vec<i32>,
}

impl<'a> NamedTopicPartitions<'a> {
    fn decode_list(r: &mut Reader<'a>, field: &'static str, with_partitions: bool) -> Result<Vec<Self>> {
        r.array_of(field, true, 16 + 1 + 1, |r| {
            let t = NamedTopicPartitions {
                topic_id: r.uuid("topic_id")?,
                topic_name: r.string("topic_name", true)?,
                partitions: if with_partitions { r.int32_array("partitions", true)? } else { Vec::new() },
            };
            no_tags(r)?;
            Ok(t)
        })
    }

    fn encode_list(list: &[Self], w: &mut Writer<'_>, with_partitions: bool) {
        w.array_of(list, true, |w, t| {
            w.uuid(&t.topic_id);
            w.string(&t.topic_name, true);
            if with_partitions {
                w.int32_array(&t.partitions, true);
            }
            w.tagged_fields(&[]);
        });
    }
}

/// `ShareGroupStatePartitionMetadataValue` (type 15): the share-partitions whose
/// state in `__share_group_state` is being initialized, is initialized, or is
/// being deleted.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct ShareGroupStatePartitionMetadataValue<'a> {
    /// The value's schema version.
    pub version: i16,
    /// Topic-partitions whose state is being initialized.
    pub initializing_topics: Vec<NamedTopicPartitions<'a>>,
    /// Topic-partitions with initialized state.
    pub initialized_topics: Vec<NamedTopicPartitions<'a>>,
    /// Topics whose state is being deleted (no partitions in this list).
    pub deleting_topics: Vec<NamedTopicPartitions<'a>>,
}

impl<'a> ShareGroupStatePartitionMetadataValue<'a> {
    pub(crate) fn decode(version: i16, r: &mut Reader<'a>) -> Result<Self> {
        let v = ShareGroupStatePartitionMetadataValue {
            version,
            initializing_topics: NamedTopicPartitions::decode_list(r, "initializing_topics", true)?,
            initialized_topics: NamedTopicPartitions::decode_list(r, "initialized_topics", true)?,
            deleting_topics: NamedTopicPartitions::decode_list(r, "deleting_topics", false)?,
        };
        no_tags(r)?;
        Ok(v)
    }

    pub(crate) fn encode(&self, w: &mut Writer<'_>) {
        NamedTopicPartitions::encode_list(&self.initializing_topics, w, true);
        NamedTopicPartitions::encode_list(&self.initialized_topics, w, true);
        NamedTopicPartitions::encode_list(&self.deleting_topics, w, false);
        w.tagged_fields(&[]);
    }
}
