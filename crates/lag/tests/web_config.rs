//! `--web-config-file`: the service behind TLS and basic auth, checked with
//! a real TLS client (OpenSSL) speaking HTTP/1.1 to `kshard_lag::service::run`.
//! No broker is needed: the endpoint is served while the workers retry an
//! unreachable one (and `/ready` says so), which is all these tests look at.

mod common;

use std::path::Path;
use std::pin::Pin;
use std::time::Duration;

use openssl::pkey::{PKey, Private};
use openssl::ssl::{SslConnector, SslMethod, SslVerifyMode};
use openssl::x509::X509;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use common::pki::certificate;
use common::serve_with_web_config;
use kshard_kafka::ClientSettings;
use kshard_lag::service::{ProcessOptions, ServeOptions, run};

struct Pki {
    ca: X509,
    client: (X509, PKey<Private>),
    stranger: (X509, PKey<Private>),
}

/// Writes a CA, a server certificate for 127.0.0.1 and its key into `dir`;
/// gives two client certificates: one naming `client.kshard.test`, one not.
fn pki(dir: &Path) -> Pki {
    let (ca, ca_key) = certificate("kshard test CA", "ca.kshard.test", None);
    let (server, server_key) = certificate("127.0.0.1", "127.0.0.1", Some((&ca, &ca_key)));
    std::fs::write(dir.join("ca.pem"), ca.to_pem().expect("pem")).expect("write");
    std::fs::write(dir.join("server.pem"), server.to_pem().expect("pem")).expect("write");
    std::fs::write(dir.join("server.key"), server_key.private_key_to_pem_pkcs8().expect("pem")).expect("write");
    let client = certificate("client", "client.kshard.test", Some((&ca, &ca_key)));
    let stranger = certificate("stranger", "stranger.kshard.test", Some((&ca, &ca_key)));
    Pki { ca, client, stranger }
}

/// One GET over TLS: the status line and the whole response, or why the
/// connection failed.
async fn get(
    port: u16,
    ca: &X509,
    client: Option<&(X509, PKey<Private>)>,
    path: &str,
    auth: Option<&str>,
) -> Result<(u16, String), String> {
    let mut connector = SslConnector::builder(SslMethod::tls_client()).map_err(|e| e.to_string())?;
    connector.cert_store_mut().add_cert(ca.clone()).map_err(|e| e.to_string())?;
    connector.set_verify(SslVerifyMode::PEER);
    if let Some((cert, key)) = client {
        connector.set_certificate(cert).map_err(|e| e.to_string())?;
        connector.set_private_key(key).map_err(|e| e.to_string())?;
    }
    let ssl =
        connector.build().configure().map_err(|e| e.to_string())?.into_ssl("127.0.0.1").map_err(|e| e.to_string())?;
    let tcp = TcpStream::connect(("127.0.0.1", port)).await.map_err(|e| e.to_string())?;
    let mut stream = tokio_openssl::SslStream::new(ssl, tcp).map_err(|e| e.to_string())?;
    Pin::new(&mut stream).connect().await.map_err(|e| format!("handshake: {e}"))?;
    let auth = auth.map(|a| format!("Authorization: Basic {}\r\n", base64(a))).unwrap_or_default();
    let request = format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n{auth}Connection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.map_err(|e| e.to_string())?;
    let mut response = Vec::new();
    stream.read_to_end(&mut response).await.map_err(|e| format!("reading: {e}"))?;
    let text = String::from_utf8_lossy(&response).into_owned();
    let status = text.split(' ').nth(1).and_then(|s| s.parse().ok()).ok_or_else(|| format!("no status in {text:?}"))?;
    Ok((status, text))
}

fn base64(text: &str) -> String {
    openssl::base64::encode_block(text.as_bytes())
}

/// Waits until the service answers (it starts in the background).
async fn until_up(port: u16, ca: &X509, client: Option<&(X509, PKey<Private>)>, auth: Option<&str>) {
    for _ in 0..100 {
        if let Ok((200, _)) = get(port, ca, client, "/healthz", auth).await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("the service never answered /healthz over TLS");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_and_basic_auth_refuse_a_wrong_password() {
    let dir = tempfile_dir("auth");
    let pki = pki(&dir);
    let hash = bcrypt::hash("s3cret", 4).expect("bcrypt");
    let config = dir.join("web.yml");
    std::fs::write(
        &config,
        format!(
            "tls_server_config:\n  cert_file: {d}/server.pem\n  key_file: {d}/server.key\n\
             http_server_config:\n  headers:\n    X-Frame-Options: deny\n\
             basic_auth_users:\n  alice: {hash}\n",
            d = dir.display()
        ),
    )
    .expect("write");
    let (port, _, stop, task) = serve_with_web_config(&config, false).await;
    until_up(port, &pki.ca, None, Some("alice:s3cret")).await;

    let (status, text) = get(port, &pki.ca, None, "/metrics", Some("alice:s3cret")).await.expect("get");
    assert_eq!(status, 200, "{text}");
    assert!(text.contains("kshard_exporter_up"), "{text}");
    assert!(text.to_ascii_lowercase().contains("x-frame-options: deny"), "the configured header: {text}");

    for auth in [Some("alice:wrong"), Some("mallory:s3cret"), None] {
        let (status, text) = get(port, &pki.ca, None, "/api/groups", auth).await.expect("get");
        assert_eq!(status, 401, "{auth:?}: {text}");
        assert!(text.to_ascii_lowercase().contains("www-authenticate: basic"), "{text}");
        assert!(text.to_ascii_lowercase().contains("x-frame-options: deny"), "headers on refusals too: {text}");
    }

    // Plain HTTP to the TLS port gets no answer.
    let mut plain = TcpStream::connect(("127.0.0.1", port)).await.expect("connect");
    plain.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n").await.expect("write");
    let mut answer = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(5), plain.read_to_end(&mut answer)).await;
    assert!(!String::from_utf8_lossy(&answer).contains("200 OK"), "plain HTTP was served");

    // A new user in the file works without a restart; the old one is gone.
    let bob = bcrypt::hash("hunter2", 4).expect("bcrypt");
    let text = std::fs::read_to_string(&config).expect("read");
    let (head, _) = text.split_once("basic_auth_users:").expect("users");
    std::fs::write(&config, format!("{head}basic_auth_users:\n  bob: {bob}\n")).expect("write");
    let mut switched = false;
    for _ in 0..50 {
        if let Ok((200, _)) = get(port, &pki.ca, None, "/healthz", Some("bob:hunter2")).await {
            switched = true;
            break;
        }
        // mtime resolution: make sure the change is seen as one.
        tokio::time::sleep(Duration::from_millis(100)).await;
        let now = std::fs::read_to_string(&config).expect("read");
        std::fs::write(&config, now).expect("write");
    }
    assert!(switched, "the changed file was not read again");
    let (status, _) = get(port, &pki.ca, None, "/healthz", Some("alice:s3cret")).await.expect("get");
    assert_eq!(status, 401, "a removed user keeps access");

    // A broken file refuses requests rather than dropping authentication.
    std::fs::write(&config, "basic_auth_users: [not, a, map]\n").expect("write");
    tokio::time::sleep(Duration::from_millis(20)).await;
    let refused = get(port, &pki.ca, None, "/healthz", Some("bob:hunter2")).await;
    assert!(!matches!(refused, Ok((200, _))), "a broken file opened the endpoint: {refused:?}");

    let _ = stop.send(());
    task.await.expect("join").expect("served");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_certificates_are_verified_and_their_names_checked() {
    let dir = tempfile_dir("mtls");
    let pki = pki(&dir);
    let config = dir.join("web.yml");
    std::fs::write(
        &config,
        format!(
            "tls_server_config:\n  cert_file: {d}/server.pem\n  key_file: {d}/server.key\n  \
             client_ca_file: {d}/ca.pem\n  client_auth_type: RequireAndVerifyClientCert\n  \
             client_allowed_sans: [client.kshard.test]\n  min_version: TLS13\n",
            d = dir.display()
        ),
    )
    .expect("write");
    let (port, _, stop, task) = serve_with_web_config(&config, false).await;
    until_up(port, &pki.ca, Some(&pki.client), None).await;

    let (status, _) = get(port, &pki.ca, Some(&pki.client), "/healthz", None).await.expect("get");
    assert_eq!(status, 200);
    let without = get(port, &pki.ca, None, "/healthz", None).await;
    assert!(without.is_err(), "no client certificate, yet answered: {without:?}");
    let stranger = get(port, &pki.ca, Some(&pki.stranger), "/healthz", None).await;
    assert!(stranger.is_err(), "a name not in client_allowed_sans, yet answered: {stranger:?}");
    // A certificate of another CA is refused in the handshake.
    let (other_ca, other_key) = certificate("other CA", "other.kshard.test", None);
    let forged = certificate("client", "client.kshard.test", Some((&other_ca, &other_key)));
    let forged = get(port, &pki.ca, Some(&forged), "/healthz", None).await;
    assert!(forged.is_err(), "a certificate of another CA, yet answered: {forged:?}");

    let _ = stop.send(());
    task.await.expect("join").expect("served");
}

/// The serial number of the certificate the server presents.
async fn served_serial(port: u16, ca: &X509) -> Vec<u8> {
    let mut connector = SslConnector::builder(SslMethod::tls_client()).expect("builder");
    connector.cert_store_mut().add_cert(ca.clone()).expect("CA");
    let ssl = connector.build().configure().expect("configure").into_ssl("127.0.0.1").expect("ssl");
    let tcp = TcpStream::connect(("127.0.0.1", port)).await.expect("connects");
    let mut stream = tokio_openssl::SslStream::new(ssl, tcp).expect("stream");
    Pin::new(&mut stream).connect().await.expect("handshake");
    let cert = stream.ssl().peer_certificate().expect("a certificate");
    cert.serial_number().to_bn().expect("serial").to_vec()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_renewed_certificate_is_served_even_with_its_old_modification_time() {
    let dir = tempfile_dir("renew");
    let (ca, ca_key) = certificate("kshard test CA", "ca.kshard.test", None);
    let write = |name: &str| {
        let (cert, key) = certificate(name, "127.0.0.1", Some((&ca, &ca_key)));
        std::fs::write(dir.join("server.pem"), cert.to_pem().expect("pem")).expect("write");
        std::fs::write(dir.join("server.key"), key.private_key_to_pem_pkcs8().expect("pem")).expect("write");
    };
    write("127.0.0.1");
    let config = dir.join("web.yml");
    std::fs::write(
        &config,
        format!("tls_server_config:\n  cert_file: {d}/server.pem\n  key_file: {d}/server.key\n", d = dir.display()),
    )
    .expect("write");
    let (port, _, stop, task) = serve_with_web_config(&config, false).await;
    until_up(port, &ca, None, None).await;
    let first = served_serial(port, &ca).await;
    // Renewed, the files' modification times set back as `cp -p` does.
    let mtimes: Vec<std::time::SystemTime> = ["server.pem", "server.key"]
        .iter()
        .map(|f| std::fs::metadata(dir.join(f)).and_then(|m| m.modified()).expect("mtime"))
        .collect();
    write("renewed");
    for (f, mtime) in ["server.pem", "server.key"].iter().zip(mtimes) {
        std::fs::File::options()
            .write(true)
            .open(dir.join(f))
            .and_then(|file| file.set_modified(mtime))
            .expect("set back");
    }
    let renewed = served_serial(port, &ca).await;
    assert_ne!(first, renewed, "the renewed certificate is served");
    let _ = stop.send(());
    task.await.expect("join").expect("served");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_read_empty_mid_rewrite_keeps_basic_auth() {
    let dir = tempfile_dir("rewrite");
    let hash = bcrypt::hash("s3cret", 4).expect("bcrypt");
    let config = dir.join("web.yml");
    std::fs::write(&config, format!("basic_auth_users:\n  alice: {hash}\n")).expect("write");
    let (port, _, stop, task) = serve_with_web_config(&config, false).await;
    let mut up = false;
    for _ in 0..100 {
        if TcpStream::connect(("127.0.0.1", port)).await.is_ok() {
            up = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(up, "the service listens");
    assert_eq!(get_from([127, 0, 0, 1], port, "/healthz", None).await, 401);
    // Truncated, as an editor or a config tool does before writing.
    std::fs::write(&config, "").expect("truncate");
    assert_eq!(get_from([127, 0, 0, 1], port, "/healthz", None).await, 401, "an empty file opened the endpoint");
    std::fs::write(&config, format!("basic_auth_users:\n  alice: {hash}\n")).expect("write");
    assert_eq!(get_from([127, 0, 0, 1], port, "/healthz", Some("alice:s3cret")).await, 200);
    let _ = stop.send(());
    task.await.expect("join").expect("served");
}

#[tokio::test]
async fn a_bad_file_fails_at_start_naming_the_field() {
    let dir = tempfile_dir("bad");
    let config = dir.join("web.yml");
    std::fs::write(&config, "tls_server_config:\n  cert_file: /nonexistent/server.pem\n  key_file: k\n")
        .expect("write");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let options = ServeOptions::new(ClientSettings::new("127.0.0.1:1"));
    let process = ProcessOptions { web_config: Some(config), ..ProcessOptions::default() };
    let err = run(process, options, listener, std::future::pending()).await.expect_err("must fail");
    let text = err.to_string();
    assert!(text.contains("tls_server_config.cert_file") && text.contains("/nonexistent/server.pem"), "{text}");
}

/// One plain-HTTP GET from the loopback address `from`: the status.
async fn get_from(from: [u8; 4], port: u16, path: &str, auth: Option<&str>) -> u16 {
    let socket = tokio::net::TcpSocket::new_v4().expect("socket");
    socket.bind((std::net::Ipv4Addr::from(from), 0).into()).expect("binds a loopback address");
    let mut tcp = socket.connect(([127, 0, 0, 1], port).into()).await.expect("connects");
    let auth = auth.map(|a| format!("Authorization: Basic {}\r\n", base64(a))).unwrap_or_default();
    let request = format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n{auth}Connection: close\r\n\r\n");
    tcp.write_all(request.as_bytes()).await.expect("writes");
    let mut answer = String::new();
    tcp.read_to_string(&mut answer).await.expect("reads");
    answer.split(' ').nth(1).and_then(|s| s.parse().ok()).unwrap_or_else(|| panic!("no status in {answer:?}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_rate_limit_counts_each_client_after_authentication() {
    let dir = tempfile_dir("rate");
    let hash = bcrypt::hash("s3cret", 4).expect("bcrypt");
    let config = dir.join("web.yml");
    std::fs::write(&config, format!("basic_auth_users:\n  alice: {hash}\nrate_limit:\n  interval: 1h\n  burst: 2\n"))
        .expect("write");
    let (port, _, stop, task) = serve_with_web_config(&config, false).await;
    let mut up = false;
    for _ in 0..100 {
        let socket = TcpStream::connect(("127.0.0.1", port)).await;
        if socket.is_ok() {
            up = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(up, "the service listens");
    // Strangers are refused by authentication and take no token.
    for _ in 0..10 {
        assert_eq!(get_from([127, 0, 0, 1], port, "/healthz", None).await, 401);
        assert_eq!(get_from([127, 0, 0, 1], port, "/healthz", Some("alice:guess")).await, 401);
    }
    let alice = Some("alice:s3cret");
    assert_eq!(get_from([127, 0, 0, 1], port, "/healthz", alice).await, 200);
    assert_eq!(get_from([127, 0, 0, 1], port, "/healthz", alice).await, 200);
    assert_eq!(get_from([127, 0, 0, 1], port, "/healthz", alice).await, 429, "this client's burst is spent");
    // Another client has a bucket of its own.
    assert_eq!(get_from([127, 0, 0, 2], port, "/healthz", alice).await, 200);
    // A client guessing passwords gets its first checks, then 503 without
    // one; another client's first check still gets its turn.
    let mut answers = Vec::new();
    for i in 0..20 {
        answers.push(get_from([127, 0, 0, 3], port, "/healthz", Some(&format!("alice:guess{i}"))).await);
    }
    assert_eq!(answers[0], 401, "{answers:?}");
    assert!(answers.contains(&503), "guessing is held to a few checks a second: {answers:?}");
    assert_eq!(get_from([127, 0, 0, 4], port, "/healthz", Some("alice:s3cret")).await, 200);
    let _ = stop.send(());
    task.await.expect("join").expect("served");
}

/// A fresh directory under the system's temporary directory.
fn tempfile_dir(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("kshard-web-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("mkdir");
    dir
}
