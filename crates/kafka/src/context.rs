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

/// Routes librdkafka's logs and global errors to `tracing`.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct KshardContext;

impl ClientContext for KshardContext {
    fn log(&self, level: RDKafkaLogLevel, facility: &str, message: &str) {
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

    fn error(&self, error: KafkaError, reason: &str) {
        if let KafkaError::PartitionEOF(_) | KafkaError::Global(RDKafkaErrorCode::PartitionEOF) = error {
            return;
        }
        tracing::warn!(target: "librdkafka", %error, reason, "client error; librdkafka retries");
    }
}

impl ConsumerContext for KshardContext {}

impl ProducerContext for KshardContext {
    type DeliveryOpaque = ();

    fn delivery(&self, result: &DeliveryResult<'_>, _: Self::DeliveryOpaque) {
        if let Err((error, _)) = result {
            tracing::warn!(target: "librdkafka", %error, "a produced record was not delivered");
        }
    }
}
