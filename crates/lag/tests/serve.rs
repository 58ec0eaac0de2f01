//! `kshard serve` against the real broker: canonical records produced into
//! `__consumer_offsets`, real topics with real watermarks, and the service's own
//! HTTP endpoints. Each test isolates its groups with a name prefix and an allow
//! filter, since the broker's `__consumer_offsets` is shared.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use kshard_kafka::{Admin, CONSUMER_OFFSETS_TOPIC, ClientSettings, RecordWriter, TopicSpec, offsets_partition_for};
use kshard_lag::service::{ScrapeMode, ServeError, ServeOptions, run};
use kshard_lag::{Granularity, MonitorSettings, NameFilter};
use kshard_offsets::*;
use kshard_testkit::{Broker, http_get, parse_metrics, unique_name};
use tokio::sync::oneshot;

/// The service on a runtime of its own, stopped on drop.
struct TestService {
    addr: SocketAddr,
    shutdown: Option<oneshot::Sender<()>>,
    hold: Option<oneshot::Sender<()>>,
    thread: Option<JoinHandle<Result<(), ServeError>>>,
}

impl TestService {
    fn start(brokers: &str, namespace: &str, monitor: MonitorSettings, held: bool) -> Self {
        Self::start_in(ScrapeMode::OffsetsTopic, brokers, namespace, monitor, held)
    }

    fn start_in(mode: ScrapeMode, brokers: &str, namespace: &str, monitor: MonitorSettings, held: bool) -> Self {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        listener.set_nonblocking(true).expect("nonblocking");
        let addr = listener.local_addr().expect("addr");
        let (shutdown_tx, shutdown_rx) = oneshot::channel::<()>();
        let (hold_tx, hold_rx) = oneshot::channel::<()>();
        let options = ServeOptions {
            kafka: ClientSettings::new(brokers),
            mode,
            namespace: namespace.to_owned(),
            watermark_interval: Duration::from_millis(200),
            monitor,
            request_timeout: Duration::from_secs(30),
            hold_reading: held.then_some(hold_rx),
        };
        let thread = std::thread::spawn(move || {
            let runtime =
                tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("rt");
            runtime.block_on(async move {
                let listener = tokio::net::TcpListener::from_std(listener).expect("listener");
                run(options, listener, async move {
                    let _ = shutdown_rx.await;
                })
                .await
            })
        });
        TestService { addr, shutdown: Some(shutdown_tx), hold: held.then_some(hold_tx), thread: Some(thread) }
    }

    fn get(&mut self, path: &str) -> (u16, String) {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            match http_get(&self.addr.to_string(), path) {
                Ok(r) => return r,
                Err(e) => {
                    if self.thread.as_ref().is_some_and(JoinHandle::is_finished) {
                        let result = self.thread.take().map(|t| t.join());
                        panic!("the service stopped: {result:?}");
                    }
                    assert!(Instant::now() < deadline, "GET {path}: {e}");
                    std::thread::sleep(Duration::from_millis(50));
                }
            }
        }
    }

    fn metrics(&mut self) -> BTreeMap<String, f64> {
        let (status, body) = self.get("/metrics");
        assert_eq!(status, 200);
        parse_metrics(&body)
    }

    fn release(&mut self) {
        if let Some(hold) = self.hold.take() {
            let _ = hold.send(());
        }
    }

    fn wait_ready(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let (status, body) = self.get("/ready");
            if status == 200 {
                return;
            }
            assert!(Instant::now() < deadline, "not ready after 60 s: {body}");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Waits until `check` holds for the metrics, or fails after 30 s.
    fn eventually(&mut self, what: &str, check: impl Fn(&BTreeMap<String, f64>) -> bool) {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let m = self.metrics();
            if check(&m) {
                return;
            }
            assert!(Instant::now() < deadline, "{what} did not happen within 30 s; metrics: {m:#?}");
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for TestService {
    fn drop(&mut self) {
        self.release();
        if let Some(s) = self.shutdown.take() {
            let _ = s.send(());
        }
        if let Some(t) = self.thread.take() {
            let result = t.join();
            if !std::thread::panicking() {
                result.expect("service thread").expect("service stopped cleanly");
            }
        }
    }
}

/// Writes records into the broker: topics with data, and `__consumer_offsets`.
struct Writer {
    admin: Admin,
    writer: RecordWriter,
    offsets_partitions: i32,
}

impl Writer {
    fn new(brokers: &str) -> Self {
        let settings = ClientSettings::new(brokers);
        let admin = Admin::new(&settings, Duration::from_secs(30)).expect("admin");
        admin.create_topic(&TopicSpec::consumer_offsets()).expect("__consumer_offsets");
        let offsets_partitions = admin.partition_count(CONSUMER_OFFSETS_TOPIC).expect("metadata").expect("exists");
        Writer { admin, writer: RecordWriter::new(&settings).expect("producer"), offsets_partitions }
    }

    fn topic(&self, name: &str, records_per_partition: &[u32]) {
        let spec = TopicSpec {
            name: name.into(),
            partitions: records_per_partition.len() as i32,
            replication: 1,
            configs: vec![],
        };
        self.admin.create_topic(&spec).expect("create topic");
        self.produce(name, records_per_partition);
    }

    fn produce(&self, topic: &str, records_per_partition: &[u32]) {
        for (p, n) in records_per_partition.iter().enumerate() {
            for i in 0..*n {
                self.writer.send(topic, p as i32, format!("k{i}").as_bytes(), Some(b"v")).expect("send");
            }
        }
        self.writer.flush(Duration::from_secs(30)).expect("flush");
    }

    fn record(&self, group: &str, record: &Record<'_>) {
        let (key, value) = record.encode();
        self.raw(group, &key, value.as_deref());
    }

    fn raw(&self, group: &str, key: &[u8], value: Option<&[u8]>) {
        let partition = offsets_partition_for(group, self.offsets_partitions);
        self.writer.send(CONSUMER_OFFSETS_TOPIC, partition, key, value).expect("send");
    }

    fn flush(&self) {
        self.writer.flush(Duration::from_secs(30)).expect("flush");
    }

    fn commit(&self, group: &str, topic: &str, partition: i32, version: i16, offset: i64) {
        self.record(group, &commit(group, topic, partition, version, offset));
    }
}

fn commit(group: &str, topic: &str, partition: i32, version: i16, offset: i64) -> Record<'static> {
    let value = OffsetCommitValue::new(version, offset, 1_758_335_260_726);
    Record::offset_commit(group.to_owned(), topic.to_owned(), partition, Some(value))
}

fn group_metadata(group: &str, topic: &str, assignments: &[Vec<i32>]) -> Record<'static> {
    let members = assignments
        .iter()
        .enumerate()
        .map(|(i, partitions)| MemberMetadata {
            member_id: format!("m{i}").into(),
            group_instance_id: None,
            client_id: format!("c{i}").into(),
            client_host: "/127.0.0.1".into(),
            rebalance_timeout: Some(30_000),
            session_timeout: 10_000,
            subscription: Subscription::to_topics(1, vec![topic.to_owned().into()]).to_bytes().into(),
            assignment: if partitions.is_empty() {
                Vec::new().into()
            } else {
                Assignment {
                    version: 1,
                    assigned_partitions: vec![TopicPartitions {
                        topic: topic.to_owned().into(),
                        partitions: partitions.clone(),
                    }],
                    user_data: None,
                }
                .to_bytes()
                .into()
            },
        })
        .collect();
    Record {
        key: RecordKey::GroupMetadata(GroupMetadataKey { group: group.to_owned().into() }),
        value: Some(RecordValue::GroupMetadata(GroupMetadataValue {
            version: 3,
            protocol_type: "consumer".into(),
            generation: 4,
            protocol: Some("range".into()),
            leader: Some("m0".into()),
            current_state_timestamp: Some(1_758_335_260_726),
            members,
        })),
    }
}

fn only(prefix: &str) -> MonitorSettings {
    MonitorSettings {
        groups: NameFilter::new(&[format!("{prefix}.*")], &[]).expect("filter"),
        topics: NameFilter::default(),
        granularity: Granularity::Partition,
    }
}

fn partition_lag(ns: &str, group: &str, topic: &str, partition: i32) -> String {
    format!(
        "{ns}_kafka_consumer_group_topic_partition_lag{{group_id=\"{group}\",topic_name=\"{topic}\",partition_id=\"{partition}\"}}"
    )
}

fn topic_series(ns: &str, metric: &str, group: &str, topic: &str) -> String {
    format!("{ns}_kafka_consumer_group_{metric}{{group_id=\"{group}\",topic_name=\"{topic}\"}}")
}

fn group_series(ns: &str, metric: &str, group: &str) -> String {
    format!("{ns}_kafka_consumer_group_{metric}{{group_id=\"{group}\"}}")
}

#[test]
fn every_value_version_tombstones_members_and_a_malformed_record() {
    let broker = Broker::from_env_or_start();
    let w = Writer::new(broker.brokers());
    let p = unique_name("lag-it");
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
    let mut service = TestService::start(broker.brokers(), ns, only(&p), true);
    // Held before reading: partitions tracked, not ready, and no group series yet.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (status, body) = service.get("/ready");
        assert_eq!(status, 503, "{body}");
        let ready: serde_json::Value = serde_json::from_str(&body).expect("JSON");
        assert_eq!(ready["ready"], false);
        if ready["partitions"].as_u64().is_some_and(|n| n >= 50) {
            break;
        }
        assert!(Instant::now() < deadline, "partitions not tracked: {body}");
        std::thread::sleep(Duration::from_millis(50));
    }
    let m = service.metrics();
    assert_eq!(m.get("kshard_catchup_ready"), Some(&0.0));
    assert!(!m.keys().any(|k| k.contains(&p)), "no group series before catch-up");
    let (status, _) = service.get("/api/groups");
    assert_eq!(status, 503);

    service.release();
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
    assert!(!m.keys().any(|k| k.contains("consumer_group_info") && k.contains(&gone)), "group metadata removed");
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
fn filters_topic_granularity_and_the_kminion_namespace() {
    let broker = Broker::from_env_or_start();
    let w = Writer::new(broker.brokers());
    let p = unique_name("lag-filter");
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
    };
    let ns = "kminion";
    let mut service = TestService::start(broker.brokers(), ns, settings, false);
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
fn lag_follows_new_commits_and_new_produce() {
    let broker = Broker::from_env_or_start();
    let w = Writer::new(broker.brokers());
    let p = unique_name("lag-live");
    let topic = format!("{p}-live");
    w.topic(&topic, &[20]);
    let g = format!("{p}-g");
    w.commit(&g, &topic, 0, 4, 15);
    w.flush();
    let ns = "kshard";
    let mut service = TestService::start(broker.brokers(), ns, only(&p), false);
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
fn admin_api_mode_reports_real_consumer_groups() {
    let broker = Broker::from_env_or_start();
    let w = Writer::new(broker.brokers());
    let p = unique_name("lag-admin");
    let topic = format!("{p}-events");
    w.topic(&topic, &[30]);
    let group = format!("{p}-app");
    let settings = ClientSettings::new(broker.brokers());
    let member = kshard_kafka::GroupConsumer::new(&settings, &group, &[&topic]).expect("consumer");
    let read = member.consume(12, Duration::from_secs(60)).expect("consume");
    assert_eq!(read, 12, "the group read its records");
    member.commit().expect("commit");

    let ns = "kshard";
    let mut service = TestService::start_in(ScrapeMode::AdminApi, broker.brokers(), ns, only(&p), false);
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
    assert!(
        !m.keys().any(|k| k.starts_with("kshard_kafka_consumer_group_members{") && k.contains(&group)),
        "members are unknown in this mode"
    );
}

#[test]
fn waits_not_ready_until_consumer_offsets_exists() {
    // A new cluster has no __consumer_offsets until the first group commits.
    let broker = Broker::start_private();
    let p = unique_name("lag-wait");
    let ns = "kshard";
    let mut service = TestService::start(broker.brokers(), ns, only(&p), false);
    let (status, body) = service.get("/ready");
    assert_eq!(status, 503, "{body}");
    std::thread::sleep(Duration::from_millis(500));
    let (status, _) = service.get("/ready");
    assert_eq!(status, 503, "still waiting for the topic");
    let w = Writer::new(broker.brokers()); // creates __consumer_offsets
    let topic = format!("{p}-t");
    w.topic(&topic, &[4]);
    let g = format!("{p}-g");
    w.commit(&g, &topic, 0, 3, 1);
    w.flush();
    service.wait_ready();
    service.eventually("the first group's lag", |m| m.get(&partition_lag(ns, &g, &topic, 0)) == Some(&3.0));
}
