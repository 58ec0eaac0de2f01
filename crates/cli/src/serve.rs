//! `kshard serve`: the lag monitor.

use anyhow::{Context, Result};
use kshard_lag::service::{ServeOptions, run_many};
use tracing::info;

use crate::serve_config::{LogFormat, ServeArgs, ServeConfig};

/// Loads the configuration, sets up logging, and runs until SIGINT or SIGTERM.
pub(crate) fn serve(args: &ServeArgs) -> Result<()> {
    let config = ServeConfig::load(args)?;
    init_logging(config.log_format);
    info!(listen = %config.listen, namespace = %config.namespace, profile = config.profile.name(), clusters = config.clusters.len(), "starting kshard serve");
    for c in &config.clusters {
        info!(cluster = c.name.as_deref().unwrap_or("-"), brokers = %c.kafka.brokers, offsets_topic = %c.offsets_topic, scrape_mode = ?c.scrape_mode, "watching");
        if let Some(dir) = &c.data_dir {
            std::fs::create_dir_all(dir)
                .with_context(|| format!("invalid data_dir: cannot create {}", dir.display()))?;
        }
    }
    let runtime = crate::serve::async_runtime()?;
    runtime.block_on(async {
        let listener = crate::serve::bind(config.listen).await?;
        let addr = listener.local_addr()?;
        let clusters = config
            .clusters
            .iter()
            .map(|c| {
                let mut cluster = c.cluster.clone();
                if let Some(member) = &mut cluster {
                    // Other members ask this one's replicas under its cluster's path.
                    let path = c.name.as_ref().map(|n| format!("/clusters/{n}")).unwrap_or_default();
                    member.endpoint = endpoint(addr).map(|e| format!("{e}{path}"));
                }
                ServeOptions {
                    name: c.name.clone(),
                    offsets_topic: c.offsets_topic.clone(),
                    share_groups: c.share_groups,
                    mode: c.scrape_mode,
                    namespace: config.namespace.clone(),
                    profile: config.profile,
                    cluster_label: config.cluster_label.clone(),
                    watermark_interval: c.watermark_interval,
                    monitor: c.monitor.clone(),
                    data_dir: c.data_dir.clone(),
                    cluster,
                    recovery_log_topic: c.recovery_log_topic.clone(),
                    cluster_info: c.cluster_info.clone(),
                    end_to_end: c.end_to_end.clone(),
                    web_config: config.web_config.clone(),
                    otlp: config.otlp.clone(),
                    ..ServeOptions::new(c.kafka.clone())
                }
            })
            .collect();
        run_many(clusters, listener, shutdown_signal()).await.context("kshard serve")
    })
}

/// Where `kshard shards list` asks a member listening on `addr` how far its
/// replicas are behind: that address, or the host's name when it listens on all.
fn endpoint(addr: std::net::SocketAddr) -> Option<String> {
    if !addr.ip().is_unspecified() {
        return Some(addr.to_string());
    }
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").ok()?;
    let host = host.trim();
    (!host.is_empty()).then(|| format!("{host}:{}", addr.port()))
}

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
    tokio::net::TcpListener::bind(listen).await.with_context(|| format!("invalid listen: cannot bind {listen}"))
}

pub(crate) fn init_logging(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_env("KSHARD_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    // Colours only for a terminal: logs that go to files stay plain text.
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).with_ansi(ansi);
    // A second initialisation (tests) keeps the first subscriber.
    let _ = match format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder.json().try_init(),
    };
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
