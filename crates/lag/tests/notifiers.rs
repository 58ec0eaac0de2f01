//! Burrow's notifiers over the real broker, each against a receiver of the
//! test's own: Burrow's own default HTTP templates (open, then close with
//! the incident's id, to a URL made by a template) to a local HTTP server,
//! and Burrow's default email template through a local SMTP server that
//! requires STARTTLS and a password (Debian's aiosmtpd), for a group that
//! stops committing while behind; each notice once, the close when the
//! group commits the end, and the counts in `/metrics`.

mod common;

use std::time::Duration;

use common::pki::certificate;
use common::*;
use kshard_kafka::OffsetCommitter;
use kshard_lag::service::{ProcessOptions, ServeOptions};
use kshard_lag::{HttpTarget, MailTarget, MailTls, NameFilter, NoticeThreshold, NotifierSender, NotifierSettings};
use kshard_testkit::{Broker, SmtpSink, WebhookReceiver, unique_name};

#[test]
#[ignore = "needs the real broker or etcd: scripts/test.sh runs it (or cargo test -- --include-ignored)"]
fn burrows_templates_reach_an_http_server_and_a_starttls_smtp_server() {
    let broker = Broker::from_env_or_start();
    let p = unique_name("notify");
    let w = Writer::new(broker.brokers(), &p);
    let topic = format!("{p}-t");
    w.topic(&topic, &[100]);
    w.flush();
    let (stopped, ok) = (format!("{p}-stopped"), format!("{p}-fine"));
    let committer = OffsetCommitter::new(&w.client, &stopped).expect("committer");
    OffsetCommitter::new(&w.client, &ok).expect("committer").commit(&[(&topic, 0, 100)]).expect("commit");

    // The SMTP server's certificate, by a CA of the test's own.
    let dir = std::env::temp_dir().join(unique_name("kshard-notify-pki"));
    std::fs::create_dir_all(&dir).expect("dir");
    let (ca, ca_key) = certificate("kshard test CA", "ca.kshard.test", None);
    let (cert, key) = certificate("127.0.0.1", "127.0.0.1", Some((&ca, &ca_key)));
    let file = |name: &str, pem: Vec<u8>| {
        let path = dir.join(name);
        std::fs::write(&path, pem).expect("a PEM file");
        path
    };
    let ca_file = file("ca.pem", ca.to_pem().expect("pem"));
    let (cert_file, key_file) =
        (file("smtp.pem", cert.to_pem().expect("pem")), file("smtp.key", key.private_key_to_pem_pkcs8().expect("pem")));
    let smtp = SmtpSink::start(&cert_file, &key_file, "kshard", "s3cret");
    let receiver = WebhookReceiver::start();

    let only_ours = NameFilter::new(&[format!("{p}-.*")], &[]).expect("filter");
    let common = |name: &str, threshold, sender| NotifierSettings {
        name: name.into(),
        cluster: None,
        groups: only_ours.clone(),
        threshold,
        interval: Duration::from_millis(500),
        repeat: Duration::from_secs(3600),
        send_close: false,
        extras: [("api_key".to_owned(), "k-1".to_owned()), ("app".to_owned(), "billing".to_owned())].into(),
        template_open: String::new(),
        template_close: None,
        sender,
    };
    let http = NotifierSettings {
        send_close: true,
        template_open: published("burrow-default-http-post.tmpl"),
        template_close: Some(published("burrow-default-http-delete.tmpl")),
        ..common(
            "events",
            NoticeThreshold::Warn,
            NotifierSender::Http(HttpTarget {
                url_open: receiver.url("/v1/{{.Group}}"),
                url_close: Some(receiver.url("/v1/{{.Group}}/{{.Id}}")),
                method_open: "POST".into(),
                method_close: "DELETE".into(),
                headers: vec![("X-Team".into(), "data".into())],
                basic_auth: Some(("burrow".into(), "pw".into())),
                timeout: Duration::from_secs(5),
                ca_file: None,
                insecure_skip_verify: false,
            }),
        )
    };
    let mail = NotifierSettings {
        template_open: published("burrow-default-email.tmpl"),
        ..common(
            "mail",
            NoticeThreshold::Err,
            NotifierSender::Email(MailTarget {
                server: "127.0.0.1".into(),
                port: smtp.port(),
                tls: MailTls::StartTls,
                credentials: Some(("kshard".into(), "s3cret".into())),
                from: "kshard@example.com".into(),
                to: vec!["oncall@example.com".into(), "data@example.com".into()],
                ca_file: Some(ca_file.clone()),
                insecure_skip_verify: false,
                timeout: Duration::from_secs(10),
            }),
        )
    };
    let process = ProcessOptions { notifiers: vec![http, mail], ..ProcessOptions::default() };
    let mut service = TestService::start_as(
        process,
        vec![ServeOptions {
            watermark_interval: Duration::from_millis(200),
            monitor: only(&p),
            ..ServeOptions::new(w.settings.clone())
        }],
    );
    service.wait_ready();

    // Two commits 1.1 s apart, then none while 80 behind: STOP, the group ERR.
    committer.commit(&[(&topic, 0, 10)]).expect("commit");
    std::thread::sleep(Duration::from_millis(1100));
    committer.commit(&[(&topic, 0, 20)]).expect("commit");

    let (within, every) = (Duration::from_secs(120), Duration::from_millis(200));
    // The first request starting with `method`, once the receiver has one.
    let request = |method: &str| {
        let got = receiver.received();
        got.iter().find(|d| d.request_line.starts_with(method)).cloned().ok_or_else(|| format!("{got:?}"))
    };
    let opened = until("an open notice", within, every, || request("POST "));
    assert_eq!(opened.request_line, format!("POST /v1/{stopped} HTTP/1.1"), "the URL from its template");
    assert_eq!(opened.headers.get("x-team").map(String::as_str), Some("data"));
    assert_eq!(opened.headers.get("content-type").map(String::as_str), Some("application/json"));
    assert_eq!(opened.headers.get("authorization").map(String::as_str), Some("Basic YnVycm93OnB3"));
    let body: serde_json::Value = serde_json::from_str(&opened.body).expect("Burrow's JSON");
    let event = &body["events"][0];
    assert_eq!(event["event"]["severity"], "ERR");
    assert_eq!(event["event"]["group"], stopped.as_str());
    assert_eq!(event["event"]["partitions"][0]["status"], "STOP");
    assert_eq!(event["event"]["partitions"][0]["current_lag"], 80);
    assert_eq!(body["api_key"], "k-1");
    let id = event["id"].as_str().expect("the incident's id").to_owned();

    // The mail, through STARTTLS with the password.
    let mail = until("a mail", within, every, || smtp.messages().into_iter().next().ok_or_else(|| "none".to_owned()));
    assert!(mail.contains("X-Session-TLS: yes"), "{mail}");
    assert!(mail.contains("X-Envelope-To: oncall@example.com,data@example.com"), "{mail}");
    assert!(mail.contains("Subject: [Burrow] Kafka Consumer Lag Alert"), "{mail}");
    assert!(mail.contains(&format!("Group:    {stopped}")), "{mail}");
    assert!(mail.contains("Status:   ERR"), "{mail}");
    assert!(mail.contains(&format!("STOP {topic}:0")), "{mail}");

    // Caught up: the close notice, with the same id, once.
    committer.commit(&[(&topic, 0, 100)]).expect("commit");
    let closed = until("a close notice", within, every, || request("DELETE "));
    assert_eq!(closed.request_line, format!("DELETE /v1/{stopped}/{id} HTTP/1.1"));
    let close: serde_json::Value = serde_json::from_str(&closed.body).expect("JSON");
    assert_eq!(close["ids"][0], id.as_str());
    // The counts are bumped once each exchange ended: waited for.
    let count = |m: &std::collections::BTreeMap<String, f64>, notifier: &str, kind: &str| {
        m.get(&format!("kshard_notifier_notices_total{{notifier=\"{notifier}\",kind=\"{kind}\",outcome=\"sent\"}}"))
            .copied()
    };
    service.eventually("the notices counted", |m| {
        (count(m, "events", "open"), count(m, "events", "close"), count(m, "mail", "open"))
            == (Some(1.0), Some(1.0), Some(1.0))
    });
    let got = receiver.received();
    assert_eq!(got.len(), 2, "one open notice (repeat 1 h), one close, none for the group that is fine: {got:?}");
    assert_eq!(smtp.messages().len(), 1, "the mail notifier sends no close notice (send_close off)");
    let _ = std::fs::remove_dir_all(&dir);
}
