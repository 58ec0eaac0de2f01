//! What a long-running command (`serve`, a runtime member) runs on: its
//! async runtime, its HTTP listener, and the signal that stops it.

use anyhow::{Context, Result};
use tracing::info;

/// The async runtime a long-running command (`serve`, a runtime member) runs on.
pub(crate) fn async_runtime() -> Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("starting the async runtime")
}

/// Binds the HTTP listener, or fails naming the `listen` setting.
pub(crate) async fn bind(listen: std::net::SocketAddr) -> Result<tokio::net::TcpListener> {
    bind_setting("listen", listen).await
}

/// [`bind`] for the setting `setting`, which the error names.
pub(crate) async fn bind_setting(setting: &str, listen: std::net::SocketAddr) -> Result<tokio::net::TcpListener> {
    tokio::net::TcpListener::bind(listen).await.with_context(|| format!("invalid {setting}: cannot bind {listen}"))
}

/// Completes on SIGINT or SIGTERM.
pub(crate) async fn shutdown_signal() {
    let interrupt = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(s) => s,
            Err(_) => {
                let _ = interrupt.await;
                return;
            }
        };
        tokio::select! {
            _ = interrupt => info!("SIGINT: shutting down"),
            _ = term.recv() => info!("SIGTERM: shutting down"),
        }
    }
    #[cfg(not(unix))]
    {
        let _ = interrupt.await;
    }
}
