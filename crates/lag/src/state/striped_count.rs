//! [`StripedCount`]: a count that the shards of every partition add to at
//! once. One atomic shared by them was a cache line moved between cores at
//! every record: 6% of the CPU of catching up on 1M commits (`perf record`
//! of `kshard serve`, two tokio workers). Each partition adds to a stripe of
//! its own line instead; a reader sums the stripes.

use std::sync::atomic::{AtomicU64, Ordering};

/// Stripes: more than the cores of most machines that run kshard, few enough
/// that a sum stays a handful of loads.
const STRIPES: usize = 16;

/// A counter added to by partition (see the module's doc).
#[derive(Debug, Default)]
pub struct StripedCount([Stripe; STRIPES]);

/// One stripe, alone on its cache line (128 bytes: two lines are fetched
/// together on x86).
#[derive(Debug, Default)]
#[repr(align(128))]
struct Stripe(AtomicU64);

impl StripedCount {
    /// Adds `n` for `partition`.
    pub fn add(&self, partition: i32, n: u64) {
        let stripe = usize::try_from(partition.rem_euclid(STRIPES as i32)).unwrap_or(0);
        self.0[stripe].0.fetch_add(n, Ordering::Relaxed);
    }

    /// The count: every stripe's, summed.
    pub fn get(&self) -> u64 {
        self.0.iter().map(|s| s.0.load(Ordering::Relaxed)).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_partition_counts_negative_ones_too() {
        let count = StripedCount::default();
        for partition in [-1, 0, 1, 15, 16, 17, 49, i32::MIN, i32::MAX] {
            count.add(partition, 2);
        }
        assert_eq!(count.get(), 18);
        assert_eq!(std::mem::align_of::<Stripe>(), 128);
    }
}
