//! `end_to_end:` in the configuration file: kminion's end-to-end probe
//! (`minion.endToEnd` in kminion's file), its keys in kshard's snake_case.

use std::time::Duration;

use anyhow::{Result, bail};
use serde::{Deserialize, Serialize};

/// `end_to_end:` as written.
#[derive(Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct EndToEndFile {
    enabled: Option<bool>,
    probe_interval_ms: Option<u64>,
    #[serde(default)]
    topic: TopicFile,
    #[serde(default)]
    producer: ProducerFile,
    #[serde(default)]
    consumer: ConsumerFile,
}

#[derive(Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
struct TopicFile {
    name: Option<String>,
    manage: Option<bool>,
    replication_factor: Option<i32>,
    partitions_per_broker: Option<i32>,
    reconcile_interval_seconds: Option<u64>,
}

#[derive(Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
struct ProducerFile {
    ack_sla_ms: Option<u64>,
    required_acks: Option<Acks>,
}

#[derive(Debug, Clone, Copy, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
enum Acks {
    All,
    Leader,
}

#[derive(Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
struct ConsumerFile {
    group_id_prefix: Option<String>,
    roundtrip_sla_ms: Option<u64>,
    commit_sla_ms: Option<u64>,
}

fn millis(
    setting: &str,
    value: Option<u64>,
    default: Duration,
    range: std::ops::RangeInclusive<u64>,
) -> Result<Duration> {
    let Some(ms) = value else { return Ok(default) };
    if !range.contains(&ms) {
        bail!("invalid end_to_end.{setting}: {ms} (between {} and {})", range.start(), range.end());
    }
    Ok(Duration::from_millis(ms))
}

/// The longest `topic.reconcile_interval_seconds`: a week.
const MOST_RECONCILE_SECONDS: u64 = 7 * 24 * 3600;

/// The probe's settings, checked, each error naming its key.
pub(crate) fn end_to_end_settings(file: &EndToEndFile) -> Result<kshard_lag::EndToEndSettings> {
    let d = kshard_lag::EndToEndSettings::default();
    let (topic, producer, consumer) = (&file.topic, &file.producer, &file.consumer);
    let name = topic.name.clone().unwrap_or(d.topic);
    if name.is_empty() || name.len() > 249 || !name.chars().all(|c| c.is_ascii_alphanumeric() || "._-".contains(c)) {
        bail!("invalid end_to_end.topic.name: {name:?} (a Kafka topic name: letters, digits, '.', '_', '-')");
    }
    let prefix = consumer.group_id_prefix.clone().unwrap_or(d.group_prefix);
    if prefix.chars().count() < 3 {
        bail!("invalid end_to_end.consumer.group_id_prefix: {prefix:?} (at least 3 characters, as kminion's)");
    }
    let within = |setting: &str, value: Option<i32>, default: i32, max: i32| match value {
        Some(n) if !(1..=max).contains(&n) => bail!("invalid end_to_end.topic.{setting}: {n} (1 to {max})"),
        n => Ok(n.unwrap_or(default)),
    };
    let ack = millis("producer.ack_sla_ms", producer.ack_sla_ms, d.slas.ack, 1..=600_000)?;
    let roundtrip = millis("consumer.roundtrip_sla_ms", consumer.roundtrip_sla_ms, d.slas.roundtrip, 1..=3_600_000)?;
    if roundtrip < ack {
        bail!(
            "invalid end_to_end.consumer.roundtrip_sla_ms: shorter than producer.ack_sla_ms; a message must be acknowledged before it can come back"
        );
    }
    Ok(kshard_lag::EndToEndSettings {
        enabled: file.enabled.unwrap_or(d.enabled),
        probe_interval: millis("probe_interval_ms", file.probe_interval_ms, d.probe_interval, 10..=3_600_000)?,
        topic: name,
        manage_topic: topic.manage.unwrap_or(d.manage_topic),
        replication_factor: topic
            .replication_factor
            .map(|n| within("replication_factor", Some(n), n, 32))
            .transpose()?,
        partitions_per_broker: within(
            "partitions_per_broker",
            topic.partitions_per_broker,
            d.partitions_per_broker,
            100,
        )?,
        // Bounded: an instant that far ahead would overflow the clock.
        reconcile_interval: match topic.reconcile_interval_seconds {
            Some(s @ 1..=MOST_RECONCILE_SECONDS) => Duration::from_secs(s),
            Some(s) => bail!(
                "invalid end_to_end.topic.reconcile_interval_seconds: {s} (between 1 and {MOST_RECONCILE_SECONDS}, a week)"
            ),
            None => d.reconcile_interval,
        },
        all_acks: !matches!(producer.required_acks, Some(Acks::Leader)),
        group_prefix: prefix,
        slas: kshard_lag::ProbeSlas {
            ack,
            roundtrip,
            commit: millis("consumer.commit_sla_ms", consumer.commit_sla_ms, d.slas.commit, 1..=600_000)?,
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(yaml: &str) -> Result<kshard_lag::EndToEndSettings> {
        end_to_end_settings(&serde_norway::from_str(yaml)?)
    }

    #[test]
    fn defaults_are_kminions_and_off() {
        let s = parse("{}").expect("defaults");
        assert_eq!(s, kshard_lag::EndToEndSettings::default());
        assert!(!s.enabled);
        assert_eq!(s.probe_interval, Duration::from_millis(100));
        assert_eq!(s.topic, "kminion-end-to-end");
    }

    #[test]
    fn every_key_is_read() {
        let s = parse(
            "enabled: true\nprobe_interval_ms: 250\ntopic: {name: probe, manage: false, replication_factor: 3, partitions_per_broker: 2, reconcile_interval_seconds: 60}\nproducer: {ack_sla_ms: 1000, required_acks: leader}\nconsumer: {group_id_prefix: kshard-probe, roundtrip_sla_ms: 3000, commit_sla_ms: 2000}\n",
        )
        .expect("valid");
        assert!(s.enabled && !s.manage_topic && !s.all_acks);
        assert_eq!((s.topic.as_str(), s.replication_factor, s.partitions_per_broker), ("probe", Some(3), 2));
        assert_eq!((s.probe_interval, s.reconcile_interval), (Duration::from_millis(250), Duration::from_secs(60)));
        assert_eq!(s.group_prefix, "kshard-probe");
        assert_eq!(s.slas.ack, Duration::from_secs(1));
        assert_eq!((s.slas.roundtrip, s.slas.commit), (Duration::from_secs(3), Duration::from_secs(2)));
    }

    #[test]
    fn bad_values_name_their_key() {
        let err = |yaml: &str| parse(yaml).expect_err(yaml).to_string();
        assert!(err("probe_interval_ms: 0").contains("end_to_end.probe_interval_ms"));
        assert!(err("topic: {name: 'a b'}").contains("end_to_end.topic.name"));
        assert!(err("topic: {partitions_per_broker: 0}").contains("end_to_end.topic.partitions_per_broker"));
        assert!(err("topic: {partitions_per_broker: 2000000000}").contains("1 to 100"));
        // Near u64::MAX it once panicked at the first reconcile (an instant past the clock's end).
        for seconds in ["0", "18446744073709551615", "604801"] {
            let e = err(&format!("topic: {{reconcile_interval_seconds: {seconds}}}"));
            assert!(e.contains("end_to_end.topic.reconcile_interval_seconds"), "{e}");
        }
        assert!(parse("topic: {reconcile_interval_seconds: 604800}").is_ok());
        assert!(err("consumer: {group_id_prefix: ab}").contains("end_to_end.consumer.group_id_prefix"));
        assert!(err("producer: {ack_sla_ms: 9000}\nconsumer: {roundtrip_sla_ms: 8000}").contains("roundtrip_sla_ms"));
        assert!(
            err("producer: {required_acks: none}").contains("required_acks"),
            "{}",
            err("producer: {required_acks: none}")
        );
        assert!(err("topic: {partitions: 3}").contains("partitions"));
    }
}
