//! [`Watermarks`]: the low and high watermark of every partition of the topics
//! groups have committed to, replaced wholesale at each refresh.

use std::collections::HashMap;

/// Low and high watermark of one partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Watermark {
    /// The earliest offset still in the log.
    pub low: i64,
    /// The offset the next produced record will get.
    pub high: i64,
}

/// Watermarks by topic and partition. A topic that is not here does not exist
/// (any more): its series are not exported.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Watermarks {
    topics: HashMap<String, Vec<Option<Watermark>>>,
}

impl Watermarks {
    /// Records one partition's watermarks. Partition ids come from brokers: a
    /// negative or absurd one (beyond 2^20) is ignored rather than allowed to
    /// size a vector.
    pub fn insert(&mut self, topic: &str, partition: i32, watermark: Watermark) {
        let Ok(index) = usize::try_from(partition) else { return };
        if index > 1 << 20 {
            return;
        }
        let partitions = self.topics.entry(topic.to_owned()).or_default();
        if partitions.len() <= index {
            partitions.resize(index + 1, None);
        }
        partitions[index] = Some(watermark);
    }

    /// One partition's watermarks, when known.
    pub fn get(&self, topic: &str, partition: i32) -> Option<Watermark> {
        let index = usize::try_from(partition).ok()?;
        self.topics.get(topic)?.get(index).copied().flatten()
    }

    /// True when the topic exists (some partition has watermarks).
    pub fn has_topic(&self, topic: &str) -> bool {
        self.topics.contains_key(topic)
    }

    /// Every topic with its partitions' watermarks (index = partition).
    pub fn topics(&self) -> impl Iterator<Item = (&str, &[Option<Watermark>])> {
        self.topics.iter().map(|(t, p)| (t.as_str(), p.as_slice()))
    }

    /// A topic's partitions' watermarks, by partition id (empty when unknown).
    pub fn of_topic(&self, topic: &str) -> &[Option<Watermark>] {
        self.topics.get(topic).map_or(&[], Vec::as_slice)
    }

    /// Number of partitions with watermarks.
    pub fn partition_count(&self) -> usize {
        self.topics.values().map(|p| p.iter().flatten().count()).sum()
    }
}

/// Lag of a committed offset: how far behind the high watermark it is, never
/// negative (a commit can run ahead of a stale watermark), and at most
/// `i64::MAX` (a client may commit any offset, `i64::MIN` too).
pub fn lag(high_watermark: i64, committed: i64) -> i64 {
    high_watermark.saturating_sub(committed).max(0)
}

/// A sum of lags (or of records lost) that stops at `i64::MAX` rather than
/// wrap: one commit near `i64::MIN` saturates a partition's lag, and the
/// totals over it must not turn negative.
pub(crate) fn total(lags: impl IntoIterator<Item = i64>) -> i64 {
    lags.into_iter().fold(0, i64::saturating_add)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partitions_index_and_absurd_ids_are_ignored() {
        let mut w = Watermarks::default();
        w.insert("t", 2, Watermark { low: 1, high: 5 });
        w.insert("t", -1, Watermark { low: 0, high: 0 });
        w.insert("t", i32::MAX, Watermark { low: 0, high: 0 });
        assert_eq!(w.get("t", 2), Some(Watermark { low: 1, high: 5 }));
        assert_eq!(w.get("t", 0), None);
        assert_eq!(w.partition_count(), 1);
        assert!(w.has_topic("t") && !w.has_topic("u"));
        assert_eq!(lag(10, 4), 6);
        assert_eq!(lag(10, 12), 0);
    }
}
