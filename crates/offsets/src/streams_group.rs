//! Streams-group records (key types 17 and 19–23, KIP-1071): the group epoch,
//! members with their process and endpoint, target and current task
//! assignments (active, standby and warm-up tasks), and the topology.
//!
//! The layouts are Kafka 4.4's; all values are flexible from v0 and unknown
//! tagged fields are skipped. Type 24 has no schema in Kafka 4.4 and stays
//! [`RecordKey::Opaque`](crate::RecordKey::Opaque). The keys are the
//! consumer-group ones ([`GroupIdKey`](crate::GroupIdKey) for 17, 20 and 23,
//! [`MemberKey`](crate::MemberKey) for 19, 21 and 22).

use std::borrow::Cow;

use crate::consumer_group::no_tags;
use crate::error::ErrorKind;
use crate::wire::{Reader, Result, Writer, tag_data};

/// A key and a value (client tags, assignment and topic configurations).
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct KeyValue<'a> {
    /// The key.
    pub key: Cow<'a, str>,
    /// The value.
    pub value: Cow<'a, str>,
}

impl<'a> KeyValue<'a> {
    fn decode(r: &mut Reader<'a>) -> Result<Self> {
        let kv = KeyValue { key: r.string("key", true)?, value: r.string("value", true)? };
        no_tags(r)?;
        Ok(kv)
    }

    fn decode_list(r: &mut Reader<'a>, field: &'static str) -> Result<Vec<Self>> {
        r.array_of(field, true, 3, KeyValue::decode)
    }

    fn encode_list(list: &[Self], w: &mut Writer<'_>) {
        w.array_of(list, true, |w, kv| {
            w.string(&kv.key, true);
            w.string(&kv.value, true);
            w.tagged_fields(&[]);
        });
    }
}

/// `StreamsGroupMetadataValue` (type 17): the group epoch.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct StreamsGroupMetadataValue<'a> {
    /// The value's schema version.
    pub version: i16,
    /// The group epoch.
    pub epoch: i32,
    /// Hash of the group's topics' metadata.
    pub metadata_hash: i64,
    /// The topology epoch whose topics were validated (tag 0; default -1).
    pub validated_topology_epoch: i32,
    /// The assignor's last configuration (tag 1; default none).
    pub last_assignment_configs: Option<Vec<KeyValue<'a>>>,
}

impl<'a> StreamsGroupMetadataValue<'a> {
    pub(crate) fn decode(version: i16, r: &mut Reader<'a>) -> Result<Self> {
        let mut v = StreamsGroupMetadataValue {
            version,
            epoch: r.i32("epoch")?,
            metadata_hash: r.i64("metadata_hash")?,
            validated_topology_epoch: -1,
            last_assignment_configs: None,
        };
        r.tagged_fields("tagged_fields", |tag, d| match tag {
            0 => d
                .fixed_tag("validated_topology_epoch", tag, 4, |d| d.i32("validated_topology_epoch"))
                .map(|x| v.validated_topology_epoch = x)
                .map(|()| true),
            1 => d
                .nullable_array("last_assignment_configs", true, 3, KeyValue::decode)
                .map(|c| v.last_assignment_configs = c)
                .map(|()| true),
            _ => Ok(false),
        })?;
        Ok(v)
    }

    pub(crate) fn encode(&self, w: &mut Writer<'_>) {
        w.i32(self.epoch);
        w.i64(self.metadata_hash);
        let mut tags = Vec::new();
        if self.validated_topology_epoch != -1 {
            tags.push((0, tag_data(|t| t.i32(self.validated_topology_epoch))));
        }
        if let Some(configs) = &self.last_assignment_configs {
            tags.push((1, tag_data(|t| KeyValue::encode_list(configs, t))));
        }
        w.tagged_fields(&tags);
    }
}

/// Where a Kafka Streams instance answers interactive queries.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct Endpoint<'a> {
    /// The host.
    pub host: Cow<'a, str>,
    /// The port.
    pub port: u16,
}

impl<'a> Endpoint<'a> {
    /// A nullable struct: an int8 marker (-1 null, 1 present), then the struct.
    fn decode(r: &mut Reader<'a>) -> Result<Option<Self>> {
        let start = r.position();
        match r.i8("user_endpoint")? {
            -1 => return Ok(None),
            1 => {}
            other => return Err(r.error("user_endpoint", start, ErrorKind::InvalidPresence(other.into()))),
        }
        let host = r.string("host", true)?;
        let port = r.i16("port")? as u16;
        no_tags(r)?;
        Ok(Some(Endpoint { host, port }))
    }

    fn encode(endpoint: Option<&Self>, w: &mut Writer<'_>) {
        match endpoint {
            None => w.i8(-1),
            Some(e) => {
                w.i8(1);
                w.string(&e.host, true);
                w.i16(e.port as i16);
                w.tagged_fields(&[]);
            }
        }
    }
}

/// `StreamsGroupMemberMetadataValue` (type 19): a member of a streams group.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct StreamsGroupMemberMetadataValue<'a> {
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
    /// The rebalance timeout in ms.
    pub rebalance_timeout_ms: i32,
    /// The epoch of the topology the member runs.
    pub topology_epoch: i32,
    /// The Streams instance (one process may run several members).
    pub process_id: Cow<'a, str>,
    /// The interactive-query endpoint, if any.
    pub user_endpoint: Option<Endpoint<'a>>,
    /// Tags for rack-aware assignment.
    pub client_tags: Vec<KeyValue<'a>>,
}

impl<'a> StreamsGroupMemberMetadataValue<'a> {
    pub(crate) fn decode(version: i16, r: &mut Reader<'a>) -> Result<Self> {
        let v = StreamsGroupMemberMetadataValue {
            version,
            instance_id: r.nullable_string("instance_id", true)?,
            rack_id: r.nullable_string("rack_id", true)?,
            client_id: r.string("client_id", true)?,
            client_host: r.string("client_host", true)?,
            rebalance_timeout_ms: r.i32("rebalance_timeout_ms")?,
            topology_epoch: r.i32("topology_epoch")?,
            process_id: r.string("process_id", true)?,
            user_endpoint: Endpoint::decode(r)?,
            client_tags: KeyValue::decode_list(r, "client_tags")?,
        };
        no_tags(r)?;
        Ok(v)
    }

    pub(crate) fn encode(&self, w: &mut Writer<'_>) {
        w.nullable_string(self.instance_id.as_deref(), true);
        w.nullable_string(self.rack_id.as_deref(), true);
        w.string(&self.client_id, true);
        w.string(&self.client_host, true);
        w.i32(self.rebalance_timeout_ms);
        w.i32(self.topology_epoch);
        w.string(&self.process_id, true);
        Endpoint::encode(self.user_endpoint.as_ref(), w);
        KeyValue::encode_list(&self.client_tags, w);
        w.tagged_fields(&[]);
    }
}

/// A subtopology's tasks: one task per listed partition of its input topics.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct TaskIds<'a> {
    /// The subtopology.
    pub subtopology_id: Cow<'a, str>,
    /// The partitions of its input topics.
    pub partitions: Vec<i32>,
    /// The epoch at which each partition was assigned (tag 0; active tasks of
    /// current assignments only).
    pub assignment_epochs: Option<Vec<i32>>,
}

impl<'a> TaskIds<'a> {
    fn decode_list(r: &mut Reader<'a>, field: &'static str) -> Result<Vec<Self>> {
        r.array_of(field, true, 3, |r| {
            let mut t = TaskIds {
                subtopology_id: r.string("subtopology_id", true)?,
                partitions: r.int32_array("partitions", true)?,
                assignment_epochs: None,
            };
            r.tagged_fields("tagged_fields", |tag, d| match tag {
                0 => d
                    .nullable_array("assignment_epochs", true, 4, |d| d.i32("assignment_epochs"))
                    .map(|e| t.assignment_epochs = e)
                    .map(|()| true),
                _ => Ok(false),
            })?;
            Ok(t)
        })
    }

    fn encode_list(list: &[Self], w: &mut Writer<'_>) {
        w.array_of(list, true, |w, t| {
            w.string(&t.subtopology_id, true);
            w.int32_array(&t.partitions, true);
            let tags: Vec<(u32, Vec<u8>)> =
                t.assignment_epochs.iter().map(|e| (0, tag_data(|d| d.int32_array(e, true)))).collect();
            w.tagged_fields(&tags);
        });
    }
}

/// Active, standby and warm-up tasks.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct Tasks<'a> {
    /// Tasks the member processes.
    pub active: Vec<TaskIds<'a>>,
    /// Tasks whose state the member keeps as a standby.
    pub standby: Vec<TaskIds<'a>>,
    /// Tasks whose state the member is warming up before taking them over.
    pub warmup: Vec<TaskIds<'a>>,
}

impl<'a> Tasks<'a> {
    fn decode(r: &mut Reader<'a>, names: [&'static str; 3]) -> Result<Self> {
        Ok(Tasks {
            active: TaskIds::decode_list(r, names[0])?,
            standby: TaskIds::decode_list(r, names[1])?,
            warmup: TaskIds::decode_list(r, names[2])?,
        })
    }

    fn encode(&self, w: &mut Writer<'_>) {
        TaskIds::encode_list(&self.active, w);
        TaskIds::encode_list(&self.standby, w);
        TaskIds::encode_list(&self.warmup, w);
    }
}

/// `StreamsGroupTargetAssignmentMemberValue` (type 21): a member's target tasks.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct StreamsGroupTargetAssignmentMemberValue<'a> {
    /// The value's schema version.
    pub version: i16,
    /// The target tasks.
    pub tasks: Tasks<'a>,
}

impl<'a> StreamsGroupTargetAssignmentMemberValue<'a> {
    pub(crate) fn decode(version: i16, r: &mut Reader<'a>) -> Result<Self> {
        let tasks = Tasks::decode(r, ["active_tasks", "standby_tasks", "warmup_tasks"])?;
        no_tags(r)?;
        Ok(StreamsGroupTargetAssignmentMemberValue { version, tasks })
    }

    pub(crate) fn encode(&self, w: &mut Writer<'_>) {
        self.tasks.encode(w);
        w.tagged_fields(&[]);
    }
}

/// `StreamsGroupCurrentMemberAssignmentValue` (type 22): a member's tasks now.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct StreamsGroupCurrentMemberAssignmentValue<'a> {
    /// The value's schema version.
    pub version: i16,
    /// The member epoch.
    pub member_epoch: i32,
    /// The previous member epoch.
    pub previous_member_epoch: i32,
    /// The member state (Kafka's `StreamsGroupMember.MemberState`).
    pub state: i8,
    /// The tasks the member has.
    pub tasks: Tasks<'a>,
    /// The tasks the member must give up.
    pub tasks_pending_revocation: Tasks<'a>,
}

impl<'a> StreamsGroupCurrentMemberAssignmentValue<'a> {
    pub(crate) fn decode(version: i16, r: &mut Reader<'a>) -> Result<Self> {
        let v = StreamsGroupCurrentMemberAssignmentValue {
            version,
            member_epoch: r.i32("member_epoch")?,
            previous_member_epoch: r.i32("previous_member_epoch")?,
            state: r.i8("state")?,
            tasks: Tasks::decode(r, ["active_tasks", "standby_tasks", "warmup_tasks"])?,
            tasks_pending_revocation: Tasks::decode(
                r,
                [
                    "active_tasks_pending_revocation",
                    "standby_tasks_pending_revocation",
                    "warmup_tasks_pending_revocation",
                ],
            )?,
        };
        no_tags(r)?;
        Ok(v)
    }

    pub(crate) fn encode(&self, w: &mut Writer<'_>) {
        w.i32(self.member_epoch);
        w.i32(self.previous_member_epoch);
        w.i8(self.state);
        self.tasks.encode(w);
        self.tasks_pending_revocation.encode(w);
        w.tagged_fields(&[]);
    }
}

/// An internal topic a subtopology needs (a changelog or repartition topic).
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct TopicInfo<'a> {
    /// The topic.
    pub name: Cow<'a, str>,
    /// Its partitions (0: not enforced; always 0 for changelogs).
    pub partitions: i32,
    /// Its replication factor (0: the broker's default).
    pub replication_factor: i16,
    /// Topic-level configurations.
    pub topic_configs: Vec<KeyValue<'a>>,
}

impl<'a> TopicInfo<'a> {
    fn decode_list(r: &mut Reader<'a>, field: &'static str) -> Result<Vec<Self>> {
        r.array_of(field, true, 1 + 4 + 2 + 1 + 1, |r| {
            let t = TopicInfo {
                name: r.string("name", true)?,
                partitions: r.i32("partitions")?,
                replication_factor: r.i16("replication_factor")?,
                topic_configs: KeyValue::decode_list(r, "topic_configs")?,
            };
            no_tags(r)?;
            Ok(t)
        })
    }

    fn encode_list(list: &[Self], w: &mut Writer<'_>) {
        w.array_of(list, true, |w, t| {
            w.string(&t.name, true);
            w.i32(t.partitions);
            w.i16(t.replication_factor);
            KeyValue::encode_list(&t.topic_configs, w);
            w.tagged_fields(&[]);
        });
    }
}

/// Source topics that must be co-partitioned, as indexes into the
/// subtopology's lists.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct CopartitionGroup {
    /// Indexes into `source_topics`.
    pub source_topics: Vec<i16>,
    /// Indexes into `source_topic_regex`.
    pub source_topic_regex: Vec<i16>,
    /// Indexes into `repartition_source_topics`.
    pub repartition_source_topics: Vec<i16>,
}

fn int16_array(r: &mut Reader<'_>, field: &'static str) -> Result<Vec<i16>> {
    r.array_of(field, true, 2, |r| r.i16(field))
}

fn write_int16_array(w: &mut Writer<'_>, v: &[i16]) {
    w.array_of(v, true, |w, x| w.i16(*x));
}

/// One subtopology of a Kafka Streams topology.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct Subtopology<'a> {
    /// The subtopology.
    pub subtopology_id: Cow<'a, str>,
    /// The topics it reads.
    pub source_topics: Vec<Cow<'a, str>>,
    /// Regular expressions naming topics it reads.
    pub source_topic_regex: Vec<Cow<'a, str>>,
    /// Its state stores' changelog topics.
    pub state_changelog_topics: Vec<TopicInfo<'a>>,
    /// The repartition topics it writes.
    pub repartition_sink_topics: Vec<Cow<'a, str>>,
    /// The repartition topics it reads.
    pub repartition_source_topics: Vec<TopicInfo<'a>>,
    /// Source topics that must be co-partitioned.
    pub copartition_groups: Vec<CopartitionGroup>,
}

impl<'a> Subtopology<'a> {
    fn decode(r: &mut Reader<'a>) -> Result<Self> {
        let s = Subtopology {
            subtopology_id: r.string("subtopology_id", true)?,
            source_topics: r.string_array("source_topics", true)?,
            source_topic_regex: r.string_array("source_topic_regex", true)?,
            state_changelog_topics: TopicInfo::decode_list(r, "state_changelog_topics")?,
            repartition_sink_topics: r.string_array("repartition_sink_topics", true)?,
            repartition_source_topics: TopicInfo::decode_list(r, "repartition_source_topics")?,
            copartition_groups: r.array_of("copartition_groups", true, 4, |r| {
                let g = CopartitionGroup {
                    source_topics: int16_array(r, "source_topics")?,
                    source_topic_regex: int16_array(r, "source_topic_regex")?,
                    repartition_source_topics: int16_array(r, "repartition_source_topics")?,
                };
                no_tags(r)?;
                Ok(g)
            })?,
        };
        no_tags(r)?;
        Ok(s)
    }

    fn encode(&self, w: &mut Writer<'_>) {
        w.string(&self.subtopology_id, true);
        w.string_array(&self.source_topics, true);
        w.string_array(&self.source_topic_regex, true);
        TopicInfo::encode_list(&self.state_changelog_topics, w);
        w.string_array(&self.repartition_sink_topics, true);
        TopicInfo::encode_list(&self.repartition_source_topics, w);
        w.array_of(&self.copartition_groups, true, |w, g| {
            write_int16_array(w, &g.source_topics);
            write_int16_array(w, &g.source_topic_regex);
            write_int16_array(w, &g.repartition_source_topics);
            w.tagged_fields(&[]);
        });
        w.tagged_fields(&[]);
    }
}

/// `StreamsGroupTopologyValue` (type 23): the application's topology.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct StreamsGroupTopologyValue<'a> {
    /// The value's schema version.
    pub version: i16,
    /// The topology epoch.
    pub epoch: i32,
    /// The subtopologies.
    pub subtopologies: Vec<Subtopology<'a>>,
}

impl<'a> StreamsGroupTopologyValue<'a> {
    pub(crate) fn decode(version: i16, r: &mut Reader<'a>) -> Result<Self> {
        let epoch = r.i32("epoch")?;
        let subtopologies = r.array_of("subtopologies", true, 7, Subtopology::decode)?;
        no_tags(r)?;
        Ok(StreamsGroupTopologyValue { version, epoch, subtopologies })
    }

    pub(crate) fn encode(&self, w: &mut Writer<'_>) {
        w.i32(self.epoch);
        w.array_of(&self.subtopologies, true, |w, s| s.encode(w));
        w.tagged_fields(&[]);
    }

    /// Every topic the topology reads from by name (source and repartition
    /// source topics), each once, in order.
    pub fn input_topics(&self) -> Vec<&str> {
        let mut out: Vec<&str> = Vec::new();
        for s in &self.subtopologies {
            let names = s.source_topics.iter().map(|t| t.as_ref());
            for name in names.chain(s.repartition_source_topics.iter().map(|t| t.name.as_ref())) {
                if !out.contains(&name) {
                    out.push(name);
                }
            }
        }
        out
    }
}
