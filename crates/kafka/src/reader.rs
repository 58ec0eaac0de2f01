//! [`PartitionReader`]: chosen partitions read from chosen offsets, with an
//! event when each reaches its end. No consumer group, no commits. By
//! default, committed records only (transactions' aborted records and
//! markers never appear); [`Isolation::Uncommitted`] hands out every record,
//! each transaction's named, and the markers that end them.
//!
//! Two clients do the reading, chosen by [`ClientSettings::reader`]:
//! kshard's own ([`crate::wire::fetcher`]: every reader made from the same
//! settings shares one connection per broker) and librdkafka's consumer (one
//! per reader), which also reads wherever the settings ask for what only it
//! does: GSSAPI, OAUTHBEARER, keystores, certificate verification turned off.

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use bytes::Bytes;
use rdkafka::message::{BorrowedMessage, Message};

use crate::config::{ClientSettings, ReaderKind};
use crate::error::{Error, Result};
use crate::librdkafka::rdkafka_reader::RdkafkaReader;
use crate::wire::broker_link::LinkSecurity;
use crate::wire::fetch_session::PartitionKey;
use crate::wire::fetcher::{Delivery, Fetcher, Sink};
use crate::wire::records::Headers;
use crate::wire::records::{PartitionRecords, RecordAt, Transactional};

/// Which records a reader hands out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Isolation {
    /// Committed records only (`read_committed`): aborted transactions and
    /// markers never appear, and a partition ends at its last stable offset,
    /// so that a transaction left open holds back every record after it
    /// until the broker aborts it.
    #[default]
    Committed,
    /// Every record up to the high watermark (`read_uncommitted`), each
    /// record of a transaction naming its producer and each COMMIT or ABORT
    /// marker handed out ([`ReadRecord::transactional`]): the caller sets
    /// open transactions aside until their marker. kshard's reader only:
    /// librdkafka hides producers and markers, so a librdkafka reader asked
    /// for this reads committed records (see [`PartitionReader::isolation`]).
    Uncommitted,
}

/// Reads partitions by manual assignment (see the module's doc).
pub struct PartitionReader {
    client: Client,
}

enum Client {
    Librdkafka(RdkafkaReader),
    Kshard(Box<OwnReader>),
}

impl std::fmt::Debug for PartitionReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let client = match &self.client {
            Client::Librdkafka(_) => "librdkafka",
            Client::Kshard(_) => "kshard",
        };
        f.debug_struct("PartitionReader").field("client", &client).finish_non_exhaustive()
    }
}

/// One record as read, valid until the next poll.
pub struct ReadRecord<'a> {
    record: RecordOf<'a>,
}

enum RecordOf<'a> {
    Librdkafka(BorrowedMessage<'a>),
    /// The reader's walk, held (locked) until the record is dropped: its key
    /// and value are read in place in the Fetch answer's buffer (or a
    /// decompressed batch's), with nothing copied or counted per record.
    Kshard {
        walk: MutexGuard<'a, Option<Walk>>,
        record: RecordAt,
    },
}

/// A partition's records being handed out, one poll at a time.
type Walk = (PartitionKey, PartitionRecords);

impl RecordOf<'_> {
    /// kshard's record, its partition and the buffer its ranges point into.
    fn kshard(&self) -> Option<(&PartitionKey, &Bytes, &RecordAt)> {
        match self {
            RecordOf::Kshard { walk, record } => walk.as_ref().map(|(key, records)| (key, records.buffer(), record)),
            RecordOf::Librdkafka(_) => None,
        }
    }
}

impl std::fmt::Debug for ReadRecord<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReadRecord")
            .field("topic", &self.topic())
            .field("partition", &self.partition())
            .field("offset", &self.offset())
            .finish()
    }
}

impl<'a> ReadRecord<'a> {
    pub(crate) fn librdkafka(message: BorrowedMessage<'a>) -> Self {
        ReadRecord { record: RecordOf::Librdkafka(message) }
    }

    /// The topic.
    pub fn topic(&self) -> &str {
        match (&self.record, self.record.kshard()) {
            (RecordOf::Librdkafka(m), _) => m.topic(),
            (_, Some((key, _, _))) => &key.0,
            (_, None) => "",
        }
    }

    /// The partition.
    pub fn partition(&self) -> i32 {
        match (&self.record, self.record.kshard()) {
            (RecordOf::Librdkafka(m), _) => m.partition(),
            (_, Some((key, _, _))) => key.1,
            (_, None) => -1,
        }
    }

    /// The record's offset.
    pub fn offset(&self) -> i64 {
        match &self.record {
            RecordOf::Librdkafka(m) => m.offset(),
            RecordOf::Kshard { record, .. } => record.offset,
        }
    }

    /// The record's part in a transaction, for a reader of
    /// [`Isolation::Uncommitted`] records; `None` for a record written
    /// outside one, and always when reading committed records.
    pub fn transactional(&self) -> Option<Transactional> {
        match &self.record {
            RecordOf::Librdkafka(_) => None,
            RecordOf::Kshard { record, .. } => record.transactional,
        }
    }

    /// The key (`None` when null).
    pub fn key(&self) -> Option<&[u8]> {
        match (&self.record, self.record.kshard()) {
            (RecordOf::Librdkafka(m), _) => m.key(),
            (_, Some((_, buffer, r))) => r.key.clone().and_then(|k| buffer.get(k)),
            (_, None) => None,
        }
    }

    /// The record's timestamp, milliseconds since the epoch, and whether the
    /// broker set it when appending (LogAppendTime) rather than the producer
    /// when creating it (CreateTime).
    pub fn timestamp(&self) -> (i64, bool) {
        match &self.record {
            RecordOf::Librdkafka(m) => match m.timestamp() {
                rdkafka::Timestamp::LogAppendTime(ms) => (ms, true),
                rdkafka::Timestamp::CreateTime(ms) => (ms, false),
                rdkafka::Timestamp::NotAvailable => (-1, false),
            },
            RecordOf::Kshard { record, .. } => (record.timestamp_ms, record.log_append_time),
        }
    }

    /// The record's headers, in order: name and value (`None`: null).
    pub fn headers(&self) -> Vec<(&str, Option<&[u8]>)> {
        match (&self.record, self.record.kshard()) {
            (RecordOf::Librdkafka(m), _) => {
                use rdkafka::message::Headers as _;
                m.headers().map(|h| h.iter().map(|h| (h.key, h.value)).collect()).unwrap_or_default()
            }
            (_, Some((_, buffer, r))) => {
                buffer.get(r.headers.clone()).map(|section| Headers::read(section).collect()).unwrap_or_default()
            }
            (_, None) => Vec::new(),
        }
    }

    /// The value (`None` when null: a tombstone).
    pub fn value(&self) -> Option<&[u8]> {
        match (&self.record, self.record.kshard()) {
            (RecordOf::Librdkafka(m), _) => m.payload(),
            (_, Some((_, buffer, r))) => r.value.clone().and_then(|v| buffer.get(v)),
            (_, None) => None,
        }
    }
}

/// What one poll produced.
#[derive(Debug)]
pub enum ReadEvent<'a> {
    /// A record.
    Record(ReadRecord<'a>),
    /// The reader reached the current end of a partition.
    EndOfPartition {
        /// The partition.
        partition: i32,
        /// The offset the reader will read next. kshard's reader always
        /// knows it; librdkafka only once it has read a record of the
        /// partition (not for an empty partition or one holding only
        /// transaction markers).
        next_offset: Option<i64>,
    },
    /// Nothing arrived within the poll timeout.
    Idle,
}

impl PartitionReader {
    /// A reader of `topic` starting each listed partition at its offset
    /// (`None`: the earliest offset), with a queue of 1 MB.
    pub fn new(settings: &ClientSettings, topic: &str, start: &[(i32, Option<i64>)]) -> Result<Self> {
        Self::with_queue(settings, topic, start, 1024)
    }

    /// [`PartitionReader::new`] with a queue of `queue_kbytes`: records
    /// fetched and not yet polled, past which its partitions are not fetched
    /// for. A process running many readers at once (a runtime member has
    /// one or two per replica) gives each a small one.
    pub fn with_queue(
        settings: &ClientSettings,
        topic: &str,
        start: &[(i32, Option<i64>)],
        queue_kbytes: u32,
    ) -> Result<Self> {
        Self::with_isolation(settings, topic, start, queue_kbytes, Isolation::Committed)
    }

    /// [`PartitionReader::with_queue`] reading the records `isolation` says.
    /// Readers share kshard's connections when they read with the same
    /// settings and isolation.
    pub fn with_isolation(
        settings: &ClientSettings,
        topic: &str,
        start: &[(i32, Option<i64>)],
        queue_kbytes: u32,
        isolation: Isolation,
    ) -> Result<Self> {
        let security = match settings.reader {
            ReaderKind::Kshard => LinkSecurity::from_settings(settings)?,
            ReaderKind::Librdkafka => None,
        };
        let client = match security {
            Some(security) => {
                let fetcher = shared_fetcher(settings, security, isolation)?;
                let limit = usize::try_from(queue_kbytes).unwrap_or(usize::MAX).saturating_mul(1024).max(64 * 1024);
                let (id, sink) = fetcher.sink(limit);
                fetcher.add(id, &sink, topic, start);
                Client::Kshard(Box::new(OwnReader { fetcher, id, sink, walk: Mutex::new(None) }))
            }
            None => Client::Librdkafka(RdkafkaReader::with_queue(settings, topic, start, queue_kbytes)?),
        };
        Ok(PartitionReader { client })
    }

    /// Adds partitions of `topic`, each from its offset (`None`: the
    /// earliest), without disturbing those already read.
    pub fn add_partitions(&self, topic: &str, start: &[(i32, Option<i64>)]) -> Result<()> {
        match &self.client {
            Client::Librdkafka(r) => r.add_partitions(topic, start),
            Client::Kshard(r) => {
                r.fetcher.add(r.id, &r.sink, topic, start);
                Ok(())
            }
        }
    }

    /// Waits up to `timeout` for the next event.
    pub fn poll(&self, timeout: Duration) -> Result<ReadEvent<'_>> {
        match &self.client {
            Client::Librdkafka(r) => r.poll(timeout),
            Client::Kshard(r) => r.poll(timeout),
        }
    }

    /// Resolves once [`PartitionReader::poll`] may have an event without
    /// waiting: how an async task waits for a reader, without a thread.
    /// Call it after a poll of zero timeout was [`ReadEvent::Idle`]; it may
    /// resolve when nothing is there after all (poll again). Cancel-safe.
    /// librdkafka's resolves every 100 ms at the latest, on tokio's timer
    /// (its own wake-ups are not all to be trusted).
    pub async fn readable(&self) {
        match &self.client {
            Client::Librdkafka(r) => r.readable().await,
            Client::Kshard(r) => r.sink.readable().await,
        }
    }

    /// Where a partition this reader reads ends (the end of what it will
    /// deliver: the last stable offset reading committed records, the high
    /// watermark reading every record), as kshard's reader last heard from its
    /// leader: current to within one long poll (250 ms) while the partition
    /// is read, without a request of its own. `None` before the first answer,
    /// and always for librdkafka: ask the admin client.
    pub fn known_end(&self, topic: &str, partition: i32) -> Option<i64> {
        match &self.client {
            Client::Librdkafka(_) => None,
            Client::Kshard(r) => r.fetcher.known_end(topic, partition),
        }
    }

    /// The records this reader hands out: as asked, or committed ones for
    /// librdkafka.
    pub fn isolation(&self) -> Isolation {
        match &self.client {
            Client::Librdkafka(_) => Isolation::Committed,
            Client::Kshard(r) => r.fetcher.isolation(),
        }
    }

    /// Which client reads: "kshard" or "librdkafka".
    pub fn client(&self) -> &'static str {
        match &self.client {
            Client::Librdkafka(_) => "librdkafka",
            Client::Kshard(_) => "kshard",
        }
    }

    /// Connections kshard's reader holds open now for every reader made from
    /// the same settings (one per broker read from, and one for metadata);
    /// `None` for librdkafka.
    pub fn shared_connections(&self) -> Option<usize> {
        match &self.client {
            Client::Librdkafka(_) => None,
            Client::Kshard(r) => Some(r.fetcher.connections()),
        }
    }
}

impl ClientSettings {
    /// The records a reader made from these settings hands out when asked
    /// for `isolation`: as asked with kshard's reader, committed ones when
    /// librdkafka reads (`reader: librdkafka`, or settings only it honours).
    /// Settings that do not read at all say committed.
    pub fn isolation_for(&self, isolation: Isolation) -> Isolation {
        match (self.reader, LinkSecurity::from_settings(self)) {
            (ReaderKind::Kshard, Ok(Some(_))) => isolation,
            _ => Isolation::Committed,
        }
    }
}

/// The fetcher every reader made from `settings` (and its clones) with
/// `isolation` shares.
fn shared_fetcher(settings: &ClientSettings, security: LinkSecurity, isolation: Isolation) -> Result<Arc<Fetcher>> {
    // Clones share the context; one whose properties changed since gets a
    // fetcher of its own.
    let key = format!(
        "{}\u{0}{:?}\u{0}{:?}\u{0}{isolation:?}",
        settings.brokers,
        settings.security.properties(),
        settings.properties
    );
    let mut fetchers = settings.context.fetchers.lock().unwrap_or_else(PoisonError::into_inner);
    fetchers.retain(|_, f| f.strong_count() > 0);
    if let Some(fetcher) = fetchers.get(&key).and_then(std::sync::Weak::upgrade) {
        return Ok(fetcher);
    }
    let fetcher = Fetcher::new(&settings.brokers, security, isolation == Isolation::Committed)?;
    fetchers.insert(key, Arc::downgrade(&fetcher));
    Ok(fetcher)
}

/// A reader on kshard's own fetcher.
struct OwnReader {
    fetcher: Arc<Fetcher>,
    id: u64,
    sink: Arc<Sink>,
    /// The partition records being handed out, one poll at a time.
    walk: Mutex<Option<Walk>>,
}

impl Drop for OwnReader {
    fn drop(&mut self) {
        self.fetcher.remove(self.id);
    }
}

impl OwnReader {
    fn poll(&self, timeout: Duration) -> Result<ReadEvent<'_>> {
        // Set once a delivery has been waited for (see `next_delivery`).
        let mut deadline: Option<Instant> = None;
        // A record holds the walk until it is dropped: a second poll while
        // one is held is a caller's mistake, told, not a deadlock.
        let mut walk = match self.walk.try_lock() {
            Ok(walk) => walk,
            Err(std::sync::TryLockError::Poisoned(p)) => p.into_inner(),
            Err(std::sync::TryLockError::WouldBlock) => {
                return Err(Error::Refused {
                    step: "polling a reader".into(),
                    message: "a record of the previous poll is still held (drop it first)".into(),
                });
            }
        };
        loop {
            if let Some((key, records)) = walk.as_mut() {
                match records.next_record() {
                    Ok(Some(record)) => {
                        return Ok(ReadEvent::Record(ReadRecord { record: RecordOf::Kshard { walk, record } }));
                    }
                    Ok(None) => *walk = None,
                    // The batch is skipped (the error says which); the walk
                    // goes on with the next one at the next poll.
                    Err(e) => {
                        return Err(Error::CorruptBatch {
                            topic: key.0.to_string(),
                            partition: key.1,
                            offset: e.offset,
                            what: e.to_string(),
                        });
                    }
                }
            }
            let left = match deadline {
                None => {
                    deadline = Some(Instant::now() + timeout);
                    timeout
                }
                Some(at) => at.saturating_duration_since(Instant::now()),
            };
            match self.fetcher.next_delivery(&self.sink, left) {
                None => return Ok(ReadEvent::Idle),
                Some(Delivery::Records { key, records, .. }) => *walk = Some((key, records)),
                Some(Delivery::End { key, next_offset }) => {
                    return Ok(ReadEvent::EndOfPartition { partition: key.1, next_offset: Some(next_offset) });
                }
                Some(Delivery::Failed(e)) => return Err(e),
            }
        }
    }
}
