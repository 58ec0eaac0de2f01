//! A stand-in broker of the test's own, on a loopback socket, that answers
//! every request with hand-built bytes a real broker never sends. kshard's
//! own client must refuse them with an error naming the call and the field,
//! count them, and go on: before answers were checked, 13 bytes declaring
//! 2^32 − 2 brokers made the `kafka-protocol` crate's decoder ask for
//! 412 GB, and the process aborted.

use std::time::{Duration, Instant};

use kshard_kafka::{BrokerAdmin, Client, ClusterAdmin, PartitionReader, ReadEvent, WireAdmin};
use kshard_testkit::{HostileBroker, METADATA_2_POW_32_BROKERS};

#[test]
fn a_metadata_answer_declaring_four_billion_brokers_is_refused_by_name() {
    let broker = HostileBroker::answering(METADATA_2_POW_32_BROKERS);
    let settings = Client::to_brokers(broker.address());
    let admin = ClusterAdmin::new(&settings, Duration::from_secs(5)).expect("settings").expect("kshard's client");
    let e = admin.describe(&[], false).expect_err("refused");
    let message = e.to_string();
    assert!(message.contains("Metadata v9") && message.contains("field brokers"), "{message}");
    assert!(settings.traffic().totals().malformed_answers >= 1, "counted");
}

#[test]
fn a_reader_whose_broker_sends_such_answers_goes_on_waiting() {
    let broker = HostileBroker::answering(METADATA_2_POW_32_BROKERS);
    let settings = Client::to_brokers(broker.address());
    let reader = PartitionReader::new(&settings, "t", &[(0, Some(0))]).expect("a reader");
    // The reader's metadata thread asks, is refused, and asks again.
    let deadline = Instant::now() + Duration::from_secs(30);
    while settings.traffic().totals().malformed_answers < 2 {
        assert!(Instant::now() < deadline, "the reader asked for metadata twice within 30 s");
        // Errors are told (a broker that answers nothing sensible); no record is.
        if let Ok(event) = reader.poll(Duration::from_millis(100)) {
            assert!(matches!(event, ReadEvent::Idle), "nothing to read from such a broker");
        }
    }
}

/// A broker before Kafka 3.0 (no Metadata v9, no batched OffsetFetch):
/// kshard's admin client hands its calls to librdkafka's, having asked only
/// ApiVersions v0 (which every broker answers), and the stand-in's garbage
/// answers are then librdkafka's to refuse: an error, not an abort.
#[test]
fn an_old_broker_is_served_by_librdkafkas_admin_client() {
    let broker = HostileBroker::before_kafka_3(METADATA_2_POW_32_BROKERS);
    let settings = Client::to_brokers(broker.address());
    let admin = WireAdmin::new(&settings, Duration::from_secs(2)).expect("settings").expect("kshard's client");
    assert_eq!(admin.client(), None, "nothing asked yet");
    let asked = BrokerAdmin::topics(&admin);
    assert_eq!(admin.client(), Some("librdkafka"), "{asked:?}");
    assert!(asked.is_err(), "no metadata from such a broker: {asked:?}");
}
