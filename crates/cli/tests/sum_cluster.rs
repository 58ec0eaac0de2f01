//! The runtime proven with its first application, `kshard example sum`, as
//! processes on loopback with the real broker and the real etcd: shards
//! assigned at start (a primary and a hot standby on distinct members), a
//! standby taking over when the primary's process is killed with -9, a zombie
//! primary's late writes ignored, an etcd restart survived, a restart on the
//! data directory replaying nothing,
//! an orderly shutdown leaving no keys, replay bounded by snapshots with the
//! log truncated behind them, a soak of random kill -9s under load, etcd
//! down for longer than the lease, the allocator's leader frozen past its
//! lease and resumed (these two sampling etcd throughout for two PRIMARY
//! replicas of a shard), a retention cut inside a snapshot — and every sum
//! exact after each.

mod common;

use std::time::{Duration, Instant};

use common::primaries::Sampler;
use common::sum_cluster::SumCluster;
use kshard_runtime::keyspace::EtcdKeyspace;
use kshard_runtime::keyspace::{Keyspace, Snapshot};
use kshard_testkit::Etcd;

const LEASE_TTL: u64 = 3;

/// The length of member `id`'s log now: where what it logs next begins.
fn logged(cluster: &SumCluster, id: &str) -> usize {
    std::fs::read_to_string(cluster.dir.join(format!("{id}.log"))).map_or(0, |log| log.len())
}

/// What member `id` logged from byte `from` to byte `to` (`None`: to now).
fn log_between(cluster: &SumCluster, id: &str, from: usize, to: Option<usize>) -> String {
    let log = std::fs::read_to_string(cluster.dir.join(format!("{id}.log"))).unwrap_or_default();
    log.get(from..to.unwrap_or(log.len()).min(log.len())).unwrap_or_default().to_owned()
}

/// Whether `log` has a line of a replica becoming primary (a fenced
/// replica's error quotes the same words: not that).
fn took_over(log: &str) -> bool {
    log.lines().any(|l| l.contains("took the recovery log over") && !l.contains("fenced"))
}

/// What etcd holds under `prefix` now.
fn etcd_read(endpoint: &str, prefix: &str) -> Snapshot {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
    runtime.block_on(async {
        let ks = EtcdKeyspace::connect(&[endpoint.to_owned()]).await.expect("etcd");
        ks.get_prefix(prefix).await.expect("reads")
    })
}

fn etcd_keys(endpoint: &str, prefix: &str) -> Vec<String> {
    etcd_read(endpoint, &format!("{prefix}/")).kvs.into_iter().map(|kv| kv.key).collect()
}

#[test]
#[ignore = "needs the real broker or etcd: scripts/test.sh runs it (or cargo test -- --include-ignored)"]
fn a_standby_takes_over_when_the_primarys_process_is_killed_and_every_sum_stays_exact() {
    let etcd = Etcd::from_env_or_start();
    let mut cluster = SumCluster::new("sum-failover", Some(etcd.endpoint()), 4, LEASE_TTL);
    cluster.produce(5_000);
    for m in ["a", "b", "c"] {
        cluster.start(m, &[]);
    }
    // Assignment at start: every shard a primary and a standby, on distinct members.
    cluster.until(None, "every shard served", Duration::from_secs(60), |r| SumCluster::served(r, &["a", "b", "c"], 1));
    cluster.assert_exact();
    cluster.produce(5_000);
    // Who stands by for whom, read just before the kill (work may have moved
    // since the members started: make-before-break moves to the last to join).
    let rows = cluster
        .until(None, "every shard served", Duration::from_secs(60), |r| SumCluster::served(r, &["a", "b", "c"], 1));
    let primaries = SumCluster::primaries(&rows);
    let (victim, _) = primaries.iter().max_by_key(|(_, n)| **n).expect("a primary");
    let victim = victim.clone();
    let standbys_of_victim: Vec<(String, String)> = rows
        .iter()
        .filter(|r| r.status == "PRIMARY" && r.member == victim)
        .filter_map(|pr| {
            rows.iter()
                .find(|s| s.shard == pr.shard && s.status == "STANDBY")
                .map(|s| (s.shard.clone(), s.member.clone()))
        })
        .collect();
    cluster.signal(&victim, "KILL");
    let killed = Instant::now();
    cluster.reap(&victim);
    let survivors: Vec<&str> = ["a", "b", "c"].into_iter().filter(|m| *m != victim).collect();
    let rows = cluster.until(None, "every shard primary again on the survivors", Duration::from_secs(60), |r| {
        r.iter().filter(|x| x.status == "PRIMARY" && survivors.contains(&x.member.as_str())).count()
            == cluster.partitions as usize
    });
    let failover = killed.elapsed();
    eprintln!("fail-over after kill -9: {:.2} s (lease TTL {LEASE_TTL} s)", failover.as_secs_f64());
    // The standby of each lost primary is the one promoted: it was tailing.
    for (shard, standby) in &standbys_of_victim {
        assert!(
            rows.iter().any(|r| &r.shard == shard && &r.member == standby && r.status == "PRIMARY"),
            "{shard}: its standby {standby} was not promoted: {rows:#?}"
        );
    }
    // And the shards get their standbys back on the survivors.
    cluster.until(None, "standbys back", Duration::from_secs(60), |r| SumCluster::served(r, &survivors, 1));
    cluster.produce(5_000);
    cluster.assert_exact();
    // The survivors say how long their promotions took.
    let promoted = &standbys_of_victim[0].1;
    let parsed = cluster.metrics(promoted);
    let key = format!("kshard_runtime_failover_seconds{{shard=\"{}\"}}", standbys_of_victim[0].0);
    assert!(parsed.get(&key).is_some_and(|s| *s < 30.0), "{key} in\n{parsed:?}");
}

#[test]
#[ignore = "needs the real broker or etcd: scripts/test.sh runs it (or cargo test -- --include-ignored)"]
fn a_zombie_primarys_late_writes_are_ignored() {
    let etcd = Etcd::from_env_or_start();
    let mut cluster = SumCluster::new("sum-zombie", Some(etcd.endpoint()), 2, LEASE_TTL);
    cluster.start("a", &[]);
    cluster.until(None, "a serves alone", Duration::from_secs(60), |r| SumCluster::served(r, &["a"], 0));
    cluster.start("b", &[]);
    cluster.until(None, "a primary and a standby", Duration::from_secs(60), |r| SumCluster::served(r, &["a", "b"], 1));
    // Freeze the member holding primaries while records wait for it: its lease
    // runs out, the other takes over; then it wakes with transactions in hand.
    let rows = cluster.shards(None);
    let zombie = SumCluster::primaries(&rows).into_keys().next().expect("a primary");
    let other = if zombie == "a" { "b" } else { "a" };
    cluster.signal(&zombie, "STOP");
    cluster.produce(20_000);
    cluster.until(None, "the other member primary for every shard", Duration::from_secs(60), |r| {
        r.iter().filter(|x| x.status == "PRIMARY" && x.member == other).count() == cluster.partitions as usize
    });
    cluster.produce(5_000);
    let woke_at = logged(&cluster, &zombie);
    cluster.signal(&zombie, "CONT");
    // It wrote late: a commit appended after the other's hand-off, read
    // back as not applied, fails its replica as fenced (without that line,
    // this test would show nothing of late writes).
    let deadline = Instant::now() + Duration::from_secs(60);
    while !log_between(&cluster, &zombie, woke_at, None).contains(kshard_runtime::recovery_log::FENCED) {
        assert!(Instant::now() < deadline, "the zombie never wrote late (no fenced commit in its log after waking)");
        std::thread::sleep(Duration::from_millis(100));
    }
    // The zombie learns it lost its lease (or that it is fenced), stops its
    // replicas and joins again as a new member instance.
    cluster.until(None, "the zombie back as a standby", Duration::from_secs(60), |r| {
        SumCluster::served(r, &["a", "b"], 1)
    });
    cluster.produce(5_000);
    cluster.assert_exact();
}

#[test]
#[ignore = "needs the real broker or etcd: scripts/test.sh runs it (or cargo test -- --include-ignored)"]
fn an_etcd_restart_is_survived() {
    let etcd = Etcd::start_private();
    let mut cluster = SumCluster::new("sum-etcd-restart", Some(etcd.endpoint()), 2, 10);
    cluster.start("a", &[]);
    cluster.start("b", &[]);
    cluster.until(None, "served", Duration::from_secs(60), |r| SumCluster::served(r, &["a", "b"], 1));
    cluster.produce(5_000);
    etcd.kill();
    // Primaries keep consuming while etcd is down: they need it for changes
    // only. Shown while it is down: verify reads the recovery logs in Kafka.
    cluster.produce(5_000);
    cluster.assert_exact();
    etcd.resume();
    cluster.until(None, "served after the restart", Duration::from_secs(60), |r| SumCluster::served(r, &["a", "b"], 1));
    cluster.produce(5_000);
    cluster.assert_exact();
    // Still coordinating: a member that leaves hands its shards over.
    let rows = cluster.shards(None);
    let leaving = SumCluster::primaries(&rows).into_keys().next().expect("a primary");
    let staying = if leaving == "a" { "b" } else { "a" };
    cluster.signal(&leaving, "TERM");
    assert!(cluster.reap(&leaving).success(), "an orderly exit");
    cluster.until(None, "the other member serves alone", Duration::from_secs(60), |r| {
        SumCluster::served(r, &[staying], 0)
    });
    cluster.produce(5_000);
    cluster.assert_exact();
}

#[test]
#[ignore = "needs the real broker or etcd: scripts/test.sh runs it (or cargo test -- --include-ignored)"]
fn a_member_restarted_on_its_data_directory_replays_nothing_and_shutdown_leaves_no_keys() {
    let etcd = Etcd::from_env_or_start();
    let mut cluster = SumCluster::new("sum-restart", Some(etcd.endpoint()), 2, LEASE_TTL);
    cluster.produce(20_000);
    cluster.start("a", &[]);
    cluster.until(None, "served", Duration::from_secs(60), |r| SumCluster::served(r, &["a"], 0));
    cluster.assert_exact();
    cluster.signal("a", "TERM");
    assert!(cluster.reap("a").success(), "an orderly exit");
    // Nothing of the member stays: no member key, no assignment, no leader
    // (the shards' specs and hints are the application's, not the member's).
    let keys = etcd_keys(cluster.etcd.as_deref().unwrap_or_default(), &cluster.prefix);
    let kept = [format!("{}/shards/", cluster.prefix), format!("{}/hints/", cluster.prefix)];
    assert!(keys.iter().all(|k| kept.iter().any(|p| k.starts_with(p))), "keys left after shutdown: {keys:?}");

    let started = Instant::now();
    cluster.start("a", &[]);
    cluster.until(None, "served again", Duration::from_secs(60), |r| SumCluster::served(r, &["a"], 0));
    eprintln!("restart on the data directory: serving in {:.2} s", started.elapsed().as_secs_f64());
    // It played only the hand-offs written since (one per shard), not the log.
    let parsed = cluster.metrics("a");
    for shard in ["sum-000", "sum-001"] {
        // The series must be there: a bound on a missing one checks nothing.
        let played = parsed
            .get(&format!("kshard_runtime_playback_records_total{{shard=\"{shard}\"}}"))
            .copied()
            .unwrap_or_else(|| panic!("{shard}: no playback series\n{parsed:?}"));
        assert!(played <= 2.0, "{shard} replayed {played} records after a restart");
    }
    cluster.produce(2_000);
    cluster.assert_exact();
}

#[test]
#[ignore = "needs the real broker or etcd: scripts/test.sh runs it (or cargo test -- --include-ignored)"]
fn one_process_without_etcd_holds_every_shard_and_rebuilds_a_deleted_data_directory() {
    let mut cluster = SumCluster::new("sum-single", None, 3, LEASE_TTL);
    cluster.run_args =
        ["--snapshot-min-bytes", "2048", "--snapshot-factor", "1", "--max-txn-ms", "50"].map(str::to_owned).to_vec();
    cluster.produce(5_000);
    cluster.start("solo", &[]);
    cluster
        .until(Some("solo"), "every shard primary", Duration::from_secs(60), |r| SumCluster::served(r, &["solo"], 0));
    cluster.produce(5_000);
    cluster.assert_exact();
    let parsed = cluster.metrics("solo");
    let messages: f64 = (0..3)
        .filter_map(|p| parsed.get(&format!("kshard_runtime_transaction_messages_total{{shard=\"sum-{p:03}\"}}")))
        .sum();
    assert_eq!(messages, 10_000.0, "every message in exactly one committed transaction");

    // Snapshots let the log be truncated; a member whose data directory is
    // lost rebuilds every store from the log's start (a snapshot's), without
    // hints (they were in the embedded keyspace, gone with the process).
    for _ in 0..20 {
        cluster.produce(300);
    }
    cluster.assert_exact();
    cluster.signal("solo", "TERM");
    assert!(cluster.reap("solo").success(), "an orderly exit");
    assert!((0..3).any(|p| log_watermarks(&cluster, p).0 > 0), "no log was truncated");
    std::fs::remove_dir_all(cluster.dir.join("solo")).expect("deletes the data directory");
    cluster.start("solo", &[]);
    cluster.until(Some("solo"), "every shard primary again", Duration::from_secs(60), |r| {
        SumCluster::served(r, &["solo"], 0)
    });
    cluster.produce(1_000);
    cluster.assert_exact();
}

#[test]
#[ignore = "needs the real broker or etcd: scripts/test.sh runs it (or cargo test -- --include-ignored)"]
fn a_soak_of_random_kill_9s_under_load_ends_with_every_sum_exact() {
    let etcd = Etcd::from_env_or_start();
    let mut cluster = SumCluster::new("sum-soak", Some(etcd.endpoint()), 4, LEASE_TTL);
    let members = ["a", "b", "c"];
    for m in members {
        cluster.start(m, &[]);
    }
    cluster.until(None, "served", Duration::from_secs(60), |r| SumCluster::served(r, &members, 1));
    let producing = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
    let producer = {
        let (producer, producing) = (cluster.producer(), std::sync::Arc::clone(&producing));
        std::thread::spawn(move || {
            let mut batches = 0;
            while producing.load(std::sync::atomic::Ordering::SeqCst) {
                producer.produce(2_000);
                batches += 1;
                std::thread::sleep(Duration::from_millis(300));
            }
            batches
        })
    };
    // Kill a member with -9 every few seconds and start it again on its data
    // directory (it joins once its old lease has expired).
    let mut seed = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).expect("time").as_nanos() as u64;
    let mut kills = Vec::new();
    let soak = Instant::now();
    while soak.elapsed() < Duration::from_secs(40) {
        seed = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
        let victim = members[(seed >> 33) as usize % members.len()];
        cluster.signal(victim, "KILL");
        cluster.reap(victim);
        kills.push(victim);
        std::thread::sleep(Duration::from_millis(500 + (seed >> 40) % 3_000));
        cluster.start(victim, &[]);
        std::thread::sleep(Duration::from_millis(2_000 + (seed >> 20) % 4_000));
    }
    producing.store(false, std::sync::atomic::Ordering::SeqCst);
    let batches = producer.join().expect("the producer");
    eprintln!("soak: {} kills ({kills:?}) under {batches} batches of 2,000 records", kills.len());
    cluster.until(None, "served after the soak", Duration::from_secs(90), |r| SumCluster::served(r, &members, 1));
    cluster.assert_exact();
}

/// The shard's hints in etcd.
fn hints_of(endpoint: &str, prefix: &str, shard: &str) -> Option<kshard_runtime::Hints> {
    let key = kshard_runtime::Keys::new(prefix).hints(shard);
    let kv = etcd_read(endpoint, &key).kvs.into_iter().find(|kv| kv.key == key)?;
    Some(serde_json::from_slice(&kv.value).expect("hints parse"))
}

/// The recovery log's (low, high) watermarks of shard partition `p`.
fn log_watermarks(cluster: &SumCluster, p: i32) -> (i64, i64) {
    let admin = kshard_kafka::Admin::new(&kshard_kafka::Client::to_brokers(&cluster.brokers), Duration::from_secs(30))
        .expect("admin");
    let key = kshard_kafka::TopicPartition::new(format!("{}-log", cluster.topic), p);
    admin.watermarks(std::slice::from_ref(&key)).expect("watermarks")[&key]
}

#[test]
#[ignore = "needs the real broker or etcd: scripts/test.sh runs it (or cargo test -- --include-ignored)"]
fn snapshots_bound_replay_and_the_log_is_truncated_behind_them() {
    let etcd = Etcd::from_env_or_start();
    let mut cluster = SumCluster::new("sum-snapshots", Some(etcd.endpoint()), 2, LEASE_TTL);
    // Snapshot as soon as the log since the last one outgrows it and 2 KiB.
    cluster.run_args =
        ["--snapshot-min-bytes", "2048", "--snapshot-factor", "1", "--max-txn-ms", "50"].map(str::to_owned).to_vec();
    cluster.start("a", &[]);
    cluster.until(None, "a serves", Duration::from_secs(60), |r| SumCluster::served(r, &["a"], 0));
    for _ in 0..25 {
        cluster.produce(400);
    }
    cluster.assert_exact();
    // Snapshots were written, hints recorded, and the log deleted before the
    // previous snapshot.
    let parsed = cluster.metrics("a");
    let mut hints = Vec::new();
    for p in 0..2 {
        let shard = format!("sum-{p:03}");
        let snapshots = parsed.get(&format!("kshard_runtime_snapshots_total{{shard=\"{shard}\"}}")).copied();
        assert!(snapshots.unwrap_or(0.0) >= 2.0, "{shard}: {snapshots:?} snapshots\n{parsed:?}");
        let (low, high) = log_watermarks(&cluster, p);
        assert!(low > 0, "{shard}: the log was not truncated (low {low}, high {high})");
        let h = hints_of(etcd.endpoint(), &cluster.prefix, &shard).expect("hints");
        assert_eq!(Some(low), h.previous.map(|p| p.offset), "{shard}: the log starts at the previous snapshot");
        hints.push((shard, h.current.offset, high));
    }
    // A new member's standbys start from the newest snapshot: they play the
    // records from there on, not the log.
    cluster.start("b", &[]);
    cluster
        .until(None, "b a standby of each shard", Duration::from_secs(60), |r| SumCluster::served(r, &["a", "b"], 1));
    let parsed = cluster.metrics("b");
    for (shard, from, high) in &hints {
        let played = parsed
            .get(&format!("kshard_runtime_playback_records_total{{shard=\"{shard}\"}}"))
            .copied()
            .unwrap_or_else(|| panic!("{shard}: no playback series on b\n{parsed:?}")) as i64;
        assert!(
            played <= high - from + 2,
            "{shard}: played {played} records, the snapshot starts {} from the end",
            high - from
        );
        eprintln!("{shard}: a new standby played {played} records; the log had {high}");
    }
    // And takes over with the whole state.
    cluster.signal("a", "KILL");
    cluster.reap("a");
    cluster.until(None, "b serves alone", Duration::from_secs(60), |r| SumCluster::served(r, &["b"], 0));
    cluster.produce(1_000);
    cluster.assert_exact();
}

/// Retention cuts a recovery log inside its newest snapshot (an operator's
/// DeleteRecords, say): the snapshot its hint names is gone, and a new
/// member has nothing whole to start from until the primary's next snapshot
/// ends. Its replica says so (FAILED, retried) instead of standing by on what
/// it has; once a snapshot is complete it stands by with the whole state and
/// takes over with every sum exact.
#[test]
#[ignore = "needs the real broker or etcd: scripts/test.sh runs it (or cargo test -- --include-ignored)"]
fn a_retention_cut_inside_a_snapshot_waits_for_the_next_complete_one() {
    let etcd = Etcd::from_env_or_start();
    let mut cluster = SumCluster::new("sum-cut-snapshot", Some(etcd.endpoint()), 1, LEASE_TTL);
    cluster.run_args =
        ["--snapshot-min-bytes", "2048", "--snapshot-factor", "1", "--max-txn-ms", "50"].map(str::to_owned).to_vec();
    cluster.start("a", &[]);
    cluster.until(None, "a serves", Duration::from_secs(60), |r| SumCluster::served(r, &["a"], 0));
    for _ in 0..10 {
        cluster.produce(400);
    }
    // Everything consumed: no snapshot is due but one the last transactions
    // may have begun (see below), and the heartbeats' (a minute of them at
    // least).
    cluster.assert_exact();
    let admin = kshard_kafka::Admin::new(&kshard_kafka::Client::to_brokers(&cluster.brokers), Duration::from_secs(30))
        .expect("admin");
    let prefix = cluster.prefix.clone();
    let newest = || hints_of(etcd.endpoint(), &prefix, "sum-000").expect("a snapshot was recorded").current;
    let mut attempts = 0;
    let (snapshot, cut) = loop {
        let snapshot = newest();
        // The cut deletes the snapshot's start: its chunks and end are left.
        let cut = snapshot.offset + 1;
        let low = admin.delete_records(&format!("{}-log", cluster.topic), 0, cut).expect("deletes records");
        assert_eq!(low, cut);
        let b_log = cluster.dir.join("b.log");
        let from = std::fs::read_to_string(&b_log).map_or(0, |t| t.len());
        cluster.start("b", &[]);
        // b is given its replica and finds nothing whole to start from: it
        // says so (waited for: before, the watch below could end before b
        // was even assigned, and pass). Unless a's next snapshot, begun by
        // the last transactions, was complete when b read the log: then
        // the cut is not inside the newest snapshot, and is made again
        // inside that one, for a new b.
        let deadline = Instant::now() + Duration::from_secs(60);
        let waits = loop {
            let log = std::fs::read_to_string(&b_log).unwrap_or_default();
            if log.get(from..).unwrap_or_default().contains("holds no complete snapshot") {
                break true;
            }
            if newest().offset > snapshot.offset {
                break false;
            }
            assert!(Instant::now() < deadline, "b did not say why it waits within 60 s: {log}");
            std::thread::sleep(Duration::from_millis(100));
        };
        if waits {
            break (snapshot, cut);
        }
        attempts += 1;
        assert!(attempts < 5, "a snapshotted again before b read the log, {attempts} times");
        cluster.signal("b", "KILL");
        cluster.reap("b");
        std::fs::remove_dir_all(cluster.dir.join("b")).expect("removes b's data directory");
    };
    // From then on it never stands by on the partial store, for 5 s or
    // until a's next snapshot (which would end the wait).
    let deadline = Instant::now() + Duration::from_secs(5);
    while Instant::now() < deadline
        && hints_of(etcd.endpoint(), &cluster.prefix, "sum-000").is_some_and(|h| h.current.offset == snapshot.offset)
    {
        let rows = cluster.shards(None);
        assert!(
            !rows.iter().any(|r| r.member == "b" && r.status == "STANDBY"),
            "b stood by on a partial store: {rows:#?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    // The primary's next snapshot is complete: b starts from it.
    let deadline = Instant::now() + Duration::from_secs(60);
    while hints_of(etcd.endpoint(), &cluster.prefix, "sum-000").is_none_or(|h| h.current.offset <= cut) {
        assert!(Instant::now() < deadline, "no new snapshot");
        cluster.produce(400);
    }
    cluster.until(None, "b stands by", Duration::from_secs(90), |r| SumCluster::served(r, &["a", "b"], 1));
    cluster.signal("a", "KILL");
    cluster.reap("a");
    cluster.until(None, "b serves alone", Duration::from_secs(60), |r| SumCluster::served(r, &["b"], 0));
    cluster.produce(1_000);
    cluster.assert_exact();
}

#[test]
#[ignore = "needs the real broker or etcd: scripts/test.sh runs it (or cargo test -- --include-ignored)"]
fn a_member_refuses_the_keys_of_another_application() {
    let etcd = Etcd::from_env_or_start();
    let mut cluster = SumCluster::new("sum-owner", Some(etcd.endpoint()), 1, LEASE_TTL);
    cluster.start("a", &[]);
    cluster.until(None, "served", Duration::from_secs(60), |r| SumCluster::served(r, &["a"], 0));
    // Another topic's member pointed at the same prefix fails at start, naming the setting.
    let other = kshard_testkit::unique_name("sum-intruder");
    let out = common::sum_cluster::kshard()
        .args(["example", "sum", "run", "--brokers", &cluster.brokers, "--topic", &other, "--partitions", "1"])
        .args(["--etcd", etcd.endpoint(), "--etcd-prefix", &cluster.prefix, "--member-id", "x"])
        .args(["--listen", "127.0.0.1:0"])
        .arg("--data-dir")
        .arg(cluster.dir.join("x"))
        .env_remove("KSHARD_ETCD")
        .output()
        .expect("runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(stderr.contains("invalid etcd_prefix") && stderr.contains(&cluster.topic), "{stderr}");
}

/// etcd down for longer than the members' lease: every member loses its
/// lease, stops its replicas, and joins again as soon as etcd is back —
/// without waiting for its old lease to expire (it revokes it). At no
/// instant do two replicas of a shard say PRIMARY (etcd sampled while it is
/// up; the members' logs for the outage, when it cannot answer: none takes
/// a log over), and every sum is exact.
#[test]
#[ignore = "needs the real broker or etcd: scripts/test.sh runs it (or cargo test -- --include-ignored)"]
fn etcd_down_for_longer_than_the_lease_is_survived_with_one_primary_at_a_time() {
    // A lease long enough that joining before it would have expired shows.
    const TTL: u64 = 6;
    let etcd = Etcd::start_private();
    let mut cluster = SumCluster::new("sum-etcd-outage", Some(etcd.endpoint()), 2, TTL);
    cluster.start("a", &[]);
    cluster.start("b", &[]);
    cluster.until(None, "served", Duration::from_secs(60), |r| SumCluster::served(r, &["a", "b"], 1));
    let sampler = Sampler::start(etcd.endpoint(), &cluster.prefix);
    cluster.produce(5_000);
    let (before_outage, _) = member_keys(etcd.endpoint(), &cluster.prefix);
    let at_kill = ["a", "b"].map(|m| logged(&cluster, m));
    etcd.kill();
    cluster.produce(5_000);
    // Down for longer than the lease, as each member sees it: both say their
    // lease expired (and stop their replicas).
    let deadline = Instant::now() + Duration::from_secs(TTL + 60);
    for (m, from) in ["a", "b"].iter().zip(at_kill) {
        while !log_between(&cluster, m, from, None).contains("the member's lease expired") {
            assert!(Instant::now() < deadline, "{m} never said its lease expired while etcd was down");
            std::thread::sleep(Duration::from_millis(100));
        }
    }
    let at_resume = ["a", "b"].map(|m| logged(&cluster, m));
    // The window etcd cannot be sampled in: no replica became primary in it
    // (the members' own logs say what they did).
    for (i, m) in ["a", "b"].iter().enumerate() {
        let during = log_between(&cluster, m, at_kill[i], Some(at_resume[i]));
        assert!(!took_over(&during), "{m} took a log over while etcd was down: {during}");
    }
    etcd.resume();
    let back = Instant::now();
    // etcd keeps leases across its restart: the members' old keys are there
    // at first. Each member, having declared its lease lost, revokes it and
    // joins again (a key created after the restart) without waiting for it
    // to expire.
    let deadline = Instant::now() + Duration::from_secs(60);
    while member_keys(etcd.endpoint(), &cluster.prefix).1.iter().filter(|created| **created > before_outage).count() < 2
    {
        assert!(Instant::now() < deadline, "the members did not join again within 60 s");
        std::thread::sleep(Duration::from_millis(100));
    }
    let rejoined = back.elapsed();
    // etcd restarted the old leases' TTL when it came back.
    assert!(rejoined < Duration::from_secs(TTL), "joined again only after {rejoined:?}: the old lease was waited out");
    cluster.until(None, "served after the outage", Duration::from_secs(60), |r| SumCluster::served(r, &["a", "b"], 1));
    eprintln!(
        "after etcd came back: joined again in {:.2} s, served in {:.2} s (lease TTL {TTL} s)",
        rejoined.as_secs_f64(),
        back.elapsed().as_secs_f64()
    );
    cluster.produce(5_000);
    cluster.assert_exact();
    sampler.assert_one_primary_at_a_time();
}

/// The allocator's leader is frozen (SIGSTOP) past its lease while the
/// cluster changes under it, then resumed: whatever round it had in hand,
/// it writes nothing beside the leader elected meanwhile (its writes are
/// checked against its term). One PRIMARY per shard at every instant, and
/// every sum exact.
#[test]
#[ignore = "needs the real broker or etcd: scripts/test.sh runs it (or cargo test -- --include-ignored)"]
fn the_allocators_leader_frozen_and_resumed_writes_nothing_beside_the_new_one() {
    let etcd = Etcd::from_env_or_start();
    let mut cluster = SumCluster::new("sum-frozen-leader", Some(etcd.endpoint()), 4, LEASE_TTL);
    for m in ["a", "b", "c"] {
        cluster.start(m, &[]);
    }
    cluster.until(None, "served", Duration::from_secs(60), |r| SumCluster::served(r, &["a", "b", "c"], 1));
    let sampler = Sampler::start(etcd.endpoint(), &cluster.prefix);
    let leader = leader_of(etcd.endpoint(), &cluster.prefix);
    let others: Vec<&str> = ["a", "b", "c"].into_iter().filter(|m| *m != leader).collect();
    cluster.signal(&leader, "STOP");
    cluster.produce(5_000);
    cluster.until(None, "the others serve every shard", Duration::from_secs(60), |r| SumCluster::served(r, &others, 1));
    // The cluster changes while the old leader is frozen: a member leaves.
    cluster.signal(others[0], "TERM");
    assert!(cluster.reap(others[0]).success(), "an orderly exit");
    cluster.signal(&leader, "CONT");
    let left = [leader.as_str(), others[1]];
    cluster.until(None, "served by the two left", Duration::from_secs(60), |r| SumCluster::served(r, &left, 1));
    cluster.produce(5_000);
    cluster.assert_exact();
    sampler.assert_one_primary_at_a_time();
}

/// etcd's revision, and the create revisions of the members' keys.
fn member_keys(endpoint: &str, prefix: &str) -> (i64, Vec<i64>) {
    let snapshot = etcd_read(endpoint, &kshard_runtime::Keys::new(prefix).members());
    (snapshot.revision, snapshot.kvs.iter().map(|kv| kv.create_revision).collect())
}

/// The member holding the allocator's leader key.
fn leader_of(endpoint: &str, prefix: &str) -> String {
    let key = kshard_runtime::Keys::new(prefix).leader();
    let kv = etcd_read(endpoint, &key).kvs.into_iter().find(|kv| kv.key == key).expect("a leader");
    String::from_utf8(kv.value).expect("a member id")
}
