//! Share-group lag from `__share_group_state`, folded by
//! `kshard_lag::SharePartition`, against Kafka's own answer: Kafka's console
//! share consumer accepts some records, rejects some and releases others
//! until Kafka archives them after the delivery limit; the lag kshard
//! computes equals `kafka-share-groups --describe --offsets`, and the
//! rejected and poison records are counted.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use kshard_kafka::{Admin, Client, PartitionReader, ReadEvent, RecordWriter, TopicPartition, TopicSpec};
use kshard_lag::SharePartition;
use kshard_offsets::{ShareStateRecord, ShareStateValue};
use kshard_testkit::{Broker, kafka_share_groups, share_consume, share_from_earliest, unique_name};

const STATE_TOPIC: &str = kshard_kafka::SHARE_GROUP_STATE_TOPIC;

/// Kafka's default `group.share.delivery.count.limit`.
const DELIVERY_LIMIT: i16 = 5;

/// Reads the state topic to its end and folds `group`'s share-partition 0.
fn fold(settings: &Client, admin: &Admin, group: &str) -> Option<SharePartition> {
    let partitions = admin.partition_count(STATE_TOPIC).expect("metadata")?;
    let start: Vec<(i32, Option<i64>)> = (0..partitions).map(|p| (p, None)).collect();
    let reader = PartitionReader::new(settings, STATE_TOPIC, &start).expect("reader");
    let mut ended = std::collections::BTreeSet::new();
    let mut records = BTreeMap::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    while ended.len() < partitions as usize && Instant::now() < deadline {
        match reader.poll(Duration::from_millis(200)).expect("poll") {
            ReadEvent::Record(r) => {
                let key = r.key().expect("keyed").to_vec();
                records.insert((r.partition(), r.offset()), (key, r.value().map(<[u8]>::to_vec)));
            }
            ReadEvent::EndOfPartition { partition, .. } => {
                ended.insert(partition);
            }
            _ => {}
        }
    }
    let mut state: Option<SharePartition> = None;
    for (key, value) in records.values() {
        let record = ShareStateRecord::decode(key, value.as_deref()).expect("decodes");
        let Some(k) = record.key.share_partition() else { continue };
        if k.group_id != group || k.partition != 0 {
            continue;
        }
        match &record.value {
            Some(ShareStateValue::Snapshot(v)) => state.get_or_insert_with(SharePartition::default).apply_snapshot(v),
            Some(ShareStateValue::Update(v)) => {
                let first = state.is_none();
                state.get_or_insert_with(SharePartition::default).apply_update(v, first)
            }
            None => state = None,
            _ => {}
        }
    }
    state
}

/// Kafka's (start offset, lag) of `topic`'s partition 0 in `group`.
fn described(brokers: &str, group: &str, topic: &str) -> Option<(i64, i64)> {
    let rows = kafka_share_groups(brokers, group);
    let row = rows.into_iter().find(|r| r.topic == topic && r.partition == 0)?;
    Some((row.start_offset?, row.lag?))
}

#[test]
#[ignore = "needs the real broker or etcd: scripts/test.sh runs it (or cargo test -- --include-ignored)"]
fn share_lag_equals_kafka_share_groups_describe() {
    let broker = Broker::from_env_or_start();
    let settings = Client::to_brokers(broker.brokers());
    let admin = Admin::new(&settings, Duration::from_secs(30)).expect("admin");
    let topic = unique_name("share-lag");
    let group = unique_name("share-lag-group");
    admin
        .create_topic(&TopicSpec { name: topic.clone(), partitions: 1, replication: 1, configs: vec![] })
        .expect("topic");
    let writer = RecordWriter::new(&settings).expect("producer");
    for i in 0..30 {
        writer.send(&topic, 0, format!("k{i}").as_bytes(), Some(b"v")).expect("send");
    }
    writer.flush(Duration::from_secs(30)).expect("flush");
    share_from_earliest(broker.brokers(), &group);

    // 0–4 accepted, 5–7 rejected, then 8–10 released until Kafka archives them.
    share_consume(broker.brokers(), &group, &topic, 5, None);
    share_consume(broker.brokers(), &group, &topic, 3, Some("--reject"));
    for _ in 0..DELIVERY_LIMIT {
        share_consume(broker.brokers(), &group, &topic, 3, Some("--release"));
    }

    let end = *admin.watermarks(&[TopicPartition::new(&topic, 0)]).expect("watermarks").values().next().expect("one");
    let deadline = Instant::now() + Duration::from_secs(60);
    let (state, kafka) = loop {
        let state = fold(&settings, &admin, &group);
        let kafka = described(broker.brokers(), &group, &topic);
        let ours = state.as_ref().and_then(|s| Some((s.start_offset, s.lag(end.1)?)));
        if (ours == kafka && ours.is_some_and(|(start, _)| start >= 8)) || Instant::now() >= deadline {
            break (state, kafka);
        }
        std::thread::sleep(Duration::from_millis(500));
    };
    let state = state.expect("the share-partition has state");
    assert_eq!(state.lag(end.1).map(|lag| (state.start_offset, lag)), kafka, "as Kafka describes it: {state:?}");
    // The console consumer acquires more than it prints and releases the
    // rest when it closes, so the counts are at least what it was told.
    let poison = state.poison(DELIVERY_LIMIT);
    assert!(poison >= 3, "three or more archived at the delivery limit: {state:?}");
    assert!(state.archived_total() - poison >= 3, "three or more rejected: {state:?}");
}
