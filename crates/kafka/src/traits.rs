//! The seams other crates put in front of Kafka, each a trait the real
//! clients here implement: [`BrokerAdmin`] (metadata, watermarks, the group
//! calls), [`RecordSource`] (a reader of one topic's partitions, handing out
//! [`SourceEvent`]s) and [`RecordTimes`] (record timestamps at offsets).
//! Callers take the traits, so their tests drive them with scripted fakes and
//! no broker. Which brokers, and when to connect, is the caller's business.

use crate::TopicPartitionOffset;
use std::collections::HashMap;
use std::time::Duration;

use crate::error::Error;
use crate::librdkafka::admin::Admin;
use crate::librdkafka::groups::{FetchedOffsets, GroupDescription, GroupListing};
use crate::librdkafka::timestamps::{TimesRead, TimestampReader};
use crate::read_record::ReadEvent;
use crate::reader::PartitionReader;
use crate::topic_partition::TopicPartition;
use crate::wire::fetch_times::FetchTimes;
use crate::wire::records::Transactional;

/// (low, high) watermarks by partition.
pub type WatermarkMap = HashMap<TopicPartition, (i64, i64)>;

/// What a caller asks of the brokers besides reading records. Each call is
/// one round of requests, blocking until answered or its client's timeout.
pub trait BrokerAdmin: Send {
    /// Partitions of `topic`, `None` when it does not exist.
    fn partition_count(&self, topic: &str) -> Result<Option<i32>, Error>;
    /// Every topic and its partition count (one Metadata request).
    fn topics(&self) -> Result<HashMap<String, i32>, Error>;
    /// The leader broker of each partition of `topic`.
    fn leaders(&self, topic: &str) -> Result<HashMap<i32, i32>, Error>;
    /// (low, high) watermarks of `partitions`; partitions the brokers gave none
    /// for are left out.
    fn watermarks(&self, partitions: &[TopicPartition]) -> Result<WatermarkMap, Error>;
    /// Every group (ListGroups).
    fn list_groups(&self) -> Result<Vec<GroupListing>, Error>;
    /// Groups' state and members (DescribeGroups).
    fn describe_groups(&self, groups: &[String]) -> Result<Vec<GroupDescription>, Error>;
    /// Groups' committed offsets (OffsetFetch).
    fn group_offsets(&self, groups: &[String]) -> Result<Vec<FetchedOffsets>, Error>;
}

impl BrokerAdmin for Admin {
    fn partition_count(&self, topic: &str) -> Result<Option<i32>, Error> {
        Admin::partition_count(self, topic)
    }
    fn topics(&self) -> Result<HashMap<String, i32>, Error> {
        Admin::topics(self)
    }
    fn leaders(&self, topic: &str) -> Result<HashMap<i32, i32>, Error> {
        Admin::leaders(self, topic)
    }
    fn watermarks(&self, partitions: &[TopicPartition]) -> Result<WatermarkMap, Error> {
        Admin::watermarks(self, partitions)
    }
    fn list_groups(&self) -> Result<Vec<GroupListing>, Error> {
        Admin::list_groups(self)
    }
    fn describe_groups(&self, groups: &[String]) -> Result<Vec<GroupDescription>, Error> {
        Admin::describe_groups(self, groups)
    }
    fn group_offsets(&self, groups: &[String]) -> Result<Vec<FetchedOffsets>, Error> {
        Admin::group_offsets(self, groups)
    }
}

/// What a [`RecordSource`] delivers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SourceEvent<'a> {
    /// The record at `offset` of `partition`.
    Record {
        /// Its partition.
        partition: i32,
        /// Its offset.
        offset: i64,
        /// Its key.
        key: Option<&'a [u8]>,
        /// Its value.
        value: Option<&'a [u8]>,
        /// Its part in a transaction (`None`: written outside one, or read
        /// by a reader of committed records).
        transactional: Option<Transactional>,
    },
    /// Everything `partition` holds now was delivered.
    EndOfPartition {
        /// The partition.
        partition: i32,
        /// The next offset, when the client knows it.
        next_offset: Option<i64>,
    },
    /// Nothing arrived in time.
    Idle,
}

/// A reader of one topic's partitions. Events of a partition come in offset
/// order; the source owns its connections and drops them with itself.
pub trait RecordSource {
    /// Waits at most `wait` for the next event and hands it to `take` (a
    /// record's bytes are the client's, borrowed for the call).
    fn poll(&mut self, wait: Duration, take: &mut dyn FnMut(SourceEvent<'_>)) -> Result<(), Error>;
    /// Reads `partitions` too, each from its offset (`None`: the earliest).
    fn add_partitions(&mut self, partitions: &[(i32, Option<i64>)]) -> Result<(), Error>;
}

/// A [`PartitionReader`] of one topic, as a [`RecordSource`].
#[derive(Debug)]
pub struct TopicReader {
    reader: PartitionReader,
    topic: String,
}

impl TopicReader {
    /// `reader`, whose partitions are all of `topic`.
    pub fn new(reader: PartitionReader, topic: impl Into<String>) -> Self {
        TopicReader { reader, topic: topic.into() }
    }
}

/// Records handed over in one [`RecordSource::poll`] at most: while
/// catching up, the caller's loop runs once per run of records, not per
/// record.
const RUN: usize = 512;

impl RecordSource for TopicReader {
    fn poll(&mut self, wait: Duration, take: &mut dyn FnMut(SourceEvent<'_>)) -> Result<(), Error> {
        let mut wait = wait;
        for _ in 0..RUN {
            match self.reader.poll(wait)? {
                ReadEvent::Record(r) => take(SourceEvent::Record {
                    partition: r.partition(),
                    offset: r.offset(),
                    key: r.key(),
                    value: r.value(),
                    transactional: r.transactional(),
                }),
                ReadEvent::EndOfPartition { partition, next_offset } => {
                    take(SourceEvent::EndOfPartition { partition, next_offset });
                    return Ok(());
                }
                ReadEvent::Idle => {
                    // After a record, nothing more ready only ends the run.
                    if !wait.is_zero() {
                        take(SourceEvent::Idle);
                    }
                    return Ok(());
                }
            }
            wait = Duration::ZERO;
        }
        Ok(())
    }

    fn add_partitions(&mut self, partitions: &[(i32, Option<i64>)]) -> Result<(), Error> {
        self.reader.add_partitions(&self.topic, partitions)
    }
}

/// Reads the timestamps of records at given offsets (lag in seconds).
pub trait RecordTimes: Send {
    /// The records at (or first after) each of `wanted` that gave one within
    /// `timeout`, and the offsets read that gave none.
    fn read(&self, wanted: &[TopicPartitionOffset], timeout: Duration) -> Result<TimesRead, Error>;
}

impl RecordTimes for TimestampReader {
    fn read(&self, wanted: &[TopicPartitionOffset], timeout: Duration) -> Result<TimesRead, Error> {
        TimestampReader::read(self, wanted, timeout)
    }
}

impl RecordTimes for FetchTimes {
    fn read(&self, wanted: &[TopicPartitionOffset], timeout: Duration) -> Result<TimesRead, Error> {
        FetchTimes::read(self, wanted, timeout)
    }
}

/// The share-group admin calls (KIP-932), as `scrape_mode: admin_api` makes them.
pub trait ShareGroupAdmin: Send {
    /// Every share group (none on brokers without share groups).
    fn list_share_groups(&self) -> Result<Vec<crate::ShareGroupListing>, Error>;
    /// Each group's share-partitions: start offset and Kafka's lag.
    fn share_group_offsets(&self, groups: &[String]) -> Result<Vec<crate::ShareGroupOffsets>, Error>;
    /// Each group's state and members.
    fn describe_share_groups(&self, groups: &[String]) -> Result<Vec<crate::ShareGroupDescription>, Error>;
}

impl ShareGroupAdmin for crate::ShareGroupsAdmin {
    fn list_share_groups(&self) -> Result<Vec<crate::ShareGroupListing>, Error> {
        self.list()
    }
    fn share_group_offsets(&self, groups: &[String]) -> Result<Vec<crate::ShareGroupOffsets>, Error> {
        self.offsets(groups)
    }
    fn describe_share_groups(&self, groups: &[String]) -> Result<Vec<crate::ShareGroupDescription>, Error> {
        self.describe(groups)
    }
}

/// What kminion's cluster, broker and topic families show of a cluster.
pub trait ClusterDescriber: Send {
    /// The brokers and topics, each topic's values of `config_keys`, and
    /// with `log_dirs` the sizes on the brokers' log directories.
    fn describe_cluster(&self, config_keys: &[String], log_dirs: bool) -> Result<crate::ClusterInfo, Error>;
}

impl ClusterDescriber for crate::ClusterAdmin {
    fn describe_cluster(&self, config_keys: &[String], log_dirs: bool) -> Result<crate::ClusterInfo, Error> {
        self.describe(config_keys, log_dirs)
    }
}
