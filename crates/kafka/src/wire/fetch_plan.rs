//! The [`super::fetcher`]'s decisions, pure: which partitions each reader
//! reads and where, who leads them, what to ask each broker for next
//! ([`FetchState::plan`]), and what each answer means for the readers
//! (Metadata, ListOffsets, Fetch). No connection and no clock: the fetcher's
//! threads do the requests and pass each step the time (`now`), and the
//! readers hear through their queues ([`super::fetch_sink`]).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use kafka_protocol::messages::{ListOffsetsResponse, MetadataResponse};

use crate::error::Error;
use crate::wire::fetch_response::PartitionData;
use crate::wire::fetch_session::{Ask, PartitionKey};
use crate::wire::fetch_sink::{Delivery, Sink};
use crate::wire::read_ahead::{ANSWER_MAX_BYTES, PARTITION_MAX_BYTES, ask_bytes};
use crate::wire::record_batch::{BatchHeader, after_whole_batches, magic};
use crate::wire::records::PartitionRecords;

/// The most asked of one partition: the largest batch read. A batch is at
/// most its topic's `max.message.bytes` (1 MiB by default); kshard's own
/// recovery logs allow 16 MiB, and brokers raised for large records rarely
/// go past 100 MiB. Asked only of a partition whose next batch says it is
/// that large, and read into a buffer of its size; a batch past this can
/// never be read, and its readers hear why.
const PARTITION_MOST_BYTES: i32 = 128 * 1024 * 1024;
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

impl Partition {
    fn new() -> Self {
        Partition {
            readings: Vec::new(),
            leader: None,
            end: None,
            high_watermark: None,
            max_bytes: PARTITION_MAX_BYTES,
            least: 0,
            not_before: None,
        }
    }

    /// Every reader of the partition hears `error`.
    fn tell(&self, error: impl Fn() -> Error) {
        for r in &self.readings {
            r.sink.push(Delivery::Failed(error()));
        }
    }
}

/// What one request to a broker asks for.
pub(crate) struct Plan {
    /// Partitions to fetch, and where.
    pub(crate) wanted: BTreeMap<PartitionKey, Ask>,
    /// Partitions whose log start is to be asked for (ListOffsets).
    pub(crate) earliest: Vec<PartitionKey>,
    /// The most the answer may carry.
    pub(crate) answer_bytes: i32,
}

impl Plan {
    /// Nothing to ask.
    pub(crate) fn is_empty(&self) -> bool {
        self.wanted.is_empty() && self.earliest.is_empty()
    }
}

/// Every partition read, its readers and its leader; the brokers known and
/// those with a fetch thread.
pub(crate) struct FetchState {
    partitions: HashMap<PartitionKey, Partition>,
    brokers: HashMap<i32, Arc<str>>,
    /// Brokers with a thread of their own.
    threads: HashSet<i32>,
    /// Leaders are to be asked for again.
    pub(crate) metadata_due: bool,
    /// Only committed records are read: a partition ends at its last
    /// stable offset.
    committed_only: bool,
}

impl FetchState {
    pub(crate) fn new(committed_only: bool) -> Self {
        FetchState {
            partitions: HashMap::new(),
            brokers: HashMap::new(),
            threads: HashSet::new(),
            metadata_due: false,
            committed_only,
        }
    }

    /// `reader` reads `partitions` of `topic` into `sink`, each from its
    /// offset (`None`: the earliest); a partition it reads already starts
    /// over there.
    pub(crate) fn add(&mut self, reader: u64, sink: &Arc<Sink>, topic: &str, partitions: &[(i32, Option<i64>)]) {
        let topic: Arc<str> = Arc::from(topic);
        for &(partition, offset) in partitions {
            let p = self.partitions.entry((Arc::clone(&topic), partition)).or_insert_with(Partition::new);
            p.readings.retain(|r| r.reader != reader);
            let next = offset.map_or(Next::Earliest, Next::At);
            p.readings.push(Reading { reader, sink: Arc::clone(sink), next, told_end: false });
            self.metadata_due |= p.leader.is_none();
        }
    }

    /// `reader` reads nothing any more.
    pub(crate) fn remove(&mut self, reader: u64) {
        self.partitions.retain(|_, p| {
            p.readings.retain(|r| r.reader != reader);
            !p.readings.is_empty()
        });
    }

    /// Where `key` ends, as the last answer that named it said.
    pub(crate) fn known_end(&self, key: &PartitionKey) -> Option<i64> {
        self.partitions.get(key).and_then(|p| p.end)
    }

    /// Some partition read has no known leader.
    pub(crate) fn leaderless(&self) -> bool {
        self.partitions.values().any(|p| p.leader.is_none())
    }

    /// The topics read.
    pub(crate) fn topics(&self) -> Vec<Arc<str>> {
        let topics: HashSet<&Arc<str>> = self.partitions.keys().map(|(t, _)| t).collect();
        topics.into_iter().cloned().collect()
    }

    /// The addresses of the brokers known.
    pub(crate) fn broker_addresses(&self) -> Vec<String> {
        self.brokers.values().map(|a| a.to_string()).collect()
    }

    /// `broker`'s address, while it is known.
    pub(crate) fn address(&self, broker: i32) -> Option<Arc<str>> {
        self.brokers.get(&broker).cloned()
    }

    /// `broker` leads a partition read.
    pub(crate) fn leads(&self, broker: i32) -> bool {
        self.partitions.values().any(|p| p.leader == Some(broker))
    }

    /// `broker`'s thread ended.
    pub(crate) fn thread_ended(&mut self, broker: i32) {
        self.threads.remove(&broker);
    }

    /// True when every reading of the partitions `keys` is by one reader.
    pub(crate) fn one_reader<'k>(&self, keys: impl Iterator<Item = &'k PartitionKey>) -> bool {
        let mut readers =
            keys.filter_map(|key| self.partitions.get(key)).flat_map(|p| p.readings.iter().map(|r| r.reader));
        let Some(first) = readers.next() else { return true };
        readers.all(|r| r == first)
    }

    /// Tells each reader of a partition `broker` leads that it reached the
    /// partition's end, once, when it has.
    pub(crate) fn tell_ends(&mut self, broker: i32) {
        for (key, p) in self.partitions.iter_mut().filter(|(_, p)| p.leader == Some(broker)) {
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

    /// What to ask `broker` for at `now`: each partition it leads at the
    /// lowest position of its readers whose queues have room (when the
    /// read-ahead has no `room` for an answer, of its readers that hold
    /// nothing: see [`ask_bytes`]), and the partitions whose start is to be
    /// asked for. A partition refused is not asked for until its wait ends.
    pub(crate) fn plan(&self, broker: i32, room: Option<i32>, now: Instant) -> Plan {
        let answer_bytes = room.unwrap_or(ANSWER_MAX_BYTES);
        let mut plan = Plan { wanted: BTreeMap::new(), earliest: Vec::new(), answer_bytes };
        for (key, p) in self.partitions.iter().filter(|(_, p)| p.leader == Some(broker)) {
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

    /// A Metadata answer at `now`: the brokers' addresses and the leaders of
    /// the partitions read. Returns the brokers that lead one and have no
    /// thread yet; call [`FetchState::threads_started`] with those that got
    /// one.
    pub(crate) fn metadata(&mut self, answer: &MetadataResponse, now: Instant) -> Vec<i32> {
        for b in &answer.brokers {
            let address = crate::wire::broker_link::broker_address(b.host.as_str(), b.port);
            self.brokers.insert(b.node_id.0, Arc::from(address));
        }
        let mut leaders = HashMap::new();
        for topic in &answer.topics {
            let Some(name) = topic.name.as_ref() else { continue };
            if topic.error_code == TOPIC_AUTHORIZATION_FAILED {
                // No Describe: tell the readers (every 5 s), as a Fetch refused would.
                for (key, p) in self.partitions.iter_mut().filter(|(k, _)| *k.0 == *name.0.as_str()) {
                    if p.not_before.is_none_or(|t| now >= t) {
                        moved_or_refused(p, key, topic.error_code, now);
                    }
                }
                continue;
            }
            if topic.error_code != 0 {
                tracing::debug!(
                    topic = name.0.as_str(),
                    error_code = topic.error_code,
                    "no metadata for the topic yet"
                );
                continue;
            }
            for p in &topic.partitions {
                if p.error_code == 0 && p.leader_id.0 >= 0 {
                    leaders.insert((name.0.as_str(), p.partition_index), p.leader_id.0);
                }
            }
        }
        let mut wanted = HashSet::new();
        for ((topic, partition), p) in self.partitions.iter_mut() {
            p.leader = leaders.get(&(&**topic, *partition)).copied();
            if let Some(leader) = p.leader {
                wanted.insert(leader);
            }
        }
        let mut wanted: Vec<i32> = wanted
            .into_iter()
            .filter(|broker| !self.threads.contains(broker) && self.brokers.contains_key(broker))
            .collect();
        wanted.sort_unstable();
        wanted
    }

    /// The brokers in `started` have a fetch thread now. A leader no thread
    /// reads from (not among the brokers listed, or its thread would not
    /// start) is no leader: it is asked for again.
    pub(crate) fn threads_started(&mut self, started: impl IntoIterator<Item = i32>) {
        self.threads.extend(started);
        for p in self.partitions.values_mut() {
            if p.leader.is_some_and(|l| !self.threads.contains(&l)) {
                p.leader = None;
            }
        }
    }

    /// A ListOffsets answer (the log starts) at `now`: the readers waiting
    /// for a partition's start read on from it.
    pub(crate) fn log_starts(&mut self, answer: &ListOffsetsResponse, now: Instant) {
        for topic in &answer.topics {
            for a in &topic.partitions {
                let key: PartitionKey = (Arc::from(topic.name.0.as_str()), a.partition_index);
                let Some(p) = self.partitions.get_mut(&key) else { continue };
                if a.error_code != 0 {
                    moved_or_refused(p, &key, a.error_code, now);
                    self.metadata_due |= LEADER_MOVED.contains(&a.error_code);
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
    }

    /// A Fetch answer (read from `frame`) at `now`: each partition handed to
    /// its readers, as far as it was `asked` for. Returns whether a leader
    /// moved (leaders are then due).
    pub(crate) fn fetched(
        &mut self,
        frame: &Bytes,
        partitions: Vec<PartitionData<'_>>,
        asked: &HashMap<PartitionKey, Ask>,
        now: Instant,
    ) -> bool {
        let mut moved = false;
        // Records are handed out in the answer's buffer, which lives as long
        // as any of them is unread. One reader of every partition with
        // records in it (most answers: one is about a partition's first ask,
        // see `ANSWER_MAX_BYTES`) walks an answer through and frees it; when
        // several read it (a runtime member's replicas, a partition each),
        // the slowest would hold the whole answer for its own few records:
        // each then gets a copy of its records (a cold start of 50 shards
        // peaked at 83 MB instead of 102).
        let parts: Vec<(PartitionKey, _)> =
            partitions.into_iter().map(|part| ((Arc::from(part.topic), part.partition), part)).collect();
        let in_place = self.one_reader(parts.iter().filter(|(_, part)| !part.records.is_empty()).map(|(key, _)| key));
        let share = |records: &[u8]| if in_place { frame.slice_ref(records) } else { Bytes::copy_from_slice(records) };
        for (key, part) in parts {
            let Some(ask) = asked.get(&key) else { continue };
            let Some(p) = self.partitions.get_mut(&key) else { continue };
            match part.error_code {
                0 => deliver(p, &key, &part, ask, self.committed_only, share, now),
                OFFSET_OUT_OF_RANGE => out_of_range(p, &key, ask.offset),
                code => {
                    moved |= LEADER_MOVED.contains(&code);
                    moved_or_refused(p, &key, code, now);
                }
            }
        }
        self.metadata_due |= moved;
        moved
    }

    /// Reading from `broker` failed: its partitions may have moved (a
    /// broker restarting), and leaders are asked for again. Their readers
    /// are not told: a runtime replica ends on a read error, and a broker
    /// restarting is no reason for that. A reader frozen this way shows as a
    /// stalled partition on /ready (kshard-lag's `stalls`).
    pub(crate) fn broker_failed(&mut self, broker: i32) {
        for p in self.partitions.values_mut().filter(|p| p.leader == Some(broker)) {
            p.leader = None;
        }
        self.metadata_due = true;
    }

    /// `broker`'s fetch thread panicked (a bug): its place is given up, its
    /// partitions handed back for another thread, and their readers told.
    pub(crate) fn thread_panicked(&mut self, broker: i32) {
        self.threads.remove(&broker);
        for (key, p) in self.partitions.iter_mut().filter(|(_, p)| p.leader == Some(broker)) {
            p.leader = None;
            p.tell(|| Error::Refused {
                step: format!("reading {}/{}", key.0, key.1),
                message: format!("the fetch thread of broker {broker} stopped; another takes over"),
            });
        }
        self.metadata_due = true;
    }
}

/// A partition error other than an offset out of range, at `now`: the
/// leader moved (ask for leaders again), the broker refused (tell the
/// readers, wait), or anything else (wait).
fn moved_or_refused(p: &mut Partition, key: &PartitionKey, error_code: i16, now: Instant) {
    if LEADER_MOVED.contains(&error_code) {
        p.leader = None;
        return;
    }
    p.not_before = Some(now + REFUSED_BACKOFF);
    tracing::warn!(topic = &*key.0, partition = key.1, error_code, "the broker refused a Fetch; asking again in 5 s");
    p.tell(|| Error::Kafka { step: format!("reading {}/{}", key.0, key.1), code: error_code });
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
    let deleted = offset < start;
    let what = if deleted {
        "records deleted before they were read: reading on from the log's start"
    } else {
        "offset past the log's end (truncated, or the topic made again): reading again from its start"
    };
    tracing::warn!(topic = &*key.0, partition = key.1, offset, log_start = start, "{what}");
    if deleted {
        return;
    }
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
    now: Instant,
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
            no_whole_batch(p, key, part.records, ask, now);
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
fn no_whole_batch(p: &mut Partition, key: &PartitionKey, records: &[u8], ask: &Ask, now: Instant) {
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
    p.not_before = Some(now + REFUSED_BACKOFF);
    p.tell(|| Error::Refused { step: format!("reading {}/{}", key.0, key.1), message: why.clone() });
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
pub(crate) mod tests;
