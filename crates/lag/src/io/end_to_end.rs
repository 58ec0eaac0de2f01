//! kminion's end-to-end probe: every `probe_interval`, one message to each
//! partition of the probe topic (as many partitions as brokers, times
//! `partitions_per_broker`; Kafka spreads new topics' leaders over the
//! brokers, though nothing moves them back after a reassignment), read back by a consumer group of the probe's own
//! (`<prefix>-<random id>`), whose offsets are committed every 5 s. What it
//! measures goes to [`EndToEnd`]: produce, round-trip and commit latency,
//! messages lost. Its failures are logged and retried; they never touch
//! `/ready`, which is about lag: a cluster that cannot be written to shows
//! as failed produces and lost messages.

use std::sync::Arc;

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use kshard_kafka::{Admin, Client, Delivery, GroupConsumer, RecordWriter, TopicSpec};
use tracing::{info, warn};

use super::error::WorkerError;
use crate::end_to_end::{EndToEnd, ProbeMessage, ProbeSlas};

/// The worker's name in logs.
pub(crate) const WORKER: &str = "end-to-end probe";

/// How often the probe's group commits (kminion's, fixed).
const COMMIT_INTERVAL: Duration = Duration::from_secs(5);

/// The probe's settings: kminion's `minion.endToEnd`, with its defaults.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EndToEndSettings {
    /// Probe at all (off by default, as kminion's).
    pub enabled: bool,
    /// How often a message goes to each partition.
    pub probe_interval: Duration,
    /// The probe topic (kminion's `kminion-end-to-end`, shareable with kminion).
    pub topic: String,
    /// Create the topic when missing, and add partitions when brokers were added.
    pub manage_topic: bool,
    /// The replication factor of a topic it creates; `None`: three, or as
    /// many as there are brokers when fewer (kminion's 1 measures nothing of
    /// replication, and its probe stops with that one broker).
    pub replication_factor: Option<i32>,
    /// Partitions per broker.
    pub partitions_per_broker: i32,
    /// How often the topic is checked again.
    pub reconcile_interval: Duration,
    /// Acknowledged by every in-sync replica (`all`), or by the leader (`leader`).
    pub all_acks: bool,
    /// The start of the probe group's name (a random id follows).
    pub group_prefix: String,
    /// Produce, round-trip and commit SLAs.
    pub slas: ProbeSlas,
}

impl Default for EndToEndSettings {
    /// kminion's defaults (`probeInterval` 100 ms, `ackSla` 5 s,
    /// `roundtripSla` 20 s, `commitSla` 5 s), off.
    fn default() -> Self {
        EndToEndSettings {
            enabled: false,
            probe_interval: Duration::from_millis(100),
            topic: "kminion-end-to-end".to_owned(),
            manage_topic: true,
            replication_factor: None,
            partitions_per_broker: 1,
            reconcile_interval: Duration::from_secs(600),
            all_acks: true,
            group_prefix: "kminion-end-to-end".to_owned(),
            slas: ProbeSlas {
                ack: Duration::from_secs(5),
                roundtrip: Duration::from_secs(20),
                commit: Duration::from_secs(5),
            },
        }
    }
}

pub(crate) struct EndToEndWorker {
    pub(crate) kafka: Client,
    pub(crate) timeout: Duration,
    pub(crate) settings: EndToEndSettings,
    pub(crate) probe: Arc<EndToEnd>,
    pub(crate) shutdown: crate::shutdown::Shutdown,
}

/// A message waiting for the broker's answer.
struct InFlight {
    id: String,
    partition: i32,
    sent: Instant,
    delivery: Delivery,
}

impl EndToEndWorker {
    /// Probes until `stop`; a failed session is logged and started again.
    pub(crate) fn run(&mut self) -> Result<(), WorkerError> {
        let mut failures = 0u32;
        while !self.shutdown.is_set() {
            match self.session() {
                Ok(()) => return Ok(()),
                Err(e) => {
                    failures += 1;
                    let kind = super::error::kafka_kind(&e);
                    let wait = kind.response().wait(failures);
                    warn!(error = %e, kind = kind.label(), retry_in_seconds = wait.as_secs(), "the end-to-end probe failed");
                    self.shutdown.sleep(wait);
                }
            }
        }
        Ok(())
    }

    /// One probe group, from joining to `stop` (then the group is deleted).
    fn session(&mut self) -> Result<(), kshard_kafka::Error> {
        let admin = Arc::new(Admin::new(&self.kafka, self.timeout)?);
        self.delete_orphans(&admin);
        let mut partitions = self.reconcile(&admin)?;
        let minion = uuid::Uuid::new_v4().to_string();
        let group = format!("{}-{minion}", self.settings.group_prefix);
        let consumer = Arc::new(GroupConsumer::probe(&self.kafka, &group, &self.settings.topic)?);
        // Not acknowledged by then, a message failed (kminion's ackSla + 2 s).
        let producer =
            RecordWriter::probe(&self.kafka, self.settings.all_acks, self.settings.slas.ack + Duration::from_secs(2))?;
        info!(group = %group, topic = %self.settings.topic, partitions, "end-to-end probe joining its group");
        self.join(&consumer, &producer, partitions);
        let committer = {
            let (consumer, admin, probe, stop) =
                (Arc::clone(&consumer), Arc::clone(&admin), Arc::clone(&self.probe), self.shutdown.clone());
            let (group, sla) = (group.clone(), self.settings.slas.commit);
            std::thread::Builder::new()
                .name("end-to-end-commits".to_owned())
                .spawn(move || commit_until_stopped(consumer, &admin, &probe, &group, sla, &stop))
                .map_err(|e| kshard_kafka::Error::Refused {
                    step: "starting the commit thread".into(),
                    message: e.to_string(),
                })?
        };
        let mut in_flight: Vec<InFlight> = Vec::new();
        let mut next_probe = Instant::now();
        let mut next_reconcile = Instant::now() + self.settings.reconcile_interval;
        while !self.shutdown.is_set() {
            let now = Instant::now();
            if now >= next_probe {
                for partition in 0..partitions {
                    self.send(&producer, partition, &minion, &mut in_flight);
                }
                next_probe = (next_probe + self.settings.probe_interval).max(now);
            }
            in_flight.retain(|m| match m.delivery.answered() {
                Some((result, at)) => {
                    self.probe.answered(&m.id, m.partition, m.sent, at, result.is_ok());
                    if let Err(e) = result {
                        info!(partition = m.partition, error = %e, "a probe message was not written");
                    }
                    false
                }
                None => true,
            });
            self.probe.expire(now);
            if now >= next_reconcile {
                next_reconcile = now + self.settings.reconcile_interval;
                match self.reconcile(&admin) {
                    Ok(n) => partitions = n,
                    Err(e) => warn!(error = %e, "checking the end-to-end topic"),
                }
            }
            // Read until the next probe is due.
            let mut wait = next_probe.saturating_duration_since(Instant::now()).min(Duration::from_millis(50));
            while let Some((_, value)) = consumer.next(wait) {
                let at = Instant::now();
                if let Some(m) = value.as_deref().and_then(|v| ProbeMessage::decode_own(v, &minion)) {
                    self.probe.arrived(&m.message_id, at);
                }
                wait = Duration::ZERO;
            }
        }
        // Never blocked in librdkafka (its commits run on a thread of their own).
        let _ = committer.join();
        drop(consumer);
        // A stopped probe's group would linger, empty, for the offsets'
        // retention; the process is stopping, so it is asked briefly.
        let brief = Admin::new(&self.kafka, self.timeout.min(Duration::from_secs(5)));
        if let Err(e) = brief.and_then(|a| a.delete_group(&group)) {
            info!(group = %group, error = %e, "could not delete the probe's group");
        }
        Ok(())
    }

    fn send(&self, producer: &RecordWriter, partition: i32, minion: &str, in_flight: &mut Vec<InFlight>) {
        let created = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_nanos() as i64).unwrap_or(0);
        let message = ProbeMessage {
            minion_id: minion.to_owned(),
            message_id: uuid::Uuid::new_v4().to_string(),
            created_utc_ns: created,
        };
        let sent = Instant::now();
        self.probe.sent(&message.message_id, partition, sent);
        match producer.append(&self.settings.topic, partition, b"", Some(&message.encode())) {
            Ok(delivery) => in_flight.push(InFlight { id: message.message_id, partition, sent, delivery }),
            Err(e) => {
                info!(partition, error = %e, "a probe message could not be queued");
                self.probe.answered(&message.message_id, partition, sent, Instant::now(), false);
            }
        }
    }

    /// Waits until the group has given this member partitions and its
    /// positions are set (an init record, with no value, read back on one),
    /// up to 30 s as kminion: a message produced earlier would be skipped by
    /// a consumer that starts at the end, and counted lost.
    fn join(&self, consumer: &GroupConsumer, producer: &RecordWriter, partitions: i32) {
        let deadline = Instant::now() + Duration::from_secs(30);
        let mut next_init = Instant::now();
        while Instant::now() < deadline && !self.shutdown.is_set() {
            if consumer.assigned() > 0 && Instant::now() >= next_init {
                next_init = Instant::now() + Duration::from_secs(1);
                for partition in 0..partitions {
                    let _ = producer.send(&self.settings.topic, partition, b"init-message", None);
                }
            }
            if consumer.next(Duration::from_millis(100)).is_some() {
                info!("end-to-end probe consumer initialized");
                return;
            }
        }
        warn!("the end-to-end probe consumer did not read its first record within 30 s; probing anyway");
    }

    /// Deletes the probe groups a probe that died left behind (its group is
    /// deleted at shutdown, but not after a kill -9 or a crash): groups of
    /// the prefix with no member. A live probe's group (kshard's or
    /// kminion's, which share the prefix) has its member and is left alone.
    fn delete_orphans(&self, admin: &Admin) {
        let prefix = format!("{}-", self.settings.group_prefix);
        let groups = match admin.list_groups() {
            Ok(groups) => groups,
            Err(e) => return warn!(error = %e, "listing groups to delete the probe's orphans"),
        };
        for g in groups.iter().filter(|g| g.group_id.starts_with(&prefix) && g.state == "Empty") {
            match admin.delete_group(&g.group_id) {
                Ok(()) => info!(group = %g.group_id, "deleted a probe group left behind"),
                Err(e) => warn!(group = %g.group_id, error = %e, "deleting a probe group left behind"),
            }
        }
    }

    /// Makes sure the topic exists with a partition per broker (when
    /// managed), and returns its partition count.
    fn reconcile(&self, admin: &Admin) -> Result<i32, kshard_kafka::Error> {
        let s = &self.settings;
        let existing = admin.partition_count(&s.topic)?;
        if !s.manage_topic {
            return existing.ok_or_else(|| kshard_kafka::Error::Refused {
                step: format!("looking for the end-to-end topic {}", s.topic),
                message: "it does not exist, and end_to_end.topic.manage is off".into(),
            });
        }
        let brokers = i32::try_from(admin.broker_ids()?.len()).unwrap_or(i32::MAX);
        let wanted = brokers.saturating_mul(s.partitions_per_broker);
        match existing {
            None => {
                let replication = replication_for(s.replication_factor, brokers);
                let min_isr = if replication >= 3 { 2 } else { 1 };
                let spec = TopicSpec {
                    name: s.topic.clone(),
                    partitions: wanted.max(1),
                    replication,
                    // kminion's: kept a day, for debugging.
                    configs: [
                        ("cleanup.policy", "delete".to_owned()),
                        ("segment.ms", (12 * 3_600_000).to_string()),
                        ("retention.ms", (24 * 3_600_000).to_string()),
                        ("min.insync.replicas", min_isr.to_string()),
                    ]
                    .map(|(k, v)| (k.to_owned(), v))
                    .to_vec(),
                };
                info!(topic = %s.topic, partitions = spec.partitions, "creating the end-to-end topic");
                admin.create_topic(&spec)?;
                Ok(spec.partitions)
            }
            Some(n) if n < wanted => {
                info!(topic = %s.topic, from = n, to = wanted, "growing the end-to-end topic to a partition per broker");
                admin.add_partitions(&s.topic, wanted)?;
                Ok(wanted)
            }
            Some(n) => Ok(n),
        }
    }
}

/// Every 5 s, commits what the probe read, timing the coordinator's
/// answer. The commits themselves run on a thread of their own: librdkafka
/// waits for a coordinator without end, so one not answered within `sla`
/// counts as failed ([`crate::SLA_EXCEEDED`], as kminion's), no new one is
/// sent while it waits, and at `stop` it is left to finish (or to end with
/// the process) rather than holding the probe's shutdown.
fn commit_until_stopped(
    consumer: Arc<GroupConsumer>,
    admin: &Admin,
    probe: &EndToEnd,
    group: &str,
    sla: Duration,
    stop: &crate::shutdown::Shutdown,
) {
    let (ask, asked) = std::sync::mpsc::channel::<()>();
    let (answer, answers) = std::sync::mpsc::channel();
    let spawned = std::thread::Builder::new().name("end-to-end-commit".to_owned()).spawn(move || {
        while asked.recv().is_ok() {
            if answer.send(consumer.commit_read()).is_err() {
                return;
            }
        }
    });
    if let Err(e) = spawned {
        warn!(error = %e, "could not start the probe's commit thread: no commits");
        return;
    }
    let mut coordinator = None;
    let mut next = Instant::now() + COMMIT_INTERVAL;
    while !stop.is_set() {
        stop.sleep(next.saturating_duration_since(Instant::now()));
        if stop.is_set() {
            return;
        }
        next = (next + COMMIT_INTERVAL).max(Instant::now());
        let started = Instant::now();
        if ask.send(()).is_err() {
            return;
        }
        let result = match answer_within(&answers, stop, Some(started + sla)) {
            Answer::Came(result) => Some(result),
            Answer::Late => None,
            Answer::Stopped => return,
        };
        let took = started.elapsed();
        // The broker that answered: the leader of the group's partition of
        // `__consumer_offsets`, which is how Kafka picks a group's coordinator.
        if let Some(id) = coordinator_of(admin, group) {
            coordinator = Some(id);
        }
        let id = coordinator.unwrap_or(-1);
        match result {
            Some(Ok(false)) => {}
            Some(Ok(true)) => probe.committed(id, took, None),
            Some(Err(e)) => {
                let reason = e.kafka_error_name().unwrap_or_else(|| "RESPONSE_ERROR".to_owned());
                info!(coordinator = id, error = %e, "the end-to-end probe's commit failed");
                probe.committed(id, took, Some(&reason));
            }
            None => {
                info!(
                    coordinator = id,
                    sla_ms = sla.as_millis() as u64,
                    "the end-to-end probe's commit is not answered within its SLA"
                );
                probe.committed(id, took, Some(crate::SLA_EXCEEDED));
                // The late answer is not counted again; wait for it before the next.
                if let Answer::Stopped = answer_within(&answers, stop, None) {
                    return;
                }
            }
        }
    }
}

/// What came of a commit asked of the commit thread.
enum Answer<T> {
    Came(T),
    /// Not by the deadline.
    Late,
    /// The probe is stopping (or the commit thread is gone).
    Stopped,
}

/// The commit thread's next answer, waited for until `deadline` (or for
/// as long as it takes, without one) unless `stop` is set first.
fn answer_within<T>(
    answers: &std::sync::mpsc::Receiver<T>,
    stop: &crate::shutdown::Shutdown,
    deadline: Option<Instant>,
) -> Answer<T> {
    use std::sync::mpsc::RecvTimeoutError;
    loop {
        match answers.recv_timeout(Duration::from_millis(50)) {
            Ok(answer) => return Answer::Came(answer),
            Err(RecvTimeoutError::Disconnected) => return Answer::Stopped,
            Err(RecvTimeoutError::Timeout) if stop.is_set() => return Answer::Stopped,
            Err(RecvTimeoutError::Timeout) if deadline.is_some_and(|d| Instant::now() > d) => return Answer::Late,
            Err(RecvTimeoutError::Timeout) => {}
        }
    }
}

fn coordinator_of(admin: &Admin, group: &str) -> Option<i32> {
    let topic = kshard_kafka::CONSUMER_OFFSETS_TOPIC;
    let partitions = admin.partition_count(topic).ok()??;
    admin.leaders(topic).ok()?.get(&kshard_kafka::offsets_partition_for(group, partitions)).copied()
}

/// The replication factor of a probe topic created on `brokers` brokers.
fn replication_for(configured: Option<i32>, brokers: i32) -> i32 {
    configured.unwrap_or_else(|| brokers.clamp(1, 3))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_probe_topic_is_replicated_three_times_where_it_can_be() {
        assert_eq!(replication_for(None, 1), 1);
        assert_eq!(replication_for(None, 2), 2);
        assert_eq!(replication_for(None, 5), 3);
        assert_eq!(replication_for(Some(1), 5), 1, "as configured");
    }
}
