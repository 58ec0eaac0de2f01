//! [`TopicPartition`]: one partition of one topic, the key of everything the
//! clients report per partition (watermarks, listed offsets). Only a name
//! and a number: it says nothing about leaders or offsets.
//! [`TopicPartitionOffset`]: one offset of one partition — where a record is
//! (the record times lag in seconds wants, a group's committed offset).

use std::fmt;

/// A partition of a topic. Ordered by topic, then partition; shown as
/// `topic/partition`, as kshard's messages name partitions.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TopicPartition {
    /// The topic's name.
    pub topic: String,
    /// The partition's number within it.
    pub partition: i32,
}

impl TopicPartition {
    /// `partition` of `topic`.
    pub fn new(topic: impl Into<String>, partition: i32) -> Self {
        TopicPartition { topic: topic.into(), partition }
    }
}

impl fmt::Display for TopicPartition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.topic, self.partition)
    }
}

/// An offset of a partition of a topic. Ordered by topic, partition, then
/// offset; shown as `topic/partition@offset`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TopicPartitionOffset {
    /// The topic's name.
    pub topic: String,
    /// The partition's number within it.
    pub partition: i32,
    /// The offset within the partition.
    pub offset: i64,
}

impl TopicPartitionOffset {
    /// `offset` of `partition` of `topic`.
    pub fn new(topic: impl Into<String>, partition: i32, offset: i64) -> Self {
        TopicPartitionOffset { topic: topic.into(), partition, offset }
    }
}

impl fmt::Display for TopicPartitionOffset {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}@{}", self.topic, self.partition, self.offset)
    }
}

#[cfg(test)]
mod tests {
    use super::TopicPartition;

    #[test]
    fn orders_by_topic_then_partition_and_shows_both() {
        let mut partitions = [TopicPartition::new("b", 0), TopicPartition::new("a", 10), TopicPartition::new("a", 2)];
        partitions.sort();
        let shown: Vec<String> = partitions.iter().map(ToString::to_string).collect();
        assert_eq!(shown, ["a/2", "a/10", "b/0"]);
    }
}
