//! [`kshard_runtime::http_server`] on a loopback socket, against clients
//! that never finish their request: each is closed within the header-read
//! timeout, a flood past the cap evicts the idle ones instead of keeping
//! a real request out, and shutdown ends within its grace.

use std::time::Duration;

use axum::Router;
use axum::routing::get;
use kshard_runtime::http_server::{HttpLimits, serve};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// Starts the server with `limits`; its address and the sender that stops it.
async fn started(limits: HttpLimits) -> (String, tokio::sync::oneshot::Sender<()>, tokio::task::JoinHandle<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("binds");
    let address = listener.local_addr().expect("address").to_string();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let app = Router::new().route("/ready", get(|| async { "ready\n" })).route(
        "/slow/{ms}",
        get(|axum::extract::Path(ms): axum::extract::Path<u64>| async move {
            tokio::time::sleep(Duration::from_millis(ms)).await;
            "slow\n"
        }),
    );
    let task = tokio::spawn(async move {
        serve(listener, app, limits, async move {
            let _ = stopped.await;
        })
        .await
        .expect("serves");
    });
    (address, stop, task)
}

/// A client that sends half a request head and then nothing.
async fn slow_client(address: &str) -> TcpStream {
    let mut tcp = TcpStream::connect(address).await.expect("connects");
    tcp.write_all(b"GET /ready HTTP/1.1\r\nHost: kshard\r\n").await.expect("writes");
    tcp
}

/// Whether the server closed `tcp` (a read ends) within `within`.
async fn closed_within(tcp: &mut TcpStream, within: Duration) -> bool {
    let mut buf = [0u8; 256];
    matches!(tokio::time::timeout(within, tcp.read(&mut buf)).await, Ok(Ok(0) | Err(_)))
}

async fn get_ready(address: &str) -> String {
    let mut tcp = TcpStream::connect(address).await.expect("connects");
    tcp.write_all(b"GET /ready HTTP/1.1\r\nHost: kshard\r\nConnection: close\r\n\r\n").await.expect("writes");
    let mut answer = String::new();
    tcp.read_to_string(&mut answer).await.expect("reads");
    answer
}

#[tokio::test]
async fn a_client_that_never_finishes_its_request_is_closed_after_the_header_timeout() {
    let limits = HttpLimits { header_read_timeout: Duration::from_secs(1), ..HttpLimits::default() };
    let (address, stop, task) = started(limits).await;
    let mut slow = slow_client(&address).await;
    // Meanwhile, others are answered.
    assert!(get_ready(&address).await.starts_with("HTTP/1.1 200"));
    // Closed by the server well before a generous bound; never, without the timeout.
    assert!(closed_within(&mut slow, Duration::from_secs(30)).await, "the slow client was closed");
    let mut silent = TcpStream::connect(&address).await.expect("connects");
    assert!(closed_within(&mut silent, Duration::from_secs(30)).await, "a client that sends nothing too");
    let _ = stop.send(());
    task.await.expect("stops");
}

#[tokio::test]
async fn past_the_cap_idle_connections_make_room_for_a_real_request() {
    let limits =
        HttpLimits { max_connections: 8, header_read_timeout: Duration::from_secs(3600), ..HttpLimits::default() };
    let (address, stop, task) = started(limits).await;
    let mut flood = Vec::new();
    for _ in 0..40 {
        flood.push(slow_client(&address).await);
    }
    // The header timeout is an hour: only eviction can answer this.
    let answer = tokio::time::timeout(Duration::from_secs(60), get_ready(&address)).await.expect("answered");
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    // The oldest of the flood were closed to make room; at most the cap remain open.
    let mut open = 0;
    for tcp in &mut flood {
        if !closed_within(tcp, Duration::from_millis(50)).await {
            open += 1;
        }
    }
    assert!(open <= 8, "{open} of the flood still open, past the cap of 8");
    let _ = stop.send(());
    task.await.expect("stops");
}

/// A GET of `path` sent now; its answer read in a task.
async fn get_later(address: &str, path: &str) -> tokio::task::JoinHandle<String> {
    let mut tcp = TcpStream::connect(address).await.expect("connects");
    let request = format!("GET {path} HTTP/1.1\r\nHost: kshard\r\nConnection: close\r\n\r\n");
    tcp.write_all(request.as_bytes()).await.expect("writes");
    tokio::spawn(async move {
        let mut answer = String::new();
        let _ = tcp.read_to_string(&mut answer).await;
        answer
    })
}

#[tokio::test]
async fn shutdown_lets_requests_finish_within_its_grace_and_no_longer() {
    let limits = HttpLimits {
        header_read_timeout: Duration::from_secs(3600),
        shutdown_grace: Duration::from_secs(5),
        ..HttpLimits::default()
    };
    let (address, stop, task) = started(limits).await;
    let _held: Vec<TcpStream> = slow_clients(&address, 5).await;
    let answering = get_later(&address, "/slow/300").await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    let _ = stop.send(());
    // Half-sent requests are closed at once; the one being answered finishes.
    assert!(answering.await.expect("answer").starts_with("HTTP/1.1 200"), "answered within the grace");
    tokio::time::timeout(Duration::from_secs(60), task).await.expect("stopped").expect("no panic");
    // An answer that would take past the grace is cut off, and serve returns.
    let limits = HttpLimits { shutdown_grace: Duration::from_millis(300), ..HttpLimits::default() };
    let (address, stop, task) = started(limits).await;
    let endless = get_later(&address, "/slow/3600000").await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    let _ = stop.send(());
    tokio::time::timeout(Duration::from_secs(60), task).await.expect("stopped after the grace").expect("no panic");
    assert!(!endless.await.expect("read ends").contains("200"), "not answered: closed at the grace's end");
}

async fn slow_clients(address: &str, n: usize) -> Vec<TcpStream> {
    let mut held = Vec::new();
    for _ in 0..n {
        held.push(slow_client(address).await);
    }
    held
}
