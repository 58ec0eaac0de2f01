//! The [`Partitions`] contract on the real broker: what the memory log
//! (`partitions/memory.rs`, checked by its unit tests) does, Kafka does.

use std::time::Duration;

use kshard_kafka::{Admin, ClientSettings, TopicSpec};
use kshard_runtime::partitions::conformance;
use kshard_runtime::partitions::kafka::KafkaPartitions;
use kshard_testkit::{Broker, unique_name};

#[tokio::test]
async fn kafka_keeps_the_contract() {
    let broker = Broker::from_env_or_start();
    let settings = ClientSettings::new(broker.brokers());
    let admin = Admin::new(&settings, Duration::from_secs(30)).expect("admin");
    let topics: [String; 4] = std::array::from_fn(|i| unique_name(&format!("partitions-{i}")));
    for name in &topics {
        admin
            .create_topic(&TopicSpec { name: name.clone(), partitions: 1, replication: 1, configs: vec![] })
            .expect("topic");
    }
    conformance::run_all(&KafkaPartitions::new(settings, Duration::from_secs(30)), &topics).await;
}
