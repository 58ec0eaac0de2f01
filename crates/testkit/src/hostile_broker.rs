//! [`HostileBroker`]: a stand-in broker on 127.0.0.1 that answers every
//! request but ApiVersions with the same hand-built bytes, which a real
//! broker never sends: how tests show that nothing a broker sends can stop
//! kshard. ApiVersions gets a sound answer, or, from
//! [`HostileBroker::with_api_versions`], bytes of the test's own:
//! [`API_VERSIONS_NULL_LIST`] aborts a process in which librdkafka's client
//! reads it (2.12.1, rdkafka_request.c: `rd_malloc` of −6 bytes).

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// A Metadata v9 body (and the start of many others): no throttle, then an
/// array count of 2^32 − 2; 13 bytes that once made kshard ask for 412 GB.
pub const METADATA_2_POW_32_BROKERS: &[u8] = &[0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0x0f, 0, 0, 0, 0];

/// An ApiVersions v3 answer with no error and a null list of APIs (compact
/// count 0), no throttle, no tags: librdkafka 2.12.1 takes the count, −1,
/// for an allocation, and the process aborts.
pub const API_VERSIONS_NULL_LIST: &[u8] = &[0, 0, 0, 0, 0, 0, 0, 0];

/// A broker on 127.0.0.1 that answers each request with `body` after a
/// flexible response header (the request's correlation id, no tags), until
/// dropped.
#[derive(Debug)]
pub struct HostileBroker {
    address: String,
    stop: Arc<AtomicBool>,
}

impl HostileBroker {
    /// Listens on a free loopback port and answers with `body`.
    pub fn answering(body: &'static [u8]) -> HostileBroker {
        Self::start(None, body)
    }

    /// [`HostileBroker::answering`] `body`, and ApiVersions with
    /// `api_versions` (after the correlation id).
    pub fn with_api_versions(api_versions: &'static [u8], body: &'static [u8]) -> HostileBroker {
        Self::start(Some(api_versions), body)
    }

    /// [`HostileBroker::answering`] `body`, with sound ApiVersions answers
    /// of a broker before Kafka 3.0 (Metadata to v8, OffsetFetch to v7).
    pub fn before_kafka_3(body: &'static [u8]) -> HostileBroker {
        Self::start(Some(OLD_BROKER), body)
    }

    fn start(api_versions: Option<&'static [u8]>, body: &'static [u8]) -> HostileBroker {
        let listener = TcpListener::bind("127.0.0.1:0").expect("binds");
        listener.set_nonblocking(true).expect("nonblocking");
        let address = listener.local_addr().expect("address").to_string();
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = Arc::clone(&stop);
        std::thread::spawn(move || {
            while !stopped.load(Ordering::Acquire) {
                match listener.accept() {
                    Ok((socket, _)) => {
                        std::thread::spawn(move || answer(socket, api_versions, body));
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(10)),
                }
            }
        });
        HostileBroker { address, stop }
    }

    /// Its `host:port`.
    pub fn address(&self) -> &str {
        &self.address
    }
}

impl Drop for HostileBroker {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
    }
}

fn answer(mut socket: TcpStream, versions: Option<&[u8]>, body: &[u8]) {
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
        if request[..2] == API_VERSIONS.to_be_bytes() {
            // A sound answer (its header has no tagged fields), so that a
            // client goes on to the calls that get `body`; or the test's.
            let version = i16::from_be_bytes([request[2], request[3]]);
            match versions {
                Some(OLD_BROKER) => frame.extend(api_versions_of(version, &[(3, 8), (9, 7)])),
                Some(versions) => frame.extend_from_slice(versions),
                None => frame.extend(api_versions(version)),
            }
        } else {
            frame.push(0); // the flexible header's tagged fields
            frame.extend_from_slice(body);
        }
        let mut out = (frame.len() as i32).to_be_bytes().to_vec();
        out.extend(frame);
        if socket.write_all(&out).is_err() {
            return;
        }
    }
}

/// ApiVersions' API key.
const API_VERSIONS: i16 = 18;

/// The marker of [`HostileBroker::before_kafka_3`]'s ApiVersions answers.
const OLD_BROKER: &[u8] = b"old broker";

/// An ApiVersions answer at `version` (3 and later are flexible) that
/// lists API keys 0 to 80, each at versions 0 to 12 (ApiVersions itself 0
/// to 3).
fn api_versions(version: i16) -> Vec<u8> {
    api_versions_of(version, &[])
}

/// [`api_versions`], with the highest version of each key in `highest`
/// (key, version) instead.
fn api_versions_of(version: i16, highest: &[(i16, i16)]) -> Vec<u8> {
    let flexible = version >= 3;
    let mut body = 0i16.to_be_bytes().to_vec(); // no error
    let keys: Vec<i16> = (0..=80).collect();
    if flexible {
        body.push(u8::try_from(keys.len() + 1).unwrap_or(u8::MAX)); // compact count: N + 1
    } else {
        body.extend((keys.len() as i32).to_be_bytes());
    }
    for key in keys {
        body.extend(key.to_be_bytes());
        body.extend(0i16.to_be_bytes());
        let max = highest.iter().find(|(k, _)| *k == key).map_or(12, |(_, v)| *v);
        body.extend(if key == API_VERSIONS { 3i16 } else { max }.to_be_bytes());
        if flexible {
            body.push(0);
        }
    }
    if version >= 1 {
        body.extend(0i32.to_be_bytes()); // throttle (from v1)
    }
    if flexible {
        body.push(0);
    }
    body
}
