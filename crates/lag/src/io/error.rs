//! Why a worker of the lag monitor stopped: its supervisor logs it, says it
//! on `/ready` and restarts the worker after a backoff. Each error names the
//! step that failed; the words are those `/ready` has always shown.

use kshard_runtime::NodeError;
use kshard_runtime::keyspace::KeyspaceError;
use kshard_runtime::partitions::LogTopicError;

/// A worker's failure.
#[derive(Debug, thiserror::Error)]
pub(crate) enum WorkerError {
    /// Kafka refused, or did not answer.
    #[error(transparent)]
    Kafka(Box<kshard_kafka::Error>),
    /// Kafka refused, with what the settings may have to do with it.
    #[error("{0}")]
    Access(String),
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

impl From<kshard_kafka::Error> for WorkerError {
    fn from(error: kshard_kafka::Error) -> Self {
        WorkerError::Kafka(Box::new(error))
    }
}
