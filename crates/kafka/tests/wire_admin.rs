//! kshard's own admin client ([`WireAdmin`]) against librdkafka's
//! ([`Admin`]) on the real broker: every call the lag monitor makes gives
//! the same answer from both — topics, partition counts, leaders,
//! watermarks (after records were deleted), the groups listed (a group
//! that only commits, a classic consumer group with a member, a KIP-848
//! one), their committed offsets and their descriptions (state, assignor,
//! members and their partitions) — and a group or topic that is not there.
//! (Brokers before Kafka 3.0 go to librdkafka: `hostile_broker.rs`.)

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use kshard_kafka::{
    Admin, BrokerAdmin, Client, GroupConsumer, GroupDescription, GroupProtocol, OffsetCommitter, TopicPartition,
    TopicSpec, WireAdmin,
};
use kshard_testkit::{Broker, unique_name};
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};

const TIMEOUT: Duration = Duration::from_secs(30);

fn produce(brokers: &str, topic: &str, partitions: i32, per_partition: usize) {
    let producer: BaseProducer =
        rdkafka::ClientConfig::new().set("bootstrap.servers", brokers).create().expect("producer");
    for p in 0..partitions {
        for i in 0..per_partition {
            let value = format!("v{i}");
            producer.send(BaseRecord::<str, str>::to(topic).partition(p).payload(&value)).expect("send");
        }
    }
    producer.flush(TIMEOUT).expect("flush");
}

/// A description with members and partitions in order (the brokers list
/// them in no set order).
fn sorted(mut d: GroupDescription) -> GroupDescription {
    for m in &mut d.members {
        m.assignment.sort();
    }
    d.members.sort_by(|a, b| a.member_id.cmp(&b.member_id));
    d
}

#[test]
#[ignore = "needs the real broker or etcd: scripts/test.sh runs it (or cargo test -- --include-ignored)"]
fn kshards_admin_calls_answer_as_librdkafkas() {
    let broker = Broker::from_env_or_start();
    let settings = Client::to_brokers(broker.brokers());
    let rdkafka = Admin::connect(&settings, TIMEOUT).expect("librdkafka's admin");
    let wire = WireAdmin::connect(&settings, TIMEOUT).expect("connects").expect("kshard's client for PLAINTEXT");
    let p = unique_name("wire-admin");
    let (orders, events) = (format!("{p}-orders"), format!("{p}-events"));
    for (topic, partitions) in [(&orders, 3), (&events, 2)] {
        let spec = TopicSpec { name: topic.clone(), partitions, replication: 1, configs: vec![] };
        rdkafka.create_topic(&spec).expect("creates");
        produce(broker.brokers(), topic, partitions, 20);
    }
    rdkafka.delete_records(&orders, 1, 7).expect("deletes records");

    // Metadata.
    let ours = |m: std::collections::HashMap<String, i32>| -> BTreeMap<String, i32> {
        m.into_iter().filter(|(t, _)| t.starts_with(&p)).collect()
    };
    assert_eq!(
        ours(BrokerAdmin::topics(&wire).expect("topics")),
        BTreeMap::from([(orders.clone(), 3), (events.clone(), 2)])
    );
    assert_eq!(ours(BrokerAdmin::topics(&wire).expect("topics")), ours(rdkafka.topics().expect("topics")));
    for topic in [&orders, &events] {
        assert_eq!(
            BrokerAdmin::partition_count(&wire, topic).expect("count"),
            rdkafka.partition_count(topic).expect("count")
        );
        assert_eq!(BrokerAdmin::leaders(&wire, topic).expect("leaders"), rdkafka.leaders(topic).expect("leaders"));
    }
    let missing = format!("{p}-missing");
    assert_eq!(BrokerAdmin::partition_count(&wire, &missing).expect("asks"), None);
    assert_eq!(rdkafka.partition_count(&missing).expect("asks"), None);

    // Watermarks, a deleted start among them.
    let partitions: Vec<TopicPartition> = (0..3)
        .map(|i| TopicPartition::new(&orders, i))
        .chain((0..2).map(|i| TopicPartition::new(&events, i)))
        .collect();
    let marks = BrokerAdmin::watermarks(&wire, &partitions).expect("watermarks");
    assert_eq!(marks.get(&TopicPartition::new(&orders, 1)), Some(&(7, 20)));
    assert_eq!(marks, rdkafka.watermarks(&partitions).expect("watermarks"));

    // Groups: one that only commits, a classic one with a member, a KIP-848 one.
    let (simple, classic, kip848) = (format!("{p}-simple"), format!("{p}-classic"), format!("{p}-kip848"));
    OffsetCommitter::new(&settings, &simple)
        .expect("committer")
        .commit(&[(&orders, 0, 5), (&orders, 2, 9)])
        .expect("commits");
    let classic_member = GroupConsumer::new(&settings, &classic, &[&orders]).expect("classic member");
    let kip848_member =
        GroupConsumer::with_protocol(&settings, &kip848, &[&events], GroupProtocol::Consumer).expect("KIP-848 member");
    // Each reads every record of its topic (and so was given its partitions).
    for (member, records) in [(&classic_member, 3 * 20 - 7), (&kip848_member, 2 * 20)] {
        assert_eq!(member.consume(records, Duration::from_secs(60)).expect("consumes"), records);
        member.commit().expect("commits");
    }
    let groups = [simple.clone(), classic.clone(), kip848.clone()];
    // Both see the same: the listing once every group is there and settled.
    let listed = |admin: &dyn BrokerAdmin| -> Vec<(String, String, bool)> {
        let mut l: Vec<_> = admin
            .list_groups()
            .expect("lists")
            .into_iter()
            .filter(|g| g.group_id.starts_with(&p))
            .map(|g| (g.group_id, g.state, g.simple))
            .collect();
        l.sort();
        l
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let (w, r) = (listed(&wire), listed(&rdkafka));
        if w.len() == 3 && w == r && w.iter().all(|(_, state, _)| state == "Stable" || state == "Empty") {
            break;
        }
        assert!(Instant::now() < deadline, "kshard's {w:?}, librdkafka's {r:?}");
        std::thread::sleep(Duration::from_millis(500));
    }
    let offsets = |admin: &dyn BrokerAdmin| {
        let mut o = admin.group_offsets(&groups).expect("offsets");
        for g in &mut o {
            g.offsets.sort();
        }
        o.sort_by(|a, b| a.group_id.cmp(&b.group_id));
        o
    };
    let fetched = offsets(&wire);
    assert_eq!(fetched.len(), 3);
    let simple_offsets = fetched.iter().find(|g| g.group_id == simple).expect("the simple group");
    assert_eq!(simple_offsets.offsets, [(orders.clone(), 0, 5), (orders.clone(), 2, 9)]);
    assert_eq!(fetched, offsets(&rdkafka));
    let described = |admin: &dyn BrokerAdmin| {
        let mut d: Vec<GroupDescription> =
            admin.describe_groups(&groups).expect("describes").into_iter().map(sorted).collect();
        d.sort_by(|a, b| a.group_id.cmp(&b.group_id));
        d
    };
    let ours = described(&wire);
    let classic_description = ours.iter().find(|d| d.group_id == classic).expect("the classic group");
    assert_eq!(classic_description.members.len(), 1);
    assert_eq!(classic_description.members[0].assignment.len(), 3, "{classic_description:?}");
    assert_eq!(ours, described(&rdkafka));

    // A group that is not there: described and fetched alike by both.
    let nobody = [format!("{p}-nobody")];
    let (w, r) =
        (wire.describe_groups(&nobody).expect("describes"), rdkafka.describe_groups(&nobody).expect("describes"));
    assert_eq!(w, r);
    assert_eq!(w.first().map(|d| (d.state.as_str(), d.members.len())), Some(("Dead", 0)), "{w:?}");
    let (w, r) = (wire.group_offsets(&nobody).expect("fetches"), rdkafka.group_offsets(&nobody).expect("fetches"));
    assert_eq!(w, r);
    assert!(w.iter().all(|g| g.offsets.is_empty()), "{w:?}");
    assert_eq!(wire.client(), Some("kshard"), "a broker of today is served by kshard's own calls");
}
