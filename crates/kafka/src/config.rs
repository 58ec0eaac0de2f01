//! Connection settings shared by every client kshard creates: the brokers,
//! their [`Security`], extra librdkafka properties and which client reads.

use rdkafka::ClientConfig;
use rdkafka::config::FromClientConfigAndContext;
use rdkafka::config::RDKafkaLogLevel;
use std::sync::Arc;

use crate::error::{Error, Result};
use crate::librdkafka::context::KshardContext;
use crate::security::Security;

/// Where the brokers are and how to reach them. Its `Debug` output hides the
/// values of secret properties, so settings can be logged.
#[derive(Clone)]
pub struct ClientSettings {
    /// Comma-separated `host:port` bootstrap list.
    pub brokers: String,
    /// TLS and SASL, for every client: rendered as librdkafka properties for
    /// its clients, read as they are by kshard's own connections.
    pub security: Security,
    /// Extra librdkafka properties, applied after kshard's own and
    /// [`ClientSettings::security`]'s so that users can override them (a
    /// `ssl.*` or `sasl.*` one kshard's connections do not know makes
    /// librdkafka read instead).
    pub properties: Vec<(String, String)>,
    /// Which client reads partitions ([`crate::PartitionReader`]).
    pub reader: ReaderKind,
    /// Shared by every client made from these settings (and their clones).
    pub(crate) context: KshardContext,
}

/// Which client reads partitions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ReaderKind {
    /// kshard's own Fetch requests (one connection per broker for every
    /// partition the process reads); librdkafka where the settings ask for
    /// what only it does (GSSAPI, OAUTHBEARER, keystores…).
    #[default]
    Kshard,
    /// librdkafka's consumer, one per reader.
    Librdkafka,
}

impl std::str::FromStr for ReaderKind {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s {
            "kshard" => Ok(ReaderKind::Kshard),
            "librdkafka" => Ok(ReaderKind::Librdkafka),
            other => Err(format!("unknown reader {other:?}: kshard or librdkafka")),
        }
    }
}

impl ClientSettings {
    /// Settings for `brokers` with no extra properties.
    pub fn new(brokers: impl Into<String>) -> Self {
        ClientSettings {
            brokers: brokers.into(),
            security: Security::default(),
            properties: Vec::new(),
            reader: ReaderKind::default(),
            context: KshardContext::default(),
        }
    }

    /// The latest TLS or authentication failure any client made from these
    /// settings met, in words, if any. librdkafka retries such connections
    /// forever, and the calls they break fail only with a timeout: this is the
    /// reason to tell the user.
    pub fn access_problem(&self) -> Option<String> {
        self.context.access_problem.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone()
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
        *self.context.access_problem.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = None;
    }

    /// What every client made from these settings (and their clones) has
    /// sent to brokers and received: kshard's own connections, and
    /// librdkafka's producers and consumers (not its admin clients, which
    /// Whether partitions are read with kshard's own client: asked for
    /// (`reader: kshard`, the default) and able to honour the security
    /// settings (else librdkafka reads them). Its readers read past open
    /// transactions and reach the high watermark at rest.
    pub fn reads_with_own_client(&self) -> bool {
        self.reader == ReaderKind::Kshard
            && matches!(crate::wire::broker_link::LinkSecurity::from_settings(self), Ok(Some(_)))
    }

    /// are not polled for their statistics).
    pub fn traffic(&self) -> Arc<crate::Traffic> {
        Arc::clone(&self.context.traffic)
    }

    /// [`ClientSettings::create`] for a client that is polled all its life
    /// (producers, consumers): it reports its traffic every 10 s. A client
    /// nobody polls must not: its reports would pile up in its queue.
    pub(crate) fn create_counted<T>(&self, client: &'static str, properties: &[(&str, &str)]) -> Result<T>
    where
        T: FromClientConfigAndContext<KshardContext>,
    {
        let mut counted = vec![("statistics.interval.ms", "10000")];
        counted.extend_from_slice(properties);
        self.create(client, &counted)
    }

    /// Creates a client (`client` names it in errors) with kshard's properties
    /// for that kind of client, then the security's, then the user's, which win.
    pub(crate) fn create<T>(&self, client: &'static str, properties: &[(&str, &str)]) -> Result<T>
    where
        T: FromClientConfigAndContext<KshardContext>,
    {
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
        config.set("bootstrap.servers", &self.brokers).set("client.id", "kshard");
        for (k, v) in properties {
            config.set(*k, *v);
        }
        for (k, v) in self.security.properties() {
            config.set(k, v);
        }
        for (k, v) in &self.properties {
            config.set(k, v);
        }
        config.create_with_context(self.context.clone()).map_err(|source| Error::Client { client, source })
    }
}

impl std::fmt::Debug for ClientSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let properties: Vec<(&str, &str)> = self
            .properties
            .iter()
            .map(|(k, v)| (k.as_str(), if is_secret(k) { "<redacted>" } else { v.as_str() }))
            .collect();
        f.debug_struct("ClientSettings")
            .field("brokers", &self.brokers)
            .field("security", &self.security)
            .field("properties", &properties)
            .field("reader", &self.reader)
            .finish()
    }
}

/// librdkafka properties whose values are secrets.
fn is_secret(property: &str) -> bool {
    property.contains("password") || property.contains("secret") || property.ends_with(".key.pem")
}

#[cfg(test)]
mod tests {
    use super::ClientSettings;

    #[test]
    fn debug_output_hides_secrets() {
        let mut s = ClientSettings::new("b:9092");
        s.properties.push(("sasl.password".into(), "hunter2".into()));
        s.properties.push(("sasl.username".into(), "alice".into()));
        s.security.sasl = Some(crate::Sasl {
            mechanism: crate::Mechanism::Plain,
            username: "bob".into(),
            password: "swordfish".into(),
        });
        let shown = format!("{s:?}");
        assert!(!shown.contains("hunter2") && shown.contains("alice"), "{shown}");
        assert!(!shown.contains("swordfish") && shown.contains("bob"), "{shown}");
    }
}
