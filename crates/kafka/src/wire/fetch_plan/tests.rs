//! The fetcher's decisions, step by step on a clock of the test's own.

use super::*;
use crate::wire::read_ahead::{Queued, READ_AHEAD_BYTES, answer_room};
use kafka_protocol::messages::list_offsets_response::{ListOffsetsPartitionResponse, ListOffsetsTopicResponse};
use kafka_protocol::messages::metadata_response::{
    MetadataResponseBroker, MetadataResponsePartition, MetadataResponseTopic,
};
use kafka_protocol::messages::{BrokerId, TopicName};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::records::Compression;

/// Every partition of `state` led by `broker`, which has a thread, and
/// no leaders due.
pub(crate) fn led_by(state: &mut FetchState, broker: i32) {
    state.partitions.values_mut().for_each(|p| p.leader = Some(broker));
    state.threads.insert(broker);
    state.metadata_due = false;
}

fn key(topic: &str, partition: i32) -> PartitionKey {
    (Arc::from(topic), partition)
}

fn sink(limit: usize) -> Arc<Sink> {
    Arc::new(Sink::new(limit, Arc::default()))
}

/// What `sink` holds, in words: `records@N`, `end@N` or the error.
fn heard(sink: &Sink) -> Vec<String> {
    std::iter::from_fn(|| sink.next(Duration::ZERO).map(|(d, _)| d))
        .map(|d| match d {
            Delivery::Records { mut records, .. } => {
                let first = records.next_record().ok().flatten().map(|r| r.offset);
                format!("records@{}", first.unwrap_or(-1))
            }
            Delivery::End { next_offset, .. } => format!("end@{next_offset}"),
            Delivery::Failed(e) => e.to_string(),
        })
        .collect()
}

/// Records at offsets `first..first + count`, one batch, as a producer writes it.
fn batch(first: i64, count: i64) -> Bytes {
    let records: Vec<(i64, Option<&'static [u8]>)> = (first..first + count).map(|o| (o, Some(&b"v"[..]))).collect();
    crate::wire::records::tests::batch(&records, Compression::None, None)
}

/// An answer for `topic`/`partition` with `records`, its high watermark `hw`.
fn part<'a>(topic: &'a str, partition: i32, error_code: i16, hw: i64, records: &'a [u8]) -> PartitionData<'a> {
    PartitionData {
        topic,
        partition,
        error_code,
        high_watermark: hw,
        last_stable_offset: hw,
        log_start_offset: 0,
        aborted: Vec::new(),
        records,
    }
}

fn asked(key: &PartitionKey, offset: i64) -> HashMap<PartitionKey, Ask> {
    HashMap::from([(key.clone(), Ask { offset, max_bytes: PARTITION_MAX_BYTES })])
}

pub(crate) fn metadata(brokers: &[i32], leaders: &[(&str, i32, i32)]) -> MetadataResponse {
    let mut answer = MetadataResponse::default().with_brokers(
        brokers
            .iter()
            .map(|&b| {
                MetadataResponseBroker::default()
                    .with_node_id(BrokerId(b))
                    .with_host(StrBytes::from_static_str("127.0.0.1"))
                    .with_port(9000 + b)
            })
            .collect(),
    );
    for &(topic, partition, leader) in leaders {
        let p = MetadataResponsePartition::default().with_partition_index(partition).with_leader_id(BrokerId(leader));
        let t = MetadataResponseTopic::default()
            .with_name(Some(TopicName(StrBytes::from_string(topic.to_owned()))))
            .with_partitions(vec![p]);
        answer.topics.push(t);
    }
    answer
}

fn log_start(topic: &str, partition: i32, error_code: i16, offset: i64) -> ListOffsetsResponse {
    let p = ListOffsetsPartitionResponse::default()
        .with_partition_index(partition)
        .with_error_code(error_code)
        .with_offset(offset);
    let t = ListOffsetsTopicResponse::default()
        .with_name(TopicName(StrBytes::from_string(topic.to_owned())))
        .with_partitions(vec![p]);
    ListOffsetsResponse::default().with_topics(vec![t])
}

#[test]
fn a_larger_batch_is_asked_for_whole_up_to_the_most() {
    assert_eq!(larger_ask(PARTITION_MAX_BYTES, 3 << 20), Some(3 << 20));
    assert_eq!(larger_ask(PARTITION_MAX_BYTES, PARTITION_MAX_BYTES + 1), Some(2 * PARTITION_MAX_BYTES));
    // Asked for 100 MiB, a 101 MiB batch: twice 100 MiB is past the
    // most (the bounds of a clamp crossed here, and the thread panicked).
    assert_eq!(larger_ask(5 << 20, 6 << 20), Some(10 << 20));
    assert_eq!(larger_ask(100 << 20, 101 << 20), Some(PARTITION_MOST_BYTES));
    assert_eq!(larger_ask(5 << 20, 200 << 20), Some(PARTITION_MOST_BYTES));
    assert_eq!(larger_ask(PARTITION_MOST_BYTES, 200 << 20), None, "nothing more to ask");
    assert_eq!(larger_ask(2 << 20, 1 << 20), None, "it fitted: something else is wrong");
    assert_eq!(larger_ask(i32::MAX - 1, i32::MAX), None);
}

/// A v2 batch header at offset 0 that says the batch is `size` bytes.
fn header_of(size: i32) -> Vec<u8> {
    let mut h = Vec::new();
    h.extend_from_slice(&0i64.to_be_bytes());
    h.extend_from_slice(&(size - 12).to_be_bytes());
    h.extend_from_slice(&0i32.to_be_bytes());
    h.push(2);
    h.extend_from_slice(&[0; 4 + 2 + 4 + 8 + 8 + 8 + 6]);
    h.extend_from_slice(&1i32.to_be_bytes());
    h
}

fn records(bytes: usize) -> Delivery {
    Delivery::Records { key: key("t", 9), records: PartitionRecords::new(Bytes::new(), 0, false, Vec::new()), bytes }
}

#[test]
fn past_the_read_ahead_only_readers_that_hold_nothing_are_fetched_for_up_to_their_limit() {
    let queued = Arc::new(Queued::default());
    let (waiting, holding) =
        (Arc::new(Sink::new(256 << 10, Arc::clone(&queued))), Arc::new(Sink::new(256 << 10, Arc::clone(&queued))));
    holding.push(records(100));
    let (a, b) = (key("t", 0), key("t", 1));
    let mut state = FetchState::new(false);
    state.add(1, &waiting, "t", &[(0, Some(0))]);
    state.add(2, &holding, "t", &[(1, Some(0))]);
    led_by(&mut state, 1);
    let now = Instant::now();
    // With room, both, as asked; the answer up to the room.
    let with_room = state.plan(1, answer_room(queued.get()), now);
    assert_eq!(with_room.wanted.keys().collect::<Vec<_>>(), [&a, &b]);
    assert_eq!(with_room.wanted[&a].max_bytes, PARTITION_MAX_BYTES);
    assert_eq!(with_room.answer_bytes, ANSWER_MAX_BYTES);
    // Without (other readers hold the budget): only the reader that
    // holds nothing, for no more than its queue's limit.
    let other = Sink::new(1 << 30, Arc::clone(&queued));
    other.push(records(READ_AHEAD_BYTES));
    let room = answer_room(queued.get());
    assert_eq!(room, None);
    let without = state.plan(1, room, now);
    assert_eq!(without.wanted.keys().collect::<Vec<_>>(), [&a]);
    assert_eq!(without.wanted[&a].max_bytes, 256 << 10);
    // A batch of 300 KiB that limit cut short: asked for whole from then on.
    let p = state.partitions.get_mut(&a).expect("the partition");
    no_whole_batch(p, &a, &header_of(300 << 10), &without.wanted[&a], now);
    assert!(p.not_before.is_none(), "not refused");
    assert_eq!(p.max_bytes, PARTITION_MAX_BYTES);
    assert_eq!(state.plan(1, room, now).wanted[&a].max_bytes, 300 << 10);
    // Read down, room again.
    assert!(other.next(Duration::ZERO).is_some());
    assert_eq!(queued.get(), 100);
    drop((holding, state));
    assert_eq!(queued.get(), 0, "what a dropped reader held goes with it");
}

#[test]
fn records_are_handed_to_each_reader_from_its_own_position_and_the_end_told_once() {
    let (early, late) = (sink(1 << 20), sink(1 << 20));
    let mut state = FetchState::new(false);
    state.add(1, &early, "t", &[(0, Some(0))]);
    state.add(2, &late, "t", &[(0, Some(5))]);
    led_by(&mut state, 1);
    let now = Instant::now();
    let plan = state.plan(1, Some(ANSWER_MAX_BYTES), now);
    assert_eq!(plan.wanted[&key("t", 0)].offset, 0, "the lowest position");
    let frame = batch(0, 10);
    let moved = state.fetched(&frame, vec![part("t", 0, 0, 10, &frame)], &asked(&key("t", 0), 0), now);
    assert!(!moved);
    assert_eq!(heard(&early), ["records@0"]);
    assert_eq!(heard(&late), ["records@5"], "from inside the batch");
    assert_eq!(state.known_end(&key("t", 0)), Some(10));
    state.tell_ends(1);
    state.tell_ends(1);
    assert_eq!(heard(&early), ["end@10"], "once");
    assert_eq!(heard(&late), ["end@10"]);
    assert!(state.plan(1, Some(ANSWER_MAX_BYTES), now).wanted[&key("t", 0)].offset == 10, "long polls at the end");
}

#[test]
fn a_refused_partition_is_told_and_asked_again_after_its_wait() {
    let reader = sink(1 << 20);
    let mut state = FetchState::new(false);
    state.add(1, &reader, "t", &[(0, Some(0))]);
    led_by(&mut state, 1);
    let t0 = Instant::now();
    let moved = state.fetched(&Bytes::new(), vec![part("t", 0, 29, -1, &[])], &asked(&key("t", 0), 0), t0);
    assert!(!moved, "an ACL is no leader moving");
    assert_eq!(heard(&reader).len(), 1, "told");
    assert!(state.plan(1, None, t0 + Duration::from_secs(4)).is_empty(), "waits");
    assert!(!state.plan(1, None, t0 + REFUSED_BACKOFF).is_empty(), "asked again");
    // A topic the principal may not describe: told every 5 s too.
    let denied = MetadataResponse::default().with_topics(vec![
        MetadataResponseTopic::default()
            .with_name(Some(TopicName(StrBytes::from_static_str("t"))))
            .with_error_code(TOPIC_AUTHORIZATION_FAILED),
    ]);
    state.metadata(&denied, t0 + Duration::from_secs(1));
    assert!(heard(&reader).is_empty(), "still waiting");
    state.metadata(&denied, t0 + REFUSED_BACKOFF);
    assert_eq!(heard(&reader).len(), 1);
}

#[test]
fn a_moved_leader_is_asked_for_again_and_its_partitions_wait_for_a_thread() {
    let reader = sink(1 << 20);
    let mut state = FetchState::new(false);
    state.add(1, &reader, "t", &[(0, Some(0)), (1, Some(0))]);
    assert!(state.metadata_due && state.leaderless());
    let now = Instant::now();
    let start = state.metadata(&metadata(&[1, 2], &[("t", 0, 1), ("t", 1, 2)]), now);
    assert_eq!(start, [1, 2], "a thread for each leader");
    state.threads_started([1]);
    assert!(state.leads(1) && !state.leads(2), "broker 2's thread would not start: its partition waits");
    assert!(state.leaderless());
    assert_eq!(state.address(1).as_deref(), Some("127.0.0.1:9001"));
    state.metadata_due = false;
    let moved = state.fetched(&Bytes::new(), vec![part("t", 0, 6, -1, &[])], &asked(&key("t", 0), 0), now);
    assert!(moved && state.metadata_due, "NOT_LEADER_OR_FOLLOWER");
    assert!(!state.leads(1));
    assert!(heard(&reader).is_empty(), "a leader moving is not the reader's business");
    // A broker failing hands its partitions back the same way.
    state.metadata(&metadata(&[1, 2], &[("t", 0, 1), ("t", 1, 1)]), now);
    state.threads_started([]);
    state.metadata_due = false;
    state.broker_failed(1);
    assert!(state.metadata_due && !state.leads(1));
}

#[test]
fn an_offset_out_of_range_reads_on_from_the_log_start_and_a_truncation_is_told() {
    let (behind, ahead) = (sink(1 << 20), sink(1 << 20));
    let mut state = FetchState::new(false);
    state.add(1, &behind, "t", &[(0, Some(3))]);
    state.add(2, &ahead, "t", &[(1, Some(50))]);
    led_by(&mut state, 1);
    let now = Instant::now();
    state.fetched(&Bytes::new(), vec![part("t", 0, OFFSET_OUT_OF_RANGE, -1, &[])], &asked(&key("t", 0), 3), now);
    state.fetched(&Bytes::new(), vec![part("t", 1, OFFSET_OUT_OF_RANGE, -1, &[])], &asked(&key("t", 1), 50), now);
    let plan = state.plan(1, None, now);
    assert_eq!(plan.earliest.len(), 2, "both log starts asked for");
    assert!(plan.wanted.is_empty());
    state.log_starts(&log_start("t", 0, 0, 10), now);
    state.log_starts(&log_start("t", 1, 0, 0), now);
    assert!(heard(&behind).is_empty(), "deleted before read: nothing to drop");
    let told = heard(&ahead);
    assert!(told.len() == 1 && told[0].contains("past the log's end"), "{told:?}");
    let plan = state.plan(1, Some(ANSWER_MAX_BYTES), now);
    assert_eq!(plan.wanted[&key("t", 0)].offset, 10);
    assert_eq!(plan.wanted[&key("t", 1)].offset, 0);
}

#[test]
fn a_batch_past_the_most_is_refused_and_its_readers_hear_why() {
    let reader = sink(1 << 20);
    let mut state = FetchState::new(false);
    state.add(1, &reader, "t", &[(0, Some(0))]);
    led_by(&mut state, 1);
    let now = Instant::now();
    let huge = header_of(PARTITION_MOST_BYTES + 1);
    let ask = Ask { offset: 0, max_bytes: PARTITION_MAX_BYTES };
    for _ in 0..10 {
        let asked = HashMap::from([(key("t", 0), ask)]);
        state.fetched(&Bytes::new(), vec![part("t", 0, 0, 1, &huge)], &asked, now);
    }
    let told = heard(&reader);
    assert!(told.iter().any(|t| t.contains("a record batch of")), "{told:?}");
    assert!(state.plan(1, None, now).is_empty(), "not asked again at once");
}
