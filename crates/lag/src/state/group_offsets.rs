//! [`GroupOffsets`]: what one partition of `__consumer_offsets` says about the
//! groups whose records it holds — each group's committed offsets and metadata.
//!
//! Kafka keeps all of a group's records in one partition (`abs(hash(group)) % 50`),
//! so each partition is an independent unit of state with its own position; the
//! units are merged only when metrics are read. That independence is what lets a
//! unit become a shard of the runtime later. Pure: no I/O, no clock.
//!
//! Semantics follow Kafka's group coordinator when it loads the log: an offset
//! tombstone deletes that partition's offset; a group tombstone deletes the
//! group's metadata, and the group disappears once it has neither metadata nor
//! offsets (Kafka also keeps offsets of a group whose metadata was deleted).
//! Offsets committed inside a transaction wait in [`OpenTransactions`] for
//! the transaction's marker (see [`GroupOffsets::apply_record`]).

use std::sync::Arc;

use kshard_offsets::{
    DecodeError, GroupMetadataValue, MemberKey, OffsetCommitKey, OffsetCommitValue, Record, RecordKey, RecordType,
    RecordValue, Uuid,
};

pub use crate::group::{CommittedOffset, Group, GroupInfo, Member, StreamsMember, SubtopologyInfo, TaskList, Topology};
use crate::names::{FastMap, Names};
use crate::open_transactions::OpenTransactions;
pub use kshard_kafka::Transactional;

mod admin_api;
mod share;
mod streams;
mod transactions;

pub use admin_api::{DescribedMember, ReportedGroups};
pub(crate) use share::SHARE;

/// The protocol type of KIP-848 consumer groups.
const CONSUMER: &str = "consumer";

/// Who a KIP-848 member is, as its metadata record says.
struct MemberClient<'a> {
    instance_id: Option<&'a str>,
    id: &'a str,
    host: &'a str,
}

/// What applying one record did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Applied {
    /// An offset was committed.
    OffsetCommitted,
    /// An offset was deleted (tombstone).
    OffsetDeleted,
    /// A group's metadata was set.
    GroupMetadata,
    /// A group's metadata was deleted (tombstone).
    GroupDeleted,
    /// A KIP-848 member was added, changed or removed.
    ConsumerGroupMember,
    /// An offset commit of an open transaction, set aside until its marker.
    OffsetPending,
    /// A producer's transaction ended: committed (its commits applied,
    /// those older than the offset in place excepted) or aborted.
    TransactionEnded {
        /// COMMIT or ABORT.
        committed: bool,
    },
    /// A record kshard does not need (assignments, share and streams groups, …).
    Ignored(RecordType),
}

/// Why a record was skipped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Skipped {
    /// The record has no key.
    NullKey,
    /// The key or value did not decode.
    Malformed(DecodeError),
}

impl std::fmt::Display for Skipped {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Skipped::NullKey => f.write_str("the record has a null key"),
            Skipped::Malformed(e) => e.fmt(f),
        }
    }
}

impl Skipped {
    /// A short, bounded label for metrics (`null_key`, `malformed_key`, `malformed_value`).
    pub fn reason(&self) -> &'static str {
        match self {
            Skipped::NullKey => "null_key",
            Skipped::Malformed(e) if e.part == kshard_offsets::Part::Key => "malformed_key",
            Skipped::Malformed(_) => "malformed_value",
        }
    }
}

/// A KIP-848 assignment: partitions by topic id.
type AssignmentById = Vec<(Uuid, Vec<i32>)>;

/// The groups of one `__consumer_offsets` partition.
#[derive(Debug, Default)]
pub struct GroupOffsets {
    groups: FastMap<Arc<str>, Group>,
    names: Names,
    /// Topic names by id, as offset commits (v4, Kafka 4.1+) carry both: how
    /// KIP-848 assignments, which name topics by id only, are shown by name.
    topic_ids: FastMap<Uuid, Arc<str>>,
    /// Each share group's topics with share-partition state, by id and name
    /// (record 15): what names the topic ids of `__share_group_state`.
    share_topics: FastMap<Arc<str>, Vec<(Uuid, Arc<str>)>>,
    /// KIP-848 assignments read before their member's metadata record (after
    /// compaction a member's assignment can come first), by group and member.
    pending_assignments: FastMap<(Arc<str>, Box<str>), AssignmentById>,
    /// Streams members' tasks read before their metadata, by group and member.
    pending_tasks: FastMap<(Arc<str>, Box<str>), StreamsMember>,
    /// Offset commits of transactions not ended yet.
    open: OpenTransactions,
    /// The next offset to read from this partition (`None` before the first record).
    next_offset: Option<i64>,
}

impl GroupOffsets {
    /// Applies the record at `offset` given as raw bytes; a record that does not
    /// decode is skipped, and the position still moves past it.
    pub fn apply_bytes(&mut self, offset: i64, key: Option<&[u8]>, value: Option<&[u8]>) -> Result<Applied, Skipped> {
        self.apply_record(offset, None, key, value)
    }

    /// Applies the record at `offset`, read with its part in a transaction
    /// (`None`: written outside one). A transaction's offset commit waits
    /// for the producer's marker; its other records (Kafka writes none)
    /// apply at once. A marker's key and value are not looked at.
    pub fn apply_record(
        &mut self,
        offset: i64,
        transactional: Option<Transactional>,
        key: Option<&[u8]>,
        value: Option<&[u8]>,
    ) -> Result<Applied, Skipped> {
        self.next_offset = Some(offset + 1);
        let producer = match transactional {
            Some(Transactional::Marker { producer_id, committed }) => {
                self.end_transaction(producer_id, committed);
                return Ok(Applied::TransactionEnded { committed });
            }
            Some(Transactional::Record { producer_id }) => Some(producer_id),
            None => None,
        };
        let key = key.ok_or(Skipped::NullKey)?;
        let record = Record::decode(key, value).map_err(Skipped::Malformed)?;
        match (producer, &record) {
            (
                Some(producer),
                Record { key: RecordKey::OffsetCommit { key, .. }, value: Some(RecordValue::OffsetCommit(v)) },
            ) => {
                self.set_aside(producer, key, v, offset);
                Ok(Applied::OffsetPending)
            }
            _ => Ok(self.apply_at(offset, &record)),
        }
    }

    /// Applies a decoded record, as the record at the current position.
    pub fn apply(&mut self, record: &Record<'_>) -> Applied {
        let at = self.next_offset.map_or(-1, |n| n - 1);
        self.apply_at(at, record)
    }

    /// Applies a decoded record read at `offset`, outside any transaction.
    fn apply_at(&mut self, offset: i64, record: &Record<'_>) -> Applied {
        match (&record.key, &record.value) {
            (RecordKey::OffsetCommit { key, .. }, Some(RecordValue::OffsetCommit(v))) => {
                self.offset_committed(key, v, offset)
            }
            (RecordKey::OffsetCommit { key, .. }, None) => self.offset_deleted(key),
            (RecordKey::GroupMetadata(key), Some(RecordValue::GroupMetadata(v))) => {
                let info = self.group_info(v);
                self.group_mut(&key.group).info = Some(Arc::new(info));
                Applied::GroupMetadata
            }
            (RecordKey::GroupMetadata(key), None) => self.group_deleted(&key.group),
            (RecordKey::ConsumerGroupMetadata(key), Some(RecordValue::ConsumerGroupMetadata(v))) => {
                self.kip848_group_info(&key.group_id, CONSUMER, v.epoch).generation = v.epoch;
                Applied::GroupMetadata
            }
            (RecordKey::ConsumerGroupMetadata(key) | RecordKey::ShareGroupMetadata(key), None) => {
                self.group_deleted(&key.group_id)
            }
            (RecordKey::ConsumerGroupMemberMetadata(key) | RecordKey::ShareGroupMemberMetadata(key), None) => {
                self.member_left(key)
            }
            (RecordKey::ConsumerGroupMemberMetadata(key), Some(RecordValue::ConsumerGroupMemberMetadata(m))) => {
                let client =
                    MemberClient { instance_id: m.instance_id.as_deref(), id: &m.client_id, host: &m.client_host };
                self.member_metadata(key, CONSUMER, client)
            }
            (
                RecordKey::ConsumerGroupCurrentMemberAssignment(key)
                | RecordKey::ShareGroupCurrentMemberAssignment(key),
                value,
            ) => self.member_assignment(key, value),
            (RecordKey::ShareGroupMetadata(key), Some(RecordValue::ShareGroupMetadata(v))) => {
                self.kip848_group_info(&key.group_id, share::SHARE, v.epoch).generation = v.epoch;
                Applied::GroupMetadata
            }
            (RecordKey::ShareGroupMemberMetadata(key), Some(RecordValue::ShareGroupMemberMetadata(m))) => {
                let client = MemberClient { instance_id: None, id: &m.client_id, host: &m.client_host };
                self.member_metadata(key, share::SHARE, client)
            }
            (RecordKey::StreamsGroupMetadata(key), Some(RecordValue::StreamsGroupMetadata(v))) => {
                self.kip848_group_info(&key.group_id, streams::STREAMS, v.epoch).generation = v.epoch;
                Applied::GroupMetadata
            }
            (RecordKey::StreamsGroupMetadata(key), None) => self.group_deleted(&key.group_id),
            (RecordKey::StreamsGroupMemberMetadata(key), Some(RecordValue::StreamsGroupMemberMetadata(m))) => {
                self.streams_member(key, m)
            }
            (RecordKey::StreamsGroupMemberMetadata(key), None) => self.member_left(key),
            (RecordKey::StreamsGroupCurrentMemberAssignment(key), value) => {
                let v = streams::value_of(value, |v| match v {
                    RecordValue::StreamsGroupCurrentMemberAssignment(a) => Some(a),
                    _ => None,
                });
                self.streams_tasks(key, v)
            }
            (RecordKey::StreamsGroupTopology(key), value) => {
                let v = streams::value_of(value, |v| match v {
                    RecordValue::StreamsGroupTopology(t) => Some(t),
                    _ => None,
                });
                self.streams_topology(&key.group_id, v)
            }
            (RecordKey::ShareGroupStatePartitionMetadata(key), value) => {
                let v = match value {
                    Some(RecordValue::ShareGroupStatePartitionMetadata(v)) => Some(v),
                    _ => None,
                };
                self.share_partition_metadata(&key.group_id, v)
            }
            (key, _) => Applied::Ignored(key.record_type()),
        }
    }

    /// An offset commit (outside a transaction, or at its COMMIT marker).
    fn offset_committed(&mut self, key: &OffsetCommitKey<'_>, v: &OffsetCommitValue<'_>, offset: i64) -> Applied {
        if let Some(id) = v.topic_id
            && !self.topic_ids.contains_key(&id)
        {
            self.learn_topic_id(id, &key.topic);
        }
        let group = match self.groups.get_mut(&*key.group) {
            Some(g) => g,
            None => self.groups.entry(self.names.intern(&key.group)).or_default(),
        };
        group.set_offset(&mut self.names, &key.topic, key.partition, committed(v, offset));
        group.commits += 1;
        Applied::OffsetCommitted
    }

    /// An offset commit's tombstone: the offset was deleted or expired.
    fn offset_deleted(&mut self, key: &OffsetCommitKey<'_>) -> Applied {
        if let Some(group) = self.groups.get_mut(&*key.group) {
            group.delete_offset(&key.topic, key.partition);
        }
        if !self.open.is_empty() {
            self.open.forget(&key.group, &key.topic, key.partition);
        }
        self.remove_if_empty(&key.group);
        Applied::OffsetDeleted
    }

    /// A group metadata tombstone (classic or consumer protocol).
    fn group_deleted(&mut self, group: &str) -> Applied {
        if let Some(g) = self.groups.get_mut(group) {
            g.info = None;
        }
        self.remove_if_empty(group);
        Applied::GroupDeleted
    }

    /// The metadata of a KIP-848 group (a consumer or share group: its
    /// `protocol_type`), made at `generation` (its epoch) when none was known.
    fn kip848_group_info(&mut self, group: &str, protocol_type: &str, generation: i32) -> &mut GroupInfo {
        let protocol_type = self.names.intern(protocol_type);
        let info = self.group_mut(group).info.get_or_insert_with(|| {
            Arc::new(GroupInfo {
                protocol_type,
                protocol: None,
                generation,
                state_timestamp: None,
                members: Some(Vec::new()),
                reported_state: None,
                topology: None,
            })
        });
        Arc::make_mut(info)
    }

    /// A member left a consumer group. Its tombstone creates nothing.
    fn member_left(&mut self, key: &MemberKey<'_>) -> Applied {
        self.pending_assignments.retain(|(g, m), _| !(**g == *key.group_id && **m == *key.member_id));
        if let Some(members) = self.members_mut(&key.group_id) {
            members.retain(|m| *m.member_id != *key.member_id);
        }
        Applied::ConsumerGroupMember
    }

    /// A KIP-848 member's metadata, new or changed (a consumer group's or
    /// a share group's: `protocol_type`).
    fn member_metadata(&mut self, key: &MemberKey<'_>, protocol_type: &str, client: MemberClient<'_>) -> Applied {
        // An assignment read before this member's metadata (after
        // compaction it can come first) is taken now.
        let pending_key = (self.names.intern(&key.group_id), Box::<str>::from(key.member_id.as_ref()));
        let pending = self.pending_assignments.remove(&pending_key).map(|by_id| (self.resolve(&by_id), by_id));
        let members = self.kip848_group_info(&key.group_id, protocol_type, 0).members.get_or_insert_with(Vec::new);
        let previous = members.iter().position(|x| *x.member_id == *key.member_id).map(|i| members.remove(i));
        // The assignment is a record of its own (type 7): a new
        // metadata record keeps the one the member had.
        let streams = previous.as_ref().and_then(|p| p.streams.clone());
        let (assignment, assignment_by_id) =
            pending.or_else(|| previous.map(|p| (p.assignment, p.assignment_by_id))).unwrap_or_default();
        members.push(Member {
            member_id: key.member_id.as_ref().into(),
            group_instance_id: client.instance_id.map(Into::into),
            client_id: client.id.into(),
            client_host: client.host.into(),
            assignment,
            assignment_by_id,
            streams,
        });
        Applied::ConsumerGroupMember
    }

    /// A consumer group member's current assignment, or its tombstone.
    fn member_assignment(&mut self, key: &MemberKey<'_>, value: &Option<RecordValue<'_>>) -> Applied {
        let by_id: Vec<(Uuid, Vec<i32>)> = match value {
            Some(RecordValue::ConsumerGroupCurrentMemberAssignment(a)) => {
                a.assigned_partitions.iter().map(|t| (t.topic_id, t.partitions.clone())).collect()
            }
            Some(RecordValue::ShareGroupCurrentMemberAssignment(a)) => {
                a.assigned_partitions.iter().map(|t| (t.topic_id, t.partitions.clone())).collect()
            }
            _ => Vec::new(),
        };
        let assignment = self.resolve(&by_id);
        let member =
            self.members_mut(&key.group_id).and_then(|ms| ms.iter_mut().find(|m| *m.member_id == *key.member_id));
        match (member, value.is_some()) {
            (Some(member), _) => {
                member.assignment = assignment;
                member.assignment_by_id = by_id;
            }
            // The member's metadata comes later (or never, when it left:
            // its tombstone then drops this).
            (None, true) => {
                let pending_key = (self.names.intern(&key.group_id), Box::<str>::from(key.member_id.as_ref()));
                self.pending_assignments.insert(pending_key, by_id);
            }
            (None, false) => {
                self.pending_assignments.retain(|(g, m), _| !(**g == *key.group_id && **m == *key.member_id));
            }
        }
        Applied::ConsumerGroupMember
    }

    /// The member list of a group that has one.
    fn members_mut(&mut self, group: &str) -> Option<&mut Vec<Member>> {
        self.groups.get_mut(group).and_then(|g| g.info.as_mut()).and_then(|i| Arc::make_mut(i).members.as_mut())
    }

    /// The assignment by topic name, for the topics whose names are known.
    fn resolve(&mut self, by_id: &[(Uuid, Vec<i32>)]) -> Vec<(Arc<str>, Vec<i32>)> {
        by_id
            .iter()
            .filter_map(|(id, partitions)| self.topic_ids.get(id).map(|name| (Arc::clone(name), partitions.clone())))
            .collect()
    }

    /// Records a topic id first seen, and names it in the assignments that
    /// were waiting for it (rare: once per topic).
    fn learn_topic_id(&mut self, id: Uuid, topic: &str) {
        let name = self.names.intern(topic);
        self.topic_ids.insert(id, Arc::clone(&name));
        for group in self.groups.values_mut() {
            // Only metadata that names the id is copied (a snapshot may share it).
            let uses = |i: &GroupInfo| i.members().iter().any(|m| m.assignment_by_id.iter().any(|(i, _)| *i == id));
            if !group.info.as_deref().is_some_and(uses) {
                continue;
            }
            let Some(members) = group.info.as_mut().and_then(|i| Arc::make_mut(i).members.as_mut()) else { continue };
            for m in members.iter_mut() {
                if let Some((_, partitions)) = m.assignment_by_id.iter().find(|(i, _)| *i == id)
                    && !m.assignment.iter().any(|(t, _)| **t == *topic)
                {
                    m.assignment.push((Arc::clone(&name), partitions.clone()));
                }
            }
        }
    }

    fn group_mut(&mut self, name: &str) -> &mut Group {
        // Metadata records only (commits take a faster path): an Arc clone is fine.
        let key = match self.groups.get_key_value(name) {
            Some((key, _)) => Arc::clone(key),
            None => self.names.intern(name),
        };
        self.groups.entry(key).or_default()
    }

    fn remove_if_empty(&mut self, name: &str) {
        if self.groups.get(name).is_some_and(Group::is_empty) {
            self.groups.remove(name);
        }
    }

    fn group_info(&mut self, v: &GroupMetadataValue<'_>) -> GroupInfo {
        let consumer = v.is_consumer_protocol();
        let members = v
            .members
            .iter()
            .map(|m| {
                // Members' assignment bytes come from clients and are not checked by
                // the broker: bytes that do not decode, or that name a topic no
                // broker would accept (a label of any length or bytes), leave the
                // assignment empty.
                let assignment = match (consumer, m.consumer_assignment()) {
                    (true, Ok(Some(a)))
                        if a.assigned_partitions.iter().all(|tp| kshard_offsets::is_legal_topic_name(&tp.topic)) =>
                    {
                        a.assigned_partitions
                            .iter()
                            .map(|tp| (self.names.intern(&tp.topic), tp.partitions.clone()))
                            .collect()
                    }
                    _ => Vec::new(),
                };
                Member {
                    member_id: m.member_id.as_ref().into(),
                    group_instance_id: m.group_instance_id.as_deref().map(Into::into),
                    client_id: m.client_id.as_ref().into(),
                    client_host: m.client_host.as_ref().into(),
                    assignment,
                    assignment_by_id: Vec::new(),
                    streams: None,
                }
            })
            .collect();
        GroupInfo {
            protocol_type: self.names.intern(&v.protocol_type),
            protocol: v.protocol.as_deref().map(|p| self.names.intern(p)),
            generation: v.generation,
            state_timestamp: v.current_state_timestamp,
            members: Some(members),
            reported_state: None,
            topology: None,
        }
    }

    /// Drops interned names nothing refers to any more; call now and then.
    pub fn sweep_names(&mut self) -> usize {
        // A topic id whose name only the interner and this map hold belongs to
        // a topic no group refers to any more.
        self.topic_ids.retain(|_, name| Arc::strong_count(name) > 2);
        self.names.sweep()
    }

    /// The groups, by name.
    pub fn groups(&self) -> impl Iterator<Item = (&Arc<str>, &Group)> {
        self.groups.iter()
    }

    /// One group.
    pub fn group(&self, name: &str) -> Option<&Group> {
        self.groups.get(name)
    }

    /// The next offset to read from this partition, once something was read.
    pub fn next_offset(&self) -> Option<i64> {
        self.next_offset
    }

    /// Sets the count of commits of `group` (restored from a store), if the group exists.
    pub fn set_commits(&mut self, group: &str, commits: u64) {
        if let Some(g) = self.groups.get_mut(group) {
            g.commits = commits;
        }
    }

    /// Sets the position, forward or back (a standby's unit after playing a
    /// transaction whose records set it on the way).
    pub fn reset_position(&mut self, next_offset: i64) {
        self.next_offset = Some(next_offset);
    }

    /// Moves the position without a record (control records, compacted gaps).
    pub fn advance_to(&mut self, next_offset: i64) {
        if self.next_offset.is_none_or(|n| n < next_offset) {
            self.next_offset = Some(next_offset);
        }
    }

    /// Number of (group, topic-partition) offsets held.
    pub fn offset_count(&self) -> usize {
        self.groups.values().map(Group::offset_count).sum()
    }
}

/// The commit `v`, its record at `record_offset`.
fn committed(v: &OffsetCommitValue<'_>, record_offset: i64) -> CommittedOffset {
    CommittedOffset {
        offset: v.offset,
        commit_timestamp: v.commit_timestamp,
        leader_epoch: v.leader_epoch.unwrap_or(-1),
        metadata: (!v.metadata.is_empty()).then(|| v.metadata.as_ref().into()),
        record_offset,
    }
}
