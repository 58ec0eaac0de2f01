//! [`PartitionReader`]: chosen partitions read from chosen offsets, with an
//! event when each reaches its end. No consumer group, no commits. By
//! default, committed records only (transactions' aborted records and
//! markers never appear); [`Isolation::Uncommitted`] hands out every record,
//! each transaction's named, and the markers that end them.
//!
//! Two clients do the reading, chosen by [`crate::ClientSettings::reader`]:
//! kshard's own ([`crate::wire::fetcher`]: every reader made from the same
//! [`Client`] shares one connection per broker) and librdkafka's consumer (one
//! per reader), which also reads wherever the settings ask for what only it
//! does: GSSAPI, OAUTHBEARER, keystores, certificate verification turned off.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::client::Client;
use crate::config::ReaderKind;
use crate::error::{Error, Result};
use crate::librdkafka::rdkafka_reader::RdkafkaReader;
use crate::read_record::{Isolation, ReadEvent, ReadRecord, RecordRun, Walk};
use crate::wire::fetcher::{Delivery, Fetcher, Sink};

/// Reads partitions by manual assignment (see the module's doc).
pub struct PartitionReader {
    backend: Backend,
}

enum Backend {
    Librdkafka(RdkafkaReader),
    Kshard(Box<OwnReader>),
}

impl std::fmt::Debug for PartitionReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let client = match &self.backend {
            Backend::Librdkafka(_) => "librdkafka",
            Backend::Kshard(_) => "kshard",
        };
        f.debug_struct("PartitionReader").field("client", &client).finish_non_exhaustive()
    }
}

impl PartitionReader {
    /// A reader of `topic` starting each listed partition at its offset
    /// (`None`: the earliest offset), with a queue of 1 MB.
    pub fn new(client: &Client, topic: &str, start: &[(i32, Option<i64>)]) -> Result<Self> {
        Self::with_queue(client, topic, start, 1024)
    }

    /// [`PartitionReader::new`] with a queue of `queue_kbytes`: records
    /// fetched and not yet polled, past which its partitions are not fetched
    /// for. A process running many readers at once (a runtime member has
    /// one or two per replica) gives each a small one.
    pub fn with_queue(client: &Client, topic: &str, start: &[(i32, Option<i64>)], queue_kbytes: u32) -> Result<Self> {
        Self::with_isolation(client, topic, start, queue_kbytes, Isolation::Committed)
    }

    /// [`PartitionReader::with_queue`] reading the records `isolation` says.
    /// Readers share kshard's connections when they read with the same
    /// settings and isolation.
    pub fn with_isolation(
        client: &Client,
        topic: &str,
        start: &[(i32, Option<i64>)],
        queue_kbytes: u32,
        isolation: Isolation,
    ) -> Result<Self> {
        let security = match client.settings().reader {
            ReaderKind::Kshard => client.link_security()?,
            ReaderKind::Librdkafka => None,
        };
        let backend = match security {
            Some(security) => {
                let fetcher = client.fetcher(security, isolation)?;
                let limit = usize::try_from(queue_kbytes).unwrap_or(usize::MAX).saturating_mul(1024).max(64 * 1024);
                let (id, sink) = fetcher.sink(limit);
                fetcher.add(id, &sink, topic, start);
                Backend::Kshard(Box::new(OwnReader { fetcher, id, sink, walk: Mutex::new(None) }))
            }
            None => Backend::Librdkafka(RdkafkaReader::with_queue(client, topic, start, queue_kbytes)?),
        };
        Ok(PartitionReader { backend })
    }

    /// Adds partitions of `topic`, each from its offset (`None`: the
    /// earliest), without disturbing those already read.
    pub fn add_partitions(&self, topic: &str, start: &[(i32, Option<i64>)]) -> Result<()> {
        match &self.backend {
            Backend::Librdkafka(r) => r.add_partitions(topic, start),
            Backend::Kshard(r) => {
                r.fetcher.add(r.id, &r.sink, topic, start);
                Ok(())
            }
        }
    }

    /// Waits up to `timeout` for the next event.
    pub fn poll(&self, timeout: Duration) -> Result<ReadEvent<ReadRecord<'_>>> {
        match &self.backend {
            Backend::Librdkafka(r) => r.poll(timeout),
            Backend::Kshard(r) => r.poll(timeout),
        }
    }

    /// [`PartitionReader::poll`], with the records of one partition ready
    /// now handed out together ([`RecordRun`]): one poll for many records.
    /// librdkafka's runs are of one record.
    pub fn poll_run(&self, timeout: Duration) -> Result<ReadEvent<RecordRun<'_>>> {
        match &self.backend {
            Backend::Librdkafka(r) => Ok(r.poll(timeout)?.map(RecordRun::one)),
            Backend::Kshard(r) => r.poll_run(timeout),
        }
    }

    /// Resolves once [`PartitionReader::poll`] may have an event without
    /// waiting: how an async task waits for a reader, without a thread.
    /// Call it after a poll of zero timeout was [`ReadEvent::Idle`]; it may
    /// resolve when nothing is there after all (poll again). Cancel-safe.
    /// librdkafka's resolves every 100 ms at the latest, on tokio's timer
    /// (its own wake-ups are not all to be trusted).
    pub async fn readable(&self) {
        match &self.backend {
            Backend::Librdkafka(r) => r.readable().await,
            Backend::Kshard(r) => r.sink.readable().await,
        }
    }

    /// Where a partition this reader reads ends (the end of what it will
    /// deliver: the last stable offset reading committed records, the high
    /// watermark reading every record), as kshard's reader last heard from its
    /// leader: current to within one long poll (250 ms) while the partition
    /// is read, without a request of its own. `None` before the first answer,
    /// and always for librdkafka: ask the admin client.
    pub fn known_end(&self, topic: &str, partition: i32) -> Option<i64> {
        match &self.backend {
            Backend::Librdkafka(_) => None,
            Backend::Kshard(r) => r.fetcher.known_end(topic, partition),
        }
    }

    /// The records this reader hands out: as asked, or committed ones for
    /// librdkafka.
    pub fn isolation(&self) -> Isolation {
        match &self.backend {
            Backend::Librdkafka(_) => Isolation::Committed,
            Backend::Kshard(r) => r.fetcher.isolation(),
        }
    }

    /// Which client reads: "kshard" or "librdkafka".
    pub fn client(&self) -> &'static str {
        match &self.backend {
            Backend::Librdkafka(_) => "librdkafka",
            Backend::Kshard(_) => "kshard",
        }
    }

    /// Connections kshard's reader holds open now for every reader made from
    /// the same [`Client`] (one per broker read from, and one for metadata);
    /// `None` for librdkafka.
    pub fn shared_connections(&self) -> Option<usize> {
        match &self.backend {
            Backend::Librdkafka(_) => None,
            Backend::Kshard(r) => Some(r.fetcher.connections()),
        }
    }
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
    fn poll(&self, timeout: Duration) -> Result<ReadEvent<ReadRecord<'_>>> {
        // A run of a walk read to its end is empty (its last record was
        // taken without asking for the next): the walk is dropped, and the
        // next delivery polled for the rest of `timeout` (even of none: one
        // queued is handed out), the clock read only then.
        let mut deadline: Option<Instant> = None;
        loop {
            let left = deadline.map_or(timeout, |at| at.saturating_duration_since(Instant::now()));
            match self.poll_run(left)? {
                ReadEvent::Record(run) => {
                    if let Some(record) = run.into_first()? {
                        return Ok(ReadEvent::Record(record));
                    }
                }
                ReadEvent::EndOfPartition { partition, next_offset } => {
                    return Ok(ReadEvent::EndOfPartition { partition, next_offset });
                }
                ReadEvent::Idle => return Ok(ReadEvent::Idle),
            }
            deadline.get_or_insert_with(|| Instant::now() + left);
        }
    }

    fn poll_run(&self, timeout: Duration) -> Result<ReadEvent<RecordRun<'_>>> {
        // Set once a delivery has been waited for (see `next_delivery`).
        let mut deadline: Option<Instant> = None;
        // A record or run holds the walk until it is dropped: a second poll
        // while one is held is a caller's mistake, told, not a deadlock.
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
            if walk.is_some() {
                return Ok(ReadEvent::Record(RecordRun::kshard(walk)));
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
