//! `otlp:` in the configuration file, and the OpenTelemetry SDKs' standard
//! `OTEL_…` environment variables over it: where and how kshard pushes its
//! series to an OpenTelemetry collector. The export is on when an endpoint
//! is given (or `otlp.enabled: true`), off with `OTEL_METRICS_EXPORTER=none`
//! or `otlp.enabled: false`. The whole process's: top level only.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Result, bail};
use kshard_lag::{OtlpProtocol, OtlpSettings, OtlpTls};
use serde::{Deserialize, Serialize};

/// `otlp:` as written.
#[derive(Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct OtlpFile {
    enabled: Option<bool>,
    endpoint: Option<String>,
    protocol: Option<String>,
    interval_seconds: Option<f64>,
    timeout_seconds: Option<f64>,
    #[serde(default)]
    headers: BTreeMap<String, String>,
    #[serde(default)]
    resource_attributes: BTreeMap<String, String>,
    max_data_points_per_request: Option<usize>,
    compression: Option<String>,
    #[serde(default)]
    tls: OtlpTlsFile,
}

#[derive(Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
struct OtlpTlsFile {
    ca_file: Option<PathBuf>,
    cert_file: Option<PathBuf>,
    key_file: Option<PathBuf>,
    insecure_skip_verify: Option<bool>,
}

/// The metrics-specific variable, else the general one.
fn either(env: &dyn Fn(&str) -> Option<String>, what: &str) -> Option<(String, String)> {
    let specific = format!("OTEL_EXPORTER_OTLP_METRICS_{what}");
    let general = format!("OTEL_EXPORTER_OTLP_{what}");
    let value = |name: String| env(&name).filter(|v| !v.trim().is_empty()).map(|v| (name, v.trim().to_owned()));
    value(specific).or_else(|| value(general))
}

fn protocol(setting: &str, value: &str) -> Result<OtlpProtocol> {
    match value {
        "grpc" => Ok(OtlpProtocol::Grpc),
        "http/protobuf" => Ok(OtlpProtocol::HttpProtobuf),
        "http/json" => bail!("invalid {setting}: http/json is not supported (grpc or http/protobuf)"),
        other => bail!("invalid {setting}: {other:?} (grpc or http/protobuf)"),
    }
}

fn seconds(setting: &str, value: f64, range: std::ops::RangeInclusive<f64>) -> Result<Duration> {
    if !(value.is_finite() && range.contains(&value)) {
        bail!("invalid {setting}: {value} (between {} and {} seconds)", range.start(), range.end());
    }
    Ok(Duration::from_secs_f64(value))
}

fn millis(setting: &str, value: &str, range: std::ops::RangeInclusive<f64>) -> Result<Duration> {
    let Ok(ms) = value.parse::<f64>() else { bail!("invalid {setting}: {value:?} (milliseconds)") };
    seconds(setting, ms / 1000.0, range)
}

/// `k1=v1,k2=v2` with `%`-escaped values, as the OpenTelemetry
/// specification writes headers and resource attributes in variables. With
/// `secret` (headers: a bearer token, an API key), an error names the
/// pair's place and key, never its text.
fn pairs(setting: &str, text: &str, secret: bool) -> Result<Vec<(String, String)>> {
    let shown = |n: usize, pair: &str| if secret { format!("pair {n}") } else { format!("{pair:?}") };
    text.split(',')
        .filter(|p| !p.trim().is_empty())
        .enumerate()
        .map(|(i, pair)| {
            let Some((k, v)) = pair.split_once('=') else {
                bail!("invalid {setting}: {} is not key=value", shown(i + 1, pair))
            };
            let key = k.trim();
            if key.is_empty() {
                bail!("invalid {setting}: {} has no key", shown(i + 1, pair));
            }
            let value = percent_decoded(v.trim()).map_err(|why| {
                let what = if secret { format!("the value of {key:?}") } else { format!("{:?}", v.trim()) };
                anyhow::anyhow!("invalid {setting}: {what} {why}")
            })?;
            Ok((key.to_owned(), value))
        })
        .collect()
}

/// `text` with its `%XX` escapes decoded; what is wrong, when it cannot be.
fn percent_decoded(text: &str) -> std::result::Result<String, &'static str> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = text.get(i + 1..i + 3).and_then(|h| u8::from_str_radix(h, 16).ok());
            let Some(byte) = hex else { return Err("has a bad %-escape") };
            out.push(byte);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| "is not UTF-8 once unescaped")
}

/// Puts `(key, value)` into `list`, replacing a value the key had.
fn set(list: &mut Vec<(String, String)>, key: &str, value: String) {
    match list.iter_mut().find(|(k, _)| k == key) {
        Some(entry) => entry.1 = value,
        None => list.push((key.to_owned(), value)),
    }
}

/// The host's name, for `service.instance.id`.
fn host_name() -> Option<String> {
    let name = std::fs::read_to_string("/proc/sys/kernel/hostname").ok()?;
    let name = name.trim();
    (!name.is_empty()).then(|| name.to_owned())
}

/// The export's settings from `file` and the environment (`env` looks a
/// variable up), checked, each error naming the setting; `None`: off.
pub(crate) fn otlp_settings(file: &OtlpFile, env: &dyn Fn(&str) -> Option<String>) -> Result<Option<OtlpSettings>> {
    if let Some(exporter) = env("OTEL_METRICS_EXPORTER") {
        match exporter.trim() {
            "none" => return Ok(None),
            "otlp" | "" => {}
            other => bail!("invalid OTEL_METRICS_EXPORTER: {other:?} (otlp or none; Prometheus is /metrics)"),
        }
    }
    let specific_endpoint = env("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT").filter(|v| !v.trim().is_empty());
    let general_endpoint = env("OTEL_EXPORTER_OTLP_ENDPOINT").filter(|v| !v.trim().is_empty());
    let from_env = specific_endpoint.is_some() || general_endpoint.is_some();
    let enabled = file.enabled.unwrap_or(file.endpoint.is_some() || from_env);
    if !enabled {
        return Ok(None);
    }
    let (endpoint, protocol) = endpoint(file, env, specific_endpoint, general_endpoint)?;
    let mut settings = OtlpSettings::new(endpoint, protocol);
    timing(&mut settings, file, env)?;
    labels(&mut settings, file, env)?;
    settings.tls = tls(file, env)?;
    if settings.tls != OtlpTls::default() && settings.endpoint.starts_with("http://") {
        bail!("invalid otlp.tls: the endpoint {} is not https://", settings.endpoint);
    }
    Ok(Some(settings))
}

/// The collector's URL and protocol: the variables over the file's keys.
/// (`specific_endpoint` and `general_endpoint`: the metrics and the general
/// endpoint variables, when set.)
fn endpoint(
    file: &OtlpFile,
    env: &dyn Fn(&str) -> Option<String>,
    specific_endpoint: Option<String>,
    general_endpoint: Option<String>,
) -> Result<(String, OtlpProtocol)> {
    let protocol = match either(env, "PROTOCOL") {
        Some((name, value)) => protocol(&name, &value)?,
        None => match &file.protocol {
            Some(value) => protocol("otlp.protocol", value)?,
            None => OtlpProtocol::Grpc,
        },
    };
    let grpc = protocol == OtlpProtocol::Grpc;
    // The metrics variable is the URL as is; the general one and the file's
    // are the collector's base, to which HTTP adds `/v1/metrics`.
    let (endpoint, is_base, source) = match (specific_endpoint, general_endpoint, &file.endpoint) {
        (Some(url), _, _) => (url.trim().to_owned(), false, "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT"),
        (None, Some(url), _) => (url.trim().to_owned(), true, "OTEL_EXPORTER_OTLP_ENDPOINT"),
        (None, None, Some(url)) => (url.trim().to_owned(), true, "otlp.endpoint"),
        (None, None, None) => {
            ((if grpc { "http://localhost:4317" } else { "http://localhost:4318" }).to_owned(), true, "otlp.endpoint")
        }
    };
    let endpoint = if grpc || !is_base { endpoint } else { with_metrics_path(&endpoint) };
    let scheme_ok = endpoint.starts_with("http://") || endpoint.starts_with("https://");
    let host_ok = endpoint.split_once("://").is_some_and(|(_, rest)| !rest.is_empty() && !rest.starts_with(['/', ':']));
    if !(scheme_ok && host_ok) {
        bail!("invalid {source}: {endpoint:?} (an http:// or https:// URL with a host)");
    }
    Ok((endpoint, protocol))
}

/// How often, how long, how much per request and whether gzipped.
fn timing(settings: &mut OtlpSettings, file: &OtlpFile, env: &dyn Fn(&str) -> Option<String>) -> Result<()> {
    if let Some(s) = file.interval_seconds {
        settings.interval = seconds("otlp.interval_seconds", s, 1.0..=86_400.0)?;
    }
    if let Some(v) = env("OTEL_METRIC_EXPORT_INTERVAL") {
        settings.interval = millis("OTEL_METRIC_EXPORT_INTERVAL", v.trim(), 1.0..=86_400.0)?;
    }
    if let Some(s) = file.timeout_seconds {
        settings.timeout = seconds("otlp.timeout_seconds", s, 0.1..=600.0)?;
    }
    if let Some((name, v)) = either(env, "TIMEOUT") {
        settings.timeout = millis(&name, &v, 0.1..=600.0)?;
    }
    if let Some(n) = file.max_data_points_per_request {
        if n == 0 {
            bail!("invalid otlp.max_data_points_per_request: 0 (at least 1)");
        }
        settings.max_points_per_request = n;
    }
    let compression = match either(env, "COMPRESSION") {
        Some((name, value)) => Some((name, value)),
        None => file.compression.clone().map(|v| ("otlp.compression".to_owned(), v)),
    };
    settings.gzip = match compression {
        None => false,
        Some((_, v)) if v == "gzip" => true,
        Some((_, v)) if v == "none" => false,
        Some((name, v)) => bail!("invalid {name}: {v:?} (gzip or none)"),
    };
    Ok(())
}

/// The headers sent and the resource's attributes.
fn labels(settings: &mut OtlpSettings, file: &OtlpFile, env: &dyn Fn(&str) -> Option<String>) -> Result<()> {
    settings.headers = file.headers.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
    if let Some((name, v)) = either(env, "HEADERS") {
        for (k, v) in pairs(&name, &v, true)? {
            set(&mut settings.headers, &k, v);
        }
    }
    let resource = &mut settings.resource;
    set(resource, "service.version", env!("CARGO_PKG_VERSION").to_owned());
    if let Some(host) = host_name() {
        set(resource, "service.instance.id", host);
    }
    for (k, v) in &file.resource_attributes {
        set(resource, k, v.clone());
    }
    if let Some(v) = env("OTEL_RESOURCE_ATTRIBUTES") {
        for (k, v) in pairs("OTEL_RESOURCE_ATTRIBUTES", &v, false)? {
            set(resource, &k, v);
        }
    }
    if let Some(name) = env("OTEL_SERVICE_NAME").filter(|v| !v.trim().is_empty()) {
        set(resource, "service.name", name.trim().to_owned());
    }
    Ok(())
}

/// The TLS files, each from its variable or the file's key, checked now.
fn tls(file: &OtlpFile, env: &dyn Fn(&str) -> Option<String>) -> Result<OtlpTls> {
    let tls = &file.tls;
    // Named by where each came from.
    let path = |what: &str, setting: &str, from_file: &Option<PathBuf>| -> Result<Option<PathBuf>> {
        let (source, path) = match (either(env, what), from_file) {
            (Some((name, v)), _) => (name, PathBuf::from(v)),
            (None, Some(p)) => (format!("otlp.tls.{setting}"), p.clone()),
            (None, None) => return Ok(None),
        };
        if let Err(e) = std::fs::File::open(&path) {
            bail!("invalid {source}: cannot read {}: {e}", path.display());
        }
        Ok(Some(path))
    };
    Ok(OtlpTls {
        ca_file: path("CERTIFICATE", "ca_file", &tls.ca_file)?,
        cert_file: path("CLIENT_CERTIFICATE", "cert_file", &tls.cert_file)?,
        key_file: path("CLIENT_KEY", "key_file", &tls.key_file)?,
        insecure_skip_verify: tls.insecure_skip_verify.unwrap_or(false),
    })
}

/// `base` with `/v1/metrics` after its path, as the specification builds
/// the HTTP URL from `OTEL_EXPORTER_OTLP_ENDPOINT`.
fn with_metrics_path(base: &str) -> String {
    format!("{}/v1/metrics", base.trim_end_matches('/'))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(yaml: &str, vars: &[(&str, &str)]) -> Result<Option<OtlpSettings>> {
        let file: OtlpFile = serde_norway::from_str(yaml)?;
        let vars: BTreeMap<String, String> = vars.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        otlp_settings(&file, &|name| vars.get(name).cloned())
    }

    fn on(yaml: &str, vars: &[(&str, &str)]) -> OtlpSettings {
        settings(yaml, vars).expect("valid").expect("on")
    }

    fn attribute<'a>(s: &'a OtlpSettings, key: &str) -> Option<&'a str> {
        s.resource.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str())
    }

    #[test]
    fn off_unless_an_endpoint_is_given() {
        assert!(settings("{}", &[]).expect("valid").is_none());
        assert!(settings("enabled: false\nendpoint: http://c:4317", &[]).expect("valid").is_none());
        let none = [("OTEL_METRICS_EXPORTER", "none"), ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4317")];
        assert!(settings("endpoint: http://c:4317", &none).expect("valid").is_none());
        let s = on("enabled: true", &[]);
        assert_eq!((s.endpoint.as_str(), s.protocol), ("http://localhost:4317", OtlpProtocol::Grpc));
    }

    #[test]
    fn the_file_is_read_with_the_sdks_defaults() {
        let s = on("endpoint: http://collector:4318\nprotocol: http/protobuf\n", &[]);
        assert_eq!(s.endpoint, "http://collector:4318/v1/metrics", "the base gets the signal's path");
        assert_eq!((s.interval, s.timeout), (Duration::from_secs(60), Duration::from_secs(10)));
        assert_eq!(attribute(&s, "service.name"), Some("kshard"));
        assert_eq!(attribute(&s, "service.version"), Some(env!("CARGO_PKG_VERSION")));
        let ca = std::env::temp_dir().join(format!("kshard-otlp-ca-{}.pem", std::process::id()));
        std::fs::write(&ca, "only read here, not parsed").expect("write");
        let s = on(
            &format!(
                "endpoint: https://c:4317\ninterval_seconds: 15\ntimeout_seconds: 2.5\nheaders: {{x-api-key: k}}\n\
                 resource_attributes: {{deployment.environment: prod}}\nmax_data_points_per_request: 500\n\
                 tls: {{ca_file: {}}}\n",
                ca.display()
            ),
            &[],
        );
        assert_eq!((s.endpoint.as_str(), s.interval), ("https://c:4317", Duration::from_secs(15)));
        assert_eq!(s.timeout, Duration::from_millis(2500));
        assert_eq!(s.headers, [("x-api-key".to_owned(), "k".to_owned())]);
        assert_eq!(attribute(&s, "deployment.environment"), Some("prod"));
        assert_eq!(s.max_points_per_request, 500);
        assert_eq!(s.tls.ca_file, Some(ca.clone()));
        let _ = std::fs::remove_file(&ca);
    }

    #[test]
    fn the_standard_variables_win_over_the_file() {
        let vars = [
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://env:4318/"),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf"),
            ("OTEL_EXPORTER_OTLP_HEADERS", "authorization=Bearer%20abc,x-tenant=t1"),
            ("OTEL_METRIC_EXPORT_INTERVAL", "5000"),
            ("OTEL_EXPORTER_OTLP_METRICS_TIMEOUT", "3000"),
            ("OTEL_SERVICE_NAME", "lag-eu"),
            ("OTEL_RESOURCE_ATTRIBUTES", "service.name=ignored,k8s.pod.name=kshard-0"),
            ("OTEL_EXPORTER_OTLP_COMPRESSION", "gzip"),
        ];
        let s = on("endpoint: http://file:4317\nheaders: {x-tenant: file}\n", &vars);
        assert_eq!(s.endpoint, "http://env:4318/v1/metrics");
        assert_eq!(s.protocol, OtlpProtocol::HttpProtobuf);
        assert_eq!(
            s.headers,
            [("x-tenant".to_owned(), "t1".to_owned()), ("authorization".to_owned(), "Bearer abc".to_owned())]
        );
        assert_eq!((s.interval, s.timeout), (Duration::from_secs(5), Duration::from_secs(3)));
        assert_eq!(attribute(&s, "service.name"), Some("lag-eu"), "OTEL_SERVICE_NAME wins");
        assert_eq!(attribute(&s, "k8s.pod.name"), Some("kshard-0"));
        assert!(s.gzip, "OTEL_EXPORTER_OTLP_COMPRESSION=gzip");
        assert!(on("endpoint: http://c\ncompression: gzip", &[]).gzip);
        assert!(!on("endpoint: http://c", &[]).gzip, "none by default, as the specification's");
        let exact = [
            ("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", "http://c:9999/custom"),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf"),
        ];
        assert_eq!(on("{}", &exact).endpoint, "http://c:9999/custom", "the metrics URL is used as is");
    }

    #[test]
    fn bad_values_name_their_setting() {
        let err = |yaml: &str, vars: &[(&str, &str)]| settings(yaml, vars).expect_err(yaml).to_string();
        assert!(err("endpoint: c:4317", &[]).contains("otlp.endpoint"));
        assert!(err("endpoint: http://", &[]).contains("otlp.endpoint"));
        assert!(
            err("{}", &[("OTEL_EXPORTER_OTLP_ENDPOINT", "collector:4317")]).contains("OTEL_EXPORTER_OTLP_ENDPOINT")
        );
        let missing = [
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "https://c:4317"),
            ("OTEL_EXPORTER_OTLP_CERTIFICATE", "/nonexistent/ca.pem"),
        ];
        assert!(
            err("{}", &missing).contains("invalid OTEL_EXPORTER_OTLP_CERTIFICATE: cannot read /nonexistent/ca.pem")
        );
        assert!(err("endpoint: https://c\ntls: {key_file: /nonexistent/k.pem}", &[]).contains("otlp.tls.key_file"));
        assert!(err("endpoint: http://c\nprotocol: http/json", &[]).contains("otlp.protocol"));
        assert!(err("endpoint: http://c\ninterval_seconds: 0", &[]).contains("otlp.interval_seconds"));
        assert!(err("endpoint: http://c\ntls: {insecure_skip_verify: true}", &[]).contains("otlp.tls"));
        assert!(err("endpoint: http://c\nmax_data_points_per_request: 0", &[]).contains("max_data_points"));
        assert!(err("endpoint: http://c\ncompression: zstd", &[]).contains("otlp.compression"));
        assert!(err("endpoint: http://c\nport: 1", &[]).contains("port"), "unknown keys refused");
        assert!(
            err("{}", &[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c"), ("OTEL_METRIC_EXPORT_INTERVAL", "soon")])
                .contains("OTEL_METRIC_EXPORT_INTERVAL")
        );
        assert!(
            err("{}", &[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c"), ("OTEL_EXPORTER_OTLP_HEADERS", "novalue")])
                .contains("OTEL_EXPORTER_OTLP_HEADERS")
        );
        assert!(err("{}", &[("OTEL_METRICS_EXPORTER", "prometheus")]).contains("OTEL_METRICS_EXPORTER"));
    }

    #[test]
    fn a_malformed_header_is_named_without_its_secret() {
        let endpoint = ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c");
        // A token given as `Authorization: Bearer …` instead of `key=value`.
        for headers in ["x-tenant=t1,Authorization Bearer s3cr3t-t0ken", "authorization=Bearer%zzs3cr3t-t0ken"] {
            let e =
                settings("{}", &[endpoint, ("OTEL_EXPORTER_OTLP_HEADERS", headers)]).expect_err(headers).to_string();
            assert!(e.contains("OTEL_EXPORTER_OTLP_HEADERS"), "{e}");
            assert!(!e.contains("s3cr3t"), "the token is in the error: {e}");
        }
        let e = settings("{}", &[endpoint, ("OTEL_EXPORTER_OTLP_HEADERS", "a=1,oops")]).expect_err("bad").to_string();
        assert!(e.contains("pair 2"), "{e}");
        // Resource attributes are no secret: shown.
        let e = settings("{}", &[endpoint, ("OTEL_RESOURCE_ATTRIBUTES", "team")]).expect_err("bad").to_string();
        assert!(e.contains("\"team\""), "{e}");
    }
}
