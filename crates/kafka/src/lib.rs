//! `kshard-kafka`: the only kshard crate that talks to Kafka.
//!
//! Two clients, each in its folder, so which one does what is visible:
//! - `wire/`: kshard's own requests (Fetch, ListOffsets, Metadata, SASL, TLS
//!   on `kafka-protocol`'s messages). The default [`PartitionReader`] (one
//!   connection per broker shared by every reader of a process, Fetch
//!   sessions, batches walked in place), [`FetchTimes`] (record
//!   timestamps), and the [`Writer`] with its [`Producer`]s: idempotent and
//!   transactional Produce (InitProducerId, AddPartitionsToTxn, EndTxn),
//!   one connection per broker for every producer of a process.
//! - `librdkafka/`: rdkafka with its bundled librdkafka (Debian's 2.0.2
//!   cannot talk to every broker kshard supports), behind small blocking
//!   types: [`Admin`] (topics, metadata, batched watermarks, and
//!   ListGroups/DescribeGroups/OffsetFetch through librdkafka's admin API),
//!   a [`RecordWriter`] that produces keyed records (null values included)
//!   to explicit partitions, a [`GroupConsumer`] (classic or KIP-848),
//!   committers that write offsets through the group coordinator without
//!   consuming ([`OffsetCommitter`], [`TransactionalCommitter`]), and the
//!   fallbacks for what only librdkafka does (GSSAPI, OAUTHBEARER,
//!   keystores…): its consumer as a partition reader and [`TimestampReader`].
//!
//! Beside them: [`ClientSettings`] and its typed [`Security`] (TLS, SASL),
//! which both clients read; [`PartitionReader`] (`reader.rs`), which picks
//! the client ([`ReaderKind`]); and the seams other crates take instead of
//! the clients ([`BrokerAdmin`], [`RecordSource`], [`RecordTimes`]). All
//! clients log through `tracing`. Nothing here decodes record contents;
//! that is `kshard-offsets`' job.

mod client;
mod config;
mod delivery;
mod error;
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub mod fuzz;
mod librdkafka;
mod read_record;
mod reader;
mod retry;
mod security;
mod topic_partition;
mod traffic;
mod traits;
mod wire;

pub use client::Client;
pub use config::{ClientSettings, ReaderKind, UnknownReader};
pub use delivery::Delivery;
pub use error::{Error, Result};
pub use librdkafka::admin::{Admin, OffsetSpec, TopicSpec};
pub use librdkafka::committer::{OffsetCommitter, Offsets, TransactionEnd, TransactionalCommitter};
pub use librdkafka::group_consumer::{GroupConsumer, GroupProtocol};
pub use librdkafka::groups::{FetchedOffsets, GroupDescription, GroupListing, MemberDescription};
pub use librdkafka::timestamps::{RecordTime, TimesRead, TimestampReader};
pub use librdkafka::writer::RecordWriter;
pub use read_record::{Isolation, ReadEvent, ReadRecord, RecordRun};
pub use reader::PartitionReader;
pub use security::{Mechanism, Protocol, Sasl, Security, Tls};
pub use topic_partition::{TopicPartition, TopicPartitionOffset};
pub use traffic::{Traffic, TrafficTotals};
pub use traits::{
    BrokerAdmin, ClusterDescriber, RecordSource, RecordTimes, ShareGroupAdmin, SourceEvent, TopicReader, WatermarkMap,
};
pub use wire::admin::WireAdmin;
pub use wire::cluster_admin::{BrokerInfo, ClusterAdmin, ClusterInfo, LogDirSizes, PartitionReplicas, TopicInfo};
pub use wire::fetch_times::FetchTimes;
pub use wire::out_batch::{BatchMark, OutBatch};
pub use wire::produce::OutRecord;
pub use wire::producer::{Producer, TRANSACTION_TIMEOUT};
pub use wire::records::Transactional;
pub use wire::share_groups::{
    ShareGroupDescription, ShareGroupListing, ShareGroupOffsets, ShareGroupsAdmin, ShareMember, ShareOffset,
};
pub use wire::writer::{DELIVERY_TIMEOUT, Writer};

/// The topic Kafka keeps committed offsets and group metadata in.
pub const CONSUMER_OFFSETS_TOPIC: &str = "__consumer_offsets";

/// The topic Kafka's share coordinator keeps share groups' delivery state in
/// (KIP-932); created when the first share group is.
pub const SHARE_GROUP_STATE_TOPIC: &str = "__share_group_state";

/// Java's `String.hashCode()`: `s[0]*31^(n-1) + … + s[n-1]` over UTF-16 code
/// units, wrapping like Java's `int`.
pub fn java_string_hash_code(s: &str) -> i32 {
    s.encode_utf16().fold(0i32, |h, unit| h.wrapping_mul(31).wrapping_add(i32::from(unit)))
}

/// The partition of `__consumer_offsets` that holds `group`'s records, as Kafka
/// computes it: `Utils.abs(group.hashCode()) % partitions`, where Kafka's
/// `Utils.abs` maps `Integer.MIN_VALUE` to 0.
///
/// # Panics
/// When `partitions` is not positive: a topic always has at least one partition.
pub fn offsets_partition_for(group: &str, partitions: i32) -> i32 {
    assert!(partitions > 0, "a topic has at least one partition");
    let hash = java_string_hash_code(group);
    let abs = if hash == i32::MIN { 0 } else { hash.abs() };
    abs % partitions
}

#[cfg(test)]
mod tests {
    use super::{java_string_hash_code, offsets_partition_for};

    #[test]
    fn partition_matches_java_string_hash_code() {
        // Printed by OpenJDK 17.0.15 (`java H.java` calling `name.hashCode()`,
        // and `(h == Integer.MIN_VALUE ? 0 : Math.abs(h)) % 50` as Kafka's
        // Utils.abs does): name, hashCode, partition of 50.
        let java = [
            ("", 0, 0),
            ("a", 97, 47),
            ("my-group", -1_906_497_762, 12),
            // The well-known string whose hash is Integer.MIN_VALUE.
            ("polygenelubricants", i32::MIN, 0),
            // Non-BMP characters count as two UTF-16 units, as in Java.
            ("grüppe-🦀", -1_039_948_261, 11),
            ("orders-consumer", -1_204_742_690, 40),
            ("GROUP_ÄÖÜ", 1_305_010_346, 46),
        ];
        for (name, hash, partition) in java {
            assert_eq!(java_string_hash_code(name), hash, "{name:?}.hashCode()");
            assert_eq!(offsets_partition_for(name, 50), partition, "partition of {name:?}");
        }
    }
}
