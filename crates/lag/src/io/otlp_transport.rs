//! How an OTLP export request reaches the collector: OTLP/gRPC (tonic, the
//! `MetricsService/Export` call) or OTLP/HTTP with protobuf bodies (a POST
//! to `/v1/metrics`), in the clear or over TLS through the OpenSSL
//! librdkafka already links (a CA file, a client certificate for mutual
//! TLS). Each answer is sorted as the OTLP specification says: accepted
//! (perhaps partly), worth retrying (`UNAVAILABLE`, HTTP 429/502/503/504,
//! a timeout, a refused connection), or not.

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use openssl::ssl::{SslConnector, SslFiletype, SslMethod, SslVerifyMode};
use opentelemetry_proto::tonic::collector::metrics::v1::metrics_service_client::MetricsServiceClient;
use opentelemetry_proto::tonic::collector::metrics::v1::{ExportMetricsServiceRequest, ExportMetricsServiceResponse};
use prost::Message;
use tokio::net::TcpStream;
use tokio_openssl::SslStream;
use tonic::transport::{Channel, Endpoint, Uri};

use super::otlp_settings::OtlpSettings;
pub use super::otlp_settings::{OtlpProtocol, OtlpTls};

/// The collector's answer to one request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Accepted {
    /// Data points it refused (a partial success), and why.
    pub(crate) rejected: i64,
    pub(crate) message: String,
}

/// A request that was not accepted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub(crate) struct Failure {
    /// The specification says to try again (with backoff).
    pub(crate) retryable: bool,
    /// The collector asked to wait this long first (HTTP `Retry-After`).
    pub(crate) retry_after: Option<Duration>,
    pub(crate) message: String,
}

impl Failure {
    fn retryable(message: impl Into<String>) -> Self {
        Failure { retryable: true, retry_after: None, message: message.into() }
    }

    fn fatal(message: impl Into<String>) -> Self {
        Failure { retryable: false, retry_after: None, message: message.into() }
    }
}

/// Where export requests go. Implementations: [`Transport`] (the
/// collector), and the tests' in-memory sink.
pub(crate) trait Sink: Send + Sync + 'static {
    /// Sends one request, giving up after the transport's timeout.
    fn export(&self, request: ExportMetricsServiceRequest) -> impl Future<Output = Result<Accepted, Failure>> + Send;
}

/// A collector, over gRPC or HTTP.
pub(crate) enum Transport {
    Grpc { client: MetricsServiceClient<Channel>, headers: tonic::metadata::MetadataMap, timeout: Duration },
    Http(HttpCollector),
}

/// A collector's OTLP/HTTP endpoint.
pub(crate) struct HttpCollector {
    uri: Uri,
    host: String,
    port: u16,
    tls: Option<SslConnector>,
    verify_hostname: bool,
    headers: Vec<(hyper::header::HeaderName, hyper::header::HeaderValue)>,
    timeout: Duration,
    /// Bodies sent gzip-compressed (`Content-Encoding: gzip`).
    gzip: bool,
}

/// A setting that cannot work, named.
#[derive(Debug, thiserror::Error)]
#[error("invalid otlp.{setting}: {why}")]
pub struct OtlpSettingError {
    /// The setting, as the configuration file names it.
    pub setting: &'static str,
    /// What is wrong with it.
    pub why: String,
}

fn invalid(setting: &'static str, why: impl std::fmt::Display) -> OtlpSettingError {
    OtlpSettingError { setting, why: why.to_string() }
}

impl Transport {
    /// The transport to `endpoint`, checked now (its URL, headers and TLS
    /// files); it connects on the first export. Needs a tokio runtime.
    pub(crate) fn new(settings: &OtlpSettings) -> Result<Self, OtlpSettingError> {
        let (endpoint, protocol, headers, tls, timeout, gzip) = (
            settings.endpoint.as_str(),
            settings.protocol,
            &settings.headers,
            &settings.tls,
            settings.timeout,
            settings.gzip,
        );
        let uri: Uri = endpoint.parse().map_err(|e| invalid("endpoint", format!("{endpoint:?}: {e}")))?;
        let https = match uri.scheme_str() {
            Some("https") => true,
            Some("http") => false,
            _ => return Err(invalid("endpoint", format!("{endpoint:?} is not an http:// or https:// URL"))),
        };
        let host = uri.host().ok_or_else(|| invalid("endpoint", format!("{endpoint:?} has no host")))?;
        let host = host.trim_start_matches('[').trim_end_matches(']').to_owned();
        let default_port = match (protocol, https) {
            (OtlpProtocol::Grpc, _) => 4317,
            (OtlpProtocol::HttpProtobuf, false) => 80,
            (OtlpProtocol::HttpProtobuf, true) => 443,
        };
        let port = uri.port_u16().unwrap_or(default_port);
        // OTLP/HTTP's metrics path, when the URL names none.
        let uri = match (protocol, uri.path()) {
            (OtlpProtocol::HttpProtobuf, "" | "/") => format!("{}/v1/metrics", endpoint.trim_end_matches('/'))
                .parse()
                .map_err(|e| invalid("endpoint", format!("{endpoint:?}: {e}")))?,
            _ => uri,
        };
        let connector = if https { Some(connector(tls, protocol)?) } else { None };
        match protocol {
            OtlpProtocol::Grpc => grpc(settings, uri, connector),
            OtlpProtocol::HttpProtobuf => {
                let headers = headers
                    .iter()
                    .map(|(k, v)| {
                        let name = hyper::header::HeaderName::from_bytes(k.as_bytes())
                            .map_err(|e| invalid("headers", format!("{k:?}: {e}")))?;
                        let value = hyper::header::HeaderValue::from_str(v)
                            .map_err(|e| invalid("headers", format!("{k}'s value: {e}")))?;
                        Ok((name, value))
                    })
                    .collect::<Result<_, OtlpSettingError>>()?;
                Ok(Transport::Http(HttpCollector {
                    uri,
                    host,
                    port,
                    tls: connector,
                    verify_hostname: !tls.insecure_skip_verify,
                    headers,
                    timeout,
                    gzip,
                }))
            }
        }
    }
}

/// The gRPC client of `settings`' collector at `uri`, over `connector`'s
/// TLS when given.
fn grpc(settings: &OtlpSettings, uri: Uri, connector: Option<SslConnector>) -> Result<Transport, OtlpSettingError> {
    let (endpoint, headers, tls, timeout, gzip) =
        (settings.endpoint.as_str(), &settings.headers, &settings.tls, settings.timeout, settings.gzip);
    let mut metadata = tonic::metadata::MetadataMap::new();
    for (k, v) in headers {
        let key = tonic::metadata::MetadataKey::from_bytes(k.to_ascii_lowercase().as_bytes())
            .map_err(|e| invalid("headers", format!("{k:?}: {e}")))?;
        let value = v.parse().map_err(|e| invalid("headers", format!("{k}'s value: {e}")))?;
        metadata.insert(key, value);
    }
    // With TLS of our own (OpenSSL, below), tonic is given the
    // URI as http://: tonic built with TLS (etcd-client asks for
    // its rustls) would otherwise refuse an https:// URI without
    // its own TLS settings, or wrap ours in a second session.
    let uri = match &connector {
        Some(_) => {
            let mut parts = uri.into_parts();
            parts.scheme = Some(hyper::http::uri::Scheme::HTTP);
            Uri::from_parts(parts).map_err(|e| invalid("endpoint", format!("{endpoint:?}: {e}")))?
        }
        None => uri,
    };
    let endpoint = Endpoint::from(uri).connect_timeout(timeout).timeout(timeout);
    let channel = match connector {
        None => endpoint.connect_lazy(),
        Some(connector) => {
            let verify = !tls.insecure_skip_verify;
            endpoint.connect_with_connector_lazy(tower::service_fn(move |uri: Uri| {
                let connector = connector.clone();
                async move {
                    let host = uri.host().unwrap_or_default().trim_matches(['[', ']']).to_owned();
                    let port = uri.port_u16().unwrap_or(4317);
                    let stream = tls_stream(&connector, verify, &host, port).await?;
                    Ok::<_, std::io::Error>(TokioIo::new(stream))
                }
            }))
        }
    };
    let mut client = MetricsServiceClient::new(channel);
    if gzip {
        client = client
            .send_compressed(tonic::codec::CompressionEncoding::Gzip)
            .accept_compressed(tonic::codec::CompressionEncoding::Gzip);
    }
    Ok(Transport::Grpc { client, headers: metadata, timeout })
}

/// The TLS client for `tls`, its files read now; ALPN `h2` for gRPC.
fn connector(tls: &OtlpTls, protocol: OtlpProtocol) -> Result<SslConnector, OtlpSettingError> {
    let mut builder = SslConnector::builder(SslMethod::tls_client()).map_err(|e| invalid("tls", e))?;
    if let Some(ca) = &tls.ca_file {
        builder.set_ca_file(ca).map_err(|e| invalid("tls.ca_file", format!("{}: {e}", ca.display())))?;
    }
    match (&tls.cert_file, &tls.key_file) {
        (Some(cert), Some(key)) => {
            builder
                .set_certificate_chain_file(cert)
                .map_err(|e| invalid("tls.cert_file", format!("{}: {e}", cert.display())))?;
            builder
                .set_private_key_file(key, SslFiletype::PEM)
                .map_err(|e| invalid("tls.key_file", format!("{}: {e}", key.display())))?;
            builder
                .check_private_key()
                .map_err(|e| invalid("tls.key_file", format!("does not match cert_file: {e}")))?;
        }
        (None, None) => {}
        _ => return Err(invalid("tls", "cert_file and key_file go together")),
    }
    if tls.insecure_skip_verify {
        builder.set_verify(SslVerifyMode::NONE);
    }
    if protocol == OtlpProtocol::Grpc {
        builder.set_alpn_protos(b"\x02h2").map_err(|e| invalid("tls", e))?;
    }
    Ok(builder.build())
}

/// A TLS connection to `host:port` through `connector` (the host's name
/// checked unless `verify_hostname` is off); the notifiers' HTTP client's too.
pub(crate) async fn tls_stream(
    connector: &SslConnector,
    verify_hostname: bool,
    host: &str,
    port: u16,
) -> std::io::Result<SslStream<TcpStream>> {
    let tcp = TcpStream::connect((host, port)).await?;
    let ssl = connector
        .configure()
        .and_then(|c| c.verify_hostname(verify_hostname).use_server_name_indication(verify_hostname).into_ssl(host))
        .map_err(std::io::Error::other)?;
    let mut stream = SslStream::new(ssl, tcp).map_err(std::io::Error::other)?;
    Pin::new(&mut stream).connect().await.map_err(std::io::Error::other)?;
    Ok(stream)
}

impl Sink for Transport {
    async fn export(&self, request: ExportMetricsServiceRequest) -> Result<Accepted, Failure> {
        match self {
            Transport::Grpc { client, headers, timeout } => {
                let mut call = tonic::Request::new(request);
                *call.metadata_mut() = headers.clone();
                call.set_timeout(*timeout);
                let answer = tokio::time::timeout(*timeout, client.clone().export(call))
                    .await
                    .map_err(|_| Failure::retryable(format!("no answer within {timeout:?}")))?;
                match answer {
                    Ok(response) => Ok(accepted(response.into_inner())),
                    Err(status) => Err(grpc_failure(&status)),
                }
            }
            Transport::Http(collector) => tokio::time::timeout(collector.timeout, collector.post(request))
                .await
                .map_err(|_| Failure::retryable(format!("no answer within {:?}", collector.timeout)))?,
        }
    }
}

fn accepted(response: ExportMetricsServiceResponse) -> Accepted {
    let partial = response.partial_success.unwrap_or_default();
    Accepted { rejected: partial.rejected_data_points, message: partial.error_message }
}

/// `google.rpc.Status`, as a gRPC error's details carry it.
#[derive(Clone, PartialEq, prost::Message)]
struct RpcStatus {
    #[prost(int32, tag = "1")]
    code: i32,
    #[prost(string, tag = "2")]
    message: String,
    #[prost(message, repeated, tag = "3")]
    details: Vec<RpcAny>,
}

/// `google.protobuf.Any`.
#[derive(Clone, PartialEq, prost::Message)]
struct RpcAny {
    #[prost(string, tag = "1")]
    type_url: String,
    #[prost(bytes = "vec", tag = "2")]
    value: Vec<u8>,
}

/// `google.rpc.RetryInfo`.
#[derive(Clone, PartialEq, prost::Message)]
struct RetryInfo {
    #[prost(message, optional, tag = "1")]
    retry_delay: Option<RpcDuration>,
}

/// `google.protobuf.Duration`.
#[derive(Clone, PartialEq, prost::Message)]
struct RpcDuration {
    #[prost(int64, tag = "1")]
    seconds: i64,
    #[prost(int32, tag = "2")]
    nanos: i32,
}

/// The wait a gRPC error's `RetryInfo` asks for, if it has one.
fn retry_info(details: &[u8]) -> Option<Duration> {
    let status = RpcStatus::decode(details).ok()?;
    let info = status.details.iter().find(|d| d.type_url.ends_with("/google.rpc.RetryInfo"))?;
    let delay = RetryInfo::decode(info.value.as_slice()).ok()?.retry_delay?;
    let seconds = u64::try_from(delay.seconds).ok()?;
    Some(Duration::from_secs(seconds) + Duration::from_nanos(u64::try_from(delay.nanos).unwrap_or(0)))
}

/// The codes the OTLP specification says to retry; `RESOURCE_EXHAUSTED`
/// only when the collector says when (`RetryInfo`), which is then waited.
fn grpc_failure(status: &tonic::Status) -> Failure {
    use tonic::Code;
    let retry_after = retry_info(status.details());
    let retryable = match status.code() {
        Code::Cancelled
        | Code::DeadlineExceeded
        | Code::Aborted
        | Code::OutOfRange
        | Code::Unavailable
        | Code::DataLoss => true,
        Code::ResourceExhausted => retry_after.is_some(),
        _ => false,
    };
    let message = format!("gRPC {:?}: {}", status.code(), status.message());
    Failure { retryable, retry_after, message }
}

/// A collector's HTTP answer other than 2xx: retried for 429, 502, 503
/// and 504, as the OTLP specification says, after `Retry-After` seconds
/// when given; `body` (its start) says why.
fn http_failure(status: u16, retry_after: Option<&str>, body: &[u8]) -> Failure {
    let text = String::from_utf8_lossy(&body[..body.len().min(ERROR_BODY)]).into_owned();
    Failure {
        retryable: matches!(status, 429 | 502 | 503 | 504),
        retry_after: retry_after.and_then(|v| v.trim().parse::<u64>().ok()).map(Duration::from_secs),
        message: format!("HTTP {status}: {}", text.trim()),
    }
}

/// The most of a collector's answer that is read.
const ANSWER_MOST: usize = 1024 * 1024;

/// How much of an error body is kept for the log.
const ERROR_BODY: usize = 512;

impl HttpCollector {
    async fn post(&self, request: ExportMetricsServiceRequest) -> Result<Accepted, Failure> {
        let body = request.encode_to_vec();
        let body = Bytes::from(if self.gzip { gzipped(&body) } else { body });
        let refused = |e: &dyn std::fmt::Display| Failure::retryable(format!("connecting to {}: {e}", self.uri));
        let tcp = TcpStream::connect((self.host.as_str(), self.port)).await.map_err(|e| refused(&e))?;
        let _ = tcp.set_nodelay(true);
        match &self.tls {
            None => self.send(TokioIo::new(tcp), body).await,
            Some(connector) => {
                let ssl = connector
                    .configure()
                    .and_then(|c| {
                        c.verify_hostname(self.verify_hostname)
                            .use_server_name_indication(self.verify_hostname)
                            .into_ssl(&self.host)
                    })
                    .map_err(|e| Failure::fatal(format!("TLS towards {}: {e}", self.uri)))?;
                let mut stream = SslStream::new(ssl, tcp).map_err(|e| refused(&e))?;
                Pin::new(&mut stream)
                    .connect()
                    .await
                    .map_err(|e| Failure::fatal(format!("TLS handshake with {}: {e}", self.uri)))?;
                self.send(TokioIo::new(stream), body).await
            }
        }
    }

    async fn send<T>(&self, io: TokioIo<T>, body: Bytes) -> Result<Accepted, Failure>
    where
        T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + Unpin + 'static,
    {
        let broken = |e: &dyn std::fmt::Display| Failure::retryable(format!("HTTP to {}: {e}", self.uri));
        let (mut sender, connection) = hyper::client::conn::http1::handshake(io).await.map_err(|e| broken(&e))?;
        // The connection ends with this call, however it ends (a timeout drops it).
        let _driver = AbortOnDrop(tokio::spawn(connection));
        let path = self.uri.path_and_query().map_or("/v1/metrics", |p| p.as_str());
        let authority = self.uri.authority().map_or(self.host.clone(), |a| a.to_string());
        let mut request = hyper::Request::post(path)
            .header(hyper::header::HOST, authority)
            .header(hyper::header::CONTENT_TYPE, "application/x-protobuf")
            .header(hyper::header::CONTENT_ENCODING, if self.gzip { "gzip" } else { "identity" })
            .header(hyper::header::USER_AGENT, concat!("kshard/", env!("CARGO_PKG_VERSION")));
        for (name, value) in &self.headers {
            request = request.header(name, value);
        }
        let request =
            request.body(Full::new(body)).map_err(|e| Failure::fatal(format!("building the request: {e}")))?;
        let response = sender.send_request(request).await.map_err(|e| broken(&e))?;
        let status = response.status();
        let retry_after =
            response.headers().get(hyper::header::RETRY_AFTER).and_then(|v| v.to_str().ok()).map(str::to_owned);
        // A collector's answer is a few bytes: one past the most is not read on.
        let body = match http_body_util::Limited::new(response.into_body(), ANSWER_MOST).collect().await {
            Ok(body) => body.to_bytes(),
            // Accepted whatever else it says: sending again would count twice.
            Err(_) if status.is_success() => {
                tracing::warn!(uri = %self.uri, "the collector's answer is over {ANSWER_MOST} bytes: not read");
                return Ok(accepted(ExportMetricsServiceResponse::default()));
            }
            Err(e) => return Err(broken(&e)),
        };
        if status.is_success() {
            let response = ExportMetricsServiceResponse::decode(body).unwrap_or_default();
            return Ok(accepted(response));
        }
        Err(http_failure(status.as_u16(), retry_after.as_deref(), &body))
    }
}

/// `bytes`, gzip-compressed (in memory, so it cannot fail).
fn gzipped(bytes: &[u8]) -> Vec<u8> {
    use std::io::Write;
    let mut encoder = flate2::write::GzEncoder::new(Vec::with_capacity(bytes.len() / 4), flate2::Compression::fast());
    // Writing to a Vec does not fail.
    let _ = encoder.write_all(bytes);
    encoder.finish().unwrap_or_default()
}

/// A task aborted when this is dropped.
struct AbortOnDrop(tokio::task::JoinHandle<Result<(), hyper::Error>>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gzip_bodies_decompress_to_what_was_sent() {
        use std::io::Read;
        let body = vec![7u8; 10_000];
        let packed = gzipped(&body);
        assert!(packed.len() < 200, "repetitive protobuf packs well: {}", packed.len());
        let mut back = Vec::new();
        flate2::read::GzDecoder::new(packed.as_slice()).read_to_end(&mut back).expect("gzip");
        assert_eq!(back, body);
    }

    #[test]
    fn only_what_the_specification_says_is_retried() {
        assert!(grpc_failure(&tonic::Status::unavailable("down")).retryable);
        assert!(!grpc_failure(&tonic::Status::resource_exhausted("full")).retryable, "no RetryInfo: not retried");
        assert!(!grpc_failure(&tonic::Status::invalid_argument("bad")).retryable);
        assert!(!grpc_failure(&tonic::Status::unauthenticated("who")).retryable);
        // RESOURCE_EXHAUSTED with RetryInfo: retried after the delay it gives.
        let info = RetryInfo { retry_delay: Some(RpcDuration { seconds: 3, nanos: 500_000_000 }) };
        let details = RpcStatus {
            code: 8,
            message: "slow down".into(),
            details: vec![RpcAny {
                type_url: "type.googleapis.com/google.rpc.RetryInfo".into(),
                value: info.encode_to_vec(),
            }],
        };
        let status =
            tonic::Status::with_details(tonic::Code::ResourceExhausted, "slow down", details.encode_to_vec().into());
        let failure = grpc_failure(&status);
        assert!(failure.retryable);
        assert_eq!(failure.retry_after, Some(Duration::from_millis(3500)));
        // HTTP: 429, 502, 503, 504 only; Retry-After in seconds.
        for (code, retried) in
            [(429, true), (502, true), (503, true), (504, true), (400, false), (401, false), (500, false)]
        {
            assert_eq!(http_failure(code, None, b"").retryable, retried, "HTTP {code}");
        }
        let busy = http_failure(503, Some(" 12 "), b"busy");
        assert_eq!((busy.retry_after, busy.message.as_str()), (Some(Duration::from_secs(12)), "HTTP 503: busy"));
        assert_eq!(http_failure(429, Some("Wed, 21 Oct 2015 07:28:00 GMT"), b"").retry_after, None, "dates ignored");
    }

    /// A collector on loopback that answers `status` with a body that
    /// never ends: kshard reads at most [`ANSWER_MOST`] of it.
    async fn endless_collector(status: &'static str) -> String {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("binds");
        let address = listener.local_addr().expect("address").to_string();
        tokio::spawn(async move {
            let Ok((mut tcp, _)) = listener.accept().await else { return };
            let mut request = [0u8; 4096];
            let _ = tcp.read(&mut request).await;
            let head = format!(
                "HTTP/1.1 {status}\r\nContent-Type: application/x-protobuf\r\nTransfer-Encoding: chunked\r\n\r\n"
            );
            if tcp.write_all(head.as_bytes()).await.is_err() {
                return;
            }
            let chunk = [b"10000\r\n".as_slice(), &[0u8; 0x10000], b"\r\n"].concat();
            while tcp.write_all(&chunk).await.is_ok() {}
        });
        format!("http://{address}/v1/metrics")
    }

    #[tokio::test]
    async fn an_answer_that_never_ends_is_read_no_further_than_the_most() {
        let settings = |endpoint: String| super::OtlpSettings {
            timeout: Duration::from_secs(600),
            ..super::OtlpSettings::new(endpoint, OtlpProtocol::HttpProtobuf)
        };
        // Accepted (the collector said 200); an error would send it again.
        let ok = Transport::new(&settings(endless_collector("200 OK").await)).expect("transport");
        assert!(ok.export(ExportMetricsServiceRequest::default()).await.is_ok());
        let refused = Transport::new(&settings(endless_collector("500 Oops").await)).expect("transport");
        let failure = refused.export(ExportMetricsServiceRequest::default()).await.expect_err("refused");
        assert!(failure.retryable, "{}", failure.message);
    }

    #[tokio::test]
    async fn bad_settings_name_their_field() {
        let settings = |endpoint: &str, protocol| super::OtlpSettings::new(endpoint, protocol);
        let new = |endpoint: &str, headers: &[(String, String)], tls: &OtlpTls| {
            let s = super::OtlpSettings {
                headers: headers.to_vec(),
                tls: tls.clone(),
                ..settings(endpoint, OtlpProtocol::HttpProtobuf)
            };
            Transport::new(&s).err()
        };
        let none = OtlpTls::default();
        assert_eq!(new("ftp://x/v1/metrics", &[], &none).map(|e| e.setting), Some("endpoint"));
        assert_eq!(new("not a url", &[], &none).map(|e| e.setting), Some("endpoint"));
        assert_eq!(
            new("http://x:4318/v1/metrics", &[("bad name".into(), "v".into())], &none).map(|e| e.setting),
            Some("headers")
        );
        let missing = OtlpTls { ca_file: Some("/nonexistent/ca.pem".into()), ..OtlpTls::default() };
        assert_eq!(new("https://x/v1/metrics", &[], &missing).map(|e| e.setting), Some("tls.ca_file"));
        let half = OtlpTls { cert_file: Some("/tmp/c.pem".into()), ..OtlpTls::default() };
        assert_eq!(new("https://x/v1/metrics", &[], &half).map(|e| e.setting), Some("tls"));
        assert!(
            new("http://127.0.0.1:4318/v1/metrics", &[("authorization".into(), "Bearer x".into())], &none).is_none()
        );
        let bare = Transport::new(&settings("http://c:4318", OtlpProtocol::HttpProtobuf));
        let Ok(Transport::Http(collector)) = bare else { panic!("an HTTP transport") };
        assert_eq!(collector.uri.path(), "/v1/metrics", "a URL without a path gets the metrics path");
        let grpc = Transport::new(&settings("http://127.0.0.1:4317", OtlpProtocol::Grpc));
        assert!(grpc.is_ok(), "lazy: no collector needed to start");
    }
}
