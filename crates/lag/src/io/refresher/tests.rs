//! The refresher on a scripted broker: admin-API scrapes, the watermarks
//! asked, and the topics that grow.

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::Ordering;

use kshard_kafka::{Error, FetchedOffsets, GroupDescription, GroupListing};
use kshard_offsets::{OffsetCommitValue, Record};

use super::*;
use crate::monitor::MonitorSettings;

/// Brokers as the test says they are.
#[derive(Default)]
struct Fake {
    topics: HashMap<String, i32>,
    /// (topic, partition) → (low, high).
    watermarks: HashMap<TopicPartition, (i64, i64)>,
    groups: Vec<GroupListing>,
    offsets: Vec<FetchedOffsets>,
    /// Partitions whose watermarks were asked for, per call.
    asked: Mutex<Vec<Vec<TopicPartition>>>,
    /// A call asking for this topic fails (a partition without a leader).
    leaderless: Option<&'static str>,
}

impl BrokerAdmin for Fake {
    fn partition_count(&self, topic: &str) -> Result<Option<i32>, Error> {
        Ok(self.topics.get(topic).copied())
    }
    fn topics(&self) -> Result<HashMap<String, i32>, Error> {
        Ok(self.topics.clone())
    }
    fn leaders(&self, topic: &str) -> Result<HashMap<i32, i32>, Error> {
        Ok((0..self.topics.get(topic).copied().unwrap_or(0)).map(|p| (p, 1 + p % 3)).collect())
    }
    fn watermarks(&self, partitions: &[TopicPartition]) -> Result<crate::brokers::WatermarkMap, Error> {
        self.asked.lock().expect("lock").push(partitions.to_vec());
        if partitions.iter().any(|tp| Some(tp.topic.as_str()) == self.leaderless) {
            return Err(Error::Refused { step: "ListOffsets".into(), message: "no leader".into() });
        }
        Ok(partitions.iter().filter_map(|k| self.watermarks.get(k).map(|w| (k.clone(), *w))).collect())
    }
    fn list_groups(&self) -> Result<Vec<GroupListing>, Error> {
        Ok(self.groups.clone())
    }
    fn describe_groups(&self, _: &[String]) -> Result<Vec<GroupDescription>, Error> {
        Ok(Vec::new())
    }
    fn group_offsets(&self, groups: &[String]) -> Result<Vec<FetchedOffsets>, Error> {
        Ok(self.offsets.iter().filter(|o| groups.contains(&o.group_id)).cloned().collect())
    }
}

fn refresher(monitor: &Arc<Monitor>, mode: ScrapeMode) -> (Refresher, mpsc::Receiver<Vec<i32>>) {
    let (tx, rx) = mpsc::channel();
    let r = Refresher {
        kafka: Client::to_brokers("127.0.0.1:1"),
        offsets_topic: "__consumer_offsets".into(),
        mode,
        interval: Duration::from_secs(5),
        monitor: Arc::clone(monitor),
        timings: Arc::new(SelfTimings::default()),
        shutdown: crate::shutdown::Shutdown::default(),
        new_partitions: tx,
        new_share_partitions: None,
        brokers: Arc::new(crate::brokers::Kafka {
            client: Client::to_brokers("127.0.0.1:1"),
            timeout: Duration::from_secs(1),
        }),
    };
    (r, rx)
}

#[test]
fn a_refresh_is_due_on_schedule_and_at_once_after_catch_up_retrying_each_second() {
    let t0 = Instant::now();
    let s = |ms| t0 + Duration::from_millis(ms);
    let mut schedule = Schedule::new(Duration::from_secs(5), t0);
    assert!(schedule.due(t0, false), "the first refresh is due at start");
    schedule.finished(t0, false, true);
    assert!(!schedule.due(s(100), false), "then every interval");
    assert_eq!(schedule.wait(s(100), false), Duration::from_millis(50), "catch-up is looked for often");
    assert!(schedule.due(s(100), true), "catch-up completing makes one due at once");
    schedule.finished(s(100), true, false);
    assert!(!schedule.due(s(600), true), "after a failure, not before a second");
    assert!(schedule.due(s(1_100), true));
    schedule.finished(s(1_100), true, true);
    assert!(!schedule.due(s(1_200), true), "refreshed since catch-up: back to the interval");
    assert_eq!(schedule.wait(s(1_200), true), Duration::from_millis(250), "slept for in steps");
    assert!(schedule.due(s(6_100), true));
}

#[test]
fn a_refresh_asks_for_committed_topics_only_and_hands_new_offsets_partitions_to_the_reader() {
    let monitor = Arc::new(Monitor::new(MonitorSettings::default()));
    monitor.track(Log::Offsets, 0, 0, 1);
    monitor.track(Log::Offsets, 1, 0, 0);
    monitor.start_log(Log::Offsets);
    let (k, v) = Record::offset_commit("g", "orders", 1, Some(OffsetCommitValue::new(3, 4, 0))).encode();
    monitor.apply(0, 0, Some(&k), v.as_deref()).expect("applies");
    // The offsets topic grew to three partitions; "idle" has no commits.
    let fake = Fake {
        topics: HashMap::from([("__consumer_offsets".into(), 3), ("orders".into(), 2), ("idle".into(), 4)]),
        watermarks: HashMap::from([
            (TopicPartition::new("orders", 0), (0, 10)),
            (TopicPartition::new("orders", 1), (2, 9)),
            (TopicPartition::new("__consumer_offsets", 0), (0, 1)),
            (TopicPartition::new("__consumer_offsets", 1), (0, 0)),
            (TopicPartition::new("__consumer_offsets", 2), (0, 6)),
        ]),
        ..Fake::default()
    };
    let (r, announced) = refresher(&monitor, ScrapeMode::OffsetsTopic);
    let Refreshed { watermarks, leaders, ends } = r.refresh(&fake, None).expect("refreshes");
    monitor.set_offsets_topic(leaders, ends);
    assert_eq!(announced.try_recv().ok(), Some(vec![2]), "the new partition goes to the reader");
    assert_eq!(monitor.progress().partitions, 3, "and is tracked");
    assert_eq!(watermarks.get("orders", 1), Some(Watermark { low: 2, high: 9 }));
    let asked = fake.asked.lock().expect("lock").concat();
    assert!(!asked.iter().any(|tp| tp.topic == "idle"), "no watermarks of topics nobody committed to: {asked:?}");
    assert_eq!(monitor.unread(), [(0, 0), (1, 0), (2, 6)]);
    assert_eq!(monitor.coordinator(2), Some(3));
}

#[test]
fn every_topic_watermarks_asks_for_every_allowed_topic_each_partition_once() {
    let settings = MonitorSettings {
        topics: crate::NameFilter::new(&[], &["hidden".to_owned()]).expect("filter"),
        every_topic_watermarks: true,
        ..MonitorSettings::default()
    };
    let monitor = Arc::new(Monitor::new(settings));
    monitor.track(Log::Offsets, 0, 0, 0);
    monitor.start_log(Log::Offsets);
    let fake = Fake {
        topics: HashMap::from([("__consumer_offsets".into(), 1), ("idle".into(), 2), ("hidden".into(), 1)]),
        watermarks: HashMap::from([
            (TopicPartition::new("idle", 0), (0, 5)),
            (TopicPartition::new("idle", 1), (1, 1)),
            (TopicPartition::new("hidden", 0), (0, 3)),
            (TopicPartition::new("__consumer_offsets", 0), (0, 7)),
        ]),
        ..Fake::default()
    };
    let (r, _) = refresher(&monitor, ScrapeMode::OffsetsTopic);
    let Refreshed { watermarks, ends, .. } = r.refresh(&fake, None).expect("refreshes");
    assert_eq!(watermarks.get("idle", 0), Some(Watermark { low: 0, high: 5 }), "no group committed to it");
    assert_eq!(watermarks.get("hidden", 0), None, "the topics filter still holds");
    assert_eq!(watermarks.get("__consumer_offsets", 0), Some(Watermark { low: 0, high: 7 }));
    assert_eq!(ends.get(&0), Some(&7), "and the reader's end, from the same answer");
    let asked = fake.asked.lock().expect("lock").concat();
    let offsets: Vec<_> = asked.iter().filter(|tp| tp.topic == "__consumer_offsets").collect();
    assert_eq!(offsets.len(), 1, "asked once: {asked:?}");
    // A topic nobody reads whose partition has no leader costs its series only.
    let broken = Fake { leaderless: Some("idle"), ..fake };
    let Refreshed { watermarks, ends, .. } = r.refresh(&broken, None).expect("the refresh still succeeds");
    assert_eq!(watermarks.get("idle", 0), None);
    assert_eq!(ends.get(&0), Some(&7));
}

#[test]
fn admin_api_mode_rebuilds_its_unit_from_offset_fetch_keeping_groups_that_failed() {
    let monitor = Arc::new(Monitor::new(MonitorSettings::default()));
    let mut fake = Fake {
        groups: ["a", "b"]
            .into_iter()
            .map(|g| GroupListing { group_id: g.into(), state: "Empty".into(), simple: true })
            .collect(),
        offsets: vec![
            FetchedOffsets { group_id: "a".into(), offsets: vec![("t".into(), 0, 5)], error: None },
            FetchedOffsets { group_id: "b".into(), offsets: vec![("t".into(), 0, 7)], error: None },
        ],
        ..Fake::default()
    };
    scrape_groups(&fake, None, &monitor).expect("scrapes");
    // b's OffsetFetch fails next time: its offsets from before are kept.
    fake.offsets[0].offsets = vec![("t".into(), 0, 6)];
    fake.offsets[1] =
        FetchedOffsets { group_id: "b".into(), offsets: vec![], error: Some("coordinator moving".into()) };
    scrape_groups(&fake, None, &monitor).expect("scrapes");
    let mut seen = Vec::new();
    monitor.units().for_each(|_, unit| {
        for (group, g) in unit.groups() {
            seen.push((group.to_string(), g.offset("t", 0).map(|c| c.offset)));
        }
    });
    seen.sort();
    assert_eq!(seen, [("a".to_owned(), Some(6)), ("b".to_owned(), Some(7))]);
    assert_eq!(monitor.units().counters().offset_fetch_errors.load(Ordering::Relaxed), 1);
}

/// Share groups as the test says they are.
struct FakeShare {
    listed: Vec<kshard_kafka::ShareGroupListing>,
    offsets: Vec<kshard_kafka::ShareGroupOffsets>,
}

impl ShareGroupAdmin for FakeShare {
    fn list_share_groups(&self) -> Result<Vec<kshard_kafka::ShareGroupListing>, Error> {
        Ok(self.listed.clone())
    }
    fn share_group_offsets(&self, groups: &[String]) -> Result<Vec<kshard_kafka::ShareGroupOffsets>, Error> {
        Ok(self.offsets.iter().filter(|o| groups.contains(&o.group_id)).cloned().collect())
    }
    fn describe_share_groups(&self, groups: &[String]) -> Result<Vec<kshard_kafka::ShareGroupDescription>, Error> {
        Ok(groups
            .iter()
            .map(|g| kshard_kafka::ShareGroupDescription {
                group_id: g.clone(),
                error: None,
                state: "Stable".into(),
                epoch: 3,
                assignor: "simple".into(),
                members: vec![kshard_kafka::ShareMember {
                    member_id: "m".into(),
                    client_id: "worker".into(),
                    client_host: "/10.0.0.1".into(),
                    assignment: vec![("jobs".into(), vec![0])],
                }],
            })
            .collect())
    }
}

#[test]
fn admin_api_mode_takes_share_groups_from_their_own_calls() {
    let monitor = Arc::new(Monitor::new(MonitorSettings::default()));
    // ListGroups (librdkafka's) lists the share group too: it is left to the share calls.
    let fake = Fake {
        groups: ["c", "sg"]
            .into_iter()
            .map(|g| GroupListing { group_id: g.into(), state: "Stable".into(), simple: false })
            .collect(),
        offsets: vec![FetchedOffsets { group_id: "c".into(), offsets: vec![("t".into(), 0, 5)], error: None }],
        watermarks: HashMap::from([(TopicPartition::new("jobs", 0), (0, 40))]),
        topics: HashMap::from([("jobs".into(), 1)]),
        ..Fake::default()
    };
    let partition = |p, start_offset, lag| kshard_kafka::ShareOffset {
        topic: "jobs".into(),
        topic_id: [4; 16],
        partition: p,
        start_offset,
        lag,
    };
    let share = FakeShare {
        listed: vec![kshard_kafka::ShareGroupListing { group_id: "sg".into(), state: "Stable".into() }],
        offsets: vec![kshard_kafka::ShareGroupOffsets {
            group_id: "sg".into(),
            error: None,
            partitions: vec![partition(0, 30, 7), partition(1, -1, -1)],
        }],
    };
    scrape_groups(&fake, Some(&share), &monitor).expect("scrapes");
    let (watermarks, _) = fetch_watermarks(&fake, &monitor, &fake.topics, None).expect("watermarks");
    monitor.set_watermarks(watermarks, true, monitor.now());
    let groups = crate::api::groups(&monitor);
    let sg = groups.iter().find(|g| g.group_id == "sg").expect("the share group");
    assert_eq!((sg.protocol_type.as_deref(), sg.state.as_str(), sg.members), (Some("share"), "Stable", 1));
    let p = &sg.topics[0].partitions;
    // Kafka's lag as reported, not the watermark's 40 - 30; an
    // uninitialized partition has none.
    assert_eq!((p[0].committed_offset, p[0].lag), (30, Some(7)));
    assert_eq!((p[1].committed_offset, p[1].lag), (-1, None));
    assert_eq!(groups.len(), 2, "c and sg, each once: {groups:?}");
}
