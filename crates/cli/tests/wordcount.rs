//! `kshard example wordcount` on real processes, the real broker and etcd:
//! lines split into words (published to a repartition topic) and counted
//! (every count's update published), both stages exactly once — through a
//! member killed with -9 under load and restarted, and a member paused past
//! its lease and resumed (a zombie, its open transactions aborted and its
//! writes refused at the broker); and, on three brokers, the leader of an
//! output partition killed under load. `verify` reads every count's update
//! as a consumer of committed records: 1, 2, 3 … for every word, to its true
//! count, none twice and none missing.

mod common;

use std::time::{Duration, Instant};

use common::leader_kill::leader_killed_under_load;
use common::sum_cluster::SumCluster;
use kshard_kafka::TopicPartition;
use kshard_testkit::{Cluster, Etcd};

const LEASE_TTL: u64 = 3;

#[test]
#[ignore = "needs the real broker or etcd: scripts/test.sh runs it (or cargo test -- --include-ignored)"]
fn words_are_counted_exactly_once_through_kill_9_and_a_zombie() {
    let etcd = Etcd::from_env_or_start();
    let mut cluster = SumCluster::new("wordcount", Some(etcd.endpoint()), 2, LEASE_TTL);
    cluster.app = "wordcount";
    cluster.produce(1_000);
    cluster.start("a", &[]);
    cluster.start("b", &[]);
    cluster.assert_exact();

    // kill -9 under load: lines keep coming while member a dies and restarts.
    let producer = cluster.producer();
    let load = std::thread::spawn(move || {
        for _ in 0..6 {
            producer.produce(500);
            std::thread::sleep(Duration::from_millis(200));
        }
    });
    std::thread::sleep(Duration::from_millis(500));
    cluster.signal("a", "KILL");
    let killed = Instant::now();
    cluster.reap("a");
    cluster.start("a", &[]);
    eprintln!("member a killed with -9 and restarted after {:.1} s", killed.elapsed().as_secs_f64());
    load.join().expect("the load");
    cluster.assert_exact();

    // A zombie: b paused past its lease while lines come, then resumed.
    cluster.signal("b", "STOP");
    cluster.produce(1_000);
    std::thread::sleep(Duration::from_secs(LEASE_TTL + 3));
    cluster.signal("b", "CONT");
    cluster.produce(500);
    cluster.assert_exact();
}

/// On a cluster of three brokers, the broker leading partition 0 of
/// `<topic>-words` is killed under load and started again. That topic is
/// the one of the two outputs that exercises more: every split shard
/// publishes to it in its transactions (each word goes to the partition it
/// hashes to), and shard `count-000` reads it as its source, committed
/// records only — so the kill hits open transactions of several producers
/// at once, their commit markers, and a read_committed consumer's last
/// stable offset, all on the partition whose leader moves. Every count's
/// update exactly once after it; one PRIMARY per shard throughout.
#[test]
#[ignore = "needs the real broker or etcd: scripts/test.sh runs it (or cargo test -- --include-ignored)"]
fn the_leader_of_an_output_partition_killed_under_load() {
    // A default of one replica in sync: the outputs must not take it.
    let brokers = Cluster::start(&["min.insync.replicas=1"]);
    let etcd = Etcd::from_env_or_start();
    let mut cluster = SumCluster::on(brokers.brokers(), "wordcount-leader", Some(etcd.endpoint()), 3, LEASE_TTL);
    cluster.app = "wordcount";
    cluster.start("a", &[]);
    cluster.start("b", &[]);
    cluster.until(None, "served", Duration::from_secs(90), |r| SumCluster::served(r, &["a", "b"], 1));
    // Killed once the split stage publishes the load's words to partition 0.
    let words = format!("{}-words", cluster.topic);
    let watch = vec![TopicPartition::new(words.clone(), 0)];
    leader_killed_under_load(&brokers, etcd.endpoint(), &mut cluster, &words, watch, 400, 1_000);
}
