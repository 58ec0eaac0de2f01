//! The consumer protocol (`ConsumerProtocolSubscription` and
//! `ConsumerProtocolAssignment`, versions 0–3): the bytes a classic consumer group's
//! members exchange, stored inside group-metadata records when the protocol type
//! is `consumer`.
//!
//! As Kafka's own client does, a version newer than 3 is read with the v3 layout
//! and any bytes after the known fields are ignored: the protocol promises that
//! new versions only append fields.

use std::borrow::Cow;

use crate::DecodeError;
use crate::error::{ErrorKind, Part};
use crate::wire::{Reader, Result, Writer};

/// A topic and some of its partitions.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct TopicPartitions<'a> {
    /// The topic.
    pub topic: Cow<'a, str>,
    /// The partitions of that topic.
    pub partitions: Vec<i32>,
}

impl<'a> TopicPartitions<'a> {
    fn decode(r: &mut Reader<'a>) -> Result<Self> {
        Ok(TopicPartitions { topic: r.string("topic", false)?, partitions: r.int32_array("partitions", false)? })
    }

    fn encode(&self, w: &mut Writer<'_>) {
        w.string(&self.topic, false);
        w.int32_array(&self.partitions, false);
    }
}

/// What a member subscribes to (`ConsumerProtocolSubscription`).
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct Subscription<'a> {
    /// The protocol version the member wrote.
    pub version: i16,
    /// The subscribed topics.
    pub topics: Vec<Cow<'a, str>>,
    /// Assignor-specific bytes.
    #[cfg_attr(feature = "serde", serde(serialize_with = "crate::hex::nullable"))]
    pub user_data: Option<Cow<'a, [u8]>>,
    /// Partitions the member owned before the rebalance (v1+).
    pub owned_partitions: Option<Vec<TopicPartitions<'a>>>,
    /// The generation the owned partitions belong to (v2+; -1 when unknown).
    pub generation_id: Option<i32>,
    /// The member's rack (v3+).
    pub rack_id: Option<Cow<'a, str>>,
}

/// What a member was given (`ConsumerProtocolAssignment`).
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct Assignment<'a> {
    /// The protocol version the leader wrote.
    pub version: i16,
    /// The partitions assigned to the member.
    pub assigned_partitions: Vec<TopicPartitions<'a>>,
    /// Assignor-specific bytes.
    #[cfg_attr(feature = "serde", serde(serialize_with = "crate::hex::nullable"))]
    pub user_data: Option<Cow<'a, [u8]>>,
}

fn version(r: &mut Reader<'_>, record: &'static str) -> Result<i16> {
    let version = r.i16("version")?;
    if version < 0 {
        return Err(r.error("version", 0, ErrorKind::UnsupportedVersion { record, version }));
    }
    Ok(version)
}

impl<'a> Subscription<'a> {
    /// A subscription to `topics` in `version`'s layout, with that version's
    /// defaults: no user data, no owned partitions, generation -1, no rack.
    pub fn to_topics(version: i16, topics: Vec<Cow<'a, str>>) -> Self {
        Subscription {
            version,
            topics,
            user_data: None,
            owned_partitions: (version >= 1).then(Vec::new),
            generation_id: (version >= 2).then_some(-1),
            rack_id: None,
        }
    }

    /// The encoded subscription.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::new();
        self.encode(&mut out);
        out
    }
    /// Decodes a subscription from a member's protocol metadata.
    pub fn decode(bytes: &'a [u8]) -> std::result::Result<Self, DecodeError> {
        let r = &mut Reader::new(bytes);
        Self::decode_from(r).map_err(|e| e.in_part(Part::Subscription))
    }

    fn decode_from(r: &mut Reader<'a>) -> Result<Self> {
        let version = version(r, "ConsumerProtocolSubscription")?;
        let subscription = Subscription {
            version,
            topics: r.string_array("topics", false)?,
            user_data: r.nullable_bytes("user_data", false)?,
            owned_partitions: if version >= 1 {
                Some(r.array_of("owned_partitions", false, 6, TopicPartitions::decode)?)
            } else {
                None
            },
            generation_id: if version >= 2 { Some(r.i32("generation_id")?) } else { None },
            rack_id: if version >= 3 { r.nullable_string("rack_id", false)? } else { None },
        };
        if version <= 3 {
            r.finish("end of subscription")?;
        }
        Ok(subscription)
    }

    /// Appends the encoded subscription to `out`.
    pub fn encode(&self, out: &mut Vec<u8>) {
        let w = &mut Writer::new(out);
        w.i16(self.version);
        w.string_array(&self.topics, false);
        w.nullable_bytes(self.user_data.as_deref(), false);
        if self.version >= 1 {
            w.array_of(self.owned_partitions.as_deref().unwrap_or_default(), false, |w, tp| tp.encode(w));
        }
        if self.version >= 2 {
            w.i32(self.generation_id.unwrap_or(-1));
        }
        if self.version >= 3 {
            w.nullable_string(self.rack_id.as_deref(), false);
        }
    }
}

impl<'a> Assignment<'a> {
    /// The encoded assignment.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::new();
        self.encode(&mut out);
        out
    }
    /// Decodes an assignment from a member's assignment bytes.
    pub fn decode(bytes: &'a [u8]) -> std::result::Result<Self, DecodeError> {
        let r = &mut Reader::new(bytes);
        Self::decode_from(r).map_err(|e| e.in_part(Part::Assignment))
    }

    fn decode_from(r: &mut Reader<'a>) -> Result<Self> {
        let version = version(r, "ConsumerProtocolAssignment")?;
        let assignment = Assignment {
            version,
            assigned_partitions: r.array_of("assigned_partitions", false, 6, TopicPartitions::decode)?,
            user_data: r.nullable_bytes("user_data", false)?,
        };
        if version <= 3 {
            r.finish("end of assignment")?;
        }
        Ok(assignment)
    }

    /// Appends the encoded assignment to `out`.
    pub fn encode(&self, out: &mut Vec<u8>) {
        let w = &mut Writer::new(out);
        w.i16(self.version);
        w.array_of(&self.assigned_partitions, false, |w, tp| tp.encode(w));
        w.nullable_bytes(self.user_data.as_deref(), false);
    }
}

/// The longest topic name Kafka accepts.
pub const MAX_TOPIC_NAME: usize = 249;

/// Whether Kafka would accept `name` as a topic's: 1 to [`MAX_TOPIC_NAME`]
/// ASCII letters, digits, `.`, `_` and `-`, and neither `.` nor `..`. The
/// consumer protocol's bytes come from clients, unchecked by the broker: a
/// name that is not one names no topic.
pub fn is_legal_topic_name(name: &str) -> bool {
    (1..=MAX_TOPIC_NAME).contains(&name.len())
        && name != "."
        && name != ".."
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

#[cfg(test)]
mod topic_name_tests {
    use super::*;

    #[test]
    fn only_names_kafka_accepts_are_topic_names() {
        for ok in ["t", "orders.v1", "__consumer_offsets", "a-b_c", &"x".repeat(MAX_TOPIC_NAME)] {
            assert!(is_legal_topic_name(ok), "{ok}");
        }
        for bad in ["", ".", "..", "a b", "t\u{0}", "caf\u{e9}", "a/b", &"x".repeat(MAX_TOPIC_NAME + 1)] {
            assert!(!is_legal_topic_name(bad), "{bad:?}");
        }
    }
}
