//! Connection settings, plain data: the brokers, their [`Security`], extra
//! librdkafka properties and which client reads. A [`crate::Client`] is
//! made from them, and the clients from it.

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

/// A reader kshard does not have.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown reader {0:?}: kshard or librdkafka")]
pub struct UnknownReader(pub String);

impl std::str::FromStr for ReaderKind {
    type Err = UnknownReader;
    fn from_str(s: &str) -> std::result::Result<Self, UnknownReader> {
        match s {
            "kshard" => Ok(ReaderKind::Kshard),
            "librdkafka" => Ok(ReaderKind::Librdkafka),
            other => Err(UnknownReader(other.to_owned())),
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
        }
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
