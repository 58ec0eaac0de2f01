//! HTTPS for the web configuration's `tls_server_config`, through OpenSSL:
//! the acceptor is built again when the configuration or a certificate,
//! key or CA file changes (a renewed certificate needs no restart), each
//! handshake runs in a task of its own with a time limit (a slow client
//! holds up nobody), and a client certificate must carry one of
//! `client_allowed_sans` when they are set. [`TlsListener`] hands axum the
//! connections whose handshake succeeded.

use std::collections::VecDeque;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use openssl::pkey::PKey;
use openssl::ssl::{Ssl, SslAcceptor, SslMethod, SslOptions, SslVerifyMode, SslVersion};
use openssl::x509::X509;
use openssl::x509::store::X509StoreBuilder;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio_openssl::SslStream;

use super::config::{ClientAuth, Pem, TlsServer, TlsVersion, WebConfigError};
use super::{FileStamp, WebConfigFile, file_stamp};

/// How long a client may take to finish its handshake.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Handshakes under way at once: past this, the oldest is given up for the
/// new one (a flood of clients that never finish theirs cannot keep others
/// out, nor make the process hold thousands of half-open sessions).
const MOST_HANDSHAKES: usize = 64;

/// The protocol a listener speaks over TLS, which its acceptor offers by
/// ALPN.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Alpn {
    /// The web port: HTTP/1.1 only.
    Http1,
    /// KEDA's scaler port: gRPC, over HTTP/2.
    H2,
}

impl Alpn {
    /// The protocol's name as ALPN writes it (length-prefixed).
    fn wire(self) -> &'static [u8] {
        match self {
            Alpn::Http1 => b"\x08http/1.1",
            Alpn::H2 => b"\x02h2",
        }
    }
}

/// The acceptor last built, and what it was built from.
pub(crate) struct AcceptorCache {
    alpn: Alpn,
    built: Mutex<Option<(Stamp, Arc<SslAcceptor>)>>,
}

impl std::fmt::Debug for AcceptorCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AcceptorCache").finish_non_exhaustive()
    }
}

/// The settings and the files' stamps (inode, size, times) an acceptor was built from.
type Stamp = (TlsServer, Vec<Option<FileStamp>>);

impl AcceptorCache {
    /// No acceptor yet; those built will offer `alpn`.
    pub(crate) fn new(alpn: Alpn) -> Self {
        AcceptorCache { alpn, built: Mutex::new(None) }
    }

    /// The acceptor for `tls`, built again if it or its files changed.
    pub(crate) fn acceptor(&self, tls: &TlsServer) -> Result<Arc<SslAcceptor>, WebConfigError> {
        let files: Vec<Option<FileStamp>> = [Some(&tls.cert), Some(&tls.key), tls.client_ca.as_ref()]
            .into_iter()
            .flatten()
            .map(|pem| match pem {
                Pem::File(path) => file_stamp(path),
                Pem::Inline(_) => None,
            })
            .collect();
        let stamp = (tls.clone(), files);
        let mut built = self.built.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some((at, acceptor)) = built.as_ref()
            && *at == stamp
        {
            return Ok(Arc::clone(acceptor));
        }
        let acceptor = Arc::new(build(tls, self.alpn)?);
        *built = Some((stamp, Arc::clone(&acceptor)));
        Ok(acceptor)
    }
}

fn invalid(field: &str, why: impl std::fmt::Display) -> WebConfigError {
    WebConfigError { field: format!("tls_server_config.{field}"), why: why.to_string() }
}

fn pem_bytes(pem: &Pem, field: &str) -> Result<Vec<u8>, WebConfigError> {
    match pem {
        Pem::Inline(text) => Ok(text.as_bytes().to_vec()),
        Pem::File(path) => std::fs::read(path)
            .map_err(|e| invalid(&format!("{field}_file"), format!("cannot read {}: {e}", path.display()))),
    }
}

fn field_of(pem: &Pem, name: &str) -> String {
    match pem {
        Pem::Inline(_) => name.to_owned(),
        Pem::File(_) => format!("{name}_file"),
    }
}

fn build(tls: &TlsServer, alpn: Alpn) -> Result<SslAcceptor, WebConfigError> {
    fn ssl(field: &str) -> impl Fn(openssl::error::ErrorStack) -> WebConfigError + '_ {
        move |e| invalid(field, e)
    }
    let mut b = SslAcceptor::mozilla_intermediate_v5(SslMethod::tls_server()).map_err(ssl("min_version"))?;
    let cert_field = field_of(&tls.cert, "cert");
    let chain = X509::stack_from_pem(&pem_bytes(&tls.cert, "cert")?).map_err(ssl(&cert_field))?;
    let (leaf, rest) = chain.split_first().ok_or_else(|| invalid(&cert_field, "holds no certificate"))?;
    b.set_certificate(leaf).map_err(ssl(&cert_field))?;
    for cert in rest {
        b.add_extra_chain_cert(cert.clone()).map_err(ssl(&cert_field))?;
    }
    let key_field = field_of(&tls.key, "key");
    let key = PKey::private_key_from_pem(&pem_bytes(&tls.key, "key")?).map_err(ssl(&key_field))?;
    b.set_private_key(&key).map_err(ssl(&key_field))?;
    b.check_private_key().map_err(|e| invalid(&key_field, format!("does not match the certificate: {e}")))?;
    b.set_min_proto_version(Some(version(tls.min_version))).map_err(ssl("min_version"))?;
    b.set_max_proto_version(Some(version(tls.max_version))).map_err(ssl("max_version"))?;
    if !tls.cipher_suites.is_empty() {
        b.set_cipher_list(&tls.cipher_suites.join(":")).map_err(ssl("cipher_suites"))?;
    }
    if tls.prefer_server_cipher_suites {
        b.set_options(SslOptions::CIPHER_SERVER_PREFERENCE);
    } else {
        b.clear_options(SslOptions::CIPHER_SERVER_PREFERENCE);
    }
    if !tls.curves.is_empty() {
        b.set_groups_list(&tls.curves.join(":")).map_err(ssl("curve_preferences"))?;
    }
    if let Some(ca) = &tls.client_ca {
        let ca_field = field_of(ca, "client_ca");
        let mut store = X509StoreBuilder::new().map_err(ssl(&ca_field))?;
        let certs = X509::stack_from_pem(&pem_bytes(ca, "client_ca")?).map_err(ssl(&ca_field))?;
        if certs.is_empty() {
            return Err(invalid(&ca_field, "holds no certificate"));
        }
        for cert in certs {
            b.add_client_ca(&cert).map_err(ssl(&ca_field))?;
            store.add_cert(cert).map_err(ssl(&ca_field))?;
        }
        b.set_verify_cert_store(store.build()).map_err(ssl(&ca_field))?;
    }
    let required = if tls.client_auth.requires() { SslVerifyMode::FAIL_IF_NO_PEER_CERT } else { SslVerifyMode::NONE };
    match tls.client_auth {
        ClientAuth::NoClientCert => b.set_verify(SslVerifyMode::NONE),
        // Asked for, never checked: any certificate (or none) will do.
        ClientAuth::RequestClientCert | ClientAuth::RequireAnyClientCert => {
            b.set_verify_callback(SslVerifyMode::PEER | required, |_, _| true)
        }
        ClientAuth::VerifyClientCertIfGiven | ClientAuth::RequireAndVerifyClientCert => {
            b.set_verify(SslVerifyMode::PEER | required)
        }
    }
    // One protocol is served: say which to clients that offer ALPN.
    b.set_alpn_select_callback(move |_, offered| {
        openssl::ssl::select_next_proto(alpn.wire(), offered).ok_or(openssl::ssl::AlpnError::NOACK)
    });
    Ok(b.build())
}

fn version(v: TlsVersion) -> SslVersion {
    match v {
        TlsVersion::Tls10 => SslVersion::TLS1,
        TlsVersion::Tls11 => SslVersion::TLS1_1,
        TlsVersion::Tls12 => SslVersion::TLS1_2,
        TlsVersion::Tls13 => SslVersion::TLS1_3,
    }
}

/// Whether the peer's certificate names one of `allowed` (any, when empty).
fn allowed_san(ssl: &openssl::ssl::SslRef, allowed: &[String]) -> bool {
    if allowed.is_empty() {
        return true;
    }
    let Some(names) = ssl.peer_certificate().and_then(|c| c.subject_alt_names()) else {
        return false;
    };
    names.iter().any(|name| {
        let ip = name.ipaddress().and_then(|b| match b.len() {
            4 => <[u8; 4]>::try_from(b).ok().map(IpAddr::from),
            16 => <[u8; 16]>::try_from(b).ok().map(IpAddr::from),
            _ => None,
        });
        let texts = [
            name.dnsname().map(str::to_owned),
            ip.map(|ip| ip.to_string()),
            name.email().map(str::to_owned),
            name.uri().map(str::to_owned),
        ];
        texts.into_iter().flatten().any(|text| allowed.contains(&text))
    })
}

/// The connections whose TLS handshake succeeded, for `axum::serve`, or as
/// tonic's incoming stream ([`TlsListener::incoming`]).
pub(crate) struct TlsListener {
    accepted: mpsc::Receiver<(SslStream<TcpStream>, SocketAddr)>,
}

impl TlsListener {
    /// Accepts on `listener` in a task of its own, until the listener is
    /// dropped, offering `alpn`.
    pub(crate) fn spawn(listener: TcpListener, web: Arc<WebConfigFile>, alpn: Alpn) -> TlsListener {
        let (tx, accepted) = mpsc::channel(64);
        tokio::spawn(async move {
            let mut handshakes: VecDeque<tokio::task::AbortHandle> = VecDeque::new();
            loop {
                let (tcp, peer) = match listener.accept().await {
                    Ok(accepted) => accepted,
                    Err(e) => {
                        // Out of file descriptors, say: wait instead of spinning.
                        tracing::warn!(error = %e, "accepting a connection");
                        tokio::time::sleep(Duration::from_millis(10)).await;
                        continue;
                    }
                };
                if tx.is_closed() {
                    return;
                }
                // As the plain listeners: small writes (gRPC's frames) go at once.
                let _ = tcp.set_nodelay(true);
                handshakes.retain(|h| !h.is_finished());
                if handshakes.len() >= MOST_HANDSHAKES
                    && let Some(oldest) = handshakes.pop_front()
                {
                    tracing::debug!("too many TLS handshakes under way: the oldest is given up");
                    oldest.abort();
                }
                let web = Arc::clone(&web);
                let tx = tx.clone();
                let task = tokio::spawn(async move {
                    match tokio::time::timeout(HANDSHAKE_TIMEOUT, handshake(&web, alpn, tcp)).await {
                        Ok(Ok(stream)) => {
                            let _ = tx.send((stream, peer)).await;
                        }
                        Ok(Err(why)) => tracing::debug!(%peer, %why, "TLS handshake refused"),
                        Err(_) => tracing::debug!(%peer, "TLS handshake timed out"),
                    }
                });
                handshakes.push_back(task.abort_handle());
            }
        });
        TlsListener { accepted }
    }

    /// The connections as tonic's server takes them.
    pub(crate) fn incoming(self) -> impl tokio_stream::Stream<Item = std::io::Result<TlsConnection>> {
        use tokio_stream::StreamExt;
        tokio_stream::wrappers::ReceiverStream::new(self.accepted).map(|(stream, _)| Ok(TlsConnection::new(stream)))
    }
}

async fn handshake(web: &WebConfigFile, alpn: Alpn, tcp: TcpStream) -> Result<SslStream<TcpStream>, String> {
    let config = web.current().map_err(|e| e.to_string())?;
    let Some(tls) = config.tls.as_ref() else {
        // Every connection is refused until the file sets TLS again: say so
        // where operators look, not at debug.
        tracing::error!(
            "the web configuration file no longer sets tls_server_config: TLS connections are refused until it does (or kshard restarts)"
        );
        return Err("the web configuration no longer sets tls_server_config".into());
    };
    let cache = if alpn == Alpn::H2 { &web.grpc_tls } else { &web.tls };
    let acceptor = cache.acceptor(tls).map_err(|e| {
        tracing::error!(error = %e, "cannot set up TLS from the web configuration");
        e.to_string()
    })?;
    let ssl = Ssl::new(acceptor.context()).map_err(|e| e.to_string())?;
    let mut stream = SslStream::new(ssl, tcp).map_err(|e| e.to_string())?;
    Pin::new(&mut stream).accept().await.map_err(|e| e.to_string())?;
    if !allowed_san(stream.ssl(), &tls.client_allowed_sans) {
        tracing::warn!("a client certificate without an allowed subject alternative name was refused");
        return Err("client certificate not in client_allowed_sans".into());
    }
    Ok(stream)
}

impl kshard_runtime::http_server::Accept for TlsListener {
    type Io = SslStream<TcpStream>;

    async fn accept(&mut self) -> std::io::Result<(Self::Io, SocketAddr)> {
        match self.accepted.recv().await {
            Some(accepted) => Ok(accepted),
            // The accepting task ended: no connection will ever come.
            None => std::future::pending().await,
        }
    }
}

/// A TLS connection, as tonic's server takes it (KEDA's scaler port; the
/// tests' gRPC collector over TLS too).
pub struct TlsConnection(SslStream<TcpStream>);

impl TlsConnection {
    /// `stream`, whose handshake is done.
    pub fn new(stream: SslStream<TcpStream>) -> Self {
        TlsConnection(stream)
    }
}

impl tonic::transport::server::Connected for TlsConnection {
    type ConnectInfo = ();
    fn connect_info(&self) {}
}

impl tokio::io::AsyncRead for TlsConnection {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().0).poll_read(cx, buf)
    }
}

impl tokio::io::AsyncWrite for TlsConnection {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        Pin::new(&mut self.get_mut().0).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> std::task::Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().0).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> std::task::Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().0).poll_shutdown(cx)
    }
}
