//! `kshard serve`: the lag monitor.

use anyhow::{Context, Result};
use kshard_lag::service::{Listeners, ProcessOptions, run_listening};
use tracing::info;

use crate::serve_config::{LogFormat, ServeArgs, ServeConfig};

/// Loads the configuration, sets up logging, and runs until SIGINT or SIGTERM.
pub(crate) fn serve(args: &ServeArgs) -> Result<()> {
    let config = ServeConfig::load(args)?;
    let log_counts = init_logging(config.log_format);
    let process = ProcessOptions { log_counts, ..config.process };
    info!(listen = %config.listen, namespace = %process.namespace, profile = process.profile.name(), clusters = config.clusters.len(), "starting kshard serve");
    for c in &config.clusters {
        info!(cluster = c.name.as_deref().unwrap_or("-"), brokers = %c.kafka.brokers, offsets_topic = %c.offsets_topic, scrape_mode = ?c.mode, "watching");
        if let Some(dir) = &c.data_dir {
            std::fs::create_dir_all(dir)
                .with_context(|| format!("invalid data_dir: cannot create {}", dir.display()))?;
        }
    }
    let mut clusters = config.clusters;
    let runtime = crate::process_runtime::async_runtime()?;
    runtime.block_on(async {
        let listener = crate::process_runtime::bind(config.listen).await?;
        let addr = listener.local_addr()?;
        for c in &mut clusters {
            if let Some(member) = &mut c.cluster {
                // Other members ask this one's replicas under its cluster's path.
                let path = c.name.as_ref().map(|n| format!("/clusters/{n}")).unwrap_or_default();
                member.endpoint = endpoint(addr).map(|e| format!("{e}{path}"));
            }
        }
        let keda = match config.keda_listen {
            Some(a) => Some(crate::process_runtime::bind_setting("keda.listen", a).await?),
            None => None,
        };
        let listeners = Listeners { http: listener, keda };
        run_listening(process, clusters, listeners, crate::process_runtime::shutdown_signal())
            .await
            .context("kshard serve")
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

/// Logs to stderr as `format` says, at `KSHARD_LOG`'s levels; each message
/// written is counted by level in what it returns (`None` when logging was
/// set up already: a second initialisation, in tests, keeps the first).
pub(crate) fn init_logging(format: LogFormat) -> Option<std::sync::Arc<kshard_lag::LogCounts>> {
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    let filter = tracing_subscriber::EnvFilter::try_from_env("KSHARD_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    // Colours only for a terminal: logs that go to files stay plain text.
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).with_ansi(ansi);
    let counts = std::sync::Arc::new(kshard_lag::LogCounts::default());
    let counter = LogCounter(std::sync::Arc::clone(&counts));
    let started = match format {
        LogFormat::Text => builder.finish().with(counter).try_init(),
        LogFormat::Json => builder.json().finish().with(counter).try_init(),
    };
    started.is_ok().then_some(counts)
}

/// Counts each event the filter let through, by level.
struct LogCounter(std::sync::Arc<kshard_lag::LogCounts>);

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for LogCounter {
    fn on_event(&self, event: &tracing::Event<'_>, _: tracing_subscriber::layer::Context<'_, S>) {
        self.0.count(event.metadata().level());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tracing_subscriber::layer::SubscriberExt;

    #[test]
    fn messages_the_filter_lets_through_are_counted_by_level() {
        let counts = std::sync::Arc::new(kshard_lag::LogCounts::default());
        let subscriber = tracing_subscriber::registry()
            .with(tracing_subscriber::EnvFilter::new("info"))
            .with(LogCounter(std::sync::Arc::clone(&counts)));
        tracing::subscriber::with_default(subscriber, || {
            tracing::info!("one");
            tracing::info!("two");
            tracing::warn!("three");
            tracing::debug!("filtered out");
        });
        let text = counts.render("kshard");
        assert!(text.contains("kshard_log_messages_total{level=\"info\"} 2\n"), "{text}");
        assert!(text.contains("kshard_log_messages_total{level=\"warn\"} 1\n"), "{text}");
        assert!(text.contains("kshard_log_messages_total{level=\"debug\"} 0\n"), "{text}");
    }
}
