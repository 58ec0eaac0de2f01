//! `notifiers:` in the configuration file: Burrow's notifiers in kshard's
//! spelling (Burrow's `[notifier.NAME]` keys mapped in docs/notifiers.md).
//! Template files are read here, at start, so a missing one fails naming
//! its setting. The whole process's: top level only.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use kshard_lag::{HttpTarget, MailTarget, MailTls, NameFilter, NoticeThreshold, NotifierSender, NotifierSettings};
use serde::{Deserialize, Serialize};

/// One entry of `notifiers:` as written.
#[derive(Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct NotifierFile {
    name: Option<String>,
    kind: Option<String>,
    cluster: Option<String>,
    #[serde(default)]
    groups: GroupsFile,
    threshold: Option<String>,
    interval_seconds: Option<f64>,
    repeat_seconds: Option<f64>,
    send_close: Option<bool>,
    #[serde(default)]
    extras: BTreeMap<String, String>,
    template_open: Option<PathBuf>,
    template_close: Option<PathBuf>,
    http: Option<HttpFile>,
    email: Option<EmailFile>,
}

/// `groups:` of a notifier, as the top level's.
#[derive(Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
struct GroupsFile {
    allow: Option<Vec<String>>,
    ignore: Option<Vec<String>>,
}

#[derive(Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
struct HttpFile {
    url_open: Option<String>,
    url_close: Option<String>,
    method_open: Option<String>,
    method_close: Option<String>,
    #[serde(default)]
    headers: BTreeMap<String, String>,
    username: Option<String>,
    password: Option<String>,
    timeout_seconds: Option<f64>,
    ca_file: Option<PathBuf>,
    insecure_skip_verify: Option<bool>,
}

#[derive(Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
struct EmailFile {
    server: Option<String>,
    port: Option<u16>,
    tls: Option<String>,
    username: Option<String>,
    password: Option<String>,
    from: Option<String>,
    to: Option<Vec<String>>,
    ca_file: Option<PathBuf>,
    insecure_skip_verify: Option<bool>,
    timeout_seconds: Option<f64>,
}

fn seconds(at: &str, field: &str, value: Option<f64>, default: f64) -> Result<Duration> {
    let v = value.unwrap_or(default);
    if !(v.is_finite() && (0.001..=86_400.0).contains(&v)) {
        bail!("invalid {at}.{field}: {v} (0.001 to 86400)");
    }
    Ok(Duration::from_secs_f64(v))
}

fn template(at: &str, field: &str, path: &std::path::Path) -> Result<String> {
    std::fs::read_to_string(path).with_context(|| format!("invalid {at}.{field}: cannot read {}", path.display()))
}

/// The notifiers of the file's `notifiers:`.
pub(crate) fn notifiers(entries: &[NotifierFile]) -> Result<Vec<NotifierSettings>> {
    let mut out: Vec<NotifierSettings> = Vec::new();
    for (i, f) in entries.iter().enumerate() {
        let at = format!("notifiers[{i}]");
        let name =
            f.name.clone().filter(|n| !n.trim().is_empty()).with_context(|| format!("invalid {at}.name: not set"))?;
        if out.iter().any(|n| n.name == name) {
            bail!("invalid {at}.name: {name:?} names another notifier too");
        }
        let list = |l: &Option<Vec<String>>| l.clone().unwrap_or_default();
        let groups = NameFilter::new(&list(&f.groups.allow), &list(&f.groups.ignore))
            .map_err(|e| anyhow::anyhow!("invalid {at}.groups: {e}"))?;
        let threshold = match f.threshold.as_deref().map(str::to_ascii_uppercase).as_deref() {
            None | Some("WARN") | Some("2") => NoticeThreshold::Warn,
            Some("ERR") | Some("3") => NoticeThreshold::Err,
            Some(other) => bail!("invalid {at}.threshold: {other:?} (WARN or ERR)"),
        };
        let interval = seconds(&at, "interval_seconds", f.interval_seconds, 60.0)?;
        let repeat = seconds(&at, "repeat_seconds", f.repeat_seconds, interval.as_secs_f64())?;
        let send_close = f.send_close.unwrap_or(false);
        let open = f.template_open.as_deref().with_context(|| format!("invalid {at}.template_open: not set"))?;
        let template_close = f.template_close.as_deref().map(|p| template(&at, "template_close", p)).transpose()?;
        let sender = match (f.kind.as_deref(), &f.http, &f.email) {
            (Some("http"), Some(h), None) => NotifierSender::Http(http(&at, h)?),
            (Some("email"), None, Some(e)) => NotifierSender::Email(email(&at, e)?),
            (Some("http"), _, _) => bail!("invalid {at}: kind http needs http: (and no email:)"),
            (Some("email"), _, _) => bail!("invalid {at}: kind email needs email: (and no http:)"),
            (other, _, _) => bail!("invalid {at}.kind: {other:?} (http or email)"),
        };
        out.push(NotifierSettings {
            name,
            cluster: f.cluster.clone(),
            groups,
            threshold,
            interval,
            repeat,
            send_close,
            extras: f.extras.clone(),
            template_open: template(&at, "template_open", open)?,
            template_close,
            sender,
        });
    }
    Ok(out)
}

fn http(at: &str, h: &HttpFile) -> Result<HttpTarget> {
    let url_open = h.url_open.clone().with_context(|| format!("invalid {at}.http.url_open: not set"))?;
    let basic_auth = match (&h.username, &h.password) {
        (Some(u), p) => Some((u.clone(), p.clone().unwrap_or_default())),
        (None, Some(_)) => bail!("invalid {at}.http.password: set without username"),
        (None, None) => None,
    };
    Ok(HttpTarget {
        url_open,
        url_close: h.url_close.clone(),
        method_open: h.method_open.clone().unwrap_or_else(|| "POST".into()),
        method_close: h.method_close.clone().unwrap_or_else(|| "POST".into()),
        headers: h.headers.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
        basic_auth,
        timeout: seconds(at, "http.timeout_seconds", h.timeout_seconds, 5.0)?,
        ca_file: h.ca_file.clone(),
        insecure_skip_verify: h.insecure_skip_verify.unwrap_or(false),
    })
}

fn email(at: &str, e: &EmailFile) -> Result<MailTarget> {
    let server = e.server.clone().with_context(|| format!("invalid {at}.email.server: not set"))?;
    let tls = match e.tls.as_deref() {
        None | Some("starttls") => MailTls::StartTls,
        Some("tls") => MailTls::Tls,
        Some("none") => MailTls::None,
        Some(other) => bail!("invalid {at}.email.tls: {other:?} (starttls, tls or none)"),
    };
    let default_port = match tls {
        MailTls::Tls => 465,
        MailTls::StartTls => 587,
        MailTls::None => 25,
    };
    let credentials = match (&e.username, &e.password) {
        (Some(u), p) => Some((u.clone(), p.clone().unwrap_or_default())),
        (None, Some(_)) => bail!("invalid {at}.email.password: set without username"),
        (None, None) => None,
    };
    let from = e.from.clone().with_context(|| format!("invalid {at}.email.from: not set"))?;
    let to: Vec<String> =
        e.to.clone()
            .unwrap_or_default()
            .iter()
            .flat_map(|t| t.split(','))
            .map(|t| t.trim().to_owned())
            .filter(|t| !t.is_empty())
            .collect();
    if to.is_empty() {
        bail!("invalid {at}.email.to: no recipient");
    }
    Ok(MailTarget {
        server,
        port: e.port.unwrap_or(default_port),
        tls,
        credentials,
        from,
        to,
        ca_file: e.ca_file.clone(),
        insecure_skip_verify: e.insecure_skip_verify.unwrap_or(false),
        timeout: seconds(at, "email.timeout_seconds", e.timeout_seconds, 10.0)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(yaml: &str) -> Result<Vec<NotifierSettings>> {
        let entries: Vec<NotifierFile> = serde_norway::from_str(yaml).expect("YAML");
        notifiers(&entries)
    }

    #[test]
    fn a_notifier_is_read_with_burrows_defaults() {
        let dir = std::env::temp_dir().join(format!("kshard-notifiers-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let open = dir.join("open.tmpl");
        std::fs::write(&open, "{{.Group}}").expect("template");
        let yaml = format!(
            "- name: ops\n  kind: http\n  template_open: {}\n  http: {{url_open: 'http://h/x'}}\n\
             - name: mail\n  kind: email\n  threshold: ERR\n  template_open: {}\n  email: {{server: smtp, from: a@b, to: ['c@d, e@f']}}\n",
            open.display(),
            open.display()
        );
        let n = read(&yaml).expect("valid");
        assert_eq!(
            (n[0].interval, n[0].repeat, n[0].send_close),
            (Duration::from_secs(60), Duration::from_secs(60), false)
        );
        let NotifierSender::Email(mail) = &n[1].sender else { panic!("email") };
        assert_eq!((mail.port, mail.tls, mail.to.len()), (587, MailTls::StartTls, 2));
        assert_eq!(n[1].threshold, NoticeThreshold::Err);
        let err = |yaml: &str| read(yaml).expect_err("refused").to_string();
        assert!(err("- kind: http\n").contains("notifiers[0].name"));
        assert!(
            err(&format!("- name: a\n  kind: sms\n  template_open: {}\n", open.display()))
                .contains("notifiers[0].kind")
        );
        assert!(
            err("- name: a\n  kind: http\n  template_open: /nowhere.tmpl\n  http: {url_open: 'http://h'}\n")
                .contains("template_open")
        );
        assert!(
            err(&format!(
                "- name: a\n  kind: email\n  template_open: {}\n  email: {{server: s, from: a@b}}\n",
                open.display()
            ))
            .contains("email.to")
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}
