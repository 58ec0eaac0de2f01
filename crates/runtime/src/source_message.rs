//! Hands a message to the application: its `consume` (or `consume_async`,
//! awaited), a refusal undone, then skipped or dead-lettered as the shard
//! says, or the replica's failure.

use crate::application::{Message, OutRecord, ShardApp, Transaction};
use crate::model::{Refusals, ShardSpec};
use crate::partitions::LogRecord;
use crate::recovery_log::replica::ReplicaError;

/// The message `r` is, its headers given.
pub(crate) fn message_of<'a>(r: &'a LogRecord<'_>, headers: &'a [(&'a str, Option<&'a [u8]>)]) -> Message<'a> {
    let (timestamp_ms, log_append_time) = r.timestamp();
    Message {
        topic: r.topic(),
        partition: r.partition(),
        offset: r.offset(),
        timestamp_ms,
        log_append_time,
        headers,
        key: r.key(),
        value: r.value(),
        transactional: r.transactional(),
    }
}

/// Messages a transaction refused, by what became of them.
#[derive(Debug, Default)]
pub(crate) struct Refused {
    pub(crate) skipped: u64,
    pub(crate) dead_lettered: u64,
}

/// An application's error at `at`, failing the replica.
pub(crate) fn application(at: &'static str) -> impl FnOnce(crate::application::AppError) -> ReplicaError {
    move |error| ReplicaError::Application { at: at.to_owned(), error }
}

/// Where a message is, for errors and logs.
fn at(message: &Message<'_>) -> String {
    format!("{}/{} offset {}", message.topic, message.partition, message.offset)
}

/// Takes `message` into `txn` through the application's `consume`,
/// handling a refusal as the shard's policy says.
pub(crate) fn consume_now(
    app: &mut dyn ShardApp,
    spec: &ShardSpec,
    txn: &mut Transaction<'_>,
    message: &Message<'_>,
    refused: &mut Refused,
) -> Result<(), ReplicaError> {
    mark_undoable(spec, txn);
    let consumed = app.consume(txn, message);
    settle(spec, txn, message, consumed, refused)
}

/// [`consume_now`] through the application's `consume_async`, awaited.
pub(crate) async fn consume(
    app: &mut dyn ShardApp,
    spec: &ShardSpec,
    txn: &mut Transaction<'_>,
    message: &Message<'_>,
    refused: &mut Refused,
) -> Result<(), ReplicaError> {
    mark_undoable(spec, txn);
    let consumed = app.consume_async(txn, message).await;
    settle(spec, txn, message, consumed, refused)
}

/// Keeps what the next message changes, so that a refusal can undo it —
/// only where a refusal is not the replica's end.
fn mark_undoable(spec: &ShardSpec, txn: &mut Transaction<'_>) {
    if spec.refusals != Refusals::Fail {
        txn.mark();
    }
}

/// What the application's answer to `message` makes of it: taken, refused
/// (undone, then skipped or dead-lettered), or the replica's failure.
fn settle(
    spec: &ShardSpec,
    txn: &mut Transaction<'_>,
    message: &Message<'_>,
    consumed: Result<(), crate::application::AppError>,
    refused: &mut Refused,
) -> Result<(), ReplicaError> {
    let error = match consumed {
        Ok(()) => return Ok(()),
        Err(error) => error,
    };
    match &spec.refusals {
        _ if !error.is_refusal() => Err(ReplicaError::Application { at: at(message), error }),
        Refusals::Fail => Err(ReplicaError::Application { at: format!("{} (refused)", at(message)), error }),
        Refusals::Skip => {
            txn.undo();
            tracing::warn!(shard = %spec.id, topic = message.topic, partition = message.partition, offset = message.offset, reason = %error, "skipping a message the application refused");
            refused.skipped += 1;
            Ok(())
        }
        Refusals::DeadLetter { topic, partition } => {
            txn.undo();
            tracing::warn!(shard = %spec.id, topic = message.topic, partition = message.partition, offset = message.offset, reason = %error, dead_letter = %topic, "publishing a message the application refused to the dead-letter topic");
            let bytes = |b: Option<&[u8]>| b.map(bytes::Bytes::copy_from_slice);
            let mut headers: Vec<(String, Option<bytes::Bytes>)> =
                message.headers.iter().map(|(k, v)| ((*k).to_owned(), bytes(*v))).collect();
            for (name, value) in [
                ("kshard.refused", error.to_string()),
                ("kshard.source.topic", message.topic.to_owned()),
                ("kshard.source.partition", message.partition.to_string()),
                ("kshard.source.offset", message.offset.to_string()),
                ("kshard.shard", spec.id.clone()),
            ] {
                headers.push((name.to_owned(), Some(bytes::Bytes::from(value))));
            }
            let record = OutRecord {
                key: bytes(message.key),
                value: bytes(message.value),
                headers,
                timestamp_ms: message.timestamp_ms,
            };
            txn.publish(topic, partition.unwrap_or(message.partition), record);
            refused.dead_lettered += 1;
            Ok(())
        }
    }
}

/// A message copied out of its reader's buffer, for an application that awaits.
pub(crate) struct OwnedMessage {
    topic: String,
    partition: i32,
    offset: i64,
    timestamp: (i64, bool),
    headers: Vec<(String, Option<Vec<u8>>)>,
    key: Option<Vec<u8>>,
    value: Option<Vec<u8>>,
    transactional: Option<crate::application::Transactional>,
}

impl OwnedMessage {
    pub(crate) fn of(r: &LogRecord<'_>) -> Self {
        OwnedMessage {
            topic: r.topic().to_owned(),
            partition: r.partition(),
            offset: r.offset(),
            timestamp: r.timestamp(),
            headers: r.headers().into_iter().map(|(k, v)| (k.to_owned(), v.map(<[u8]>::to_vec))).collect(),
            key: r.key().map(<[u8]>::to_vec),
            value: r.value().map(<[u8]>::to_vec),
            transactional: r.transactional(),
        }
    }

    pub(crate) fn headers(&self) -> Vec<(&str, Option<&[u8]>)> {
        self.headers.iter().map(|(k, v)| (k.as_str(), v.as_deref())).collect()
    }

    pub(crate) fn message<'a>(&'a self, headers: &'a [(&'a str, Option<&'a [u8]>)]) -> Message<'a> {
        Message {
            topic: &self.topic,
            partition: self.partition,
            offset: self.offset,
            timestamp_ms: self.timestamp.0,
            log_append_time: self.timestamp.1,
            headers,
            key: self.key.as_deref(),
            value: self.value.as_deref(),
            transactional: self.transactional,
        }
    }
}
