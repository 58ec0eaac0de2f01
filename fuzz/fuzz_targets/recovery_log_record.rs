//! A recovery log's record, as any writer of the log topic could append
//! it: decoded (its mutations, source offsets, snapshot parts and chain),
//! and whatever decodes encodes back to what decodes to the same record.
#![no_main]

use kshard_runtime::recovery_log::LogRecord;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|bytes: &[u8]| {
    if let Ok(record) = LogRecord::decode(bytes) {
        let again = LogRecord::decode(&record.encode()).expect("an encoded record decodes");
        assert_eq!(again, record);
    }
});
