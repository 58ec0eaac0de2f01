//! What the admin API reports of groups (`scrape_mode: admin_api`):
//! [`ReportedGroups`], built from the committed offsets of OffsetFetch, the
//! states of ListGroups and the members of DescribeGroups, then made the
//! [`GroupOffsets`] unit that stands in place of what the log would have
//! told. A unit that folds the log takes no such writes: it has no method
//! for them.

use std::sync::Arc;

use kshard_offsets::Uuid;

use super::{CommittedOffset, GroupInfo, GroupOffsets, Member};

/// Groups as one scrape of the admin API reported them, made a unit by
/// [`ReportedGroups::into_unit`].
#[derive(Debug, Default)]
pub struct ReportedGroups(GroupOffsets);

/// A member as DescribeGroups reports it, for [`ReportedGroups::set_described`].
#[derive(Debug, Clone, Copy)]
pub struct DescribedMember<'a> {
    /// The member id.
    pub member_id: &'a str,
    /// The static membership id, if any.
    pub instance: Option<&'a str>,
    /// The client id.
    pub client_id: &'a str,
    /// The client host.
    pub host: &'a str,
    /// The assigned partitions: topic and partition.
    pub assigned: &'a [(String, i32)],
}

impl ReportedGroups {
    /// The unit of what was reported, to replace the monitor's.
    pub fn into_unit(self) -> GroupOffsets {
        self.0
    }

    /// Sets a group's committed offset as an Admin API reported it.
    pub fn set_committed(&mut self, group: &str, topic: &str, partition: i32, offset: i64) {
        let committed =
            CommittedOffset { offset, commit_timestamp: -1, leader_epoch: -1, metadata: None, record_offset: -1 };
        let unit = &mut self.0;
        let g = match unit.groups.get_mut(group) {
            Some(g) => g,
            None => unit.groups.entry(unit.names.intern(group)).or_default(),
        };
        g.set_offset(&mut unit.names, topic, partition, committed);
    }

    /// A share group's topics by id and name, as the brokers reported them.
    pub fn set_share_topics<'a>(&mut self, group: &str, topics: impl IntoIterator<Item = (Uuid, &'a str)>) {
        let unit = &mut self.0;
        let mut named = Vec::new();
        for (id, name) in topics {
            if !unit.topic_ids.contains_key(&id) {
                unit.learn_topic_id(id, name);
            }
            if let Some(name) = unit.topic_ids.get(&id) {
                named.push((id, Arc::clone(name)));
            }
        }
        let group = unit.names.intern(group);
        unit.share_topics.insert(group, named);
    }

    /// Sets a group's state as an Admin API reported it (members unknown).
    pub fn set_reported_state(&mut self, group: &str, protocol_type: &str, state: &str) {
        let unit = &mut self.0;
        let info = GroupInfo {
            protocol_type: unit.names.intern(protocol_type),
            protocol: None,
            generation: -1,
            state_timestamp: None,
            members: None,
            reported_state: Some(unit.names.intern(state)),
            topology: None,
        };
        unit.group_mut(group).info = Some(Arc::new(info));
    }

    /// Sets a group's state and members as DescribeGroups reported them
    /// (admin-API mode).
    pub fn set_described(
        &mut self,
        group: &str,
        protocol_type: &str,
        assignor: &str,
        state: &str,
        members: &[DescribedMember<'_>],
    ) {
        let unit = &mut self.0;
        let members = members
            .iter()
            .map(|&DescribedMember { member_id, instance, client_id, host, assigned }| {
                let mut by_topic: Vec<(Arc<str>, Vec<i32>)> = Vec::new();
                // As from the offsets topic: an assignment naming a topic no
                // broker would accept (client bytes, unchecked) is none.
                let legal = assigned.iter().all(|(topic, _)| kshard_offsets::is_legal_topic_name(topic));
                for (topic, partition) in assigned.iter().filter(|_| legal) {
                    match by_topic.iter_mut().find(|(t, _)| **t == **topic) {
                        Some((_, partitions)) => partitions.push(*partition),
                        None => by_topic.push((unit.names.intern(topic), vec![*partition])),
                    }
                }
                Member {
                    member_id: member_id.into(),
                    group_instance_id: instance.map(Into::into),
                    client_id: client_id.into(),
                    client_host: host.into(),
                    assignment: by_topic,
                    assignment_by_id: Vec::new(),
                    streams: None,
                }
            })
            .collect();
        let info = GroupInfo {
            protocol_type: unit.names.intern(protocol_type),
            protocol: (!assignor.is_empty()).then(|| unit.names.intern(assignor)),
            generation: -1,
            state_timestamp: None,
            members: Some(members),
            reported_state: Some(unit.names.intern(state)),
            topology: None,
        };
        unit.group_mut(group).info = Some(Arc::new(info));
    }
}
