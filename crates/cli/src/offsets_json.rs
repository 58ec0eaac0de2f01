//! The JSON form of a decoded `__consumer_offsets` record, as printed by
//! `kshard offsets decode`: `record_type`, `key_version`, the key's fields, then
//! `value` (`null` for a tombstone). Field names are the snake_case forms of
//! Kafka's schema names; bytes are lowercase hex; topic ids are Kafka's base64.

use anyhow::{Context, Result};
use kshard_offsets::{GroupMetadataValue, Record, RecordKey, RecordValue};
use serde::Serialize;
use serde_json::{Map, Value, json};

/// Decodes a record given as hex strings and returns its JSON form.
pub(crate) fn decode_hex(key: &str, value: Option<&str>) -> Result<Value> {
    let key = hex::decode(key.trim()).context("--key is not valid hex")?;
    let value = value.map(|v| hex::decode(v.trim())).transpose().context("--value is not valid hex")?;
    let record = Record::decode(&key, value.as_deref()).context("malformed record")?;
    record_json(&record)
}

fn object(v: impl Serialize) -> Result<Map<String, Value>> {
    match serde_json::to_value(v)? {
        Value::Object(map) => Ok(map),
        other => anyhow::bail!("expected a JSON object, got {other}"),
    }
}

/// The JSON object for one record.
pub(crate) fn record_json(record: &Record<'_>) -> Result<Value> {
    let key = &record.key;
    let mut out = Map::new();
    out.insert("record_type".into(), key.record_type().name().into());
    out.insert("key_version".into(), key.key_version().into());
    let fields = match key {
        RecordKey::OffsetCommit { key, .. } => object(key)?,
        RecordKey::GroupMetadata(k) => object(k)?,
        RecordKey::ConsumerGroupRegularExpression(k) => object(k)?,
        RecordKey::Opaque { body, .. } => object(json!({ "body": hex::encode(body) }))?,
        other => match (other.group_id_key(), other.member_key()) {
            (Some(k), _) => object(k)?,
            (_, Some(k)) => object(k)?,
            _ => Map::new(),
        },
    };
    out.extend(fields);
    let value = match &record.value {
        None => Value::Null,
        Some(v) => Value::Object(value_json(v)?),
    };
    out.insert("value".into(), value);
    Ok(Value::Object(out))
}

fn value_json(value: &RecordValue<'_>) -> Result<Map<String, Value>> {
    match value {
        RecordValue::OffsetCommit(v) => object(v),
        RecordValue::GroupMetadata(v) => group_metadata_json(v),
        RecordValue::ConsumerGroupMetadata(v) => object(v),
        RecordValue::ConsumerGroupPartitionMetadata(v) => object(v),
        RecordValue::ConsumerGroupMemberMetadata(v) => object(v),
        RecordValue::ConsumerGroupTargetAssignmentMetadata(v) => object(v),
        RecordValue::ConsumerGroupTargetAssignmentMember(v) => object(v),
        RecordValue::ConsumerGroupCurrentMemberAssignment(v) => object(v),
        RecordValue::ConsumerGroupRegularExpression(v) => object(v),
        RecordValue::ShareGroupMemberMetadata(v) => object(v),
        RecordValue::ShareGroupMetadata(v) => object(v),
        RecordValue::ShareGroupTargetAssignmentMetadata(v) => object(v),
        RecordValue::ShareGroupTargetAssignmentMember(v) => object(v),
        RecordValue::ShareGroupCurrentMemberAssignment(v) => object(v),
        RecordValue::ShareGroupStatePartitionMetadata(v) => object(v),
        RecordValue::StreamsGroupMetadata(v) => object(v),
        RecordValue::StreamsGroupMemberMetadata(v) => object(v),
        RecordValue::StreamsGroupTargetAssignmentMetadata(v) => object(v),
        RecordValue::StreamsGroupTargetAssignmentMember(v) => object(v),
        RecordValue::StreamsGroupCurrentMemberAssignment(v) => object(v),
        RecordValue::StreamsGroupTopology(v) => object(v),
        RecordValue::Opaque { version, body } => object(json!({ "version": version, "body": hex::encode(body) })),
    }
}

/// Group metadata, with each member's subscription and assignment decoded when
/// the protocol type is `consumer`. Bytes that do not decode stay hex, and the
/// reason is given beside them (`subscription_error`, `assignment_error`).
fn group_metadata_json(v: &GroupMetadataValue<'_>) -> Result<Map<String, Value>> {
    let mut out = object(v)?;
    if !v.is_consumer_protocol() {
        return Ok(out);
    }
    let Some(Value::Array(members)) = out.get_mut("members") else {
        return Ok(out);
    };
    for (json, member) in members.iter_mut().zip(&v.members) {
        let Value::Object(json) = json else { continue };
        match member.consumer_subscription() {
            Ok(s) => {
                json.insert("subscription".into(), serde_json::to_value(s)?);
            }
            Err(e) => {
                json.insert("subscription_error".into(), e.to_string().into());
            }
        }
        match member.consumer_assignment() {
            Ok(a) => {
                json.insert("assignment".into(), serde_json::to_value(a)?);
            }
            Err(e) => {
                json.insert("assignment_error".into(), e.to_string().into());
            }
        }
    }
    Ok(out)
}
