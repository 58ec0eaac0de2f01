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
    /// A record batch that does not add up (its CRC, its header, a record
    /// cut short, a codec's error, records that inflate past the cap): the
    /// reader skipped it and goes on with the next one.
    #[error("reading {topic}/{partition}: skipped {what}")]
    CorruptBatch {
        /// The topic.
        topic: String,
        /// The partition.
        partition: i32,
        /// The batch's base offset.
        offset: i64,
        /// What is wrong, naming the offset.
        what: String,
    },
    /// The broker answered a request of kshard's own client with an error
    /// code (`kafka_error_name` names it).
    #[error("{step}: the broker answered {} (error code {code})", kafka_name(*code))]
    Kafka {
        /// What was being done, and on which broker.
        step: String,
        /// Kafka's error code.
        code: i16,
    },
    /// A broker of kshard's own client could not be reached, or its
    /// connection failed mid-request: retriable, as librdkafka's transport
    /// failures are.
    #[error("{step}: {message}")]
    Unreachable {
        /// What was being done.
        step: String,
        /// Why.
        message: String,
    },
    /// The reader's position is past the partition's end: the log was
    /// truncated (an unclean leader election) or the topic made again. What
    /// was read of the partition may hold records its log no longer has; the
    /// reader reads on from the log's start, and whoever keeps state built
    /// from it must drop that state.
    #[error(
        "reading {topic}/{partition}: offset {offset} is past the log's end (truncated, or the topic made again); reading again from its start, {log_start}"
    )]
    Truncated {
        /// The topic.
        topic: String,
        /// The partition.
        partition: i32,
        /// The position the reader had.
        offset: i64,
        /// The log's start, where reading goes on.
        log_start: i64,
    },
}

impl Error {
    /// True when the brokers refused for lack of rights (an ACL): retrying does
    /// not help until someone grants them. Decided by Kafka's error code,
    /// never by a message's words.
    pub fn is_authorization(&self) -> bool {
        use rdkafka::types::RDKafkaErrorCode as Code;
        let code = match self {
            Error::Client { source, .. } | Error::Call { source, .. } => source.rdkafka_error_code(),
            Error::Refused { .. }
            | Error::CorruptBatch { .. }
            | Error::Truncated { .. }
            | Error::Unreachable { .. } => {
                return false;
            }
            Error::Kafka { code, .. } => return matches!(code, 29 | 30 | 31 | 53),
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

impl Error {
    /// True when a writer with a newer epoch took this producer's
    /// transactional id over (PRODUCER_FENCED, INVALID_PRODUCER_EPOCH):
    /// nothing this producer writes will be written.
    pub fn is_fenced(&self) -> bool {
        matches!(self, Error::Kafka { code: 47 | 90, .. })
    }

    /// The broker's error, in Kafka's own name (`NOT_COORDINATOR`,
    /// `REBALANCE_IN_PROGRESS`, …); `None` when the broker did not answer
    /// with one (a timeout, a dropped connection, a local failure).
    pub fn kafka_error_name(&self) -> Option<String> {
        if let Error::Kafka { code, .. } = self {
            return code_name(*code);
        }
        let (Error::Client { source, .. } | Error::Call { source, .. }) = self else { return None };
        let code = source.rdkafka_error_code()?;
        // librdkafka's own (local) errors are negative; Kafka's are its codes.
        if (code as i32) <= 0 {
            return None;
        }
        // librdkafka's old names for what Kafka has renamed since.
        use rdkafka::types::RDKafkaErrorCode as Code;
        let renamed = match code {
            Code::InvalidMessage => Some("CORRUPT_MESSAGE"),
            Code::InvalidMessageSize => Some("INVALID_FETCH_SIZE"),
            Code::NotLeaderForPartition => Some("NOT_LEADER_OR_FOLLOWER"),
            Code::MessageSizeTooLarge => Some("MESSAGE_TOO_LARGE"),
            Code::MessageBatchTooLarge => Some("RECORD_LIST_TOO_LARGE"),
            _ => None,
        };
        if let Some(name) = renamed {
            return Some(name.to_owned());
        }
        Some(screaming(&format!("{code:?}")))
    }
}

/// Kafka's name of error `code`; `None` for no error or a code the
/// kafka-protocol crate does not know.
pub(crate) fn code_name(code: i16) -> Option<String> {
    match kafka_protocol::ResponseError::try_from_code(code)? {
        kafka_protocol::ResponseError::Unknown(_) => None,
        known => Some(screaming(&known.to_string())),
    }
}

/// Error `code` in words, for messages.
fn kafka_name(code: i16) -> String {
    code_name(code).unwrap_or_else(|| "an error kshard does not know".to_owned())
}

/// `UnsupportedSASLMechanism` → `UNSUPPORTED_SASL_MECHANISM`: a word starts
/// at a capital after a small letter, or at the last capital of a run that a
/// small letter follows.
fn screaming(camel: &str) -> String {
    let chars: Vec<char> = camel.chars().collect();
    let mut name = String::new();
    for (i, c) in chars.iter().enumerate() {
        let after_small = i > 0 && chars[i - 1].is_lowercase();
        let ends_run = i > 0 && chars[i - 1].is_uppercase() && chars.get(i + 1).is_some_and(|n| n.is_lowercase());
        if c.is_uppercase() && (after_small || ends_run) {
            name.push('_');
        }
        name.push(c.to_ascii_uppercase());
    }
    name
}

/// Result of a Kafka-layer operation.
pub type Result<T> = std::result::Result<T, Error>;

pub(crate) fn call(step: impl Into<String>) -> impl FnOnce(rdkafka::error::KafkaError) -> Error {
    let step = step.into();
    move |source| Error::Call { step, source }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rdkafka::error::KafkaError;
    use rdkafka::types::RDKafkaErrorCode as Code;

    #[test]
    fn broker_errors_have_kafkas_names() {
        let failed = |code| Error::Call { step: "committing".into(), source: KafkaError::ConsumerCommit(code) };
        assert_eq!(failed(Code::NotCoordinator).kafka_error_name().as_deref(), Some("NOT_COORDINATOR"));
        assert_eq!(failed(Code::RebalanceInProgress).kafka_error_name().as_deref(), Some("REBALANCE_IN_PROGRESS"));
        assert_eq!(failed(Code::RequestTimedOut).kafka_error_name().as_deref(), Some("REQUEST_TIMED_OUT"));
        assert_eq!(failed(Code::OperationTimedOut).kafka_error_name(), None, "librdkafka's own");
        assert_eq!(
            failed(Code::UnsupportedSASLMechanism).kafka_error_name().as_deref(),
            Some("UNSUPPORTED_SASL_MECHANISM")
        );
        assert_eq!(failed(Code::NotLeaderForPartition).kafka_error_name().as_deref(), Some("NOT_LEADER_OR_FOLLOWER"));
        assert_eq!(
            failed(Code::CoordinatorLoadInProgress).kafka_error_name().as_deref(),
            Some("COORDINATOR_LOAD_IN_PROGRESS")
        );
    }

    #[test]
    fn kshards_own_clients_errors_are_named_retried_and_refused_as_kafkas() {
        let answered = |code| Error::Kafka { step: "listing groups on b:9092".into(), code };
        assert_eq!(answered(16).kafka_error_name().as_deref(), Some("NOT_COORDINATOR"));
        assert!(answered(16).is_retriable() && !answered(16).is_authorization());
        assert!(answered(30).is_authorization() && !answered(30).is_retriable(), "GROUP_AUTHORIZATION_FAILED");
        assert_eq!(
            answered(30).to_string(),
            "listing groups on b:9092: the broker answered GROUP_AUTHORIZATION_FAILED (error code 30)"
        );
        assert_eq!(answered(9_999).kafka_error_name(), None, "a code no one names");
        assert!(answered(9_999).to_string().ends_with("an error kshard does not know (error code 9999)"));
        let lost = Error::Unreachable { step: "reading an answer with b:9092".into(), message: "reset".into() };
        assert!(lost.is_retriable() && !lost.is_authorization());
    }
}
