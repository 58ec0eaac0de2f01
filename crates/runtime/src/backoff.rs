//! The retry schedule of status writes (the seed's): before attempt 1, 2, 3, …
//! wait 0, 0, 5 ms, 2 s, 3 s, 4 s, then 5 s for every later attempt, until the
//! replica's context ends.

use std::time::Duration;

/// The wait before `attempt` (1-based; 0 is treated as 1).
pub(crate) fn status_write_backoff(attempt: u32) -> Duration {
    match attempt {
        0..=2 => Duration::ZERO,
        3 => Duration::from_millis(5),
        4 => Duration::from_secs(2),
        5 => Duration::from_secs(3),
        6 => Duration::from_secs(4),
        _ => Duration::from_secs(5),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_seeds_schedule() {
        let ms: Vec<u128> = (1..=9).map(|a| status_write_backoff(a).as_millis()).collect();
        assert_eq!(ms, [0, 0, 5, 2000, 3000, 4000, 5000, 5000, 5000]);
    }
}
