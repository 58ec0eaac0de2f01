//! `kshard-kafka`: the only kshard crate that talks to Kafka.
//!
//! A [`PartitionReader`] reads chosen partitions from chosen offsets with
//! manual assignment and reports when each reaches its end: by default with
//! kshard's own Fetch client (`fetcher.rs`: one connection per broker shared
//! by every reader of a process, Fetch sessions, batches walked in place by
//! `records.rs`), or with librdkafka's consumer ([`ReaderKind`]). The rest
//! wraps rdkafka (with its bundled librdkafka: Debian's 2.0.2 cannot talk to
//! every broker kshard supports) behind small, blocking types: a
//! [`RecordWriter`] that produces keyed records (null values included) to
//! explicit partitions, [`Admin`] calls (create and delete topics, metadata,
//! batched watermarks, and ListGroups/OffsetFetch for consumer groups
//! through librdkafka's admin API), a [`GroupConsumer`] that reads and
//! commits like any application (classic or KIP-848 protocol), and
//! committers that write offsets through the group coordinator without
//! consuming: plain ([`OffsetCommitter`]) and inside transactions
//! ([`TransactionalCommitter`]). [`FetchTimes`] reads record timestamps with
//! Fetch requests of its own. All clients log through `tracing`.
//!
//! Nothing here decodes record contents; that is `kshard-offsets`' job.

mod admin;
mod broker_link;
mod committer;
mod config;
mod context;
mod error;
mod fetch_response;
mod fetch_session;
mod fetch_times;
mod fetcher;
mod group_consumer;
mod groups;
mod rdkafka_reader;
mod reader;
mod record_batch;
mod records;
mod scram;
mod security;
mod timestamps;
mod traits;
mod writer;

pub use admin::{Admin, OffsetSpec, TopicSpec};
pub use committer::{OffsetCommitter, Offsets, TransactionEnd, TransactionalCommitter};
pub use config::{ClientSettings, ReaderKind};
pub use error::{Error, Result};
pub use fetch_times::FetchTimes;
pub use group_consumer::{GroupConsumer, GroupProtocol};
pub use groups::{FetchedOffsets, GroupDescription, GroupListing, MemberDescription};
pub use reader::{Isolation, PartitionReader, ReadEvent, ReadRecord};
pub use records::Transactional;
pub use security::{Mechanism, Protocol, Sasl, Security, Tls};
pub use timestamps::{RecordTime, TimesRead, TimestampReader};
pub use traits::{BrokerAdmin, RecordSource, RecordTimes, SourceEvent, TopicReader, WatermarkMap};
pub use writer::{Delivery, RecordWriter};

/// The topic Kafka keeps committed offsets and group metadata in.
pub const CONSUMER_OFFSETS_TOPIC: &str = "__consumer_offsets";

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
