//! One [`RecordWriter`] shared by many appenders (a member's primaries), on a
//! cluster of three real brokers (`scripts/cluster.sh`): the broker holding
//! one partition's only replica is killed, and appends to the partitions on
//! the other brokers keep being acknowledged — a partition without a leader
//! fails only its own appends.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use kshard_kafka::{Admin, Client, RecordWriter, TopicSpec};
use kshard_testkit::{Cluster, unique_name};

/// What one partition's appender saw: (when, acknowledged) per append.
type Seen = Vec<(Instant, bool)>;

#[test]
#[ignore = "needs the real broker or etcd: scripts/test.sh runs it (or cargo test -- --include-ignored)"]
fn a_partition_without_a_leader_fails_only_its_own_appends() {
    let cluster = Cluster::start(&[]);
    let settings = Client::to_brokers(cluster.brokers());
    let admin = Admin::new(&settings, Duration::from_secs(30)).expect("admin");
    let topic = unique_name("writer-cluster");
    admin
        .create_topic(&TopicSpec { name: topic.clone(), partitions: 3, replication: 1, configs: vec![] })
        .expect("create");
    let leaders: BTreeMap<i32, i32> = admin.leaders(&topic).expect("leaders").into_iter().collect();
    assert_eq!(leaders.len(), 3, "a leader for each partition: {leaders:?}");
    let (victim_partition, victim) = leaders.iter().map(|(p, b)| (*p, *b)).next().expect("a partition");
    // The writer the runtime's replicas share.
    let writer = Arc::new(RecordWriter::for_existing_topics(&settings).expect("writer"));
    let stop = Arc::new(AtomicBool::new(false));
    let seen: Vec<Arc<Mutex<Seen>>> = (0..3).map(|_| Arc::default()).collect();
    // One appender per partition, each waiting for its record before the
    // next, as a primary does.
    let appenders: Vec<_> = (0..3)
        .map(|p| {
            let (writer, stop, topic, seen) =
                (Arc::clone(&writer), Arc::clone(&stop), topic.clone(), Arc::clone(&seen[p as usize]));
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    let ok = writer
                        .append(&topic, p, b"k", Some(b"value"))
                        .and_then(|d| d.wait(Duration::from_secs(10)))
                        .is_ok();
                    seen.lock().unwrap_or_else(PoisonError::into_inner).push((Instant::now(), ok));
                    std::thread::sleep(Duration::from_millis(50));
                }
            })
        })
        .collect();
    std::thread::sleep(Duration::from_secs(2));
    let killed = Instant::now();
    cluster.kill(victim);
    std::thread::sleep(Duration::from_secs(20));
    let down = Instant::now();
    cluster.resume(victim);
    // Back: the victim's partition is written again (its appender's first
    // success after the restart ends the test).
    let back = Instant::now() + Duration::from_secs(90);
    while Instant::now() < back && !written_since(&seen[victim_partition as usize], down) {
        std::thread::sleep(Duration::from_millis(200));
    }
    stop.store(true, Ordering::Relaxed);
    for appender in appenders {
        appender.join().expect("appender");
    }
    let seen: Vec<Seen> = seen.iter().map(|s| s.lock().unwrap_or_else(PoisonError::into_inner).clone()).collect();
    assert!(
        seen[victim_partition as usize].iter().any(|(at, ok)| *ok && *at > down),
        "the victim's partition written again"
    );
    for (p, seen) in seen.iter().enumerate() {
        let during: Vec<(Instant, bool)> = seen.iter().copied().filter(|(at, _)| *at > killed && *at < down).collect();
        let failed = during.iter().filter(|(_, ok)| !ok).count();
        eprintln!(
            "partition {p} (broker {}): {} appends while broker {victim} was down, {failed} failed; {} in all",
            leaders[&(p as i32)],
            during.len(),
            seen.len()
        );
        // Partitions of the killed broker (its only replica) cannot be written.
        if leaders[&(p as i32)] == victim {
            continue;
        }
        assert_eq!(failed, 0, "partition {p}'s appends failed while another broker was down");
        // Acknowledged all along: every append waited for its own record
        // only, never for the dead partition's (each waits up to 10 s).
        let stalls = during.windows(2).filter(|w| w[1].0.duration_since(w[0].0) > Duration::from_secs(9)).count();
        assert_eq!(stalls, 0, "partition {p} waited on another partition's appends");
        assert!(during.len() > 1, "partition {p} written while another broker was down");
    }
}

/// True once a shared record of partition appends holds a success after `since`.
fn written_since(seen: &Mutex<Seen>, since: Instant) -> bool {
    seen.lock().unwrap_or_else(PoisonError::into_inner).iter().any(|(at, ok)| *ok && *at > since)
}
