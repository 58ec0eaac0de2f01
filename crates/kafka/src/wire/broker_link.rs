//! A connection of kshard's own to one broker, for [`crate::FetchTimes`]
//! and the fetcher: TCP, TLS through OpenSSL when the settings'
//! [`Security`](crate::Security) says so, then SASL PLAIN or SCRAM-SHA-256/512 (SaslHandshake
//! v1, SaslAuthenticate v2), then one request and its answer at a time.
//!
//! [`LinkSecurity`] is the settings' typed `Security`, with any extra
//! librdkafka properties applied over it. What it does not know how to
//! honour (GSSAPI, OAUTHBEARER, keystores, engines, cipher lists…) makes it
//! decline, and the caller reads through librdkafka instead: never a
//! connection weaker than the user asked for.

use std::io::{Read, Write};
use std::net::{IpAddr, TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::messages::{
    ApiKey, RequestHeader, SaslAuthenticateRequest, SaslAuthenticateResponse, SaslHandshakeRequest,
    SaslHandshakeResponse,
};
use kafka_protocol::protocol::{Decodable, Encodable, HeaderVersion, StrBytes};
use kshard_offsets::cursor::Cursor;
use openssl::ssl::{SslConnector, SslMethod, SslStream, SslVerifyMode};
use openssl::x509::X509;

use crate::config::ClientSettings;
use crate::error::{Error, Result};
use crate::security::{Mechanism, Sasl, Tls};
use crate::wire::answer_shape::{self, Answer};
use crate::wire::scram::{Scram, ScramHash};

/// The largest Fetch answer accepted: what one may carry, and some.
const MAX_FRAME: usize = 256 * 1024 * 1024;

/// The largest answer to any other call: Metadata of 200,000 partitions
/// with three replicas each is about 12 MB.
const MAX_ANSWER: usize = 64 * 1024 * 1024;

/// Receive-buffer low-water mark while waiting for a large answer: the
/// process is woken once this much has arrived, not for each of the small
/// segments a broker's sendfile makes of every partition's batches
/// (thousands a Fetch): a fifth of the CPU time of a Fetch of 10,000
/// partitions.
const WAKE_BYTES: usize = 256 * 1024;

/// The low-water mark over TLS: 16 KB (a TLS record) woke the process a
/// tenth as often for the same wall time; 64 KB left the broker waiting on
/// delayed acknowledgements (330 ms instead of 190 for 10,000 partitions).
const TLS_WAKE_BYTES: usize = 16 * 1024;

/// The buffer TLS reads from the socket through.
const TLS_READ_BUFFER: usize = 256 * 1024;

/// How to reach brokers: TLS, SASL, both or neither, ready to connect.
#[derive(Clone)]
pub(crate) struct LinkSecurity {
    tls: Option<SslConnector>,
    /// Verify the broker's name ([`Tls::verify_hostname`]).
    verify_hostname: bool,
    sasl: Option<Sasl>,
    /// Where each request and answer is counted.
    traffic: std::sync::Arc<crate::Traffic>,
}

impl LinkSecurity {
    /// What `settings` ask for, or `None` when they ask for something this
    /// module does not do (see the module's doc). An error when a file named
    /// cannot be read.
    /// Each request and answer is counted in `traffic`.
    pub(crate) fn from_settings(
        settings: &ClientSettings,
        traffic: std::sync::Arc<crate::Traffic>,
    ) -> Result<Option<LinkSecurity>> {
        let Ok(security) = settings.security.with_properties(&settings.properties) else { return Ok(None) };
        let tls = if security.protocol.tls() { Some(tls_connector(&security.tls)?) } else { None };
        let sasl = if security.protocol.sasl() { security.sasl } else { None };
        Ok(Some(LinkSecurity { tls, verify_hostname: security.tls.verify_hostname, sasl, traffic }))
    }
}

/// An OpenSSL client context for `tls` (errors name librdkafka's property).
fn tls_connector(tls: &Tls) -> Result<SslConnector> {
    let setting = |property: &str, e: &dyn std::fmt::Display| refused(format!("reading {property}"), e);
    let mut builder = SslConnector::builder(SslMethod::tls_client()).map_err(|e| setting("TLS", &e))?;
    match &tls.ca {
        Some(path) if path.is_dir() => builder.load_verify_locations(None, Some(path)),
        Some(path) => builder.set_ca_file(path),
        // As librdkafka: the system's CAs only when none are given.
        None if tls.ca_pem.is_some() => Ok(()),
        None => builder.set_default_verify_paths(),
    }
    .map_err(|e| setting("ssl.ca.location", &e))?;
    if let Some(pem) = &tls.ca_pem {
        for cert in X509::stack_from_pem(pem.as_bytes()).map_err(|e| setting("ssl.ca.pem", &e))? {
            builder.cert_store_mut().add_cert(cert).map_err(|e| setting("ssl.ca.pem", &e))?;
        }
    }
    if let Some(path) = &tls.certificate {
        builder.set_certificate_chain_file(path).map_err(|e| setting("ssl.certificate.location", &e))?;
    }
    if let Some(pem) = &tls.certificate_pem {
        let cert = X509::from_pem(pem.as_bytes()).map_err(|e| setting("ssl.certificate.pem", &e))?;
        builder.set_certificate(&cert).map_err(|e| setting("ssl.certificate.pem", &e))?;
    }
    let key_pem = match (&tls.key, &tls.key_pem) {
        (Some(path), _) => Some(std::fs::read(path).map_err(|e| setting("ssl.key.location", &e))?),
        (None, Some(pem)) => Some(pem.as_bytes().to_vec()),
        (None, None) => None,
    };
    if let Some(pem) = key_pem {
        let key = match &tls.key_password {
            Some(password) => openssl::pkey::PKey::private_key_from_pem_passphrase(&pem, password.as_bytes()),
            None => openssl::pkey::PKey::private_key_from_pem(&pem),
        }
        .map_err(|e| setting("ssl.key", &e))?;
        builder.set_private_key(&key).map_err(|e| setting("ssl.key", &e))?;
    }
    builder.set_verify(SslVerifyMode::PEER);
    Ok(builder.build())
}

/// The bytes on the wire: TCP, or TLS over it.
enum Stream {
    Plain(TcpStream),
    Tls(Box<SslStream<BufferedTcp>>),
}

impl Stream {
    fn tcp(&self) -> &TcpStream {
        match self {
            Stream::Plain(s) => s,
            Stream::Tls(s) => s.get_ref().0.get_ref(),
        }
    }
}

/// TCP read through a buffer, for OpenSSL: it reads each TLS record's
/// header and body with calls of their own, and a broker's answer to a
/// Fetch is thousands of small records (one a partition).
#[derive(Debug)]
struct BufferedTcp(std::io::BufReader<TcpStream>);

impl Read for BufferedTcp {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        self.0.read(buf)
    }
}

impl Write for BufferedTcp {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.get_mut().write(buf)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.0.get_mut().flush()
    }
}

impl Read for Stream {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        match self {
            Stream::Plain(s) => s.read(buf),
            Stream::Tls(s) => s.read(buf),
        }
    }
}

impl Write for Stream {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match self {
            Stream::Plain(s) => s.write(buf),
            Stream::Tls(s) => s.write(buf),
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        match self {
            Stream::Plain(s) => s.flush(),
            Stream::Tls(s) => s.flush(),
        }
    }
}

/// A connection to one broker, ready for requests.
pub(crate) struct BrokerLink {
    address: String,
    stream: Stream,
    correlation: i32,
    /// When the broker ends the SASL session (`connections.max.reauth.ms`):
    /// connect again before.
    expires: Option<Instant>,
    traffic: std::sync::Arc<crate::Traffic>,
    /// The broker has answered on this connection: a connection closed
    /// before it ever did is a refusal (a listener of another security
    /// protocol), not a network failure.
    answered: bool,
}

impl BrokerLink {
    /// Connects to `address` (`host:port`), with TLS and SASL as `security`
    /// says, each step given `timeout`.
    pub(crate) fn connect(address: &str, security: &LinkSecurity, timeout: Duration) -> Result<BrokerLink> {
        let step = |what: &str| format!("{what} {address}");
        // Each address the name resolves to, until one answers.
        let mut tcp = Err(Error::Unreachable { step: step("resolving"), message: "no address".into() });
        for socket in address.to_socket_addrs().map_err(|e| unreachable(step("resolving"), e))? {
            tcp = TcpStream::connect_timeout(&socket, timeout.max(Duration::from_millis(1)))
                .map_err(|e| unreachable(step("connecting to"), e));
            if tcp.is_ok() {
                break;
            }
        }
        let tcp = tcp?;
        tcp.set_nodelay(true).map_err(|e| refused(step("configuring the connection to"), e))?;
        set_timeouts(&tcp, timeout).map_err(|e| refused(step("configuring the connection to"), e))?;
        let stream = match &security.tls {
            None => Stream::Plain(tcp),
            Some(connector) => {
                let host = address.rsplit_once(':').map_or(address, |(h, _)| h);
                let host = host.trim_start_matches('[').trim_end_matches(']');
                let mut config = connector.configure().map_err(|e| refused(step("TLS to"), e))?;
                config.set_verify_hostname(security.verify_hostname);
                // No SNI for an IP address (RFC 6066).
                config.set_use_server_name_indication(host.parse::<IpAddr>().is_err());
                let tcp = BufferedTcp(std::io::BufReader::with_capacity(TLS_READ_BUFFER, tcp));
                let tls = config.connect(host, tcp).map_err(|e| {
                    // Worded as librdkafka's client says it (`access_problem`).
                    let why =
                        format!("TLS with the broker failed (check tls.ca_file and the broker's certificate): {e}");
                    refused(step("a TLS handshake with"), why)
                })?;
                Stream::Tls(Box::new(tls))
            }
        };
        let traffic = std::sync::Arc::clone(&security.traffic);
        let mut link =
            BrokerLink { address: address.to_owned(), stream, correlation: 0, expires: None, traffic, answered: false };
        if let Some(sasl) = &security.sasl {
            link.authenticate(sasl, timeout)?;
        }
        Ok(link)
    }

    /// SaslHandshake, then SaslAuthenticate until the mechanism is done.
    fn authenticate(&mut self, sasl: &Sasl, timeout: Duration) -> Result<()> {
        let mechanism = sasl.mechanism.as_str();
        let handshake = SaslHandshakeRequest::default().with_mechanism(StrBytes::from_static_str(mechanism));
        let answer: SaslHandshakeResponse = self.call(&handshake, 1, timeout)?;
        if answer.error_code != 0 {
            let enabled: Vec<&str> = answer.mechanisms.iter().map(|m| m.as_str()).collect();
            return Err(self.refusal(
                "SASL",
                format!("mechanism {mechanism} not enabled (error {}; enabled: {enabled:?})", answer.error_code),
            ));
        }
        let (user, password) = (&sasl.username, &sasl.password);
        let hash = match sasl.mechanism {
            Mechanism::Plain => {
                self.sasl_round(format!("\0{user}\0{password}").into_bytes(), timeout)?;
                return Ok(());
            }
            Mechanism::ScramSha256 => ScramHash::Sha256,
            Mechanism::ScramSha512 => ScramHash::Sha512,
        };
        let mut nonce = [0u8; 24];
        openssl::rand::rand_bytes(&mut nonce).map_err(|e| self.refusal("SASL", e))?;
        let mut scram = Scram::new(hash, user, password, &openssl::base64::encode_block(&nonce));
        let server_first = self.sasl_round(scram.client_first().into_bytes(), timeout)?;
        let server_first = String::from_utf8_lossy(&server_first).into_owned();
        let client_final = scram.client_final(&server_first).map_err(|e| self.refusal("SASL", e))?;
        let server_final = self.sasl_round(client_final.into_bytes(), timeout)?;
        scram.check_server_final(&String::from_utf8_lossy(&server_final)).map_err(|e| self.refusal("SASL", e))?;
        Ok(())
    }

    /// One SaslAuthenticate: the server's bytes.
    fn sasl_round(&mut self, bytes: Vec<u8>, timeout: Duration) -> Result<Bytes> {
        let request = SaslAuthenticateRequest::default().with_auth_bytes(Bytes::from(bytes));
        let sent = Instant::now();
        let answer: SaslAuthenticateResponse = self.call(&request, 2, timeout)?;
        if let Ok(lifetime) = u64::try_from(answer.session_lifetime_ms)
            && lifetime > 0
        {
            // A tenth early, for the time a request takes.
            self.expires = Some(sent + Duration::from_millis(lifetime - lifetime / 10));
        }
        if answer.error_code != 0 {
            let why = answer.error_message.as_ref().map_or("", |m| m.as_str());
            return Err(self
                .refusal("SASL", format!("the broker refused the credentials (error {}: {why})", answer.error_code)));
        }
        Ok(answer.auth_bytes)
    }

    /// A request whose answer is decoded whole, once its bytes are checked
    /// against its shape ([`answer_shape`](crate::wire::answer_shape)): a
    /// frame that does not fit is an error naming the call and the field,
    /// counted in the traffic's malformed answers.
    pub(crate) fn call<R, A>(&mut self, request: &R, version: i16, timeout: Duration) -> Result<A>
    where
        R: Encodable + HeaderVersion,
        A: Answer,
    {
        let api = A::API;
        let what = format!("reading a {api:?} v{version} answer");
        // Known before the request goes out.
        if A::shape(version).is_none() {
            return Err(self.refusal(&what, "a version kshard does not read"));
        }
        let mut frame = Bytes::from(self.exchange(api, request, version, version, MAX_ANSWER, timeout)?);
        kafka_protocol::messages::ResponseHeader::decode(&mut frame, A::header_version(version))
            .map_err(|e| self.malformed(&what, e))?;
        answer_shape::decode(frame, version).map_err(|e| self.malformed(&what, e))
    }

    /// An answer that could not be read: counted, and refused.
    fn malformed(&self, what: &str, why: impl std::fmt::Display) -> Error {
        self.traffic.malformed_answer();
        self.refusal(what, why)
    }

    /// Sends `request` as `version`, and reads its answer: the frame, from
    /// its response header on, once its correlation id is the request's.
    pub(crate) fn send<R: Encodable + HeaderVersion>(
        &mut self,
        api: ApiKey,
        request: &R,
        version: i16,
        timeout: Duration,
    ) -> Result<Vec<u8>> {
        self.send_as(api, request, version, version, timeout)
    }

    /// [`BrokerLink::send`] of a `version` of a request whose body is the
    /// same as `body_version`'s, which the `kafka-protocol` crate knows
    /// (DescribeShareGroupOffsets v1: only its answer differs from v0's).
    pub(crate) fn send_as<R: Encodable + HeaderVersion>(
        &mut self,
        api: ApiKey,
        request: &R,
        version: i16,
        body_version: i16,
        timeout: Duration,
    ) -> Result<Vec<u8>> {
        let most = if api == ApiKey::Fetch { MAX_FRAME } else { MAX_ANSWER };
        self.exchange(api, request, version, body_version, most, timeout)
    }

    /// [`BrokerLink::send_as`] of an answer of at most `most` bytes.
    fn exchange<R: Encodable + HeaderVersion>(
        &mut self,
        api: ApiKey,
        request: &R,
        version: i16,
        body_version: i16,
        most: usize,
        timeout: Duration,
    ) -> Result<Vec<u8>> {
        self.correlation = self.correlation.wrapping_add(1);
        let header = RequestHeader::default()
            .with_request_api_key(api as i16)
            .with_request_api_version(version)
            .with_correlation_id(self.correlation)
            .with_client_id(Some(StrBytes::from_static_str("kshard")));
        let mut body = BytesMut::new();
        body.put_i32(0);
        let header_version = R::header_version(body_version);
        header.encode(&mut body, header_version).map_err(|e| self.refusal("encoding a request", e))?;
        request.encode(&mut body, body_version).map_err(|e| self.refusal("encoding a request", e))?;
        let size = i32::try_from(body.len() - 4).map_err(|_| self.refusal("encoding a request", "too large"))?;
        body[..4].copy_from_slice(&size.to_be_bytes());
        set_timeouts(self.stream.tcp(), timeout).map_err(|e| self.refusal("configuring the connection", e))?;
        self.stream.write_all(&body).map_err(|e| self.lost("sending a request", e))?;
        self.stream.flush().map_err(|e| self.lost("sending a request", e))?;
        self.traffic.sent(body.len());
        let mut size = [0u8; 4];
        self.stream.read_exact(&mut size).map_err(|e| {
            if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) {
                // Slow, not refused.
                unreachable(format!("reading an answer with {}", self.address), e)
            } else {
                self.lost("reading an answer", e)
            }
        })?;
        let size = usize::try_from(i32::from_be_bytes(size)).ok().filter(|&n| n <= most).ok_or_else(|| {
            let size = i32::from_be_bytes(size);
            self.malformed(&format!("reading a {api:?} answer"), format!("a frame of {size} bytes (at most {most})"))
        })?;
        let mut frame = vec![0u8; size];
        let mut filled = 0;
        let large = size > 64 * 1024;
        while filled < size {
            // Wake when the rest, or a good part of it, is there.
            let wake = if matches!(self.stream, Stream::Plain(_)) { WAKE_BYTES } else { TLS_WAKE_BYTES };
            if large && self.nothing_held() && !wait_for(self.stream.tcp(), (size - filled).min(wake), timeout) {
                // Slow, not refused: retriable whether or not it answered before.
                return Err(unreachable(format!("reading an answer with {}", self.address), "timed out"));
            }
            match self.stream.read(&mut frame[filled..]) {
                Ok(0) => return Err(self.lost("reading an answer", "the broker closed the connection")),
                Ok(n) => filled += n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(self.lost("reading an answer", e)),
            }
        }
        self.traffic.received(4 + size);
        self.answered = true;
        // Every response header starts with the request's correlation id.
        let answered = Cursor::new(&frame).i32().ok();
        if answered != Some(self.correlation) {
            return Err(
                self.refusal("reading an answer", format!("correlation id {answered:?}, not {}", self.correlation))
            );
        }
        Ok(frame)
    }

    /// Whether the broker is about to end this connection's SASL session.
    pub(crate) fn expired(&self) -> bool {
        self.expires.is_some_and(|at| Instant::now() >= at)
    }

    /// Whether every byte of the answer not read yet is still to come on
    /// the socket: none held by OpenSSL (decrypted) or by the TLS buffer.
    fn nothing_held(&self) -> bool {
        match &self.stream {
            Stream::Plain(_) => true,
            Stream::Tls(tls) => tls.ssl().pending() == 0 && tls.get_ref().0.buffer().is_empty(),
        }
    }

    /// `what` with this broker failed, and why.
    fn refusal(&self, what: &str, why: impl std::fmt::Display) -> Error {
        refused(format!("{what} with {}", self.address), why)
    }

    /// `what` with this broker failed because the connection did (closed,
    /// reset, timed out): retriable, once the broker has answered on it.
    /// Before its first answer, it is a refusal with a hint: a listener of
    /// another security protocol (TLS, SASL) closes such a connection, and
    /// trying again until the timeout would only hide that.
    fn lost(&self, what: &str, why: impl std::fmt::Display) -> Error {
        if self.answered {
            return unreachable(format!("{what} with {}", self.address), why);
        }
        let why = format!(
            "{why}, before any answer on a new connection (check security_protocol and sasl.mechanism against the broker's listener)"
        );
        refused(format!("{what} with {}", self.address), why)
    }
}

/// A broker's `host:port` as a Metadata answer gives it: an IPv6 address in brackets.
pub(crate) fn broker_address(host: &str, port: i32) -> String {
    if host.contains(':') { format!("[{host}]:{port}") } else { format!("{host}:{port}") }
}

/// The `host:port` addresses of a bootstrap list as librdkafka reads it:
/// comma-separated, each maybe with a `protocol://` prefix (dropped: the
/// security settings say how to connect) and maybe without a port (9092).
pub(crate) fn bootstrap_addresses(list: &str) -> Vec<String> {
    list.split(',')
        .map(|b| b.trim())
        .map(|b| b.rsplit_once("://").map_or(b, |(_, address)| address))
        .filter(|b| !b.is_empty())
        .map(|b| {
            // A port is digits after the last ':' (and after a bracketed IPv6 address).
            let has_port = b.rsplit_once(':').is_some_and(|(host, port)| {
                !port.is_empty()
                    && port.bytes().all(|c| c.is_ascii_digit())
                    && (!host.contains(':') || host.ends_with(']'))
            });
            if has_port { b.to_owned() } else { format!("{b}:9092") }
        })
        .collect()
}

fn set_timeouts(tcp: &TcpStream, timeout: Duration) -> std::io::Result<()> {
    let timeout = Some(timeout.max(Duration::from_millis(1)));
    tcp.set_read_timeout(timeout)?;
    tcp.set_write_timeout(timeout)
}

/// Waits until `bytes` can be read from `tcp` (or it fails, or closes)
/// within `timeout`: `SO_RCVLOWAT` for `poll`, reset before the read. (A read
/// itself must not wait on the mark: Linux compares it with the bytes not
/// yet read, so a read that took part of the rest at once could wait for
/// more than will ever come.) False when the time ran out; an error
/// (setting the mark, or polling) is no reason to fail: it falls back to
/// reading as the bytes come.
#[allow(unsafe_code)] // setsockopt and poll on a socket this module owns
fn wait_for(tcp: &TcpStream, bytes: usize, timeout: Duration) -> bool {
    use std::os::fd::AsRawFd;
    let fd = tcp.as_raw_fd();
    let set = |value: libc::c_int| {
        // SAFETY: a valid socket descriptor, and an int of the size given.
        unsafe {
            libc::setsockopt(
                fd,
                libc::SOL_SOCKET,
                libc::SO_RCVLOWAT,
                (&raw const value).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            )
        }
    };
    if set(libc::c_int::try_from(bytes.max(1)).unwrap_or(libc::c_int::MAX)) != 0 {
        return true;
    }
    let mut poll = libc::pollfd { fd, events: libc::POLLIN, revents: 0 };
    let ms = libc::c_int::try_from(timeout.as_millis().max(1)).unwrap_or(libc::c_int::MAX);
    let ready = loop {
        // SAFETY: one pollfd, valid for the call.
        let n = unsafe { libc::poll(&raw mut poll, 1, ms) };
        if n >= 0 || std::io::Error::last_os_error().kind() != std::io::ErrorKind::Interrupted {
            break n != 0;
        }
    };
    set(1);
    ready
}

fn refused(step: String, e: impl std::fmt::Display) -> Error {
    Error::Refused { step, message: e.to_string() }
}

fn unreachable(step: String, e: impl std::fmt::Display) -> Error {
    Error::Unreachable { step, message: e.to_string() }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::security::Security;

    fn security(properties: &[(&str, &str)]) -> Option<LinkSecurity> {
        let mut settings = ClientSettings::new("b:9092");
        settings.properties = properties.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
        LinkSecurity::from_settings(&settings, Default::default()).expect("settings")
    }

    #[test]
    fn connects_as_the_typed_settings_say() {
        let plain = security(&[]).expect("plaintext");
        assert!(plain.tls.is_none() && plain.sasl.is_none());
        let mut settings = ClientSettings::new("b:9092");
        settings.security = Security {
            protocol: crate::security::Protocol::SaslSsl,
            tls: Tls { verify_hostname: false, ..Tls::default() },
            sasl: Some(Sasl { mechanism: Mechanism::ScramSha512, username: "u".into(), password: "p".into() }),
        };
        let scram =
            LinkSecurity::from_settings(&settings, Default::default()).expect("settings").expect("SCRAM over TLS");
        assert!(scram.tls.is_some() && !scram.verify_hostname);
        assert_eq!(scram.sasl.map(|s| s.mechanism), Some(Mechanism::ScramSha512));
        // Extra properties apply over the typed settings: librdkafka reads.
        settings.properties.push(("ssl.keystore.location".into(), "k.p12".into()));
        assert!(LinkSecurity::from_settings(&settings, Default::default()).expect("settings").is_none());
    }

    #[test]
    fn broker_addresses_bracket_ipv6() {
        assert_eq!(broker_address("10.0.0.1", 9092), "10.0.0.1:9092");
        assert_eq!(broker_address("::1", 9093), "[::1]:9093");
    }

    #[test]
    fn bootstrap_lists_as_librdkafka_reads_them() {
        assert_eq!(
            bootstrap_addresses(" a:1, PLAINTEXT://b:2,SASL_SSL://c,d ,[::1]:3,[::1],,"),
            vec!["a:1", "b:2", "c:9092", "d:9092", "[::1]:3", "[::1]:9092"]
        );
    }

    #[test]
    fn a_missing_ca_file_is_an_error() {
        let mut settings = ClientSettings::new("b:9092");
        settings.security.protocol = crate::security::Protocol::Ssl;
        settings.security.tls.ca = Some("/nonexistent/ca.pem".into());
        let e = LinkSecurity::from_settings(&settings, Default::default()).err().expect("an error");
        assert!(e.to_string().contains("ssl.ca.location"), "{e}");
    }
}
