//! Errors of the Kafka layer, each naming the step that failed.

/// A failed Kafka operation.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The client could not be created from its settings.
    #[error("creating the Kafka {client}: {source}")]
    Client {
        /// Which client: consumer, producer or admin.
        client: &'static str,
        /// The cause.
        #[source]
        source: rdkafka::error::KafkaError,
    },
    /// A broker call failed.
    #[error("{step}: {source}")]
    Call {
        /// What was being done, e.g. "fetching watermarks of __consumer_offsets/3".
        step: String,
        /// The cause.
        #[source]
        source: rdkafka::error::KafkaError,
    },
    /// The broker answered, but refused the request.
    #[error("{step}: {message}")]
    Refused {
        /// What was being done.
        step: String,
        /// The broker's reason.
        message: String,
    },
}

impl Error {
    /// True when the brokers refused for lack of rights (an ACL): retrying does
    /// not help until someone grants them.
    pub fn is_authorization(&self) -> bool {
        use rdkafka::types::RDKafkaErrorCode as Code;
        let code = match self {
            Error::Client { source, .. } | Error::Call { source, .. } => source.rdkafka_error_code(),
            Error::Refused { message, .. } => {
                return message.contains("Authorization") || message.contains("AUTHORIZATION_FAILED");
            }
        };
        matches!(
            code,
            Some(
                Code::TopicAuthorizationFailed
                    | Code::GroupAuthorizationFailed
                    | Code::ClusterAuthorizationFailed
                    | Code::TransactionalIdAuthorizationFailed
            )
        )
    }
}

/// Result of a Kafka-layer operation.
pub type Result<T> = std::result::Result<T, Error>;

pub(crate) fn call(step: impl Into<String>) -> impl FnOnce(rdkafka::error::KafkaError) -> Error {
    let step = step.into();
    move |source| Error::Call { step, source }
}
