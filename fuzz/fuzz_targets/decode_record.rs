//! Fuzzes every decode entry point: a record's key and value, and the
//! consumer-protocol bytes of group members.
//!
//! Input layout: a flags byte (bit 0 set: the value is null, a tombstone), a
//! byte `k`, then `k` key bytes; the rest is the value. Key length and
//! tombstone are independent, so every combination is reachable.
//! Run: `RUSTC_BOOTSTRAP=1 cargo fuzz run decode_record` (from the repository root).
#![no_main]

use kshard_offsets::{Assignment, Record, RecordValue, Subscription};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let [flags, k, rest @ ..] = data else { return };
    let split = usize::from(*k).min(rest.len());
    let (key, value) = rest.split_at(split);
    let value = if flags & 1 == 1 { None } else { Some(value) };
    if let Ok(record) = Record::decode(key, value) {
        let (k2, v2) = record.encode();
        // Whatever decodes re-encodes to something that decodes to the same record.
        let again = Record::decode(&k2, v2.as_deref()).expect("re-encoded record decodes");
        assert_eq!(again, record);
        if let Some(RecordValue::GroupMetadata(g)) = &record.value {
            for m in &g.members {
                let _ = m.consumer_subscription();
                let _ = m.consumer_assignment();
            }
        }
    }
    if let Some(v) = value {
        let _ = Subscription::decode(v);
        let _ = Assignment::decode(v);
    }
});
