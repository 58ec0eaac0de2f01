//! Classic group metadata (key type 2, `GroupMetadataValue` v0–v4): the group's
//! protocol, generation, leader and members.
//!
//! Members' subscription and assignment bytes are kept raw and decoded on demand
//! ([`MemberMetadata::subscription`], [`MemberMetadata::assignment`]): brokers do
//! not validate them, so one client's odd bytes must not cost the whole record.

use std::borrow::Cow;

use crate::consumer_protocol::{Assignment, Subscription};
use crate::error::{DecodeError, ErrorKind};
use crate::wire::{Reader, Result, Writer};

/// `GroupMetadataKey`: which group the metadata belongs to.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct GroupMetadataKey<'a> {
    /// The group.
    pub group: Cow<'a, str>,
}

impl<'a> GroupMetadataKey<'a> {
    pub(crate) fn decode(r: &mut Reader<'a>) -> Result<Self> {
        Ok(GroupMetadataKey { group: r.string("group", false)? })
    }

    pub(crate) fn encode(&self, w: &mut Writer<'_>) {
        w.string(&self.group, false);
    }
}

/// `GroupMetadataValue` v0–v4. Fields a version does not have are `None`;
/// versions above 4 are read with the v4 layout (KIP-915).
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct GroupMetadataValue<'a> {
    /// The value's schema version.
    pub version: i16,
    /// The protocol type, `consumer` for consumer groups, `connect` for Connect, ….
    pub protocol_type: Cow<'a, str>,
    /// The generation of the group.
    pub generation: i32,
    /// The chosen assignment protocol (e.g. `range`), null when the group is empty.
    pub protocol: Option<Cow<'a, str>>,
    /// The leader's member id, null when the group is empty.
    pub leader: Option<Cow<'a, str>>,
    /// When the group last changed state, in ms since the epoch (v2+).
    pub current_state_timestamp: Option<i64>,
    /// The members of the group.
    pub members: Vec<MemberMetadata<'a>>,
}

/// One member of a classic group.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct MemberMetadata<'a> {
    /// The member id the coordinator gave the member.
    pub member_id: Cow<'a, str>,
    /// The static membership id (v3+).
    pub group_instance_id: Option<Cow<'a, str>>,
    /// The client id.
    pub client_id: Cow<'a, str>,
    /// The client's host, as the broker saw it.
    pub client_host: Cow<'a, str>,
    /// The rebalance timeout in ms (v1+).
    pub rebalance_timeout: Option<i32>,
    /// The session timeout in ms.
    pub session_timeout: i32,
    /// The member's protocol metadata for the chosen protocol.
    #[cfg_attr(feature = "serde", serde(serialize_with = "crate::hex::bytes"))]
    pub subscription: Cow<'a, [u8]>,
    /// The assignment the leader gave the member.
    #[cfg_attr(feature = "serde", serde(serialize_with = "crate::hex::bytes"))]
    pub assignment: Cow<'a, [u8]>,
}

impl<'a> MemberMetadata<'a> {
    /// A member of a consumer group (protocol type `consumer`), subscribed to
    /// `topics` (subscription v1) and assigned `assigned` (assignment v1; empty
    /// bytes when nothing is assigned, as Kafka stores a member mid-rebalance),
    /// with the defaults of a Java consumer: no instance id, host `/127.0.0.1`,
    /// rebalance timeout 300 s, session timeout 45 s. Set other fields with
    /// struct update.
    pub fn consumer(
        member_id: impl Into<Cow<'a, str>>,
        client_id: impl Into<Cow<'a, str>>,
        topics: Vec<Cow<'a, str>>,
        assigned: Vec<crate::consumer_protocol::TopicPartitions<'a>>,
    ) -> Self {
        let assignment = if assigned.is_empty() {
            Vec::new()
        } else {
            Assignment { version: 1, assigned_partitions: assigned, user_data: None }.to_bytes()
        };
        MemberMetadata {
            member_id: member_id.into(),
            group_instance_id: None,
            client_id: client_id.into(),
            client_host: Cow::Borrowed("/127.0.0.1"),
            rebalance_timeout: Some(300_000),
            session_timeout: 45_000,
            subscription: Cow::Owned(Subscription::to_topics(1, topics).to_bytes()),
            assignment: Cow::Owned(assignment),
        }
    }

    fn decode(version: i16, r: &mut Reader<'a>) -> Result<Self> {
        let flexible = version >= 4;
        let member = MemberMetadata {
            member_id: r.string("member_id", flexible)?,
            group_instance_id: if version >= 3 { r.nullable_string("group_instance_id", flexible)? } else { None },
            client_id: r.string("client_id", flexible)?,
            client_host: r.string("client_host", flexible)?,
            rebalance_timeout: if version >= 1 { Some(r.i32("rebalance_timeout")?) } else { None },
            session_timeout: r.i32("session_timeout")?,
            subscription: r.bytes("subscription", flexible)?,
            assignment: r.bytes("assignment", flexible)?,
        };
        if flexible {
            r.tagged_fields("tagged_fields", |_, _| Ok(false))?;
        }
        Ok(member)
    }

    fn encode(&self, version: i16, w: &mut Writer<'_>) {
        let flexible = version >= 4;
        w.string(&self.member_id, flexible);
        if version >= 3 {
            w.nullable_string(self.group_instance_id.as_deref(), flexible);
        }
        w.string(&self.client_id, flexible);
        w.string(&self.client_host, flexible);
        if version >= 1 {
            w.i32(self.rebalance_timeout.unwrap_or(-1));
        }
        w.i32(self.session_timeout);
        w.bytes(&self.subscription, flexible);
        w.bytes(&self.assignment, flexible);
        if flexible {
            w.tagged_fields(&[]);
        }
    }

    /// Decodes the subscription as the consumer protocol. Meaningful when the
    /// group's protocol type is `consumer`.
    pub fn consumer_subscription(&self) -> std::result::Result<Subscription<'_>, DecodeError> {
        Subscription::decode(&self.subscription)
    }

    /// Decodes the assignment as the consumer protocol; `None` when the member has
    /// no assignment yet (empty bytes, as during a rebalance).
    pub fn consumer_assignment(&self) -> std::result::Result<Option<Assignment<'_>>, DecodeError> {
        if self.assignment.is_empty() {
            return Ok(None);
        }
        Assignment::decode(&self.assignment).map(Some)
    }
}

/// Smallest encoding of a member (three empty strings, timeouts, two empty byte
/// arrays) in the classic layout, for bounding the member count.
const MIN_MEMBER_SIZE: usize = 2 + 2 + 2 + 4 + 4 + 4;

impl<'a> GroupMetadataValue<'a> {
    /// The highest version whose layout this codec knows.
    pub const MAX_KNOWN_VERSION: i16 = 4;

    /// A consumer group's metadata in `version`'s layout: protocol type
    /// `consumer`, protocol `range`, the first member as leader (none when there
    /// are no members), state timestamp -1 (v2+, Kafka's default). Set other
    /// fields with struct update.
    pub fn consumer(version: i16, generation: i32, members: Vec<MemberMetadata<'a>>) -> Self {
        let leader = members.first().map(|m| m.member_id.clone());
        GroupMetadataValue {
            version,
            protocol_type: Cow::Borrowed("consumer"),
            generation,
            protocol: leader.as_ref().map(|_| Cow::Borrowed("range")),
            leader,
            current_state_timestamp: (version >= 2).then_some(-1),
            members,
        }
    }

    pub(crate) fn decode(version: i16, r: &mut Reader<'a>) -> Result<Self> {
        if version < 0 {
            return Err(r.error("version", 0, ErrorKind::UnsupportedVersion { record: "GroupMetadataValue", version }));
        }
        let flexible = version >= 4;
        let min_member = if flexible { 3 + 4 + 2 + 1 } else { MIN_MEMBER_SIZE };
        let value = GroupMetadataValue {
            version,
            protocol_type: r.string("protocol_type", flexible)?,
            generation: r.i32("generation")?,
            protocol: r.nullable_string("protocol", flexible)?,
            leader: r.nullable_string("leader", flexible)?,
            current_state_timestamp: if version >= 2 { Some(r.i64("current_state_timestamp")?) } else { None },
            members: r.array_of("members", flexible, min_member, |r| MemberMetadata::decode(version, r))?,
        };
        if flexible {
            r.tagged_fields("tagged_fields", |_, _| Ok(false))?;
        }
        if version <= Self::MAX_KNOWN_VERSION {
            r.finish("end of value")?;
        }
        Ok(value)
    }

    pub(crate) fn encode(&self, w: &mut Writer<'_>) {
        let version = self.version;
        let flexible = version >= 4;
        w.string(&self.protocol_type, flexible);
        w.i32(self.generation);
        w.nullable_string(self.protocol.as_deref(), flexible);
        w.nullable_string(self.leader.as_deref(), flexible);
        if version >= 2 {
            w.i64(self.current_state_timestamp.unwrap_or(-1));
        }
        w.array_of(&self.members, flexible, |w, m| m.encode(version, w));
        if flexible {
            w.tagged_fields(&[]);
        }
    }

    /// True when the group speaks the consumer protocol, so members' bytes can be
    /// decoded with [`MemberMetadata::consumer_subscription`].
    pub fn is_consumer_protocol(&self) -> bool {
        self.protocol_type == "consumer"
    }
}
