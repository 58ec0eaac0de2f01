//! Lag in seconds on the real broker: the age of the record at a group's
//! committed offset, against the times the test produced the records; and,
//! once that record is deleted, the estimate from the high watermarks kshard
//! saw while the records were written, labelled so.

mod common;

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use common::*;
use kshard_testkit::{Broker, unique_name};

fn now_ms() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64)
}

/// (lag_seconds, method) of `group`'s partition 0, from `/api/groups`.
fn seconds(service: &mut TestService, group: &str) -> Option<(f64, String)> {
    let (_, body) = service.get("/api/groups");
    let groups: serde_json::Value = serde_json::from_str(&body).ok()?;
    let g = groups.as_array()?.iter().find(|g| g["group_id"] == group)?;
    let p = &g["topics"][0]["partitions"][0];
    Some((p["lag_seconds"].as_f64()?, p["lag_seconds_method"].as_str()?.to_owned()))
}

#[test]
fn lag_in_seconds_is_the_age_of_the_first_unconsumed_record() {
    let broker = Broker::from_env_or_start();
    let p = unique_name("seconds");
    let w = Writer::new(broker.brokers(), &p);
    let topic = format!("{p}-t");
    w.topic(&topic, &[0]);
    let (read, gone) = (format!("{p}-read"), format!("{p}-gone"));
    w.commit(&read, &topic, 0, 3, 0);
    w.commit(&gone, &topic, 0, 3, 0);
    w.flush();
    let mut service = TestService::start(options(&w, "kshard", only(&p)));
    service.wait_ready();

    // Ten records, two seconds, ten more: kshard sees the high watermark move.
    let first = now_ms();
    w.produce(&topic, &[10]);
    w.flush();
    std::thread::sleep(Duration::from_secs(2));
    let second = now_ms();
    w.produce(&topic, &[10]);
    w.flush();
    std::thread::sleep(Duration::from_secs(1));
    // "read" stops at the first record of the second ten; "gone" in the first
    // ten, at a record deleted before kshard could read it.
    assert_eq!(w.admin.delete_records(&topic, 0, 8).expect("delete records"), 8);
    w.commit(&read, &topic, 0, 3, 10);
    w.commit(&gone, &topic, 0, 3, 5);
    w.flush();

    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (r, g) = (seconds(&mut service, &read), seconds(&mut service, &gone));
        let now = now_ms();
        if let (Some((r, r_method)), Some((g, g_method))) = (&r, &g)
            && r_method == "record"
            && g_method == "estimate"
        {
            let truth_read = (now - second) as f64 / 1000.0;
            let truth_gone = (now - first) as f64 / 1000.0;
            assert!((r - truth_read).abs() <= 1.0, "read: {r} s, produced {truth_read:.2} s ago");
            assert!((g - truth_gone).abs() <= 1.0, "gone: {g} s estimated, produced {truth_gone:.2} s ago");
            let m = service.metrics();
            let series = format!(
                "kshard_kafka_consumer_group_topic_partition_lag_seconds{{group_id=\"{read}\",topic_name=\"{topic}\",partition_id=\"0\",method=\"record\"}}"
            );
            assert!(m.get(&series).is_some_and(|s| (s - truth_read).abs() <= 1.5), "{series} in {m:?}");
            let max = format!(
                "kshard_kafka_consumer_group_topic_max_lag_seconds{{group_id=\"{gone}\",topic_name=\"{topic}\"}}"
            );
            assert!(m.get(&max).is_some_and(|s| *s > 2.0), "{max}");
            return;
        }
        assert!(Instant::now() < deadline, "lag in seconds never arrived: read {r:?}, gone {g:?}");
        std::thread::sleep(Duration::from_millis(200));
    }
}
