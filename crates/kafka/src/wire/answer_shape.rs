//! The shape of every answer kshard decodes with the `kafka-protocol`
//! crate, checked against its bytes before the crate sees them.
//!
//! The crate sizes each array's `Vec` by the count read from the wire
//! (`Vec::with_capacity(n)`) before it reads an element: 13 bytes declaring
//! 2^32 − 2 brokers make the allocation fail, and Rust aborts the process.
//! So each answer type kshard asks for names its [`Field`]s at the one
//! version kshard sends ([`Answer::shape`]), and [`check`] walks a frame
//! through them: every count, length and tagged field is checked against
//! the bytes left, and a count also against the least its elements take.
//! Only a frame that fits is handed to the crate, which then allocates no
//! more than a small multiple of the frame's size. A frame that does not
//! fit is an error naming the field. Tests encode each answer with the
//! crate's own encoder and check that the walk ends exactly at its end,
//! so a shape cannot drift from the crate's decoder.
//!
//! This is not a decoder: it reads no value. Fetch answers and
//! DescribeShareGroupOffsets are read in place by modules of their own.

use kafka_protocol::messages::{
    AddPartitionsToTxnResponse, ApiKey, ApiVersionsResponse, ConsumerGroupDescribeResponse, DescribeConfigsResponse,
    DescribeGroupsResponse, DescribeLogDirsResponse, EndTxnResponse, FindCoordinatorResponse, InitProducerIdResponse,
    ListGroupsResponse, ListOffsetsResponse, MetadataResponse, OffsetFetchResponse, ProduceResponse,
    SaslAuthenticateResponse, SaslHandshakeResponse, ShareGroupDescribeResponse,
};
use kafka_protocol::protocol::{Decodable, HeaderVersion};
use kshard_offsets::cursor::{Cursor, CursorError};

/// One field of an answer: its name in Kafka's schema, and its shape.
#[derive(Debug)]
pub(crate) struct Field {
    name: &'static str,
    shape: Shape,
}

/// How a field is laid out on the wire.
#[derive(Debug)]
enum Shape {
    /// A fixed number of bytes (int8 to int64, boolean, uuid).
    Fixed(usize),
    /// int16 length (−1: null), then the bytes.
    String,
    /// uvarint length + 1 (0: null), then the bytes.
    CompactString,
    /// uvarint length + 1 (0: null), then the bytes.
    CompactBytes,
    /// int32 count (−1: null), then the elements.
    Array(&'static [Field]),
    /// uvarint count + 1 (0: null), then the elements.
    CompactArray(&'static [Field]),
    /// A struct in place (not in an array).
    Struct(&'static [Field]),
    /// A tagged-fields section: uvarint count, then (uvarint tag, uvarint
    /// size, bytes) each; the tags the crate decodes have their shape.
    Tags(&'static [(u32, &'static [Field])]),
}

const fn field(name: &'static str, shape: Shape) -> Field {
    Field { name, shape }
}
const fn int8(name: &'static str) -> Field {
    field(name, Shape::Fixed(1))
}
const fn int16(name: &'static str) -> Field {
    field(name, Shape::Fixed(2))
}
const fn int32(name: &'static str) -> Field {
    field(name, Shape::Fixed(4))
}
const fn int64(name: &'static str) -> Field {
    field(name, Shape::Fixed(8))
}
const fn uuid(name: &'static str) -> Field {
    field(name, Shape::Fixed(16))
}
const fn string(name: &'static str) -> Field {
    field(name, Shape::String)
}
const fn cstring(name: &'static str) -> Field {
    field(name, Shape::CompactString)
}
const fn carray(name: &'static str, of: &'static [Field]) -> Field {
    field(name, Shape::CompactArray(of))
}
/// The tagged fields of a flexible struct whose tags the crate keeps as bytes.
const TAGS: Field = field("tagged fields", Shape::Tags(&[]));
/// An int32 as an array's element.
const INT32: &[Field] = &[int32("element")];

/// An answer type kshard decodes with the crate, and its shape at the
/// versions kshard asks for.
pub(crate) trait Answer: Decodable + HeaderVersion {
    /// The request it answers.
    const API: ApiKey;
    /// Its fields at `version`, after the response header; `None` for a
    /// version kshard does not ask for (then it is not decoded).
    fn shape(version: i16) -> Option<&'static [Field]>;
}

macro_rules! answer {
    ($answer:ty, $api:ident, $($version:literal => $shape:expr),+ $(,)?) => {
        impl Answer for $answer {
            const API: ApiKey = ApiKey::$api;
            fn shape(version: i16) -> Option<&'static [Field]> {
                match version {
                    $($version => {
                        const SHAPE: &[Field] = $shape;
                        Some(SHAPE)
                    })+
                    _ => None,
                }
            }
        }
    };
}

answer!(ApiVersionsResponse, ApiVersions,
    // v0: what every broker answers, whatever it supports (kshard's admin
    // client asks it to choose between its own calls and librdkafka's).
    0 => &[
        int16("error_code"),
        field("api_keys", Shape::Array(&[int16("api_key"), int16("min_version"), int16("max_version")])),
    ],
    3 => &[
    int16("error_code"),
    carray("api_keys", &[int16("api_key"), int16("min_version"), int16("max_version"), TAGS]),
    int32("throttle_time_ms"),
    field("tagged fields", Shape::Tags(&[
        (0, &[carray("supported_features", &[cstring("name"), int16("min_version"), int16("max_version"), TAGS])]),
        (1, &[int64("finalized_features_epoch")]),
        (2, &[carray("finalized_features", &[
            cstring("name"), int16("max_version_level"), int16("min_version_level"), TAGS,
        ])]),
        (3, &[int8("zk_migration_ready")]),
    ])),
],
);

answer!(MetadataResponse, Metadata, 9 => &[
    int32("throttle_time_ms"),
    carray("brokers", &[int32("node_id"), cstring("host"), int32("port"), cstring("rack"), TAGS]),
    cstring("cluster_id"),
    int32("controller_id"),
    carray("topics", &[
        int16("error_code"),
        cstring("name"),
        int8("is_internal"),
        carray("partitions", &[
            int16("error_code"),
            int32("partition_index"),
            int32("leader_id"),
            int32("leader_epoch"),
            carray("replica_nodes", INT32),
            carray("isr_nodes", INT32),
            carray("offline_replicas", INT32),
            TAGS,
        ]),
        int32("topic_authorized_operations"),
        TAGS,
    ]),
    int32("cluster_authorized_operations"),
    TAGS,
]);

answer!(ListOffsetsResponse, ListOffsets, 7 => &[
    int32("throttle_time_ms"),
    carray("topics", &[
        cstring("name"),
        carray("partitions", &[
            int32("partition_index"), int16("error_code"), int64("timestamp"), int64("offset"), int32("leader_epoch"), TAGS,
        ]),
        TAGS,
    ]),
    TAGS,
]);

answer!(SaslHandshakeResponse, SaslHandshake, 1 => &[
    int16("error_code"),
    field("mechanisms", Shape::Array(&[string("mechanism")])),
]);

answer!(SaslAuthenticateResponse, SaslAuthenticate, 2 => &[
    int16("error_code"),
    cstring("error_message"),
    field("auth_bytes", Shape::CompactBytes),
    int64("session_lifetime_ms"),
    TAGS,
]);

answer!(ListGroupsResponse, ListGroups,
    // v4 (Kafka 2.6+): what consumer groups are listed with, on any broker.
    4 => &[
        int32("throttle_time_ms"),
        int16("error_code"),
        carray("groups", &[cstring("group_id"), cstring("protocol_type"), cstring("group_state"), TAGS]),
        TAGS,
    ],
    5 => &[
        int32("throttle_time_ms"),
        int16("error_code"),
        carray("groups", &[
            cstring("group_id"), cstring("protocol_type"), cstring("group_state"), cstring("group_type"), TAGS,
        ]),
        TAGS,
    ],
);

answer!(OffsetFetchResponse, OffsetFetch, 8 => &[
    int32("throttle_time_ms"),
    carray("groups", &[
        cstring("group_id"),
        carray("topics", &[
            cstring("name"),
            carray("partitions", &[
                int32("partition_index"),
                int64("committed_offset"),
                int32("committed_leader_epoch"),
                cstring("metadata"),
                int16("error_code"),
                TAGS,
            ]),
            TAGS,
        ]),
        int16("error_code"),
        TAGS,
    ]),
    TAGS,
]);

answer!(DescribeGroupsResponse, DescribeGroups, 5 => &[
    int32("throttle_time_ms"),
    carray("groups", &[
        int16("error_code"),
        cstring("group_id"),
        cstring("group_state"),
        cstring("protocol_type"),
        cstring("protocol_data"),
        carray("members", &[
            cstring("member_id"),
            cstring("group_instance_id"),
            cstring("client_id"),
            cstring("client_host"),
            field("member_metadata", Shape::CompactBytes),
            field("member_assignment", Shape::CompactBytes),
            TAGS,
        ]),
        int32("authorized_operations"),
        TAGS,
    ]),
    TAGS,
]);

answer!(FindCoordinatorResponse, FindCoordinator, 4 => &[
    int32("throttle_time_ms"),
    carray("coordinators", &[
        cstring("key"), int32("node_id"), cstring("host"), int32("port"), int16("error_code"), cstring("error_message"), TAGS,
    ]),
    TAGS,
]);

// The writer's answers (wire/produce.rs, wire/producer.rs).
answer!(ProduceResponse, Produce, 9 => &[
    carray("responses", &[
        cstring("name"),
        carray("partition_responses", &[
            int32("index"),
            int16("error_code"),
            int64("base_offset"),
            int64("log_append_time_ms"),
            int64("log_start_offset"),
            carray("record_errors", &[int32("batch_index"), cstring("batch_index_error_message"), TAGS]),
            cstring("error_message"),
            TAGS,
        ]),
        TAGS,
    ]),
    int32("throttle_time_ms"),
    TAGS,
]);

answer!(InitProducerIdResponse, InitProducerId, 4 => &[
    int32("throttle_time_ms"), int16("error_code"), int64("producer_id"), int16("producer_epoch"), TAGS,
]);

answer!(AddPartitionsToTxnResponse, AddPartitionsToTxn, 3 => &[
    int32("throttle_time_ms"),
    carray("results_by_topic_v3_and_below", &[
        cstring("name"),
        carray("results_by_partition", &[int32("partition_index"), int16("partition_error_code"), TAGS]),
        TAGS,
    ]),
    TAGS,
]);

answer!(EndTxnResponse, EndTxn, 3 => &[int32("throttle_time_ms"), int16("error_code"), TAGS]);

answer!(ShareGroupDescribeResponse, ShareGroupDescribe, 1 => &[
    int32("throttle_time_ms"),
    carray("groups", &[
        int16("error_code"),
        cstring("error_message"),
        cstring("group_id"),
        cstring("group_state"),
        int32("group_epoch"),
        int32("assignment_epoch"),
        cstring("assignor_name"),
        carray("members", &[
            cstring("member_id"),
            cstring("rack_id"),
            int32("member_epoch"),
            cstring("client_id"),
            cstring("client_host"),
            carray("subscribed_topic_names", &[cstring("name")]),
            field("assignment", Shape::Struct(&[
                carray("topic_partitions", &[uuid("topic_id"), cstring("topic_name"), carray("partitions", INT32), TAGS]),
                TAGS,
            ])),
            TAGS,
        ]),
        int32("authorized_operations"),
        TAGS,
    ]),
    TAGS,
]);

/// A KIP-848 member's assignment, as ConsumerGroupDescribe gives it.
const MEMBER_ASSIGNMENT: &[Field] =
    &[carray("topic_partitions", &[uuid("topic_id"), cstring("topic_name"), carray("partitions", INT32), TAGS]), TAGS];

answer!(ConsumerGroupDescribeResponse, ConsumerGroupDescribe, 0 => &[
    int32("throttle_time_ms"),
    carray("groups", &[
        int16("error_code"),
        cstring("error_message"),
        cstring("group_id"),
        cstring("group_state"),
        int32("group_epoch"),
        int32("assignment_epoch"),
        cstring("assignor_name"),
        carray("members", &[
            cstring("member_id"),
            cstring("instance_id"),
            cstring("rack_id"),
            int32("member_epoch"),
            cstring("client_id"),
            cstring("client_host"),
            carray("subscribed_topic_names", &[cstring("name")]),
            cstring("subscribed_topic_regex"),
            field("assignment", Shape::Struct(MEMBER_ASSIGNMENT)),
            field("target_assignment", Shape::Struct(MEMBER_ASSIGNMENT)),
            TAGS,
        ]),
        int32("authorized_operations"),
        TAGS,
    ]),
    TAGS,
]);

answer!(DescribeConfigsResponse, DescribeConfigs, 4 => &[
    int32("throttle_time_ms"),
    carray("results", &[
        int16("error_code"),
        cstring("error_message"),
        int8("resource_type"),
        cstring("resource_name"),
        carray("configs", &[
            cstring("name"),
            cstring("value"),
            int8("read_only"),
            int8("config_source"),
            int8("is_sensitive"),
            carray("synonyms", &[cstring("name"), cstring("value"), int8("source"), TAGS]),
            int8("config_type"),
            cstring("documentation"),
            TAGS,
        ]),
        TAGS,
    ]),
    TAGS,
]);

answer!(DescribeLogDirsResponse, DescribeLogDirs, 4 => &[
    int32("throttle_time_ms"),
    int16("error_code"),
    carray("results", &[
        int16("error_code"),
        cstring("log_dir"),
        carray("topics", &[
            cstring("name"),
            carray("partitions", &[
                int32("partition_index"), int64("partition_size"), int64("offset_lag"), int8("is_future_key"), TAGS,
            ]),
            TAGS,
        ]),
        int64("total_bytes"),
        int64("usable_bytes"),
        TAGS,
    ]),
    TAGS,
]);

/// An answer's body (after its response header) checked against `A`'s
/// shape at `version`, then decoded by the crate: what
/// [`crate::wire::broker_link::BrokerLink::call`] reads, and the fuzz
/// targets drive. An error says which field did not fit, or the crate's.
pub(crate) fn decode<A: Answer>(mut body: bytes::Bytes, version: i16) -> Result<A, Unreadable> {
    let shape = A::shape(version).ok_or(Unreadable::Version(version))?;
    check(&body, shape)?;
    A::decode(&mut body, version).map_err(|e| Unreadable::Decode(e.to_string()))
}

/// Why an answer could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum Unreadable {
    /// kshard does not ask for this version of the answer.
    #[error("version {0}, which kshard does not read")]
    Version(i16),
    /// A field does not fit the bytes.
    #[error(transparent)]
    Misshapen(#[from] Misshapen),
    /// The protocol crate refused what fitted (its words).
    #[error("{0}")]
    Decode(String),
}

/// A frame that does not fit its shape: which field, and how.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("field {field}: {error}")]
pub(crate) struct Misshapen {
    /// The field's path, as `topics[3].partitions[0].isr_nodes`.
    pub(crate) field: String,
    /// What ran short or was malformed.
    pub(crate) error: CursorError,
}

/// Walks `body` (an answer after its response header) through `shape`:
/// `Ok` when every field fits the bytes and they end with the last one.
pub(crate) fn check(body: &[u8], shape: &[Field]) -> Result<(), Misshapen> {
    let c = &mut Cursor::new(body);
    let mut values = MOST_VALUES;
    walk(c, shape, &mut values).map_err(|(path, error)| Misshapen { field: joined(&path), error })?;
    if !c.is_empty() {
        let error = CursorError::InvalidLength { at: c.position(), len: c.remaining() as i64 };
        return Err(Misshapen { field: "(bytes after the last field)".into(), error });
    }
    Ok(())
}

/// `["topics", "[3]", "name"]` as `topics[3].name`.
fn joined(path: &[String]) -> String {
    let mut out = String::new();
    for segment in path {
        if !out.is_empty() && !segment.starts_with('[') {
            out.push('.');
        }
        out.push_str(segment);
    }
    out
}

/// The most values (array elements, strings, byte fields) an answer may
/// hold. The crate gives each a struct or a `String` of its own (up to
/// about 100 bytes where the wire has 1 to 20): a 64 MiB answer of
/// one-byte strings would decode to gigabytes. 4 million is 30 times the
/// values of Metadata for 100,000 partitions of three replicas.
const MOST_VALUES: usize = 4 * 1024 * 1024;

/// A failed walk: the path to the field (innermost last) and the error.
type Failed = (Vec<String>, CursorError);

fn walk(c: &mut Cursor<'_>, fields: &[Field], values: &mut usize) -> Result<(), Failed> {
    for f in fields {
        walk_field(c, &f.shape, values).map_err(|(mut path, e)| {
            path.insert(0, f.name.to_owned());
            (path, e)
        })?;
    }
    Ok(())
}

fn walk_field(c: &mut Cursor<'_>, shape: &Shape, values: &mut usize) -> Result<(), Failed> {
    let here = |e: CursorError| (Vec::new(), e);
    if matches!(shape, Shape::String | Shape::CompactString | Shape::CompactBytes) {
        take_values(c, values, 1)?;
    }
    match shape {
        Shape::Fixed(n) => c.skip(*n).map_err(here),
        Shape::String => c.bytes16().map(drop).map_err(here),
        Shape::CompactString | Shape::CompactBytes => c.compact_bytes().map(drop).map_err(here),
        Shape::Array(of) => {
            let count = c.length32().map_err(here)?.unwrap_or(0);
            elements(c, count, of, values)
        }
        Shape::CompactArray(of) => {
            let count = c.compact_length().map_err(here)?.unwrap_or(0);
            elements(c, count, of, values)
        }
        Shape::Struct(fields) => walk(c, fields, values),
        Shape::Tags(known) => {
            let count = c.uvarint().map_err(here)? as usize;
            // Each tagged field takes at least two bytes (tag, size).
            c.fits(count, 2).map_err(here)?;
            for _ in 0..count {
                let tag = c.uvarint().map_err(here)?;
                let size = c.uvarint().map_err(here)? as usize;
                let mut inner = c.split(size).map_err(here)?;
                if let Some((_, fields)) = known.iter().find(|(t, _)| *t == tag) {
                    // The crate reads a known tag's fields from the frame
                    // itself: they must end where the tag's size says.
                    walk(&mut inner, fields, values).map_err(|(mut path, e)| {
                        path.insert(0, format!("tag {tag}"));
                        (path, e)
                    })?;
                    if !inner.is_empty() {
                        let error = CursorError::InvalidLength { at: inner.position(), len: size as i64 };
                        return Err((vec![format!("tag {tag}")], error));
                    }
                }
            }
            Ok(())
        }
    }
}

/// `count` elements of `of`, the count first checked against the least
/// they can take.
fn elements(c: &mut Cursor<'_>, count: usize, of: &[Field], values: &mut usize) -> Result<(), Failed> {
    c.fits(count, least(of).max(1)).map_err(|e| (Vec::new(), e))?;
    take_values(c, values, count)?;
    for i in 0..count {
        walk(c, of, values).map_err(|(mut path, e)| {
            // `[i]` goes on the array's own name, which the caller adds.
            path.insert(0, format!("[{i}]"));
            (path, e)
        })?;
    }
    Ok(())
}

/// Counts `n` more values against what an answer may hold.
fn take_values(c: &Cursor<'_>, values: &mut usize, n: usize) -> Result<(), Failed> {
    *values = values.checked_sub(n).ok_or_else(|| {
        (
            vec!["(values past the most an answer may hold)".to_owned()],
            CursorError::InvalidLength { at: c.position(), len: i64::try_from(n).unwrap_or(i64::MAX) },
        )
    })?;
    Ok(())
}

/// The fewest bytes `fields` take on the wire.
fn least(fields: &[Field]) -> usize {
    fields
        .iter()
        .map(|f| match &f.shape {
            Shape::Fixed(n) => *n,
            Shape::String => 2,
            Shape::Array(_) => 4,
            Shape::CompactString | Shape::CompactBytes | Shape::CompactArray(_) | Shape::Tags(_) => 1,
            Shape::Struct(inner) => least(inner),
        })
        .sum()
}

#[cfg(test)]
#[path = "answer_shape_tests.rs"]
mod tests;
