//! kminion's cluster, broker and topic families, from the last fresh
//! [`ClusterSnapshot`]: `kafka_cluster_info`, `kafka_broker_info`,
//! `kafka_topic_info` (with the configured topic configuration values as
//! labels, `.` written `_`, `N/A` when unknown), and the log directory sizes
//! per broker and, when every broker answered, per topic. As kminion,
//! `cluster_version` is a guess; kshard does not guess it: `unknown`.

use prometheus_client::encoding::DescriptorEncoder;

use super::Encoded;
use super::profile_rows::gauges;
use crate::cluster_view::ClusterSnapshot;
use crate::filter::NameFilter;

pub(super) fn families(e: &mut DescriptorEncoder<'_>, s: &ClusterSnapshot, topics: &NameFilter) -> Encoded {
    let info = &s.info;
    gauges(e, "kafka_cluster_info", "Kafka cluster information", [()], |()| {
        Some((
            vec![
                ("cluster_version", "unknown".to_owned()),
                ("broker_count", info.brokers.len().to_string()),
                ("controller_id", info.controller_id.to_string()),
                ("cluster_id", info.cluster_id.clone()),
            ],
            1i64,
        ))
    })?;
    let broker = |b: &kshard_kafka::BrokerInfo| {
        vec![
            ("broker_id", b.id.to_string()),
            ("address", b.host.clone()),
            ("port", b.port.to_string()),
            ("rack_id", b.rack.clone()),
        ]
    };
    gauges(e, "kafka_broker_info", "Kafka broker information", &info.brokers, |b| {
        let mut labels = broker(b);
        labels.push(("is_controller", (b.id == info.controller_id).to_string()));
        Some((labels, 1i64))
    })?;
    // Label names: kminion's, the configuration keys with `.` as `_`.
    let names: Vec<String> = s.config_keys.iter().map(|k| k.replace('.', "_")).collect();
    let allowed = info.topics.iter().filter(|t| topics.allows(&t.name));
    gauges(e, "kafka_topic_info", "Info labels for a given topic", allowed, |t| {
        let mut labels: Vec<(&str, String)> = vec![
            ("topic_name", t.name.clone()),
            ("partition_count", t.partitions.to_string()),
            ("replication_factor", t.replication_factor.to_string()),
        ];
        for (key, name) in s.config_keys.iter().zip(&names) {
            let value = match t.configs.get(key) {
                Some(Some(v)) => v.clone(),
                Some(None) => "nil".to_owned(),
                None => "N/A".to_owned(),
            };
            labels.push((name.as_str(), value));
        }
        Some((labels, 1i64))
    })?;
    let Some(dirs) = &info.log_dirs else { return Ok(()) };
    gauges(
        e,
        "kafka_broker_log_dir_size_total_bytes",
        "The summed size in bytes of all log dirs for a given broker",
        info.brokers.iter().filter_map(|b| Some((b, *dirs.by_broker.get(&b.id)?))),
        |(b, size)| Some((broker(b), size)),
    )?;
    if !dirs.complete {
        // A broker did not answer: topics' totals would be short.
        return Ok(());
    }
    gauges(
        e,
        "kafka_topic_log_dir_size_total_bytes",
        "The summed size in bytes of partitions for a given topic. This includes the used space for replica partitions.",
        dirs.by_topic.iter().filter(|(t, _)| topics.allows(t)),
        |(t, size)| Some((vec![("topic_name", t.clone())], *size)),
    )
}
