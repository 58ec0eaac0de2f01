//! The lag monitor's clients: a [`Connector`] makes, once per life of a
//! worker, the admin client, the offsets topic's reader and the record
//! timestamps' reader it uses, as the seams `kshard-kafka` defines
//! ([`BrokerAdmin`], [`RecordSource`], [`RecordTimes`]). The service's
//! decisions take these, so tests drive them with scripted fakes and no
//! broker; [`Kafka`] connects the real clients.

use std::time::Duration;

use kshard_kafka::{
    Admin, Client, ClusterAdmin, ClusterDescriber, Error, FetchTimes, Isolation, PartitionReader, ShareGroupsAdmin,
    TimestampReader, TopicReader, WireAdmin,
};
pub use kshard_kafka::{BrokerAdmin, RecordSource, RecordTimes, ShareGroupAdmin, SourceEvent, WatermarkMap};

/// Makes the clients a worker uses, once per life of the worker.
pub trait Connector: Send + Sync {
    /// An admin client; its calls fail while the brokers cannot be reached.
    fn admin(&self) -> Result<Box<dyn BrokerAdmin>, Error>;
    /// An admin client the brokers have answered (a failed TLS handshake or
    /// authentication is reported at once, with its reason).
    fn checked_admin(&self) -> Result<Box<dyn BrokerAdmin>, Error>;
    /// A reader of `topic`'s `partitions`, each from its offset.
    fn reader(&self, topic: &str, partitions: &[(i32, Option<i64>)]) -> Result<Box<dyn RecordSource>, Error>;
    /// A reader of record timestamps.
    fn timestamps(&self) -> Result<Box<dyn RecordTimes>, Error>;
    /// The share-group admin calls, where kshard's own client can connect
    /// (`None`: not there, and share groups are left out of admin-API scrapes).
    fn share_admin(&self) -> Result<Option<Box<dyn ShareGroupAdmin>>, Error> {
        Ok(None)
    }
    /// The cluster's brokers, topics and log directories, where kshard's own
    /// client can connect (`None`: not there, and kminion's cluster, broker
    /// and topic families are left out).
    fn cluster(&self) -> Result<Option<Box<dyn ClusterDescriber>>, Error> {
        Ok(None)
    }
}

/// The real brokers.
pub struct Kafka {
    /// How to reach them.
    pub client: Client,
    /// Timeout of each admin call.
    pub timeout: Duration,
}

impl Connector for Kafka {
    /// kshard's own client, which refuses a malformed answer where
    /// librdkafka's can abort the process; librdkafka for what only it does
    /// (GSSAPI, OAUTHBEARER, keystores…) and for brokers older than 3.0.
    fn admin(&self) -> Result<Box<dyn BrokerAdmin>, Error> {
        match WireAdmin::new(&self.client, self.timeout)? {
            Some(admin) => Ok(Box::new(admin)),
            None => Ok(Box::new(Admin::new(&self.client, self.timeout)?)),
        }
    }

    fn checked_admin(&self) -> Result<Box<dyn BrokerAdmin>, Error> {
        match WireAdmin::connect(&self.client, self.timeout)? {
            Some(admin) => Ok(Box::new(admin)),
            None => Ok(Box::new(Admin::connect(&self.client, self.timeout)?)),
        }
    }

    fn reader(&self, topic: &str, partitions: &[(i32, Option<i64>)]) -> Result<Box<dyn RecordSource>, Error> {
        // Every record, open transactions' too: the monitor sets their
        // commits aside until the marker, as Kafka's coordinator does, so
        // that a transaction left open holds back nothing else.
        let reader = PartitionReader::with_isolation(&self.client, topic, partitions, 1024, Isolation::Uncommitted)?;
        Ok(Box::new(TopicReader::new(reader, topic)))
    }

    /// kshard's own Fetch requests, over PLAINTEXT, TLS, SASL PLAIN and
    /// SCRAM (about 20 times less CPU than librdkafka's consumer for the
    /// same answers); librdkafka for what only it does (GSSAPI, OAUTHBEARER,
    /// keystores, certificate verification turned off…).
    fn timestamps(&self) -> Result<Box<dyn RecordTimes>, Error> {
        match FetchTimes::new(&self.client)? {
            Some(fetch) => Ok(Box::new(fetch)),
            None => Ok(Box::new(TimestampReader::new(&self.client)?)),
        }
    }

    /// kshard's own client (librdkafka has no share-group admin calls).
    fn share_admin(&self) -> Result<Option<Box<dyn ShareGroupAdmin>>, Error> {
        Ok(ShareGroupsAdmin::new(&self.client, self.timeout)?.map(|a| Box::new(a) as Box<dyn ShareGroupAdmin>))
    }

    /// kshard's own client (librdkafka has no DescribeLogDirs).
    fn cluster(&self) -> Result<Option<Box<dyn ClusterDescriber>>, Error> {
        Ok(ClusterAdmin::new(&self.client, self.timeout)?.map(|a| Box::new(a) as Box<dyn ClusterDescriber>))
    }
}
