//! A partition's record batches: walked record by record from an offset
//! (as the reader does) and searched for the first record at or after a few
//! offsets (as record times are read).
//!
//! Input layout: a flags byte (bit 0: committed records only), a byte `n`
//! (0 to 7 offsets wanted, each the next 8 bytes, big-endian), then the
//! batches. The reader starts at the first offset wanted (0 without one).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let [flags, n, rest @ ..] = data else { return };
    let n = usize::from(*n % 8);
    let mut wants = Vec::new();
    let mut rest = rest;
    for _ in 0..n {
        let Some((want, more)) = rest.split_first_chunk::<8>() else { break };
        wants.push(i64::from_be_bytes(*want));
        rest = more;
    }
    kshard_kafka::fuzz::records(rest, wants.first().copied().unwrap_or(0), flags & 1 == 1);
    kshard_kafka::fuzz::record_times(rest, &wants);
});
