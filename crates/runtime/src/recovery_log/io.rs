//! The recovery log on its partitions ([`Partitions`]: Kafka, or memory):
//! one partition per shard, read into a [`Player`], appended to record by
//! record. Async: the replica is a task, and every wait is on tokio's clock.
//!
//! [`play_to_head`] reads to the end of the partition (what a standby does to
//! leave BACKFILL, and keeps doing to tail). [`hand_off`] is how a new primary
//! takes the log over: play to the head, append a hand-off with its author on
//! that head, read back; when another writer's record took that place, do it
//! again at the new head. An append reads back only to its own record (its
//! delivery says where it landed): no request for the log's end per
//! transaction.
//!
//! A primary writes through its shard's transactional writer
//! ([`TxnWrite`], made by [`Partitions::transactional`] before the
//! hand-off, which fences the writers before it at the broker): each
//! record is a Kafka transaction of its own (with the transaction's
//! outputs, when the application has any), read back by committed readers
//! once committed. Commit markers take offsets no reader is given, so a
//! player's position jumps past them ([`Player::skip_to`], on each end of
//! the partition heard); a record missing from the chain is told by its
//! sequence number, not its offset.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::application::Output;
use crate::partitions::{LogRecord, OutBatch, OutRecord, PartitionRead, Partitions, Polled, TxnWrite, next_event};

use super::chain::Skip;

use super::player::{Played, Player};
use super::record::{Body, Mutation, SourceOffset};
use crate::store::{Store, StoreError};

/// A recovery-log failure, naming the step.
#[derive(Debug, thiserror::Error)]
pub enum LogError {
    /// Kafka failed.
    #[error("recovery log {step}: {source}")]
    Kafka {
        /// What was being done.
        step: &'static str,
        /// The cause.
        #[source]
        source: kshard_kafka::Error,
    },
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// A record larger than a recovery log takes (its topic's and the
    /// writer's `max.message.bytes`, less room for the batch's header):
    /// refused before it is written, so the log and the chain are as they
    /// were. A transaction holding one mutation this large can never be
    /// committed; the application must write smaller values.
    #[error("a recovery-log record of {bytes} bytes, past the {most} a recovery log takes: not written")]
    TooLarge {
        /// The record's size.
        bytes: usize,
        /// The most a record may be.
        most: usize,
    },
    /// Another primary has taken the log over: this one's writes are ignored.
    /// Within a deployment, a new primary of the shard; when no other member
    /// runs, another deployment writing to the same recovery-log topic.
    #[error(
        "fenced: another writer took the recovery log over (author {current:?}): a new primary of the shard, \
         or, when no other member of this deployment runs, another kshard deployment writing to the same \
         recovery-log topic (give each deployment its own)"
    )]
    Fenced {
        /// The log's author now.
        current: Option<u64>,
    },
    /// A record past the chain's next sequence number: no writer of this
    /// chain wrote it, so nothing after it will continue the chain.
    #[error(
        "the recovery log cannot continue this replica's chain: the record at offset {offset} is number {got}, \
         the next is {expected} (records are missing, or the store is of another log)"
    )]
    ChainBroken {
        /// The record's offset.
        offset: i64,
        /// The chain's next sequence number.
        expected: u64,
        /// The record's.
        got: u64,
    },
    /// Hand-offs kept losing the race to other writers.
    #[error("recovery log: {0} hand-offs appended, none read back as the last")]
    HandOffRace(u32),
    /// The end of the log was not reached in time.
    #[error("recovery log: the end of the partition was not reached within {0:?}")]
    Timeout(Duration),
    /// What the log holds is not a whole state (see `recover`).
    #[error("recovery log: {0}")]
    Incomplete(String),
}

/// The log's partition and the clients that read and write it.
#[derive(Debug)]
pub struct LogClients<'a> {
    /// The topic.
    pub topic: &'a str,
    /// The partition.
    pub partition: i32,
    /// Reads the partition (from the player's position).
    pub reader: &'a dyn PartitionRead,
    /// Appends to it, and says where its end is.
    pub partitions: &'a dyn Partitions,
    /// The shard's transactional writer, once it is primary (`None`: plain
    /// appends, as a test's player or a log no writer fences).
    pub writer: Option<&'a WriterSlot>,
}

/// A primary's transactional writer, which its appends take in turn.
pub type WriterSlot = tokio::sync::Mutex<Box<dyn TxnWrite>>;

impl LogClients<'_> {
    /// The partition's end now (its high watermark).
    async fn end(&self) -> Result<i64, LogError> {
        self.partitions
            .stable_end(self.topic, self.partition)
            .await
            .map_err(|source| LogError::Kafka { step: "finding the log's last stable offset", source })
    }

    /// Appends `record` and awaits its delivery (and, through the shard's
    /// writer, its transaction's commit), for at most `timeout`: the offset
    /// it landed at. A writer fenced at the broker is [`LogError::Fenced`].
    async fn append(
        &self,
        records: &[Vec<u8>],
        outputs: Vec<Output>,
        step: &'static str,
        timeout: Duration,
    ) -> Result<i64, LogError> {
        let kafka = |source: kshard_kafka::Error| {
            if source.is_fenced() { LogError::Fenced { current: None } } else { LogError::Kafka { step, source } }
        };
        let written = async {
            let Some(slot) = self.writer else {
                if !outputs.is_empty() {
                    return Err(kafka(kshard_kafka::Error::Refused {
                        step: "publishing a transaction's records".into(),
                        message: "records are published only through the shard's transactional writer".into(),
                    }));
                }
                let mut last = None;
                for record in records {
                    let delivery =
                        self.partitions.append(self.topic, self.partition, b"", Some(record)).map_err(kafka)?;
                    last = Some(delivery.delivered().await.map_err(kafka)?);
                }
                return last.ok_or_else(|| LogError::Kafka {
                    step,
                    source: kshard_kafka::Error::Refused { step: step.into(), message: "no record".into() },
                });
            };
            write_transaction(slot, self.topic, self.partition, records, outputs, step).await
        };
        match tokio::time::timeout(timeout, written).await {
            Ok(written) => written,
            Err(_) => Err(LogError::Timeout(timeout)),
        }
    }
}

/// The (low, high) offsets of the log's partition now. A partition the log
/// leaves out (no leader now, or no such partition) is an error: taken as
/// empty, a store would look ahead of its log, and an end of 0 read as
/// "played to the head" at once.
pub(crate) async fn ends(partitions: &dyn Partitions, topic: &str, partition: i32) -> Result<(i64, i64), LogError> {
    let step = "finding the log's ends";
    let key = [(topic.to_owned(), partition)];
    let ends = partitions.ends(&key).await.map_err(|source| LogError::Kafka { step, source })?;
    ends.get(&key[0]).copied().ok_or_else(|| LogError::Kafka {
        step,
        source: kshard_kafka::Error::Refused {
            step: format!("listing offsets of {topic}/{partition}"),
            message: "no leader, or no such partition".into(),
        },
    })
}

/// Reads the log from the player's position to the end the partition has now
/// for a reader of committed records (its last stable offset, asked first: a
/// reader cannot tell by itself that it is at the end already), offering
/// every record; returns what was played.
pub async fn play_to_head<S: Store>(
    log: &LogClients<'_>,
    player: &mut Player<S>,
    timeout: Duration,
) -> Result<Vec<Played>, LogError> {
    let end = log.end().await?;
    play_to(log, player, end, timeout).await
}

/// Offers a record read from the log to `player` (`applied` sees an applied
/// transaction's mutations and offsets): where every record meets the chain
/// rules, for every loop that plays a log.
pub(crate) fn offer<S: Store>(
    player: &mut Player<S>,
    record: &LogRecord<'_>,
    applied: impl FnOnce(&[Mutation], &[SourceOffset]),
) -> Result<Option<Played>, LogError> {
    let offset = record.offset();
    // Offsets jump past commit markers and aborted records: a record missing
    // from the chain is told by its sequence number below. A record past the chain's next: records of this chain are missing, and
    // nothing after it continues what the player holds. Not so for a player
    // that holds nothing yet (a new store, from the log's start): there, a
    // record that does not begin a chain is a writer's of another incarnation
    // of the log (a write delivered after the topic was deleted and created
    // again), which no player from the start applies; the log's one chain
    // begins at its first hand-off numbered 1.
    let empty = player.chain().is_empty();
    let played = player.offer_with(offset, record.value().unwrap_or_default(), applied)?;
    if let Some(Played::Skipped(Skip::NotNext { expected, got })) = played
        && got > expected
        && !empty
    {
        return Err(LogError::ChainBroken { offset, expected, got });
    }
    Ok(played)
}

/// Reads the log from the player's position until it reaches `end`,
/// offering every record; returns what was played.
pub(crate) async fn play_to<S: Store>(
    log: &LogClients<'_>,
    player: &mut Player<S>,
    end: i64,
    timeout: Duration,
) -> Result<Vec<Played>, LogError> {
    let deadline = Instant::now() + timeout;
    let mut played = Vec::new();
    while player.next_offset() < end {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(LogError::Timeout(timeout));
        }
        let reading = |source| LogError::Kafka { step: "reading", source };
        let event = next_event(log.reader, left.min(Duration::from_secs(1))).await.map_err(reading)?;
        match event {
            Polled::Records(mut run) => {
                while let Some(r) = run.next_record().map_err(reading)? {
                    if let Some(p) = offer(player, &r, |_, _| {})? {
                        played.push(p);
                    }
                    if player.next_offset() >= end {
                        break;
                    }
                }
            }
            // Past the markers after the last record.
            Polled::EndOfPartition { next_offset: Some(next), .. } => player.skip_to(next),
            _ => {}
        }
    }
    Ok(played)
}

/// The words a replica's error begins with when it was fenced
/// ([`LogError::Fenced`]), as its status in the keyspace carries them.
pub const FENCED: &str = "fenced: another writer took the recovery log over";

/// The largest record appended: what a recovery-log topic and the writer
/// take ([`crate::recovery_log::topic::MAX_RECORD_BYTES`]), less 4 KiB for
/// the record batch's and the record's headers.
const MOST_RECORD_BYTES: usize = super::topic::MAX_RECORD_BYTES as usize - 4096;

/// Writes `records` to the log's `topic`/`partition` and `outputs` to
/// theirs, in one Kafka transaction through `writer`: the last record's
/// offset once committed. A writer fenced at the broker is [`LogError::Fenced`].
pub(crate) async fn write_transaction(
    writer: &WriterSlot,
    topic: &str,
    partition: i32,
    records: &[Vec<u8>],
    outputs: Vec<Output>,
    step: &'static str,
) -> Result<i64, LogError> {
    let kafka = |source: kshard_kafka::Error| {
        if source.is_fenced() { LogError::Fenced { current: None } } else { LogError::Kafka { step, source } }
    };
    let mut writer = writer.lock().await;
    // Every partition in one call, then the outputs, each partition's
    // batches in order, then the log's records, each a batch of its own (a
    // topic's size limit is per batch); the last one's offset is the caller's.
    let mut partitions: Vec<(Arc<str>, i32)> = outputs.iter().map(|o| (Arc::clone(&o.topic), o.partition)).collect();
    partitions.sort_unstable();
    partitions.dedup();
    let mut named: Vec<(&str, i32)> = partitions.iter().map(|(t, p)| (&**t, *p)).collect();
    named.push((topic, partition));
    writer.add_partitions(&named).await.map_err(kafka)?;
    for o in outputs {
        writer.send(&o.topic, o.partition, o.batch).await.map_err(kafka)?;
    }
    let mut last = None;
    for record in records {
        let out = OutBatch::of(&[OutRecord::new(Some(b""), Some(record))]);
        last = Some(writer.send(topic, partition, out).await.map_err(kafka)?);
    }
    let last = last.ok_or_else(|| LogError::Kafka {
        step,
        source: kshard_kafka::Error::Refused { step: step.into(), message: "no record".into() },
    })?;
    let offset = last.delivered().await.map_err(kafka)?;
    writer.commit().await.map_err(kafka)?;
    Ok(offset)
}

/// The most bytes of mutations in one record of a transaction split in
/// parts: under a topic's default limit of 1 MiB a batch, with room for the
/// batch's and the record's headers.
const PART_BYTES: usize = 900 * 1024;

/// `body` as the records that carry it: itself, or, for a transaction whose
/// mutations pass [`PART_BYTES`], parts of at most that many bytes (one
/// mutation larger goes alone) and a last record with the rest and the
/// source offsets.
fn in_parts(body: Body) -> Vec<Body> {
    let Body::Transaction { mutations, offsets } = body else { return vec![body] };
    let size = |m: &Mutation| match m {
        Mutation::Put { key, value } => 9 + key.len() + value.len(),
        Mutation::Delete { key } => 5 + key.len(),
    };
    if mutations.iter().map(size).sum::<usize>() <= PART_BYTES {
        return vec![Body::Transaction { mutations, offsets }];
    }
    let mut chunks: Vec<Vec<Mutation>> = vec![Vec::new()];
    let mut bytes = 0;
    for m in mutations {
        let n = size(&m);
        if bytes + n > PART_BYTES && chunks.last().is_some_and(|c| !c.is_empty()) {
            chunks.push(Vec::new());
            bytes = 0;
        }
        bytes += n;
        if let Some(chunk) = chunks.last_mut() {
            chunk.push(m);
        }
    }
    let last = chunks.pop().unwrap_or_default();
    let mut bodies: Vec<Body> = chunks.into_iter().map(|mutations| Body::TransactionPart { mutations }).collect();
    bodies.push(Body::Transaction { mutations: last, offsets });
    bodies
}

/// Hand-offs a new primary appends before giving up (each lost to a racing
/// writer): a few suffice when two promotions race.
const MAX_HAND_OFFS: u32 = 10;

/// Takes the log over for `author`: returns how many hand-offs it appended
/// (more than one when other writers raced; 0 when it already held the log).
pub async fn hand_off<S: Store>(
    log: &LogClients<'_>,
    player: &mut Player<S>,
    author: u64,
    timeout: Duration,
) -> Result<u32, LogError> {
    let mut attempts = 0;
    play_to_head(log, player, timeout).await?;
    // Restarting as the author it already is: nothing to do.
    if player.chain().author() == Some(author) {
        return Ok(attempts);
    }
    loop {
        attempts += 1;
        if attempts > MAX_HAND_OFFS {
            return Err(LogError::HandOffRace(attempts - 1));
        }
        let record = player.chain().next(author, Body::HandOff).encode();
        let offset = log.append(&[record], Vec::new(), "appending a hand-off", timeout).await?;
        // Read back through it. Ours was applied when the player applied a
        // hand-off by this author (one by someone else before it fences us,
        // and our writes will be skipped from there).
        let played = play_to(log, player, offset + 1, timeout).await?;
        if played.contains(&Played::HandOff { author }) {
            return Ok(attempts);
        }
    }
}

/// Commits one consumer transaction as `author`: appends its mutations and
/// source offsets in one record on the head of the log, and reads back to it —
/// the store changes as every standby's does, through the player. Fails with
/// [`LogError::Fenced`] when another primary has handed off since: the record
/// was skipped, and this primary must stop.
pub async fn commit<S: Store>(
    log: &LogClients<'_>,
    player: &mut Player<S>,
    author: u64,
    mutations: Vec<Mutation>,
    offsets: Vec<SourceOffset>,
    timeout: Duration,
) -> Result<(), LogError> {
    append(log, player, author, Body::Transaction { mutations, offsets }, Vec::new(), timeout).await
}

/// [`commit`] with the records the transaction published: written in the
/// same Kafka transaction as its log record, through the shard's writer.
pub(crate) async fn commit_with<S: Store>(
    log: &LogClients<'_>,
    player: &mut Player<S>,
    author: u64,
    (mutations, offsets): (Vec<Mutation>, Vec<SourceOffset>),
    outputs: Vec<Output>,
    timeout: Duration,
) -> Result<(), LogError> {
    append(log, player, author, Body::Transaction { mutations, offsets }, outputs, timeout).await
}

/// Appends one record of `body` as `author` on the head of the log (with
/// `outputs`, in one Kafka transaction) and reads back to it;
/// [`LogError::Fenced`] when it was not applied.
pub(crate) async fn append<S: Store>(
    log: &LogClients<'_>,
    player: &mut Player<S>,
    author: u64,
    body: Body,
    outputs: Vec<Output>,
    timeout: Duration,
) -> Result<(), LogError> {
    let (records, seq) = records_of(player.chain(), author, body)?;
    // The records' own delivery, not the whole (shared) writer's: a record
    // that was not written is that error, not "fenced" when it is not read back.
    let offset = log.append(&records, outputs, "appending", timeout).await?;
    read_back(log, player, author, seq, offset, timeout).await
}

/// The records that carry `body` as `author`'s next on `chain` (a large
/// transaction's parts and last record, each continuing the chain), and the
/// last one's sequence number; [`LogError::Fenced`] when `author` does not
/// hold the chain.
pub(crate) fn records_of(
    chain: &super::chain::Chain,
    author: u64,
    body: Body,
) -> Result<(Vec<Vec<u8>>, u64), LogError> {
    records_keeping(chain, author, body).map(|e| (e.records, e.seq))
}

/// A body's records, ready to append, and the mutations they carry.
#[derive(Debug)]
pub(crate) struct Encoded {
    /// The records' bytes, in order.
    pub(crate) records: Vec<Vec<u8>>,
    /// The last one's sequence number.
    pub(crate) seq: u64,
    /// The mutations the records carry, in order.
    pub(crate) mutations: Vec<Mutation>,
}

/// [`records_of`], with the mutations `body` carried handed back once
/// encoded (a primary reads its next transaction over them: moved, not
/// copied).
pub(crate) fn records_keeping(chain: &super::chain::Chain, author: u64, body: Body) -> Result<Encoded, LogError> {
    if chain.author() != Some(author) {
        return Err(LogError::Fenced { current: chain.author() });
    }
    let mut chain = chain.clone();
    let mut records = Vec::new();
    let mut carried = Vec::new();
    let mut seq = 0;
    for body in in_parts(body) {
        let record = chain.next(author, body);
        let bytes = record.encode();
        if bytes.len() > MOST_RECORD_BYTES {
            return Err(LogError::TooLarge { bytes: bytes.len(), most: MOST_RECORD_BYTES });
        }
        seq = record.seq;
        // Our own record continues our own view of the chain.
        let _ = chain.offer(&record, &bytes);
        records.push(bytes);
        if let Body::Transaction { mutations, .. } | Body::TransactionPart { mutations } = record.body {
            carried.extend(mutations);
        }
    }
    Ok(Encoded { records, seq, mutations: carried })
}

/// Reads the log back through `offset` (where `author`'s record numbered
/// `seq` landed): applied when the chain went through it with `author` as
/// its author, else [`LogError::Fenced`].
pub(crate) async fn read_back<S: Store>(
    log: &LogClients<'_>,
    player: &mut Player<S>,
    author: u64,
    seq: u64,
    offset: i64,
    timeout: Duration,
) -> Result<(), LogError> {
    play_to(log, player, offset + 1, timeout).await?;
    if player.chain().seq() >= seq && player.chain().author() == Some(author) {
        Ok(())
    } else {
        Err(LogError::Fenced { current: player.chain().author() })
    }
}
