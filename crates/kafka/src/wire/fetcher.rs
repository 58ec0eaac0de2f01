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

use std::collections::{BTreeMap, HashMap};
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
use crate::wire::fetch_plan::{FetchState, Plan};
use crate::wire::fetch_response::read_fetch_response;
use crate::wire::fetch_session::{Ask, FetchSession, PartitionKey, SESSION_ERRORS, SessionRequest};
pub(crate) use crate::wire::fetch_sink::{Delivery, Sink};
use crate::wire::read_ahead::{Queued, answer_room};

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
/// A broker that does not answer within this (beyond the long poll) is
/// taken as failed: its connection is closed and made again.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// A broker thread with no partition to read for this long ends.
const IDLE_THREAD: Duration = Duration::from_secs(10);
/// The first wait after a broker failed, doubled up to [`MOST_BACKOFF`].
const FIRST_BACKOFF: Duration = Duration::from_millis(100);
const MOST_BACKOFF: Duration = Duration::from_secs(5);
/// What the fetcher's threads share.
struct Shared {
    security: LinkSecurity,
    bootstrap: Vec<String>,
    /// Read only committed records (`isolation.level=read_committed`).
    committed_only: bool,
    state: Mutex<FetchState>,
    /// Rung when something a thread waits for may have changed.
    changed: Condvar,
    stop: AtomicBool,
    /// Connections open now (fetch and metadata).
    connections: AtomicUsize,
    next_reader: AtomicU64,
    /// What the readers hold queued, together.
    queued: Arc<Queued>,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, FetchState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Applies `step` to the state, then wakes the threads.
    fn change<T>(&self, step: impl FnOnce(&mut FetchState) -> T) -> T {
        let out = step(&mut self.lock());
        self.changed.notify_all();
        out
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
            state: Mutex::new(FetchState::new(committed_only)),
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
        (id, Arc::new(Sink::new(limit, Arc::clone(&self.shared.queued))))
    }

    /// Reads `partitions` of `topic` for `reader`, each from its offset
    /// (`None`: the earliest); a partition it reads already starts over there.
    pub(crate) fn add(&self, reader: u64, sink: &Arc<Sink>, topic: &str, partitions: &[(i32, Option<i64>)]) {
        self.shared.change(|state| state.add(reader, sink, topic, partitions));
    }

    /// Stops reading for `reader`.
    pub(crate) fn remove(&self, reader: u64) {
        self.shared.lock().remove(reader);
    }

    /// Waits up to `timeout` for `sink`'s next delivery. A reader that read
    /// its queue down below its limit is fetched for again.
    pub(crate) fn next_delivery(&self, sink: &Sink, timeout: Duration) -> Option<Delivery> {
        let (delivery, room_made) = sink.next(timeout)?;
        if room_made {
            self.shared.changed.notify_all();
        }
        Some(delivery)
    }

    /// Where `topic`/`partition` ends, as the last answer that named it said
    /// (its last stable offset when reading committed records only), while
    /// some reader reads it.
    pub(crate) fn known_end(&self, topic: &str, partition: i32) -> Option<i64> {
        self.shared.lock().known_end(&(Arc::from(topic), partition))
    }

    /// Connections open now: one per broker read from, and one for metadata.
    pub(crate) fn connections(&self) -> usize {
        self.shared.connections.load(Ordering::Relaxed)
    }
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

/// A broker's fetch thread's place, given up if it panics (a bug: nothing
/// a broker sends should make one): its partitions are handed back for the
/// metadata thread to start another, and their readers told why.
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
        tracing::error!(broker = self.broker, "a fetch thread panicked; its partitions go to a new one");
        self.shared.change(|state| state.thread_panicked(self.broker));
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
        let topics = {
            let mut state = shared.lock();
            while !state.metadata_due && !shared.stop.load(Ordering::Acquire) {
                state = shared
                    .changed
                    .wait_timeout(state, Duration::from_secs(1))
                    .unwrap_or_else(PoisonError::into_inner)
                    .0;
                state.metadata_due |= state.leaderless();
            }
            state.metadata_due = false;
            state.topics()
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
        if shared.lock().leaderless() {
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
    let known = shared.lock().broker_addresses();
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

/// Takes a Metadata answer in, and starts a fetch thread for each broker
/// that leads a partition read and has none.
fn apply_metadata(shared: &Arc<Shared>, answer: &MetadataResponse) {
    shared.change(|state| {
        let wanted = state.metadata(answer, Instant::now());
        let started = wanted.into_iter().filter(|&broker| {
            let for_thread = Arc::clone(shared);
            let spawned = std::thread::Builder::new()
                .name(format!("kshard-fetch-{broker}"))
                .spawn(move || broker_thread(&for_thread, broker));
            if let Err(e) = &spawned {
                tracing::error!(broker, error = %e, "starting a fetch thread");
            }
            spawned.is_ok()
        });
        state.threads_started(started.collect::<Vec<_>>());
    });
}

/// Fetches the partitions `broker` leads until none is left for a while, or
/// the fetcher stops.
fn broker_thread(shared: &Arc<Shared>, broker: i32) {
    let _slot = BrokerThreadSlot { shared, broker };
    let mut link: Option<Counted<'_>> = None;
    let mut session = FetchSession::default();
    let mut backoff = FIRST_BACKOFF;
    loop {
        let Some((next, address)) = next_plan(shared, broker) else { return };
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
                shared.change(|state| state.broker_failed(broker));
                std::thread::sleep(backoff);
                backoff = (backoff * 2).min(MOST_BACKOFF);
            }
        }
    }
}

/// Waits until there is something to ask `broker` for, and returns it with
/// the broker's address; `None` when its thread is to end (the fetcher
/// stopped, the broker is gone, or it led nothing for [`IDLE_THREAD`]).
fn next_plan(shared: &Shared, broker: i32) -> Option<(Plan, Arc<str>)> {
    let mut state = shared.lock();
    let mut idle_since = Instant::now();
    let next = loop {
        if shared.stop.load(Ordering::Acquire) {
            state.thread_ended(broker);
            return None;
        }
        state.tell_ends(broker);
        let now = Instant::now();
        let next = state.plan(broker, answer_room(shared.queued.get()), now);
        if !next.is_empty() {
            break next;
        }
        // Partitions it leads whose readers' queues are full keep it.
        if state.leads(broker) {
            idle_since = now;
        } else if now.saturating_duration_since(idle_since) >= IDLE_THREAD {
            state.thread_ended(broker);
            return None;
        }
        state =
            shared.changed.wait_timeout(state, Duration::from_millis(200)).unwrap_or_else(PoisonError::into_inner).0;
    };
    let Some(address) = state.address(broker) else {
        state.thread_ended(broker);
        return None;
    };
    Some((next, address))
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
    shared.change(|state| state.log_starts(&answer, Instant::now()));
    Ok(())
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
    let moved = shared.lock().fetched(&frame, answer.partitions, &asked, Instant::now());
    if moved {
        shared.changed.notify_all();
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fetch_thread_that_panics_gives_its_place_up_and_its_readers_hear_why() {
        let security = LinkSecurity::from_settings(&crate::ClientSettings::new("127.0.0.1:1"), Default::default())
            .expect("reads")
            .expect("plain");
        let fetcher = Fetcher::new("127.0.0.1:1", security, false).expect("a fetcher");
        let (reader, sink) = fetcher.sink(1 << 20);
        fetcher.add(reader, &sink, "t", &[(0, Some(5))]);
        let shared = Arc::clone(&fetcher.shared);
        shared.change(|state| crate::wire::fetch_plan::tests::led_by(state, 7));
        // Broker 7's thread, panicking (as a bug in a decoder's caller would).
        let thread_shared = Arc::clone(&shared);
        let ended = std::thread::spawn(move || {
            let _slot = BrokerThreadSlot { shared: &thread_shared, broker: 7 };
            panic!("a bug");
        })
        .join();
        assert!(ended.is_err(), "it panicked");
        {
            let mut state = shared.lock();
            // (The metadata thread, which asks for them, may have taken the
            // flag already: it cannot reach 127.0.0.1:1.)
            assert!(state.leaderless() && !state.leads(7), "its partitions' leaders are asked again");
            let answer = crate::wire::fetch_plan::tests::metadata(&[7], &[("t", 0, 7)]);
            assert_eq!(state.metadata(&answer, Instant::now()), [7], "its place is free: a new thread starts");
        }
        match fetcher.next_delivery(&sink, Duration::from_secs(5)) {
            Some(Delivery::Failed(e)) => assert!(e.to_string().contains("fetch thread of broker 7 stopped"), "{e}"),
            _ => panic!("the reader was not told"),
        }
    }
}
