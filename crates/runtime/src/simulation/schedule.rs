//! One schedule of faults, chosen by its seed, against a simulated
//! cluster; and the run without faults the schedules are held to.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::{Instant, sleep};

use super::failure::ScheduleFailure;
use super::world::{Link, TTL, World};
use super::{Reference, Simulation};
use crate::faults::Passage;

/// How long the stores and outputs of the run without faults must stay the
/// same for it to be over.
const QUIET: Duration = Duration::from_secs(10);

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

/// Fault steps per schedule.
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

fn pick(rng: &mut Rng, members: usize, shards: usize) -> Fault {
    let m = rng.below(members);
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
        _ => Fault::RetentionCut(rng.below(shards), 1 + rng.next() % 8),
    }
}

/// Holds `fault` for `d`, checking the invariants half-way.
async fn during(world: &World, reference: &Reference, outputs: &[&str], d: Duration) -> Result<(), String> {
    sleep(d / 2).await;
    if let Some(why) = world.broken(Some(reference), outputs).await {
        return Err(format!("during the fault: {why}"));
    }
    sleep(d - d / 2).await;
    Ok(())
}

async fn apply(world: &mut World, reference: &Reference, outputs: &[&str], fault: Fault) -> Result<(), String> {
    match fault {
        Fault::Nothing => {}
        Fault::Crash(m) => world.crash(m),
        Fault::Restart(m) => world.start(m),
        Fault::Stop(m) => world.stop(m).await,
        Fault::Pause(m, d) => {
            world.set(m, Link::All, Passage::Held);
            during(world, reference, outputs, d).await?;
            world.set(m, Link::All, Passage::Open);
        }
        Fault::Cut(m, link, d) => {
            world.set(m, link, Passage::Closed);
            during(world, reference, outputs, d).await?;
            world.set(m, link, Passage::Open);
        }
        Fault::KeyspaceDown(d) => {
            world.keyspace_for_all.set(Passage::Closed);
            during(world, reference, outputs, d).await?;
            world.keyspace_for_all.set(Passage::Open);
        }
        Fault::LogDown(d) => {
            world.log.log.set_available(false);
            during(world, reference, outputs, d).await?;
            world.log.log.set_available(true);
        }
        Fault::RetentionCut(s, eighths) => {
            let end = world.log_end(s);
            world.cut_log(s, end * eighths as i64 / 8).await;
        }
    }
    Ok(())
}

/// Runs schedule `seed` of `sim`; why it broke an invariant, if it did.
pub(super) async fn schedule(sim: &Simulation, reference: &Reference, seed: u64) -> Result<(), ScheduleFailure> {
    let mut rng = Rng(seed);
    let shards = sim.shards.len();
    let mut world = World::new(sim.members, sim.shards.clone(), Arc::clone(&sim.app), Arc::clone(&sim.input)).await;
    let outputs: Vec<&str> = sim.outputs.iter().map(String::as_str).collect();
    // The input in about STEPS / 2 parts, each step taking up to two.
    let part = sim.input.len().div_ceil(STEPS / 2).max(1);
    let mut done = Vec::new();
    sleep(TTL).await;
    for step in 0..STEPS {
        let fault = pick(&mut rng, sim.members, shards);
        world.produce(rng.below(2 * part + 1));
        let applied = apply(&mut world, reference, &outputs, fault).await;
        done.push(fault);
        let broken = match applied {
            Err(why) => Some(why),
            Ok(()) => {
                sleep(rng.between(Duration::ZERO, TTL)).await;
                world.broken(Some(reference), &outputs).await
            }
        };
        if let Some(why) = broken {
            return Err(ScheduleFailure::Step { step, done: format!("{done:?}"), why });
        }
    }
    world.heal();
    world.produce(world.unproduced());
    for m in 0..sim.members {
        world.start(m);
    }
    let deadline = Instant::now() + SETTLE;
    loop {
        sleep(Duration::from_secs(1)).await;
        let settled = world.settled(reference, &outputs);
        if let Some(why) = world.broken(Some(reference), &outputs).await {
            return Err(ScheduleFailure::Settling { done: format!("{done:?}"), why });
        }
        match settled {
            Ok(()) => break,
            Err(why) if Instant::now() > deadline => {
                return Err(ScheduleFailure::NotSettled { within: SETTLE, done: format!("{done:?}"), why });
            }
            Err(_) => {}
        }
    }
    if std::env::var_os("KSHARD_SIM_SEED").is_some() {
        for s in 0..shards {
            eprintln!("shard {s}: log end {}, statuses {:?}", world.log_end(s), world.statuses(s));
        }
        eprintln!("{done:?}");
    }
    for m in 0..sim.members {
        world.stop(m).await;
    }
    Ok(())
}

/// The run without faults: every record of the input at once, until the
/// stores and outputs stay the same for [`QUIET`] with one PRIMARY per shard.
pub(super) async fn reference(sim: &Simulation) -> Result<Reference, ScheduleFailure> {
    let mut world = World::new(sim.members, sim.shards.clone(), Arc::clone(&sim.app), Arc::clone(&sim.input)).await;
    let topics: Vec<&str> = sim.outputs.iter().map(String::as_str).collect();
    world.produce(sim.input.len());
    let deadline = Instant::now() + SETTLE;
    let mut stable: Option<(Reference, Instant)> = None;
    loop {
        sleep(Duration::from_secs(1)).await;
        if let Some(why) = world.broken(None, &topics).await {
            return Err(ScheduleFailure::Reference(why));
        }
        match world.primaries_stores() {
            Err(_) => stable = None,
            Ok(stores) => {
                let now = Reference { stores, outputs: world.read_outputs(&topics) };
                match &stable {
                    Some((before, since)) if *before == now => {
                        if since.elapsed() >= QUIET {
                            break;
                        }
                    }
                    _ => stable = Some((now, Instant::now())),
                }
            }
        }
        if Instant::now() > deadline {
            return Err(ScheduleFailure::ReferenceUnsettled { within: SETTLE });
        }
    }
    for m in 0..sim.members {
        world.stop(m).await;
    }
    stable.map(|(reference, _)| reference).ok_or(ScheduleFailure::ReferenceUnsettled { within: SETTLE })
}
