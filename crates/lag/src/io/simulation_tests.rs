//! The lag monitor through the runtime's fault simulation
//! ([`kshard_runtime::simulation`]), as any application of the runtime:
//! the offsets topic's shards exactly as `serve --data-dir` makes them
//! (a recovery log each, a standby on every member), three members,
//! commits and tombstones of several groups appended while members crash,
//! stop, pause past their lease and lose the keyspace or the log. The
//! harness checks that each shard has one primary at a time, that every
//! store is a state of its recovery log's chain, and that each shard's
//! primary ends holding what a run without faults holds; this test then
//! asks that the offsets the monitor serves are the last ones committed.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use kshard_offsets::{OffsetCommitValue, Record};
use kshard_runtime::simulation::{Input, Simulation};

use crate::catch_up::Log;
use crate::log_app::LogApp;
use crate::log_reader::{Shards, Stores};
use crate::log_shards::LogShards;
use crate::monitor::{Monitor, MonitorSettings};
use crate::offsets_layout::OffsetsLayout;
use crate::shutdown::Shutdown;

const TOPIC: &str = "__consumer_offsets";
const PARTITIONS: i32 = 2;

/// Commit number `i`: group `g{i % 3}` commits offset `i` of its topic's
/// partition `i % 2`, into the offsets topic's partition `i % 2`; every
/// seventh is a tombstone instead.
fn commit(i: i64) -> (Input, (String, i32), Option<i64>) {
    let (group, partition) = (format!("g{}", i % 3), (i % 2) as i32);
    let offset = (i % 7 != 6).then_some(i);
    let value = offset.map(|offset| OffsetCommitValue::new(3, offset, 1_700_000_000_000 + i));
    let (key, value) = Record::offset_commit(group.as_str(), "orders", partition, value).encode();
    let input = Input { topic: TOPIC.into(), partition, key: Some(key), value };
    (input, (group, partition), offset)
}

#[test]
fn the_offsets_shards_hold_the_last_commits_through_faults() {
    let commits: Vec<_> = (0..60).map(commit).collect();
    let mut last: BTreeMap<(String, i32), Option<i64>> = BTreeMap::new();
    for (_, key, offset) in &commits {
        last.insert(key.clone(), *offset);
    }
    let shards = Shards {
        stores: Stores::Durable(std::env::temp_dir()),
        cluster: None,
        log_topic: "kshard-lag-log".into(),
        member: crate::LocalMember::default(),
    };
    let specs = (0..PARTITIONS).map(|p| crate::shards_reader::shard(Log::Offsets, TOPIC, &shards, p)).collect();
    // Each member's process has its own monitor, as `kshard serve` has,
    // lost when the member crashes.
    let made: Arc<Mutex<Vec<Arc<Monitor>>>> = Arc::default();
    let monitors = Arc::clone(&made);
    let process = move || {
        let monitor = Arc::new(Monitor::new(MonitorSettings::default()));
        for p in 0..PARTITIONS {
            monitor.track(Log::Offsets, p, 0, 0);
        }
        monitors.lock().expect("lock").push(Arc::clone(&monitor));
        LogApp(Arc::new(LogShards::new(OffsetsLayout::default(), monitor, PARTITIONS, Shutdown::default())))
    };
    let report = Simulation::per_process(process, specs)
        .input(commits.iter().map(|(input, ..)| input.clone()))
        .schedules(500)
        .run()
        .unwrap_or_else(|failed| panic!("{failed}"));
    assert!(report.schedules > 0);
    // The stores held what a run without faults holds; the monitors serve
    // from them: those that ended with every commit serve the last ones.
    let served = |monitor: &Monitor| {
        let mut served: BTreeMap<(String, i32), Option<i64>> = last.keys().map(|k| (k.clone(), None)).collect();
        monitor.units().for_each(|_, unit| {
            for (name, group) in unit.groups() {
                for (_, partition, commit) in group.offsets() {
                    served.insert((name.to_string(), partition), Some(commit.offset));
                }
            }
        });
        served
    };
    let made = made.lock().expect("lock");
    assert!(made.iter().any(|m| served(m) == last), "no member served the last commits");
}
