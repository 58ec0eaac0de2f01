//! What kshard knows of one group from `__consumer_offsets`: its committed
//! offsets ([`CommittedOffset`]) and its metadata ([`GroupInfo`], its
//! [`Member`]s). Plain data; [`crate::GroupOffsets`] folds the log into it.

use std::sync::Arc;

use kshard_offsets::Uuid;

use crate::names::{FastMap, Names};

/// The largest partition index kept (Kafka's own limits are far below this).
const MAX_PARTITION_INDEX: usize = 1 << 20;

/// The last offset a group committed for one partition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommittedOffset {
    /// The next offset the group will read.
    pub offset: i64,
    /// When it was committed, in ms since the epoch.
    pub commit_timestamp: i64,
    /// The leader epoch of the last consumed record, -1 when unknown.
    pub leader_epoch: i32,
    /// The client's metadata string, `None` when empty (the usual case).
    pub metadata: Option<Box<str>>,
    /// Where the commit's record is in the offsets topic's partition (-1
    /// when not read from it): of two commits, the later record wins.
    pub record_offset: i64,
}

/// A member of a group, as the group's metadata lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Member {
    /// The member id.
    pub member_id: Box<str>,
    /// The static membership id, if any.
    pub group_instance_id: Option<Box<str>>,
    /// The client id.
    pub client_id: Box<str>,
    /// The client host.
    pub client_host: Box<str>,
    /// The partitions assigned to the member, by topic name (consumer protocol;
    /// for KIP-848 members, the assigned topics whose names are known).
    pub assignment: Vec<(Arc<str>, Vec<i32>)>,
    /// A KIP-848 member's assignment as the log has it, by topic id; resolved
    /// into `assignment` through the topic ids offset commits carry.
    pub assignment_by_id: Vec<(Uuid, Vec<i32>)>,
    /// A streams group's member: its process, endpoint and tasks.
    pub streams: Option<Box<StreamsMember>>,
}

/// A group's metadata.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupInfo {
    /// `consumer`, `connect`, … (`consumer` for KIP-848 groups).
    pub protocol_type: Arc<str>,
    /// The assignment protocol (`range`, `uniform`, …), when chosen.
    pub protocol: Option<Arc<str>>,
    /// The generation (the group epoch for KIP-848 groups).
    pub generation: i32,
    /// When the group last changed state, in ms, when known.
    pub state_timestamp: Option<i64>,
    /// The members, when known (`None` in admin-API mode, which does not
    /// describe groups).
    pub members: Option<Vec<Member>>,
    /// The state a broker reported (admin-API mode); `None` when read from the log.
    pub reported_state: Option<Arc<str>>,
    /// A streams group's topology, once its record is read.
    pub topology: Option<Arc<Topology>>,
}

impl GroupInfo {
    /// The group's state: as the broker reported it, or as far as the log tells
    /// (`Empty` without members, else `Stable`: the log does not record
    /// rebalances in progress).
    pub fn state(&self) -> &str {
        match (&self.reported_state, &self.members) {
            (Some(state), _) => state,
            (None, Some(m)) if !m.is_empty() => "Stable",
            (None, _) => "Empty",
        }
    }

    /// The members, or none when unknown.
    pub fn members(&self) -> &[Member] {
        self.members.as_deref().unwrap_or_default()
    }
}

/// Everything known about one group.
#[derive(Debug, Clone, Default)]
pub struct Group {
    /// Committed offsets by topic, then by partition (index = partition id):
    /// updating an offset looks the topic up by `&str` and indexes, with no
    /// interning and no allocation.
    offsets: FastMap<Arc<str>, Vec<Option<CommittedOffset>>>,
    /// The group's metadata, when the log has it: shared with the
    /// snapshots that hold it, copied on the next change.
    pub info: Option<Arc<GroupInfo>>,
    /// Offset commits applied for this group since kshard started reading.
    pub commits: u64,
}

impl Group {
    pub(crate) fn is_empty(&self) -> bool {
        self.offsets.is_empty() && self.info.is_none()
    }

    /// Every committed offset: topic, partition, offset.
    pub fn offsets(&self) -> impl Iterator<Item = (&Arc<str>, i32, &CommittedOffset)> {
        self.offsets.iter().flat_map(|(topic, partitions)| {
            partitions.iter().enumerate().filter_map(move |(p, c)| c.as_ref().map(|c| (topic, p as i32, c)))
        })
    }

    /// The committed offsets topic by topic: each topic with its partitions.
    pub fn by_topic(&self) -> impl Iterator<Item = (&Arc<str>, impl Iterator<Item = (i32, &CommittedOffset)>)> {
        self.offsets.iter().map(|(topic, partitions)| {
            (topic, partitions.iter().enumerate().filter_map(|(p, c)| c.as_ref().map(|c| (p as i32, c))))
        })
    }

    /// The topics the group has offsets for.
    pub fn topics(&self) -> impl Iterator<Item = &Arc<str>> {
        self.offsets.keys()
    }

    /// The committed offset of one partition.
    pub fn offset(&self, topic: &str, partition: i32) -> Option<&CommittedOffset> {
        self.offsets.get(topic)?.get(usize::try_from(partition).ok()?)?.as_ref()
    }

    /// Number of partitions with a committed offset.
    pub fn offset_count(&self) -> usize {
        self.offsets.values().map(|p| p.iter().flatten().count()).sum()
    }

    pub(crate) fn set_offset(&mut self, names: &mut Names, topic: &str, partition: i32, committed: CommittedOffset) {
        // Partition ids come from the wire: a negative one is kept out, and a huge
        // one cannot make the vector huge (Kafka topics have at most ~10^5 partitions).
        let Ok(index) = usize::try_from(partition) else { return };
        if index > MAX_PARTITION_INDEX {
            return;
        }
        let partitions = match self.offsets.get_mut(topic) {
            Some(p) => p,
            None => self.offsets.entry(names.intern(topic)).or_default(),
        };
        if partitions.len() <= index {
            partitions.resize(index + 1, None);
        }
        partitions[index] = Some(committed);
    }

    pub(crate) fn delete_offset(&mut self, topic: &str, partition: i32) {
        let Some(partitions) = self.offsets.get_mut(topic) else { return };
        if let Some(slot) = usize::try_from(partition).ok().and_then(|i| partitions.get_mut(i)) {
            *slot = None;
        }
        while partitions.last().is_some_and(Option::is_none) {
            partitions.pop();
        }
        if partitions.is_empty() {
            self.offsets.remove(topic);
        }
    }
}

/// Tasks by subtopology id, each with its partitions.
pub type TaskList = Vec<(Box<str>, Vec<i32>)>;

/// A streams group's topology, as its members last declared it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Topology {
    /// The topology's epoch.
    pub epoch: i32,
    /// Its subtopologies.
    pub subtopologies: Vec<SubtopologyInfo>,
}

/// One subtopology: what its tasks read and keep.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SubtopologyInfo {
    /// Its id (`0`, `1`, …).
    pub id: Box<str>,
    /// The topics its tasks read.
    pub source_topics: Vec<Arc<str>>,
    /// The internal repartition topics its tasks read.
    pub repartition_source_topics: Vec<Arc<str>>,
    /// The changelog topics of its state stores.
    pub state_changelog_topics: Vec<Arc<str>>,
}

/// What a streams group's member is beside a client: its process, its
/// endpoint for interactive queries, and its tasks.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct StreamsMember {
    /// The Kafka Streams process the member's thread belongs to.
    pub process_id: Box<str>,
    /// `host:port` for interactive queries, when the application set one.
    pub endpoint: Option<Box<str>>,
    /// The tasks it processes.
    pub active: TaskList,
    /// The standby tasks it keeps (state replicas, for fail-over).
    pub standby: TaskList,
    /// The warm-up tasks it is catching up.
    pub warmup: TaskList,
}
