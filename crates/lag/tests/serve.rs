//! `kshard serve` against the real broker with synthetic records: canonical
//! records of every version and kind, tombstones and malformed records produced
//! into a compacted topic of the `__consumer_offsets` layout that the service
//! reads through its `offsets_topic` setting (Kafka refuses client writes to the
//! real one: real groups are in `real_groups.rs`), real topics with real
//! watermarks, and the service's own HTTP endpoints. Each test has its own
//! offsets topic and names its groups with a prefix of its own.

mod common;

use std::time::Duration;

use common::*;
use kshard_kafka::{Admin, Client, ClientSettings, OffsetCommitter, RecordWriter, TopicSpec};
use kshard_lag::service::{ProcessOptions, ScrapeMode, ServeOptions};
use kshard_lag::{Granularity, MonitorSettings, NameFilter};
use kshard_offsets::*;
use kshard_testkit::{Broker, unique_name};

fn group_metadata(group: &str, topic: &str, assignments: &[Vec<i32>]) -> Record<'static> {
    let members = assignments
        .iter()
        .enumerate()
        .map(|(i, partitions)| {
            let assigned = if partitions.is_empty() {
                vec![]
            } else {
                vec![TopicPartitions { topic: topic.to_owned().into(), partitions: partitions.clone() }]
            };
            MemberMetadata {
                rebalance_timeout: Some(30_000),
                session_timeout: 10_000,
                ..MemberMetadata::consumer(format!("m{i}"), format!("c{i}"), vec![topic.to_owned().into()], assigned)
            }
        })
        .collect();
    let value = GroupMetadataValue {
        current_state_timestamp: Some(1_758_335_260_726),
        ..GroupMetadataValue::consumer(3, 4, members)
    };
    Record::group_metadata(group.to_owned(), Some(value))
}

#[test]
#[ignore = "needs the real broker or etcd: scripts/test.sh runs it (or cargo test -- --include-ignored)"]
fn every_value_version_tombstones_members_and_a_malformed_record() {
    let broker = Broker::from_env_or_start();
    let p = unique_name("lag-it");
    let w = Writer::new(broker.brokers(), &p);
    let topic = format!("{p}-orders");
    w.topic(&topic, &[100, 50]);

    for version in 0..=4 {
        let group = format!("{p}-v{version}");
        w.commit(&group, &topic, 0, version, 10 * i64::from(version + 1));
        w.commit(&group, &topic, 1, version, 5);
    }
    // An offset tombstone removes that partition's offset only.
    let del = format!("{p}-offset-tombstone");
    w.commit(&del, &topic, 0, 3, 3);
    w.commit(&del, &topic, 1, 3, 4);
    w.record(&del, &Record { key: commit(&del, &topic, 1, 3, 0).key, value: None });
    // A group tombstone removes the metadata; the offsets stay, as in Kafka.
    let gone = format!("{p}-group-tombstone");
    w.record(&gone, &group_metadata(&gone, &topic, &[vec![0, 1]]));
    w.commit(&gone, &topic, 0, 4, 1);
    w.record(
        &gone,
        &Record { key: RecordKey::GroupMetadata(GroupMetadataKey { group: gone.clone().into() }), value: None },
    );
    // Members: two with partitions, one with none.
    let members = format!("{p}-members");
    w.record(&members, &group_metadata(&members, &topic, &[vec![0], vec![1], vec![]]));
    w.commit(&members, &topic, 0, 4, 100);
    // A malformed record between two commits of the same partition.
    let mal = format!("{p}-malformed");
    w.commit(&mal, &topic, 0, 3, 7);
    let (key, _) = commit(&mal, &topic, 0, 3, 0).encode();
    w.raw(&mal, &key, Some(&[0, 3, 0, 0, 0, 0, 0, 0, 0, 8]));
    w.commit(&mal, &topic, 0, 3, 9);
    w.flush();

    let ns = "kshard";
    let mut service = TestService::start(options(&w, only(&p)));
    service.wait_ready();
    let m = service.metrics();
    for version in 0..=4 {
        let group = format!("{p}-v{version}");
        assert_eq!(
            m.get(&partition_lag(ns, &group, &topic, 0)),
            Some(&(100.0 - 10.0 * f64::from(version + 1))),
            "v{version}"
        );
        assert_eq!(m.get(&partition_lag(ns, &group, &topic, 1)), Some(&45.0));
        let expected_topic_lag = 100.0 - 10.0 * f64::from(version + 1) + 45.0;
        assert_eq!(m.get(&topic_series(ns, "topic_lag", &group, &topic)), Some(&expected_topic_lag));
        assert_eq!(
            m.get(&topic_series(ns, "topic_offset_sum", &group, &topic)),
            Some(&(10.0 * f64::from(version + 1) + 5.0))
        );
        assert_eq!(m.get(&group_series(ns, "offset_commits_total", &group)), Some(&2.0));
    }
    assert_eq!(m.get(&partition_lag(ns, &del, &topic, 0)), Some(&97.0));
    assert_eq!(m.get(&partition_lag(ns, &del, &topic, 1)), None, "the tombstoned offset is gone");
    assert_eq!(m.get(&partition_lag(ns, &gone, &topic, 0)), Some(&99.0), "offsets outlive the group tombstone");
    // Its metadata removed, the group keeps its offsets: Empty, with no
    // protocol, as Kafka lists it (and kminion reports it).
    let gone_info = m.iter().find(|(k, _)| k.contains("consumer_group_info") && k.contains(&gone));
    let (series, value) = gone_info.expect("a group with offsets has info");
    assert!(series.contains("protocol_type=\"\"") && series.contains("state=\"Empty\""), "{series}");
    assert_eq!(*value, 0.0, "not Stable");
    assert_eq!(m.get(&group_series(ns, "members", &gone)), Some(&0.0));
    assert_eq!(m.get(&group_series(ns, "members", &members)), Some(&3.0));
    assert_eq!(m.get(&group_series(ns, "empty_members", &members)), Some(&1.0));
    assert_eq!(m.get(&topic_series(ns, "topic_members", &members, &topic)), Some(&2.0));
    assert_eq!(m.get(&topic_series(ns, "topic_assigned_partitions", &members, &topic)), Some(&2.0));
    // Stable groups report 1, as kminion; the coordinator is the leader of the
    // group's __consumer_offsets partition.
    let info = format!(
        "{ns}_kafka_consumer_group_info{{group_id=\"{members}\",protocol=\"range\",protocol_type=\"consumer\",state=\"Stable\",coordinator_id=\""
    );
    let (series, value) = m.iter().find(|(k, _)| k.starts_with(&info)).expect("info series");
    assert_eq!(*value, 1.0);
    assert!(!series.ends_with("coordinator_id=\"\"}"), "the coordinator is known: {series}");
    assert_eq!(
        m.get(&partition_lag(ns, &mal, &topic, 0)),
        Some(&91.0),
        "the commit after the malformed record applies"
    );
    assert!(m.get("kshard_offsets_records_skipped_total{reason=\"malformed_value\"}").is_some_and(|n| *n >= 1.0));
    assert_eq!(
        m.get(&format!("{ns}_kafka_topic_partition_high_water_mark{{topic_name=\"{topic}\",partition_id=\"0\"}}")),
        Some(&100.0)
    );
    assert_eq!(m.get(&format!("{ns}_kafka_topic_high_water_mark_sum{{topic_name=\"{topic}\"}}")), Some(&150.0));

    // The JSON API agrees.
    let (status, body) = service.get("/api/groups");
    assert_eq!(status, 200);
    let groups: serde_json::Value = serde_json::from_str(&body).expect("JSON");
    let v4 = groups.as_array().expect("array").iter().find(|g| g["group_id"] == format!("{p}-v4")).expect("group v4");
    assert_eq!(v4["lag"], 50 + 45);
    assert_eq!(v4["topics"][0]["partitions"][0]["committed_offset"], 50);
    let (status, page) = service.get("/");
    assert_eq!(status, 200);
    assert!(page.contains("kshard"));
}

#[test]
#[ignore = "needs the real broker or etcd: scripts/test.sh runs it (or cargo test -- --include-ignored)"]
fn filters_topic_granularity_and_the_kminion_namespace() {
    let broker = Broker::from_env_or_start();
    let p = unique_name("lag-filter");
    let w = Writer::new(broker.brokers(), &p);
    let shown = format!("{p}-shown");
    let hidden = format!("{p}-hidden");
    w.topic(&shown, &[10, 10]);
    w.topic(&hidden, &[10]);
    let a = format!("{p}-a");
    let skipped = format!("{p}-a-skip");
    let other = format!("{p}-b");
    for g in [&a, &skipped, &other] {
        w.commit(g, &shown, 0, 3, 4);
        w.commit(g, &shown, 1, 3, 6);
        w.commit(g, &hidden, 0, 3, 1);
    }
    w.flush();
    let settings = MonitorSettings {
        groups: NameFilter::new(&[format!("{p}-a.*")], &[format!("{p}-a-skip")]).expect("filter"),
        topics: NameFilter::new(&[], std::slice::from_ref(&hidden)).expect("filter"),
        granularity: Granularity::Topic,
        ..MonitorSettings::default()
    };
    let ns = "kminion";
    let process = ProcessOptions::default().with_namespace(ns).expect("a namespace");
    let mut service = TestService::start_as(process, vec![options(&w, settings)]);
    service.wait_ready();
    let m = service.metrics();
    assert_eq!(m.get(&topic_series(ns, "topic_lag", &a, &shown)), Some(&10.0));
    assert!(!m.keys().any(|k| k.contains("topic_partition_lag")), "topic granularity has no partition series");
    assert!(!m.keys().any(|k| k.contains(&skipped)), "ignored group");
    assert!(!m.keys().any(|k| k.contains(&other)), "group not allowed");
    assert!(!m.keys().any(|k| k.contains(&hidden)), "ignored topic");
    assert_eq!(m.get(&format!("kminion_exporter_up{{version=\"{}\"}}", env!("CARGO_PKG_VERSION"))), Some(&1.0));
}

#[test]
#[ignore = "needs the real broker or etcd: scripts/test.sh runs it (or cargo test -- --include-ignored)"]
fn lag_follows_new_commits_and_new_produce() {
    let broker = Broker::from_env_or_start();
    let p = unique_name("lag-live");
    let w = Writer::new(broker.brokers(), &p);
    let topic = format!("{p}-live");
    w.topic(&topic, &[20]);
    let g = format!("{p}-g");
    w.commit(&g, &topic, 0, 4, 15);
    w.flush();
    let ns = "kshard";
    let mut service = TestService::start(options(&w, only(&p)));
    service.wait_ready();
    let lag = partition_lag(ns, &g, &topic, 0);
    assert_eq!(service.metrics().get(&lag), Some(&5.0));

    w.produce(&topic, &[10]);
    service.eventually("lag grows with produce", |m| m.get(&lag) == Some(&15.0));
    w.commit(&g, &topic, 0, 4, 28);
    w.flush();
    service.eventually("lag shrinks with a commit", |m| m.get(&lag) == Some(&2.0));
}

#[test]
#[ignore = "needs the real broker or etcd: scripts/test.sh runs it (or cargo test -- --include-ignored)"]
fn admin_api_mode_reports_real_consumer_groups() {
    let broker = Broker::from_env_or_start();
    let p = unique_name("lag-admin");
    let w = Writer::new(broker.brokers(), &p);
    let topic = format!("{p}-events");
    w.topic(&topic, &[30]);
    let group = format!("{p}-app");
    let settings = Client::to_brokers(broker.brokers());
    let member = kshard_kafka::GroupConsumer::new(&settings, &group, &[&topic]).expect("consumer");
    let read = member.consume(12, Duration::from_secs(60)).expect("consume");
    assert_eq!(read, 12, "the group read its records");
    member.commit().expect("commit");

    let ns = "kshard";
    let mut service = TestService::start(ServeOptions { mode: ScrapeMode::AdminApi, ..options(&w, only(&p)) });
    service.wait_ready();
    let lag = partition_lag(ns, &group, &topic, 0);
    service.eventually("the real group's lag", |m| m.get(&lag) == Some(&18.0));
    // More records, more lag; a new commit, less.
    w.produce(&topic, &[5]);
    service.eventually("lag grows with produce", |m| m.get(&lag) == Some(&23.0));
    assert_eq!(member.consume(20, Duration::from_secs(60)).expect("consume"), 20);
    member.commit().expect("commit");
    service.eventually("lag shrinks with a commit", |m| m.get(&lag) == Some(&3.0));
    let m = service.metrics();
    assert!(
        m.keys().any(|k| k.starts_with("kshard_kafka_consumer_group_info") && k.contains(&group)),
        "the group is listed: {m:#?}"
    );
    // DescribeGroups gives the members and their assignment.
    assert_eq!(m.get(&format!("kshard_kafka_consumer_group_members{{group_id=\"{group}\"}}")), Some(&1.0), "{m:#?}");
    assert_eq!(m.get(&topic_series(ns, "topic_assigned_partitions", &group, &topic)), Some(&1.0));
}

#[test]
#[ignore = "needs the real broker or etcd: scripts/test.sh runs it (or cargo test -- --include-ignored)"]
fn waits_not_ready_until_consumer_offsets_exists() {
    // A new cluster has no __consumer_offsets until the first group commits:
    // Kafka creates it then, and writes the commit itself.
    let broker = Broker::start_private(&[]);
    let p = unique_name("lag-wait");
    let settings = Client::to_brokers(broker.brokers());
    let options = ServeOptions {
        watermark_interval: Duration::from_millis(200),
        monitor: only(&p),
        ..ServeOptions::new(settings.settings().clone())
    };
    let mut service = TestService::start(options);
    let (status, body) = service.get("/ready");
    assert_eq!(status, 503, "{body}");
    std::thread::sleep(Duration::from_millis(500));
    let (status, body) = service.get("/ready");
    assert_eq!(status, 503, "still waiting for the topic");
    let ready: serde_json::Value = serde_json::from_str(&body).expect("JSON");
    assert!(ready["reason"].as_str().is_some_and(|r| !r.is_empty()), "the reason is given: {body}");
    let admin = Admin::new(&settings, Duration::from_secs(30)).expect("admin");
    let topic = format!("{p}-t");
    admin
        .create_topic(&TopicSpec { name: topic.clone(), partitions: 1, replication: 1, configs: vec![] })
        .expect("topic");
    let writer = RecordWriter::new(&settings).expect("producer");
    for i in 0..4 {
        writer.send(&topic, 0, format!("k{i}").as_bytes(), Some(b"v")).expect("send");
    }
    writer.flush(Duration::from_secs(30)).expect("flush");
    let g = format!("{p}-g");
    OffsetCommitter::new(&settings, &g).expect("committer").commit(&[(&topic, 0, 1)]).expect("commit");
    service.wait_ready();
    service.eventually("the first group's lag", |m| m.get(&partition_lag("kshard", &g, &topic, 0)) == Some(&3.0));
}

/// A client may commit any offset: one near `i64::MIN` beside an ordinary
/// one. Its lag saturates at `i64::MAX` (it once overflowed: a panic in a
/// debug build, a wrapped negative lag, then 0, in a release one), and every
/// total over it stays there rather than turn negative.
#[test]
#[ignore = "needs the real broker or etcd: scripts/test.sh runs it (or cargo test -- --include-ignored)"]
fn a_commit_near_i64_min_saturates_lag_and_its_totals() {
    let broker = Broker::from_env_or_start();
    let p = unique_name("lag-min");
    let w = Writer::new(broker.brokers(), &p);
    let topic = format!("{p}-t");
    w.topic(&topic, &[20, 20]);
    let g = format!("{p}-g");
    w.commit(&g, &topic, 0, 3, i64::MIN + 1);
    w.commit(&g, &topic, 1, 3, 5);
    w.flush();
    let ns = "kshard";
    let mut service = TestService::start(options(&w, only(&p)));
    service.wait_ready();
    let saturated = i64::MAX as f64;
    service.eventually("lag saturated", |m| m.get(&partition_lag(ns, &g, &topic, 0)) == Some(&saturated));
    let m = service.metrics();
    assert_eq!(m.get(&partition_lag(ns, &g, &topic, 1)), Some(&15.0));
    assert_eq!(m.get(&topic_series(ns, "topic_lag", &g, &topic)), Some(&saturated), "the total saturates");
    let (status, body) = service.get("/api/groups");
    assert_eq!(status, 200, "{body}");
    let groups: serde_json::Value = serde_json::from_str(&body).expect("json");
    let group = groups.as_array().and_then(|gs| gs.iter().find(|x| x["group_id"] == g.as_str())).expect("the group");
    assert_eq!(group["topics"][0]["lag"].as_i64(), Some(i64::MAX), "{group}");
    let (status, body) = service.get(&format!("/v3/kafka/local/consumer/{g}/lag"));
    assert!(status == 200 && body.contains(&format!("\"totallag\":{}", i64::MAX)), "{status} {body}");
}

/// A group-metadata record of 10 MiB (a member's subscription with an
/// assignor's 10 MiB of user data) in an offsets topic that allows 20 MiB
/// records, behind other partitions' commits: where the broker cuts the
/// batch at the partition's limit (behind another partition's data in the
/// same answer), the reader asks for it whole (its header says how large);
/// where it comes first, the broker hands it whole (KIP-74). Either way it
/// is read, and the commits behind it in the other partitions too. (The
/// broker's KIP-74 rule also made an 8 MiB limit read it: this test shows
/// the sizes agree end to end, not the old limit's failure.)
#[test]
#[ignore = "needs the real broker or etcd: scripts/test.sh runs it (or cargo test -- --include-ignored)"]
fn a_ten_mib_group_metadata_record_is_read() {
    let broker = Broker::from_env_or_start();
    let p = unique_name("large-record");
    let mut settings = ClientSettings::new(broker.brokers());
    settings.properties.push(("message.max.bytes".into(), (20 << 20).to_string()));
    let client = Client::new(settings.clone());
    let admin = Admin::new(&client, Duration::from_secs(30)).expect("admin");
    let offsets_topic = format!("{p}-offsets");
    let mut spec = TopicSpec::compacted(&offsets_topic, 3);
    spec.configs.push(("max.message.bytes".into(), (20 << 20).to_string()));
    // The test broker's segments are 1 MiB: a record must fit in one.
    spec.configs.push(("segment.bytes".into(), (64 << 20).to_string()));
    admin.create_topic(&spec).expect("the offsets topic");
    let topic = format!("{p}-t");
    create_and_fill(&client, &topic, &[30]);
    let writer = RecordWriter::new(&client).expect("producer");
    let send = |partition: i32, record: &Record<'_>| {
        let (key, value) = record.encode();
        writer.send(&offsets_topic, partition, &key, value.as_deref()).expect("send");
    };
    // Small commits in partitions 0 and 2, on both sides of the large record.
    for (i, partition) in [0, 2].into_iter().enumerate() {
        send(partition, &commit(&format!("{p}-small{i}"), &topic, 0, 3, 10 + i as i64));
    }
    writer.flush(Duration::from_secs(60)).expect("flush");
    let large = format!("{p}-large");
    let subscription = Subscription {
        user_data: Some(vec![7u8; 10 << 20].into()),
        ..Subscription::to_topics(1, vec![topic.clone().into()])
    };
    let member = MemberMetadata {
        subscription: subscription.to_bytes().into(),
        ..MemberMetadata::consumer("m0", "c0", vec![topic.clone().into()], vec![])
    };
    let value =
        GroupMetadataValue { current_state_timestamp: Some(0), ..GroupMetadataValue::consumer(3, 4, vec![member]) };
    let (key, value) = Record::group_metadata(large.clone(), Some(value)).encode();
    assert!(value.as_ref().is_some_and(|v| v.len() > 10 << 20), "a record of over 10 MiB");
    let delivery = writer.append(&offsets_topic, 1, &key, value.as_deref()).expect("queued");
    assert_eq!(delivery.wait(Duration::from_secs(60)).expect("the broker took the 10 MiB record"), 0);
    send(1, &commit(&large, &topic, 0, 3, 20));
    for (i, partition) in [0, 2].into_iter().enumerate() {
        send(partition, &commit(&format!("{p}-after{i}"), &topic, 0, 3, 25));
    }
    writer.flush(Duration::from_secs(60)).expect("flush");

    let options = ServeOptions {
        offsets_topic: offsets_topic.clone(),
        watermark_interval: Duration::from_millis(200),
        monitor: only(&p),
        ..ServeOptions::new(settings.clone())
    };
    let mut service = TestService::start(options);
    service.wait_ready();
    let (status, body) = service.get(&format!("/api/group?id={large}"));
    assert_eq!(status, 200, "{body}");
    let group: serde_json::Value = serde_json::from_str(&body).expect("json");
    assert_eq!(group["members"].as_u64(), Some(1), "the member of the 10 MiB record");
    assert_eq!(group["member_list"][0]["client_id"].as_str(), Some("c0"), "{}", &body[..body.len().min(2000)]);
    assert_eq!(group["topics"][0]["lag"].as_i64(), Some(10), "{body}");
    let lag = partition_lag("kshard", &format!("{p}-after1"), &topic, 0);
    service.eventually("the commit behind it in another partition", |m| m.get(&lag) == Some(&5.0));
}
