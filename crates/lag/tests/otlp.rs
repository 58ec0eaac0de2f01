//! The OTLP export against a collector in the test, with the real broker
//! behind kshard: over gRPC (tonic's server, as the OpenTelemetry
//! Collector's `otlp` receiver answers) the collector gets exactly the
//! series `/metrics` shows, two clusters' each with its `cluster`
//! attribute, values equal; over HTTP/protobuf with TLS and a bearer
//! token it gets them too, and a wrong token is refused, counted and
//! logged without touching `/ready`; a collector that starts late gets the
//! next export by itself. Over gRPC with TLS (ALPN h2, the test's CA), the
//! export arrives with no broker at all: kshard's health series.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::pki::certificate;
use common::*;
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use kshard_lag::service::{ProcessOptions, ServeOptions};
use kshard_lag::{MonitorSettings, NameFilter, OtlpProtocol, OtlpSettings, OtlpTls};
use kshard_testkit::{Broker, unique_name};
use opentelemetry_proto::tonic::collector::metrics::v1::metrics_service_server::{
    MetricsService, MetricsServiceServer,
};
use opentelemetry_proto::tonic::collector::metrics::v1::{ExportMetricsServiceRequest, ExportMetricsServiceResponse};
use opentelemetry_proto::tonic::common::v1::any_value;
use opentelemetry_proto::tonic::metrics::v1::{metric::Data, number_data_point};
use prost::Message;

/// A request a collector took, with the `authorization` it came with.
type Taken = (Option<String>, ExportMetricsServiceRequest);

/// What a collector was sent.
#[derive(Clone, Default)]
struct Collector {
    got: Arc<Mutex<Vec<Taken>>>,
    /// Requests that came gzip-compressed (the HTTPS collector counts them).
    gzipped: Arc<std::sync::atomic::AtomicUsize>,
    /// Requests the HTTPS collector refused (wrong token, path or type).
    refused: Arc<std::sync::atomic::AtomicUsize>,
}

impl Collector {
    fn requests(&self) -> usize {
        self.got.lock().expect("lock").len()
    }

    fn last(&self) -> Option<Taken> {
        self.got.lock().expect("lock").last().cloned()
    }
}

#[tonic::async_trait]
impl MetricsService for Collector {
    async fn export(
        &self,
        request: tonic::Request<ExportMetricsServiceRequest>,
    ) -> Result<tonic::Response<ExportMetricsServiceResponse>, tonic::Status> {
        let auth = request.metadata().get("authorization").and_then(|v| v.to_str().ok()).map(str::to_owned);
        self.got.lock().expect("lock").push((auth, request.into_inner()));
        Ok(tonic::Response::new(ExportMetricsServiceResponse::default()))
    }
}

/// A runtime of the test's own for its collectors.
fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().expect("runtime")
}

/// An OTLP/gRPC collector on a free port.
fn grpc_collector(rt: &tokio::runtime::Runtime) -> (Collector, SocketAddr) {
    let collector = Collector::default();
    let listener = rt.block_on(tokio::net::TcpListener::bind("127.0.0.1:0")).expect("bind");
    let addr = listener.local_addr().expect("addr");
    let service =
        MetricsServiceServer::new(collector.clone()).accept_compressed(tonic::codec::CompressionEncoding::Gzip);
    rt.spawn(async move {
        tonic::transport::Server::builder()
            .add_service(service)
            .serve_with_incoming(tonic::transport::server::TcpIncoming::from(listener))
            .await
    });
    (collector, addr)
}

/// An OTLP/HTTP collector over TLS on `listener`: it takes a request with
/// `authorization: Bearer <token>`, and answers 401 to any other.
fn https_collector(
    rt: &tokio::runtime::Runtime,
    listener: std::net::TcpListener,
    pki: &Pki,
    token: &'static str,
) -> Collector {
    use openssl::ssl::{SslAcceptor, SslMethod};
    let mut acceptor = SslAcceptor::mozilla_intermediate_v5(SslMethod::tls_server()).expect("acceptor");
    acceptor.set_certificate(&pki.server.0).expect("cert");
    acceptor.set_private_key(&pki.server.1).expect("key");
    let acceptor = Arc::new(acceptor.build());
    let collector = Collector::default();
    let (got, gzipped, refused) =
        (Arc::clone(&collector.got), Arc::clone(&collector.gzipped), Arc::clone(&collector.refused));
    listener.set_nonblocking(true).expect("nonblocking");
    rt.spawn(async move {
        let listener = tokio::net::TcpListener::from_std(listener).expect("listener");
        loop {
            let Ok((tcp, _)) = listener.accept().await else { continue };
            let (acceptor, got, gzipped, refused) =
                (Arc::clone(&acceptor), Arc::clone(&got), Arc::clone(&gzipped), Arc::clone(&refused));
            tokio::spawn(async move {
                let ssl = openssl::ssl::Ssl::new(acceptor.context()).expect("ssl");
                let mut stream = tokio_openssl::SslStream::new(ssl, tcp).expect("stream");
                if Pin::new(&mut stream).accept().await.is_err() {
                    return;
                }
                let service = hyper::service::service_fn(move |request: hyper::Request<hyper::body::Incoming>| {
                    let (got, gzipped, refused) = (Arc::clone(&got), Arc::clone(&gzipped), Arc::clone(&refused));
                    async move {
                        let auth =
                            request.headers().get("authorization").and_then(|v| v.to_str().ok()).map(str::to_owned);
                        let typed = request.headers().get("content-type").map(|v| v.as_bytes().to_vec());
                        let gzip = request.headers().get("content-encoding").is_some_and(|v| v == "gzip");
                        let path = request.uri().path().to_owned();
                        let body = request.into_body().collect().await.map(|b| b.to_bytes()).unwrap_or_default();
                        let body = if gzip {
                            let mut plain = Vec::new();
                            let read =
                                std::io::Read::read_to_end(&mut flate2::read::GzDecoder::new(&body[..]), &mut plain);
                            read.map(|_| bytes::Bytes::from(plain)).unwrap_or_default()
                        } else {
                            body
                        };
                        if gzip {
                            gzipped.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        }
                        let status = if path != "/v1/metrics" || typed.as_deref() != Some(b"application/x-protobuf") {
                            400
                        } else if auth.as_deref() != Some(&format!("Bearer {token}")) {
                            401
                        } else {
                            match ExportMetricsServiceRequest::decode(body) {
                                Ok(decoded) => {
                                    got.lock().expect("lock").push((auth, decoded));
                                    200
                                }
                                Err(_) => 400,
                            }
                        };
                        let reply = if status == 200 {
                            ExportMetricsServiceResponse::default().encode_to_vec()
                        } else {
                            refused.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                            b"refused".to_vec()
                        };
                        let response = hyper::Response::builder()
                            .status(status)
                            .header("content-type", "application/x-protobuf")
                            .body(Full::new(bytes::Bytes::from(reply)));
                        Ok::<_, hyper::http::Error>(response.expect("response"))
                    }
                });
                let _ =
                    hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(stream), service).await;
            });
        }
    });
    collector
}

/// The `(name, labels)` of every series in Prometheus text, named as OTLP
/// names them: a counter without `_total`, a histogram's `_bucket`, `_sum`
/// and `_count` as one series without `le`. Read independently of kshard's
/// own reader.
fn text_series(text: &str) -> BTreeSet<(String, BTreeMap<String, String>)> {
    let mut types = BTreeMap::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').expect("a TYPE line");
            types.insert(name.to_owned(), kind.to_owned());
        }
    }
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .map(|line| {
            let (series, _) = line.rsplit_once(' ').expect("a sample");
            let (name, mut map) = parse_series(series);
            map.remove("le");
            let name = name.as_str();
            let histogram = ["_bucket", "_sum", "_count"].iter().find_map(|s| {
                let base = name.strip_suffix(s)?;
                (types.get(base).map(String::as_str) == Some("histogram")).then_some(base)
            });
            let name = match (histogram, types.get(name).map(String::as_str)) {
                (Some(base), _) => base.to_owned(),
                (None, Some("counter")) => name.strip_suffix("_total").unwrap_or(name).to_owned(),
                _ => name.to_owned(),
            };
            (name, map)
        })
        .collect()
}

fn string(value: &Option<opentelemetry_proto::tonic::common::v1::AnyValue>) -> String {
    match value.as_ref().and_then(|v| v.value.as_ref()) {
        Some(any_value::Value::StringValue(s)) => s.clone(),
        other => format!("{other:?}"),
    }
}

type Series = BTreeMap<(String, BTreeMap<String, String>), Option<f64>>;

/// Every data point of `request`: its metric's name and attributes, and
/// its value when it is a number.
fn otlp_series(request: &ExportMetricsServiceRequest) -> Series {
    let mut out = BTreeMap::new();
    let attrs = |a: &[opentelemetry_proto::tonic::common::v1::KeyValue]| -> BTreeMap<String, String> {
        a.iter().map(|kv| (kv.key.clone(), string(&kv.value))).collect()
    };
    let number = |v: &Option<number_data_point::Value>| match v {
        Some(number_data_point::Value::AsDouble(d)) => Some(*d),
        Some(number_data_point::Value::AsInt(i)) => Some(*i as f64),
        None => None,
    };
    for metric in request.resource_metrics.iter().flat_map(|r| &r.scope_metrics).flat_map(|s| &s.metrics) {
        let name = metric.name.clone();
        match &metric.data {
            Some(Data::Gauge(g)) => g.data_points.iter().for_each(|p| {
                out.insert((name.clone(), attrs(&p.attributes)), number(&p.value));
            }),
            Some(Data::Sum(s)) => s.data_points.iter().for_each(|p| {
                out.insert((name.clone(), attrs(&p.attributes)), number(&p.value));
            }),
            Some(Data::Histogram(h)) => h.data_points.iter().for_each(|p| {
                out.insert((name.clone(), attrs(&p.attributes)), Some(p.count as f64));
            }),
            other => panic!("kshard exports no {other:?}"),
        }
    }
    out
}

fn resource(request: &ExportMetricsServiceRequest) -> BTreeMap<String, String> {
    let resource = request.resource_metrics[0].resource.as_ref().expect("a resource");
    resource.attributes.iter().map(|kv| (kv.key.clone(), string(&kv.value))).collect()
}

/// kshard's names, pushed as `otlp` says.
fn exporting(otlp: &OtlpSettings) -> ProcessOptions {
    ProcessOptions { otlp: Some(otlp.clone()), ..ProcessOptions::default() }
}

fn cluster(w: &Writer, name: &str, group: &str) -> ServeOptions {
    let monitor = MonitorSettings {
        groups: NameFilter::new(&[format!("{group}.*")], &[]).expect("filter"),
        ..MonitorSettings::default()
    };
    ServeOptions { name: Some(name.parse().expect("a cluster name")), ..options(w, monitor) }
}

#[test]
#[ignore = "needs the real broker or etcd: scripts/test.sh runs it (or cargo test -- --include-ignored)"]
fn a_grpc_collector_gets_what_metrics_shows_for_every_cluster() {
    let broker = Broker::from_env_or_start();
    let p = unique_name("otlp");
    let rt = runtime();
    let (collector, addr) = grpc_collector(&rt);
    let mut otlp = OtlpSettings::new(format!("http://{addr}"), OtlpProtocol::Grpc);
    otlp.interval = Duration::from_secs(1);
    otlp.headers = vec![("authorization".to_owned(), "Bearer grpc-token".to_owned())];
    otlp.resource.push(("deployment.environment".to_owned(), "test".to_owned()));
    // Small requests, so that the export is split and every piece arrives.
    otlp.max_points_per_request = 50;
    otlp.gzip = true;

    // Two clusters (two offsets topics on one broker), a group each.
    let (east, west) =
        (Writer::new(broker.brokers(), &format!("{p}-east")), Writer::new(broker.brokers(), &format!("{p}-west")));
    let topic = format!("{p}-orders");
    east.topic(&topic, &[10, 10]);
    east.commit(&format!("{p}-g"), &topic, 0, 3, 4);
    east.commit(&format!("{p}-g"), &topic, 1, 3, 10);
    west.commit(&format!("{p}-g"), &topic, 0, 3, 7);
    east.flush();
    west.flush();
    let group = format!("{p}-g");
    let mut service =
        TestService::start_as(exporting(&otlp), vec![cluster(&east, "east", &group), cluster(&west, "west", &group)]);
    service.wait_ready();

    // One export is several requests; after the scrape, the next whole
    // export (the requests from one with the first metric name) is compared.
    let lag = |cluster: &str, partition: &str| {
        (
            "kshard_kafka_consumer_group_topic_partition_lag".to_owned(),
            BTreeMap::from([
                ("cluster".to_owned(), cluster.to_owned()),
                ("group_id".to_owned(), group.clone()),
                ("partition_id".to_owned(), partition.to_owned()),
                ("topic_name".to_owned(), topic.clone()),
            ]),
        )
    };
    let (text, exported) = until(
        "an export with both clusters' lag, as /metrics",
        Duration::from_secs(60),
        Duration::from_millis(200),
        || {
            let (_, text) = service.get("/metrics");
            let seen = collector.requests();
            let export =
                until("a whole export after the scrape", Duration::from_secs(10), Duration::from_millis(100), || {
                    whole_export_after(&collector, seen)
                });
            let shown = text_series(&text);
            let sent: BTreeSet<_> = export.keys().cloned().collect();
            if !export.contains_key(&lag("west", "0")) {
                return Err("no lag of the west cluster yet".to_owned());
            }
            // The series kshard counts about itself may come and go between
            // the scrape and the export; the rest must match exactly.
            if shown != sent {
                let only_shown: Vec<_> = shown.difference(&sent).collect();
                let only_sent: Vec<_> = sent.difference(&shown).collect();
                return Err(format!("only in /metrics: {only_shown:?}\nonly exported: {only_sent:?}"));
            }
            Ok((text, export))
        },
    );
    assert_eq!(exported[&lag("east", "0")], Some(6.0), "10 records, committed 4");
    assert_eq!(exported[&lag("east", "1")], Some(0.0));
    assert_eq!(exported[&lag("west", "0")], Some(3.0), "west's group committed 7");
    let metrics = kshard_testkit::parse_metrics(&text);
    let scraped = format!(
        "kshard_kafka_consumer_group_topic_partition_lag{{cluster=\"west\",group_id=\"{group}\",topic_name=\"{topic}\",partition_id=\"0\"}}"
    );
    assert_eq!(metrics.get(&scraped), Some(&3.0), "the same value in /metrics: {metrics:#?}");

    let (auth, request) = collector.last().expect("a request");
    assert_eq!(auth.as_deref(), Some("Bearer grpc-token"), "the configured header");
    let resource = resource(&request);
    assert_eq!(resource.get("service.name").map(String::as_str), Some("kshard"));
    assert_eq!(resource.get("deployment.environment").map(String::as_str), Some("test"));
    let points: usize = request
        .resource_metrics
        .iter()
        .flat_map(|r| &r.scope_metrics)
        .flat_map(|s| &s.metrics)
        .map(|m| match &m.data {
            Some(Data::Gauge(g)) => g.data_points.len(),
            Some(Data::Sum(s)) => s.data_points.len(),
            Some(Data::Histogram(h)) => h.data_points.len(),
            _ => 0,
        })
        .sum();
    assert!(points <= 50, "max_points_per_request holds: {points}");

    // The export's own series, in /metrics.
    service.eventually("the export counted", |m| {
        m.get("kshard_otlp_exports_total{outcome=\"success\"}").is_some_and(|n| *n >= 2.0)
            && m.get("kshard_otlp_last_success_timestamp_seconds").is_some_and(|t| *t > 1.7e9)
    });
}

/// The first whole export that began after request `seen`: the requests
/// from one that starts with the first metric of an export to the next.
fn whole_export_after(collector: &Collector, seen: usize) -> Result<Series, String> {
    let got = collector.got.lock().expect("lock");
    let first_name = |r: &ExportMetricsServiceRequest| {
        r.resource_metrics.first()?.scope_metrics.first()?.metrics.first().map(|m| m.name.clone())
    };
    let opener = got.first().and_then(|(_, r)| first_name(r)).ok_or("nothing exported yet")?;
    let starts: Vec<usize> =
        (seen..got.len()).filter(|i| first_name(&got[*i].1).as_deref() == Some(opener.as_str())).collect();
    let [start, end, ..] = starts[..] else { return Err("no whole export since the scrape yet".to_owned()) };
    Ok(got[start..end].iter().flat_map(|(_, r)| otlp_series(r)).collect())
}

struct Pki {
    dir: std::path::PathBuf,
    server: (openssl::x509::X509, openssl::pkey::PKey<openssl::pkey::Private>),
}

/// A CA (in `dir/ca.pem`) and a certificate it signed for 127.0.0.1.
fn pki(dir: std::path::PathBuf) -> Pki {
    let (ca, ca_key) = certificate("kshard test CA", "ca.kshard.test", None);
    let server = certificate("127.0.0.1", "127.0.0.1", Some((&ca, &ca_key)));
    std::fs::create_dir_all(&dir).expect("dir");
    std::fs::write(dir.join("ca.pem"), ca.to_pem().expect("pem")).expect("write");
    Pki { dir, server }
}

#[test]
#[ignore = "needs the real broker or etcd: scripts/test.sh runs it (or cargo test -- --include-ignored)"]
fn https_with_a_token_a_wrong_token_refused_and_a_late_collector() {
    let broker = Broker::from_env_or_start();
    let p = unique_name("otlp-https");
    let rt = runtime();
    let dir = std::env::temp_dir().join(&p);
    let pki = pki(dir.clone());
    let w = Writer::new(broker.brokers(), &p);
    let topic = format!("{p}-t");
    w.topic(&topic, &[5]);
    w.commit(&format!("{p}-g"), &topic, 0, 3, 2);
    w.flush();

    // The collector's port is taken now, but nobody answers on it yet.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("addr");
    let parked = listener;
    let mut otlp =
        OtlpSettings::new(format!("https://127.0.0.1:{}/v1/metrics", addr.port()), OtlpProtocol::HttpProtobuf);
    otlp.interval = Duration::from_secs(1);
    otlp.timeout = Duration::from_secs(2);
    otlp.headers = vec![("authorization".to_owned(), "Bearer right".to_owned())];
    otlp.tls = OtlpTls { ca_file: Some(pki.dir.join("ca.pem")), ..OtlpTls::default() };
    otlp.gzip = true;
    let monitor = MonitorSettings {
        groups: NameFilter::new(&[format!("{p}-g")], &[]).expect("filter"),
        ..MonitorSettings::default()
    };
    let mut service = TestService::start_as(exporting(&otlp), vec![options(&w, monitor.clone())]);
    service.wait_ready();
    // Nobody answers (the connection is never accepted): the export fails,
    // is counted, and the lag is served all the same.
    service.eventually("a failed export", |m| {
        m.get("kshard_otlp_exports_total{outcome=\"failure\"}").is_some_and(|n| *n >= 1.0)
    });
    assert_eq!(service.get("/ready").0, 200, "the export never touches /ready");

    // Now the collector answers: the next exports arrive by themselves.
    let collector = https_collector(&rt, parked, &pki, "right");
    until("exports over HTTPS", Duration::from_secs(30), Duration::from_millis(100), || {
        (collector.requests() >= 2).then_some(()).ok_or_else(|| "none yet".to_owned())
    });
    let (auth, request) = collector.last().expect("a request");
    assert_eq!(auth.as_deref(), Some("Bearer right"));
    assert!(collector.gzipped.load(std::sync::atomic::Ordering::Relaxed) >= 2, "compression: gzip");
    let lag = otlp_series(&request)
        .into_iter()
        .find(|((name, labels), _)| {
            name == "kshard_kafka_consumer_group_topic_partition_lag" && labels.get("topic_name") == Some(&topic)
        })
        .map(|(_, v)| v);
    assert_eq!(lag, Some(Some(3.0)), "5 records, committed 2");
    drop(service);

    // A wrong token: 401, counted as a failure, nothing taken.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let strict = https_collector(&rt, listener, &pki, "another");
    let wrong = OtlpSettings { endpoint: format!("https://127.0.0.1:{port}/v1/metrics"), ..otlp };
    let mut service = TestService::start_as(exporting(&wrong), vec![options(&w, monitor)]);
    service.eventually("refused exports counted", |m| {
        m.get("kshard_otlp_exports_total{outcome=\"failure\"}").is_some_and(|n| *n >= 2.0)
    });
    // The collector saw them and refused them (not: none arrived).
    assert!(strict.refused.load(std::sync::atomic::Ordering::Relaxed) >= 2, "the refused requests reached it");
    assert_eq!(strict.requests(), 0, "nothing taken without the right token");
    let m = service.metrics();
    assert_eq!(m.get("kshard_otlp_exports_total{outcome=\"success\"}"), Some(&0.0));
    let _ = std::fs::remove_dir_all(dir);
}

/// An OTLP/gRPC collector over TLS (HTTP/2 chosen by ALPN, as gRPC needs).
fn grpc_tls_collector(rt: &tokio::runtime::Runtime, pki: &Pki) -> (Collector, SocketAddr) {
    use openssl::ssl::{AlpnError, SslAcceptor, SslMethod, select_next_proto};
    let mut acceptor = SslAcceptor::mozilla_intermediate_v5(SslMethod::tls_server()).expect("acceptor");
    acceptor.set_certificate(&pki.server.0).expect("cert");
    acceptor.set_private_key(&pki.server.1).expect("key");
    acceptor.set_alpn_select_callback(|_, offered| select_next_proto(b"\x02h2", offered).ok_or(AlpnError::NOACK));
    let acceptor = Arc::new(acceptor.build());
    let listener = rt.block_on(tokio::net::TcpListener::bind("127.0.0.1:0")).expect("bind");
    let addr = listener.local_addr().expect("addr");
    let (connections, incoming) =
        tokio::sync::mpsc::channel::<Result<kshard_lag::web::TlsConnection, std::io::Error>>(8);
    rt.spawn(async move {
        loop {
            let Ok((tcp, _)) = listener.accept().await else { continue };
            let (acceptor, connections) = (Arc::clone(&acceptor), connections.clone());
            tokio::spawn(async move {
                let ssl = openssl::ssl::Ssl::new(acceptor.context()).expect("ssl");
                let mut stream = tokio_openssl::SslStream::new(ssl, tcp).expect("stream");
                if Pin::new(&mut stream).accept().await.is_ok() {
                    let _ = connections.send(Ok(kshard_lag::web::TlsConnection::new(stream))).await;
                }
            });
        }
    });
    let collector = Collector::default();
    let service = MetricsServiceServer::new(collector.clone());
    rt.spawn(async move {
        tonic::transport::Server::builder()
            .add_service(service)
            .serve_with_incoming(tokio_stream::wrappers::ReceiverStream::new(incoming))
            .await
    });
    (collector, addr)
}

#[test]
fn grpc_over_tls_with_the_collectors_ca() {
    let rt = runtime();
    let dir = std::env::temp_dir().join(unique_name("otlp-grpc-tls"));
    let pki = pki(dir.clone());
    let (collector, addr) = grpc_tls_collector(&rt, &pki);
    let mut otlp = OtlpSettings::new(format!("https://127.0.0.1:{}", addr.port()), OtlpProtocol::Grpc);
    otlp.interval = Duration::from_secs(1);
    otlp.tls = OtlpTls { ca_file: Some(pki.dir.join("ca.pem")), ..OtlpTls::default() };
    // No broker (nothing listens on port 1): the health series are exported all the same.
    let options = ServeOptions {
        mode: kshard_lag::service::ScrapeMode::AdminApi,
        request_timeout: Duration::from_secs(1),
        ..ServeOptions::new(kshard_kafka::ClientSettings::new("127.0.0.1:1"))
    };
    let service = TestService::start_as(exporting(&otlp), vec![options]);
    until("an export over gRPC and TLS", Duration::from_secs(30), Duration::from_millis(100), || {
        (collector.requests() >= 1).then_some(()).ok_or_else(|| "none yet".to_owned())
    });
    let (_, request) = collector.last().expect("a request");
    let names: BTreeSet<String> = otlp_series(&request).into_keys().map(|(name, _)| name).collect();
    assert!(names.contains("kshard_catchup_ready"), "kshard's health: {names:?}");
    assert!(names.contains("kshard_otlp_exports"), "the export's own counter, without _total: {names:?}");
    drop(service);
    let _ = std::fs::remove_dir_all(dir);
}
