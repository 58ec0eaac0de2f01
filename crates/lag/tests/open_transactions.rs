//! A transactional producer killed with SIGKILL inside its transaction, on a
//! real broker: its offset commit stays pending in `__consumer_offsets` until
//! the broker aborts it (`transaction.timeout.ms`, 10 minutes here), while
//! other groups go on committing behind it in the same partition. kshard
//! must show those at once, never the dead transaction's commit, and agree
//! with `kafka-consumer-groups` throughout — in plain mode, in durable mode
//! and after a restart on its data directory (the open transaction is then
//! known from the store) — and drop the pending commit when a new producer
//! of the same transactional id fences the dead one (an ABORT marker). A
//! live producer's transaction, open across the restart, commits afterwards:
//! its commit, known to kshard from the store only, counts. Also on the real broker: a transaction whose commit is older than a plain
//! commit of the same partition made while it was open loses to it at COMMIT,
//! Kafka's own rule.

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::Duration;

use common::*;
use kshard_kafka::{
    Client, ClientSettings, OffsetCommitter, ReaderKind, TransactionEnd, TransactionalCommitter, offsets_partition_for,
};
use kshard_lag::service::{ScrapeMode, ServeOptions};
use kshard_testkit::{Broker, KafkaLag, kafka_consumer_groups, unique_name};

/// Set for the child process: brokers, transactional id, group, topic.
const CHILD: &str = "KSHARD_TEST_TRANSACTION_CHILD";
const OPEN_LINE: &str = "kshard-test: transaction open";
const TIMEOUT: Duration = Duration::from_secs(600);
const RECORDS: &str = "kshard_exporter_offset_consumer_records_consumed_total";

/// The producer [`a_producer_killed_inside_a_transaction_holds_back_only_its_own_commit`]
/// kills: that same test, run again as a child process of this test binary
/// with [`CHILD`] set. (Not a test of its own: an ignored helper run by
/// `--include-ignored` would count as a passed test that checked nothing.)
fn producer_left_inside_a_transaction(args: &str) -> ! {
    let [brokers, transactional_id, group, topic] = args.split('|').collect::<Vec<_>>()[..] else {
        panic!("{CHILD}: brokers|transactional id|group|topic, not {args}")
    };
    let committer = TransactionalCommitter::new(&Client::to_brokers(brokers), transactional_id, group, TIMEOUT)
        .expect("a transactional producer");
    committer.commit(&[(topic, 0, 9)], TransactionEnd::LeaveOpen).expect("an offset commit inside a transaction");
    println!("{OPEN_LINE}");
    loop {
        std::thread::sleep(Duration::from_secs(60));
    }
}

/// Runs [`producer_left_inside_a_transaction`] in a child process and kills
/// it with SIGKILL once its transaction holds a commit.
fn kill_inside_a_transaction(brokers: &str, transactional_id: &str, group: &str, topic: &str) {
    let exe = std::env::current_exe().expect("this test binary");
    let mut child = Command::new(exe)
        .args([
            "--ignored",
            "--exact",
            "a_producer_killed_inside_a_transaction_holds_back_only_its_own_commit",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD, format!("{brokers}|{transactional_id}|{group}|{topic}"))
        .stdout(Stdio::piped())
        .spawn()
        .expect("the child producer starts");
    let stdout = child.stdout.take().expect("its output");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if line.contains(OPEN_LINE) {
                let _ = tx.send(());
            }
        }
    });
    let opened = rx.recv_timeout(Duration::from_secs(90));
    child.kill().expect("SIGKILL");
    let _ = child.wait();
    opened.expect("the child opened its transaction");
}

fn serve(settings: &ClientSettings, prefix: &str, data_dir: Option<&std::path::Path>) -> TestService {
    let mut service = TestService::start(ServeOptions {
        mode: ScrapeMode::OffsetsTopic,
        watermark_interval: Duration::from_millis(200),
        monitor: only(prefix),
        data_dir: data_dir.map(ToOwned::to_owned),
        ..ServeOptions::new(settings.clone())
    });
    service.wait_ready();
    service
}

/// Waits until kshard reports exactly what Kafka's tool does, and the
/// partition's open transactions are `open`.
fn agrees(service: &mut TestService, expected: &[KafkaLag], prefix: &str, partition: i32, open: f64, what: &str) {
    let by_key: std::collections::BTreeMap<(String, String, i32), i64> =
        expected.iter().map(|r| ((r.group.clone(), r.topic.clone(), r.partition), r.lag)).collect();
    let open_series = format!("kshard_offsets_topic_open_transactions{{partition_id=\"{partition}\"}}");
    let unread = format!("kshard_offsets_topic_unread_offsets{{partition_id=\"{partition}\"}}");
    until(what, Duration::from_secs(30), Duration::from_millis(200), || {
        let api = kshard_api_lag(service, prefix);
        let metrics = service.metrics();
        let lag = kshard_metric_lag(service, "kshard", prefix);
        let (got_open, got_unread) = (metrics.get(&open_series), metrics.get(&unread));
        if api == expected && lag == by_key && got_open == Some(&open) && got_unread == Some(&0.0) {
            Ok(())
        } else {
            Err(format!(
                "kafka: {expected:#?}\n/api/groups: {api:#?}\n/metrics: {lag:#?}\nopen transactions {got_open:?} \
                 (want {open}), unread {got_unread:?}"
            ))
        }
    });
}

#[test]
#[ignore = "needs the real broker or etcd: scripts/test.sh runs it (or cargo test -- --include-ignored)"]
fn a_producer_killed_inside_a_transaction_holds_back_only_its_own_commit() {
    if let Ok(args) = std::env::var(CHILD) {
        producer_left_inside_a_transaction(&args);
    }
    // A broker of this test's own: the dead transaction stays open for
    // 10 minutes in its __consumer_offsets partition.
    let broker = Broker::start_private(&[]);
    let settings = Client::to_brokers(broker.brokers());
    let p = unique_name("txn-killed");
    let topic = format!("{p}-t");
    create_and_fill(&settings, &topic, &[50]);
    let dead = format!("{p}-dead");
    let partition = offsets_partition_for(&dead, 50);
    let beside = |what: &str| {
        (0..).map(|i| format!("{p}-{what}-{i}")).find(|g| offsets_partition_for(g, 50) == partition).expect("a name")
    };
    let dead_tx = format!("{p}-dead-tx");
    TransactionalCommitter::new(&settings, &dead_tx, &dead, TIMEOUT)
        .expect("txn")
        .commit(&[(&topic, 0, 4)], TransactionEnd::Commit)
        .expect("committed");
    kill_inside_a_transaction(broker.brokers(), &dead_tx, &dead, &topic);

    // Behind the dead transaction, in the same partition: a plain commit, a
    // committed and an aborted transaction of other producers, and a
    // transaction whose commit a plain one made while it was open outdates.
    let plain = beside("plain");
    OffsetCommitter::new(&settings, &plain).expect("committer").commit(&[(&topic, 0, 30)]).expect("commit");
    let done = beside("done");
    TransactionalCommitter::new(&settings, &format!("{p}-done-tx"), &done, TIMEOUT)
        .expect("txn")
        .commit(&[(&topic, 0, 20)], TransactionEnd::Commit)
        .expect("committed");
    let aborted = beside("aborted");
    TransactionalCommitter::new(&settings, &format!("{p}-aborted-tx"), &aborted, TIMEOUT)
        .expect("txn")
        .commit(&[(&topic, 0, 7)], TransactionEnd::Abort)
        .expect("aborted");
    let outdated = beside("outdated");
    let late = TransactionalCommitter::new(&settings, &format!("{p}-outdated-tx"), &outdated, TIMEOUT).expect("txn");
    late.commit(&[(&topic, 0, 9)], TransactionEnd::LeaveOpen).expect("open");
    OffsetCommitter::new(&settings, &outdated).expect("committer").commit(&[(&topic, 0, 12)]).expect("commit");
    late.end(TransactionEnd::Commit).expect("committed");

    // And a live producer's transaction, open across the restarts below, to
    // commit once kshard knows it from its store only.
    let survivor = beside("survivor");
    let live = TransactionalCommitter::new(&settings, &format!("{p}-survivor-tx"), &survivor, TIMEOUT).expect("txn");
    live.commit(&[(&topic, 0, 3)], TransactionEnd::Commit).expect("committed");
    live.commit(&[(&topic, 0, 15)], TransactionEnd::LeaveOpen).expect("open");

    let kafka = kafka_consumer_groups(broker.brokers(), &p);
    let committed: Vec<(&str, i64)> = kafka.iter().map(|r| (r.group.as_str(), r.committed)).collect();
    let mut want = vec![
        (dead.as_str(), 4),
        (done.as_str(), 20),
        (outdated.as_str(), 12),
        (plain.as_str(), 30),
        (survivor.as_str(), 3),
    ];
    want.sort_unstable();
    assert_eq!(committed, want, "Kafka: the open transactions' 9 and 15 and the aborted 7 do not count; 12 outdates 9");

    // Plain mode: ready long before the broker aborts the dead transaction.
    let mut service = serve(settings.settings(), &p, None);
    agrees(&mut service, &kafka, &p, partition, 2.0, "plain mode, past the open transactions");
    drop(service);
    // librdkafka reads committed records only: ready too, but the open
    // transactions hold back the rest of their partition, and it says so.
    let mut committed_only = settings.settings().clone();
    committed_only.reader = ReaderKind::Librdkafka;
    let mut service = serve(&committed_only, &p, None);
    let unread = format!("kshard_offsets_topic_unread_offsets{{partition_id=\"{partition}\"}}");
    service.eventually("librdkafka held back", |m| m.get(&unread).is_some_and(|n| *n >= 2.0));
    drop(service);

    // Durable mode, then a restart on its data directory: the open
    // transactions come back from the store, the partition is not read again.
    let dir = std::env::temp_dir().join(unique_name("kshard-txn-data"));
    let mut service = serve(settings.settings(), &p, Some(&dir));
    agrees(&mut service, &kafka, &p, partition, 2.0, "durable mode");
    let read_first = service.metrics().get(RECORDS).copied().unwrap_or(0.0);
    drop(service);
    let mut service = serve(settings.settings(), &p, Some(&dir));
    agrees(&mut service, &kafka, &p, partition, 2.0, "restarted on the data directory");
    let read_again = service.metrics().get(RECORDS).copied().unwrap_or(0.0);
    assert!(read_again < read_first, "the restart read {read_again} records, the first run {read_first}");

    // The live transaction commits: its 15, known from the store, counts.
    live.end(TransactionEnd::Commit).expect("committed");
    let kafka = kafka_consumer_groups(broker.brokers(), &p);
    assert!(kafka.iter().any(|r| r.group == survivor && r.committed == 15), "{kafka:?}");
    agrees(&mut service, &kafka, &p, partition, 1.0, "the transaction restored from the store committed");

    // A new producer of the dead one's id fences it: the broker writes its
    // ABORT marker, and the pending commit is gone for good.
    let _fencing = TransactionalCommitter::new(&settings, &dead_tx, &dead, TIMEOUT).expect("fences the dead producer");
    agrees(&mut service, &kafka, &p, partition, 0.0, "after the dead transaction was aborted");
    assert_eq!(kafka_consumer_groups(broker.brokers(), &p), kafka, "Kafka too kept the 4");
    drop(service);
    let _ = std::fs::remove_dir_all(&dir);
}
