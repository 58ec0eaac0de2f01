//! The lag monitor's boundary with Kafka, as two traits: [`BrokerAdmin`]
//! (metadata, watermarks, and the group calls of `scrape_mode: admin_api`)
//! and [`OffsetsSource`] (a reader of the offsets topic's partitions). The
//! service's decisions — what the reader does with each event, when the
//! refresher tracks new partitions and how it reports a failure — take these,
//! so tests drive them with scripted fakes and no broker; [`Kafka`] connects
//! the real clients.

use std::collections::HashMap;
use std::time::Duration;

use kshard_kafka::{
    Admin, ClientSettings, Error, FetchTimes, Isolation, PartitionReader, ReadEvent, TimesRead, TimestampReader,
    Transactional,
};

/// (low, high) watermarks by (topic, partition).
pub type WatermarkMap = HashMap<(String, i32), (i64, i64)>;
use kshard_kafka::{FetchedOffsets, GroupDescription, GroupListing};

/// What the monitor asks of the brokers besides reading records.
pub trait BrokerAdmin: Send {
    /// Partitions of `topic`, `None` when it does not exist.
    fn partition_count(&self, topic: &str) -> Result<Option<i32>, Error>;
    /// Every topic and its partition count (one Metadata request).
    fn topics(&self) -> Result<HashMap<String, i32>, Error>;
    /// The leader broker of each partition of `topic`.
    fn leaders(&self, topic: &str) -> Result<HashMap<i32, i32>, Error>;
    /// (low, high) watermarks of `partitions`; partitions the brokers gave none
    /// for are left out.
    fn watermarks(&self, partitions: &[(String, i32)]) -> Result<WatermarkMap, Error>;
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
    fn watermarks(&self, partitions: &[(String, i32)]) -> Result<WatermarkMap, Error> {
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

/// What a reader of the offsets topic delivers.
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

/// A reader of the offsets topic's partitions.
pub trait OffsetsSource {
    /// Waits at most `wait` for the next event and hands it to `take` (a
    /// record's bytes are the client's, borrowed for the call).
    fn poll(&mut self, wait: Duration, take: &mut dyn FnMut(SourceEvent<'_>)) -> Result<(), Error>;
    /// Reads `partitions` too, each from its offset (`None`: the earliest).
    fn add_partitions(&mut self, partitions: &[(i32, Option<i64>)]) -> Result<(), Error>;
}

/// A [`PartitionReader`] of one topic.
pub struct TopicReader {
    reader: PartitionReader,
    topic: String,
}

/// Records handed over in one [`OffsetsSource::poll`] at most: while
/// catching up, the caller's loop runs once per run of records, not per
/// record.
const RUN: usize = 512;

impl OffsetsSource for TopicReader {
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
    fn read(&self, wanted: &[(String, i32, i64)], timeout: Duration) -> Result<TimesRead, Error>;
}

impl RecordTimes for TimestampReader {
    fn read(&self, wanted: &[(String, i32, i64)], timeout: Duration) -> Result<TimesRead, Error> {
        TimestampReader::read(self, wanted, timeout)
    }
}

impl RecordTimes for FetchTimes {
    fn read(&self, wanted: &[(String, i32, i64)], timeout: Duration) -> Result<TimesRead, Error> {
        FetchTimes::read(self, wanted, timeout)
    }
}

/// Makes the clients a worker uses, once per life of the worker.
pub trait Connector: Send + Sync {
    /// An admin client; its calls fail while the brokers cannot be reached.
    fn admin(&self) -> Result<Box<dyn BrokerAdmin>, Error>;
    /// An admin client the brokers have answered (a failed TLS handshake or
    /// authentication is reported at once, with its reason).
    fn checked_admin(&self) -> Result<Box<dyn BrokerAdmin>, Error>;
    /// A reader of `topic`'s `partitions`, each from its offset.
    fn reader(&self, topic: &str, partitions: &[(i32, Option<i64>)]) -> Result<Box<dyn OffsetsSource>, Error>;
    /// A reader of record timestamps.
    fn timestamps(&self) -> Result<Box<dyn RecordTimes>, Error>;
}

/// The real brokers.
pub struct Kafka {
    /// How to reach them.
    pub settings: ClientSettings,
    /// Timeout of each admin call.
    pub timeout: Duration,
}

impl Connector for Kafka {
    fn admin(&self) -> Result<Box<dyn BrokerAdmin>, Error> {
        Ok(Box::new(Admin::new(&self.settings, self.timeout)?))
    }

    fn checked_admin(&self) -> Result<Box<dyn BrokerAdmin>, Error> {
        Ok(Box::new(Admin::connect(&self.settings, self.timeout)?))
    }

    fn reader(&self, topic: &str, partitions: &[(i32, Option<i64>)]) -> Result<Box<dyn OffsetsSource>, Error> {
        // Every record, open transactions' too: the monitor sets their
        // commits aside until the marker, as Kafka's coordinator does, so
        // that a transaction left open holds back nothing else.
        let reader = PartitionReader::with_isolation(&self.settings, topic, partitions, 1024, Isolation::Uncommitted)?;
        Ok(Box::new(TopicReader { reader, topic: topic.to_owned() }))
    }

    /// kshard's own Fetch requests, over PLAINTEXT, TLS, SASL PLAIN and
    /// SCRAM (about 20 times less CPU than librdkafka's consumer for the
    /// same answers); librdkafka for what only it does (GSSAPI, OAUTHBEARER,
    /// keystores, certificate verification turned off…).
    fn timestamps(&self) -> Result<Box<dyn RecordTimes>, Error> {
        match FetchTimes::new(&self.settings)? {
            Some(fetch) => Ok(Box::new(fetch)),
            None => Ok(Box::new(TimestampReader::new(&self.settings)?)),
        }
    }
}
