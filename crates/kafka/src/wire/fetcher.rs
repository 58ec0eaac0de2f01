//! [`Fetcher`]: kshard's own reader of partitions, shared by every
//! [`crate::PartitionReader`] made from the same [`crate::Client`]: one
//! connection and one thread per broker for all the partitions read there
//! (the offsets topic's, every recovery log's, every source's), a Fetch
//! session (KIP-227) on each so that a quiet partition costs nothing per
//! request, long polls once caught up, and each answer's bytes handed to
//! the readers as they came (reference-counted, not copied; each reader
//! walks its batches, [`crate::wire::records`], in its own thread).
//!
//! Leaders come from Metadata requests on a connection of their own, asked
//! again when a broker says a leader moved, a partition has none, or a
//! broker fails; a partition read from its earliest offset, or whose offset
//! is out of range (deleted, or a log truncated), starts at the log's start
//! (ListOffsets), as librdkafka's `auto.offset.reset=earliest`. A reader
//! whose queue is over its limit is not fetched for until it has read it
//! down, and no reader is while all of them together hold the fetcher's
//! read-ahead ([`crate::wire::read_ahead`]): memory stays bounded whatever
//! the readers' speed and number.
//!
//! Every partition's end (its last stable offset, when reading committed
//! records only) is known from the answers, so each reader hears once that
//! it reached the end, with its position, even on an empty partition or one
//! ending in transaction markers.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use bytes::Bytes;
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic, ForgottenTopic};
use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::{
    ApiKey, FetchRequest, ListOffsetsRequest, ListOffsetsResponse, MetadataRequest, MetadataResponse, TopicName,
};
use kafka_protocol::protocol::StrBytes;

use crate::error::{Error, Result};
use crate::wire::broker_link::{BrokerLink, LinkSecurity};
use crate::wire::fetch_response::{PartitionData, read_fetch_response};
use crate::wire::fetch_session::{Ask, FetchSession, PartitionKey, SESSION_ERRORS, SessionRequest};
use crate::wire::read_ahead::{ANSWER_MAX_BYTES, PARTITION_MAX_BYTES, Queued, answer_room, ask_bytes};
use crate::wire::record_batch::{BatchHeader, after_whole_batches, magic};
use crate::wire::records::PartitionRecords;

/// Fetch v12: topic names, flexible, sessions; Kafka 2.7 and later.
const FETCH_VERSION: i16 = 12;
/// ListOffsets v7 (flexible); Kafka 2.8 and later, Kafka 4 too.
const LIST_OFFSETS_VERSION: i16 = 7;
/// Metadata v9, as [`crate::FetchTimes`].
const METADATA_VERSION: i16 = 9;

/// How long a broker holds a Fetch when it has nothing new: the longest a
/// partition added (or a reader that read its queue down) waits for its
/// first answer, and four requests a second per broker when all is quiet.
const LONG_POLL_MS: i32 = 250;
/// The most asked of one partition: the largest batch read. A batch is at
/// most its topic's `max.message.bytes` (1 MiB by default); kshard's own
/// recovery logs allow 16 MiB, and brokers raised for large records rarely
/// go past 100 MiB. Asked only of a partition whose next batch says it is
/// that large, and read into a buffer of its size; a batch past this can
/// never be read, and its readers hear why.
const PARTITION_MOST_BYTES: i32 = 128 * 1024 * 1024;
/// A broker that does not answer within this (beyond the long poll) is
/// taken as failed: its connection is closed and made again.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// A broker thread with no partition to read for this long ends.
const IDLE_THREAD: Duration = Duration::from_secs(10);
/// The first wait after a broker failed, doubled up to [`MOST_BACKOFF`].
const FIRST_BACKOFF: Duration = Duration::from_millis(100);
const MOST_BACKOFF: Duration = Duration::from_secs(5);
/// How long a partition the broker refused (an ACL, say) waits before it is
/// asked for again.
const REFUSED_BACKOFF: Duration = Duration::from_secs(5);

/// OFFSET_OUT_OF_RANGE.
const OFFSET_OUT_OF_RANGE: i16 = 1;
/// TOPIC_AUTHORIZATION_FAILED.
const TOPIC_AUTHORIZATION_FAILED: i16 = 29;
/// Errors that mean the leader known is not the leader (any more):
/// UNKNOWN_TOPIC_OR_PARTITION, LEADER_NOT_AVAILABLE, NOT_LEADER_OR_FOLLOWER,
/// REPLICA_NOT_AVAILABLE, KAFKA_STORAGE_ERROR, FENCED_LEADER_EPOCH,
/// UNKNOWN_LEADER_EPOCH, UNKNOWN_TOPIC_ID, OFFSET_NOT_AVAILABLE.
const LEADER_MOVED: [i16; 9] = [3, 5, 6, 9, 56, 74, 75, 100, 78];

/// Where a reader goes on in a partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Next {
    /// The log's start, to be asked for.
    Earliest,
    /// This offset.
    At(i64),
    /// The log's start, to be asked for, because this offset was out of
    /// range: below the start, it was deleted unread; otherwise the log was
    /// truncated under the reader, who is told.
    Lost(i64),
}

impl Next {
    /// Waits for the log's start.
    fn wants_start(self) -> bool {
        matches!(self, Next::Earliest | Next::Lost(_))
    }
}

/// What a reader is handed.
pub(crate) enum Delivery {
    /// A partition's records, from the reader's position on.
    Records { key: PartitionKey, records: PartitionRecords, bytes: usize },
    /// The reader reached the partition's end; it goes on at `next_offset`.
    End { key: PartitionKey, next_offset: i64 },
    /// Reading failed (refused, or a corrupt batch).
    Failed(Error),
}

/// A reader's queue: the fetcher pushes, the reader pops.
pub(crate) struct Sink {
    queue: Mutex<SinkQueue>,
    ready: Condvar,
    /// Wakes the task awaiting the reader ([`crate::PartitionReader::readable`]).
    readable: tokio::sync::Notify,
    /// Bytes queued past which the reader's partitions are not fetched for.
    limit: usize,
    /// What every reader of the fetcher holds queued (see
    /// [`crate::wire::read_ahead`]).
    queued: Arc<Queued>,
}

impl Drop for Sink {
    fn drop(&mut self) {
        // What a reader leaves unread goes with it.
        let left = self.lock().bytes;
        self.queued.remove(left);
    }
}

#[derive(Default)]
struct SinkQueue {
    items: VecDeque<Delivery>,
    bytes: usize,
}

impl Sink {
    fn lock(&self) -> MutexGuard<'_, SinkQueue> {
        self.queue.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn full(&self) -> bool {
        self.lock().bytes >= self.limit
    }

    fn empty(&self) -> bool {
        self.lock().bytes == 0
    }

    fn push(&self, delivery: Delivery) {
        let mut q = self.lock();
        if let Delivery::Records { bytes, .. } = &delivery {
            q.bytes += bytes;
            self.queued.add(*bytes);
        }
        // Failures not read yet are told once: the latest replaces the one
        // before, so a reader that is slow to poll does not pile them up. A
        // truncation is no passing failure: each is a partition whose state
        // the reader must drop, and none is replaced (one per partition at
        // most, at each truncation).
        let passing = |d: &Delivery| matches!(d, Delivery::Failed(e) if !matches!(e, Error::Truncated { .. }));
        if passing(&delivery) && q.items.back().is_some_and(passing) {
            q.items.pop_back();
        }
        q.items.push_back(delivery);
        self.ready.notify_one();
        self.readable.notify_one();
    }

    /// Resolves once a delivery may be queued (see [`crate::PartitionReader::readable`]).
    pub(crate) fn readable(&self) -> tokio::sync::futures::Notified<'_> {
        self.readable.notified()
    }
}

/// The reading of one partition by one reader.
struct Reading {
    reader: u64,
    sink: Arc<Sink>,
    next: Next,
    /// Told it reached the end since its last records.
    told_end: bool,
}

/// A partition some reader reads.
struct Partition {
    readings: Vec<Reading>,
    /// Its leader's broker id, when known.
    leader: Option<i32>,
    /// Its end as the last answer said (the last stable offset when reading
    /// committed records only).
    end: Option<i64>,
    /// Its high watermark as the last answer said: a reader past it is out
    /// of range.
    high_watermark: Option<i64>,
    /// What to ask of it.
    max_bytes: i32,
    /// The largest batch met that a reader's queue limit cut short: asked
    /// for whole from then on (see [`ask_bytes`]).
    least: i32,
    /// Not asked for before this (the broker refused it).
    not_before: Option<Instant>,
}

/// What the fetcher's threads share.
struct Shared {
    security: LinkSecurity,
    bootstrap: Vec<String>,
    /// Read only committed records (`isolation.level=read_committed`).
    committed_only: bool,
    state: Mutex<State>,
    /// Rung when something a thread waits for may have changed.
    changed: Condvar,
    stop: AtomicBool,
    /// Connections open now (fetch and metadata).
    connections: AtomicUsize,
    next_reader: AtomicU64,
    /// What the readers hold queued, together.
    queued: Arc<Queued>,
}

#[derive(Default)]
struct State {
    partitions: HashMap<PartitionKey, Partition>,
    brokers: HashMap<i32, Arc<str>>,
    /// Brokers with a thread of their own.
    threads: HashSet<i32>,
    /// Leaders are to be asked for again.
    metadata_due: bool,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// kshard's own reader: see the module's doc.
pub(crate) struct Fetcher {
    shared: Arc<Shared>,
}

impl Drop for Fetcher {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Release);
        self.shared.changed.notify_all();
    }
}

impl Fetcher {
    /// What the fetcher reads.
    pub(crate) fn isolation(&self) -> crate::read_record::Isolation {
        if self.shared.committed_only {
            crate::read_record::Isolation::Committed
        } else {
            crate::read_record::Isolation::Uncommitted
        }
    }

    /// A fetcher for `bootstrap` (`host:port`, comma-separated) over
    /// `security`. Its metadata thread starts now; broker threads start as
    /// partitions are read on them.
    pub(crate) fn new(bootstrap: &str, security: LinkSecurity, committed_only: bool) -> Result<Arc<Fetcher>> {
        let shared = Arc::new(Shared {
            security,
            bootstrap: crate::wire::broker_link::bootstrap_addresses(bootstrap),
            committed_only,
            state: Mutex::new(State::default()),
            changed: Condvar::new(),
            stop: AtomicBool::new(false),
            connections: AtomicUsize::new(0),
            next_reader: AtomicU64::new(1),
            queued: Arc::new(Queued::default()),
        });
        spawn_metadata_thread(&shared).map_err(|e| Error::Refused {
            step: "starting the reader's metadata thread".into(),
            message: e.to_string(),
        })?;
        Ok(Arc::new(Fetcher { shared }))
    }

    /// A new reader's id and queue of `limit` bytes.
    pub(crate) fn sink(&self, limit: usize) -> (u64, Arc<Sink>) {
        let id = self.shared.next_reader.fetch_add(1, Ordering::Relaxed);
        let sink = Sink {
            queue: Mutex::new(SinkQueue::default()),
            ready: Condvar::new(),
            readable: tokio::sync::Notify::new(),
            limit,
            queued: Arc::clone(&self.shared.queued),
        };
        (id, Arc::new(sink))
    }

    /// Reads `partitions` of `topic` for `reader`, each from its offset
    /// (`None`: the earliest); a partition it reads already starts over there.
    pub(crate) fn add(&self, reader: u64, sink: &Arc<Sink>, topic: &str, partitions: &[(i32, Option<i64>)]) {
        let topic: Arc<str> = Arc::from(topic);
        let mut state = self.shared.lock();
        for &(partition, offset) in partitions {
            let key = (Arc::clone(&topic), partition);
            let p = state.partitions.entry(key).or_insert_with(|| Partition {
                readings: Vec::new(),
                leader: None,
                end: None,
                high_watermark: None,
                max_bytes: PARTITION_MAX_BYTES,
                least: 0,
                not_before: None,
            });
            p.readings.retain(|r| r.reader != reader);
            let next = offset.map_or(Next::Earliest, Next::At);
            p.readings.push(Reading { reader, sink: Arc::clone(sink), next, told_end: false });
            if p.leader.is_none() {
                state.metadata_due = true;
            }
        }
        drop(state);
        self.shared.changed.notify_all();
    }

    /// Stops reading for `reader`.
    pub(crate) fn remove(&self, reader: u64) {
        let mut state = self.shared.lock();
        state.partitions.retain(|_, p| {
            p.readings.retain(|r| r.reader != reader);
            !p.readings.is_empty()
        });
    }

    /// Waits up to `timeout` for `sink`'s next delivery. A reader that read
    /// its queue down below its limit is fetched for again.
    pub(crate) fn next_delivery(&self, sink: &Sink, timeout: Duration) -> Option<Delivery> {
        // The clock is read only when there is nothing to hand out: a read a
        // record was a measurable share of catching up.
        let mut deadline = None;
        let mut q = sink.lock();
        loop {
            if let Some(d) = q.items.pop_front() {
                let was_full = q.bytes >= sink.limit;
                let mut room_made = false;
                if let Delivery::Records { bytes, .. } = &d {
                    q.bytes -= bytes;
                    room_made = sink.queued.remove(*bytes);
                }
                if (was_full && q.bytes < sink.limit) || room_made {
                    drop(q);
                    self.shared.changed.notify_all();
                }
                return Some(d);
            }
            let now = Instant::now();
            let left = deadline.get_or_insert(now + timeout).saturating_duration_since(now);
            if left.is_zero() {
                return None;
            }
            q = sink.ready.wait_timeout(q, left).unwrap_or_else(PoisonError::into_inner).0;
        }
    }

    /// Where `topic`/`partition` ends, as the last answer that named it said
    /// (its last stable offset when reading committed records only), while
    /// some reader reads it.
    pub(crate) fn known_end(&self, topic: &str, partition: i32) -> Option<i64> {
        let key: PartitionKey = (Arc::from(topic), partition);
        self.shared.lock().partitions.get(&key).and_then(|p| p.end)
    }

    /// Connections open now: one per broker read from, and one for metadata.
    pub(crate) fn connections(&self) -> usize {
        self.shared.connections.load(Ordering::Relaxed)
    }
}

/// True when every reading of the partitions `keys` is by one reader.
fn one_reader<'k>(state: &State, keys: impl Iterator<Item = &'k PartitionKey>) -> bool {
    let mut readers =
        keys.filter_map(|key| state.partitions.get(key)).flat_map(|p| p.readings.iter().map(|r| r.reader));
    let Some(first) = readers.next() else { return true };
    readers.all(|r| r == first)
}

/// A connection that counts itself in [`Shared::connections`].
struct Counted<'a> {
    link: BrokerLink,
    shared: &'a Shared,
}

impl Drop for Counted<'_> {
    fn drop(&mut self) {
        self.shared.connections.fetch_sub(1, Ordering::Relaxed);
    }
}

fn connect<'a>(shared: &'a Shared, address: &str) -> Result<Counted<'a>> {
    let link = BrokerLink::connect(address, &shared.security, REQUEST_TIMEOUT.min(Duration::from_secs(10)))?;
    shared.connections.fetch_add(1, Ordering::Relaxed);
    Ok(Counted { link, shared })
}

fn spawn_metadata_thread(shared: &Arc<Shared>) -> std::io::Result<()> {
    let for_thread = Arc::clone(shared);
    std::thread::Builder::new().name("kshard-metadata".into()).spawn(move || metadata_thread(&for_thread))?;
    Ok(())
}

/// Starts the metadata thread again if it ends by a panic (a bug: nothing
/// a broker sends should make one), so that leaders are still looked up.
struct MetadataSupervisor<'a>(&'a Arc<Shared>);

impl Drop for MetadataSupervisor<'_> {
    fn drop(&mut self) {
        if !std::thread::panicking() || self.0.stop.load(Ordering::Acquire) {
            return;
        }
        tracing::error!("the reader's metadata thread panicked; starting another in a second");
        // Not at once: a panic that repeats on the same answer must not spin.
        std::thread::sleep(Duration::from_secs(1));
        self.0.lock().metadata_due = true;
        if let Err(e) = spawn_metadata_thread(self.0) {
            tracing::error!(error = %e, "starting the reader's metadata thread again");
        }
    }
}

/// A broker's place in [`State::threads`] when its fetch thread panics (a
/// bug: nothing a broker sends should make one): given up, its partitions
/// handed back for the metadata thread to start another, and their readers
/// told why.
struct BrokerThreadSlot<'a> {
    shared: &'a Arc<Shared>,
    broker: i32,
}

impl Drop for BrokerThreadSlot<'_> {
    fn drop(&mut self) {
        // A thread that ends by itself gives its place up under the lock as
        // it decides to end: done here too, a new thread started since for
        // the same broker would lose its place, and a third would start.
        if !std::thread::panicking() {
            return;
        }
        let broker = self.broker;
        let mut state = self.shared.lock();
        state.threads.remove(&broker);
        tracing::error!(broker, "a fetch thread panicked; its partitions go to a new one");
        for (key, p) in state.partitions.iter_mut().filter(|(_, p)| p.leader == Some(broker)) {
            p.leader = None;
            for r in &p.readings {
                r.sink.push(Delivery::Failed(Error::Refused {
                    step: format!("reading {}/{}", key.0, key.1),
                    message: format!("the fetch thread of broker {broker} stopped; another takes over"),
                }));
            }
        }
        state.metadata_due = true;
        drop(state);
        self.shared.changed.notify_all();
    }
}

/// Asks for leaders when they are due (a partition without one, or a sign
/// that they moved), and starts a thread for each broker that leads a
/// partition read.
fn metadata_thread(shared: &Arc<Shared>) {
    let _supervisor = MetadataSupervisor(shared);
    let mut link: Option<Counted<'_>> = None;
    let mut backoff = FIRST_BACKOFF;
    while !shared.stop.load(Ordering::Acquire) {
        let topics: Vec<Arc<str>> = {
            let mut state = shared.lock();
            while !state.metadata_due && !shared.stop.load(Ordering::Acquire) {
                state = shared
                    .changed
                    .wait_timeout(state, Duration::from_secs(1))
                    .unwrap_or_else(PoisonError::into_inner)
                    .0;
                state.metadata_due |= state.partitions.values().any(|p| p.leader.is_none());
            }
            state.metadata_due = false;
            let topics: HashSet<Arc<str>> = state.partitions.keys().map(|(t, _)| Arc::clone(t)).collect();
            topics.into_iter().collect()
        };
        if topics.is_empty() || shared.stop.load(Ordering::Acquire) {
            continue;
        }
        match metadata(shared, &mut link, &topics) {
            Ok(answer) => {
                backoff = FIRST_BACKOFF;
                apply_metadata(shared, &answer);
            }
            Err(e) => {
                tracing::warn!(error = %e, "reading the cluster's metadata; retrying");
                link = None;
                shared.lock().metadata_due = true;
                std::thread::sleep(backoff);
                backoff = (backoff * 2).min(MOST_BACKOFF);
                continue;
            }
        }
        // A partition still without a leader (a topic not there yet, a
        // leader being elected): ask again, not at once.
        if shared.lock().partitions.values().any(|p| p.leader.is_none()) {
            std::thread::sleep(backoff);
            backoff = (backoff * 2).min(Duration::from_secs(1));
        }
    }
}

/// The metadata of `topics`, on the kept connection or a new one to a
/// known broker or a bootstrap one.
fn metadata<'a>(shared: &'a Shared, link: &mut Option<Counted<'a>>, topics: &[Arc<str>]) -> Result<MetadataResponse> {
    let request = MetadataRequest::default()
        .with_topics(Some(
            topics
                .iter()
                .map(|t| {
                    MetadataRequestTopic::default().with_name(Some(TopicName(StrBytes::from_string(t.to_string()))))
                })
                .collect(),
        ))
        .with_allow_auto_topic_creation(false);
    if let Some(open) = link.as_mut() {
        match open.link.call(&request, METADATA_VERSION, REQUEST_TIMEOUT) {
            Ok(answer) => return Ok(answer),
            Err(_) => *link = None,
        }
    }
    let known: Vec<String> = shared.lock().brokers.values().map(|a| a.to_string()).collect();
    let mut failed = None;
    for address in known.iter().chain(&shared.bootstrap) {
        match connect(shared, address) {
            Ok(mut open) => match open.link.call(&request, METADATA_VERSION, REQUEST_TIMEOUT) {
                Ok(answer) => {
                    *link = Some(open);
                    return Ok(answer);
                }
                Err(e) => failed = Some(e),
            },
            Err(e) => failed = Some(e),
        }
    }
    Err(failed
        .unwrap_or_else(|| Error::Refused { step: "reading metadata".into(), message: "no bootstrap broker".into() }))
}

fn apply_metadata(shared: &Arc<Shared>, answer: &MetadataResponse) {
    let mut state = shared.lock();
    for b in &answer.brokers {
        state.brokers.insert(b.node_id.0, Arc::from(crate::wire::broker_link::broker_address(b.host.as_str(), b.port)));
    }
    let mut leaders = HashMap::new();
    for topic in &answer.topics {
        let Some(name) = topic.name.as_ref() else { continue };
        if topic.error_code == TOPIC_AUTHORIZATION_FAILED {
            // No Describe: tell the readers (every 5 s), as a Fetch refused would.
            let now = Instant::now();
            for (key, p) in state.partitions.iter_mut().filter(|(k, _)| *k.0 == *name.0.as_str()) {
                if p.not_before.is_none_or(|t| now >= t) {
                    moved_or_refused(p, key, topic.error_code);
                }
            }
            continue;
        }
        if topic.error_code != 0 {
            tracing::debug!(topic = name.0.as_str(), error_code = topic.error_code, "no metadata for the topic yet");
            continue;
        }
        for p in &topic.partitions {
            if p.error_code == 0 && p.leader_id.0 >= 0 {
                leaders.insert((name.0.as_str(), p.partition_index), p.leader_id.0);
            }
        }
    }
    let mut wanted = HashSet::new();
    for ((topic, partition), p) in state.partitions.iter_mut() {
        p.leader = leaders.get(&(&**topic, *partition)).copied();
        if let Some(leader) = p.leader {
            wanted.insert(leader);
        }
    }
    for broker in wanted {
        if state.threads.contains(&broker) || !state.brokers.contains_key(&broker) {
            continue;
        }
        let for_thread = Arc::clone(shared);
        let spawned = std::thread::Builder::new()
            .name(format!("kshard-fetch-{broker}"))
            .spawn(move || broker_thread(&for_thread, broker));
        match spawned {
            Ok(_) => {
                state.threads.insert(broker);
            }
            Err(e) => tracing::error!(broker, error = %e, "starting a fetch thread"),
        }
    }
    // A leader no thread reads from (not among the brokers listed, or its
    // thread would not start) is no leader: ask again.
    let State { partitions, threads, .. } = &mut *state;
    for p in partitions.values_mut() {
        if p.leader.is_some_and(|l| !threads.contains(&l)) {
            p.leader = None;
        }
    }
    drop(state);
    shared.changed.notify_all();
}

/// What a broker thread asks for in one request.
struct Plan {
    wanted: BTreeMap<PartitionKey, Ask>,
    earliest: Vec<PartitionKey>,
    /// The most the answer may carry.
    answer_bytes: i32,
}

/// Fetches the partitions `broker` leads until none is left for a while, or
/// the fetcher stops.
fn broker_thread(shared: &Arc<Shared>, broker: i32) {
    let _slot = BrokerThreadSlot { shared, broker };
    let mut link: Option<Counted<'_>> = None;
    let mut session = FetchSession::default();
    let mut backoff = FIRST_BACKOFF;
    let mut idle_since = Instant::now();
    loop {
        let (next, address) = {
            let mut state = shared.lock();
            let next = loop {
                if shared.stop.load(Ordering::Acquire) {
                    state.threads.remove(&broker);
                    return;
                }
                tell_ends(&mut state, broker);
                let next = plan(&state, broker, answer_room(shared.queued.get()));
                if !next.wanted.is_empty() || !next.earliest.is_empty() {
                    idle_since = Instant::now();
                    break next;
                }
                // Partitions it leads whose readers' queues are full keep it.
                if state.partitions.values().any(|p| p.leader == Some(broker)) {
                    idle_since = Instant::now();
                } else if idle_since.elapsed() >= IDLE_THREAD {
                    state.threads.remove(&broker);
                    return;
                }
                state = shared
                    .changed
                    .wait_timeout(state, Duration::from_millis(200))
                    .unwrap_or_else(PoisonError::into_inner)
                    .0;
            };
            let Some(address) = state.brokers.get(&broker).cloned() else {
                state.threads.remove(&broker);
                return;
            };
            (next, address)
        };
        let result = (|| -> Result<()> {
            if link.is_none() || link.as_ref().is_some_and(|l| l.link.expired()) {
                link = None;
                session.reset();
                link = Some(connect(shared, &address)?);
            }
            let Some(open) = link.as_mut() else { return Ok(()) };
            if !next.earliest.is_empty() {
                earliest(shared, &mut open.link, &next.earliest)?;
            }
            if !next.wanted.is_empty() {
                fetch(shared, &mut open.link, &mut session, next.wanted, next.answer_bytes)?;
            }
            Ok(())
        })();
        match result {
            Ok(()) => backoff = FIRST_BACKOFF,
            Err(e) => {
                tracing::warn!(broker, address = %address, error = %e, "reading from a broker; connecting again");
                link = None;
                session.reset();
                // Its partitions may have moved (a broker restarting). Their
                // readers are not told: a runtime replica ends on a read
                // error, and a broker restarting is no reason for that. A
                // reader frozen this way shows as a stalled partition on
                // /ready (kshard-lag's `stalls`).
                let mut state = shared.lock();
                for p in state.partitions.values_mut().filter(|p| p.leader == Some(broker)) {
                    p.leader = None;
                }
                state.metadata_due = true;
                drop(state);
                shared.changed.notify_all();
                std::thread::sleep(backoff);
                backoff = (backoff * 2).min(MOST_BACKOFF);
            }
        }
    }
}

/// Tells each reader of a partition `broker` leads that it reached the
/// partition's end, once, when it has.
fn tell_ends(state: &mut State, broker: i32) {
    for (key, p) in state.partitions.iter_mut().filter(|(_, p)| p.leader == Some(broker)) {
        let Some(end) = p.end else { continue };
        let high_watermark = p.high_watermark.unwrap_or(end);
        for r in &mut p.readings {
            // Past the high watermark is out of range, not the end: the
            // broker says so when asked there (see `plan`).
            if let Next::At(next) = r.next
                && next >= end
                && next <= high_watermark
                && !r.told_end
            {
                r.told_end = true;
                r.sink.push(Delivery::End { key: key.clone(), next_offset: next });
            }
        }
    }
}

/// What to ask `broker` for: each partition it leads at the lowest
/// position of its readers whose queues have room (when the read-ahead has
/// no `room` for an answer, of its readers that hold nothing: see
/// [`ask_bytes`]), and the partitions whose start is to be asked for.
fn plan(state: &State, broker: i32, room: Option<i32>) -> Plan {
    let now = Instant::now();
    let answer_bytes = room.unwrap_or(ANSWER_MAX_BYTES);
    let mut plan = Plan { wanted: BTreeMap::new(), earliest: Vec::new(), answer_bytes };
    for (key, p) in state.partitions.iter().filter(|(_, p)| p.leader == Some(broker)) {
        if p.not_before.is_some_and(|t| now < t) {
            continue;
        }
        if p.readings.iter().any(|r| r.next.wants_start()) {
            plan.earliest.push(key.clone());
            continue;
        }
        let fetched_for = |r: &&Reading| if room.is_some() { !r.sink.full() } else { r.sink.empty() };
        let empty_limit = p.readings.iter().filter(|r| r.sink.empty()).map(|r| r.sink.limit).min();
        let Some(max_bytes) = ask_bytes(p.max_bytes, p.least, room.is_some(), empty_limit) else { continue };
        let positions = p.readings.iter().filter(fetched_for).filter_map(|r| match r.next {
            Next::At(o) => Some(o),
            Next::Earliest | Next::Lost(_) => None,
        });
        // The lowest position, unless a reader is past the high watermark
        // last heard: then its own, for the broker to say whether it is out
        // of range (a topic created again, a log truncated).
        let past = |o: &i64| p.high_watermark.is_some_and(|hw| *o > hw);
        let ahead = positions.clone().filter(past).min();
        if let Some(offset) = ahead.or_else(|| positions.min()) {
            plan.wanted.insert(key.clone(), Ask { offset, max_bytes });
        }
    }
    plan
}

/// Sets the readers at `Earliest` of `partitions` to each log's start.
fn earliest(shared: &Shared, link: &mut BrokerLink, partitions: &[PartitionKey]) -> Result<()> {
    let mut topics: BTreeMap<&str, Vec<ListOffsetsPartition>> = BTreeMap::new();
    for (topic, partition) in partitions {
        topics.entry(topic).or_default().push(
            ListOffsetsPartition::default()
                .with_partition_index(*partition)
                .with_current_leader_epoch(-1)
                .with_timestamp(-2),
        );
    }
    let request = ListOffsetsRequest::default()
        .with_replica_id((-1).into())
        .with_isolation_level(i8::from(shared.committed_only))
        .with_topics(
            topics
                .into_iter()
                .map(|(t, ps)| {
                    ListOffsetsTopic::default()
                        .with_name(TopicName(StrBytes::from_string(t.to_owned())))
                        .with_partitions(ps)
                })
                .collect(),
        );
    let answer: ListOffsetsResponse = link.call(&request, LIST_OFFSETS_VERSION, REQUEST_TIMEOUT)?;
    let mut state = shared.lock();
    for topic in &answer.topics {
        for a in &topic.partitions {
            let key: PartitionKey = (Arc::from(topic.name.0.as_str()), a.partition_index);
            let Some(p) = state.partitions.get_mut(&key) else { continue };
            if a.error_code != 0 {
                moved_or_refused(p, &key, a.error_code);
                state.metadata_due |= LEADER_MOVED.contains(&a.error_code);
                continue;
            }
            for r in p.readings.iter_mut().filter(|r| r.next.wants_start()) {
                if let Next::Lost(offset) = r.next {
                    lost(&key, r, offset, a.offset);
                }
                r.next = Next::At(a.offset);
            }
        }
    }
    drop(state);
    shared.changed.notify_all();
    Ok(())
}

/// A partition error other than an offset out of range: the leader moved
/// (ask for leaders again), the broker refused (tell the readers, wait), or
/// anything else (wait).
fn moved_or_refused(p: &mut Partition, key: &PartitionKey, error_code: i16) {
    if LEADER_MOVED.contains(&error_code) {
        p.leader = None;
        return;
    }
    p.not_before = Some(Instant::now() + REFUSED_BACKOFF);
    tracing::warn!(topic = &*key.0, partition = key.1, error_code, "the broker refused a Fetch; asking again in 5 s");
    for r in &p.readings {
        let step = format!("reading {}/{}", key.0, key.1);
        r.sink.push(Delivery::Failed(Error::Kafka { step, code: error_code }));
    }
}

/// One Fetch in `session`, its answer handed to the readers.
fn fetch(
    shared: &Shared,
    link: &mut BrokerLink,
    session: &mut FetchSession,
    wanted: BTreeMap<PartitionKey, Ask>,
    answer_bytes: i32,
) -> Result<()> {
    let sent = session.request(&wanted);
    let request = fetch_request(&sent, shared.committed_only, answer_bytes);
    let timeout = REQUEST_TIMEOUT + Duration::from_millis(LONG_POLL_MS as u64);
    let frame = Bytes::from(link.send(ApiKey::Fetch, &request, FETCH_VERSION, timeout)?);
    let answer = read_fetch_response(&frame)
        .map_err(|e| Error::Refused { step: "reading a Fetch answer".into(), message: e.to_string() })?;
    if answer.error_code != 0 {
        let error_code = answer.error_code;
        session.answered(&sent, wanted, error_code, answer.session_id);
        if SESSION_ERRORS.contains(&error_code) {
            tracing::debug!(error_code, "the fetch session ended; starting a new one");
            return Ok(());
        }
        return Err(Error::Kafka { step: "a Fetch".into(), code: error_code });
    }
    let asked: HashMap<PartitionKey, Ask> = wanted.iter().map(|(k, a)| (k.clone(), *a)).collect();
    session.answered(&sent, wanted, 0, answer.session_id);
    hand_out(shared, &frame, answer.partitions, &asked);
    Ok(())
}

/// The Fetch request for what `sent` asks for and forgets, in its session,
/// its answer carrying up to `answer_bytes` (and at least a partition's
/// first batch, whatever its size).
fn fetch_request(sent: &SessionRequest, committed_only: bool, answer_bytes: i32) -> FetchRequest {
    let mut topics: BTreeMap<&str, Vec<FetchPartition>> = BTreeMap::new();
    for ((topic, partition), ask) in &sent.asks {
        topics.entry(topic).or_default().push(
            FetchPartition::default()
                .with_partition(*partition)
                .with_fetch_offset(ask.offset)
                .with_partition_max_bytes(ask.max_bytes)
                .with_current_leader_epoch(-1)
                .with_log_start_offset(-1),
        );
    }
    let mut forgotten: BTreeMap<&str, Vec<i32>> = BTreeMap::new();
    for (topic, partition) in &sent.forgotten {
        forgotten.entry(topic).or_default().push(*partition);
    }
    let name = |t: &str| TopicName(StrBytes::from_string(t.to_owned()));
    FetchRequest::default()
        .with_replica_id((-1).into())
        .with_max_wait_ms(LONG_POLL_MS)
        .with_min_bytes(1)
        .with_max_bytes(answer_bytes)
        .with_isolation_level(i8::from(committed_only))
        .with_session_id(sent.session_id)
        .with_session_epoch(sent.epoch)
        .with_topics(
            topics.into_iter().map(|(t, ps)| FetchTopic::default().with_topic(name(t)).with_partitions(ps)).collect(),
        )
        .with_forgotten_topics_data(
            forgotten
                .into_iter()
                .map(|(t, ps)| ForgottenTopic::default().with_topic(name(t)).with_partitions(ps))
                .collect(),
        )
}

/// Hands each partition of an answer (read from `frame`) to its readers, as
/// far as it was `asked` for; asks for leaders again when one moved.
fn hand_out(shared: &Shared, frame: &Bytes, partitions: Vec<PartitionData<'_>>, asked: &HashMap<PartitionKey, Ask>) {
    let mut state = shared.lock();
    let mut moved = false;
    // Records are handed out in the answer's buffer, which lives as long as
    // any of them is unread. One reader of every partition (the lag monitor's)
    // walks an answer through and frees it; when several read it (a runtime
    // member's replicas, a partition each), the slowest would hold the whole
    // answer (up to 4 MiB) for its own few records: each then gets a copy of
    // its records (a cold start of 50 shards peaked at 83 MB instead of 102).
    let parts: Vec<(PartitionKey, _)> =
        partitions.into_iter().map(|part| ((Arc::from(part.topic), part.partition), part)).collect();
    let in_place = one_reader(&state, parts.iter().filter(|(_, part)| !part.records.is_empty()).map(|(key, _)| key));
    let share = |records: &[u8]| if in_place { frame.slice_ref(records) } else { Bytes::copy_from_slice(records) };
    for (key, part) in parts {
        let Some(ask) = asked.get(&key) else { continue };
        let Some(p) = state.partitions.get_mut(&key) else { continue };
        match part.error_code {
            0 => deliver(p, &key, &part, ask, shared.committed_only, share),
            OFFSET_OUT_OF_RANGE => out_of_range(p, &key, ask.offset),
            code => {
                moved |= LEADER_MOVED.contains(&code);
                moved_or_refused(p, &key, code);
            }
        }
    }
    state.metadata_due |= moved;
    drop(state);
    if moved {
        shared.changed.notify_all();
    }
}

/// OFFSET_OUT_OF_RANGE for the readers at `offset`: they read on from the
/// log's start, once it is known (see [`lost`]). The answer does not say
/// which end the offset is out of (the broker sends -1 for both).
fn out_of_range(p: &mut Partition, key: &PartitionKey, offset: i64) {
    tracing::debug!(topic = &*key.0, partition = key.1, offset, "offset out of range; asking for the log's start");
    for r in p.readings.iter_mut().filter(|r| r.next == Next::At(offset)) {
        r.next = Next::Lost(offset);
        r.told_end = false;
    }
}

/// A reader's position `offset` was out of range and the log now starts at
/// `start`. Below it, retention deleted records the reader had not read yet:
/// what it built is as good as it was. At or past it, the offset was past the
/// log's end: the log was truncated (an unclean leader election) or the
/// topic made again, and the reader hears it, to drop what it built from
/// records the log no longer has.
fn lost(key: &PartitionKey, r: &Reading, offset: i64, start: i64) {
    if offset < start {
        tracing::warn!(
            topic = &*key.0,
            partition = key.1,
            offset,
            log_start = start,
            "records deleted before they were read: reading on from the log's start"
        );
        return;
    }
    tracing::warn!(
        topic = &*key.0,
        partition = key.1,
        offset,
        log_start = start,
        "offset past the log's end (truncated, or the topic made again): reading again from its start"
    );
    r.sink.push(Delivery::Failed(Error::Truncated {
        topic: key.0.to_string(),
        partition: key.1,
        offset,
        log_start: start,
    }));
}

/// A partition's answer without an error: its end and high watermark noted,
/// and its whole batches (`share`d out of the answer) handed to each reader
/// waiting at an offset they hold; none whole, the batch size asked for
/// grows or the readers hear why.
fn deliver(
    p: &mut Partition,
    key: &PartitionKey,
    part: &PartitionData<'_>,
    ask: &Ask,
    committed_only: bool,
    share: impl Fn(&[u8]) -> Bytes,
) {
    let end =
        if committed_only && part.last_stable_offset >= 0 { part.last_stable_offset } else { part.high_watermark };
    if end >= 0 {
        p.end = Some(end);
    }
    if part.high_watermark >= 0 {
        p.high_watermark = Some(part.high_watermark);
    }
    let Some(after) = after_whole_batches(part.records).filter(|&a| a > ask.offset) else {
        if !part.records.is_empty() {
            no_whole_batch(p, key, part.records, ask);
        }
        return;
    };
    p.max_bytes = PARTITION_MAX_BYTES.max(p.max_bytes / 2);
    let records = share(part.records);
    for r in p.readings.iter_mut() {
        let Next::At(next) = r.next else { continue };
        if next < ask.offset || next >= after {
            continue;
        }
        r.sink.push(Delivery::Records {
            key: key.clone(),
            records: PartitionRecords::new(records.clone(), next, committed_only, part.aborted.clone()),
            bytes: records.len(),
        });
        r.next = Next::At(after);
        r.told_end = false;
    }
}

/// Records fetched from `offset` but no whole batch past it: a batch larger
/// than asked for is asked for whole next time; one that is not v2, does not
/// add up or is larger than the most asked is refused, and the readers hear
/// why (every 5 s).
fn no_whole_batch(p: &mut Partition, key: &PartitionKey, records: &[u8], ask: &Ask) {
    let offset = ask.offset;
    let header = BatchHeader::parse(records);
    // Cut short by a reader's queue limit (see `plan`), not by what the
    // partition is asked for: asked for whole from now on.
    if let Some(h) = &header
        && ask.max_bytes < p.max_bytes
        && h.size > ask.max_bytes
        && h.size <= p.max_bytes
    {
        p.least = p.least.max(h.size);
        return;
    }
    if let Some(max_bytes) = header.as_ref().and_then(|h| larger_ask(p.max_bytes, h.size)) {
        p.max_bytes = max_bytes;
        return;
    }
    let why = match (header, magic(records)) {
        (Some(h), _) => format!("a record batch of {} bytes at offset {offset}", h.size),
        (None, Some(magic)) if magic != 2 => {
            format!("message format v{magic} at offset {offset} (kshard's reader reads v2; set reader: librdkafka)")
        }
        (None, _) => format!("a record batch header that does not add up at offset {offset}"),
    };
    p.not_before = Some(Instant::now() + REFUSED_BACKOFF);
    for r in &p.readings {
        r.sink.push(Delivery::Failed(Error::Refused {
            step: format!("reading {}/{}", key.0, key.1),
            message: why.clone(),
        }));
    }
}

/// What to ask of a partition next when a batch of `batch` bytes did not
/// fit in `asked`: at least twice as much (fewer rounds for a run of large
/// batches), at least the batch, at most [`PARTITION_MOST_BYTES`]; `None`
/// when no more can be asked, or more would not help.
fn larger_ask(asked: i32, batch: i32) -> Option<i32> {
    (asked < PARTITION_MOST_BYTES && batch > asked)
        .then(|| batch.max(asked.saturating_mul(2)).min(PARTITION_MOST_BYTES))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_larger_batch_is_asked_for_whole_up_to_the_most() {
        assert_eq!(larger_ask(PARTITION_MAX_BYTES, 3 << 20), Some(3 << 20));
        assert_eq!(larger_ask(PARTITION_MAX_BYTES, PARTITION_MAX_BYTES + 1), Some(2 * PARTITION_MAX_BYTES));
        // Asked for 100 MiB, a 101 MiB batch: twice 100 MiB is past the
        // most (the bounds of a clamp crossed here, and the thread panicked).
        assert_eq!(larger_ask(5 << 20, 6 << 20), Some(10 << 20));
        assert_eq!(larger_ask(100 << 20, 101 << 20), Some(PARTITION_MOST_BYTES));
        assert_eq!(larger_ask(5 << 20, 200 << 20), Some(PARTITION_MOST_BYTES));
        assert_eq!(larger_ask(PARTITION_MOST_BYTES, 200 << 20), None, "nothing more to ask");
        assert_eq!(larger_ask(2 << 20, 1 << 20), None, "it fitted: something else is wrong");
        assert_eq!(larger_ask(i32::MAX - 1, i32::MAX), None);
    }

    /// A partition led by broker 1, read by `reading` from offset 0.
    fn partition(reading: (u64, Arc<Sink>)) -> Partition {
        Partition {
            readings: vec![Reading { reader: reading.0, sink: reading.1, next: Next::At(0), told_end: false }],
            leader: Some(1),
            end: None,
            high_watermark: None,
            max_bytes: PARTITION_MAX_BYTES,
            least: 0,
            not_before: None,
        }
    }

    /// A v2 batch header at offset 0 that says the batch is `size` bytes.
    fn header_of(size: i32) -> Vec<u8> {
        let mut h = Vec::new();
        h.extend_from_slice(&0i64.to_be_bytes());
        h.extend_from_slice(&(size - 12).to_be_bytes());
        h.extend_from_slice(&0i32.to_be_bytes());
        h.push(2);
        h.extend_from_slice(&[0; 4 + 2 + 4 + 8 + 8 + 8 + 6]);
        h.extend_from_slice(&1i32.to_be_bytes());
        h
    }

    fn records(bytes: usize) -> Delivery {
        let key: PartitionKey = (Arc::from("t"), 9);
        Delivery::Records { key, records: PartitionRecords::new(Bytes::new(), 0, false, Vec::new()), bytes }
    }

    #[test]
    fn past_the_read_ahead_only_readers_that_hold_nothing_are_fetched_for_up_to_their_limit() {
        let settings = crate::ClientSettings::new("127.0.0.1:1");
        let security = LinkSecurity::from_settings(&settings, Default::default()).expect("reads").expect("plain");
        let fetcher = Fetcher::new("127.0.0.1:1", security, false).expect("a fetcher");
        let (waiting, holding) = (fetcher.sink(256 << 10), fetcher.sink(256 << 10));
        holding.1.push(records(100));
        let (a, b): (PartitionKey, PartitionKey) = ((Arc::from("t"), 0), (Arc::from("t"), 1));
        let mut state = State::default();
        state.partitions.insert(a.clone(), partition(waiting.clone()));
        state.partitions.insert(b.clone(), partition(holding.clone()));
        // With room, both, as asked; the answer up to the room.
        let with_room = plan(&state, 1, answer_room(holding.1.queued.get()));
        assert_eq!(with_room.wanted.keys().collect::<Vec<_>>(), [&a, &b]);
        assert_eq!(with_room.wanted[&a].max_bytes, PARTITION_MAX_BYTES);
        assert_eq!(with_room.answer_bytes, ANSWER_MAX_BYTES);
        // Without (other readers hold the budget): only the reader that
        // holds nothing, for no more than its queue's limit.
        let other = fetcher.sink(1 << 30);
        other.1.push(records(crate::wire::read_ahead::READ_AHEAD_BYTES));
        let room = answer_room(fetcher.shared.queued.get());
        assert_eq!(room, None);
        let without = plan(&state, 1, room);
        assert_eq!(without.wanted.keys().collect::<Vec<_>>(), [&a]);
        assert_eq!(without.wanted[&a].max_bytes, 256 << 10);
        // A batch of 300 KiB that limit cut short: asked for whole from then on.
        let p = state.partitions.get_mut(&a).expect("the partition");
        no_whole_batch(p, &a, &header_of(300 << 10), &without.wanted[&a]);
        assert!(p.not_before.is_none(), "not refused");
        assert_eq!(p.max_bytes, PARTITION_MAX_BYTES);
        assert_eq!(plan(&state, 1, room).wanted[&a].max_bytes, 300 << 10);
        // Read down, room again.
        assert!(fetcher.next_delivery(&other.1, Duration::ZERO).is_some());
        assert_eq!(fetcher.shared.queued.get(), 100);
        drop((holding, state));
        assert_eq!(fetcher.shared.queued.get(), 0, "what a dropped reader held goes with it");
    }

    #[test]
    fn every_truncation_is_told_and_passing_failures_once() {
        let settings = crate::ClientSettings::new("127.0.0.1:1");
        let security = LinkSecurity::from_settings(&settings, Default::default()).expect("reads").expect("plain");
        let fetcher = Fetcher::new("127.0.0.1:1", security, false).expect("a fetcher");
        let (_, sink) = fetcher.sink(1 << 20);
        let refused = |n: i32| Delivery::Failed(Error::Refused { step: format!("fetch {n}"), message: "no".into() });
        let truncated =
            |p: i32| Delivery::Failed(Error::Truncated { topic: "t".into(), partition: p, offset: 50, log_start: 0 });
        for d in [refused(1), refused(2), truncated(0), truncated(1), refused(3), refused(4), truncated(2)] {
            sink.push(d);
        }
        let mut told = Vec::new();
        while let Some(Delivery::Failed(e)) = fetcher.next_delivery(&sink, Duration::from_millis(10)) {
            told.push(e.to_string());
        }
        let truncations = told.iter().filter(|t| t.contains("past the log's end")).count();
        assert_eq!(truncations, 3, "every partition's truncation: {told:?}");
        assert_eq!(told.len(), 5, "two runs of passing failures, the latest of each: {told:?}");
        assert!(told[0].contains("fetch 2") && told[3].contains("fetch 4"), "{told:?}");
    }

    #[test]
    fn a_fetch_thread_that_panics_gives_its_place_up_and_its_readers_hear_why() {
        let settings = crate::ClientSettings::new("127.0.0.1:1");
        let security = LinkSecurity::from_settings(&settings, Default::default()).expect("reads").expect("plain");
        let fetcher = Fetcher::new("127.0.0.1:1", security, false).expect("a fetcher");
        let (reader, sink) = fetcher.sink(1 << 20);
        fetcher.add(reader, &sink, "t", &[(0, Some(5))]);
        let shared = Arc::clone(&fetcher.shared);
        {
            let mut state = shared.lock();
            state.partitions.values_mut().for_each(|p| p.leader = Some(7));
            state.threads.insert(7);
            state.metadata_due = false;
        }
        // Broker 7's thread, panicking (as a bug in a decoder's caller would).
        let thread_shared = Arc::clone(&shared);
        let ended = std::thread::spawn(move || {
            let _slot = BrokerThreadSlot { shared: &thread_shared, broker: 7 };
            panic!("a bug");
        })
        .join();
        assert!(ended.is_err(), "it panicked");
        {
            let state = shared.lock();
            assert!(!state.threads.contains(&7), "its place is free: the next round starts a new thread");
            // (The metadata thread, which asks for them, may have taken the
            // flag already: it cannot reach 127.0.0.1:1.)
            assert!(state.partitions.values().all(|p| p.leader.is_none()), "its partitions' leaders are asked again");
        }
        match fetcher.next_delivery(&sink, Duration::from_secs(5)) {
            Some(Delivery::Failed(e)) => assert!(e.to_string().contains("fetch thread of broker 7 stopped"), "{e}"),
            _ => panic!("the reader was not told"),
        }
    }
}
