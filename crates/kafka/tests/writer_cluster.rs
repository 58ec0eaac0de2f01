//! One [`RecordWriter`] shared by many appenders (a member's primaries), on a
//! cluster of three real brokers (`scripts/cluster.sh`): the broker holding
//! one partition's only replica is killed, and appends to the partitions on
//! the other brokers keep being acknowledged — a partition without a leader
//! fails only its own appends.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use kshard_kafka::{Admin, ClientSettings, RecordWriter, TopicSpec};
use kshard_testkit::{Cluster, unique_name};

/// What one partition's appender saw: (when, acknowledged) per append.
type Seen = Vec<(Instant, bool)>;

#[test]
fn a_partition_without_a_leader_fails_only_its_own_appends() {
    let cluster = Cluster::start(&[]);
    let settings = ClientSettings::new(cluster.brokers());
    let admin = Admin::new(&settings, Duration::from_secs(30)).expect("admin");
    let topic = unique_name("writer-cluster");
    admin
        .create_topic(&TopicSpec { name: topic.clone(), partitions: 3, replication: 1, configs: vec![] })
        .expect("create");
    let leaders: BTreeMap<i32, i32> = admin.leaders(&topic).expect("leaders").into_iter().collect();
    assert_eq!(leaders.len(), 3, "a leader for each partition: {leaders:?}");
    let (victim_partition, victim) = leaders.iter().map(|(p, b)| (*p, *b)).next().expect("a partition");
    let writer = Arc::new(RecordWriter::new(&settings).expect("writer"));
    let stop = Arc::new(AtomicBool::new(false));
    // One appender per partition, each waiting for its record before the
    // next, as a primary does.
    let appenders: Vec<_> = (0..3)
        .map(|p| {
            let (writer, stop, topic) = (Arc::clone(&writer), Arc::clone(&stop), topic.clone());
            std::thread::spawn(move || {
                let mut seen = Seen::new();
                while !stop.load(Ordering::Relaxed) {
                    let ok = writer
                        .append(&topic, p, b"k", Some(b"value"))
                        .and_then(|d| d.wait(Duration::from_secs(10)))
                        .is_ok();
                    seen.push((Instant::now(), ok));
                    std::thread::sleep(Duration::from_millis(50));
                }
                seen
            })
        })
        .collect();
    std::thread::sleep(Duration::from_secs(2));
    let killed = Instant::now();
    cluster.kill(victim);
    std::thread::sleep(Duration::from_secs(20));
    let down = Instant::now();
    cluster.resume(victim);
    std::thread::sleep(Duration::from_secs(8));
    stop.store(true, Ordering::Relaxed);
    let seen: Vec<Seen> = appenders.into_iter().map(|a| a.join().expect("appender")).collect();
    for (p, seen) in seen.iter().enumerate() {
        let during: Vec<bool> = seen.iter().filter(|(at, _)| *at > killed && *at < down).map(|(_, ok)| *ok).collect();
        let failed = during.iter().filter(|ok| !**ok).count();
        eprintln!(
            "partition {p} (broker {}): {} appends while broker {victim} was down, {failed} failed; {} in all",
            leaders[&(p as i32)],
            during.len(),
            seen.len()
        );
        if p as i32 == victim_partition {
            continue;
        }
        assert_eq!(failed, 0, "partition {p}'s appends failed while another broker was down");
        assert!(during.len() > 100, "partition {p} stalled while another broker was down: {} appends", during.len());
    }
    // Back: the victim's partition is written again.
    let victim_seen = &seen[victim_partition as usize];
    assert!(victim_seen.iter().rev().take(5).all(|(_, ok)| *ok), "partition {victim_partition} written again");
}
