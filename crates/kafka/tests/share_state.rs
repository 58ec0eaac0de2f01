//! `__share_group_state` as Kafka 4.4 writes it, read back with
//! `kshard_offsets::ShareStateRecord`: a share group (Kafka's own console
//! share consumer) accepts some records and rejects others; every record of
//! the state topic decodes, and the share-partition's start offset folded
//! from its snapshot and updates is what `kafka-share-groups --describe`
//! says, with the rejected records archived.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use kshard_kafka::{Admin, Client, PartitionReader, ReadEvent, RecordWriter, TopicSpec};
use kshard_offsets::{DeliveryState, Record, RecordKey, RecordValue, ShareStateRecord, ShareStateValue};
use kshard_testkit::{Broker, kafka_share_groups, share_consume, share_from_earliest, unique_name};

const STATE_TOPIC: &str = kshard_kafka::SHARE_GROUP_STATE_TOPIC;

/// A record's key and value bytes.
type Raw = (Vec<u8>, Option<Vec<u8>>);

/// What the state topic says of one share-partition: its start offset and
/// the offsets archived, as snapshots and the updates after them leave it.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
struct Folded {
    start_offset: i64,
    archived: std::collections::BTreeSet<i64>,
}

/// Every record of `topic`, by partition and offset.
fn read_all(settings: &Client, admin: &Admin, topic: &str) -> Option<BTreeMap<(i32, i64), Raw>> {
    let partitions = admin.partition_count(topic).expect("metadata")?;
    let start: Vec<(i32, Option<i64>)> = (0..partitions).map(|p| (p, None)).collect();
    let reader = PartitionReader::new(settings, topic, &start).expect("reader");
    let mut ended = std::collections::BTreeSet::new();
    let mut records: BTreeMap<(i32, i64), Raw> = BTreeMap::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    while ended.len() < partitions as usize && Instant::now() < deadline {
        match reader.poll(Duration::from_millis(200)).expect("poll") {
            ReadEvent::Record(r) => {
                let key = r.key().expect("coordinator records have keys").to_vec();
                records.insert((r.partition(), r.offset()), (key, r.value().map(<[u8]>::to_vec)));
            }
            ReadEvent::EndOfPartition { partition, .. } => {
                ended.insert(partition);
            }
            _ => {}
        }
    }
    assert_eq!(ended.len(), partitions as usize, "read every partition of {topic} to its end");
    Some(records)
}

/// Reads the whole state topic; every record must decode. The state of
/// `group`'s share-partition `partition`, folded.
fn fold(settings: &Client, admin: &Admin, group: &str, partition: i32) -> Option<Folded> {
    let records = read_all(settings, admin, STATE_TOPIC)?;
    let mut folded: Option<Folded> = None;
    for ((p, offset), (key, value)) in &records {
        let record = ShareStateRecord::decode(key, value.as_deref())
            .unwrap_or_else(|e| panic!("{STATE_TOPIC} {p} at {offset} does not decode: {e}"));
        let Some(k) = record.key.share_partition() else { continue };
        if k.group_id != group || k.partition != partition {
            continue;
        }
        let (start_offset, batches) = match &record.value {
            Some(ShareStateValue::Snapshot(v)) => {
                folded = Some(Folded { start_offset: v.start_offset, ..Folded::default() });
                (v.start_offset, &v.state_batches)
            }
            Some(ShareStateValue::Update(v)) => (v.start_offset, &v.state_batches),
            _ => continue,
        };
        let f = folded.get_or_insert_with(Folded::default);
        if start_offset >= 0 {
            f.start_offset = start_offset;
        }
        for b in batches {
            for o in b.first_offset..=b.last_offset {
                if b.delivery_state == DeliveryState::Archived {
                    f.archived.insert(o);
                } else {
                    f.archived.remove(&o);
                }
            }
        }
    }
    folded.map(|mut f| {
        let start = f.start_offset;
        f.archived.retain(|o| *o >= start);
        f
    })
}

/// Kafka's start offset of `topic`'s partition `partition` in `group`.
fn described_start(brokers: &str, group: &str, topic: &str, partition: i32) -> Option<i64> {
    let rows = kafka_share_groups(brokers, group);
    rows.into_iter().find(|r| r.topic == topic && r.partition == partition)?.start_offset
}

#[test]
#[ignore = "needs the real broker or etcd: scripts/test.sh runs it (or cargo test -- --include-ignored)"]
fn share_group_state_decodes_and_folds_to_what_kafka_describes() {
    let broker = Broker::from_env_or_start();
    let settings = Client::to_brokers(broker.brokers());
    let admin = Admin::new(&settings, Duration::from_secs(30)).expect("admin");
    let topic = unique_name("share");
    let group = unique_name("share-group");
    admin
        .create_topic(&TopicSpec { name: topic.clone(), partitions: 1, replication: 1, configs: vec![] })
        .expect("topic");
    let writer = RecordWriter::new(&settings).expect("producer");
    for i in 0..20 {
        writer.send(&topic, 0, format!("k{i}").as_bytes(), Some(b"v")).expect("send");
    }
    writer.flush(Duration::from_secs(30)).expect("flush");
    share_from_earliest(broker.brokers(), &group);
    share_consume(broker.brokers(), &group, &topic, 5, None);
    share_consume(broker.brokers(), &group, &topic, 3, Some("--reject"));

    // The coordinator persists asynchronously: wait until the state topic
    // and Kafka's own answer agree.
    let deadline = Instant::now() + Duration::from_secs(60);
    let (folded, described) = loop {
        let folded = fold(&settings, &admin, &group, 0);
        let described = described_start(broker.brokers(), &group, &topic, 0);
        let start = folded.as_ref().map(|f| f.start_offset);
        let agreed = start == described && start >= Some(8);
        if agreed || Instant::now() >= deadline {
            break (folded, described);
        }
        std::thread::sleep(Duration::from_millis(500));
    };
    let folded = folded.expect("the share-partition has state");
    assert_eq!(Some(folded.start_offset), described, "start offset as kafka-share-groups describes it: {folded:?}");
    // Five accepted, then three rejected (archived): all of 0–7 is done.
    assert!(folded.start_offset >= 8, "accepted and rejected records are behind the start offset: {folded:?}");

    // The group's own records in __consumer_offsets (types 10–15) decode typed.
    let offsets = read_all(&settings, &admin, "__consumer_offsets").expect("the offsets topic exists");
    let mut kinds = std::collections::BTreeSet::new();
    let mut initialized = Vec::new();
    for ((p, offset), (key, value)) in &offsets {
        if RecordKey::group_of(key) != Some(group.as_str()) {
            continue;
        }
        let record = Record::decode(key, value.as_deref())
            .unwrap_or_else(|e| panic!("__consumer_offsets {p} at {offset} does not decode: {e}"));
        assert!(record.key.record_type().is_share_group(), "{record:?}");
        kinds.insert(record.key.record_type().name());
        if let Some(RecordValue::ShareGroupStatePartitionMetadata(v)) = &record.value {
            initialized =
                v.initialized_topics.iter().map(|t| (t.topic_name.to_string(), t.partitions.clone())).collect();
        }
    }
    for kind in ["share_group_metadata", "share_group_member_metadata", "share_group_state_partition_metadata"] {
        assert!(kinds.contains(kind), "{kind} among {kinds:?}");
    }
    assert_eq!(initialized, vec![(topic.clone(), vec![0])], "the share-partition's state is initialized");
}
