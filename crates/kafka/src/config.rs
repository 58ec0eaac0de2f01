//! Connection settings shared by every client kshard creates.

use rdkafka::ClientConfig;

/// Where the brokers are and how to reach them. Its `Debug` output hides the
/// values of secret properties, so settings can be logged.
#[derive(Clone)]
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

impl std::fmt::Debug for ClientSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let properties: Vec<(&str, &str)> = self
            .properties
            .iter()
            .map(|(k, v)| (k.as_str(), if is_secret(k) { "<redacted>" } else { v.as_str() }))
            .collect();
        f.debug_struct("ClientSettings").field("brokers", &self.brokers).field("properties", &properties).finish()
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
        let shown = format!("{s:?}");
        assert!(!shown.contains("hunter2") && shown.contains("alice"), "{shown}");
    }
}
