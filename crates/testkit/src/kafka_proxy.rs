//! [`KafkaProxy`]: a proxy on 127.0.0.1 in front of one real broker, which
//! understands just enough of Kafka's protocol to stand in for it and to
//! fail one kind of connection only.
//!
//! Every Metadata and FindCoordinator answer is rewritten to name the
//! proxy as the broker, so that every connection a client makes (its
//! fetch connections too) goes through it. Then
//! [`KafkaProxy::black_hole_fetches`] makes it stop forwarding, both ways,
//! on every connection that has sent a Fetch request, while every other
//! connection (metadata, admin calls, offset commits) goes on working:
//! the fault of a firewall or a proxy that freezes long-lived fetch
//! connections, which no error reports.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::{FindCoordinatorResponse, MetadataResponse, ResponseHeader};
use kafka_protocol::protocol::{Decodable, Encodable, HeaderVersion, StrBytes};

/// Metadata's and FindCoordinator's API keys.
const METADATA: i16 = 3;
const FIND_COORDINATOR: i16 = 10;
const FETCH: i16 = 1;

/// The proxy; stops accepting when dropped (connections open go on until
/// either side closes).
#[derive(Debug)]
pub struct KafkaProxy {
    address: String,
    shared: Arc<Shared>,
}

#[derive(Debug)]
struct Shared {
    upstream: String,
    port: i32,
    black_hole: AtomicBool,
    stop: AtomicBool,
}

impl KafkaProxy {
    /// A proxy for the broker at `upstream` (`host:port`, PLAINTEXT).
    pub fn start(upstream: &str) -> KafkaProxy {
        let listener = TcpListener::bind("127.0.0.1:0").expect("binds a loopback port");
        listener.set_nonblocking(true).expect("nonblocking");
        let address = listener.local_addr().expect("an address").to_string();
        let port = listener.local_addr().expect("an address").port().into();
        let shared = Arc::new(Shared {
            upstream: upstream.to_owned(),
            port,
            black_hole: AtomicBool::new(false),
            stop: AtomicBool::new(false),
        });
        let accepting = Arc::clone(&shared);
        std::thread::spawn(move || {
            while !accepting.stop.load(Ordering::Acquire) {
                match listener.accept() {
                    Ok((client, _)) => {
                        let shared = Arc::clone(&accepting);
                        std::thread::spawn(move || relay(client, &shared));
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(10)),
                }
            }
        });
        KafkaProxy { address, shared }
    }

    /// Its `host:port`, to give clients as their bootstrap server.
    pub fn address(&self) -> &str {
        &self.address
    }

    /// From now on, connections that send (or have sent) a Fetch request
    /// get no more bytes either way; `false` lets new ones through again.
    pub fn black_hole_fetches(&self, on: bool) {
        self.shared.black_hole.store(on, Ordering::Release);
    }
}

impl Drop for KafkaProxy {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Release);
    }
}

/// One client connection: requests up, answers down (rewritten).
fn relay(client: TcpStream, shared: &Arc<Shared>) {
    let _ = client.set_nonblocking(false);
    let Ok(broker) = TcpStream::connect(&shared.upstream) else { return };
    let (Ok(mut client_read), Ok(mut broker_read)) = (client.try_clone(), broker.try_clone()) else { return };
    // Correlation id → (API key, version), from each request, for its answer.
    let asked: Arc<Mutex<HashMap<i32, (i16, i16)>>> = Arc::default();
    let fetches = Arc::new(AtomicBool::new(false));
    let (up_asked, up_fetches, up_shared) = (Arc::clone(&asked), Arc::clone(&fetches), Arc::clone(shared));
    let mut broker_write = broker;
    std::thread::spawn(move || {
        while let Some(frame) = read_frame(&mut client_read) {
            let (key, version, correlation) = match frame.get(..8) {
                Some(h) => (
                    i16::from_be_bytes([h[0], h[1]]),
                    i16::from_be_bytes([h[2], h[3]]),
                    i32::from_be_bytes([h[4], h[5], h[6], h[7]]),
                ),
                None => break,
            };
            up_fetches.fetch_or(key == FETCH, Ordering::AcqRel);
            if up_fetches.load(Ordering::Acquire) && up_shared.black_hole.load(Ordering::Acquire) {
                continue;
            }
            up_asked.lock().unwrap_or_else(PoisonError::into_inner).insert(correlation, (key, version));
            if write_frame(&mut broker_write, &frame).is_err() {
                break;
            }
        }
        let _ = broker_write.shutdown(Shutdown::Both);
    });
    let mut client_write = client;
    while let Some(frame) = read_frame(&mut broker_read) {
        if fetches.load(Ordering::Acquire) && shared.black_hole.load(Ordering::Acquire) {
            continue;
        }
        let correlation = frame.get(..4).map(|c| i32::from_be_bytes([c[0], c[1], c[2], c[3]]));
        let request = correlation.and_then(|c| asked.lock().unwrap_or_else(PoisonError::into_inner).remove(&c));
        let frame = match request {
            Some((METADATA, version)) => rewrite::<MetadataResponse>(&frame, version, shared.port, |m, port| {
                for b in &mut m.brokers {
                    b.host = StrBytes::from_static_str("127.0.0.1");
                    b.port = port;
                }
            }),
            Some((FIND_COORDINATOR, version)) => {
                rewrite::<FindCoordinatorResponse>(&frame, version, shared.port, |f, port| {
                    f.host = StrBytes::from_static_str("127.0.0.1");
                    f.port = port;
                    for c in &mut f.coordinators {
                        c.host = StrBytes::from_static_str("127.0.0.1");
                        c.port = port;
                    }
                })
            }
            _ => frame,
        };
        if write_frame(&mut client_write, &frame).is_err() {
            break;
        }
    }
    let _ = client_write.shutdown(Shutdown::Both);
}

/// `frame` (a response header and body) with its body decoded as `A` at
/// `version`, changed by `change`, and encoded again; as it was when it
/// does not decode.
fn rewrite<A: Decodable + Encodable + HeaderVersion>(
    frame: &[u8],
    version: i16,
    port: i32,
    change: impl FnOnce(&mut A, i32),
) -> Vec<u8> {
    let mut bytes = Bytes::copy_from_slice(frame);
    let header_version = A::header_version(version);
    let Ok(header) = ResponseHeader::decode(&mut bytes, header_version) else { return frame.to_vec() };
    let Ok(mut answer) = A::decode(&mut bytes, version) else { return frame.to_vec() };
    change(&mut answer, port);
    let mut out = BytesMut::new();
    if header.encode(&mut out, header_version).is_err() || answer.encode(&mut out, version).is_err() {
        return frame.to_vec();
    }
    out.to_vec()
}

fn read_frame(from: &mut TcpStream) -> Option<Vec<u8>> {
    let mut size = [0u8; 4];
    from.read_exact(&mut size).ok()?;
    let size = usize::try_from(i32::from_be_bytes(size)).ok().filter(|&n| n <= 512 << 20)?;
    let mut frame = vec![0u8; size];
    from.read_exact(&mut frame).ok()?;
    Some(frame)
}

fn write_frame(to: &mut TcpStream, frame: &[u8]) -> std::io::Result<()> {
    let size = i32::try_from(frame.len()).map_err(std::io::Error::other)?;
    to.write_all(&size.to_be_bytes())?;
    to.write_all(frame)
}
