//! [`Partitions`] on Kafka: readers are `kshard-kafka`'s (sharing one
//! connection per broker among a member's replicas); the logs' ends come
//! from kshard's own admin client ([`kshard_kafka::WireAdmin`]), and
//! transactional writers are kshard's own ([`kshard_kafka::Writer`], one per
//! member, its connections shared by every shard's producer). One librdkafka
//! writer and admin client serve every replica of the member for the rest
//! (plain appends, DeleteRecords) and where the settings' security is one
//! only librdkafka speaks, made on first use (a librdkafka client costs
//! threads and buffers, and a member may hold hundreds of replicas). The
//! admin calls run on tokio's blocking pool, `ADMIN_CALLS` at a time.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use kshard_kafka::{
    Admin, BrokerAdmin, Client, Error, Isolation, PartitionReader, Producer, ReadEvent, RecordWriter,
    TRANSACTION_TIMEOUT, TopicPartition, Writer,
};

use super::{
    Appended, AppendedOf, Ends, OutBatch, PartitionRead, Partitions, Pending, Polled, Readable, RecordRun, TxnWrite,
};

/// Admin calls of one member on tokio's blocking pool at once. kshard's
/// admin client makes one request at a time anyway (its connections are
/// behind one lock): without a bound, the replicas of a member starting
/// together (50 of the offsets topic) each held a blocking thread waiting
/// for it, 65 threads and 5 MB more than plain `serve` at a restart.
const ADMIN_CALLS: usize = 4;

/// Kafka, through one [`Client`].
pub struct KafkaPartitions {
    kafka: Client,
    /// Each admin call's timeout.
    timeout: Duration,
    /// Admin calls under way (see `ADMIN_CALLS`).
    admin_calls: Arc<tokio::sync::Semaphore>,
    clients: Mutex<Option<(Arc<RecordWriter>, Arc<Admin>)>>,
    /// kshard's own writer, made on first use (`None` inside: the settings'
    /// security is one only librdkafka speaks).
    writer: std::sync::OnceLock<Option<Arc<Writer>>>,
    /// kshard's own admin client, for the logs' ends (`None` inside:
    /// librdkafka's admin client serves, its high watermarks as last stable
    /// offsets, as they are without transactions).
    wire_admin: std::sync::OnceLock<Option<Arc<kshard_kafka::WireAdmin>>>,
}

impl std::fmt::Debug for KafkaPartitions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KafkaPartitions").field("brokers", &self.kafka.brokers()).finish_non_exhaustive()
    }
}

impl KafkaPartitions {
    /// Kafka through `kafka`, each admin call waiting up to `timeout`.
    pub fn new(kafka: impl Into<Client>, timeout: Duration) -> Self {
        KafkaPartitions {
            kafka: kafka.into(),
            timeout,
            admin_calls: Arc::new(tokio::sync::Semaphore::new(ADMIN_CALLS)),
            clients: Mutex::new(None),
            writer: std::sync::OnceLock::new(),
            wire_admin: std::sync::OnceLock::new(),
        }
    }

    /// kshard's own admin client, made on first use (`None`: the settings'
    /// security is one only librdkafka speaks).
    fn wire_admin(&self) -> Option<Arc<kshard_kafka::WireAdmin>> {
        self.wire_admin
            .get_or_init(|| kshard_kafka::WireAdmin::new(&self.kafka, self.timeout).ok().flatten().map(Arc::new))
            .clone()
    }

    /// Runs a blocking admin call on tokio's blocking pool, at most
    /// `ADMIN_CALLS` at once: a replica's task waits for the broker
    /// without holding a runtime thread.
    async fn blocking<T: Send + 'static>(
        &self,
        call: impl FnOnce() -> Result<T, Error> + Send + 'static,
    ) -> Result<T, Error> {
        let ended = |e: &dyn std::fmt::Display| Error::Refused {
            step: "an admin call".into(),
            message: format!("its task ended: {e}"),
        };
        // Never closed: an error is impossible, but said rather than unwrapped.
        let permit = Arc::clone(&self.admin_calls).acquire_owned().await.map_err(|e| ended(&e))?;
        // The call holds the permit, not this task: a task dropped while its
        // call runs on does not let a fifth one start beside it.
        let held = move || {
            let _permit = permit;
            call()
        };
        tokio::task::spawn_blocking(held).await.unwrap_or_else(|e| Err(ended(&e)))
    }

    /// The admin client for metadata and the logs' ends: kshard's own where
    /// it speaks the settings' security (a member's replicas then start
    /// without any librdkafka client: threads and buffers), else librdkafka's.
    fn broker_admin(&self) -> Result<Arc<dyn BrokerAdmin + Send + Sync>, Error> {
        match self.wire_admin() {
            Some(wire) => Ok(wire),
            None => Ok(self.clients()?.1),
        }
    }

    /// The member's writer and admin client, made on first use.
    fn clients(&self) -> Result<(Arc<RecordWriter>, Arc<Admin>), Error> {
        let mut clients = self.clients.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(c) = clients.as_ref() {
            return Ok(c.clone());
        }
        let made = (
            Arc::new(RecordWriter::for_existing_topics(&self.kafka)?),
            Arc::new(Admin::new(&self.kafka, self.timeout)?),
        );
        *clients = Some(made.clone());
        Ok(made)
    }
}

impl Partitions for KafkaPartitions {
    fn reader(
        &self,
        topic: &str,
        start: &[(i32, Option<i64>)],
        queue_kbytes: u32,
        isolation: Isolation,
    ) -> Result<Box<dyn PartitionRead>, Error> {
        Ok(Box::new(PartitionReader::with_isolation(&self.kafka, topic, start, queue_kbytes, isolation)?))
    }

    fn append(&self, topic: &str, partition: i32, key: &[u8], value: Option<&[u8]>) -> Result<Appended, Error> {
        let (writer, _) = self.clients()?;
        Ok(Appended(AppendedOf::Kafka(writer.append(topic, partition, key, value)?)))
    }

    fn ends<'a>(&'a self, partitions: &'a [(String, i32)]) -> Pending<'a, Ends> {
        let partitions: Vec<TopicPartition> =
            partitions.iter().map(|(t, p)| TopicPartition::new(t.clone(), *p)).collect();
        Box::pin(async move {
            let admin = self.broker_admin()?;
            let ends = self.blocking(move || admin.watermarks(&partitions)).await?;
            Ok(ends.into_iter().map(|(tp, marks)| ((tp.topic, tp.partition), marks)).collect())
        })
    }

    fn partition_count<'a>(&'a self, topic: &'a str) -> Pending<'a, Option<i32>> {
        let topic = topic.to_owned();
        Box::pin(async move {
            let admin = self.broker_admin()?;
            self.blocking(move || admin.partition_count(&topic)).await
        })
    }

    fn delete_before<'a>(&'a self, topic: &'a str, partition: i32, offset: i64) -> Pending<'a, i64> {
        let topic = topic.to_owned();
        Box::pin(async move {
            let admin = self.clients()?.1;
            self.blocking(move || admin.delete_records(&topic, partition, offset)).await
        })
    }

    fn stable_end<'a>(&'a self, topic: &'a str, partition: i32) -> Pending<'a, i64> {
        Box::pin(async move {
            let Some(wire) = self.wire_admin() else {
                let key = [(topic.to_owned(), partition)];
                let ends = self.ends(&key).await?;
                return ends.get(&key[0]).map(|(_, high)| *high).ok_or_else(|| Error::Refused {
                    step: format!("listing offsets of {topic}/{partition}"),
                    message: "no leader, or no such partition".into(),
                });
            };
            let tp = TopicPartition::new(topic.to_owned(), partition);
            let key = tp.clone();
            let found = self.blocking(move || wire.stable_ends(&[tp])).await?;
            found.get(&key).copied().ok_or_else(|| Error::Refused {
                step: format!("listing the last stable offset of {topic}/{partition}"),
                message: "no leader, or no such partition".into(),
            })
        })
    }

    fn transactional<'a>(&'a self, transactional_id: &'a str) -> Pending<'a, Box<dyn TxnWrite>> {
        Box::pin(async move {
            let writer = match self.writer.get_or_init(|| match Writer::new(&self.kafka) {
                Ok(writer) => writer.map(Arc::new),
                Err(e) => {
                    tracing::error!(error = %e, "kshard's writer could not be made");
                    None
                }
            }) {
                Some(writer) => Arc::clone(writer),
                None => {
                    // Security only librdkafka speaks (GSSAPI, OAUTHBEARER,
                    // keystores): its idempotent producer, without Kafka
                    // transactions — the chain rule alone fences a zombie,
                    // and nothing may be published.
                    tracing::warn!(
                        transactional_id,
                        "kshard's writer does not speak these settings' security: recovery-log records are written without Kafka transactions, and applications may not publish"
                    );
                    let (writer, _) = self.clients()?;
                    return Ok(Box::new(PlainAppends { writer, sent: Vec::new() }) as Box<dyn TxnWrite>);
                }
            };
            let producer = writer.transactional(transactional_id, TRANSACTION_TIMEOUT).await?;
            Ok(Box::new(KafkaTxn { producer, _writer: writer }) as Box<dyn TxnWrite>)
        })
    }
}

/// Appends through librdkafka's idempotent producer, as a transactional
/// writer that has no transactions: what is sent is written whatever
/// happens after; "commit" waits for it. Only for the recovery log's own
/// records (outputs are refused before they get here).
#[derive(Debug)]
struct PlainAppends {
    writer: Arc<RecordWriter>,
    /// Sent since the last commit, to wait for.
    sent: Vec<kshard_kafka::Delivery>,
}

impl TxnWrite for PlainAppends {
    fn add_partitions<'a>(&'a mut self, partitions: &'a [(&'a str, i32)]) -> Pending<'a, ()> {
        // Only the log's own partition: anything else would be an output.
        let outputs = partitions.len() > 1;
        Box::pin(async move {
            if outputs {
                return Err(Error::Refused {
                    step: "publishing a transaction's records".into(),
                    message: "publishing needs kshard's own client (PLAINTEXT, TLS, SASL PLAIN or SCRAM)".into(),
                });
            }
            Ok(())
        })
    }

    fn send<'a>(&'a mut self, topic: &'a str, partition: i32, records: OutBatch) -> Pending<'a, Appended> {
        Box::pin(async move {
            // The first record's delivery goes back (its offset is the
            // caller's); the others are waited for at the commit.
            let mut first = None;
            for r in records.records()? {
                let delivery =
                    self.writer.append(topic, partition, r.key.as_deref().unwrap_or_default(), r.value.as_deref())?;
                match first {
                    None => first = Some(delivery),
                    Some(_) => self.sent.push(delivery),
                }
            }
            let first = first.ok_or_else(|| Error::Refused {
                step: format!("writing to {topic}/{partition}"),
                message: "no records".into(),
            })?;
            Ok(Appended(AppendedOf::Kafka(first)))
        })
    }

    fn commit(&mut self) -> Pending<'_, ()> {
        Box::pin(async move {
            for sent in std::mem::take(&mut self.sent) {
                sent.delivered().await?;
            }
            Ok(())
        })
    }

    fn abort(&mut self) -> Pending<'_, ()> {
        self.sent.clear();
        Box::pin(std::future::ready(Ok(())))
    }
}

/// A transactional id's producer on kshard's own writer.
#[derive(Debug)]
struct KafkaTxn {
    producer: Producer,
    /// Kept alive while its producer writes.
    _writer: Arc<Writer>,
}

impl TxnWrite for KafkaTxn {
    fn add_partitions<'a>(&'a mut self, partitions: &'a [(&'a str, i32)]) -> Pending<'a, ()> {
        Box::pin(self.producer.add_partitions(partitions))
    }

    fn send<'a>(&'a mut self, topic: &'a str, partition: i32, records: OutBatch) -> Pending<'a, Appended> {
        Box::pin(async move {
            let delivery = self.producer.send(topic, partition, records).await?;
            Ok(Appended(AppendedOf::Kafka(delivery)))
        })
    }

    fn commit(&mut self) -> Pending<'_, ()> {
        Box::pin(self.producer.commit())
    }

    fn abort(&mut self) -> Pending<'_, ()> {
        Box::pin(self.producer.abort())
    }
}

impl PartitionRead for PartitionReader {
    fn poll(&self, timeout: Duration) -> Result<Polled<'_>, Error> {
        // The contract: past the end, a reader reads on from the start (the
        // recovery log's chain and lineage tell a log made again, and a
        // source's records are the application's to judge). kshard's reader
        // says so first, and reads on at the next poll.
        let event = match PartitionReader::poll_run(self, timeout) {
            Err(Error::Truncated { topic, partition, offset, log_start }) => {
                tracing::warn!(topic, partition, offset, log_start, "past the log's end: reading on from its start");
                return Ok(Polled::Reset { topic, partition, position: offset, log_start });
            }
            event => event,
        };
        Ok(match event? {
            ReadEvent::Record(run) => Polled::Records(RecordRun::kafka(run)),
            ReadEvent::EndOfPartition { partition, next_offset } => Polled::EndOfPartition { partition, next_offset },
            ReadEvent::Idle => Polled::Idle,
        })
    }

    fn readable(&self) -> Readable<'_> {
        Box::pin(PartitionReader::readable(self))
    }

    fn add_partitions(&self, topic: &str, start: &[(i32, Option<i64>)]) -> Result<(), Error> {
        PartitionReader::add_partitions(self, topic, start)
    }

    fn known_end(&self, topic: &str, partition: i32) -> Option<i64> {
        PartitionReader::known_end(self, topic, partition)
    }
}

/// Why a recovery-log topic could not be made ready.
#[derive(Debug, thiserror::Error)]
pub enum LogTopicError {
    /// Kafka refused or did not answer.
    #[error("recovery-log topic {topic}: {step}: {source}")]
    Kafka {
        /// The topic.
        topic: String,
        /// What was being done.
        step: &'static str,
        /// The cause.
        #[source]
        source: Box<Error>,
    },
    /// The topic exists with settings that would lose records.
    #[error("{}", .0.iter().map(ToString::to_string).collect::<Vec<_>>().join("; "))]
    Misconfigured(Vec<crate::recovery_log::topic::Misconfigured>),
}

/// Makes `name` ready to hold recovery logs: created with
/// `recovery_log::topic::TOPIC_CONFIGS` (and `extra`) when missing;
/// when it exists, its configuration checked, and a setting that would lose
/// records refused by name (a topic made by hand, or by auto-creation).
/// Returns whether it was created.
pub fn ensure_log_topic(
    admin: &Admin,
    name: &str,
    partitions: i32,
    extra: &[(&str, &str)],
) -> Result<bool, LogTopicError> {
    let kafka = |step| move |source| LogTopicError::Kafka { topic: name.to_owned(), step, source: Box::new(source) };
    // There already (the common case): checked, not created. Asking any
    // live broker's metadata, not the controller, so that a start with a
    // broker down (the controller, say) does not time out on CreateTopics.
    let exists = admin.partition_count(name).map_err(kafka("looking it up"))?.is_some();
    let created = !exists && create_log_topic(admin, name, partitions, extra).map_err(kafka("creating it"))?;
    if !created {
        let found = admin.topic_configs(name).map_err(kafka("reading its configuration"))?;
        let wrong = crate::recovery_log::topic::check(name, &found);
        if !wrong.is_empty() {
            return Err(LogTopicError::Misconfigured(wrong));
        }
        for small in crate::recovery_log::topic::sizes_that_do_not_fit(name, &found) {
            tracing::warn!(
                topic = name,
                "{small}: records that large will be refused (raise it with kafka-configs --alter --add-config)"
            );
        }
    }
    Ok(created)
}

/// Makes `name` ready for a shard's outputs: created when missing with the
/// durability of a recovery log (three replicas where there are three
/// brokers, two in sync for a write to count), so that an output committed
/// with its transaction outlives a broker as the transaction's log record
/// does; a topic that exists is left as it is (an application's own).
/// Returns its partition count.
pub fn ensure_output_topic(admin: &Admin, name: &str, partitions: i32) -> Result<i32, LogTopicError> {
    let kafka = |step| move |source| LogTopicError::Kafka { topic: name.to_owned(), step, source: Box::new(source) };
    if let Some(n) = admin.partition_count(name).map_err(kafka("looking it up"))? {
        return Ok(n);
    }
    let brokers = admin.broker_ids().map_err(kafka("counting the brokers"))?.len();
    let (replication, min_insync) = crate::recovery_log::topic::replication_for(brokers);
    let configs = vec![("min.insync.replicas".to_owned(), min_insync.to_string())];
    let spec = kshard_kafka::TopicSpec { name: name.to_owned(), partitions, replication, configs };
    admin.create_topic(&spec).map_err(kafka("creating it"))?;
    admin.partition_count(name).map_err(kafka("looking it up"))?.ok_or_else(|| LogTopicError::Kafka {
        topic: name.to_owned(),
        step: "looking it up",
        source: Box::new(Error::Refused { step: "creating it".into(), message: "created, then not found".into() }),
    })
}

/// Creates `name` as [`ensure_log_topic`] wants it; `Ok(false)` when it was
/// made meanwhile.
fn create_log_topic(admin: &Admin, name: &str, partitions: i32, extra: &[(&str, &str)]) -> Result<bool, Error> {
    // Three replicas where there are three brokers, two of them in sync
    // for a write to count: not the broker's defaults, which are often 1.
    let brokers = admin.broker_ids()?.len();
    let (replication, min_insync) = crate::recovery_log::topic::replication_for(brokers);
    let min_insync = min_insync.to_string();
    let own = [("min.insync.replicas", min_insync.as_str())];
    let configs = crate::recovery_log::topic::TOPIC_CONFIGS
        .iter()
        .chain(&crate::recovery_log::topic::SIZE_CONFIGS)
        .chain(own.iter().filter(|(k, _)| !extra.iter().any(|(e, _)| e == k)))
        .chain(extra)
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    let spec = kshard_kafka::TopicSpec { name: name.to_owned(), partitions, replication, configs };
    admin.create_topic(&spec)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Settings whose security only librdkafka speaks: no kshard writer, so
    /// a primary's log goes through librdkafka's producer, and nothing may
    /// be published (no broker is reached to tell).
    #[tokio::test]
    async fn security_only_librdkafka_speaks_writes_the_log_plainly_and_refuses_outputs() {
        let mut settings = kshard_kafka::ClientSettings::new("127.0.0.1:1");
        settings.properties = vec![
            ("security.protocol".into(), "SASL_PLAINTEXT".into()),
            ("sasl.mechanism".into(), "OAUTHBEARER".into()),
            ("enable.sasl.oauthbearer.unsecure.jwt".into(), "true".into()),
        ];
        let partitions = KafkaPartitions::new(settings, Duration::from_secs(1));
        let mut writer = partitions.transactional("kshard/log/0").await.expect("a plain writer");
        writer.add_partitions(&[("log", 0)]).await.expect("the log's own partition");
        let refused = writer.add_partitions(&[("out", 0), ("log", 0)]).await.expect_err("outputs refused");
        assert!(refused.to_string().contains("publishing needs kshard's own client"), "{refused}");
    }
}
