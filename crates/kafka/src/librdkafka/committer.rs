//! Committing offsets through the group coordinator without consuming: plain
//! commits for a group with no members (Kafka's "simple" groups, what tools and
//! stream processors that manage their own assignment do), and transactional
//! commits (`send_offsets_to_transaction`) that are committed, aborted, or left
//! open. kshard uses them to write real commits — Kafka writes the records of
//! `__consumer_offsets` itself — for `loadgen`, the demo and the tests.

use std::time::Duration;

use rdkafka::TopicPartitionList;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::producer::{BaseProducer, Producer};

use crate::client::Client;
use crate::error::{Error, Result, call};
use crate::librdkafka::context::KshardContext;

/// `(topic, partition, offset)` triples: the offsets to commit.
pub type Offsets<'a> = &'a [(&'a str, i32, i64)];

fn partition_list(offsets: Offsets<'_>) -> Result<TopicPartitionList> {
    let mut list = TopicPartitionList::with_capacity(offsets.len());
    for &(topic, partition, offset) in offsets {
        list.add_partition_offset(topic, partition, rdkafka::Offset::Offset(offset))
            .map_err(call(format!("listing {topic}/{partition}")))?;
    }
    Ok(list)
}

/// True for the errors of a coordinator that is moving or loading its state,
/// or whose connection dropped (as when `__consumer_offsets` is being created):
/// worth another try.
fn coordinator_busy(e: &rdkafka::error::KafkaError) -> bool {
    use rdkafka::types::RDKafkaErrorCode as Code;
    matches!(
        e.rdkafka_error_code(),
        Some(
            Code::NotCoordinator
                | Code::CoordinatorLoadInProgress
                | Code::CoordinatorNotAvailable
                | Code::WaitingForCoordinator
                | Code::BrokerTransportFailure
                | Code::RequestTimedOut
                | Code::OperationTimedOut
        )
    )
}

/// Commits offsets for one group that has no members (OffsetCommit with
/// generation -1), as `kafka-consumer-groups --reset-offsets` does.
pub struct OffsetCommitter {
    consumer: BaseConsumer<KshardContext>,
    group: String,
}

impl std::fmt::Debug for OffsetCommitter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OffsetCommitter").field("group", &self.group).finish_non_exhaustive()
    }
}

impl OffsetCommitter {
    /// A client that commits for `group`; it never joins the group.
    pub fn new(client: &Client, group: &str) -> Result<Self> {
        let consumer = client.create(
            "offset committer",
            &[("group.id", group), ("enable.auto.commit", "false"), ("enable.auto.offset.store", "false")],
        )?;
        Ok(OffsetCommitter { consumer, group: group.to_owned() })
    }

    /// Commits `offsets` and waits for the coordinator's answer. While the
    /// coordinator moves, loads or reconnects (a new `__consumer_offsets`, a
    /// broker that just started), the commit is retried for up to 30 s.
    pub fn commit(&self, offsets: Offsets<'_>) -> Result<()> {
        let list = partition_list(offsets)?;
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        loop {
            match self.consumer.commit(&list, CommitMode::Sync) {
                Ok(()) => return Ok(()),
                Err(e) if coordinator_busy(&e) && std::time::Instant::now() < deadline => {
                    tracing::debug!(group = %self.group, error = %e, "the coordinator is not ready; retrying");
                    std::thread::sleep(Duration::from_millis(200));
                }
                Err(e) => return Err(call(format!("committing offsets of {}", self.group))(e)),
            }
        }
    }

    /// Sends a commit without waiting for the answer, for load generation: a
    /// failure is not reported (librdkafka logs it). A [`OffsetCommitter::commit`]
    /// after a series of these returns once the coordinator has handled them
    /// all (it handles a group's commits in order).
    pub fn commit_async(&self, offsets: Offsets<'_>) -> Result<()> {
        let list = partition_list(offsets)?;
        self.consumer.commit(&list, CommitMode::Async).map_err(call(format!("committing offsets of {}", self.group)))
    }
}

/// How a transaction that commits offsets ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TransactionEnd {
    /// Committed: the offsets become the group's.
    Commit,
    /// Aborted: the offsets never count.
    Abort,
    /// Left open, as by a producer that died mid-transaction: the broker aborts
    /// it after the transaction timeout.
    LeaveOpen,
}

/// A transactional producer that commits a group's offsets inside transactions
/// (TxnOffsetCommit), as exactly-once stream processors do.
pub struct TransactionalCommitter {
    producer: BaseProducer<KshardContext>,
    /// A consumer of the group, whose metadata the transaction carries.
    group: BaseConsumer<KshardContext>,
    group_id: String,
}

impl std::fmt::Debug for TransactionalCommitter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TransactionalCommitter").field("group", &self.group_id).finish_non_exhaustive()
    }
}

impl TransactionalCommitter {
    /// Registers `transactional_id` with the transaction coordinator (fencing any
    /// earlier producer of that id) for commits of `group`.
    pub fn new(client: &Client, transactional_id: &str, group: &str, timeout: Duration) -> Result<Self> {
        let timeout_ms = timeout.as_millis().to_string();
        let producer: BaseProducer<KshardContext> = client.create(
            "transactional producer",
            &[("transactional.id", transactional_id), ("transaction.timeout.ms", &timeout_ms)],
        )?;
        producer
            .init_transactions(Duration::from_secs(30))
            .map_err(call(format!("initialising transactions of {transactional_id}")))?;
        let consumer = client.create("group metadata consumer", &[("group.id", group)])?;
        Ok(TransactionalCommitter { producer, group: consumer, group_id: group.to_owned() })
    }

    /// Commits `offsets` for the group in one transaction that ends as `end`.
    pub fn commit(&self, offsets: Offsets<'_>, end: TransactionEnd) -> Result<()> {
        let step = |what: &str| format!("{what} offsets of {} in a transaction", self.group_id);
        let list = partition_list(offsets)?;
        let metadata = self
            .group
            .group_metadata()
            .ok_or_else(|| Error::Refused { step: step("committing"), message: "no group metadata".into() })?;
        self.producer.begin_transaction().map_err(call(step("beginning to commit")))?;
        self.producer
            .send_offsets_to_transaction(&list, &metadata, Duration::from_secs(30))
            .map_err(call(step("sending")))?;
        self.end(end)
    }

    /// Ends the transaction a [`TransactionEnd::LeaveOpen`] commit left open.
    pub fn end(&self, end: TransactionEnd) -> Result<()> {
        let step = |what: &str| format!("{what} the open transaction of {}", self.group_id);
        match end {
            TransactionEnd::Commit => {
                self.producer.commit_transaction(Duration::from_secs(30)).map_err(call(step("committing")))
            }
            TransactionEnd::Abort => {
                self.producer.abort_transaction(Duration::from_secs(30)).map_err(call(step("aborting")))
            }
            TransactionEnd::LeaveOpen => Ok(()),
        }
    }
}
