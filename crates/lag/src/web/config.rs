//! The web configuration file of Prometheus's exporter-toolkit
//! (`--web-config-file`): TLS for the HTTP endpoint, basic-auth users with
//! bcrypt hashes, response headers and a rate limit, in the toolkit's YAML
//! format, so a file written for node_exporter or kminion's peers works
//! unchanged. Parsing is pure: the text in, a checked [`WebConfig`] or an
//! error naming the field out. Reading the files it names (certificates,
//! keys, CAs) is `web::tls`'s.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;

/// Why a web configuration cannot be used; `field` is its path in the file
/// (`tls_server_config.client_auth_type`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid web configuration: {field}: {why}")]
pub struct WebConfigError {
    /// The setting at fault, as written in the file.
    pub field: String,
    /// What is wrong with it.
    pub why: String,
}

fn invalid(field: impl Into<String>, why: impl Into<String>) -> WebConfigError {
    WebConfigError { field: field.into(), why: why.into() }
}

/// A checked web configuration.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WebConfig {
    /// Serve HTTPS with these settings; `None`: plain HTTP.
    pub tls: Option<TlsServer>,
    /// Headers added to every response (name, value).
    pub headers: Vec<(&'static str, String)>,
    /// Users and their bcrypt hashes; empty: no authentication.
    pub users: BTreeMap<String, String>,
    /// At most `burst` requests at once, one more every `interval`.
    pub rate_limit: Option<RateLimit>,
}

/// Where PEM text comes from: a file, or the configuration itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Pem {
    /// `…_file`: read at each handshake's configuration (so a renewed
    /// certificate is picked up).
    File(PathBuf),
    /// Inline PEM.
    Inline(String),
}

/// `tls_server_config`, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsServer {
    /// The server's certificate chain.
    pub cert: Pem,
    /// Its private key.
    pub key: Pem,
    /// Whether and how client certificates are asked for.
    pub client_auth: ClientAuth,
    /// The CAs that sign acceptable client certificates.
    pub client_ca: Option<Pem>,
    /// A client certificate must carry one of these subject alternative
    /// names (DNS, IP, e-mail or URI); empty: any.
    pub client_allowed_sans: Vec<String>,
    /// The oldest protocol accepted.
    pub min_version: TlsVersion,
    /// The newest protocol accepted.
    pub max_version: TlsVersion,
    /// OpenSSL's names of the TLS 1.2 cipher suites allowed, in order;
    /// empty: OpenSSL's defaults.
    pub cipher_suites: Vec<&'static str>,
    /// Choose the cipher by the server's order rather than the client's.
    pub prefer_server_cipher_suites: bool,
    /// OpenSSL's names of the key-exchange groups, in order; empty: defaults.
    pub curves: Vec<&'static str>,
}

/// Go's `tls.ClientAuthType`, as the toolkit names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ClientAuth {
    /// No client certificate is asked for.
    #[default]
    NoClientCert,
    /// Asked for, not required, not verified.
    RequestClientCert,
    /// Required, not verified.
    RequireAnyClientCert,
    /// Verified when given.
    VerifyClientCertIfGiven,
    /// Required and verified against `client_ca`.
    RequireAndVerifyClientCert,
}

impl ClientAuth {
    /// A certificate is checked against the client CA.
    pub fn verifies(self) -> bool {
        matches!(self, ClientAuth::VerifyClientCertIfGiven | ClientAuth::RequireAndVerifyClientCert)
    }

    /// A client without a certificate is refused.
    pub fn requires(self) -> bool {
        matches!(self, ClientAuth::RequireAnyClientCert | ClientAuth::RequireAndVerifyClientCert)
    }
}

/// A TLS protocol version.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum TlsVersion {
    /// TLS 1.0.
    Tls10,
    /// TLS 1.1.
    Tls11,
    /// TLS 1.2 (the toolkit's default minimum).
    Tls12,
    /// TLS 1.3.
    Tls13,
}

/// The token bucket of `rate_limit`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RateLimit {
    /// One more request is allowed per interval.
    pub interval: Duration,
    /// Requests allowed at once.
    pub burst: u32,
}

/// The file's shape; unknown keys are errors (the toolkit reads it strictly).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    tls_server_config: Option<TlsFile>,
    http_server_config: Option<HttpFile>,
    basic_auth_users: Option<BTreeMap<String, String>>,
    rate_limit: Option<RateLimitFile>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct TlsFile {
    cert: Option<String>,
    key: Option<String>,
    client_ca: Option<String>,
    cert_file: Option<PathBuf>,
    key_file: Option<PathBuf>,
    client_auth_type: Option<String>,
    client_ca_file: Option<PathBuf>,
    client_allowed_sans: Option<Vec<String>>,
    min_version: Option<String>,
    max_version: Option<String>,
    cipher_suites: Option<Vec<String>>,
    prefer_server_cipher_suites: Option<bool>,
    curve_preferences: Option<Vec<String>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct HttpFile {
    /// Accepted for the toolkit's files; only HTTP/1.1 is served.
    #[allow(dead_code)]
    http2: Option<bool>,
    headers: Option<BTreeMap<String, String>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RateLimitFile {
    interval: Option<String>,
    burst: Option<i64>,
}

/// Go's TLS 1.2 cipher suites that `tls.CipherSuites()` lists (the secure
/// ones, which the toolkit accepts), with OpenSSL's names.
const CIPHER_SUITES: &[(&str, &str)] = &[
    ("TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA", "ECDHE-ECDSA-AES128-SHA"),
    ("TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA", "ECDHE-RSA-AES128-SHA"),
    ("TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA", "ECDHE-ECDSA-AES256-SHA"),
    ("TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA", "ECDHE-RSA-AES256-SHA"),
    ("TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256", "ECDHE-ECDSA-AES128-GCM-SHA256"),
    ("TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256", "ECDHE-RSA-AES128-GCM-SHA256"),
    ("TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384", "ECDHE-ECDSA-AES256-GCM-SHA384"),
    ("TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384", "ECDHE-RSA-AES256-GCM-SHA384"),
    ("TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256", "ECDHE-ECDSA-CHACHA20-POLY1305"),
    ("TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256", "ECDHE-RSA-CHACHA20-POLY1305"),
];

/// TLS 1.3's suites: Go lists them but never lets them be chosen; accepted
/// and left to OpenSSL, as Go does.
const TLS13_SUITES: &[&str] = &["TLS_AES_128_GCM_SHA256", "TLS_AES_256_GCM_SHA384", "TLS_CHACHA20_POLY1305_SHA256"];

/// Go's curve names, with OpenSSL's.
const CURVES: &[(&str, &str)] =
    &[("CurveP256", "P-256"), ("CurveP384", "P-384"), ("CurveP521", "P-521"), ("X25519", "X25519")];

/// The response headers the toolkit lets a file set.
const HEADERS: &[&str] = &[
    "Content-Security-Policy",
    "X-Frame-Options",
    "X-Content-Type-Options",
    "X-XSS-Protection",
    "Strict-Transport-Security",
];

impl WebConfig {
    /// Parses and checks a web configuration file's text.
    pub fn parse(text: &str) -> Result<WebConfig, WebConfigError> {
        // An empty file is a valid configuration that changes nothing.
        if text.trim().is_empty() {
            return Ok(WebConfig::default());
        }
        let file: File = serde_norway::from_str(text).map_err(|e| {
            let at = e.location().map(|l| format!(" (line {}, column {})", l.line(), l.column())).unwrap_or_default();
            invalid("file", format!("{e}{at}"))
        })?;
        let tls = file.tls_server_config.map(tls_server).transpose()?;
        let http = file.http_server_config.unwrap_or_default();
        let headers = headers(http.headers.unwrap_or_default())?;
        let users = file.basic_auth_users.unwrap_or_default();
        for (user, hash) in &users {
            check_bcrypt(hash).map_err(|why| invalid(format!("basic_auth_users.{user}"), why))?;
        }
        let rate_limit = file.rate_limit.map(rate_limit).transpose()?;
        Ok(WebConfig { tls, headers, users, rate_limit })
    }
}

fn tls_server(file: TlsFile) -> Result<TlsServer, WebConfigError> {
    const F: &str = "tls_server_config";
    let cert =
        pem(F, "cert", file.cert, file.cert_file)?.ok_or_else(|| invalid(format!("{F}.cert_file"), "missing"))?;
    let key = pem(F, "key", file.key, file.key_file)?.ok_or_else(|| invalid(format!("{F}.key_file"), "missing"))?;
    let client_ca = pem(F, "client_ca", file.client_ca, file.client_ca_file)?;
    let client_auth = client_auth(file.client_auth_type.as_deref())?;
    if client_ca.is_some() && !client_auth.verifies() {
        return Err(invalid(
            format!("{F}.client_auth_type"),
            "a client CA is set but client certificates are not verified \
             (VerifyClientCertIfGiven or RequireAndVerifyClientCert)",
        ));
    }
    if client_auth.verifies() && client_ca.is_none() {
        return Err(invalid(format!("{F}.client_ca_file"), format!("missing: {client_auth:?} needs it")));
    }
    let client_allowed_sans = file.client_allowed_sans.unwrap_or_default();
    if !client_allowed_sans.is_empty() && !client_auth.requires() {
        return Err(invalid(
            format!("{F}.client_allowed_sans"),
            "needs client_auth_type RequireAnyClientCert or RequireAndVerifyClientCert",
        ));
    }
    let min_version = version(F, "min_version", file.min_version, TlsVersion::Tls12)?;
    let max_version = version(F, "max_version", file.max_version, TlsVersion::Tls13)?;
    if min_version > max_version {
        return Err(invalid(format!("{F}.min_version"), "is above max_version"));
    }
    let cipher_suites = cipher_suites(file.cipher_suites.unwrap_or_default())?;
    let curves = curves(file.curve_preferences.unwrap_or_default())?;
    Ok(TlsServer {
        cert,
        key,
        client_auth,
        client_ca,
        client_allowed_sans,
        min_version,
        max_version,
        cipher_suites,
        prefer_server_cipher_suites: file.prefer_server_cipher_suites.unwrap_or(true),
        curves,
    })
}

/// `tls_server_config.client_auth_type`, Go's names.
fn client_auth(given: Option<&str>) -> Result<ClientAuth, WebConfigError> {
    const F: &str = "tls_server_config";
    Ok(match given.unwrap_or("NoClientCert") {
        "" | "NoClientCert" => ClientAuth::NoClientCert,
        "RequestClientCert" => ClientAuth::RequestClientCert,
        "RequireAnyClientCert" => ClientAuth::RequireAnyClientCert,
        "VerifyClientCertIfGiven" => ClientAuth::VerifyClientCertIfGiven,
        "RequireAndVerifyClientCert" => ClientAuth::RequireAndVerifyClientCert,
        other => {
            return Err(invalid(
                format!("{F}.client_auth_type"),
                format!(
                    "`{other}` is not one of NoClientCert, RequestClientCert, RequireAnyClientCert, \
                     VerifyClientCertIfGiven, RequireAndVerifyClientCert"
                ),
            ));
        }
    })
}

/// `tls_server_config.cipher_suites`, Go's names in OpenSSL's (TLS 1.3's
/// are always on, as in Go).
fn cipher_suites(names: Vec<String>) -> Result<Vec<&'static str>, WebConfigError> {
    const F: &str = "tls_server_config";
    let mut cipher_suites = Vec::new();
    for name in names {
        if TLS13_SUITES.contains(&name.as_str()) {
            continue;
        }
        match CIPHER_SUITES.iter().find(|(go, _)| *go == name) {
            Some((_, openssl)) => cipher_suites.push(*openssl),
            None => {
                let known: Vec<&str> = CIPHER_SUITES.iter().map(|(go, _)| *go).collect();
                return Err(invalid(
                    format!("{F}.cipher_suites"),
                    format!("unknown cipher `{name}` (known: {})", known.join(", ")),
                ));
            }
        }
    }
    Ok(cipher_suites)
}

/// `tls_server_config.curve_preferences`, Go's names in OpenSSL's.
fn curves(names: Vec<String>) -> Result<Vec<&'static str>, WebConfigError> {
    const F: &str = "tls_server_config";
    let mut curves = Vec::new();
    for name in names {
        match CURVES.iter().find(|(go, _)| *go == name) {
            Some((_, openssl)) => curves.push(*openssl),
            None => {
                return Err(invalid(
                    format!("{F}.curve_preferences"),
                    format!("unknown curve `{name}` (known: CurveP256, CurveP384, CurveP521, X25519)"),
                ));
            }
        }
    }
    Ok(curves)
}

/// One PEM setting given inline (`name`) or as a file (`name_file`), not both.
fn pem(
    section: &str,
    name: &str,
    inline: Option<String>,
    file: Option<PathBuf>,
) -> Result<Option<Pem>, WebConfigError> {
    let inline = inline.filter(|s| !s.is_empty());
    let file = file.filter(|p| !p.as_os_str().is_empty());
    match (inline, file) {
        (Some(_), Some(_)) => Err(invalid(format!("{section}.{name}"), format!("both {name} and {name}_file are set"))),
        (Some(text), None) => Ok(Some(Pem::Inline(text))),
        (None, Some(path)) => Ok(Some(Pem::File(path))),
        (None, None) => Ok(None),
    }
}

fn version(
    section: &str,
    name: &str,
    value: Option<String>,
    default: TlsVersion,
) -> Result<TlsVersion, WebConfigError> {
    Ok(match value.as_deref() {
        None | Some("") => default,
        Some("TLS10") => TlsVersion::Tls10,
        Some("TLS11") => TlsVersion::Tls11,
        Some("TLS12") => TlsVersion::Tls12,
        Some("TLS13") => TlsVersion::Tls13,
        Some(other) => {
            return Err(invalid(
                format!("{section}.{name}"),
                format!("`{other}` is not one of TLS10, TLS11, TLS12, TLS13"),
            ));
        }
    })
}

fn headers(given: BTreeMap<String, String>) -> Result<Vec<(&'static str, String)>, WebConfigError> {
    let mut out = Vec::new();
    for (name, value) in given {
        let field = format!("http_server_config.headers.{name}");
        let Some(known) = HEADERS.iter().find(|h| h.eq_ignore_ascii_case(&name)) else {
            return Err(invalid(field, format!("cannot be set (only {})", HEADERS.join(", "))));
        };
        if value.is_empty() {
            continue;
        }
        let allowed = match *known {
            "X-Frame-Options" => ["deny", "sameorigin"].iter().any(|v| v.eq_ignore_ascii_case(&value)),
            "X-Content-Type-Options" => value.eq_ignore_ascii_case("nosniff"),
            _ => true,
        };
        if !allowed {
            return Err(invalid(field, format!("`{value}` is not an accepted value")));
        }
        if axum::http::HeaderValue::from_str(&value).is_err() {
            return Err(invalid(field, "is not a valid header value"));
        }
        out.push((*known, value));
    }
    Ok(out)
}

/// A bcrypt hash is `$2a$`, `$2b$`, `$2x$` or `$2y$`, a two-digit cost (4–31),
/// `$`, then 53 characters of bcrypt's base-64.
fn check_bcrypt(hash: &str) -> Result<(), String> {
    let hash = hash.trim();
    let bad = || "is not a bcrypt hash (`htpasswd -nBC 10 \"\" | tr -d ':\\n'` makes one)".to_owned();
    let rest = ["$2a$", "$2b$", "$2x$", "$2y$"].iter().find_map(|p| hash.strip_prefix(p)).ok_or_else(bad)?;
    let (cost, digest) = rest.split_once('$').ok_or_else(bad)?;
    let cost: u32 = cost.parse().map_err(|_| bad())?;
    if !(4..=31).contains(&cost) || cost.to_string().len() > 2 {
        return Err(bad());
    }
    let b64 = |c: char| c.is_ascii_alphanumeric() || c == '.' || c == '/';
    if digest.len() != 53 || !digest.chars().all(b64) {
        return Err(bad());
    }
    Ok(())
}

fn rate_limit(file: RateLimitFile) -> Result<RateLimit, WebConfigError> {
    let interval = match file.interval.as_deref() {
        None | Some("") => Duration::ZERO,
        Some(text) => go_duration(text).map_err(|why| invalid("rate_limit.interval", why.to_string()))?,
    };
    let burst = file.burst.unwrap_or(0);
    let burst = u32::try_from(burst).map_err(|_| invalid("rate_limit.burst", format!("{burst} is not 0 or more")))?;
    if burst == 0 && !interval.is_zero() {
        // Go's limiter would refuse every request: surely not what was meant.
        return Err(invalid("rate_limit.burst", "must be at least 1 while interval is set"));
    }
    Ok(RateLimit { interval, burst })
}

/// Text that is not a Go duration.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{0}` is not a duration (like 1s, 500ms or 1m30s)")]
pub(crate) struct NotADuration(String);

/// A Go duration (`1s`, `1m30s`, `250ms`, `0`).
pub(crate) fn go_duration(text: &str) -> Result<Duration, NotADuration> {
    let bad = || NotADuration(text.to_owned());
    if text == "0" {
        return Ok(Duration::ZERO);
    }
    let mut rest = text;
    let mut total = 0f64;
    if rest.is_empty() {
        return Err(bad());
    }
    while !rest.is_empty() {
        let number_len = rest.find(|c: char| !(c.is_ascii_digit() || c == '.')).ok_or_else(bad)?;
        if number_len == 0 {
            return Err(bad());
        }
        let number: f64 = rest[..number_len].parse().map_err(|_| bad())?;
        rest = &rest[number_len..];
        let unit_len = rest.find(|c: char| c.is_ascii_digit() || c == '.').unwrap_or(rest.len());
        let scale = match &rest[..unit_len] {
            "ns" => 1e-9,
            "us" | "µs" | "μs" => 1e-6,
            "ms" => 1e-3,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            _ => return Err(bad()),
        };
        rest = &rest[unit_len..];
        total += number * scale;
    }
    Duration::try_from_secs_f64(total).map_err(|_| bad())
}

#[cfg(test)]
mod tests {
    use super::*;

    const HASH: &str = "$2y$10$mDwo.lAisC94iLAyP81MCesa29IzH37oigHC/42V2pdJlUprsJPze";

    fn field_of(text: &str) -> String {
        WebConfig::parse(text).expect_err("must be refused").field
    }

    #[test]
    fn the_toolkits_example_file_is_read() {
        let text = format!(
            "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n\
             basic_auth_users:\n  alice: {HASH}\n\
             rate_limit:\n  interval: 1s\n  burst: 20\n"
        );
        let config = WebConfig::parse(&text).expect("valid");
        let tls = config.tls.expect("tls");
        assert_eq!(tls.cert, Pem::File("server.crt".into()));
        assert_eq!(tls.min_version, TlsVersion::Tls12);
        assert_eq!(tls.client_auth, ClientAuth::NoClientCert);
        assert_eq!(config.users.get("alice").map(String::as_str), Some(HASH));
        assert_eq!(config.rate_limit, Some(RateLimit { interval: Duration::from_secs(1), burst: 20 }));
    }

    #[test]
    fn an_empty_file_changes_nothing() {
        assert_eq!(WebConfig::parse("\n"), Ok(WebConfig::default()));
        assert_eq!(WebConfig::parse("basic_auth_users:\n"), Ok(WebConfig::default()));
    }

    #[test]
    fn each_bad_setting_is_named() {
        assert_eq!(field_of("tls_server_config:\n  key_file: k\n"), "tls_server_config.cert_file");
        assert_eq!(field_of("tls_server_config:\n  cert_file: c\n"), "tls_server_config.key_file");
        assert_eq!(
            field_of("tls_server_config:\n  cert_file: c\n  cert: x\n  key_file: k\n"),
            "tls_server_config.cert"
        );
        let tls = "tls_server_config:\n  cert_file: c\n  key_file: k\n";
        assert_eq!(field_of(&format!("{tls}  client_auth_type: Maybe\n")), "tls_server_config.client_auth_type");
        assert_eq!(
            field_of(&format!("{tls}  client_auth_type: RequireAndVerifyClientCert\n")),
            "tls_server_config.client_ca_file"
        );
        assert_eq!(field_of(&format!("{tls}  client_ca_file: ca\n")), "tls_server_config.client_auth_type");
        assert_eq!(field_of(&format!("{tls}  client_allowed_sans: [a]\n")), "tls_server_config.client_allowed_sans");
        assert_eq!(field_of(&format!("{tls}  min_version: TLS14\n")), "tls_server_config.min_version");
        assert_eq!(
            field_of(&format!("{tls}  min_version: TLS13\n  max_version: TLS12\n")),
            "tls_server_config.min_version"
        );
        assert_eq!(
            field_of(&format!("{tls}  cipher_suites: [TLS_RSA_WITH_RC4_128_SHA]\n")),
            "tls_server_config.cipher_suites"
        );
        assert_eq!(field_of(&format!("{tls}  curve_preferences: [P-256]\n")), "tls_server_config.curve_preferences");
        assert_eq!(field_of("basic_auth_users:\n  bob: secret\n"), "basic_auth_users.bob");
        assert_eq!(field_of("http_server_config:\n  headers:\n    Server: x\n"), "http_server_config.headers.Server");
        assert_eq!(
            field_of("http_server_config:\n  headers:\n    X-Frame-Options: allow\n"),
            "http_server_config.headers.X-Frame-Options"
        );
        assert_eq!(field_of("rate_limit:\n  interval: soon\n"), "rate_limit.interval");
        assert_eq!(field_of("rate_limit:\n  burst: -1\n"), "rate_limit.burst");
        assert_eq!(field_of("rate_limit:\n  interval: 1s\n"), "rate_limit.burst");
        // Unknown keys are typos, not silently ignored settings.
        assert_eq!(field_of("basic_auth_user:\n  bob: x\n"), "file");
    }

    #[test]
    fn go_names_become_openssls() {
        let text = "tls_server_config:\n  cert: PEM\n  key: PEM\n  client_ca: PEM\n  \
                    client_auth_type: RequireAndVerifyClientCert\n  client_allowed_sans: [client.local]\n  \
                    min_version: TLS13\n  \
                    cipher_suites: [TLS_AES_128_GCM_SHA256, TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256]\n  \
                    curve_preferences: [X25519, CurveP256]\n  prefer_server_cipher_suites: false\n\
                    http_server_config:\n  http2: false\n  headers:\n    x-frame-options: DENY\n    \
                    X-XSS-Protection: ''\n";
        let config = WebConfig::parse(text).expect("valid");
        let tls = config.tls.expect("tls");
        assert_eq!(tls.cert, Pem::Inline("PEM".into()));
        assert_eq!(tls.cipher_suites, vec!["ECDHE-RSA-AES128-GCM-SHA256"]);
        assert_eq!(tls.curves, vec!["X25519", "P-256"]);
        assert!(!tls.prefer_server_cipher_suites);
        assert_eq!(tls.client_allowed_sans, vec!["client.local".to_owned()]);
        assert_eq!(config.headers, vec![("X-Frame-Options", "DENY".to_owned())]);
    }

    #[test]
    fn go_durations() {
        assert_eq!(go_duration("0"), Ok(Duration::ZERO));
        assert_eq!(go_duration("1m30s"), Ok(Duration::from_secs(90)));
        assert_eq!(go_duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(go_duration("1.5h"), Ok(Duration::from_secs(5400)));
        for bad in ["", "s", "5", "5x", "-1s", "1s5"] {
            assert!(go_duration(bad).is_err(), "{bad}");
        }
    }
}
