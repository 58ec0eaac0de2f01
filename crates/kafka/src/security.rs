//! [`Security`]: how every kshard client reaches the brokers — the protocol
//! (plaintext, TLS, SASL, SASL over TLS), the TLS files and checks, the SASL
//! mechanism and credentials — as typed values. The librdkafka clients get it
//! rendered as their properties ([`Security::properties`]); kshard's own
//! connections (`wire/broker_link.rs`) read the values themselves. Nothing
//! here opens a connection or reads a file.

use std::path::PathBuf;

/// `security.protocol`: whether TLS, SASL, both or neither.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Protocol {
    /// Neither.
    #[default]
    Plaintext,
    /// TLS.
    Ssl,
    /// SASL without TLS.
    SaslPlaintext,
    /// SASL over TLS.
    SaslSsl,
}

impl Protocol {
    /// The protocol with TLS or not, and SASL or not.
    pub fn new(tls: bool, sasl: bool) -> Self {
        match (tls, sasl) {
            (false, false) => Protocol::Plaintext,
            (true, false) => Protocol::Ssl,
            (false, true) => Protocol::SaslPlaintext,
            (true, true) => Protocol::SaslSsl,
        }
    }

    /// Whether connections use TLS.
    pub fn tls(self) -> bool {
        matches!(self, Protocol::Ssl | Protocol::SaslSsl)
    }

    /// Whether connections authenticate with SASL.
    pub fn sasl(self) -> bool {
        matches!(self, Protocol::SaslPlaintext | Protocol::SaslSsl)
    }

    /// librdkafka's name for it.
    pub fn as_str(self) -> &'static str {
        match self {
            Protocol::Plaintext => "plaintext",
            Protocol::Ssl => "ssl",
            Protocol::SaslPlaintext => "sasl_plaintext",
            Protocol::SaslSsl => "sasl_ssl",
        }
    }
}

impl std::str::FromStr for Protocol {
    type Err = String;
    /// librdkafka's names, in any case.
    fn from_str(s: &str) -> Result<Self, String> {
        match s.to_ascii_lowercase().as_str() {
            "plaintext" => Ok(Protocol::Plaintext),
            "ssl" => Ok(Protocol::Ssl),
            "sasl_plaintext" => Ok(Protocol::SaslPlaintext),
            "sasl_ssl" => Ok(Protocol::SaslSsl),
            _ => Err(format!("unknown security.protocol {s:?}")),
        }
    }
}

/// The SASL mechanisms both kinds of client speak.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Mechanism {
    /// PLAIN: the password as it is (use it over TLS).
    Plain,
    /// SCRAM-SHA-256.
    ScramSha256,
    /// SCRAM-SHA-512.
    ScramSha512,
}

impl Mechanism {
    /// Kafka's name for it.
    pub fn as_str(self) -> &'static str {
        match self {
            Mechanism::Plain => "PLAIN",
            Mechanism::ScramSha256 => "SCRAM-SHA-256",
            Mechanism::ScramSha512 => "SCRAM-SHA-512",
        }
    }
}

impl std::str::FromStr for Mechanism {
    type Err = String;
    /// Kafka's names, in any case.
    fn from_str(s: &str) -> Result<Self, String> {
        match s.to_ascii_uppercase().as_str() {
            "PLAIN" => Ok(Mechanism::Plain),
            "SCRAM-SHA-256" => Ok(Mechanism::ScramSha256),
            "SCRAM-SHA-512" => Ok(Mechanism::ScramSha512),
            _ => Err(format!("{s:?} (PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512)")),
        }
    }
}

/// SASL's mechanism and credentials. `Debug` hides the password.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct Sasl {
    /// How to authenticate.
    pub mechanism: Mechanism,
    /// The user name.
    pub username: String,
    /// The password.
    pub password: String,
}

impl std::fmt::Debug for Sasl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sasl")
            .field("mechanism", &self.mechanism)
            .field("username", &self.username)
            .field("password", &"<redacted>")
            .finish()
    }
}

/// TLS's trust, identity and checks, as librdkafka's `ssl.*` properties name
/// them. `Debug` hides the key and its password.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct Tls {
    /// CA certificates (PEM) to verify the brokers with: a file, or a
    /// directory of them (`ssl.ca.location`). With neither this nor
    /// [`Tls::ca_pem`], the system's.
    pub ca: Option<PathBuf>,
    /// CA certificates as PEM text (`ssl.ca.pem`).
    pub ca_pem: Option<String>,
    /// The client's certificate chain file (PEM), for brokers that ask for
    /// one (`ssl.certificate.location`).
    pub certificate: Option<PathBuf>,
    /// The client's certificate as PEM text (`ssl.certificate.pem`).
    pub certificate_pem: Option<String>,
    /// The client's private key file (PEM; `ssl.key.location`).
    pub key: Option<PathBuf>,
    /// The client's private key as PEM text (`ssl.key.pem`).
    pub key_pem: Option<String>,
    /// The key's password (`ssl.key.password`).
    pub key_password: Option<String>,
    /// Verify the brokers' certificates (librdkafka's default; false is
    /// `enable.ssl.certificate.verification=false`, which only librdkafka
    /// honours).
    pub verify_certificate: bool,
    /// Verify that a broker's certificate names it (librdkafka's
    /// `ssl.endpoint.identification.algorithm=https`, its default).
    pub verify_hostname: bool,
}

impl Default for Tls {
    fn default() -> Self {
        Tls {
            ca: None,
            ca_pem: None,
            certificate: None,
            certificate_pem: None,
            key: None,
            key_pem: None,
            key_password: None,
            verify_certificate: true,
            verify_hostname: true,
        }
    }
}

impl std::fmt::Debug for Tls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let hidden = |secret: &Option<String>| secret.as_ref().map(|_| "<redacted>");
        f.debug_struct("Tls")
            .field("ca", &self.ca)
            .field("ca_pem", &self.ca_pem.is_some())
            .field("certificate", &self.certificate)
            .field("certificate_pem", &self.certificate_pem.is_some())
            .field("key", &self.key)
            .field("key_pem", &hidden(&self.key_pem))
            .field("key_password", &hidden(&self.key_password))
            .field("verify_certificate", &self.verify_certificate)
            .field("verify_hostname", &self.verify_hostname)
            .finish()
    }
}

/// How to reach the brokers. [`Security::default`] is plaintext.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct Security {
    /// TLS, SASL, both or neither.
    pub protocol: Protocol,
    /// Used when the protocol has TLS.
    pub tls: Tls,
    /// Used when the protocol has SASL; `None` there leaves the mechanism
    /// to librdkafka (GSSAPI), which only it speaks.
    pub sasl: Option<Sasl>,
}

/// A `Security` only librdkafka's clients can honour (GSSAPI, keystores,
/// verification off…): kshard's own connections decline it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct LibrdkafkaOnly;

impl Security {
    /// librdkafka's properties for this: `security.protocol`, then the
    /// `sasl.*` and `ssl.*` ones its protocol uses.
    pub fn properties(&self) -> Vec<(&'static str, String)> {
        let mut properties = vec![("security.protocol", self.protocol.as_str().to_owned())];
        if self.protocol.sasl()
            && let Some(sasl) = &self.sasl
        {
            properties.push(("sasl.mechanism", sasl.mechanism.as_str().to_owned()));
            properties.push(("sasl.username", sasl.username.clone()));
            properties.push(("sasl.password", sasl.password.clone()));
        }
        if self.protocol.tls() {
            let tls = &self.tls;
            let path = |p: &Option<PathBuf>| p.as_ref().map(|p| p.display().to_string());
            for (property, value) in [
                ("ssl.ca.location", path(&tls.ca)),
                ("ssl.ca.pem", tls.ca_pem.clone()),
                ("ssl.certificate.location", path(&tls.certificate)),
                ("ssl.certificate.pem", tls.certificate_pem.clone()),
                ("ssl.key.location", path(&tls.key)),
                ("ssl.key.pem", tls.key_pem.clone()),
                ("ssl.key.password", tls.key_password.clone()),
            ] {
                if let Some(value) = value {
                    properties.push((property, value));
                }
            }
            if !tls.verify_certificate {
                properties.push(("enable.ssl.certificate.verification", "false".to_owned()));
            }
            if !tls.verify_hostname {
                properties.push(("ssl.endpoint.identification.algorithm", "none".to_owned()));
            }
        }
        properties
    }

    /// This with librdkafka `properties` applied over it in order (the last
    /// value of each wins, as in librdkafka), for kshard's own connections;
    /// [`LibrdkafkaOnly`] when the result asks for what only librdkafka does:
    /// a mechanism other than PLAIN and SCRAM, a `ssl.*` or `sasl.*`
    /// property not named in [`Tls`] or [`Sasl`], the system's CA search
    /// (`ssl.ca.location=probe`), or no certificate verification.
    pub(crate) fn with_properties(&self, properties: &[(String, String)]) -> Result<Security, LibrdkafkaOnly> {
        let mut security = self.clone();
        if properties.is_empty() {
            return security.for_kshard();
        }
        let sasl = self.sasl.as_ref();
        let mut mechanism = sasl.map(|s| s.mechanism.as_str().to_owned());
        let mut username = sasl.map(|s| s.username.clone());
        let mut password = sasl.map(|s| s.password.clone());
        let tls = &mut security.tls;
        for (key, value) in properties {
            let text = Some(value.clone());
            let path = Some(PathBuf::from(value));
            match key.as_str() {
                "security.protocol" => security.protocol = value.parse().map_err(|_| LibrdkafkaOnly)?,
                "sasl.mechanism" | "sasl.mechanisms" => mechanism = text,
                "sasl.username" => username = text,
                "sasl.password" => password = text,
                "ssl.ca.location" => tls.ca = path,
                "ssl.ca.pem" => tls.ca_pem = text,
                "ssl.certificate.location" => tls.certificate = path,
                "ssl.certificate.pem" => tls.certificate_pem = text,
                "ssl.key.location" => tls.key = path,
                "ssl.key.pem" => tls.key_pem = text,
                "ssl.key.password" => tls.key_password = text,
                "ssl.endpoint.identification.algorithm" => tls.verify_hostname = !value.eq_ignore_ascii_case("none"),
                "enable.ssl.certificate.verification" => tls.verify_certificate &= value == "true",
                k if k.starts_with("ssl.") || k.starts_with("sasl.") || k.starts_with("ssl_") => {
                    return Err(LibrdkafkaOnly);
                }
                _ => {}
            }
        }
        security.sasl = match mechanism {
            // librdkafka's default mechanism is GSSAPI.
            None => None,
            Some(mechanism) => match mechanism.parse() {
                Ok(mechanism) => Some(Sasl {
                    mechanism,
                    username: username.unwrap_or_default(),
                    password: password.unwrap_or_default(),
                }),
                Err(_) if security.protocol.sasl() => return Err(LibrdkafkaOnly),
                Err(_) => None,
            },
        };
        security.for_kshard()
    }

    /// This, when kshard's own connections can honour it.
    fn for_kshard(self) -> Result<Security, LibrdkafkaOnly> {
        let probe = self.tls.ca.as_ref().is_some_and(|ca| ca.as_os_str().eq_ignore_ascii_case("probe"));
        let no_mechanism = self.protocol.sasl() && self.sasl.is_none();
        if probe || no_mechanism || !self.tls.verify_certificate {
            return Err(LibrdkafkaOnly);
        }
        Ok(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kshard(properties: &[(&str, &str)]) -> Result<Security, LibrdkafkaOnly> {
        let properties: Vec<(String, String)> =
            properties.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
        Security::default().with_properties(&properties)
    }

    #[test]
    fn renders_librdkafka_properties() {
        let security = Security {
            protocol: Protocol::SaslSsl,
            tls: Tls { ca: Some("/ca.pem".into()), verify_certificate: false, ..Tls::default() },
            sasl: Some(Sasl { mechanism: Mechanism::ScramSha512, username: "u".into(), password: "p".into() }),
        };
        let rendered = security.properties();
        let get = |k: &str| rendered.iter().find(|(p, _)| *p == k).map(|(_, v)| v.as_str());
        assert_eq!(get("security.protocol"), Some("sasl_ssl"));
        assert_eq!(get("sasl.mechanism"), Some("SCRAM-SHA-512"));
        assert_eq!(get("sasl.password"), Some("p"));
        assert_eq!(get("ssl.ca.location"), Some("/ca.pem"));
        assert_eq!(get("enable.ssl.certificate.verification"), Some("false"));
        assert_eq!(get("ssl.endpoint.identification.algorithm"), None);
        assert!(!format!("{security:?}").contains("\"p\""), "{security:?}");
    }

    #[test]
    fn honours_what_kshard_can_and_declines_the_rest() {
        let plain = kshard(&[]).expect("plaintext");
        assert!(!plain.protocol.tls() && plain.sasl.is_none());
        let scram = kshard(&[
            ("security.protocol", "SASL_SSL"),
            ("sasl.mechanism", "SCRAM-SHA-512"),
            ("sasl.username", "u"),
            ("sasl.password", "p"),
        ])
        .expect("SCRAM over TLS");
        assert!(scram.protocol.tls() && scram.tls.verify_hostname);
        assert_eq!(scram.sasl.as_ref().map(|s| s.mechanism), Some(Mechanism::ScramSha512));
        let plain_sasl =
            kshard(&[("security.protocol", "sasl_plaintext"), ("sasl.mechanisms", "PLAIN")]).expect("PLAIN");
        assert_eq!(plain_sasl.sasl.map(|s| s.mechanism), Some(Mechanism::Plain));
        let no_names = kshard(&[("security.protocol", "ssl"), ("ssl.endpoint.identification.algorithm", "none")]);
        assert!(!no_names.expect("TLS").tls.verify_hostname);
        for declined in [
            &[("security.protocol", "sasl_ssl"), ("sasl.mechanism", "GSSAPI")][..],
            &[("security.protocol", "sasl_ssl"), ("sasl.mechanism", "OAUTHBEARER")][..],
            &[("security.protocol", "sasl_ssl")][..],
            &[("security.protocol", "ssl"), ("ssl.keystore.location", "k.p12")][..],
            &[("security.protocol", "ssl"), ("enable.ssl.certificate.verification", "false")][..],
            &[("security.protocol", "ssl"), ("ssl.cipher.suites", "ECDHE")][..],
            &[("security.protocol", "ssl"), ("ssl.ca.location", "probe")][..],
        ] {
            assert_eq!(kshard(declined), Err(LibrdkafkaOnly), "{declined:?}");
        }
    }

    #[test]
    fn properties_apply_over_the_typed_settings() {
        let typed = Security {
            protocol: Protocol::SaslPlaintext,
            tls: Tls::default(),
            sasl: Some(Sasl { mechanism: Mechanism::Plain, username: "u".into(), password: "p".into() }),
        };
        assert_eq!(typed.with_properties(&[]), Ok(typed.clone()));
        let gssapi = [("sasl.mechanism".to_owned(), "GSSAPI".to_owned())];
        assert_eq!(typed.with_properties(&gssapi), Err(LibrdkafkaOnly));
        let tls = [("security.protocol".to_owned(), "SASL_SSL".to_owned())];
        let over = typed.with_properties(&tls).expect("SASL PLAIN over TLS");
        assert_eq!((over.protocol, over.sasl), (Protocol::SaslSsl, typed.sasl));
    }
}
