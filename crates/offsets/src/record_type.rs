//! The record types of `__consumer_offsets`, named as in Kafka's schemas.

/// What a key's opening int16 says the record is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RecordType {
    /// 0 and 1: `OffsetCommitKey`/`OffsetCommitValue`.
    OffsetCommit,
    /// 2: `GroupMetadataKey`/`GroupMetadataValue`.
    GroupMetadata,
    /// 3.
    ConsumerGroupMetadata,
    /// 4.
    ConsumerGroupPartitionMetadata,
    /// 5.
    ConsumerGroupMemberMetadata,
    /// 6.
    ConsumerGroupTargetAssignmentMetadata,
    /// 7.
    ConsumerGroupTargetAssignmentMember,
    /// 8.
    ConsumerGroupCurrentMemberAssignment,
    /// 10.
    ShareGroupMemberMetadata,
    /// 11.
    ShareGroupMetadata,
    /// 12.
    ShareGroupTargetAssignmentMetadata,
    /// 13.
    ShareGroupTargetAssignmentMember,
    /// 14.
    ShareGroupCurrentMemberAssignment,
    /// 15.
    ShareGroupStatePartitionMetadata,
    /// 16.
    ConsumerGroupRegularExpression,
    /// 17.
    StreamsGroupMetadata,
    /// 19.
    StreamsGroupMemberMetadata,
    /// 20.
    StreamsGroupTargetAssignmentMetadata,
    /// 21.
    StreamsGroupTargetAssignmentMember,
    /// 22.
    StreamsGroupCurrentMemberAssignment,
    /// 23.
    StreamsGroupTopology,
    /// 24.
    StreamsGroupTargetAssignmentResolvedTopicIds,
    /// Retired (9, 18), negative, or newer than this codec.
    Unknown(i16),
}

impl RecordType {
    /// The type a key's opening int16 names.
    pub fn from_key_version(v: i16) -> Self {
        use RecordType::*;
        match v {
            0 | 1 => OffsetCommit,
            2 => GroupMetadata,
            3 => ConsumerGroupMetadata,
            4 => ConsumerGroupPartitionMetadata,
            5 => ConsumerGroupMemberMetadata,
            6 => ConsumerGroupTargetAssignmentMetadata,
            7 => ConsumerGroupTargetAssignmentMember,
            8 => ConsumerGroupCurrentMemberAssignment,
            10 => ShareGroupMemberMetadata,
            11 => ShareGroupMetadata,
            12 => ShareGroupTargetAssignmentMetadata,
            13 => ShareGroupTargetAssignmentMember,
            14 => ShareGroupCurrentMemberAssignment,
            15 => ShareGroupStatePartitionMetadata,
            16 => ConsumerGroupRegularExpression,
            17 => StreamsGroupMetadata,
            19 => StreamsGroupMemberMetadata,
            20 => StreamsGroupTargetAssignmentMetadata,
            21 => StreamsGroupTargetAssignmentMember,
            22 => StreamsGroupCurrentMemberAssignment,
            23 => StreamsGroupTopology,
            24 => StreamsGroupTargetAssignmentResolvedTopicIds,
            other => Unknown(other),
        }
    }

    /// The int16 a key of this type opens with (1 for offset commits, the current one).
    pub fn key_version(self) -> i16 {
        use RecordType::*;
        match self {
            OffsetCommit => 1,
            GroupMetadata => 2,
            ConsumerGroupMetadata => 3,
            ConsumerGroupPartitionMetadata => 4,
            ConsumerGroupMemberMetadata => 5,
            ConsumerGroupTargetAssignmentMetadata => 6,
            ConsumerGroupTargetAssignmentMember => 7,
            ConsumerGroupCurrentMemberAssignment => 8,
            ShareGroupMemberMetadata => 10,
            ShareGroupMetadata => 11,
            ShareGroupTargetAssignmentMetadata => 12,
            ShareGroupTargetAssignmentMember => 13,
            ShareGroupCurrentMemberAssignment => 14,
            ShareGroupStatePartitionMetadata => 15,
            ConsumerGroupRegularExpression => 16,
            StreamsGroupMetadata => 17,
            StreamsGroupMemberMetadata => 19,
            StreamsGroupTargetAssignmentMetadata => 20,
            StreamsGroupTargetAssignmentMember => 21,
            StreamsGroupCurrentMemberAssignment => 22,
            StreamsGroupTopology => 23,
            StreamsGroupTargetAssignmentResolvedTopicIds => 24,
            Unknown(v) => v,
        }
    }

    /// snake_case of the schema name without `Key`/`Value`, e.g. `offset_commit`.
    pub fn name(self) -> &'static str {
        use RecordType::*;
        match self {
            OffsetCommit => "offset_commit",
            GroupMetadata => "group_metadata",
            ConsumerGroupMetadata => "consumer_group_metadata",
            ConsumerGroupPartitionMetadata => "consumer_group_partition_metadata",
            ConsumerGroupMemberMetadata => "consumer_group_member_metadata",
            ConsumerGroupTargetAssignmentMetadata => "consumer_group_target_assignment_metadata",
            ConsumerGroupTargetAssignmentMember => "consumer_group_target_assignment_member",
            ConsumerGroupCurrentMemberAssignment => "consumer_group_current_member_assignment",
            ShareGroupMemberMetadata => "share_group_member_metadata",
            ShareGroupMetadata => "share_group_metadata",
            ShareGroupTargetAssignmentMetadata => "share_group_target_assignment_metadata",
            ShareGroupTargetAssignmentMember => "share_group_target_assignment_member",
            ShareGroupCurrentMemberAssignment => "share_group_current_member_assignment",
            ShareGroupStatePartitionMetadata => "share_group_state_partition_metadata",
            ConsumerGroupRegularExpression => "consumer_group_regular_expression",
            StreamsGroupMetadata => "streams_group_metadata",
            StreamsGroupMemberMetadata => "streams_group_member_metadata",
            StreamsGroupTargetAssignmentMetadata => "streams_group_target_assignment_metadata",
            StreamsGroupTargetAssignmentMember => "streams_group_target_assignment_member",
            StreamsGroupCurrentMemberAssignment => "streams_group_current_member_assignment",
            StreamsGroupTopology => "streams_group_topology",
            StreamsGroupTargetAssignmentResolvedTopicIds => "streams_group_target_assignment_resolved_topic_ids",
            Unknown(_) => "unknown",
        }
    }

    /// True for the KIP-848 consumer-group types (3–8 and 16), decoded in full.
    pub fn is_consumer_group(self) -> bool {
        matches!(self.key_version(), 3..=8 | 16) && !matches!(self, RecordType::Unknown(_))
    }

    /// True for the types decoded with the KIP-848 rules (flexible v0, later
    /// versions add tagged fields only): consumer, share and streams groups.
    pub fn is_kip848(self) -> bool {
        self.is_consumer_group() || self.is_share_group() || self.is_streams_group()
    }

    /// True for share-group types (10–15).
    pub fn is_share_group(self) -> bool {
        matches!(self.key_version(), 10..=15) && !matches!(self, RecordType::Unknown(_))
    }

    /// True for the streams-group types with a schema (17, 19–23); 24 has none
    /// in Kafka 4.4 and is kept raw.
    pub fn is_streams_group(self) -> bool {
        matches!(self.key_version(), 17 | 19..=23) && !matches!(self, RecordType::Unknown(_))
    }
}
