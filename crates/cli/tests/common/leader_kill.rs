//! A fault both examples go through on three brokers: the leader of
//! partition 0 of one of their topics killed with -9 while a load is being
//! written, started again later. Partition leadership moves; the members
//! go on (or fail their replicas and retry); every output is exact with
//! the broker down and after it is back, with one PRIMARY per shard
//! throughout.

use std::time::{Duration, Instant};

use kshard_kafka::{Admin, Client, TopicPartition};
use kshard_testkit::Cluster;

use super::primaries::Sampler;
use super::sum_cluster::SumCluster;

/// The fault, on `cluster` (members `a` and `b`, serving, on `brokers`):
/// the leader of `victim`/0 is killed once the first of `rounds` loads of
/// `per_round` records has moved `watch` (a topic the load reaches:
/// the source, or an output), and the next loads are written while it is
/// down; `after` records more before and after it is started again.
pub(crate) fn leader_killed_under_load(
    brokers: &Cluster,
    etcd: &str,
    cluster: &mut SumCluster,
    victim: &str,
    watch: Vec<TopicPartition>,
    per_round: u64,
    after: u64,
) {
    let sampler = Sampler::start(etcd, &cluster.prefix);
    let admin = Admin::new(&Client::to_brokers(brokers.brokers()), Duration::from_secs(30)).expect("admin");
    // Made by the runtime as durable as a recovery log, whatever the
    // cluster's default: three replicas, two in sync for a write to count —
    // a leader can move, and no acknowledged write lives on the dead broker alone.
    let configs = admin.topic_configs(victim).expect("the topic's configuration");
    assert_eq!(configs.get("min.insync.replicas").cloned().flatten().as_deref(), Some("2"), "{victim}");
    let leader = admin.leaders(victim).expect("the topic's leaders")[&0];
    let moved_on = || -> i64 { admin.watermarks(&watch).map_or(0, |w| w.values().map(|(_, high)| high).sum()) };
    let before = moved_on();
    let producer = cluster.producer();
    // Load for some seconds (one run is over in a blink).
    let load = std::thread::spawn(move || {
        for _ in 0..10 {
            producer.produce(per_round);
            std::thread::sleep(Duration::from_millis(300));
        }
    });
    let deadline = Instant::now() + Duration::from_secs(60);
    while moved_on() <= before {
        assert!(Instant::now() < deadline, "the load moved nothing of {watch:?} within 60 s");
        std::thread::sleep(Duration::from_millis(20));
    }
    brokers.kill(leader);
    let killed = Instant::now();
    // Under load: the producer had not finished when the broker died (else
    // this is a kill between loads, which proves less).
    assert!(!load.is_finished(), "the load ended before broker {leader} was killed");
    // The controller fences the broker once its session times out, and
    // the partition gets a new leader.
    let deadline = Instant::now() + Duration::from_secs(60);
    while admin.leaders(victim).ok().and_then(|l| l.get(&0).copied()).is_none_or(|l| l == leader) {
        assert!(Instant::now() < deadline, "partition 0 of {victim} kept its dead leader {leader}");
        std::thread::sleep(Duration::from_millis(200));
    }
    let moved = killed.elapsed();
    // The load (one producer at a time: the sum's streams' sequences are
    // checked) and a batch after it, with the broker still down: exact on
    // the other two.
    load.join().expect("the load");
    cluster.produce(after);
    let served = |r: &_| SumCluster::served(r, &["a", "b"], 1);
    cluster.until(None, "served with a broker down", Duration::from_secs(90), served);
    cluster.assert_exact();
    eprintln!(
        "broker {leader} killed: {victim}/0's leader moved after {:.1} s; exact on the other two at {:.1} s",
        moved.as_secs_f64(),
        killed.elapsed().as_secs_f64()
    );
    brokers.resume(leader);
    cluster.produce(after);
    cluster.until(None, "served", Duration::from_secs(90), served);
    cluster.assert_exact();
    sampler.assert_one_primary_at_a_time();
}
