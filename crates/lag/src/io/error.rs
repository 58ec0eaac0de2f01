//! Why a worker of the lag monitor stopped: its supervisor logs it, says it
//! on `/ready` and restarts the worker after a backoff. Each error names the
//! step that failed; the words are those `/ready` has always shown.

use kshard_kafka::Client;
use kshard_runtime::NodeError;
use kshard_runtime::keyspace::KeyspaceError;
use kshard_runtime::partitions::LogTopicError;

use crate::failure::{Failure, FailureKind};

/// A worker's failure.
#[derive(Debug, thiserror::Error)]
pub(crate) enum WorkerError {
    /// Kafka refused, or did not answer.
    #[error(transparent)]
    Kafka(Box<kshard_kafka::Error>),
    /// Kafka refused, or a call timed out, while TLS or authentication
    /// with the brokers failed (`problem`, as librdkafka reported it).
    #[error("{source} ({problem})")]
    Access {
        #[source]
        source: Box<kshard_kafka::Error>,
        problem: String,
    },
    /// The offsets topic is not there (yet).
    #[error("{topic} does not exist on {brokers} (yet)")]
    NoTopic { topic: String, brokers: String },
    /// The principal may not read the offsets topic.
    #[error(
        "reading {topic}: {source}; this principal needs Describe and Read on {topic} — or use scrape_mode: admin_api, which needs neither"
    )]
    ReadDenied {
        topic: String,
        #[source]
        source: Box<kshard_kafka::Error>,
    },
    /// ListOffsets left partitions out.
    #[error("no watermarks yet for partitions {partitions:?} of {topic}")]
    NoWatermarks { topic: String, partitions: Vec<i32> },
    /// The recovery-log topic could not be made ready.
    #[error(transparent)]
    LogTopic(#[from] LogTopicError),
    /// The recovery-log topic could not grow with the offsets topic.
    #[error("growing the recovery-log topic {topic}{to}: {source}")]
    Grow {
        topic: String,
        /// ` to N partitions`, when known.
        to: String,
        #[source]
        source: Box<kshard_kafka::Error>,
    },
    /// etcd could not be reached at start.
    #[error("connecting to etcd at {endpoints}: {source}")]
    Etcd {
        endpoints: String,
        #[source]
        source: KeyspaceError,
    },
    /// The keyspace refused or did not answer.
    #[error(transparent)]
    Keyspace(#[from] KeyspaceError),
    /// The runtime member that runs the shards stopped on an I/O error.
    #[error("the shards' member: {0}")]
    Runtime(#[source] std::io::Error),
    /// A member of the runtime stopped.
    #[error(transparent)]
    Node(#[from] NodeError),
    /// A shard's key holds another application's shard.
    #[error("{0}")]
    ShardTaken(String),
    /// A life of the worker, or a thread of it, panicked (what it said).
    #[error("{0}")]
    Panicked(String),
}

impl WorkerError {
    /// `error`, met by a client of `kafka`: with the TLS or authentication
    /// failure behind it when the handle's clients met one.
    pub(crate) fn kafka(kafka: &Client, error: kshard_kafka::Error) -> Self {
        match kafka.access_problem() {
            Some(problem) => WorkerError::Access { source: Box::new(error), problem },
            None => WorkerError::from(error),
        }
    }

    /// Its kind, which decides what the supervisor does and labels its count.
    pub(crate) fn kind(&self) -> FailureKind {
        match self {
            WorkerError::Kafka(e) => kafka_kind(e),
            WorkerError::Access { .. } => FailureKind::Credentials,
            WorkerError::NoTopic { .. } | WorkerError::NoWatermarks { .. } => FailureKind::NotThereYet,
            WorkerError::ReadDenied { .. } => FailureKind::Authorization,
            WorkerError::LogTopic(_) | WorkerError::Grow { .. } => FailureKind::RecoveryLog,
            WorkerError::Etcd { .. } | WorkerError::Keyspace(_) => FailureKind::Keyspace,
            WorkerError::Runtime(_) | WorkerError::Node(_) => FailureKind::Runtime,
            WorkerError::ShardTaken(_) => FailureKind::ShardTaken,
            WorkerError::Panicked(_) => FailureKind::Panic,
        }
    }

    /// The failure as readiness keeps it.
    pub(crate) fn failure(&self) -> Failure {
        Failure::new(self.kind(), self)
    }

    /// [`WorkerError::failure`] of a worker whose clients are `kafka`'s:
    /// a TLS or authentication failure behind it, when the handle met one,
    /// makes it a `credentials` failure that says so.
    pub(crate) fn failure_on(&self, kafka: &Client) -> Failure {
        match kafka.access_problem() {
            Some(problem) => Failure::new(FailureKind::Credentials, format!("{self} ({problem})")),
            None => self.failure(),
        }
    }
}

/// The kind of a Kafka client's failure, by its variant and Kafka's code.
pub(crate) fn kafka_kind(error: &kshard_kafka::Error) -> FailureKind {
    use kshard_kafka::Error;
    if error.is_authorization() {
        return FailureKind::Authorization;
    }
    match error {
        Error::Client { .. } => FailureKind::Settings,
        Error::CorruptBatch { .. } => FailureKind::Malformed,
        Error::Unreachable { .. } => FailureKind::Transient,
        _ if error.is_retriable() => FailureKind::Transient,
        _ => FailureKind::Refused,
    }
}

impl From<kshard_kafka::Error> for WorkerError {
    fn from(error: kshard_kafka::Error) -> Self {
        WorkerError::Kafka(Box::new(error))
    }
}
