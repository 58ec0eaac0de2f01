//! [`Producer`]: one producer id on a [`Writer`] — idempotent (every batch
//! written once and in order per partition, through retries), or
//! transactional (its batches become visible to `read_committed` readers
//! together, when [`Producer::commit`] ends the transaction, or never).
//!
//! A transactional producer is made with [`Writer::transactional`]:
//! InitProducerId for its transactional id, which bumps the id's epoch —
//! the transaction coordinator then aborts any transaction an older
//! producer of the same id left open, and the brokers refuse that older
//! producer's writes from then on (PRODUCER_FENCED, INVALID_PRODUCER_EPOCH).
//! That is how a new primary fences a zombie at the broker.
//!
//! Transaction protocol v1 (KIP-98), which Kafka 3.x and 4.x both speak:
//! AddPartitionsToTxn (v3) before a partition's first batch in a
//! transaction, Produce (v9) with the transactional id, EndTxn (v3).
//! InitProducerId v4, FindCoordinator v4. A transaction that fails is
//! abandoned with [`Producer::abort`], as Kafka's own producer does it:
//! its batches on the wire answered, EndTxn (abort), then the epoch bumped
//! (InitProducerId with the current id and epoch, KIP-360), so sequences
//! start over. (Kafka 4 would also take the bump alone, aborting the
//! transaction itself; Kafka 3 fences the producer then: it raises the
//! epoch to abort, and takes the retried bump for a zombie's.)

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

use kafka_protocol::messages::add_partitions_to_txn_request::AddPartitionsToTxnTopic;
use kafka_protocol::messages::{
    AddPartitionsToTxnRequest, AddPartitionsToTxnResponse, EndTxnRequest, EndTxnResponse, FindCoordinatorRequest,
    FindCoordinatorResponse, InitProducerIdRequest, InitProducerIdResponse, ProducerId, TopicName, TransactionalId,
};
use kafka_protocol::protocol::{Encodable, HeaderVersion, StrBytes};

use crate::delivery::{Delivered, Delivery};
use crate::error::{Error, Result};
use crate::wire::answer_shape::Answer;
use crate::wire::broker_link::broker_address;
use crate::wire::out_batch::OutBatch;
use crate::wire::produce::{Identity, sequence_after};
use crate::wire::writer::{Shared, Writer, delivery};

const INIT_PRODUCER_ID_VERSION: i16 = 4;
const ADD_PARTITIONS_VERSION: i16 = 3;
const END_TXN_VERSION: i16 = 3;
const FIND_COORDINATOR_VERSION: i16 = 4;

/// How long one coordinator call may take.
const CALL_TIMEOUT: Duration = Duration::from_secs(10);

/// The default transaction timeout (Kafka's `transaction.timeout.ms`): the
/// coordinator aborts a transaction left open longer.
pub const TRANSACTION_TIMEOUT: Duration = Duration::from_secs(60);

/// A producer id of a [`Writer`] (see the module's doc).
pub struct Producer {
    shared: Arc<Shared>,
    /// Its lanes in the writer: a new number after each abort, so that a
    /// batch of the old epoch failing never fails a new one queued behind it.
    lane: u64,
    transactional_id: Option<Arc<str>>,
    identity: Identity,
    transaction_timeout: Duration,
    /// The transaction coordinator's `host:port`, once found.
    coordinator: Option<String>,
    /// Each partition's next sequence, for this epoch.
    sequences: HashMap<(Arc<str>, i32), i32>,
    /// The open transaction: partitions added to it, and its batches.
    open: Option<Open>,
    /// Fenced by a newer producer of the same transactional id: for good.
    fenced: Option<i16>,
}

#[derive(Default)]
struct Open {
    added: BTreeSet<(Arc<str>, i32)>,
    sent: Vec<Delivery>,
}

impl std::fmt::Debug for Producer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Producer")
            .field("transactional_id", &self.transactional_id)
            .field("identity", &self.identity)
            .finish_non_exhaustive()
    }
}

impl Writer {
    /// An idempotent producer (InitProducerId without a transactional id:
    /// the principal needs IdempotentWrite, or Write on a topic since Kafka 3.0).
    pub async fn idempotent(&self) -> Result<Producer> {
        let mut producer = Producer::new(self.shared(), None, TRANSACTION_TIMEOUT);
        producer.init(None).await?;
        Ok(producer)
    }

    /// The producer of `transactional_id`, fencing every earlier one: their
    /// open transaction is aborted and their writes refused from now on.
    /// The principal needs Write on the transactional id.
    pub async fn transactional(&self, transactional_id: &str, transaction_timeout: Duration) -> Result<Producer> {
        let mut producer = Producer::new(self.shared(), Some(Arc::from(transactional_id)), transaction_timeout);
        producer.init(None).await?;
        Ok(producer)
    }
}

impl Producer {
    fn new(shared: &Arc<Shared>, transactional_id: Option<Arc<str>>, transaction_timeout: Duration) -> Self {
        Producer {
            lane: shared.next_producer(),
            shared: Arc::clone(shared),
            transactional_id,
            identity: Identity { id: -1, epoch: -1 },
            transaction_timeout,
            coordinator: None,
            sequences: HashMap::new(),
            open: None,
            fenced: None,
        }
    }

    /// The producer id and epoch the broker gave.
    pub fn id_and_epoch(&self) -> (i64, i16) {
        (self.identity.id, self.identity.epoch)
    }

    /// Whether a transaction is open (a batch was sent or a partition added since the last commit).
    pub fn in_transaction(&self) -> bool {
        self.open.is_some()
    }

    /// Adds `partitions` to the open transaction (opening one), in one call
    /// to the coordinator; [`Producer::send`] adds a partition not added
    /// yet by itself. Nothing for an idempotent producer.
    pub async fn add_partitions(&mut self, partitions: &[(&str, i32)]) -> Result<()> {
        self.usable()?;
        let Some(id) = self.transactional_id.clone() else { return Ok(()) };
        let open = self.open.get_or_insert_with(Open::default);
        let mut wanted: Vec<(Arc<str>, i32)> =
            partitions.iter().map(|(t, p)| (Arc::<str>::from(*t), *p)).filter(|tp| !open.added.contains(tp)).collect();
        wanted.sort();
        wanted.dedup();
        if wanted.is_empty() {
            return Ok(());
        }
        let mut topics: Vec<AddPartitionsToTxnTopic> = Vec::new();
        for (topic, partition) in &wanted {
            match topics.iter_mut().find(|t| t.name.0.as_str() == &**topic) {
                Some(t) => t.partitions.push(*partition),
                None => topics.push(
                    AddPartitionsToTxnTopic::default()
                        .with_name(TopicName(StrBytes::from_string(topic.to_string())))
                        .with_partitions(vec![*partition]),
                ),
            }
        }
        let request = AddPartitionsToTxnRequest::default()
            .with_v3_and_below_transactional_id(TransactionalId(StrBytes::from_string(id.to_string())))
            .with_v3_and_below_producer_id(ProducerId(self.identity.id))
            .with_v3_and_below_producer_epoch(self.identity.epoch)
            .with_v3_and_below_topics(topics);
        let step = format!("adding {} partition(s) to transaction {id}", wanted.len());
        self.retrying(
            &step,
            |_| None,
            request,
            ADD_PARTITIONS_VERSION,
            |answer: &AddPartitionsToTxnResponse| {
                // Every partition's code: the first that is not 0 (others may
                // say OPERATION_NOT_ATTEMPTED because of it).
                let codes = answer.results_by_topic_v3_and_below.iter().flat_map(|t| &t.results_by_partition);
                let codes: Vec<i16> = codes.map(|p| p.partition_error_code).collect();
                codes
                    .iter()
                    .copied()
                    .find(|c| *c != 0 && *c != 55)
                    .or_else(|| codes.into_iter().find(|c| *c != 0))
                    .unwrap_or(0)
            },
        )
        .await?;
        if let Some(open) = &mut self.open {
            open.added.extend(wanted);
        }
        Ok(())
    }

    /// Writes `records` to `topic`/`partition` as one batch (in the open
    /// transaction, opening one, for a transactional producer): returns the
    /// first record's delivery — the others land at the offsets after it.
    /// Queued at once; [`Producer::commit`] waits for every batch sent.
    pub async fn send(&mut self, topic: &str, partition: i32, records: OutBatch) -> Result<Delivery> {
        self.usable()?;
        if records.is_empty() {
            return Err(Error::Refused {
                step: format!("writing to {topic}/{partition}"),
                message: "no records".into(),
            });
        }
        if self.transactional_id.is_some() {
            self.add_partitions(&[(topic, partition)]).await?;
        }
        let topic: Arc<str> = Arc::from(topic);
        let sequence = self.sequences.entry((Arc::clone(&topic), partition)).or_insert(0);
        let count = records.len();
        let batch = records.seal(self.identity, *sequence, self.transactional_id.is_some());
        *sequence = sequence_after(*sequence, count);
        let slot = Delivered::tracked();
        self.shared.push(self.lane, self.transactional_id.clone(), &topic, partition, batch, Arc::clone(&slot));
        if let Some(open) = &mut self.open {
            open.sent.push(delivery(&slot, 0, &topic, partition));
        }
        Ok(delivery(&slot, 0, &topic, partition))
    }

    /// Waits for every batch of the open transaction, then commits it: its
    /// records become visible to `read_committed` readers, all together.
    /// Nothing to do when no transaction is open. An error leaves the
    /// transaction to [`Producer::abort`] (or to the coordinator's timeout).
    pub async fn commit(&mut self) -> Result<()> {
        self.end(true).await
    }

    /// Abandons the open transaction, if any: its records are never visible
    /// to `read_committed` readers. Its batches not yet sent are dropped,
    /// those on the wire waited for (answered or failed, within the
    /// request timeout: none lands after the abort), then the coordinator
    /// aborts it (EndTxn). Then bumps the producer's epoch (a failed batch
    /// may have left the broker's sequence where this producer cannot know
    /// it), so this producer goes on with sequences from 0. An error leaves
    /// the transaction to abort again (or to the coordinator's timeout).
    pub async fn abort(&mut self) -> Result<()> {
        self.usable()?;
        if let Some(open) = self.open.take() {
            self.shared.drop_producer(self.lane, "the transaction was aborted");
            self.lane = self.shared.next_producer();
            for sent in &open.sent {
                let _ = sent.delivered().await;
            }
            let added = open.added;
            if let Err(e) = self.end_at_coordinator(false).await {
                // INVALID_TXN_STATE: the coordinator has no transaction
                // open (it timed out and was aborted, or no partition was
                // added yet): nothing left to abort.
                if !matches!(e, Error::Kafka { code: 48, .. }) {
                    if self.fenced.is_none() {
                        self.open = Some(Open { added, sent: Vec::new() });
                    }
                    return Err(e);
                }
            }
        } else {
            self.shared.drop_producer(self.lane, "the transaction was aborted");
            self.lane = self.shared.next_producer();
        }
        let current = self.identity;
        self.init(Some(current)).await
    }

    async fn end(&mut self, commit: bool) -> Result<()> {
        self.usable()?;
        let Some(open) = self.open.take() else { return Ok(()) };
        let mut failed = None;
        for sent in &open.sent {
            if let Err(e) = sent.delivered().await {
                failed = Some(e);
                break;
            }
        }
        if let Some(e) = failed {
            if e.is_fenced() {
                self.fenced = Some(47);
            }
            // Open still, to abort (its batches with it: some may be on
            // the wire still).
            self.open = Some(open);
            return Err(e);
        }
        let ended = self.end_at_coordinator(commit).await;
        if ended.is_err() && self.fenced.is_none() {
            self.open = Some(Open { added: open.added, sent: Vec::new() });
        }
        ended
    }

    /// EndTxn: the coordinator commits or aborts the transaction (nothing
    /// for an idempotent producer).
    async fn end_at_coordinator(&mut self, commit: bool) -> Result<()> {
        let Some(id) = self.transactional_id.clone() else { return Ok(()) };
        let request = EndTxnRequest::default()
            .with_transactional_id(TransactionalId(StrBytes::from_string(id.to_string())))
            .with_producer_id(ProducerId(self.identity.id))
            .with_producer_epoch(self.identity.epoch)
            .with_committed(commit);
        let step = format!("{} transaction {id}", if commit { "committing" } else { "aborting" });
        self.retrying(&step, |_| None, request, END_TXN_VERSION, |a: &EndTxnResponse| a.error_code).await.map(|_| ())
    }

    /// InitProducerId: a new producer id (idempotent), or the transactional
    /// id's next epoch (`current`: this producer's, to bump it without
    /// being taken for a zombie).
    async fn init(&mut self, current: Option<Identity>) -> Result<()> {
        let current = current.unwrap_or(Identity { id: -1, epoch: -1 });
        let timeout_ms = i32::try_from(self.transaction_timeout.as_millis()).unwrap_or(i32::MAX);
        let request = InitProducerIdRequest::default()
            .with_transactional_id(
                self.transactional_id.as_ref().map(|id| TransactionalId(StrBytes::from_string(id.to_string()))),
            )
            .with_transaction_timeout_ms(timeout_ms)
            .with_producer_id(ProducerId(current.id))
            .with_producer_epoch(current.epoch);
        let step = match &self.transactional_id {
            Some(id) => format!("initializing the producer of transactional id {id}"),
            None => "initializing an idempotent producer".to_owned(),
        };
        let answer = if self.transactional_id.is_some() {
            self.retrying(&step, |_| None, request, INIT_PRODUCER_ID_VERSION, |a: &InitProducerIdResponse| a.error_code)
                .await?
        } else {
            // Asked again at each try: its turns go round the brokers.
            self.retrying(
                &step,
                |me: &Self| Some(me.shared.any_broker()),
                request,
                INIT_PRODUCER_ID_VERSION,
                |a: &InitProducerIdResponse| a.error_code,
            )
            .await?
        };
        self.identity = Identity { id: answer.producer_id.0, epoch: answer.producer_epoch };
        self.sequences.clear();
        Ok(())
    }

    /// Refuses to go on once fenced.
    fn usable(&self) -> Result<()> {
        match self.fenced {
            Some(code) => Err(Error::Kafka {
                step: format!("writing as transactional id {}", self.transactional_id.as_deref().unwrap_or("(none)")),
                code,
            }),
            None => Ok(()),
        }
    }

    /// `request` on the broker `broker` names (`None`: the transaction
    /// coordinator, found first), retried on Kafka's retriable answers and
    /// on lost connections until the writer's delivery timeout.
    async fn retrying<R, A>(
        &mut self,
        step: &str,
        broker: impl Fn(&Self) -> Option<String>,
        request: R,
        version: i16,
        code: impl Fn(&A) -> i16,
    ) -> Result<A>
    where
        R: Encodable + HeaderVersion + Clone + Send + 'static,
        A: Answer + Send + 'static,
    {
        let deadline = tokio::time::Instant::now() + self.shared.delivery_timeout;
        let mut retry = crate::retry::Retry::default();
        loop {
            let address = match broker(self) {
                Some(address) => Ok(address),
                None => self.coordinator().await,
            };
            let outcome = match address {
                Ok(address) => {
                    let request = request.clone();
                    let answer = self
                        .shared
                        .call(&address, move |link| link.call::<R, A>(&request, version, CALL_TIMEOUT))
                        .await
                        .unwrap_or_else(|_| {
                            Err(Error::Unreachable { step: step.to_owned(), message: "the writer closed".into() })
                        });
                    answer.and_then(|a| match code(&a) {
                        0 => Ok(a),
                        code => Err(Error::Kafka { step: format!("{step} on {address}"), code }),
                    })
                }
                Err(e) => Err(e),
            };
            let e = match outcome {
                Ok(answer) => return Ok(answer),
                Err(e) => e,
            };
            match &e {
                Error::Kafka { code: code @ (47 | 90), .. } => {
                    self.fenced = Some(*code);
                    return Err(e);
                }
                // NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE, COORDINATOR_LOAD_IN_PROGRESS.
                Error::Kafka { code: 14..=16, .. } | Error::Unreachable { .. } => self.coordinator = None,
                _ => {}
            }
            if !e.is_retriable() || tokio::time::Instant::now() >= deadline {
                return Err(e);
            }
            tracing::debug!(error = %e, "{step}: trying again");
            // CONCURRENT_TRANSACTIONS clears within milliseconds: the last
            // transaction's markers are being written.
            let wait =
                if matches!(e, Error::Kafka { code: 51, .. }) { Duration::from_millis(10) } else { retry.next_wait() };
            tokio::time::sleep(wait.min(deadline.saturating_duration_since(tokio::time::Instant::now()))).await;
        }
    }

    /// The transaction coordinator's `host:port` (FindCoordinator on any broker).
    async fn coordinator(&mut self) -> Result<String> {
        if let Some(address) = &self.coordinator {
            return Ok(address.clone());
        }
        let id = self.transactional_id.clone().unwrap_or_else(|| Arc::from(""));
        let request = FindCoordinatorRequest::default()
            .with_key_type(1)
            .with_coordinator_keys(vec![StrBytes::from_string(id.to_string())]);
        let any = self.shared.any_broker();
        let step = format!("finding the transaction coordinator of {id}");
        let answer: FindCoordinatorResponse = self
            .shared
            .call(&any, move |link| link.call(&request, FIND_COORDINATOR_VERSION, CALL_TIMEOUT))
            .await
            .unwrap_or_else(|_| Err(Error::Unreachable { step: step.clone(), message: "the writer closed".into() }))?;
        let found = answer
            .coordinators
            .first()
            .ok_or_else(|| Error::Refused { step: step.clone(), message: "the broker named no coordinator".into() })?;
        if found.error_code != 0 {
            return Err(Error::Kafka { step, code: found.error_code });
        }
        let address = broker_address(found.host.as_str(), found.port);
        self.coordinator = Some(address.clone());
        Ok(address)
    }
}
