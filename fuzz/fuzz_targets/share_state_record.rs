//! A `__share_group_state` record: a byte `k`, then `k` key bytes, then the
//! value (flags bit 0 of the first byte after the key: a tombstone).
#![no_main]

use kshard_offsets::ShareStateRecord;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let [k, rest @ ..] = data else { return };
    let split = usize::from(*k).min(rest.len());
    let (key, value) = rest.split_at(split);
    let value = match value.split_first() {
        Some((flags, _)) if flags & 1 == 1 => None,
        Some((_, value)) => Some(value),
        None => None,
    };
    let _ = ShareStateRecord::decode(key, value);
});
