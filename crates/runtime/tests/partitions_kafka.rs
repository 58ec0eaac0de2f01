//! The [`Partitions`] contract on the real broker: what the memory log
//! (`partitions/memory.rs`, checked by its unit tests) does, Kafka does.

use std::time::Duration;

use kshard_kafka::{Admin, Client, TopicSpec};
use kshard_runtime::partitions::KafkaPartitions;
use kshard_runtime::partitions::conformance;
use kshard_testkit::{Broker, unique_name};

#[tokio::test]
#[ignore = "needs the real broker or etcd: scripts/test.sh runs it (or cargo test -- --include-ignored)"]
async fn kafka_keeps_the_contract() {
    let broker = Broker::from_env_or_start();
    let settings = Client::to_brokers(broker.brokers());
    let admin = Admin::new(&settings, Duration::from_secs(30)).expect("admin");
    let topics: [String; 6] = std::array::from_fn(|i| unique_name(&format!("partitions-{i}")));
    for name in &topics {
        admin
            .create_topic(&TopicSpec { name: name.clone(), partitions: 1, replication: 1, configs: vec![] })
            .expect("topic");
    }
    conformance::run_all(&KafkaPartitions::new(settings, Duration::from_secs(30)), &topics).await;
}

#[test]
#[ignore = "needs the real broker or etcd: scripts/test.sh runs it (or cargo test -- --include-ignored)"]
fn a_log_topic_is_made_safe_and_a_misconfigured_one_refused_by_setting() {
    use kshard_runtime::partitions::{LogTopicError, ensure_log_topic};
    let broker = Broker::from_env_or_start();
    let settings = Client::to_brokers(broker.brokers());
    let admin = Admin::new(&settings, Duration::from_secs(30)).expect("admin");
    // Made by the runtime: created, then found as it must be.
    let fresh = unique_name("log-topic");
    assert!(ensure_log_topic(&admin, &fresh, 2, &[]).expect("created"));
    assert!(!ensure_log_topic(&admin, &fresh, 2, &[]).expect("checked"), "exists already, and passes");
    let configs = admin.topic_configs(&fresh).expect("configs");
    assert_eq!(configs.get("retention.bytes").cloned().flatten().as_deref(), Some("-1"));
    // Records as large as the writer sends, in segments that hold them
    // (the test broker's default segments are 1 MiB).
    assert_eq!(configs.get("max.message.bytes").cloned().flatten().as_deref(), Some("16777216"));
    assert_eq!(configs.get("segment.bytes").cloned().flatten().as_deref(), Some("1073741824"));
    assert_eq!(configs.get("min.insync.replicas").cloned().flatten().as_deref(), Some("1"), "one broker");
    // Made by hand with the broker's defaults but a week's retention.
    let by_hand = unique_name("log-topic-by-hand");
    let spec = TopicSpec {
        name: by_hand.clone(),
        partitions: 1,
        replication: 1,
        configs: vec![("retention.ms".into(), "604800000".into())],
    };
    admin.create_topic(&spec).expect("topic");
    match ensure_log_topic(&admin, &by_hand, 1, &[]) {
        Err(LogTopicError::Misconfigured(wrong)) => {
            // Its small sizes are logged, not refused (a log of an earlier
            // kshard works until a record that large): only what loses records is.
            let wrong: Vec<String> = wrong.iter().map(ToString::to_string).collect();
            assert_eq!(wrong, [format!("recovery-log topic {by_hand}: retention.ms=604800000, must be -1")]);
        }
        other => panic!("expected the topic refused, got {other:?}"),
    }
}
