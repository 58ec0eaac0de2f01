//! Streams groups (KIP-1071) in a [`GroupOffsets`] unit: a Kafka Streams
//! application on the streams rebalance protocol is a group whose metadata
//! (record 17), members (19), their current tasks (22) and topology (23)
//! are in `__consumer_offsets`; it commits offsets of its input topics like
//! any consumer group, so its lag is theirs. A member's active tasks are
//! shown as its assignment: each task (subtopology, partition) is that
//! partition of each of the subtopology's source topics.

use std::sync::Arc;

use kshard_offsets::{
    MemberKey, RecordValue, StreamsGroupCurrentMemberAssignmentValue, StreamsGroupMemberMetadataValue,
    StreamsGroupTopologyValue, TaskIds,
};

use super::{Applied, GroupOffsets, MemberClient};
use crate::group::{StreamsMember, SubtopologyInfo, TaskList, Topology};

/// The protocol type of streams groups.
pub(crate) const STREAMS: &str = "streams";

fn tasks(ids: &[TaskIds<'_>]) -> TaskList {
    ids.iter().map(|t| (Box::from(t.subtopology_id.as_ref()), t.partitions.clone())).collect()
}

impl GroupOffsets {
    /// A streams group member's metadata (record 19).
    pub(super) fn streams_member(&mut self, key: &MemberKey<'_>, m: &StreamsGroupMemberMetadataValue<'_>) -> Applied {
        let client = MemberClient { instance_id: m.instance_id.as_deref(), id: &m.client_id, host: &m.client_host };
        let applied = self.member_metadata(key, STREAMS, client);
        let pending = self.pending_tasks.remove(&(self.names.intern(&key.group_id), key.member_id.as_ref().into()));
        let endpoint = m.user_endpoint.as_ref().map(|e| format!("{}:{}", e.host, e.port).into_boxed_str());
        if let Some(member) = self.member_mut(&key.group_id, &key.member_id) {
            let streams = member.streams.get_or_insert_with(Box::default);
            streams.process_id = m.process_id.as_ref().into();
            streams.endpoint = endpoint;
            if let Some(p) = pending {
                let (process_id, endpoint) = (streams.process_id.clone(), streams.endpoint.clone());
                **streams = StreamsMember { process_id, endpoint, ..p };
            }
        }
        self.resolve_tasks(&key.group_id);
        applied
    }

    /// A streams group member's current tasks (record 22), or their tombstone.
    pub(super) fn streams_tasks(
        &mut self,
        key: &MemberKey<'_>,
        v: Option<&StreamsGroupCurrentMemberAssignmentValue<'_>>,
    ) -> Applied {
        let assigned = v.map(|v| StreamsMember {
            active: tasks(&v.tasks.active),
            standby: tasks(&v.tasks.standby),
            warmup: tasks(&v.tasks.warmup),
            ..StreamsMember::default()
        });
        let pending_key = (self.names.intern(&key.group_id), Box::<str>::from(key.member_id.as_ref()));
        match (self.member_mut(&key.group_id, &key.member_id), assigned) {
            (Some(member), assigned) => {
                let streams = member.streams.get_or_insert_with(Box::default);
                let t = assigned.unwrap_or_default();
                (streams.active, streams.standby, streams.warmup) = (t.active, t.standby, t.warmup);
            }
            // The member's metadata comes later (after compaction it can).
            (None, Some(t)) => _ = self.pending_tasks.insert(pending_key, t),
            (None, None) => _ = self.pending_tasks.remove(&pending_key),
        }
        self.resolve_tasks(&key.group_id);
        Applied::ConsumerGroupMember
    }

    /// A streams group's topology (record 23), or its tombstone.
    pub(super) fn streams_topology(&mut self, group: &str, v: Option<&StreamsGroupTopologyValue<'_>>) -> Applied {
        let topology = v.map(|v| {
            let mut names = |topics: &mut dyn Iterator<Item = &str>| -> Vec<Arc<str>> {
                topics.map(|t| self.names.intern(t)).collect()
            };
            let subtopologies = v
                .subtopologies
                .iter()
                .map(|s| SubtopologyInfo {
                    id: s.subtopology_id.as_ref().into(),
                    source_topics: names(&mut s.source_topics.iter().map(|t| t.as_ref())),
                    repartition_source_topics: names(&mut s.repartition_source_topics.iter().map(|t| t.name.as_ref())),
                    state_changelog_topics: names(&mut s.state_changelog_topics.iter().map(|t| t.name.as_ref())),
                })
                .collect();
            Arc::new(Topology { epoch: v.epoch, subtopologies })
        });
        match (topology, self.groups.contains_key(group)) {
            (Some(t), _) => self.kip848_group_info(group, STREAMS, 0).topology = Some(t),
            (None, true) => {
                if let Some(info) = self.groups.get_mut(group).and_then(|g| g.info.as_mut()) {
                    Arc::make_mut(info).topology = None;
                }
            }
            (None, false) => {}
        }
        self.resolve_tasks(group);
        Applied::GroupMetadata
    }

    /// Each member's assignment by topic from its active tasks, through the
    /// topology (none until both are known).
    fn resolve_tasks(&mut self, group: &str) {
        let Some(info) = self.groups.get_mut(group).and_then(|g| g.info.as_mut()) else { return };
        let info = Arc::make_mut(info);
        let topology = info.topology.clone();
        for member in info.members.iter_mut().flatten() {
            let Some(streams) = &member.streams else { continue };
            let mut by_topic: Vec<(Arc<str>, Vec<i32>)> = Vec::new();
            for (subtopology, partitions) in &streams.active {
                let Some(s) = topology.as_ref().and_then(|t| t.subtopologies.iter().find(|s| s.id == *subtopology))
                else {
                    continue;
                };
                for topic in s.source_topics.iter().chain(&s.repartition_source_topics) {
                    match by_topic.iter_mut().find(|(t, _)| t == topic) {
                        Some((_, ps)) => ps.extend(partitions),
                        None => by_topic.push((Arc::clone(topic), partitions.clone())),
                    }
                }
            }
            for (_, ps) in &mut by_topic {
                ps.sort_unstable();
                ps.dedup();
            }
            member.assignment = by_topic;
        }
    }

    fn member_mut(&mut self, group: &str, member: &str) -> Option<&mut super::Member> {
        self.members_mut(group)?.iter_mut().find(|m| *m.member_id == *member)
    }
}

/// The value of a streams record, when it is the one `pick` wants.
pub(super) fn value_of<'v, 'a, T>(
    value: &'v Option<RecordValue<'a>>,
    pick: impl Fn(&'v RecordValue<'a>) -> Option<&'v T>,
) -> Option<&'v T> {
    value.as_ref().and_then(pick)
}

#[cfg(test)]
mod tests {
    use kshard_offsets::{Endpoint, GroupIdKey, Record, RecordKey, Subtopology, Tasks, TopicInfo};

    use super::*;

    fn member_key() -> MemberKey<'static> {
        MemberKey { group_id: "app".to_owned().into(), member_id: "m1".to_owned().into() }
    }

    fn task(sub: &str, partitions: Vec<i32>) -> TaskIds<'static> {
        TaskIds { subtopology_id: sub.to_owned().into(), partitions, assignment_epochs: None }
    }

    #[test]
    fn tasks_read_before_the_member_and_the_topology_become_its_assignment() {
        let mut unit = GroupOffsets::default();
        // After compaction the tasks can come first, then the member, then the topology.
        let assignment = StreamsGroupCurrentMemberAssignmentValue {
            version: 0,
            member_epoch: 2,
            previous_member_epoch: 1,
            state: 0,
            tasks: Tasks { active: vec![task("0", vec![0, 1])], standby: vec![task("1", vec![3])], warmup: vec![] },
            tasks_pending_revocation: Tasks::default(),
        };
        let records = [
            Record {
                key: RecordKey::StreamsGroupCurrentMemberAssignment(member_key()),
                value: Some(RecordValue::StreamsGroupCurrentMemberAssignment(assignment)),
            },
            Record {
                key: RecordKey::StreamsGroupMemberMetadata(member_key()),
                value: Some(RecordValue::StreamsGroupMemberMetadata(StreamsGroupMemberMetadataValue {
                    version: 0,
                    instance_id: None,
                    rack_id: None,
                    client_id: "app-StreamThread-1-consumer".into(),
                    client_host: "/127.0.0.1".into(),
                    rebalance_timeout_ms: 300_000,
                    topology_epoch: 0,
                    process_id: "p-1".into(),
                    user_endpoint: Some(Endpoint { host: "app-1".into(), port: 7070 }),
                    client_tags: vec![],
                })),
            },
            Record {
                key: RecordKey::StreamsGroupTopology(GroupIdKey { group_id: "app".into() }),
                value: Some(RecordValue::StreamsGroupTopology(StreamsGroupTopologyValue {
                    version: 0,
                    epoch: 0,
                    subtopologies: vec![Subtopology {
                        subtopology_id: "0".into(),
                        source_topics: vec!["orders".into(), "refunds".into()],
                        source_topic_regex: vec![],
                        state_changelog_topics: vec![TopicInfo {
                            name: "app-counts-changelog".into(),
                            partitions: 0,
                            replication_factor: 0,
                            topic_configs: vec![],
                        }],
                        repartition_sink_topics: vec![],
                        repartition_source_topics: vec![],
                        copartition_groups: vec![],
                    }],
                })),
            },
        ];
        for r in &records {
            unit.apply(r);
        }
        let info = unit.group("app").and_then(|g| g.info.as_ref()).expect("the group");
        assert_eq!(&*info.protocol_type, "streams");
        let m = &info.members()[0];
        let streams = m.streams.as_ref().expect("a streams member");
        assert_eq!((&*streams.process_id, streams.endpoint.as_deref()), ("p-1", Some("app-1:7070")));
        assert_eq!(streams.standby, vec![("1".into(), vec![3])]);
        let assigned: Vec<(&str, &[i32])> = m.assignment.iter().map(|(t, p)| (&**t, p.as_slice())).collect();
        assert_eq!(assigned, [("orders", &[0, 1][..]), ("refunds", &[0, 1][..])], "co-partitioned sources");
        let topology = info.topology.as_ref().expect("the topology");
        assert_eq!(&*topology.subtopologies[0].state_changelog_topics[0], "app-counts-changelog");
        // Its tasks revoked, then the group deleted.
        unit.apply(&Record { key: RecordKey::StreamsGroupCurrentMemberAssignment(member_key()), value: None });
        let info = unit.group("app").and_then(|g| g.info.as_ref()).expect("the group");
        assert!(info.members()[0].assignment.is_empty());
        unit.apply(&Record {
            key: RecordKey::StreamsGroupMetadata(GroupIdKey { group_id: "app".into() }),
            value: None,
        });
        assert!(unit.group("app").is_none());
    }
}
