//! Share groups (KIP-932) in a [`GroupOffsets`] unit: their metadata,
//! members and assignments come as records 10–15 of `__consumer_offsets`
//! like a KIP-848 consumer group's; their progress is kept apart, in
//! `__share_group_state` (see [`crate::ShareState`]). Record 15 names the
//! topics whose share-partitions were initialized, which is how the state's
//! topic ids get their names.

use std::sync::Arc;

use kshard_offsets::{ShareGroupStatePartitionMetadataValue, Uuid};

use super::{Applied, GroupOffsets};

/// The protocol type of share groups.
pub(crate) const SHARE: &str = "share";

impl GroupOffsets {
    /// A share group's topics being initialized, initialized and deleted
    /// (`None`: the group was deleted): each topic id learned with its name,
    /// and kept while the group has them.
    pub(super) fn share_partition_metadata(
        &mut self,
        group: &str,
        v: Option<&ShareGroupStatePartitionMetadataValue<'_>>,
    ) -> Applied {
        let Some(v) = v else {
            self.share_topics.remove(group);
            return Applied::GroupMetadata;
        };
        let mut topics = Vec::new();
        for topic in v.initializing_topics.iter().chain(&v.initialized_topics).chain(&v.deleting_topics) {
            if !self.topic_ids.contains_key(&topic.topic_id) {
                self.learn_topic_id(topic.topic_id, &topic.topic_name);
            }
            if let Some(name) = self.topic_ids.get(&topic.topic_id) {
                topics.push((topic.topic_id, Arc::clone(name)));
            }
        }
        let group = self.names.intern(group);
        self.share_topics.insert(group, topics);
        Applied::GroupMetadata
    }

    /// The name of the topic with id `id`, once a record named it.
    pub fn topic_name(&self, id: &Uuid) -> Option<&std::sync::Arc<str>> {
        self.topic_ids.get(id)
    }

    /// Every topic id this unit knows the name of.
    pub fn topic_ids(&self) -> impl Iterator<Item = (&Uuid, &Arc<str>)> {
        self.topic_ids.iter()
    }
}

#[cfg(test)]
mod tests {
    use kshard_offsets::{
        MemberKey, NamedTopicPartitions, Record, RecordKey, RecordValue, ShareGroupCurrentMemberAssignmentValue,
        ShareGroupMemberMetadataValue, ShareGroupMetadataValue, TopicIdPartitions, Uuid,
    };

    use super::*;

    const TOPIC: Uuid = Uuid([3; 16]);

    fn member_key(member: &str) -> MemberKey<'static> {
        MemberKey { group_id: "sg".to_owned().into(), member_id: member.to_owned().into() }
    }

    #[test]
    fn a_share_group_gets_its_members_their_assignment_and_topic_names() {
        let mut unit = GroupOffsets::default();
        let group_key = kshard_offsets::GroupIdKey { group_id: "sg".to_owned().into() };
        let records = [
            Record {
                key: RecordKey::ShareGroupStatePartitionMetadata(group_key.clone()),
                value: Some(RecordValue::ShareGroupStatePartitionMetadata(ShareGroupStatePartitionMetadataValue {
                    version: 0,
                    initializing_topics: vec![],
                    initialized_topics: vec![NamedTopicPartitions {
                        topic_id: TOPIC,
                        topic_name: "orders".into(),
                        partitions: vec![0, 1],
                    }],
                    deleting_topics: vec![],
                })),
            },
            Record {
                key: RecordKey::ShareGroupMetadata(group_key.clone()),
                value: Some(RecordValue::ShareGroupMetadata(ShareGroupMetadataValue {
                    version: 0,
                    epoch: 4,
                    metadata_hash: 0,
                })),
            },
            Record {
                key: RecordKey::ShareGroupMemberMetadata(member_key("m1")),
                value: Some(RecordValue::ShareGroupMemberMetadata(ShareGroupMemberMetadataValue {
                    version: 0,
                    rack_id: None,
                    client_id: "console-share-consumer".into(),
                    client_host: "/127.0.0.1".into(),
                    subscribed_topic_names: vec!["orders".into()],
                })),
            },
            Record {
                key: RecordKey::ShareGroupCurrentMemberAssignment(member_key("m1")),
                value: Some(RecordValue::ShareGroupCurrentMemberAssignment(ShareGroupCurrentMemberAssignmentValue {
                    version: 0,
                    member_epoch: 4,
                    previous_member_epoch: 3,
                    state: 0,
                    assigned_partitions: vec![TopicIdPartitions {
                        topic_id: TOPIC,
                        partitions: vec![0, 1],
                        assignment_epochs: None,
                    }],
                })),
            },
        ];
        for r in &records {
            unit.apply(r);
        }
        // The members go; the names of the group's topics stay.
        unit.apply(&Record { key: RecordKey::ShareGroupCurrentMemberAssignment(member_key("m1")), value: None });
        unit.sweep_names();
        assert_eq!(unit.topic_name(&TOPIC).map(|t| &**t), Some("orders"));
        unit.apply(&records[3]);
        let info = unit.group("sg").and_then(|g| g.info.as_ref()).expect("the group has metadata");
        assert_eq!((&*info.protocol_type, info.generation, info.state()), ("share", 4, "Stable"));
        let m = &info.members()[0];
        assert_eq!((&*m.client_id, m.assignment.len()), ("console-share-consumer", 1));
        assert_eq!((&*m.assignment[0].0, &m.assignment[0].1), ("orders", &vec![0, 1]));
        assert_eq!(unit.topic_name(&TOPIC).map(|t| &**t), Some("orders"));
        // The member leaves, then the group is deleted.
        unit.apply(&Record { key: RecordKey::ShareGroupMemberMetadata(member_key("m1")), value: None });
        assert_eq!(unit.group("sg").and_then(|g| g.info.as_ref()).map(|i| i.state()), Some("Empty"));
        unit.apply(&Record { key: RecordKey::ShareGroupMetadata(group_key), value: None });
        assert!(unit.group("sg").is_none());
    }
}
