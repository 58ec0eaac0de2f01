//! What a recovery-log topic's configuration must be, and the check of an
//! existing one. Pure: the caller reads the topic's configuration (Kafka's
//! DescribeConfigs) and creates topics with [`TOPIC_CONFIGS`].
//!
//! A recovery log is the durable copy of every shard's state: the runtime,
//! not the broker, decides what of it may go (it deletes before the previous
//! snapshot). So the broker must never compact it or delete by age or size,
//! and must never elect a leader that lacks acknowledged records. A topic
//! made by hand, or by Kafka's auto-creation when a producer wrote to a
//! missing one, gets the broker's defaults (seven days of retention): used
//! as it is, it would lose the records a replica starts from.

/// Settings a recovery-log topic is created with; the first four are also
/// what an existing topic must have.
pub(crate) const TOPIC_CONFIGS: [(&str, &str); 4] = [
    ("cleanup.policy", "delete"),
    ("retention.ms", "-1"),
    ("retention.bytes", "-1"),
    ("unclean.leader.election.enable", "false"),
];

/// The largest record the runtime writes to a recovery log (its writer's
/// `message.max.bytes`), which the topic must take.
pub(crate) const MAX_RECORD_BYTES: i64 = 16 * 1024 * 1024;

/// Sizes a recovery-log topic is created with: records as large as the
/// writer sends, and segments that hold them (a broker whose default
/// segments are smaller than a record refuses it: "Message batch larger
/// than configured server segment size"). Kafka's default segment is 1 GiB.
pub(crate) const SIZE_CONFIGS: [(&str, &str); 2] = [("max.message.bytes", "16777216"), ("segment.bytes", "1073741824")];

/// The replication factor and `min.insync.replicas` of a recovery-log
/// topic created on a cluster of `brokers`: three replicas (fewer only when
/// there are fewer brokers), of which two must have a record before it
/// counts as written, so that losing one broker loses nothing.
pub(crate) fn replication_for(brokers: usize) -> (i32, i32) {
    let replication = i32::try_from(brokers.clamp(1, 3)).unwrap_or(3);
    (replication, if replication >= 3 { 2 } else { 1 })
}

/// A setting of an existing recovery-log topic that would lose records.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("recovery-log topic {topic}: {setting}={value}, must be {want}")]
pub struct Misconfigured {
    /// The topic.
    pub topic: String,
    /// The setting.
    pub setting: String,
    /// Its value on the topic (`(unset)` when the broker gave none).
    pub value: String,
    /// What it must be.
    pub want: String,
}

/// Checks an existing topic's configuration (name → value, as DescribeConfigs
/// gives it) against [`TOPIC_CONFIGS`]: every setting that differs, named.
pub(crate) fn check(topic: &str, configs: &std::collections::HashMap<String, Option<String>>) -> Vec<Misconfigured> {
    settings_that_differ(topic, configs)
}

/// The sizes of an existing topic that refuse some of the writer's records:
/// a `max.message.bytes` below [`MAX_RECORD_BYTES`], or segments smaller
/// than its own `max.message.bytes`. Logged, not refused: such a topic
/// (made by an earlier kshard with the broker's 1 MiB, say) works until a
/// transaction's record is that large, and then that record alone is
/// refused.
pub(crate) fn sizes_that_do_not_fit(
    topic: &str,
    configs: &std::collections::HashMap<String, Option<String>>,
) -> Vec<Misconfigured> {
    let number = |key: &str| configs.get(key).cloned().flatten().and_then(|v| v.trim().parse::<i64>().ok());
    let mut wrong = Vec::new();
    let max_message = number("max.message.bytes");
    if let Some(max) = max_message.filter(|&m| m < MAX_RECORD_BYTES) {
        wrong.push(Misconfigured {
            topic: topic.to_owned(),
            setting: "max.message.bytes".into(),
            value: max.to_string(),
            want: format!("at least {MAX_RECORD_BYTES} (the largest record the runtime writes)"),
        });
    }
    let records = max_message.unwrap_or(MAX_RECORD_BYTES).max(MAX_RECORD_BYTES);
    if let Some(segment) = number("segment.bytes").filter(|&s| s < records) {
        wrong.push(Misconfigured {
            topic: topic.to_owned(),
            setting: "segment.bytes".into(),
            value: segment.to_string(),
            want: format!("at least {records} (a record must fit in a segment)"),
        });
    }
    wrong
}

fn settings_that_differ(
    topic: &str,
    configs: &std::collections::HashMap<String, Option<String>>,
) -> Vec<Misconfigured> {
    TOPIC_CONFIGS
        .iter()
        .filter_map(|(setting, want)| {
            let value = configs.get(*setting).cloned().flatten();
            let ok = match (*setting, value.as_deref()) {
                // Any negative number is unlimited to Kafka.
                ("retention.ms" | "retention.bytes", Some(v)) => v.trim().parse::<i64>().is_ok_and(|n| n < 0),
                (_, Some(v)) => v.trim() == *want,
                (_, None) => false,
            };
            (!ok).then(|| Misconfigured {
                topic: topic.to_owned(),
                setting: (*setting).to_owned(),
                value: value.unwrap_or_else(|| "(unset)".into()),
                want: (*want).to_owned(),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn configs(pairs: &[(&str, &str)]) -> std::collections::HashMap<String, Option<String>> {
        pairs.iter().map(|(k, v)| ((*k).to_owned(), Some((*v).to_owned()))).collect()
    }

    #[test]
    fn a_topic_made_as_the_runtime_makes_it_passes() {
        assert_eq!(check("log", &configs(&TOPIC_CONFIGS)), []);
        let made: Vec<(&str, &str)> = TOPIC_CONFIGS.iter().chain(&SIZE_CONFIGS).copied().collect();
        assert_eq!(check("log", &configs(&made)), []);
        assert_eq!(sizes_that_do_not_fit("log", &configs(&made)), []);
    }

    #[test]
    fn three_replicas_two_in_sync_where_there_are_three_brokers() {
        assert_eq!(replication_for(0), (1, 1));
        assert_eq!(replication_for(1), (1, 1));
        assert_eq!(replication_for(2), (2, 1));
        assert_eq!(replication_for(3), (3, 2));
        assert_eq!(replication_for(9), (3, 2));
    }

    #[test]
    fn sizes_that_refuse_the_writers_records_are_named() {
        let mut small: Vec<(&str, &str)> = TOPIC_CONFIGS.to_vec();
        small.extend([("max.message.bytes", "1048588"), ("segment.bytes", "1048576")]);
        assert_eq!(check("log", &configs(&small)), [], "not refused");
        let wrong: Vec<String> =
            sizes_that_do_not_fit("log", &configs(&small)).into_iter().map(|w| w.setting).collect();
        assert_eq!(wrong, ["max.message.bytes", "segment.bytes"]);
        let mut roomy: Vec<(&str, &str)> = TOPIC_CONFIGS.to_vec();
        roomy.extend([("max.message.bytes", "33554432"), ("segment.bytes", "16777216")]);
        let wrong: Vec<String> =
            sizes_that_do_not_fit("log", &configs(&roomy)).into_iter().map(|w| w.setting).collect();
        assert_eq!(wrong, ["segment.bytes"], "segments smaller than the topic's own records");
    }

    #[test]
    fn the_brokers_defaults_fail_naming_each_setting() {
        // What Kafka's auto-creation gives a topic.
        let defaults = configs(&[
            ("cleanup.policy", "delete"),
            ("retention.ms", "604800000"),
            ("retention.bytes", "-1"),
            ("unclean.leader.election.enable", "false"),
        ]);
        let found = check("log", &defaults);
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].to_string(), "recovery-log topic log: retention.ms=604800000, must be -1");
        let compacted = configs(&[
            ("cleanup.policy", "compact,delete"),
            ("retention.ms", "-1"),
            ("retention.bytes", "1073741824"),
            ("unclean.leader.election.enable", "true"),
        ]);
        let settings: Vec<String> = check("log", &compacted).into_iter().map(|m| m.setting).collect();
        assert_eq!(settings, ["cleanup.policy", "retention.bytes", "unclean.leader.election.enable"]);
        assert_eq!(check("log", &configs(&[])).len(), 4, "a setting not given is not trusted");
    }
}
