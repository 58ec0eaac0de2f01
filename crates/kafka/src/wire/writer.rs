//! [`Writer`]: kshard's own Kafka producer, the reader's twin. One per
//! process and cluster: a sender thread per broker owns the one connection
//! to it that every producer of the process writes through, and a router
//! thread looks partitions' leaders up. Producers ([`crate::Producer`]:
//! idempotent, or transactional) hand it encoded batches; it keeps them in
//! [`Lanes`] (pure) and reports each batch's outcome to its [`Delivery`].
//! What to do with an answer, or its absence, is the lanes' decision
//! ([`Lanes::settle`], on the caller's clock), as is which leader a
//! partition goes to (`leaders_in`); the threads here do the I/O.
//!
//! What a sender does each turn: first the coordinator calls queued for
//! its broker (a transaction waits on them), then one Produce request per
//! producer with the head batch of each of its partitions this broker
//! leads. A request is one at a time per connection, so a partition's
//! batches are written in order; a turn takes whatever queued while the
//! last request was out, so batches grow with the load without a linger.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::time::{Duration, Instant};

use kafka_protocol::messages::{MetadataResponse, ProduceResponse};

use crate::client::Client;
use crate::delivery::{Delivered, Delivery, Failure};
use crate::error::{Error, Result};
use crate::wire::broker_link::{BrokerLink, LinkSecurity};
use crate::wire::lanes::{LaneKey, Lanes, Pending};
use crate::wire::links::Links;
use crate::wire::produce::{self, PRODUCE_VERSION};

/// How long a batch may take to be written, retries included, before it
/// fails (Kafka's `delivery.timeout.ms` is 120 s; a replica's commit waits
/// less than that).
pub const DELIVERY_TIMEOUT: Duration = Duration::from_secs(30);

/// How long a broker may take to answer one Produce request (it waits for
/// the in-sync replicas within it).
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// How often an idle sender or the router looks again without being woken.
const IDLE: Duration = Duration::from_millis(500);

/// A call to make on a broker's connection: given the connection, or why
/// there is none; returns whether the connection is still good.
pub(crate) type Call = Box<dyn FnOnce(Result<&mut BrokerLink>) -> bool + Send>;

/// kshard's own producer's connections and batches (see the module's doc).
pub struct Writer {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for Writer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Writer").field("batches", &self.shared.lanes().len()).finish_non_exhaustive()
    }
}

pub(crate) struct Shared {
    security: LinkSecurity,
    /// The router's connections (Metadata only).
    links: Links,
    bootstrap: Vec<String>,
    /// How long a batch may take (see [`DELIVERY_TIMEOUT`]).
    pub(crate) delivery_timeout: Duration,
    lanes: Mutex<Lanes>,
    /// Each partition's leader, `host:port`, as last looked up.
    leaders: Mutex<HashMap<(Arc<str>, i32), String>>,
    senders: Mutex<HashMap<String, Arc<Sender>>>,
    /// Wakes the router (a batch whose leader is not known, a leader moved).
    router: Signal,
    producers: AtomicU64,
    /// Turns of [`Shared::any_broker`], so that its retries go round the brokers.
    asked: AtomicUsize,
    stopping: AtomicBool,
}

/// One broker's sender: its calls to make, and what wakes it.
struct Sender {
    calls: Mutex<VecDeque<Call>>,
    signal: Signal,
    /// Whether its last attempt to connect succeeded (so far: not tried).
    reachable: AtomicBool,
}

/// A flag and a condition variable: "there is something to do".
#[derive(Default)]
struct Signal {
    raised: Mutex<bool>,
    cv: Condvar,
}

impl Signal {
    fn raise(&self) {
        *self.raised.lock().unwrap_or_else(PoisonError::into_inner) = true;
        self.cv.notify_one();
    }

    /// Waits until raised or `timeout` passes, and lowers it.
    fn wait(&self, timeout: Duration) {
        let raised = self.raised.lock().unwrap_or_else(PoisonError::into_inner);
        let (mut raised, _) =
            self.cv.wait_timeout_while(raised, timeout, |r| !*r).unwrap_or_else(PoisonError::into_inner);
        *raised = false;
    }
}

impl Writer {
    /// A writer to `settings`' cluster; `None` when its security is one only
    /// librdkafka speaks (GSSAPI, OAUTHBEARER, keystores…). Connects lazily.
    pub fn new(client: &Client) -> Result<Option<Writer>> {
        Self::with_timeout(client, DELIVERY_TIMEOUT)
    }

    /// [`Writer::new`] whose batches fail when not written within `delivery_timeout`.
    pub fn with_timeout(client: &Client, delivery_timeout: Duration) -> Result<Option<Writer>> {
        let (Some(security), Some(links)) = (client.link_security()?, Links::new(client)?) else {
            return Ok(None);
        };
        let shared = Arc::new(Shared {
            security,
            links,
            bootstrap: crate::wire::broker_link::bootstrap_addresses(client.brokers()),
            delivery_timeout,
            lanes: Mutex::new(Lanes::default()),
            leaders: Mutex::new(HashMap::new()),
            senders: Mutex::new(HashMap::new()),
            router: Signal::default(),
            producers: AtomicU64::new(1),
            asked: AtomicUsize::new(0),
            stopping: AtomicBool::new(false),
        });
        let router = Arc::clone(&shared);
        std::thread::Builder::new()
            .name("kshard-writer-router".into())
            .spawn(move || route(&router))
            .map_err(|e| Error::Refused { step: "starting the writer".into(), message: e.to_string() })?;
        Ok(Some(Writer { shared }))
    }

    pub(crate) fn shared(&self) -> &Arc<Shared> {
        &self.shared
    }
}

impl Drop for Writer {
    fn drop(&mut self) {
        self.shared.stopping.store(true, Ordering::SeqCst);
        self.shared.router.raise();
        for sender in self.shared.senders.lock().unwrap_or_else(PoisonError::into_inner).values() {
            sender.signal.raise();
        }
        self.shared.lanes().drop_all(&Failure::Other("the writer was closed".into()));
    }
}

impl Shared {
    fn lanes(&self) -> std::sync::MutexGuard<'_, Lanes> {
        self.lanes.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A number for a new producer of this writer.
    pub(crate) fn next_producer(&self) -> u64 {
        self.producers.fetch_add(1, Ordering::Relaxed)
    }

    /// Queues `batch` (encoded, its sequence in it) for `topic`/`partition`;
    /// its outcome goes to `slot`.
    pub(crate) fn push(
        &self,
        producer: u64,
        transactional_id: Option<Arc<str>>,
        topic: &Arc<str>,
        partition: i32,
        batch: bytes::Bytes,
        slot: Arc<Delivered>,
    ) {
        let key = LaneKey { producer, topic: Arc::clone(topic), partition };
        let deadline = Instant::now() + self.delivery_timeout;
        self.lanes().push(key, transactional_id, Pending { bytes: batch, slot, deadline });
        let leader =
            self.leaders.lock().unwrap_or_else(PoisonError::into_inner).get(&(Arc::clone(topic), partition)).cloned();
        match leader.and_then(|address| self.sender_of(&address)) {
            Some(sender) => sender.signal.raise(),
            None => self.router.raise(),
        }
    }

    /// Fails the batches `producer` has not sent.
    pub(crate) fn drop_producer(&self, producer: u64, why: &str) {
        self.lanes().drop_producer(producer, &Failure::Other(why.to_owned()));
    }

    /// Makes `call` on the connection to `address` (its sender's turn),
    /// answering through the returned channel.
    pub(crate) fn call<T: Send + 'static>(
        self: &Arc<Self>,
        address: &str,
        call: impl FnOnce(&mut BrokerLink) -> Result<T> + Send + 'static,
    ) -> tokio::sync::oneshot::Receiver<Result<T>> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        let boxed: Call = Box::new(move |link: Result<&mut BrokerLink>| {
            let answer = link.and_then(call);
            // An error code is an answer; anything else may have left the
            // connection in the middle of a frame.
            let good = !matches!(&answer, Err(e) if !matches!(e, Error::Kafka { .. }));
            let _ = tx.send(answer);
            good
        });
        match self.start_sender(address) {
            Some(sender) => {
                sender.calls.lock().unwrap_or_else(PoisonError::into_inner).push_back(boxed);
                sender.signal.raise();
            }
            None => {
                boxed(Err(Error::Refused { step: "calling a broker".into(), message: "the writer is closed".into() }));
            }
        }
        rx
    }

    /// A broker to ask what any broker answers (see [`any_broker`]).
    pub(crate) fn any_broker(&self) -> String {
        let known: Vec<(String, bool)> = {
            let senders = self.senders.lock().unwrap_or_else(PoisonError::into_inner);
            senders.iter().map(|(address, s)| (address.clone(), s.reachable.load(Ordering::Relaxed))).collect()
        };
        any_broker(&known, &self.bootstrap, self.asked.fetch_add(1, Ordering::Relaxed))
    }

    fn sender_of(&self, address: &str) -> Option<Arc<Sender>> {
        self.senders.lock().unwrap_or_else(PoisonError::into_inner).get(address).cloned()
    }

    /// The sender of `address`, started when there is none yet.
    fn start_sender(self: &Arc<Self>, address: &str) -> Option<Arc<Sender>> {
        if self.stopping.load(Ordering::SeqCst) {
            return None;
        }
        let mut senders = self.senders.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(sender) = senders.get(address) {
            return Some(Arc::clone(sender));
        }
        let sender = Arc::new(Sender {
            calls: Mutex::new(VecDeque::new()),
            signal: Signal::default(),
            reachable: AtomicBool::new(true),
        });
        let (shared, me, to) = (Arc::clone(self), Arc::clone(&sender), address.to_owned());
        let started =
            std::thread::Builder::new().name(format!("kshard-writer-{address}")).spawn(move || send(&shared, &me, &to));
        if let Err(e) = started {
            tracing::error!(error = %e, broker = address, "could not start a writer thread");
            return None;
        }
        senders.insert(address.to_owned(), Arc::clone(&sender));
        Some(sender)
    }

    /// Forgets the leaders of `keys`' partitions (asked again before their
    /// batches go out) and wakes the router.
    fn forget_leaders<'a>(&self, keys: impl IntoIterator<Item = &'a LaneKey>) {
        let mut leaders = self.leaders.lock().unwrap_or_else(PoisonError::into_inner);
        for key in keys {
            leaders.remove(&(Arc::clone(&key.topic), key.partition));
        }
        drop(leaders);
        self.router.raise();
    }
}

/// A sender's loop: calls, then Produce requests, until the writer closes.
fn send(shared: &Arc<Shared>, sender: &Sender, address: &str) {
    let mut link: Option<BrokerLink> = None;
    // The last turn sent something: batches queued behind it in their
    // lanes may go at once, without waiting to be woken.
    let mut busy = false;
    while !shared.stopping.load(Ordering::SeqCst) {
        if !busy {
            sender.signal.wait(IDLE);
        }
        loop {
            let call = sender.calls.lock().unwrap_or_else(PoisonError::into_inner).pop_front();
            let Some(call) = call else { break };
            let link_now = connected(&mut link, address, &shared.security);
            sender.reachable.store(link_now.is_ok(), Ordering::Relaxed);
            let good = call(link_now);
            // A call that failed on its connection left it unusable: the
            // next one connects again.
            if !good {
                link = None;
            }
        }
        let requests = {
            let leaders = shared.leaders.lock().unwrap_or_else(PoisonError::into_inner);
            // The lane's own name, shared: a lookup per lane per turn allocates nothing.
            let leads = |topic: &Arc<str>, partition: i32| {
                leaders.get(&(Arc::clone(topic), partition)).is_some_and(|leader| leader == address)
            };
            shared.lanes().take(leads)
        };
        busy = !requests.is_empty();
        for request in requests {
            produce_once(shared, &mut link, address, &request);
        }
        if busy {
            // A Produce that failed dropped the connection.
            sender.reachable.store(link.is_some(), Ordering::Relaxed);
        }
    }
}

/// The broker to ask, on turn `turn`, what any broker answers: one whose
/// sender last connected, else any known one, bootstrap brokers included.
/// Turns go round the candidates (sorted), so that retries after a broker
/// is lost reach the others rather than the dead one each time.
fn any_broker(senders: &[(String, bool)], bootstrap: &[String], turn: usize) -> String {
    let mut candidates: Vec<&String> = senders.iter().filter(|(_, up)| *up).map(|(address, _)| address).collect();
    if candidates.is_empty() {
        candidates = senders.iter().map(|(address, _)| address).chain(bootstrap).collect();
    }
    candidates.sort();
    candidates.dedup();
    match candidates.len() {
        0 => String::new(),
        n => candidates[turn % n].clone(),
    }
}

/// The open connection in `link`, made when there is none.
fn connected<'a>(
    link: &'a mut Option<BrokerLink>,
    address: &str,
    security: &LinkSecurity,
) -> Result<&'a mut BrokerLink> {
    if link.as_ref().is_none_or(BrokerLink::expired) {
        *link = Some(BrokerLink::connect(address, security, REQUEST_TIMEOUT)?);
    }
    link.as_mut()
        .ok_or_else(|| Error::Unreachable { step: format!("connecting to {address}"), message: "no connection".into() })
}

/// Sends one Produce request and reports each batch's outcome.
fn produce_once(shared: &Shared, link: &mut Option<BrokerLink>, address: &str, request: &crate::wire::lanes::Request) {
    let batches: Vec<(&str, i32, bytes::Bytes)> =
        request.batches.iter().map(|(k, b)| (&*k.topic, k.partition, b.clone())).collect();
    let body = produce::request(request.transactional_id.as_deref(), REQUEST_TIMEOUT, &batches);
    let keys: Vec<LaneKey> = request.batches.iter().map(|(k, _)| k.clone()).collect();
    let answer = connected(link, address, &shared.security)
        .and_then(|l| l.call::<_, ProduceResponse>(&body, PRODUCE_VERSION, REQUEST_TIMEOUT + Duration::from_secs(5)));
    let moved = match &answer {
        Ok(answer) => shared.lanes().settle(&keys, Ok(&produce::outcomes(answer)), Instant::now()),
        Err(e) => {
            tracing::debug!(broker = address, error = %e, batches = keys.len(), "a Produce request got no answer; sending again");
            *link = None;
            shared.lanes().settle(&keys, Err(&e.to_string()), Instant::now())
        }
    };
    if !moved.is_empty() {
        shared.forget_leaders(&moved);
    }
}

/// The router's loop: fails late batches, looks up the leaders of
/// partitions nobody is known to lead, starts their senders.
fn route(shared: &Arc<Shared>) {
    let mut retry = crate::retry::Retry::default();
    while !shared.stopping.load(Ordering::SeqCst) {
        let wait =
            shared.lanes().next_deadline().map_or(IDLE, |d| d.saturating_duration_since(Instant::now()).min(IDLE));
        shared.router.wait(wait);
        shared.lanes().expire(Instant::now());
        let unrouted = {
            let leaders = shared.leaders.lock().unwrap_or_else(PoisonError::into_inner);
            let lanes = shared.lanes();
            lanes.unrouted(|topic, partition| leaders.contains_key(&(Arc::clone(topic), partition)))
        };
        if unrouted.is_empty() {
            retry = crate::retry::Retry::default();
            continue;
        }
        let mut topics: Vec<&str> = unrouted.iter().map(|(t, _)| &**t).collect();
        topics.sort_unstable();
        topics.dedup();
        match shared.links.metadata_of(Some(&topics), REQUEST_TIMEOUT) {
            Ok(metadata) => {
                let (found, addresses) = leaders_in(&metadata);
                let routed = !found.is_empty();
                shared.leaders.lock().unwrap_or_else(PoisonError::into_inner).extend(found);
                for address in addresses {
                    if let Some(sender) = shared.start_sender(&address) {
                        sender.signal.raise();
                    }
                }
                if !routed {
                    std::thread::sleep(retry.next_wait());
                }
            }
            Err(e) => {
                tracing::debug!(error = %e, "looking up partitions' leaders for the writer; trying again");
                std::thread::sleep(retry.next_wait());
                shared.router.raise();
            }
        }
    }
}

/// A partition (topic, index) and its leader's address.
type Led = ((Arc<str>, i32), String);

/// The leader's address of each partition `metadata` names with a leader
/// among its brokers (one without, or led by a broker it does not list, is
/// looked up again later), and every broker's address.
fn leaders_in(metadata: &MetadataResponse) -> (Vec<Led>, Vec<String>) {
    let brokers = Links::brokers(metadata);
    let mut found = Vec::new();
    for topic in &metadata.topics {
        let Some(name) = topic.name.as_ref() else { continue };
        let name: Arc<str> = Arc::from(name.0.as_str());
        for p in &topic.partitions {
            if let Some(address) = brokers.get(&p.leader_id.0) {
                found.push(((Arc::clone(&name), p.partition_index), address.clone()));
            }
        }
    }
    let mut addresses: Vec<String> = brokers.into_values().collect();
    addresses.sort();
    (found, addresses)
}

/// A record's delivery as its batch's slot gives it.
pub(crate) fn delivery(slot: &Arc<Delivered>, index: usize, topic: &str, partition: i32) -> Delivery {
    Delivery::new(Arc::clone(slot), i64::try_from(index).unwrap_or(i64::MAX), format!("{topic}/{partition}"))
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::{any_broker, leaders_in};
    use crate::wire::fetch_plan::tests::metadata;

    #[test]
    fn a_partition_is_routed_to_a_leader_the_answer_lists_and_to_none_else() {
        // Partition 1's leader is none (-1), partition 2's a broker the
        // answer does not list: both are looked up again later.
        let answer = metadata(&[1, 2], &[("t", 0, 2), ("t", 1, -1), ("t", 2, 7), ("u", 0, 1)]);
        let (found, brokers) = leaders_in(&answer);
        let t: Arc<str> = Arc::from("t");
        let u: Arc<str> = Arc::from("u");
        assert_eq!(found, [((t, 0), "127.0.0.1:9002".to_owned()), ((u, 0), "127.0.0.1:9001".to_owned())]);
        assert_eq!(brokers, ["127.0.0.1:9001", "127.0.0.1:9002"], "a sender for each broker");
    }

    fn known(list: &[(&str, bool)]) -> Vec<(String, bool)> {
        list.iter().map(|(a, up)| ((*a).to_owned(), *up)).collect()
    }

    #[test]
    fn a_broker_whose_connection_failed_is_not_asked_while_another_connects() {
        let senders = known(&[("b1:9092", false), ("b2:9092", true), ("b3:9092", true)]);
        let asked: Vec<String> = (0..4).map(|turn| any_broker(&senders, &["b1:9092".into()], turn)).collect();
        assert_eq!(asked, ["b2:9092", "b3:9092", "b2:9092", "b3:9092"]);
    }

    #[test]
    fn with_no_broker_reachable_the_turns_go_round_every_known_one() {
        let senders = known(&[("b2:9092", false), ("b1:9092", false)]);
        let bootstrap = ["b1:9092".to_owned(), "b3:9092".to_owned()];
        let asked: Vec<String> = (0..3).map(|turn| any_broker(&senders, &bootstrap, turn)).collect();
        assert_eq!(asked, ["b1:9092", "b2:9092", "b3:9092"]);
    }

    #[test]
    fn before_any_connection_the_bootstrap_brokers_are_asked() {
        assert_eq!(any_broker(&[], &["b1:9092".into()], 7), "b1:9092");
        assert_eq!(any_broker(&[], &[], 0), "");
    }
}
