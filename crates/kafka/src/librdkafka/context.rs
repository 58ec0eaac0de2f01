//! The client context every kshard client uses: librdkafka's logs and errors go
//! to `tracing`, and end-of-partition (delivered to the reader as an event) is not
//! reported again as an error.

use rdkafka::client::ClientContext;
use rdkafka::config::RDKafkaLogLevel;
use rdkafka::consumer::ConsumerContext;
use rdkafka::error::KafkaError;
use rdkafka::message::DeliveryResult;
use rdkafka::producer::ProducerContext;
use rdkafka::types::RDKafkaErrorCode;
use std::sync::{Arc, Mutex, PoisonError};

/// Routes librdkafka's logs and global errors to `tracing`, and keeps the
/// latest TLS or authentication failure where the owner of the settings can
/// read it: librdkafka reports those only here, while the calls that fail
/// because of them end with a timeout or "all brokers down".
#[derive(Debug, Clone, Default)]
pub(crate) struct KshardContext {
    pub(crate) access_problem: Arc<Mutex<Option<String>>>,
    /// What every client of these settings sent and received.
    pub(crate) traffic: Arc<crate::Traffic>,
}

impl ClientContext for KshardContext {
    fn log(&self, level: RDKafkaLogLevel, facility: &str, message: &str) {
        // Clients that are not polled (metadata and admin calls) hear of failed
        // TLS handshakes and authentication only through their logs.
        let serious = !matches!(level, RDKafkaLogLevel::Notice | RDKafkaLogLevel::Info | RDKafkaLogLevel::Debug);
        if serious && let Some(kind) = access_problem_kind(None, message) {
            *self.access_problem.lock().unwrap_or_else(PoisonError::into_inner) = Some(format!("{kind}: {message}"));
        }
        match level {
            RDKafkaLogLevel::Emerg | RDKafkaLogLevel::Alert | RDKafkaLogLevel::Critical | RDKafkaLogLevel::Error => {
                tracing::error!(target: "librdkafka", facility, "{message}")
            }
            RDKafkaLogLevel::Warning => tracing::warn!(target: "librdkafka", facility, "{message}"),
            RDKafkaLogLevel::Notice | RDKafkaLogLevel::Info => {
                tracing::info!(target: "librdkafka", facility, "{message}")
            }
            RDKafkaLogLevel::Debug => tracing::debug!(target: "librdkafka", facility, "{message}"),
        }
    }

    /// The client's request and byte totals (`statistics.interval.ms`,
    /// set for the clients that are polled: see [`crate::Client`]).
    fn stats(&self, statistics: rdkafka::Statistics) {
        let n = |v: i64| u64::try_from(v).unwrap_or(0);
        let totals = crate::TrafficTotals {
            requests_sent: n(statistics.tx),
            bytes_sent: n(statistics.tx_bytes),
            responses_received: n(statistics.rx),
            bytes_received: n(statistics.rx_bytes),
            malformed_answers: 0,
        };
        self.traffic.reported(&statistics.name, totals, std::time::Instant::now());
    }

    fn error(&self, error: KafkaError, reason: &str) {
        if let KafkaError::PartitionEOF(_) | KafkaError::Global(RDKafkaErrorCode::PartitionEOF) = error {
            return;
        }
        if let Some(kind) = access_problem_kind(error.rdkafka_error_code(), reason) {
            tracing::error!(target: "librdkafka", %error, reason, "{kind}");
            *self.access_problem.lock().unwrap_or_else(PoisonError::into_inner) = Some(format!("{kind}: {reason}"));
            return;
        }
        tracing::warn!(target: "librdkafka", %error, reason, "client error; librdkafka retries");
    }
}

impl ConsumerContext for KshardContext {}

impl ProducerContext for KshardContext {
    /// Where the record's delivery result goes: a slot a writer
    /// waits on, or the writer's shared untracked one (results logged).
    type DeliveryOpaque = Arc<crate::delivery::Delivered>;

    fn delivery(&self, result: &DeliveryResult<'_>, delivered: Self::DeliveryOpaque) {
        use rdkafka::message::Message;
        let outcome = match result {
            Ok(message) => Ok(message.offset()),
            Err((error, _)) => Err(error.to_string()),
        };
        if !delivered.tracked {
            if let Err(error) = &outcome {
                tracing::warn!(target: "librdkafka", %error, "a produced record was not delivered");
            }
            return;
        }
        delivered.resolve(outcome.map_err(crate::delivery::Failure::Other));
    }
}

/// What kind of access problem `error` is, when it is one that retrying cannot
/// fix: a failed TLS handshake or failed authentication.
/// librdkafka reports some of these as transport failures, with the cause only
/// in the reason text.
fn access_problem_kind(code: Option<RDKafkaErrorCode>, reason: &str) -> Option<&'static str> {
    const TLS: &str = "TLS with the broker failed (check tls.ca_file and the broker's certificate)";
    const AUTH: &str = "the broker refused the credentials (check sasl.mechanism, sasl.username and sasl.password)";
    match code {
        Some(RDKafkaErrorCode::SSL) => Some(TLS),
        Some(RDKafkaErrorCode::Authentication | RDKafkaErrorCode::SaslAuthenticationFailed) => Some(AUTH),
        _ if reason.contains("SSL handshake failed") || reason.contains("certificate verify failed") => Some(TLS),
        _ if reason.contains("SASL authentication error") || reason.contains("Authentication failed") => Some(AUTH),
        _ => None,
    }
}
