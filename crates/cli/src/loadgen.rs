//! The shape of a realistic load, generated deterministically: rounds of offset
//! commits by N groups over M partitions. As a synthetic `__consumer_offsets`
//! stream (for a topic of that layout: Kafka writes the real one itself) it also
//! mixes value versions v1, v3 and v4 as across a fleet of old and new clients,
//! each group's metadata with consumer members and their assignments, offset and
//! group tombstones in the last round, and a few malformed records. Pure: it
//! yields offsets and records, `loadgen_write` writes them.

use std::borrow::Cow;

use kshard_offsets::{GroupMetadataValue, MemberMetadata, OffsetCommitValue, Record, TopicPartitions};

/// The shape of the stream.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct LoadShape {
    /// Number of consumer groups.
    #[arg(long, default_value_t = 1000)]
    pub(crate) groups: u32,
    /// Partitions each group commits to (of its topic).
    #[arg(long, default_value_t = 3)]
    pub(crate) partitions: u32,
    /// Rounds of commits: every group commits every partition once per round.
    #[arg(long, default_value_t = 10)]
    pub(crate) rounds: u32,
    /// Number of distinct topics the groups consume.
    #[arg(long, default_value_t = 20)]
    pub(crate) topics: u32,
    /// Malformed records to mix in (truncated offset-commit values; with
    /// `--offsets-topic` only).
    #[arg(long, default_value_t = 3)]
    pub(crate) malformed: u32,
    /// Records to produce into each partition of each consumed topic, so that
    /// lag is real (the committed offsets stay below it); 0 creates no topics.
    /// Default: 10 × rounds + 10.
    #[arg(long)]
    pub(crate) topic_records: Option<u32>,
    /// Real consumer groups to run through the broker's group coordinator (they
    /// join, read part of a topic and commit): what `scrape_mode: admin_api` sees.
    #[arg(long, default_value_t = 0)]
    pub(crate) real_groups: u32,
    /// Prefix of group names.
    #[arg(long, default_value = "loadgen")]
    pub(crate) prefix: String,
    /// The last round commits the end of every partition: the groups finish
    /// caught up (lag 0, status OK) instead of stopped with lag, as the
    /// background groups of `scripts/run.sh` do. (With `--offsets-topic`, the
    /// last round's tombstones still delete some offsets and groups.)
    #[arg(long)]
    pub(crate) caught_up: bool,
}

/// One record to write: its group (for partitioning) and its bytes.
#[derive(Debug)]
pub(crate) struct GeneratedRecord {
    pub(crate) group: String,
    pub(crate) key: Vec<u8>,
    pub(crate) value: Option<Vec<u8>>,
    pub(crate) kind: Kind,
}

/// What a generated record is, for the summary.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Kind {
    OffsetCommit,
    GroupMetadata,
    OffsetTombstone,
    GroupTombstone,
    Malformed,
}

impl LoadShape {
    /// Records produced into each partition of each consumed topic.
    pub(crate) fn records_per_topic_partition(&self) -> u32 {
        self.topic_records.unwrap_or(self.rounds * 10 + 10)
    }

    /// The names of the consumed topics.
    pub(crate) fn topic_names(&self) -> Vec<String> {
        (0..self.topics.min(self.groups).max(1)).map(|g| self.topic_name(g)).collect()
    }

    pub(crate) fn group_name(&self, g: u32) -> String {
        format!("{}-group-{g:05}", self.prefix)
    }

    pub(crate) fn topic_name(&self, g: u32) -> String {
        format!("{}-topic-{:03}", self.prefix, g % self.topics.max(1))
    }

    /// The offset group `g` commits for partition `p` in `round`: growing with
    /// the rounds, below the records loadgen produces into the topic
    /// (10 × rounds + 10), so that every group has some lag; with
    /// `caught_up`, the end of the partition in the last round.
    pub(crate) fn offset(&self, g: u32, p: u32, round: u32) -> i64 {
        if self.caught_up && round + 1 == self.rounds {
            return i64::from(self.records_per_topic_partition());
        }
        i64::from(round) * 10 + i64::from((g + p) % 10)
    }

    /// Every record of the stream, in write order.
    pub(crate) fn records(&self) -> impl Iterator<Item = GeneratedRecord> + '_ {
        (0..self.rounds).flat_map(move |round| self.round(round))
    }

    fn round(&self, round: u32) -> Vec<GeneratedRecord> {
        let mut out = Vec::new();
        let last = round + 1 == self.rounds;
        for g in 0..self.groups {
            let group = self.group_name(g);
            let topic = self.topic_name(g);
            if round.is_multiple_of(5) || last {
                out.push(self.group_metadata(&group, &topic, round));
            }
            for p in 0..self.partitions {
                out.push(self.offset_commit(&group, &topic, p, round, g));
            }
            if last && g % 10 == 9 {
                // The group stopped consuming one partition: its offset is deleted.
                out.push(encode(&group, Kind::OffsetTombstone, &Record::offset_commit(&group, &topic, 0, None)));
            }
            if last && g % 50 == 49 {
                // The group was deleted: Kafka writes offset tombstones, then the group's.
                for p in 0..self.partitions {
                    out.push(encode(
                        &group,
                        Kind::OffsetTombstone,
                        &Record::offset_commit(&group, &topic, p as i32, None),
                    ));
                }
                out.push(encode(&group, Kind::GroupTombstone, &Record::group_metadata(group.as_str(), None)));
            }
        }
        // Spread the malformed records over the rounds and groups.
        if self.malformed > 0 && self.groups > 0 {
            for m in 0..self.malformed {
                if m % self.rounds.max(1) == round {
                    let g = (m * 7919) % self.groups;
                    let group = self.group_name(g);
                    let (key, _) = Record::offset_commit(&group, self.topic_name(g), 0, None).encode();
                    // Version 3 with the value cut off after the offset.
                    let value = [0, 3, 0, 0, 0, 0, 0, 0, 0, 42].to_vec();
                    out.push(GeneratedRecord { group, key, value: Some(value), kind: Kind::Malformed });
                }
            }
        }
        out
    }

    fn offset_commit(&self, group: &str, topic: &str, p: u32, round: u32, g: u32) -> GeneratedRecord {
        let version = match (g + p + round) % 10 {
            0 => 1,
            1..=3 => 3,
            _ => 4,
        };
        let offset = self.offset(g, p, round);
        let value = OffsetCommitValue {
            leader_epoch: (version >= 3).then_some(0),
            ..OffsetCommitValue::new(version, offset, 1_758_335_260_726 + i64::from(round) * 5_000)
        };
        encode(group, Kind::OffsetCommit, &Record::offset_commit(group, topic, p as i32, Some(value)))
    }

    fn group_metadata(&self, group: &str, topic: &str, round: u32) -> GeneratedRecord {
        let members_count = self.partitions.clamp(1, 3);
        let members = (0..members_count)
            .map(|m| {
                let assigned = vec![TopicPartitions {
                    topic: Cow::Borrowed(topic),
                    partitions: (0..self.partitions).filter(|p| p % members_count == m).map(|p| p as i32).collect(),
                }];
                MemberMetadata::consumer(
                    format!("{group}-consumer-{m}-{round}"),
                    format!("{group}-consumer-{m}"),
                    vec![Cow::Borrowed(topic)],
                    assigned,
                )
            })
            .collect();
        let value = GroupMetadataValue {
            current_state_timestamp: Some(1_758_335_260_726 + i64::from(round) * 5_000),
            ..GroupMetadataValue::consumer(3, round as i32 + 1, members)
        };
        encode(group, Kind::GroupMetadata, &Record::group_metadata(group, Some(value)))
    }
}

fn encode(group: &str, kind: Kind, record: &Record<'_>) -> GeneratedRecord {
    let (key, value) = record.encode();
    GeneratedRecord { group: group.to_owned(), key, value, kind }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kshard_offsets::{Record, RecordValue};

    fn shape() -> LoadShape {
        LoadShape {
            groups: 100,
            partitions: 3,
            rounds: 5,
            topics: 4,
            malformed: 3,
            topic_records: None,
            real_groups: 0,
            prefix: "t".into(),
            caught_up: false,
        }
    }

    #[test]
    fn caught_up_groups_end_at_the_end_of_each_partition() {
        let s = LoadShape { caught_up: true, ..shape() };
        assert_eq!(s.offset(7, 2, 4), i64::from(s.records_per_topic_partition()));
        assert!(s.offset(7, 2, 3) < s.offset(7, 2, 4));
        assert!(shape().offset(7, 2, 4) < i64::from(shape().records_per_topic_partition()), "lag by default");
    }

    #[test]
    fn the_stream_has_the_promised_mix() {
        let records: Vec<_> = shape().records().collect();
        let count = |k| records.iter().filter(|r| r.kind == k).count();
        assert_eq!(count(Kind::OffsetCommit), 100 * 3 * 5);
        assert_eq!(count(Kind::GroupMetadata), 100 * 2); // rounds 0 and 4 (the last)
        assert_eq!(count(Kind::Malformed), 3);
        assert_eq!(count(Kind::GroupTombstone), 2);
        assert_eq!(count(Kind::OffsetTombstone), 10 + 2 * 3);
        let mut versions = std::collections::BTreeSet::new();
        for r in &records {
            let decoded = Record::decode(&r.key, r.value.as_deref());
            match r.kind {
                Kind::Malformed => assert!(decoded.is_err()),
                _ => {
                    let decoded = decoded.expect("generated records decode");
                    if let Some(RecordValue::OffsetCommit(v)) = decoded.value {
                        versions.insert(v.version);
                    }
                }
            }
        }
        assert_eq!(versions.into_iter().collect::<Vec<_>>(), vec![1, 3, 4]);
    }
}
