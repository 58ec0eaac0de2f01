//! What the OTLP export is configured with ([`OtlpSettings`]: where the
//! collector is, over which transport, how often): read by the export
//! (`otlp_export.rs`) and by its transport (`otlp_transport.rs`).

use std::path::PathBuf;
use std::time::Duration;

/// OTLP's two transports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OtlpProtocol {
    /// OTLP/gRPC (a collector's port 4317).
    Grpc,
    /// OTLP/HTTP with protobuf bodies (port 4318, path `/v1/metrics`).
    HttpProtobuf,
}

/// TLS towards the collector (an `https` endpoint).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OtlpTls {
    /// The CA that signed the collector's certificate (else the system's).
    pub ca_file: Option<PathBuf>,
    /// A client certificate (PEM, with its chain) for mutual TLS.
    pub cert_file: Option<PathBuf>,
    /// Its key (PEM).
    pub key_file: Option<PathBuf>,
    /// Accept any certificate, any name (for tests; logged at start).
    pub insecure_skip_verify: bool,
}

/// The export's settings (`otlp:` in the file, or the `OTEL_…` variables).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OtlpSettings {
    /// gRPC: the collector (`http://host:4317`); HTTP: the full URL of its
    /// metrics path (`http://host:4318/v1/metrics`).
    pub endpoint: String,
    /// gRPC or HTTP/protobuf.
    pub protocol: OtlpProtocol,
    /// How often the series are pushed.
    pub interval: Duration,
    /// How long one request may take.
    pub timeout: Duration,
    /// Sent with every request (an API key, `authorization`).
    pub headers: Vec<(String, String)>,
    /// The resource's attributes (`service.name` first).
    pub resource: Vec<(String, String)>,
    /// TLS for an `https` endpoint.
    pub tls: OtlpTls,
    /// At most this many data points a request.
    pub max_points_per_request: usize,
    /// Compress each request with gzip (`compression: gzip`).
    pub gzip: bool,
}

impl OtlpSettings {
    /// The OpenTelemetry SDKs' defaults for `endpoint` and `protocol`: a
    /// minute between exports, 10 s a request, `service.name` `kshard`.
    pub fn new(endpoint: impl Into<String>, protocol: OtlpProtocol) -> Self {
        OtlpSettings {
            endpoint: endpoint.into(),
            protocol,
            interval: Duration::from_secs(60),
            timeout: Duration::from_secs(10),
            headers: Vec::new(),
            resource: vec![("service.name".to_owned(), "kshard".to_owned())],
            tls: OtlpTls::default(),
            max_points_per_request: 8192,
            gzip: false,
        }
    }
}
