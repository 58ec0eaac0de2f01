//! The runtime under faults, in simulation: thousands of seeded schedules,
//! each a cluster of members (`node::run`) over the embedded keyspace and an
//! in-memory log on a paused tokio clock, with faults injected step after
//! step — crashes (kill -9) and restarts, pauses past the lease, a member cut
//! off from the keyspace but not the log and the reverse, its appends
//! failing, the keyspace or the log down for everyone, retention cutting a
//! recovery log. After every step (and in the middle of each fault) the
//! invariants hold:
//! - at most one slot-0 assignment per shard;
//! - every store on every member's disk is a state of its recovery log's one
//!   chain (the records a player from the log's first record applies): no
//!   second branch, and a replica serving as STANDBY or PRIMARY holds all of
//!   that state, not part of it;
//!
//! and once the faults heal, every shard gets one PRIMARY whose sums are
//! exactly the values produced, each counted once, as the log's chain says.
//!
//! `KSHARD_SIM_SCHEDULES` sets how many schedules run (2,000 by default);
//! `KSHARD_SIM_SEED=N` runs schedule N alone — a failure names its seed. The
//! schedule (which fault, when) is the seed's; how tokio interleaves tasks
//! within a step may differ from run to run.

mod reference;
mod sum;
mod world;

use std::time::Duration;

use kshard_runtime::faults::Passage;
use tokio::time::{Instant, sleep};
use world::{Link, TTL, World};

/// SplitMix64: a schedule's choices from its seed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    /// A duration from `min` up to `max`, in steps of 100 ms.
    fn between(&mut self, min: Duration, max: Duration) -> Duration {
        let steps = (max - min).as_millis() as u64 / 100;
        min + Duration::from_millis(100 * (self.next() % (steps + 1)))
    }
}

const MEMBERS: usize = 3;
const SHARDS: usize = 2;
const STEPS: usize = 8;
/// How long the cluster may take to settle once every fault is healed.
const SETTLE: Duration = Duration::from_secs(120);

#[derive(Debug, Clone, Copy)]
enum Fault {
    Nothing,
    Crash(usize),
    Restart(usize),
    Stop(usize),
    Pause(usize, Duration),
    Cut(usize, Link, Duration),
    KeyspaceDown(Duration),
    LogDown(Duration),
    /// Retention deletes shard s's log before a point in its first n/8.
    RetentionCut(usize, u64),
}

fn pick(rng: &mut Rng) -> Fault {
    let m = rng.below(MEMBERS);
    let short = rng.between(Duration::from_millis(100), TTL * 3);
    match rng.below(12) {
        0 | 1 => Fault::Nothing,
        2 => Fault::Crash(m),
        3 | 4 => Fault::Restart(m),
        5 => Fault::Stop(m),
        6 => Fault::Pause(m, rng.between(TTL, TTL * 3)),
        7 => Fault::Cut(m, Link::Keyspace, short),
        8 => Fault::Cut(m, Link::Log, short),
        9 => Fault::Cut(m, Link::Writes, short),
        10 => {
            if rng.below(2) == 0 {
                Fault::KeyspaceDown(short)
            } else {
                Fault::LogDown(short)
            }
        }
        _ => Fault::RetentionCut(rng.below(SHARDS), 1 + rng.next() % 8),
    }
}

/// Holds `fault` for `d`, checking the invariants half-way.
async fn during(world: &World, d: Duration) -> Result<(), String> {
    sleep(d / 2).await;
    if let Some(why) = world.broken().await {
        return Err(format!("during the fault: {why}"));
    }
    sleep(d - d / 2).await;
    Ok(())
}

async fn apply(world: &mut World, fault: Fault) -> Result<(), String> {
    match fault {
        Fault::Nothing => {}
        Fault::Crash(m) => world.crash(m),
        Fault::Restart(m) => world.start(m),
        Fault::Stop(m) => world.stop(m).await,
        Fault::Pause(m, d) => {
            world.set(m, Link::All, Passage::Held);
            during(world, d).await?;
            world.set(m, Link::All, Passage::Open);
        }
        Fault::Cut(m, link, d) => {
            world.set(m, link, Passage::Closed);
            during(world, d).await?;
            world.set(m, link, Passage::Open);
        }
        Fault::KeyspaceDown(d) => {
            world.keyspace_for_all.set(Passage::Closed);
            during(world, d).await?;
            world.keyspace_for_all.set(Passage::Open);
        }
        Fault::LogDown(d) => {
            world.log.log.set_available(false);
            during(world, d).await?;
            world.log.log.set_available(true);
        }
        Fault::RetentionCut(s, eighths) => {
            let end = world.log_end(s);
            world.cut_log(s, end * eighths as i64 / 8).await;
        }
    }
    Ok(())
}

/// Runs schedule `seed`; why it broke an invariant, if it did.
async fn schedule(seed: u64) -> Result<(), String> {
    let mut rng = Rng(seed);
    let mut world = World::new(MEMBERS, SHARDS).await;
    let mut done = Vec::new();
    sleep(TTL).await;
    for step in 0..STEPS {
        let fault = pick(&mut rng);
        world.produce(rng.below(SHARDS), 1 + rng.below(8) as u64);
        let applied = apply(&mut world, fault).await;
        done.push(fault);
        let broken = match applied {
            Err(why) => Some(why),
            Ok(()) => {
                sleep(rng.between(Duration::ZERO, TTL)).await;
                world.broken().await
            }
        };
        if let Some(why) = broken {
            return Err(format!("step {step} of {done:?}: {why}"));
        }
    }
    world.heal();
    for m in 0..MEMBERS {
        world.start(m);
    }
    let deadline = Instant::now() + SETTLE;
    loop {
        sleep(Duration::from_secs(1)).await;
        let settled = world.settled();
        if let Some(why) = world.broken().await {
            return Err(format!("settling after {done:?}: {why}"));
        }
        match settled {
            Ok(()) => break,
            Err(why) if Instant::now() > deadline => {
                return Err(format!("not settled {SETTLE:?} after {done:?} healed: {why}"));
            }
            Err(_) => {}
        }
    }
    if std::env::var_os("KSHARD_SIM_SEED").is_some() {
        for s in 0..SHARDS {
            eprintln!(
                "shard {s}: log end {}, statuses {:?}, sums {:?}",
                world.log_end(s),
                world.statuses(s),
                world.expected[s]
            );
        }
        eprintln!("{done:?}");
    }
    for m in 0..MEMBERS {
        world.stop(m).await;
    }
    Ok(())
}

fn run(seed: u64) -> Result<(), String> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .map_err(|e| e.to_string())?;
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| runtime.block_on(schedule(seed))));
    outcome.unwrap_or_else(|panic| {
        let what =
            panic.downcast_ref::<String>().cloned().or_else(|| panic.downcast_ref::<&str>().map(|s| (*s).to_owned()));
        Err(format!("panicked: {}", what.unwrap_or_default()))
    })
}

/// Log lines stamped with the schedule's clock (seconds since its start).
struct Virtual;

impl tracing_subscriber::fmt::time::FormatTime for Virtual {
    fn format_time(&self, w: &mut tracing_subscriber::fmt::format::Writer<'_>) -> std::fmt::Result {
        static START: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
        let start = *START.get_or_init(Instant::now);
        write!(w, "{:9.3}", Instant::now().duration_since(start).as_secs_f64())
    }
}

#[test]
fn seeded_schedules_of_faults_keep_every_invariant() {
    let env = |name: &str| std::env::var(name).ok().and_then(|v| v.parse::<u64>().ok());
    let seeds: Vec<u64> = match env("KSHARD_SIM_SEED") {
        Some(seed) => {
            // One schedule: its logs, as RUST_LOG says.
            let filter = tracing_subscriber::EnvFilter::from_default_env();
            let _ = tracing_subscriber::fmt().with_env_filter(filter).with_timer(Virtual).with_test_writer().try_init();
            vec![seed]
        }
        None => (1..=env("KSHARD_SIM_SCHEDULES").unwrap_or(2_000)).collect(),
    };
    let started = std::time::Instant::now();
    let threads = std::thread::available_parallelism().map_or(2, |n| n.get()).min(2);
    let failures: Vec<(u64, String)> = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..threads)
            .map(|t| {
                let seeds = &seeds;
                scope.spawn(move || {
                    seeds
                        .iter()
                        .skip(t)
                        .step_by(threads)
                        .filter_map(|&s| run(s).err().map(|e| (s, e)))
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        workers.into_iter().flat_map(|w| w.join().expect("a worker thread")).collect()
    });
    eprintln!("{} schedules in {:.1} s", seeds.len(), started.elapsed().as_secs_f64());
    let shown: Vec<String> =
        failures.iter().take(5).map(|(seed, why)| format!("KSHARD_SIM_SEED={seed}: {why}")).collect();
    assert!(
        failures.is_empty(),
        "{} of {} schedules broke an invariant:\n{}",
        failures.len(),
        seeds.len(),
        shown.join("\n")
    );
}
