//! One watched cluster's workers, started: the readers of its offsets topic
//! (and share-state topic) through the runtime's shards, the refresher, and
//! the workers beside them (kminion's cluster families, the end-to-end
//! probe), each under the supervisor and the service's shutdown; and what
//! HTTP serves of the cluster.

use std::sync::mpsc;
use std::sync::{Arc, Mutex};

use kshard_kafka::Client;
use tokio::task::JoinHandle;
use tracing::info;

use crate::app_state::AppState;
use crate::brokers::{Connector, Kafka};
use crate::catch_up::Log;
use crate::log_reader::{OffsetsReader, SHARE_WORKER, Shards, Stores, WORKER};
use crate::metrics::{Metrics, SelfTimings};
use crate::monitor::Monitor;
use crate::refresher::{self, ScrapeMode};
use crate::serve_options::ServeOptions;
use crate::settings::ProcessOptions;
use crate::shutdown::Shutdown;
use crate::supervisor::{self, Life};

/// A worker's lives.
type Body = Box<dyn FnMut() -> Life + Send>;

/// Starts one cluster's workers: what HTTP serves of it, and their tasks.
pub(crate) fn start(
    process: &ProcessOptions,
    options: ServeOptions,
    stop: &Shutdown,
) -> (AppState, Vec<JoinHandle<()>>) {
    // Every client of the cluster's workers shares one handle: one
    // connection per broker for all its readers, one traffic count.
    let kafka = Client::new(options.kafka.clone());
    let mut settings = options.monitor.clone();
    settings.every_topic_watermarks |= process.profile == crate::Profile::KafkaExporter;
    let monitor = Arc::new(Monitor::with_stale_after(settings, options.stale_after()));
    monitor.watch_stalls(kafka.reads_with_own_client());
    let timings = Arc::new(SelfTimings::default());
    let member = crate::LocalMember::default();
    // Shown for three intervals: one slow or failed answer does not drop the series.
    let cluster_view = options
        .cluster_info
        .enabled
        .then(|| Arc::new(crate::ClusterView::new(options.cluster_info.interval * 3 + options.request_timeout)));
    let probe = options.end_to_end.enabled.then(|| Arc::new(crate::EndToEnd::new(options.end_to_end.slas)));
    let metrics = Arc::new(Metrics::with_profile(
        process.profile,
        &process.namespace,
        Arc::clone(&monitor),
        member.clone(),
        Arc::clone(&timings),
        cluster_view.clone(),
        probe.clone(),
    ));
    let brokers: Arc<dyn Connector> = Arc::new(Kafka { client: kafka.clone(), timeout: options.request_timeout });
    let workers = Workers {
        options: &options,
        kafka: &kafka,
        monitor: &monitor,
        brokers: &brokers,
        stop,
        // Each worker logs in a span naming its cluster, when there are names.
        span: match &options.name {
            Some(name) => tracing::info_span!("cluster", name = %name),
            None => tracing::Span::none(),
        },
    };
    let (new_partitions, new_partitions_rx) = mpsc::channel();
    let mut tasks = Vec::new();
    let new_share_partitions = match options.mode {
        ScrapeMode::OffsetsTopic => workers.readers(&member, new_partitions_rx, &mut tasks),
        ScrapeMode::AdminApi => {
            // Nothing to catch up with: ready once the first scrape has landed.
            monitor.start_log(Log::Offsets);
            info!("scrape_mode admin_api: groups and offsets come from ListGroups and OffsetFetch");
            None
        }
    };
    tasks.push(workers.refresher(timings, new_partitions, new_share_partitions));
    tasks.extend(workers.beside(cluster_view, probe));
    let state = AppState {
        name: options.name.as_deref().map(Arc::from),
        refresh_seconds: options.watermark_interval.as_secs() as i64,
        cluster_label: process.cluster_label.as_deref().map(Arc::from),
        brokers: Arc::from(kafka.brokers()),
        monitor,
        metrics,
        member,
        namespace: Arc::from(process.namespace.as_str()),
        traffic: kafka.traffic(),
        process: None,
    };
    (state, tasks)
}

/// What every worker of one cluster is started with.
struct Workers<'a> {
    options: &'a ServeOptions,
    kafka: &'a Client,
    monitor: &'a Arc<Monitor>,
    brokers: &'a Arc<dyn Connector>,
    stop: &'a Shutdown,
    span: tracing::Span,
}

impl Workers<'_> {
    /// A worker whose failures keep the lag from being current (`/ready` says so).
    fn spawn(&self, name: &'static str, body: Body) -> JoinHandle<()> {
        supervisor::spawn(name, Arc::clone(self.monitor), self.stop.clone(), self.span.clone(), body)
    }

    /// A worker whose failures are not the lag's: never on `/ready`.
    fn spawn_beside(&self, name: &'static str, body: Body) -> JoinHandle<()> {
        supervisor::spawn_beside(name, self.stop.clone(), self.span.clone(), body)
    }

    /// The offsets topic's reader, and the share-state topic's when share
    /// groups are read (returning where the refresher announces its new
    /// partitions).
    fn readers(
        &self,
        member: &crate::LocalMember,
        new_partitions: mpsc::Receiver<Vec<i32>>,
        tasks: &mut Vec<JoinHandle<()>>,
    ) -> Option<mpsc::Sender<Vec<i32>>> {
        let options = self.options;
        if options.share_groups {
            // Not ready until the share state is caught up with too.
            self.monitor.expect(Log::ShareState);
        }
        // Without a data directory, the shards' stores are in memory, kept
        // across the readers' lives.
        let stores = match options.data_dir.clone() {
            Some(dir) => Stores::Durable(dir),
            None => Stores::Memory(kshard_runtime::MemoryDisk::default()),
        };
        let log_topic =
            options.recovery_log_topic.clone().unwrap_or_else(|| crate::recovery_log_topic(&options.offsets_topic));
        let shards = Shards { stores, cluster: options.cluster.clone(), log_topic, member: member.clone() };
        let reader = |log: Log, topic: String, new_partitions, shards| OffsetsReader {
            kafka: self.kafka.clone(),
            log,
            topic,
            timeout: options.request_timeout,
            monitor: Arc::clone(self.monitor),
            shutdown: self.stop.clone(),
            new_partitions: Arc::new(Mutex::new(new_partitions)),
            shards,
            brokers: Arc::clone(self.brokers),
        };
        let offsets = reader(Log::Offsets, options.offsets_topic.clone(), new_partitions, shards.clone());
        tasks.push(self.spawn(WORKER, Box::new(move || Box::pin(offsets.clone().run()))));
        if !options.share_groups {
            return None;
        }
        let (tx, rx) = mpsc::channel();
        // Shards of their own, run by a second runtime member (its own keys
        // and recovery logs; not listed by HTTP's /api/shards, which shows
        // the offsets topic's).
        let share_shards = Shards {
            log_topic: crate::shards_reader::share_recovery_log_topic(&shards.log_topic),
            member: crate::LocalMember::default(),
            ..shards
        };
        let share = reader(Log::ShareState, Log::ShareState.topic().to_owned(), rx, share_shards);
        tasks.push(self.spawn(SHARE_WORKER, Box::new(move || Box::pin(share.clone().run()))));
        Some(tx)
    }

    /// The refresher: watermarks (and groups, in admin-API mode) at every interval.
    fn refresher(
        &self,
        timings: Arc<SelfTimings>,
        new_partitions: mpsc::Sender<Vec<i32>>,
        new_share_partitions: Option<mpsc::Sender<Vec<i32>>>,
    ) -> JoinHandle<()> {
        let refresher = refresher::Refresher {
            kafka: self.kafka.clone(),
            offsets_topic: self.options.offsets_topic.clone(),
            mode: self.options.mode,
            interval: self.options.watermark_interval,
            monitor: Arc::clone(self.monitor),
            timings,
            shutdown: self.stop.clone(),
            new_partitions,
            new_share_partitions,
            brokers: Arc::clone(self.brokers),
        };
        self.spawn(refresher::WORKER, Box::new(supervisor::blocking(refresher, refresher::Refresher::run)))
    }

    /// The workers beside the lag: kminion's cluster families and the
    /// end-to-end probe, when enabled.
    fn beside(
        &self,
        cluster_view: Option<Arc<crate::ClusterView>>,
        probe: Option<Arc<crate::EndToEnd>>,
    ) -> Vec<JoinHandle<()>> {
        let mut tasks = Vec::new();
        if let Some(view) = cluster_view {
            let worker = crate::cluster_info::ClusterInfoWorker {
                brokers: Arc::clone(self.brokers),
                view,
                settings: self.options.cluster_info.clone(),
                shutdown: self.stop.clone(),
            };
            let body = supervisor::blocking(worker, crate::cluster_info::ClusterInfoWorker::run);
            tasks.push(self.spawn_beside(crate::cluster_info::WORKER, Box::new(body)));
        }
        if let Some(probe) = probe {
            let worker = super::end_to_end::EndToEndWorker {
                kafka: self.kafka.clone(),
                timeout: self.options.request_timeout,
                settings: self.options.end_to_end.clone(),
                probe,
                shutdown: self.stop.clone(),
            };
            let body = supervisor::blocking(worker, super::end_to_end::EndToEndWorker::run);
            tasks.push(self.spawn_beside(super::end_to_end::WORKER, Box::new(body)));
        }
        tasks
    }
}
