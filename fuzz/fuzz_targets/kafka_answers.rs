//! The answers kshard decodes with the kafka-protocol crate (Metadata,
//! ListOffsets, ApiVersions v0 and v3, SASL, ListGroups v4 and v5,
//! FindCoordinator, OffsetFetch, DescribeGroups, ConsumerGroupDescribe,
//! ShareGroupDescribe, DescribeConfigs, DescribeLogDirs): the first byte
//! picks one, the rest is its body. Checked against its shape, then decoded
//! when it fits: neither may panic or abort.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let [which, body @ ..] = data else { return };
    kshard_kafka::fuzz::answer(*which, body);
});
