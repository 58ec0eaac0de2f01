//! The batches a writer holds, without I/O: one lane per (producer,
//! partition), first in first out, at most one batch of a lane on the wire
//! at a time — so a batch retried after a timeout or a leader's move goes
//! out again before any batch behind it, with the same sequence, and the
//! broker writes each once and in order.
//!
//! A broker's sender [`Lanes::take`]s the head batch of every idle lane it
//! leads and reports each partition's answer ([`Lanes::answered`]) or that
//! the request got none ([`Lanes::unanswered`]). A batch fails when its
//! deadline passes or the broker refuses it; the batches behind it in its
//! lane fail with it (their sequences follow one that was not written, so
//! the broker would refuse them as out of order).

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;

use crate::delivery::{Delivered, Failure};
use crate::wire::produce::Landed;

/// A lane: one producer's batches for one partition.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) struct LaneKey {
    /// The producer (a number of the writer's own).
    pub(crate) producer: u64,
    pub(crate) topic: Arc<str>,
    pub(crate) partition: i32,
}

/// A batch waiting to be written.
#[derive(Debug)]
pub(crate) struct Pending {
    /// The encoded batch, its sequence in it.
    pub(crate) bytes: Bytes,
    /// Where its outcome goes (its first record's offset).
    pub(crate) slot: Arc<Delivered>,
    /// When it fails if not written by then.
    pub(crate) deadline: Instant,
}

#[derive(Debug, Default)]
struct Lane {
    batches: VecDeque<Pending>,
    /// The head batch is on the wire.
    in_flight: bool,
    /// The producer's transactional id (`None`: idempotent only).
    transactional_id: Option<Arc<str>>,
}

/// One Produce request to make: a producer's head batches, one per partition.
#[derive(Debug)]
pub(crate) struct Request {
    pub(crate) transactional_id: Option<Arc<str>>,
    pub(crate) batches: Vec<(LaneKey, Bytes)>,
}

/// What the sender does after an answer.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct After {
    /// A partition's leader may have moved: ask the cluster again.
    pub(crate) look_up_leaders: bool,
}

/// Every lane of a writer.
#[derive(Debug, Default)]
pub(crate) struct Lanes {
    lanes: BTreeMap<LaneKey, Lane>,
}

impl Lanes {
    /// Queues `batch` at the end of its lane.
    pub(crate) fn push(&mut self, key: LaneKey, transactional_id: Option<Arc<str>>, batch: Pending) {
        let lane = self.lanes.entry(key).or_default();
        lane.transactional_id = transactional_id;
        lane.batches.push_back(batch);
    }

    /// The head batch of every idle lane whose partition `leads` says this
    /// sender leads, marked in flight: one request per producer.
    pub(crate) fn take(&mut self, leads: impl Fn(&Arc<str>, i32) -> bool) -> Vec<Request> {
        let mut requests: BTreeMap<u64, Request> = BTreeMap::new();
        for (key, lane) in &mut self.lanes {
            let Some(head) = lane.batches.front() else { continue };
            if lane.in_flight || !leads(&key.topic, key.partition) {
                continue;
            }
            lane.in_flight = true;
            requests
                .entry(key.producer)
                .or_insert_with(|| Request { transactional_id: lane.transactional_id.clone(), batches: Vec::new() })
                .batches
                .push((key.clone(), head.bytes.clone()));
        }
        requests.into_values().collect()
    }

    /// The partitions of lanes with batches to send, led by nobody `leads`
    /// knows of (their leader is to be looked up).
    pub(crate) fn unrouted(&self, leads: impl Fn(&Arc<str>, i32) -> bool) -> Vec<(Arc<str>, i32)> {
        self.lanes
            .iter()
            .filter(|(key, lane)| !lane.batches.is_empty() && !leads(&key.topic, key.partition))
            .map(|(key, _)| (Arc::clone(&key.topic), key.partition))
            .collect()
    }

    /// The broker's answer for the in-flight head of `key`'s lane.
    pub(crate) fn answered(&mut self, key: &LaneKey, landed: Landed, now: Instant) -> After {
        let Some(lane) = self.lanes.get_mut(key) else { return After::default() };
        lane.in_flight = false;
        let failure = match landed {
            Landed::Written(offset) => {
                if let Some(head) = lane.batches.pop_front() {
                    head.slot.resolve(Ok(offset));
                }
                self.forget_if_empty(key);
                return After::default();
            }
            Landed::Again(code) => {
                let late = lane.batches.front().is_some_and(|b| now >= b.deadline);
                if !late {
                    // NOT_LEADER_OR_FOLLOWER, LEADER_NOT_AVAILABLE, UNKNOWN_TOPIC_OR_PARTITION…
                    return After { look_up_leaders: matches!(code, 3 | 5 | 6 | 74 | 75 | 100 | 103) };
                }
                Failure::Kafka(code)
            }
            Landed::Fenced(code) | Landed::OutOfSequence(code) => Failure::Kafka(code),
            Landed::Refused(code, message) if message.is_empty() => Failure::Kafka(code),
            Landed::Refused(code, message) => {
                Failure::Other(format!("{message} ({})", crate::error::code_name(code).unwrap_or_default()))
            }
        };
        self.fail_lane(key, &failure);
        After { look_up_leaders: false }
    }

    /// Settles a Produce request that carried the heads of `sent`'s lanes:
    /// each partition of the broker's `answer` as [`Lanes::answered`], one
    /// the answer left out or a request without an answer (`Err`: why) as
    /// [`Lanes::unanswered`]. Returns the lanes whose partitions' leaders
    /// are to be looked up again: those the answer says moved, or every
    /// one sent when no answer came (the connection, or the broker, is gone).
    pub(crate) fn settle(
        &mut self,
        sent: &[LaneKey],
        answer: Result<&[(String, i32, Landed)], &str>,
        now: Instant,
    ) -> Vec<LaneKey> {
        let outcomes = match answer {
            Ok(outcomes) => outcomes,
            Err(why) => {
                self.unanswered(sent, now, why);
                return sent.to_vec();
            }
        };
        let mut answered = vec![false; sent.len()];
        let mut moved = Vec::new();
        for (topic, partition, landed) in outcomes {
            let Some(i) = sent.iter().position(|k| *k.topic == **topic && k.partition == *partition) else {
                // A partition not asked about: nothing of ours.
                continue;
            };
            if std::mem::replace(&mut answered[i], true) {
                // Answered twice in one answer: the first stands.
                continue;
            }
            if self.answered(&sent[i], landed.clone(), now).look_up_leaders {
                moved.push(sent[i].clone());
            }
        }
        let missing: Vec<LaneKey> = sent.iter().zip(&answered).filter(|(_, a)| !**a).map(|(k, _)| k.clone()).collect();
        self.unanswered(&missing, now, "the broker's answer left the partition out");
        moved
    }

    /// The request carrying `keys`' heads got no answer (the connection
    /// failed or timed out): each goes again, same sequence, unless late.
    pub(crate) fn unanswered(&mut self, keys: &[LaneKey], now: Instant, why: &str) {
        for key in keys {
            let Some(lane) = self.lanes.get_mut(key) else { continue };
            lane.in_flight = false;
            if lane.batches.front().is_some_and(|b| now >= b.deadline) {
                self.fail_lane(key, &Failure::Other(format!("not written before its deadline: {why}")));
            }
        }
    }

    /// Fails every idle lane whose head batch is past its deadline (one
    /// whose leader was never found, say).
    pub(crate) fn expire(&mut self, now: Instant) {
        let late: Vec<LaneKey> = self
            .lanes
            .iter()
            .filter(|(_, lane)| !lane.in_flight && lane.batches.front().is_some_and(|b| now >= b.deadline))
            .map(|(key, _)| key.clone())
            .collect();
        for key in late {
            self.fail_lane(&key, &Failure::Other("no leader answered before the batch's deadline".into()));
        }
    }

    /// Fails every batch of `producer` not on the wire (it starts over, or
    /// is gone); its in-flight batches fail when answered.
    pub(crate) fn drop_producer(&mut self, producer: u64, failure: &Failure) {
        let keys: Vec<LaneKey> = self.lanes.keys().filter(|k| k.producer == producer).cloned().collect();
        for key in keys {
            self.fail_lane(&key, failure);
        }
    }

    /// Fails every batch held (the writer closes).
    pub(crate) fn drop_all(&mut self, failure: &Failure) {
        let keys: Vec<LaneKey> = self.lanes.keys().cloned().collect();
        for key in keys {
            self.fail_lane(&key, failure);
        }
    }

    /// The earliest deadline of a batch held (when to look again).
    pub(crate) fn next_deadline(&self) -> Option<Instant> {
        self.lanes.values().filter_map(|l| l.batches.front().map(|b| b.deadline)).min()
    }

    /// Batches held, on the wire or not.
    pub(crate) fn len(&self) -> usize {
        self.lanes.values().map(|l| l.batches.len()).sum()
    }

    fn fail_lane(&mut self, key: &LaneKey, failure: &Failure) {
        if let Some(lane) = self.lanes.get_mut(key) {
            // The head on the wire keeps its slot until answered.
            let keep = usize::from(lane.in_flight);
            for batch in lane.batches.drain(keep..) {
                batch.slot.resolve(Err(failure.clone()));
            }
        }
        self.forget_if_empty(key);
    }

    fn forget_if_empty(&mut self, key: &LaneKey) {
        if self.lanes.get(key).is_some_and(|l| l.batches.is_empty() && !l.in_flight) {
            self.lanes.remove(key);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::delivery::Delivery;
    use std::time::Duration;

    fn key(producer: u64, partition: i32) -> LaneKey {
        LaneKey { producer, topic: Arc::from("t"), partition }
    }

    fn pending(lanes: &mut Lanes, key: LaneKey, deadline: Instant) -> Delivery {
        let slot = Delivered::tracked();
        let delivery = Delivery::new(Arc::clone(&slot), 0, "t".into());
        lanes.push(key, Some(Arc::from("txn")), Pending { bytes: Bytes::from_static(b"b"), slot, deadline });
        delivery
    }

    #[test]
    fn one_batch_per_lane_on_the_wire_and_a_retry_goes_first() {
        let now = Instant::now();
        let later = now + Duration::from_secs(30);
        let mut lanes = Lanes::default();
        let first = pending(&mut lanes, key(1, 0), later);
        let second = pending(&mut lanes, key(1, 0), later);
        let other = pending(&mut lanes, key(1, 1), later);
        let requests = lanes.take(|_, _| true);
        assert_eq!(requests.len(), 1, "one producer, one request");
        assert_eq!(requests[0].batches.len(), 2, "one batch per partition");
        assert!(lanes.take(|_, _| true).is_empty(), "nothing more until answered");
        // The leader of partition 0 moved: the same batch goes again, first.
        let after = lanes.answered(&key(1, 0), Landed::Again(6), now);
        assert!(after.look_up_leaders);
        lanes.answered(&key(1, 1), Landed::Written(7), now);
        assert_eq!(other.wait(Duration::ZERO).expect("written"), 7);
        assert!(first.answered().is_none() && second.answered().is_none());
        let again = lanes.take(|_, _| true);
        assert_eq!(again[0].batches.len(), 1);
        lanes.answered(&key(1, 0), Landed::Written(3), now);
        assert_eq!(first.wait(Duration::ZERO).expect("written"), 3);
        lanes.take(|_, _| true);
        lanes.answered(&key(1, 0), Landed::Written(4), now);
        assert_eq!(second.wait(Duration::ZERO).expect("written"), 4);
        assert_eq!(lanes.len(), 0);
    }

    #[test]
    fn producers_go_in_requests_of_their_own_and_only_to_their_leader() {
        let later = Instant::now() + Duration::from_secs(30);
        let mut lanes = Lanes::default();
        pending(&mut lanes, key(1, 0), later);
        pending(&mut lanes, key(2, 0), later);
        pending(&mut lanes, key(2, 1), later);
        let requests = lanes.take(|_, partition| partition == 0);
        assert_eq!(requests.len(), 2);
        assert!(requests.iter().all(|r| r.batches.len() == 1));
        assert_eq!(lanes.unrouted(|_, partition| partition == 0), [(Arc::from("t"), 1)]);
    }

    #[test]
    fn a_refused_or_late_batch_fails_its_lane_behind_it() {
        let now = Instant::now();
        let mut lanes = Lanes::default();
        let fenced = pending(&mut lanes, key(1, 0), now + Duration::from_secs(1));
        let behind = pending(&mut lanes, key(1, 0), now + Duration::from_secs(1));
        lanes.take(|_, _| true);
        lanes.answered(&key(1, 0), Landed::Fenced(90), now);
        assert!(fenced.wait(Duration::ZERO).expect_err("fenced").is_fenced());
        assert!(behind.wait(Duration::ZERO).expect_err("fails with it").is_fenced());

        let late = pending(&mut lanes, key(1, 1), now + Duration::from_secs(1));
        lanes.take(|_, _| true);
        lanes.unanswered(&[key(1, 1)], now, "connection reset");
        assert!(late.answered().is_none(), "goes again");
        lanes.take(|_, _| true);
        lanes.unanswered(&[key(1, 1)], now + Duration::from_secs(2), "connection reset");
        let e = late.wait(Duration::ZERO).expect_err("late");
        assert!(e.to_string().contains("connection reset"), "{e}");

        let never_routed = pending(&mut lanes, key(3, 0), now + Duration::from_secs(1));
        lanes.expire(now + Duration::from_secs(2));
        assert!(never_routed.wait(Duration::ZERO).is_err());
        assert_eq!(lanes.len(), 0);
    }

    #[test]
    fn an_answer_settles_what_it_names_and_sends_again_what_it_leaves_out() {
        let now = Instant::now();
        let later = now + Duration::from_secs(30);
        let mut lanes = Lanes::default();
        let written = pending(&mut lanes, key(1, 0), later);
        let moved = pending(&mut lanes, key(1, 1), later);
        let left_out = pending(&mut lanes, key(1, 2), later);
        let sent: Vec<LaneKey> = lanes.take(|_, _| true)[0].batches.iter().map(|(k, _)| k.clone()).collect();
        let answer = [
            ("t".to_owned(), 0, Landed::Written(5)),
            // Twice for one partition, and one not asked about: neither counts.
            ("t".to_owned(), 0, Landed::Fenced(90)),
            ("t".to_owned(), 9, Landed::Written(1)),
            ("t".to_owned(), 1, Landed::Again(6)),
        ];
        let look_up = lanes.settle(&sent, Ok(&answer), now);
        assert_eq!(look_up, [key(1, 1)], "NOT_LEADER_OR_FOLLOWER: its leader moved");
        assert_eq!(written.wait(Duration::ZERO).expect("written"), 5);
        assert!(moved.answered().is_none() && left_out.answered().is_none(), "both go again");
        let again: Vec<LaneKey> = lanes.take(|_, _| true)[0].batches.iter().map(|(k, _)| k.clone()).collect();
        assert_eq!(again, [key(1, 1), key(1, 2)]);
        // No answer at all, past their deadline: they fail, saying why.
        let look_up = lanes.settle(&again, Err("connection reset"), later);
        assert_eq!(look_up, again, "every leader is asked again");
        let e = left_out.wait(Duration::ZERO).expect_err("late");
        assert!(e.to_string().contains("connection reset"), "{e}");
        assert!(moved.wait(Duration::ZERO).is_err());
        assert_eq!(lanes.len(), 0);
    }

    #[test]
    fn dropping_a_producer_fails_what_it_has_not_sent() {
        let later = Instant::now() + Duration::from_secs(30);
        let mut lanes = Lanes::default();
        let on_wire = pending(&mut lanes, key(1, 0), later);
        lanes.take(|_, _| true);
        let queued = pending(&mut lanes, key(1, 0), later);
        lanes.drop_producer(1, &Failure::Other("aborted".into()));
        assert!(queued.wait(Duration::ZERO).is_err());
        assert!(on_wire.answered().is_none(), "answered by the broker, not here");
        lanes.answered(&key(1, 0), Landed::Written(0), Instant::now());
        assert_eq!(on_wire.wait(Duration::ZERO).expect("written"), 0);
    }
}
