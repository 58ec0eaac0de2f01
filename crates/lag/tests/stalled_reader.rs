//! A reader that freezes with nothing failing loudly: the real broker behind
//! a proxy of the test's own ([`KafkaProxy`]) that stops answering every
//! connection that fetches, while metadata, ListOffsets and the admin
//! calls go on. Watermarks stay fresh and no error is read, so before
//! kshard compared each partition's reader with its high watermark it
//! served the frozen lag with `/ready` 200. Now `/ready` turns 503 within
//! the staleness limit and a refresh, naming the partition, and 200 again
//! once fetches are answered.

mod common;

use std::time::{Duration, Instant};

use common::*;
use kshard_kafka::{Admin, Client, ClientSettings, OffsetCommitter, TopicSpec};
use kshard_lag::service::ServeOptions;
use kshard_testkit::{Broker, KafkaProxy, unique_name};

#[test]
#[ignore = "needs the real broker or etcd: scripts/test.sh runs it (or cargo test -- --include-ignored)"]
fn a_black_holed_fetch_connection_turns_ready_503_naming_the_partition() {
    let broker = Broker::from_env_or_start();
    let direct = Client::to_brokers(broker.brokers());
    let p = unique_name("stalled");
    let topic = format!("{p}-t");
    let admin = Admin::new(&direct, Duration::from_secs(30)).expect("admin");
    admin
        .create_topic(&TopicSpec { name: topic.clone(), partitions: 1, replication: 1, configs: vec![] })
        .expect("topic");
    produce(&direct, &topic, 100);
    let group = format!("{p}-g");
    let committer = OffsetCommitter::new(&direct, &group).expect("committer");
    committer.commit(&[(&topic, 0, 50)]).expect("commit");

    // kshard reaches the broker only through the proxy.
    let proxy = KafkaProxy::start(broker.brokers());
    let options = ServeOptions {
        watermark_interval: Duration::from_secs(1),
        request_timeout: Duration::from_secs(5),
        monitor: only(&p),
        ..ServeOptions::new(ClientSettings::new(proxy.address()))
    };
    let stale_after = options.stale_after();
    let mut service = TestService::start(options);
    service.wait_ready();
    let lag = partition_lag("kshard", &group, &topic, 0);
    service.eventually("lag 50", |m| m.get(&lag) == Some(&50.0));

    // Fetches freeze; the group commits on (to the broker itself).
    proxy.black_hole_fetches(true);
    let frozen = Instant::now();
    for offset in [60, 70, 80, 90] {
        committer.commit(&[(&topic, 0, offset)]).expect("commit");
    }
    let body =
        until("/ready 503 naming the stalled partition", Duration::from_secs(120), Duration::from_millis(200), || {
            match service.get("/ready") {
                (503, body) if body.contains("has not moved while records wait") => Ok(body),
                (status, body) => Err(format!("{status}: {body}")),
            }
        });
    let took = frozen.elapsed();
    assert!(body.contains("partition ") && body.contains("unread"), "{body}");
    println!(
        "/ready 503 {:.1} s after the fetch connection froze (stale after {stale_after:?}): {body}",
        took.as_secs_f64()
    );

    // Fetches answered again: kshard reads on and serves the new lag.
    proxy.black_hole_fetches(false);
    service.wait_ready();
    service.eventually("lag 10", |m| m.get(&lag) == Some(&10.0));
}

fn produce(settings: &Client, topic: &str, records: u32) {
    let writer = kshard_kafka::RecordWriter::new(settings).expect("producer");
    for i in 0..records {
        writer.send(topic, 0, format!("k{i}").as_bytes(), Some(b"v")).expect("send");
    }
    writer.flush(Duration::from_secs(60)).expect("flush");
}
