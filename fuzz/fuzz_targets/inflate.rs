//! A compressed batch's records: inflated with Kafka's codec named by the
//! first byte (0 none, 1 gzip, 2 snappy, 3 lz4, 4 zstd; others refused), at
//! most 1 MiB.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let [codec, rest @ ..] = data else { return };
    kshard_kafka::fuzz::inflate(i16::from(*codec % 6), rest, 1 << 20);
});
