//! `kshard-offsets`: a codec for the records Kafka writes to `__consumer_offsets`
//! and, for share groups, to `__share_group_state`.
//!
//! [`Record::decode`] takes a record's key and value bytes and returns a typed,
//! borrowed view: strings and bytes point into the input, and the offset-commit
//! path allocates nothing. It reads every version Kafka has written — offset
//! commits v0–v4 (with v4's tagged topic id), classic group metadata v0–v4 with
//! its members (and their consumer-protocol subscriptions and assignments, on
//! demand), the KIP-848 consumer-group records, the share-group records (types
//! 10–15) and the streams-group records (17, 19–23, with tasks and topology) in
//! full; types never seen before come back as [`RecordKey::Opaque`] rather than
//! as errors, so a newer broker never stops a reader. Malformed bytes are a
//! [`DecodeError`] naming the part, field and byte offset; nothing panics and no
//! allocation is sized by an unchecked length from the wire.
//!
//! [`ShareStateRecord::decode`] reads `__share_group_state` (KIP-932): each
//! share-partition's snapshot and updates — start offset and the delivery state
//! of the records after it ([`StateBatch`]) — in the layout of Kafka 4.2+.
//!
//! The encoders ([`Record::encode`], [`ShareStateRecord::encode`]) write the
//! same layouts, for tests and load generation. This crate does no I/O.
//!
//! Layout: [`cursor`], the one checked big-endian byte cursor (public: kshard's
//! Kafka wire client, recovery-log records and store keys read with it too);
//! `wire`, the schema primitives on it (and their writer), whose errors name the
//! field; one module per schema family (`offset_commit`, `group_metadata`,
//! `consumer_group`, `consumer_protocol`, `share_group`, `streams_group`); `record`, which dispatches on the
//! key's type; and `share_state`, the share coordinator's topic.

mod consumer_group;
mod consumer_protocol;
pub mod cursor;
mod error;
mod group_metadata;
mod hex;
mod offset_commit;
mod record;
mod record_type;
mod share_group;
mod share_state;
mod streams_group;
mod uuid;
mod wire;

pub use consumer_group::{
    AssignmentMetadataValue, ClassicMemberMetadata, ClassicProtocol, ConsumerGroupCurrentMemberAssignmentValue,
    ConsumerGroupMemberMetadataValue, ConsumerGroupMetadataValue, ConsumerGroupPartitionMetadataValue,
    ConsumerGroupRegularExpressionValue, ConsumerGroupTargetAssignmentMemberValue,
    ConsumerGroupTargetAssignmentMetadataValue, GroupIdKey, MemberKey, PartitionMetadata, RegularExpressionKey,
    TopicIdPartitions, TopicMetadata,
};
pub use consumer_protocol::{Assignment, MAX_TOPIC_NAME, Subscription, TopicPartitions, is_legal_topic_name};
pub use error::{DecodeError, ErrorKind, Part};
pub use group_metadata::{GroupMetadataKey, GroupMetadataValue, MemberMetadata};
pub use offset_commit::{OffsetCommitKey, OffsetCommitValue};
pub use record::{Record, RecordKey, RecordValue};
pub use record_type::RecordType;
pub use share_group::{
    NamedTopicPartitions, ShareGroupCurrentMemberAssignmentValue, ShareGroupMemberMetadataValue,
    ShareGroupMetadataValue, ShareGroupStatePartitionMetadataValue, ShareGroupTargetAssignmentMemberValue,
};
pub use share_state::{
    DeliveryState, SharePartitionKey, ShareSnapshotValue, ShareStateKey, ShareStateRecord, ShareStateValue,
    ShareUpdateValue, StateBatch,
};
pub use streams_group::{
    CopartitionGroup, Endpoint, KeyValue, StreamsGroupCurrentMemberAssignmentValue, StreamsGroupMemberMetadataValue,
    StreamsGroupMetadataValue, StreamsGroupTargetAssignmentMemberValue, StreamsGroupTopologyValue, Subtopology,
    TaskIds, Tasks, TopicInfo,
};
pub use uuid::Uuid;
