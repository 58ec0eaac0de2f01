//! [`Seconds`]: a duration given in seconds that checks its own range, so a
//! setting's bounds are in its type.

use std::time::Duration;

/// A duration of `MIN_MS` to `MAX_MS` milliseconds, given in seconds
/// (fractions allowed), e.g. `watermark_interval_seconds: 0.5`.
#[derive(Debug, Clone, Copy, PartialEq, PartialOrd, serde::Serialize, serde::Deserialize)]
#[serde(try_from = "f64", into = "f64")]
pub struct Seconds<const MIN_MS: u64, const MAX_MS: u64>(Duration);

/// Why a number of seconds is not a [`Seconds`] of its range.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{value} (between {min} and {max} seconds)")]
pub struct OutOfRange {
    /// The number given.
    pub value: f64,
    /// The least allowed, in seconds.
    pub min: f64,
    /// The most allowed, in seconds.
    pub max: f64,
}

impl<const MIN_MS: u64, const MAX_MS: u64> Seconds<MIN_MS, MAX_MS> {
    /// The least it may be.
    pub const MIN: Duration = Duration::from_millis(MIN_MS);
    /// The most it may be.
    pub const MAX: Duration = Duration::from_millis(MAX_MS);

    /// The duration.
    pub fn get(self) -> Duration {
        self.0
    }

    /// `duration`, when in range.
    pub fn new(duration: Duration) -> Result<Self, OutOfRange> {
        Self::try_from(duration.as_secs_f64())
    }
}

impl<const MIN_MS: u64, const MAX_MS: u64> TryFrom<f64> for Seconds<MIN_MS, MAX_MS> {
    type Error = OutOfRange;
    fn try_from(value: f64) -> Result<Self, OutOfRange> {
        let (min, max) = (Self::MIN.as_secs_f64(), Self::MAX.as_secs_f64());
        if value.is_finite() && (min..=max).contains(&value) {
            Ok(Seconds(Duration::from_secs_f64(value)))
        } else {
            Err(OutOfRange { value, min, max })
        }
    }
}

impl<const MIN_MS: u64, const MAX_MS: u64> From<Seconds<MIN_MS, MAX_MS>> for f64 {
    fn from(s: Seconds<MIN_MS, MAX_MS>) -> f64 {
        s.0.as_secs_f64()
    }
}

impl<const MIN_MS: u64, const MAX_MS: u64> From<Seconds<MIN_MS, MAX_MS>> for Duration {
    fn from(s: Seconds<MIN_MS, MAX_MS>) -> Duration {
        s.0
    }
}

/// How often watermarks are refreshed: 0.1 s to an hour.
pub type WatermarkInterval = Seconds<100, 3_600_000>;

/// How long after a crash a member's primaries move: 2 s to an hour.
pub type LeaseTtl = Seconds<2_000, 3_600_000>;

/// How often kminion's cluster families are asked for: 1 s to an hour.
pub type ClusterInfoInterval = Seconds<1_000, 3_600_000>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_range_is_the_types() {
        assert_eq!(WatermarkInterval::try_from(0.5).map(Seconds::get), Ok(Duration::from_millis(500)));
        assert!(WatermarkInterval::try_from(0.0).is_err());
        assert!(WatermarkInterval::try_from(f64::NAN).is_err());
        assert!(WatermarkInterval::try_from(3600.5).is_err());
        assert_eq!(LeaseTtl::try_from(1.0).expect_err("too short").to_string(), "1 (between 2 and 3600 seconds)");
        let parsed: Result<LeaseTtl, _> = serde_norway::from_str("10");
        assert_eq!(parsed.map(Seconds::get).ok(), Some(Duration::from_secs(10)));
    }
}
