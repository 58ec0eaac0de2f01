//! The offset-commit path allocates nothing: decoding offset-commit keys and
//! values (every version, tombstones included) is checked under an allocator
//! that counts.

// A counting global allocator needs `unsafe impl GlobalAlloc`; it only forwards
// to the system allocator.
#![allow(unsafe_code)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::borrow::Cow;
use std::cell::Cell;

use kshard_offsets::{OffsetCommitKey, OffsetCommitValue, Record, RecordKey, RecordValue, Uuid};

struct Counting;

thread_local! {
    // Counted per thread, so the test harness's own threads cannot disturb it.
    // A `const` initializer with no destructor is safe to touch from `alloc`.
    static ALLOCATIONS: Cell<usize> = const { Cell::new(0) };
}

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.with(|n| n.set(n.get() + 1));
        // SAFETY: forwards the caller's layout unchanged.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from `System.alloc` with this layout.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

#[test]
fn decoding_offset_commits_does_not_allocate() {
    let mut encoded = Vec::new();
    for version in 0..=5 {
        let record = Record {
            key: RecordKey::OffsetCommit {
                key_version: 1,
                key: OffsetCommitKey { group: "group".into(), topic: "topic".into(), partition: 3 },
            },
            value: Some(RecordValue::OffsetCommit(OffsetCommitValue {
                version,
                offset: 42,
                leader_epoch: (version >= 3).then_some(1),
                metadata: Cow::Borrowed("some metadata"),
                commit_timestamp: 1,
                expire_timestamp: (version == 1).then_some(2),
                topic_id: (version >= 4).then_some(Uuid([9; 16])),
            })),
        };
        encoded.push(record.encode());
        encoded.push((record.encode().0, None));
    }
    let before = ALLOCATIONS.with(Cell::get);
    let mut sum = 0i64;
    for (key, value) in &encoded {
        match Record::decode(key, value.as_deref()) {
            Ok(Record { value: Some(RecordValue::OffsetCommit(v)), .. }) => sum += v.offset,
            Ok(_) => sum += 1,
            Err(_) => sum -= 1,
        }
    }
    let after = ALLOCATIONS.with(Cell::get);
    assert_eq!(sum, 6 * 42 + 6);
    assert_eq!(after - before, 0, "decoding offset commits allocated");
}
