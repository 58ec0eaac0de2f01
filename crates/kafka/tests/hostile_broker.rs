//! A stand-in broker of the test's own, on a loopback socket, that answers
//! every request with hand-built bytes a real broker never sends. kshard's
//! own client must refuse them with an error naming the call and the field,
//! count them, and go on: before answers were checked, 13 bytes declaring
//! 2^32 − 2 brokers made the `kafka-protocol` crate's decoder ask for
//! 412 GB, and the process aborted.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use kshard_kafka::{ClientSettings, ClusterAdmin, PartitionReader, ReadEvent};

/// A Metadata v9 body: no throttle, then a broker count of 2^32 − 2.
const METADATA_2_POW_32_BROKERS: &[u8] = &[0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0x0f, 0, 0, 0, 0];

/// A broker on 127.0.0.1 that answers each request with `body` after a
/// flexible response header (the request's correlation id, no tags), until
/// dropped.
struct StandIn {
    address: String,
    stop: Arc<AtomicBool>,
}

impl StandIn {
    fn answering(body: &'static [u8]) -> StandIn {
        let listener = TcpListener::bind("127.0.0.1:0").expect("binds");
        listener.set_nonblocking(true).expect("nonblocking");
        let address = listener.local_addr().expect("address").to_string();
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = Arc::clone(&stop);
        std::thread::spawn(move || {
            while !stopped.load(Ordering::Acquire) {
                match listener.accept() {
                    Ok((socket, _)) => {
                        std::thread::spawn(move || answer(socket, body));
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(10)),
                }
            }
        });
        StandIn { address, stop }
    }
}

impl Drop for StandIn {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
    }
}

fn answer(mut socket: TcpStream, body: &[u8]) {
    socket.set_nonblocking(false).expect("blocking");
    loop {
        let mut size = [0u8; 4];
        if socket.read_exact(&mut size).is_err() {
            return;
        }
        let mut request = vec![0u8; i32::from_be_bytes(size).clamp(0, 1 << 20) as usize];
        if socket.read_exact(&mut request).is_err() || request.len() < 8 {
            return;
        }
        // api key (2), api version (2), correlation id (4).
        let mut frame = request[4..8].to_vec();
        frame.push(0); // the flexible header's tagged fields
        frame.extend_from_slice(body);
        let mut out = (frame.len() as i32).to_be_bytes().to_vec();
        out.extend(frame);
        if socket.write_all(&out).is_err() {
            return;
        }
    }
}

#[test]
fn a_metadata_answer_declaring_four_billion_brokers_is_refused_by_name() {
    let broker = StandIn::answering(METADATA_2_POW_32_BROKERS);
    let settings = ClientSettings::new(broker.address.clone());
    let admin = ClusterAdmin::new(&settings, Duration::from_secs(5)).expect("settings").expect("kshard's client");
    let e = admin.describe(&[], false).expect_err("refused");
    let message = e.to_string();
    assert!(message.contains("Metadata v9") && message.contains("field brokers"), "{message}");
    assert!(settings.traffic().totals().malformed_answers >= 1, "counted");
}

#[test]
fn a_reader_whose_broker_sends_such_answers_goes_on_waiting() {
    let broker = StandIn::answering(METADATA_2_POW_32_BROKERS);
    let settings = ClientSettings::new(broker.address.clone());
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
