//! `rate_limit` of the web configuration: a token bucket (Go's
//! `rate.NewLimiter(rate.Every(interval), burst)`), on the caller's clock.

use std::time::{Duration, Instant};

use super::config::RateLimit;

/// The bucket: `burst` tokens at most, one more every `interval`; a request
/// takes one or is refused.
#[derive(Debug)]
pub(crate) struct TokenBucket {
    /// The limit the tokens were counted for; a changed one starts full.
    limit: Option<RateLimit>,
    tokens: f64,
    at: Option<Instant>,
}

impl TokenBucket {
    pub(crate) fn new() -> Self {
        TokenBucket { limit: None, tokens: 0.0, at: None }
    }

    /// Whether a request at `now` may go on under `limit`.
    pub(crate) fn allow(&mut self, limit: RateLimit, now: Instant) -> bool {
        if limit.interval.is_zero() {
            return true;
        }
        if self.limit != Some(limit) {
            *self = TokenBucket { limit: Some(limit), tokens: f64::from(limit.burst), at: Some(now) };
        }
        let elapsed = self.at.map_or(Duration::ZERO, |at| now.saturating_duration_since(at));
        self.at = Some(now.max(self.at.unwrap_or(now)));
        let refill = elapsed.as_secs_f64() / limit.interval.as_secs_f64();
        self.tokens = (self.tokens + refill).min(f64::from(limit.burst));
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_then_one_per_interval() {
        let limit = RateLimit { interval: Duration::from_secs(1), burst: 3 };
        let mut bucket = TokenBucket::new();
        let t0 = Instant::now();
        assert!((0..3).all(|_| bucket.allow(limit, t0)), "the burst goes through");
        assert!(!bucket.allow(limit, t0), "the fourth at once is refused");
        assert!(!bucket.allow(limit, t0 + Duration::from_millis(900)));
        assert!(bucket.allow(limit, t0 + Duration::from_millis(1000)), "a token a second");
        assert!(!bucket.allow(limit, t0 + Duration::from_millis(1100)));
        // Idle for long: the bucket holds no more than the burst.
        let later = t0 + Duration::from_secs(100);
        assert!((0..3).all(|_| bucket.allow(limit, later)));
        assert!(!bucket.allow(limit, later));
    }

    #[test]
    fn interval_zero_turns_it_off_and_a_new_limit_starts_full() {
        let off = RateLimit { interval: Duration::ZERO, burst: 0 };
        let mut bucket = TokenBucket::new();
        let t0 = Instant::now();
        assert!((0..1000).all(|_| bucket.allow(off, t0)));
        let one = RateLimit { interval: Duration::from_secs(60), burst: 1 };
        assert!(bucket.allow(one, t0));
        assert!(!bucket.allow(one, t0));
        let two = RateLimit { interval: Duration::from_secs(60), burst: 2 };
        assert!(bucket.allow(two, t0) && bucket.allow(two, t0));
        assert!(!bucket.allow(two, t0));
    }
}
