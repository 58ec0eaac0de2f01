//! kshard's alert rules (`deploy/prometheus/kshard-alerts.yaml`, each `for:`
//! a sixtieth: minutes read as seconds) fired end to end: Debian's
//! Prometheus scrapes kshard over the real broker and evaluates the rules,
//! Debian's Alertmanager routes them to a webhook receiver of the test's
//! own. A group that stops committing while behind (ERR), one that commits
//! but falls further behind each time (WARN) and one whose unread records
//! retention deletes (records lost) each raise their alert at the receiver,
//! and each alert resolves once its group has caught up. A lag objective
//! over the stopped group (`kshard objectives`' rules, its window an hour)
//! burns its budget fast and pages through the same route.

mod common;

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use common::*;
use kshard_kafka::OffsetCommitter;
use kshard_lag::service::ServeOptions;
use kshard_testkit::{Alertmanager, Broker, Delivery, Prometheus, WebhookReceiver, unique_name};

/// Seconds between Prometheus's scrapes and between its rule evaluations.
const EVALUATION_SECONDS: u64 = 1;

/// kshard's rule file with every `for: Nm` made `for: Ns`.
fn rules_in_seconds() -> String {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/prometheus/kshard-alerts.yaml");
    let text = std::fs::read_to_string(&path).expect("deploy/prometheus/kshard-alerts.yaml");
    let re = regex::Regex::new(r"(?m)^(\s+for: )(\d+)m$").expect("a regex");
    assert!(re.is_match(&text), "the rules have `for:` durations in minutes");
    re.replace_all(&text, "${1}${2}s").into_owned()
}

/// `(status, alertname, group_id)` of every alert the receiver was sent.
fn notified(deliveries: &[Delivery]) -> BTreeSet<(String, String, String)> {
    let mut out = BTreeSet::new();
    for d in deliveries {
        let body: serde_json::Value = serde_json::from_str(&d.body).expect("Alertmanager's webhook JSON");
        for a in body["alerts"].as_array().into_iter().flatten() {
            let s = |v: &serde_json::Value| v.as_str().unwrap_or_default().to_owned();
            out.insert((s(&a["status"]), s(&a["labels"]["alertname"]), s(&a["labels"]["group_id"])));
        }
    }
    out
}

#[test]
#[ignore = "needs the real broker or etcd: scripts/test.sh runs it (or cargo test -- --include-ignored)"]
fn stopped_falling_behind_and_lost_groups_alert_and_resolve_through_alertmanager() {
    let broker = Broker::from_env_or_start();
    let p = unique_name("alerts");
    let w = Writer::new(broker.brokers(), &p);
    let (topic, doomed) = (format!("{p}-t"), format!("{p}-doomed"));
    w.topic(&topic, &[100]);
    w.topic(&doomed, &[100]);
    w.flush();
    let group = |name: &str| format!("{p}-{name}");
    let committer = |name: &str| OffsetCommitter::new(&w.client, &group(name)).expect("committer");
    let (stopped, behind, lost) = (committer("stopped"), committer("behind"), committer("lost"));
    lost.commit(&[(&doomed, 0, 10)]).expect("commit");
    let mut service = TestService::start(ServeOptions {
        watermark_interval: Duration::from_millis(500),
        monitor: only(&p),
        ..ServeOptions::new(w.settings.clone())
    });
    service.wait_ready();

    let receiver = WebhookReceiver::start();
    let alertmanager = Alertmanager::start(&format!(
        "route: {{receiver: test, group_by: [alertname, group_id], group_wait: 0s, group_interval: 1s, repeat_interval: 1h}}\n\
         receivers: [{{name: test, webhook_configs: [{{url: '{}', send_resolved: true}}]}}]\n",
        receiver.url("/alerts")
    ));
    let dir = std::env::temp_dir().join(unique_name("kshard-alert-rules"));
    std::fs::create_dir_all(&dir).expect("a folder for the rules");
    let rules = dir.join("kshard-alerts.yaml");
    std::fs::write(&rules, rules_in_seconds()).expect("the rules");
    // 1 s of lag, 99% of an hour: the burn-rate windows scale down to 30 s.
    let objective = kshard_lag::Objective {
        name: "stopped-fresh".into(),
        selector: kshard_lag::Matcher::parse_selector(&format!("group_id=\"{}\"", group("stopped")))
            .expect("a selector"),
        lag_seconds: 1.0,
        target: 0.99,
        window: Duration::from_secs(3600),
    };
    let objectives = dir.join("kshard-objectives.yaml");
    std::fs::write(&objectives, kshard_lag::prometheus_rules(&[objective], "kshard")).expect("the objectives' rules");
    let prometheus = Prometheus::start(&format!(
        "global: {{scrape_interval: {EVALUATION_SECONDS}s, evaluation_interval: {EVALUATION_SECONDS}s}}\n\
         rule_files: ['{}', '{}']\n\
         alerting: {{alertmanagers: [{{static_configs: [{{targets: ['{}']}}]}}]}}\n\
         scrape_configs: [{{job_name: kshard, static_configs: [{{targets: ['{}']}}]}}]\n",
        rules.display(),
        objectives.display(),
        alertmanager.address(),
        service.addr()
    ));

    let expected = [
        ("KafkaConsumerGroupError", group("stopped")),
        ("KafkaConsumerGroupFallingBehind", group("behind")),
        ("KafkaConsumerGroupRecordsLost", group("lost")),
        ("KafkaLagObjectiveBurnFast", group("stopped")),
    ];
    let has = |seen: &BTreeSet<(String, String, String)>, status: &str| {
        expected.iter().all(|(alert, g)| seen.contains(&(status.to_owned(), (*alert).to_owned(), g.clone())))
    };

    // "stopped" commits twice, 1.1 s apart, and stops while 80 behind;
    // "behind" commits every 1.1 s, 5 further on while 10 more records
    // arrive: its lag grows at every commit. Retention (here DeleteRecords)
    // takes "lost"'s unread records up to 50.
    stopped.commit(&[(&topic, 0, 10)]).expect("commit");
    let (mut behind_at, mut end) = (10, 100);
    behind.commit(&[(&topic, 0, behind_at)]).expect("commit");
    std::thread::sleep(Duration::from_millis(1100));
    stopped.commit(&[(&topic, 0, 20)]).expect("commit");
    assert_eq!(w.admin.delete_records(&doomed, 0, 50).expect("delete records"), 50);
    let err_gauge = format!("kshard_kafka_consumer_group_status{{group_id=\"{}\",status=\"ERR\"}}", group("stopped"));

    let deadline = Instant::now() + Duration::from_secs(240);
    let (mut stopped_since, mut pending_since, mut stop_notified) = (None, None, None);
    let pending = format!("ALERTS{{alertname=\"KafkaConsumerGroupError\",group_id=\"{}\"}}", group("stopped"));
    let (mut healed, mut healed_at) = (false, usize::MAX);
    let mut last_commit = Instant::now();
    loop {
        if last_commit.elapsed() >= Duration::from_millis(1100) {
            last_commit = Instant::now();
            if healed {
                // Caught up: each group commits the end of its topic.
                for (c, t, at) in [(&stopped, &topic, end), (&behind, &topic, end), (&lost, &doomed, 100)] {
                    c.commit(&[(t, 0, at)]).expect("commit");
                }
            } else {
                w.produce(&topic, &[10]);
                end += 10;
                behind_at += 5;
                behind.commit(&[(&topic, 0, behind_at)]).expect("commit");
            }
        }
        if stopped_since.is_none() && service.metrics().get(&err_gauge) == Some(&3.0) {
            stopped_since = Some(Instant::now());
        }
        if pending_since.is_none() && prometheus.query(&pending).is_ok_and(|s| !s.is_empty()) {
            pending_since = Some(Instant::now());
        }
        let deliveries = receiver.received();
        let seen = notified(&deliveries);
        // Resolves count only once healed (a flap before would not do).
        let resolved = notified(&deliveries[healed_at.min(deliveries.len())..]);
        if stop_notified.is_none()
            && seen.contains(&("firing".into(), "KafkaConsumerGroupError".into(), group("stopped")))
        {
            stop_notified = Some(Instant::now());
        }
        if !healed && has(&seen, "firing") {
            healed = true;
            healed_at = deliveries.len();
        }
        if healed && has(&resolved, "resolved") {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "after 240 s the receiver had (healed: {healed}): {seen:#?}\nexpected firing, then resolved: {expected:#?}"
        );
        std::thread::sleep(Duration::from_millis(250));
    }
    // The target: the stopped group's alert within its `for` and an
    // evaluation of its ERR status (measured, not asserted: timing is the
    // machine's).
    if let (Some(since), Some(pending), Some(at)) = (stopped_since, pending_since, stop_notified) {
        eprintln!(
            "the stopped group's alert reached the receiver {:.1} s after kshard showed it ERR, {:.1} s after \
             Prometheus held it pending (for: 5 s, scrapes and evaluations every {EVALUATION_SECONDS} s)",
            at.saturating_duration_since(since).as_secs_f64(),
            at.saturating_duration_since(pending).as_secs_f64()
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}
