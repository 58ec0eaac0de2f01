//! Shared by the lag crate's broker tests: the service on a runtime of its own
//! ([`TestService`]), a [`Writer`] of topics and of synthetic records into an
//! offsets topic of the test's own, and the names of metric series.

#![allow(dead_code, unreachable_pub)]

pub mod pki;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use kshard_kafka::{Admin, Client, ClientSettings, RecordWriter, TopicSpec, offsets_partition_for};
use kshard_lag::service::{Listeners, ProcessOptions, ServeError, ServeOptions, run_listening};
use kshard_lag::{Granularity, MonitorSettings, NameFilter};
use kshard_offsets::{OffsetCommitValue, Record};
use kshard_testkit::{KafkaLag, http_get, parse_metrics};
use tokio::sync::oneshot;

/// The service on a runtime of its own, stopped on drop.
pub struct TestService {
    addr: SocketAddr,
    /// Where KEDA's external scaler listens, when it is served.
    pub keda: Option<SocketAddr>,
    shutdown: Option<oneshot::Sender<()>>,
    thread: Option<JoinHandle<Result<(), ServeError>>>,
}

/// Options for a test: the offsets topic `w` writes, watermarks every 200 ms.
pub fn options(w: &Writer, monitor: MonitorSettings) -> ServeOptions {
    ServeOptions {
        offsets_topic: w.offsets_topic.clone(),
        watermark_interval: Duration::from_millis(200),
        monitor,
        ..ServeOptions::new(w.settings.clone())
    }
}

impl TestService {
    /// The service watching one cluster, under kshard's own names.
    pub fn start(options: ServeOptions) -> Self {
        Self::start_many(vec![options])
    }

    /// The service watching every cluster of `clusters`, under kshard's own names.
    pub fn start_many(clusters: Vec<ServeOptions>) -> Self {
        Self::start_as(ProcessOptions::default(), clusters)
    }

    /// The service watching every cluster of `clusters`, with `process`'s
    /// names, web configuration and export.
    pub fn start_as(process: ProcessOptions, clusters: Vec<ServeOptions>) -> Self {
        Self::start_serving(process, clusters, false)
    }

    /// [`TestService::start_as`], serving KEDA's external scaler too when
    /// `keda` says (its address in [`TestService::keda`]).
    pub fn start_serving(process: ProcessOptions, clusters: Vec<ServeOptions>, keda: bool) -> Self {
        let bound = || {
            let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
            listener.set_nonblocking(true).expect("nonblocking");
            listener
        };
        let listener = bound();
        let addr = listener.local_addr().expect("addr");
        let keda_listener = keda.then(bound);
        let keda = keda_listener.as_ref().map(|l| l.local_addr().expect("addr"));
        let (shutdown_tx, shutdown_rx) = oneshot::channel::<()>();
        let thread = std::thread::spawn(move || {
            let runtime =
                tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("rt");
            runtime.block_on(async move {
                let tokio_listener = |l| tokio::net::TcpListener::from_std(l).expect("listener");
                let listeners = Listeners { http: tokio_listener(listener), keda: keda_listener.map(tokio_listener) };
                run_listening(process, clusters, listeners, async move {
                    let _ = shutdown_rx.await;
                })
                .await
            })
        });
        TestService { addr, keda, shutdown: Some(shutdown_tx), thread: Some(thread) }
    }

    /// The address it listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    pub fn get(&mut self, path: &str) -> (u16, String) {
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

    pub fn metrics(&mut self) -> BTreeMap<String, f64> {
        let (status, body) = self.get("/metrics");
        assert_eq!(status, 200);
        parse_metrics(&body)
    }

    pub fn wait_ready(&mut self) {
        until("ready", Duration::from_secs(60), Duration::from_millis(50), || match self.get("/ready") {
            (200, _) => Ok(()),
            (_, body) => Err(body),
        });
    }

    /// Waits until `check` holds for the metrics, or fails after 30 s.
    pub fn eventually(&mut self, what: &str, check: impl Fn(&BTreeMap<String, f64>) -> bool) {
        until(what, Duration::from_secs(30), Duration::from_millis(100), || {
            let m = self.metrics();
            if check(&m) { Ok(()) } else { Err(format!("metrics: {m:#?}")) }
        });
    }
}

/// Serves one cluster whose broker is unreachable (nothing listens on port
/// 1: the HTTP endpoints and KEDA's scaler answer meanwhile) with `config` as
/// the web configuration file, on a free port, and KEDA's scaler on another
/// when `keda`: (port, scaler's port, stop, the serving task).
pub async fn serve_with_web_config(
    config: &std::path::Path,
    keda: bool,
) -> (u16, Option<u16>, oneshot::Sender<()>, tokio::task::JoinHandle<Result<(), ServeError>>) {
    let http = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let port = http.local_addr().expect("addr").port();
    let keda = if keda { Some(tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind")) } else { None };
    let keda_port = keda.as_ref().map(|l| l.local_addr().expect("addr").port());
    let options = ServeOptions {
        mode: kshard_lag::service::ScrapeMode::AdminApi,
        request_timeout: Duration::from_secs(1),
        ..ServeOptions::new(ClientSettings::new("127.0.0.1:1"))
    };
    let (stop, stopped) = oneshot::channel::<()>();
    let process = ProcessOptions { web_config: Some(config.to_owned()), ..ProcessOptions::default() };
    let task = tokio::spawn(run_listening(process, vec![options], Listeners { http, keda }, async move {
        let _ = stopped.await;
    }));
    (port, keda_port, stop, task)
}

/// Calls `check` every `every` until it returns `Ok`, and returns that; fails
/// after `within`, naming `what` and the last `Err`.
pub fn until<T>(what: &str, within: Duration, every: Duration, mut check: impl FnMut() -> Result<T, String>) -> T {
    let deadline = Instant::now() + within;
    loop {
        match check() {
            Ok(done) => return done,
            Err(last) => assert!(Instant::now() < deadline, "{what}: not within {within:?}; last: {last}"),
        }
        std::thread::sleep(every);
    }
}

impl Drop for TestService {
    fn drop(&mut self) {
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

/// Writes records into the broker: topics with data, and synthetic records
/// into an offsets topic of this test's own.
pub struct Writer {
    pub settings: ClientSettings,
    /// A handle on `settings`, for the test's own clients.
    pub client: Client,
    pub admin: Admin,
    pub writer: RecordWriter,
    pub offsets_topic: String,
    pub offsets_partitions: i32,
}

impl Writer {
    pub fn new(brokers: &str, prefix: &str) -> Self {
        let settings = ClientSettings::new(brokers);
        let client = Client::new(settings.clone());
        let admin = Admin::new(&client, Duration::from_secs(30)).expect("admin");
        let offsets_topic = format!("{prefix}-offsets");
        let offsets_partitions = 10;
        admin.create_topic(&TopicSpec::compacted(&offsets_topic, offsets_partitions)).expect("create offsets topic");
        let writer = RecordWriter::new(&client).expect("producer");
        Writer { settings, client, admin, writer, offsets_topic, offsets_partitions }
    }

    pub fn topic(&self, name: &str, records_per_partition: &[u32]) {
        create_topic(&self.admin, name, records_per_partition.len() as i32);
        self.produce(name, records_per_partition);
    }

    pub fn produce(&self, topic: &str, records_per_partition: &[u32]) {
        produce(&self.writer, topic, records_per_partition);
    }

    pub fn record(&self, group: &str, record: &Record<'_>) {
        let (key, value) = record.encode();
        self.raw(group, &key, value.as_deref());
    }

    pub fn raw(&self, group: &str, key: &[u8], value: Option<&[u8]>) {
        let partition = offsets_partition_for(group, self.offsets_partitions);
        self.writer.send(&self.offsets_topic, partition, key, value).expect("send");
    }

    pub fn flush(&self) {
        self.writer.flush(Duration::from_secs(30)).expect("flush");
    }

    pub fn commit(&self, group: &str, topic: &str, partition: i32, version: i16, offset: i64) {
        self.record(group, &commit(group, topic, partition, version, offset));
    }
}

/// Creates `topic` with `partitions` partitions (replication 1).
pub fn create_topic(admin: &Admin, topic: &str, partitions: i32) {
    let spec = TopicSpec { name: topic.into(), partitions, replication: 1, configs: vec![] };
    admin.create_topic(&spec).expect("create topic");
}

/// Writes `records_per_partition[p]` records into partition p of `topic` and
/// waits until the broker has them.
pub fn produce(writer: &RecordWriter, topic: &str, records_per_partition: &[u32]) {
    for (p, n) in records_per_partition.iter().enumerate() {
        for i in 0..*n {
            writer.send(topic, p as i32, format!("k{i}").as_bytes(), Some(b"v")).expect("send");
        }
    }
    writer.flush(Duration::from_secs(30)).expect("flush");
}

/// Creates `topic` with one partition per entry and fills each with that
/// many records.
pub fn create_and_fill(settings: &Client, topic: &str, records_per_partition: &[u32]) {
    let admin = Admin::new(settings, Duration::from_secs(30)).expect("admin");
    create_topic(&admin, topic, records_per_partition.len() as i32);
    produce(&RecordWriter::new(settings).expect("producer"), topic, records_per_partition);
}

pub fn only(prefix: &str) -> MonitorSettings {
    MonitorSettings {
        groups: NameFilter::new(&[format!("{prefix}.*")], &[]).expect("filter"),
        topics: NameFilter::default(),
        granularity: Granularity::Partition,
        ..MonitorSettings::default()
    }
}

pub fn partition_lag(ns: &str, group: &str, topic: &str, partition: i32) -> String {
    format!(
        "{ns}_kafka_consumer_group_topic_partition_lag{{group_id=\"{group}\",topic_name=\"{topic}\",partition_id=\"{partition}\"}}"
    )
}

pub fn topic_series(ns: &str, metric: &str, group: &str, topic: &str) -> String {
    format!("{ns}_kafka_consumer_group_{metric}{{group_id=\"{group}\",topic_name=\"{topic}\"}}")
}

pub fn group_series(ns: &str, metric: &str, group: &str) -> String {
    format!("{ns}_kafka_consumer_group_{metric}{{group_id=\"{group}\"}}")
}

pub fn commit(group: &str, topic: &str, partition: i32, version: i16, offset: i64) -> Record<'static> {
    let value = OffsetCommitValue::new(version, offset, 1_758_335_260_726);
    Record::offset_commit(group.to_owned(), topic.to_owned(), partition, Some(value))
}

/// The same rows from kshard's `/api/groups` (only partitions with a known lag).
pub fn kshard_api_lag(service: &mut TestService, prefix: &str) -> Vec<KafkaLag> {
    let (status, body) = service.get("/api/groups");
    assert_eq!(status, 200, "{body}");
    let groups: serde_json::Value = serde_json::from_str(&body).expect("JSON");
    let mut rows = Vec::new();
    for g in groups.as_array().expect("array") {
        let group = g["group_id"].as_str().expect("group_id");
        if !group.starts_with(prefix) {
            continue;
        }
        for t in g["topics"].as_array().expect("topics") {
            for p in t["partitions"].as_array().expect("partitions") {
                let (Some(log_end), Some(lag)) = (p["high_water_mark"].as_i64(), p["lag"].as_i64()) else { continue };
                rows.push(KafkaLag {
                    group: group.to_owned(),
                    topic: t["topic"].as_str().expect("topic").to_owned(),
                    partition: p["partition"].as_i64().expect("partition") as i32,
                    committed: p["committed_offset"].as_i64().expect("offset"),
                    log_end,
                    lag,
                });
            }
        }
    }
    rows.sort();
    rows
}

/// The same rows from kshard's `/metrics`: each partition lag series of the
/// groups starting with `prefix`, `(group, topic, partition) → lag`.
pub fn kshard_metric_lag(service: &mut TestService, ns: &str, prefix: &str) -> BTreeMap<(String, String, i32), i64> {
    let head = format!("{ns}_kafka_consumer_group_topic_partition_lag{{group_id=\"");
    service
        .metrics()
        .into_iter()
        .filter_map(|(series, value)| {
            let labels = series.strip_prefix(&head)?;
            let (group, rest) = labels.split_once("\",topic_name=\"")?;
            let (topic, rest) = rest.split_once("\",partition_id=\"")?;
            let partition = rest.strip_suffix("\"}")?.parse().ok()?;
            group.starts_with(prefix).then(|| ((group.to_owned(), topic.to_owned(), partition), value as i64))
        })
        .collect()
}

/// A series of Prometheus text, `name{a="x",b="y"}`: its name and labels
/// (values with their quotes and the separating `",` taken off).
pub fn parse_series(series: &str) -> (String, BTreeMap<String, String>) {
    let Some((name, rest)) = series.split_once('{') else { return (series.to_owned(), BTreeMap::new()) };
    let labels = rest
        .trim_end_matches('}')
        .split("\",")
        .filter(|l| !l.is_empty())
        .filter_map(|l| l.split_once("=\""))
        .map(|(k, v)| (k.to_owned(), v.trim_end_matches('"').to_owned()))
        .collect();
    (name.to_owned(), labels)
}

/// A file of `tests/published/`: a dashboard, rule file or template as its
/// project publishes it (`tests/published/SOURCES.md`).
pub fn published(name: &str) -> String {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/published").join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}
