//! A Fetch v12 answer's frame, as a broker sends it: read, then every
//! partition's record batches walked (CRC, decompression, transactions).
//! Run: `RUSTC_BOOTSTRAP=1 cargo fuzz run fetch_answer` (from `fuzz/`).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|frame: &[u8]| kshard_kafka::fuzz::fetch_answer(frame));
