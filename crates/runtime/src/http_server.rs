//! The HTTP server every kshard endpoint runs on: a member's
//! (`node_http`) and the lag monitor's. It is `axum::serve` with the limits
//! a port that many clients reach needs, which `axum::serve` does not set:
//!
//! - **a header-read timeout** ([`HttpLimits::header_read_timeout`], 10 s):
//!   a connection that has not sent a whole request head within it (from
//!   when it opened, or from its last answer when kept alive) is closed, so
//!   a client that sends half a request, or nothing, holds nothing for long;
//! - **a cap on connections** ([`HttpLimits::max_connections`], kept below
//!   the process's descriptor limit so that Kafka and etcd connections
//!   always find one): a connection past the cap closes the open connection
//!   idle for longest (one waiting for its request, not one being
//!   answered), so a flood of slow clients can delay a scrape by at most
//!   the time it takes to evict one, never by the header timeout; when
//!   every connection is being answered, the new one is closed;
//! - **accept errors** (out of descriptors, say) wait 10 ms, not a second;
//! - **a deadline on shutdown** ([`HttpLimits::shutdown_grace`]): requests
//!   being answered may finish within it, then every connection is closed.
//!
//! [`Accept`] is what it serves on: a `TcpListener`, or anything else that
//! yields connections (the lag monitor's TLS listener).

use std::collections::BTreeMap;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use axum::Router;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::{Notify, watch};
use tokio::task::JoinSet;
use tower::ServiceExt;

/// The limits of [`serve`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HttpLimits {
    /// How long a connection may take to send a request's head.
    pub header_read_timeout: Duration,
    /// Connections open at once.
    pub max_connections: usize,
    /// How long requests being answered at shutdown may take to finish.
    pub shutdown_grace: Duration,
}

/// Descriptors left to everything else (Kafka, etcd, stores, logs) when
/// [`HttpLimits::within_descriptors`] caps connections.
const DESCRIPTORS_KEPT: u64 = 256;

impl Default for HttpLimits {
    fn default() -> Self {
        HttpLimits {
            header_read_timeout: Duration::from_secs(10),
            max_connections: 1024,
            shutdown_grace: Duration::from_secs(10),
        }
    }
}

impl HttpLimits {
    /// These limits with at most half the descriptors the process may open
    /// (`RLIMIT_NOFILE`) beyond `DESCRIPTORS_KEPT` given to connections.
    pub fn within_descriptors(self) -> HttpLimits {
        let most = descriptor_limit().map_or(usize::MAX, |n| {
            usize::try_from(n.saturating_sub(DESCRIPTORS_KEPT) / 2).unwrap_or(usize::MAX).max(16)
        });
        HttpLimits { max_connections: self.max_connections.min(most), ..self }
    }
}

/// The process's soft limit on open descriptors.
#[allow(unsafe_code)] // getrlimit into a struct of ours
fn descriptor_limit() -> Option<u64> {
    let mut limit = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: a valid pointer to an rlimit, for the call.
    let ok = unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &raw mut limit) } == 0;
    (ok && limit.rlim_cur != libc::RLIM_INFINITY).then_some(limit.rlim_cur)
}

/// What [`serve`] takes connections from.
pub trait Accept: Send + 'static {
    /// A connection.
    type Io: AsyncRead + AsyncWrite + Unpin + Send + 'static;
    /// The next connection and its peer. An error is logged and the next
    /// accept tried after a short wait.
    fn accept(&mut self) -> impl Future<Output = std::io::Result<(Self::Io, SocketAddr)>> + Send;
}

impl Accept for tokio::net::TcpListener {
    type Io = tokio::net::TcpStream;

    async fn accept(&mut self) -> std::io::Result<(Self::Io, SocketAddr)> {
        let (tcp, peer) = tokio::net::TcpListener::accept(self).await?;
        // Small answers (a probe's) go out at once.
        let _ = tcp.set_nodelay(true);
        Ok((tcp, peer))
    }
}

/// Serves `app` on `listener` within `limits` until `shutdown` completes,
/// then lets requests being answered finish within the grace and closes
/// every connection.
pub async fn serve<L: Accept>(
    mut listener: L,
    app: Router,
    limits: HttpLimits,
    shutdown: impl Future<Output = ()>,
) -> std::io::Result<()> {
    let slots = Arc::new(Slots::new(limits.max_connections));
    let (stop, stopping) = watch::channel(false);
    let mut connections = JoinSet::new();
    tokio::pin!(shutdown);
    loop {
        while connections.try_join_next().is_some() {}
        let accepted = tokio::select! {
            () = &mut shutdown => break,
            accepted = listener.accept() => accepted,
        };
        let (io, peer) = match accepted {
            Ok(accepted) => accepted,
            Err(e) => {
                tracing::warn!(error = %e, "accepting a connection");
                tokio::time::sleep(Duration::from_millis(10)).await;
                continue;
            }
        };
        let Some(slot) = Slots::admit(&slots) else {
            tracing::debug!(%peer, "every connection is being answered: this one is closed");
            continue;
        };
        connections.spawn(connection(io, peer, app.clone(), slot, stopping.clone(), limits));
    }
    let _ = stop.send(true);
    let drained =
        tokio::time::timeout(limits.shutdown_grace, async { while connections.join_next().await.is_some() {} });
    if drained.await.is_err() {
        tracing::warn!(left = connections.len(), "connections still open after the shutdown grace: closed");
        connections.abort_all();
    }
    Ok(())
}

/// Serves one connection until it ends, is evicted, or shutdown asks it
/// to finish.
/// Each request carries the peer's address as axum's `ConnectInfo`.
async fn connection<I>(
    io: I,
    peer: SocketAddr,
    app: Router,
    slot: Slot,
    mut stopping: watch::Receiver<bool>,
    limits: HttpLimits,
) where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let state = Arc::clone(&slot.state);
    let service = hyper::service::service_fn(move |request: hyper::Request<Incoming>| {
        let busy = Busy::new(Arc::clone(&state));
        let app = app.clone();
        async move {
            let mut request = request.map(axum::body::Body::new);
            request.extensions_mut().insert(axum::extract::ConnectInfo(peer));
            let answer = app.oneshot(request).await?;
            // Busy until the body is sent (a large /metrics takes a while),
            // not only until the handler returns.
            Ok::<_, std::convert::Infallible>(answer.map(|body| axum::body::Body::new(BusyBody { body, _busy: busy })))
        }
    });
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder.timer(TokioTimer::new()).header_read_timeout(limits.header_read_timeout);
    let conn = builder.serve_connection(TokioIo::new(io), service);
    tokio::pin!(conn);
    let mut finishing = false;
    loop {
        tokio::select! {
            _ = conn.as_mut() => return,
            () = slot.state.evict.notified(), if !finishing => {
                tracing::debug!("closing the connection idle for longest, for a new one");
                return;
            }
            _ = stopping.wait_for(|stop| *stop), if !finishing => {
                // Nothing being answered (a client between requests, or
                // halfway through a request's head): closed at once.
                if slot.state.busy.load(Ordering::Acquire) == 0 {
                    return;
                }
                finishing = true;
                conn.as_mut().graceful_shutdown();
            }
        }
    }
}

/// The open connections, by when each was last busy.
struct Slots {
    most: usize,
    open: Mutex<BTreeMap<u64, Arc<SlotState>>>,
    next: AtomicU64,
    /// When the slots were made: the clock `idle_since` counts on.
    epoch: Instant,
}

/// One connection's place.
struct SlotState {
    /// Requests being answered on it.
    busy: AtomicU64,
    /// When it last became idle (ms since [`Slots::epoch`]).
    idle_since: AtomicU64,
    /// Rung to close it.
    evict: Notify,
    epoch: Instant,
    /// Evicted (it no longer counts against the cap).
    evicted: AtomicBool,
}

/// A connection's hold on its slot, given back when the connection ends.
struct Slot {
    id: u64,
    state: Arc<SlotState>,
    slots: Arc<Slots>,
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.slots.open.lock().unwrap_or_else(PoisonError::into_inner).remove(&self.id);
    }
}

impl Slots {
    fn new(most: usize) -> Slots {
        Slots { most: most.max(1), open: Mutex::new(BTreeMap::new()), next: AtomicU64::new(0), epoch: Instant::now() }
    }

    /// A slot for a new connection: when all are taken, the one idle for
    /// longest is evicted for it; `None` when every one is busy.
    fn admit(slots: &Arc<Slots>) -> Option<Slot> {
        let mut open = slots.open.lock().unwrap_or_else(PoisonError::into_inner);
        if open.len() >= slots.most {
            let (&id, _) = open
                .iter()
                .filter(|(_, s)| s.busy.load(Ordering::Acquire) == 0)
                .min_by_key(|(_, s)| s.idle_since.load(Ordering::Acquire))?;
            if let Some(evicted) = open.remove(&id) {
                evicted.evicted.store(true, Ordering::Release);
                evicted.evict.notify_one();
            }
        }
        let id = slots.next.fetch_add(1, Ordering::Relaxed);
        let state = Arc::new(SlotState {
            busy: AtomicU64::new(0),
            idle_since: AtomicU64::new(slots.epoch.elapsed().as_millis() as u64),
            evict: Notify::new(),
            epoch: slots.epoch,
            evicted: AtomicBool::new(false),
        });
        open.insert(id, Arc::clone(&state));
        Some(Slot { id, state, slots: Arc::clone(slots) })
    }
}

/// An answer's body, holding its connection busy until it is sent or dropped.
struct BusyBody {
    body: axum::body::Body,
    _busy: Busy,
}

impl axum::body::HttpBody for BusyBody {
    type Data = axum::body::Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<hyper::body::Frame<Self::Data>, Self::Error>>> {
        std::pin::Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        self.body.size_hint()
    }
}

/// A request being answered on a connection.
struct Busy(Arc<SlotState>);

impl Busy {
    fn new(state: Arc<SlotState>) -> Busy {
        state.busy.fetch_add(1, Ordering::AcqRel);
        Busy(state)
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        self.0.idle_since.store(self.0.epoch.elapsed().as_millis() as u64, Ordering::Release);
        self.0.busy.fetch_sub(1, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn past_the_cap_the_connection_idle_longest_makes_room() {
        let slots = Arc::new(Slots::new(2));
        let first = Slots::admit(&slots).expect("a slot");
        std::thread::sleep(Duration::from_millis(5));
        let second = Slots::admit(&slots).expect("a slot");
        let busy = Busy::new(Arc::clone(&first.state));
        // Full: the first is busy, so the second (idle) goes.
        let third = Slots::admit(&slots).expect("room made");
        assert!(second.state.evicted.load(Ordering::Acquire) && !first.state.evicted.load(Ordering::Acquire));
        drop(second);
        assert_eq!(slots.open.lock().expect("lock").len(), 2, "an evicted slot is not counted twice");
        // Both busy: no room.
        let _also_busy = Busy::new(Arc::clone(&third.state));
        assert!(Slots::admit(&slots).is_none());
        drop(busy);
        assert!(Slots::admit(&slots).is_some(), "idle again");
    }

    #[test]
    fn connections_are_capped_below_the_descriptor_limit() {
        let limits = HttpLimits { max_connections: usize::MAX, ..HttpLimits::default() }.within_descriptors();
        if let Some(n) = descriptor_limit() {
            assert!((limits.max_connections as u64) < n, "{limits:?} with {n} descriptors");
        }
    }
}
