//! Connection settings shared by every client kshard creates.

use rdkafka::ClientConfig;

/// Where the brokers are and how to reach them.
#[derive(Debug, Clone)]
pub struct ClientSettings {
    /// Comma-separated `host:port` bootstrap list.
    pub brokers: String,
    /// Extra librdkafka properties (`security.protocol`, `sasl.*`, `ssl.*`, …),
    /// applied after kshard's own so that users can override them.
    pub properties: Vec<(String, String)>,
}

impl ClientSettings {
    /// Settings for `brokers` with no extra properties.
    pub fn new(brokers: impl Into<String>) -> Self {
        ClientSettings { brokers: brokers.into(), properties: Vec::new() }
    }

    pub(crate) fn client_config(&self) -> ClientConfig {
        let mut config = ClientConfig::new();
        config.set("bootstrap.servers", &self.brokers).set("client.id", "kshard");
        config
    }

    pub(crate) fn apply_overrides(&self, config: &mut ClientConfig) {
        for (k, v) in &self.properties {
            config.set(k, v);
        }
    }
}
