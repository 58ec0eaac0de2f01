//! [`Client`]: the handle every Kafka client of one cluster is made from. It
//! owns what those clients share: the settings they were made with (plain
//! data, [`ClientSettings`]), the connections of kshard's own reader (one
//! fetcher per isolation, so one connection per broker for every reader),
//! the traffic they counted, and the latest access problem they met.
//!
//! Clones share all of it; a handle made again from the same settings
//! shares nothing, and so opens connections of its own.

use std::sync::{Arc, Mutex, PoisonError, Weak};

use rdkafka::ClientConfig;
use rdkafka::config::{FromClientConfigAndContext, RDKafkaLogLevel};

use crate::config::{ClientSettings, ReaderKind};
use crate::error::{Error, Result};
use crate::librdkafka::context::KshardContext;
use crate::read_record::Isolation;
use crate::wire::broker_link::LinkSecurity;
use crate::wire::fetcher::Fetcher;

/// A handle on one cluster's clients (see the module's doc). Cheap to clone.
#[derive(Clone)]
pub struct Client {
    inner: Arc<Inner>,
}

struct Inner {
    settings: ClientSettings,
    /// Given to every librdkafka client made from the handle: where their
    /// logs, statistics and access problems go.
    context: KshardContext,
    /// kshard's reader's fetchers: committed records only, and every record.
    fetchers: Mutex<[Weak<Fetcher>; 2]>,
}

impl From<ClientSettings> for Client {
    fn from(settings: ClientSettings) -> Self {
        Client::new(settings)
    }
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client").field("settings", &self.inner.settings).finish_non_exhaustive()
    }
}

impl Client {
    /// A handle on the cluster `settings` describe. Nothing connects yet.
    pub fn new(settings: ClientSettings) -> Self {
        let inner = Inner { settings, context: KshardContext::default(), fetchers: Mutex::default() };
        Client { inner: Arc::new(inner) }
    }

    /// A handle on `brokers` with default settings.
    pub fn to_brokers(brokers: impl Into<String>) -> Self {
        Client::new(ClientSettings::new(brokers))
    }

    /// The settings the handle's clients are made with.
    pub fn settings(&self) -> &ClientSettings {
        &self.inner.settings
    }

    /// The bootstrap brokers.
    pub fn brokers(&self) -> &str {
        &self.inner.settings.brokers
    }

    /// The latest TLS or authentication failure any client of the handle
    /// met, in words, if any. librdkafka retries such connections forever,
    /// and the calls they break fail only with a timeout: this is the reason
    /// to tell the user.
    pub fn access_problem(&self) -> Option<String> {
        self.inner.context.access_problem.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }

    /// `error`, with the access problem behind it when there is one (a call
    /// that failed by timing out, say, because TLS or authentication failed).
    pub fn with_access_problem(&self, error: impl std::fmt::Display) -> String {
        match self.access_problem() {
            Some(problem) => format!("{error} ({problem})"),
            None => error.to_string(),
        }
    }

    /// Forgets the latest access problem (after a call succeeded).
    pub fn clear_access_problem(&self) {
        *self.inner.context.access_problem.lock().unwrap_or_else(PoisonError::into_inner) = None;
    }

    /// What every client of the handle has sent to brokers and received:
    /// kshard's own connections, and librdkafka's producers and consumers
    /// (not its admin clients, which are not polled for their statistics).
    pub fn traffic(&self) -> Arc<crate::Traffic> {
        Arc::clone(&self.inner.context.traffic)
    }

    /// Whether partitions are read with kshard's own client: asked for
    /// (`reader: kshard`, the default) and able to honour the security
    /// settings (else librdkafka reads them). Its readers read past open
    /// transactions and reach the high watermark at rest.
    pub fn reads_with_own_client(&self) -> bool {
        self.inner.settings.reader == ReaderKind::Kshard && matches!(self.link_security(), Ok(Some(_)))
    }

    /// The records a reader of the handle hands out when asked for
    /// `isolation`: as asked with kshard's reader, committed ones when
    /// librdkafka reads (`reader: librdkafka`, or settings only it honours).
    pub fn isolation_for(&self, isolation: Isolation) -> Isolation {
        if self.reads_with_own_client() { isolation } else { Isolation::Committed }
    }

    /// How kshard's own connections reach the brokers, or `None` when the
    /// settings ask for what only librdkafka does (see
    /// [`crate::wire::broker_link`]).
    pub(crate) fn link_security(&self) -> Result<Option<LinkSecurity>> {
        LinkSecurity::from_settings(&self.inner.settings, self.traffic())
    }

    /// The fetcher every reader of the handle reading `isolation` shares,
    /// started on first use and ended with its last reader.
    pub(crate) fn fetcher(&self, security: LinkSecurity, isolation: Isolation) -> Result<Arc<Fetcher>> {
        let slot = usize::from(isolation == Isolation::Uncommitted);
        let mut fetchers = self.inner.fetchers.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(fetcher) = fetchers[slot].upgrade() {
            return Ok(fetcher);
        }
        let fetcher = Fetcher::new(&self.inner.settings.brokers, security, isolation == Isolation::Committed)?;
        fetchers[slot] = Arc::downgrade(&fetcher);
        Ok(fetcher)
    }

    /// [`Client::create`] for a librdkafka client that is polled all its
    /// life (producers, consumers): it reports its traffic every 10 s. A
    /// client nobody polls must not: its reports would pile up in its queue.
    pub(crate) fn create_counted<T>(&self, client: &'static str, properties: &[(&str, &str)]) -> Result<T>
    where
        T: FromClientConfigAndContext<KshardContext>,
    {
        let mut counted = vec![("statistics.interval.ms", "10000")];
        counted.extend_from_slice(properties);
        self.create(client, &counted)
    }

    /// Creates a librdkafka client (`client` names it in errors) with
    /// kshard's properties for that kind of client, then the security's,
    /// then the user's, which win.
    pub(crate) fn create<T>(&self, client: &'static str, properties: &[(&str, &str)]) -> Result<T>
    where
        T: FromClientConfigAndContext<KshardContext>,
    {
        let settings = &self.inner.settings;
        let mut config = ClientConfig::new();
        // librdkafka logs as much as the `log` crate's level allows, which is
        // nothing in a process without a logger; failed TLS handshakes and
        // authentication are only ever reported in warnings, and kshard needs
        // them to say why it cannot connect.
        if matches!(
            config.log_level,
            RDKafkaLogLevel::Emerg | RDKafkaLogLevel::Alert | RDKafkaLogLevel::Critical | RDKafkaLogLevel::Error
        ) {
            config.set_log_level(RDKafkaLogLevel::Warning);
        }
        config.set("bootstrap.servers", &settings.brokers).set("client.id", "kshard");
        for (k, v) in properties {
            config.set(*k, *v);
        }
        for (k, v) in settings.security.properties() {
            config.set(k, v);
        }
        for (k, v) in &settings.properties {
            config.set(k, v);
        }
        config.create_with_context(self.inner.context.clone()).map_err(|source| Error::Client { client, source })
    }
}

#[cfg(test)]
mod tests {
    use super::Client;
    use crate::{ClientSettings, Isolation, ReaderKind};

    #[test]
    fn clones_share_what_the_clients_met_and_a_new_handle_does_not() {
        let client = Client::to_brokers("127.0.0.1:1");
        *client.inner.context.access_problem.lock().expect("not poisoned") = Some("TLS failed".into());
        assert_eq!(client.clone().access_problem().as_deref(), Some("TLS failed"));
        assert_eq!(client.with_access_problem("timed out"), "timed out (TLS failed)");
        assert_eq!(Client::new(client.settings().clone()).access_problem(), None);
        client.clone().clear_access_problem();
        assert_eq!(client.access_problem(), None);
    }

    #[test]
    fn a_librdkafka_reader_reads_committed_records_only() {
        let mut settings = ClientSettings::new("127.0.0.1:1");
        assert!(Client::new(settings.clone()).reads_with_own_client());
        assert_eq!(Client::new(settings.clone()).isolation_for(Isolation::Uncommitted), Isolation::Uncommitted);
        settings.reader = ReaderKind::Librdkafka;
        let client = Client::new(settings);
        assert!(!client.reads_with_own_client());
        assert_eq!(client.isolation_for(Isolation::Uncommitted), Isolation::Committed);
    }
}
