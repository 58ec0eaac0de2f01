//! `kshard-kafka`: the only kshard crate that talks to Kafka.
//!
//! It wraps rdkafka (with its bundled librdkafka: Debian's 2.0.2 cannot talk to
//! every broker kshard supports) behind small, blocking types: a
//! [`PartitionReader`] that reads chosen partitions from chosen offsets with
//! manual assignment and reports when each reaches its end, a [`RecordWriter`]
//! that produces keyed records (null values included) to explicit partitions,
//! [`Admin`] calls (create and delete topics, metadata, batched watermarks, and
//! ListGroups/OffsetFetch for consumer groups through librdkafka's admin API),
//! a [`GroupConsumer`] that reads and commits like any application (classic or
//! KIP-848 protocol), and committers that write offsets through the group
//! coordinator without consuming: plain ([`OffsetCommitter`]) and inside
//! transactions ([`TransactionalCommitter`]).
//! Everything else in kshard sees these types, so a faster fetch path can replace
//! rdkafka here alone. All clients log through `tracing`.
//!
//! Nothing here decodes record contents; that is `kshard-offsets`' job.

mod admin;
mod committer;
mod config;
mod context;
mod error;
mod group_consumer;
mod groups;
mod reader;
mod writer;

pub use admin::{Admin, OffsetSpec, TopicSpec};
pub use committer::{OffsetCommitter, Offsets, TransactionEnd, TransactionalCommitter};
pub use config::ClientSettings;
pub use error::{Error, Result};
pub use group_consumer::{GroupConsumer, GroupProtocol};
pub use groups::{GroupDescription, GroupListing, GroupOffsets, MemberDescription};
pub use reader::{PartitionReader, ReadEvent, ReadRecord};
pub use writer::RecordWriter;

/// The topic Kafka keeps committed offsets and group metadata in.
pub const CONSUMER_OFFSETS_TOPIC: &str = "__consumer_offsets";

/// The partition of `__consumer_offsets` that holds `group`'s records, as Kafka
/// computes it: `abs(group.hashCode()) % partitions` with Java's `String.hashCode`
/// over UTF-16 code units (and `abs(i32::MIN)` taken as 0, like Kafka's
/// `Utils.abs`).
///
/// # Panics
/// When `partitions` is not positive: a topic always has at least one partition.
pub fn offsets_partition_for(group: &str, partitions: i32) -> i32 {
    assert!(partitions > 0, "a topic has at least one partition");
    let hash = group.encode_utf16().fold(0i32, |h, unit| h.wrapping_mul(31).wrapping_add(i32::from(unit)));
    let abs = if hash == i32::MIN { 0 } else { hash.abs() };
    abs % partitions
}

#[cfg(test)]
mod tests {
    use super::offsets_partition_for;

    #[test]
    fn partition_matches_java_string_hash_code() {
        // "".hashCode() == 0; "a".hashCode() == 97; "my-group".hashCode() == 1278627868
        // (values from Java's String.hashCode definition: s[0]*31^(n-1) + ... + s[n-1]).
        assert_eq!(offsets_partition_for("", 50), 0);
        assert_eq!(offsets_partition_for("a", 50), 97 % 50);
        let h: i64 = "my-group".bytes().fold(0i64, |h, b| (h * 31 + i64::from(b)) % (1 << 32));
        let h = h as u32 as i32;
        assert_eq!(offsets_partition_for("my-group", 50), h.abs() % 50);
        // Non-BMP characters count as two UTF-16 units, as in Java.
        assert!(offsets_partition_for("grüppe-🦀", 50) < 50);
    }
}
