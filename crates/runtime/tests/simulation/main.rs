//! The runtime under faults, in simulation: thousands of seeded schedules
//! of `kshard_runtime::simulation` (crashes and restarts, pauses past the
//! lease, a member cut off from the keyspace, the log or its writes, the
//! keyspace or the log down for everyone, retention cutting a recovery log)
//! against a cluster of three members running a sum (`sum.rs`) of two
//! shards, each with a hot standby and frequent snapshots. After every step
//! the runtime's invariants hold and the published sums are a prefix of
//! what a run without faults published; once healed, every store and every
//! output equals that run's.
//!
//! `KSHARD_SIM_SCHEDULES` sets how many schedules run (2,000 here);
//! `KSHARD_SIM_SEED=N` runs schedule N alone — a failure names its seed.

mod sum;

use kshard_runtime::simulation::{Input, Simulation};
use kshard_runtime::{AppError, Application, Message, OutRecord, ShardApp, Transaction};
use kshard_runtime::{RecoveryLog, ShardSpec, Source};

/// Log lines stamped with the schedule's clock (seconds since its start).
struct Virtual;

impl tracing_subscriber::fmt::time::FormatTime for Virtual {
    fn format_time(&self, w: &mut tracing_subscriber::fmt::format::Writer<'_>) -> std::fmt::Result {
        static START: std::sync::OnceLock<tokio::time::Instant> = std::sync::OnceLock::new();
        let start = *START.get_or_init(tokio::time::Instant::now);
        write!(w, "{:9.3}", tokio::time::Instant::now().duration_since(start).as_secs_f64())
    }
}

fn shard(i: i32) -> ShardSpec {
    ShardSpec {
        hot_standbys: 1,
        max_txn_duration_ms: 50,
        // Snapshots (and the log deleted before the previous one) every few
        // transactions.
        snapshot_min_bytes: 300,
        snapshot_factor: 2,
        ..ShardSpec::new(
            format!("sum-{i}"),
            vec![Source { topic: "events".into(), partition: i, min_offset: 0 }],
            RecoveryLog { topic: "log".into(), partition: i },
        )
    }
}

#[test]
fn seeded_schedules_of_faults_keep_every_invariant() {
    if std::env::var_os("KSHARD_SIM_SEED").is_some() {
        // One schedule: its logs, as RUST_LOG says.
        let filter = tracing_subscriber::EnvFilter::from_default_env();
        let _ = tracing_subscriber::fmt().with_env_filter(filter).with_timer(Virtual).with_test_writer().try_init();
    }
    // 40 values, 1 to 40, over three keys, the partitions in no simple turn.
    let input = (1..=40u64).map(|v| {
        let partition = i32::from((v * 7 / 3) % 2 == 1);
        Input::new("events", partition, format!("k{}", v % 3), v.to_be_bytes())
    });
    let report = Simulation::new(sum::Sum, vec![shard(0), shard(1)])
        .input(input)
        .outputs([sum::SUMS])
        .schedules(2_000)
        .run()
        .unwrap_or_else(|failed| panic!("{failed}"));
    assert_eq!(report.outputs, 40, "a sum published for every value");
    eprintln!("{} schedules in {:.1} s", report.schedules, report.elapsed.as_secs_f64());
}

/// The simulator finds the classic mistake: an application that keeps its
/// sums in memory instead of its store loses them when a standby takes
/// over, and publishes sums a run without faults never did.
#[test]
fn an_application_keeping_its_state_in_memory_is_caught_with_a_seed() {
    if std::env::var_os("KSHARD_SIM_SEED").is_some() {
        return;
    }
    let input = (1..=40u64).map(|v| Input::new("events", i32::from(v % 2 == 0), "k", v.to_be_bytes()));
    let failed = Simulation::new(Forgetful, vec![shard(0), shard(1)])
        .input(input)
        .outputs([sum::SUMS])
        .schedules(50)
        .run()
        .expect_err("a fail-over loses what is only in memory");
    // Seed 0 is the run without faults: it must have passed.
    assert!(!failed.failures.is_empty() && failed.failures.iter().all(|(seed, _)| *seed > 0), "{failed}");
    assert!(failed.to_string().contains("KSHARD_SIM_SEED="), "a failure names its seed: {failed}");
}

/// The sum kept in the shard's memory, not its store: wrong once a replica
/// starts over (a fail-over, a restart).
struct Forgetful;

impl Application for Forgetful {
    fn shard(&self, _: &ShardSpec) -> Result<Box<dyn ShardApp>, AppError> {
        Ok(Box::new(InMemory(std::collections::HashMap::new())))
    }
}

struct InMemory(std::collections::HashMap<Vec<u8>, u64>);

impl ShardApp for InMemory {
    fn consume(&mut self, txn: &mut Transaction<'_>, m: &Message<'_>) -> Result<(), AppError> {
        let key = m.key.ok_or("a record without a key")?;
        let value = m.value.and_then(sum::decode).ok_or("no value")?;
        let sum = self.0.entry(key.to_vec()).or_default();
        *sum += value;
        txn.publish(sum::SUMS, m.partition, OutRecord::new(Some(key), Some(&sum.to_be_bytes())));
        Ok(())
    }
}
