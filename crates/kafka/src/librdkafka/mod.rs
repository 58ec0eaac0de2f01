//! The clients built on librdkafka (through the rdkafka crate, with its
//! bundled librdkafka): [`admin`] (topics, metadata, batched watermarks,
//! ListOffsets, DeleteRecords), [`groups`] (ListGroups, DescribeGroups and
//! OffsetFetch through librdkafka's C admin API, which rdkafka does not wrap:
//! the one `unsafe` module), [`writer`] (a producer to explicit partitions),
//! [`committer`] (offset commits with and without transactions),
//! [`group_consumer`] (a member of a consumer group), [`rdkafka_reader`]
//! (the fallback partition reader), [`timestamps`] (the fallback record-time
//! reader) and [`context`] (what every such client shares: its logging and
//! the last TLS or authentication failure). Each is a small blocking type.

pub(crate) mod admin;
pub(crate) mod committer;
pub(crate) mod context;
pub(crate) mod group_consumer;
pub(crate) mod groups;
pub(crate) mod rdkafka_reader;
pub(crate) mod timestamps;
pub(crate) mod writer;
