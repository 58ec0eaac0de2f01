//! KEDA's external scaler over TLS: with `tls_server_config` in the web
//! configuration file, the scaler's port takes the web port's certificate
//! and client-certificate checks, and offers HTTP/2 by ALPN, as gRPC clients
//! (KEDA's, in Go) require. Driven by the client generated from KEDA's
//! proto over OpenSSL, as KEDA's `caCert`, `tlsClientCert` and
//! `tlsClientKey` would. No broker is needed: `GetMetricSpec` needs no lag,
//! and is answered while the cluster's broker is unreachable.

mod common;

use std::path::PathBuf;
use std::pin::Pin;
use std::time::Duration;

use hyper_util::rt::TokioIo;
use kshard_lag::keda::proto::external_scaler_client::ExternalScalerClient;
use kshard_lag::keda::scaled_object;
use openssl::pkey::{PKey, Private};
use openssl::ssl::{SslConnector, SslMethod, SslVerifyMode};
use openssl::x509::X509;
use tokio::net::TcpStream;
use tonic::transport::{Channel, Endpoint};

use common::pki::certificate;
use common::serve_with_web_config;

type Pair = (X509, PKey<Private>);

fn io_error(e: impl std::fmt::Display) -> std::io::Error {
    std::io::Error::other(e.to_string())
}

/// A scaler client over TLS to `port`, trusting `ca`, with `client`'s
/// certificate when given; the connection fails unless the server chose
/// HTTP/2 by ALPN.
async fn scaler(port: u16, ca: &X509, client: Option<&Pair>) -> Result<ExternalScalerClient<Channel>, String> {
    let mut b = SslConnector::builder(SslMethod::tls_client()).map_err(|e| e.to_string())?;
    b.cert_store_mut().add_cert(ca.clone()).map_err(|e| e.to_string())?;
    b.set_verify(SslVerifyMode::PEER);
    b.set_alpn_protos(b"\x02h2").map_err(|e| e.to_string())?;
    if let Some((cert, key)) = client {
        b.set_certificate(cert).map_err(|e| e.to_string())?;
        b.set_private_key(key).map_err(|e| e.to_string())?;
    }
    let connector = b.build();
    let endpoint = Endpoint::from_shared(format!("http://127.0.0.1:{port}")).map_err(|e| e.to_string())?;
    let channel = endpoint
        .connect_with_connector(tower::service_fn(move |_| {
            let connector = connector.clone();
            async move {
                let ssl = connector.configure().map_err(io_error)?.into_ssl("127.0.0.1").map_err(io_error)?;
                let tcp = TcpStream::connect(("127.0.0.1", port)).await?;
                let mut stream = tokio_openssl::SslStream::new(ssl, tcp).map_err(io_error)?;
                Pin::new(&mut stream).connect().await.map_err(io_error)?;
                if stream.ssl().selected_alpn_protocol() != Some(b"h2") {
                    return Err(io_error("the server did not choose h2 by ALPN"));
                }
                Ok::<_, std::io::Error>(TokioIo::new(stream))
            }
        }))
        .await
        .map_err(|e| format!("{e:?}"))?;
    Ok(ExternalScalerClient::new(channel))
}

/// The metric spec of a scaled object on group `g`, or why not.
async fn spec(port: u16, ca: &X509, client: Option<&Pair>) -> Result<String, String> {
    let mut scaler = scaler(port, ca, client).await?;
    let object = scaled_object("orders", &[("consumerGroup", "g"), ("lagThreshold", "5")]);
    let specs = scaler.get_metric_spec(object).await.map_err(|s| format!("{s:?}"))?.into_inner().metric_specs;
    Ok(specs.first().map(|s| s.metric_name.clone()).unwrap_or_default())
}

fn temp_dir() -> PathBuf {
    let dir = std::env::temp_dir().join(kshard_testkit::unique_name("keda-tls"));
    std::fs::create_dir_all(&dir).expect("a temporary directory");
    dir
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_scaler_takes_the_web_configurations_tls_and_client_certificates() {
    let dir = temp_dir();
    let (ca, ca_key) = certificate("kshard test CA", "ca.kshard.test", None);
    let (server, server_key) = certificate("127.0.0.1", "127.0.0.1", Some((&ca, &ca_key)));
    let write = |name: &str, pem: Vec<u8>| std::fs::write(dir.join(name), pem).expect("write");
    write("ca.pem", ca.to_pem().expect("pem"));
    write("server.pem", server.to_pem().expect("pem"));
    write("server.key", server_key.private_key_to_pem_pkcs8().expect("pem"));
    let keda = certificate("keda", "keda.kshard.test", Some((&ca, &ca_key)));
    let config = dir.join("web.yml");
    std::fs::write(
        &config,
        format!(
            "tls_server_config:\n  cert_file: {d}/server.pem\n  key_file: {d}/server.key\n  \
             client_ca_file: {d}/ca.pem\n  client_auth_type: RequireAndVerifyClientCert\n",
            d = dir.display()
        ),
    )
    .expect("write");
    let (_, scaler_port, stop, task) = serve_with_web_config(&config, true).await;
    let port = scaler_port.expect("the scaler's port");

    let mut answered = Err(String::new());
    for _ in 0..100 {
        answered = spec(port, &ca, Some(&keda)).await;
        if answered.is_ok() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let name = answered.expect("the scaler answers over TLS with KEDA's client certificate");
    assert!(name.starts_with("kshard-lag-"), "{name}");
    let without = spec(port, &ca, None).await;
    assert!(without.is_err(), "no client certificate, yet answered: {without:?}");
    let (other_ca, other_key) = certificate("other CA", "other.kshard.test", None);
    let forged = certificate("keda", "keda.kshard.test", Some((&other_ca, &other_key)));
    let forged = spec(port, &ca, Some(&forged)).await;
    assert!(forged.is_err(), "a certificate of another CA, yet answered: {forged:?}");

    let _ = stop.send(());
    task.await.expect("join").expect("served");
    let _ = std::fs::remove_dir_all(dir);
}
