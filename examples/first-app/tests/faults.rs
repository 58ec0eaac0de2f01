//! The word count through 500 seeded schedules of crashes, pauses past the
//! lease, keyspace and log outages and retention cuts, on a simulated clock:
//! every store and every committed update equal to a run without faults.

use kshard_runtime::simulation::{Input, Simulation};

#[test]
fn every_count_is_exact_through_faults() {
    let words = ["to be or not to be", "that is the question", "be quick", "or not"];
    let input = (0..32).map(|i| Input {
        topic: "lines".into(),
        partition: i % 2,
        key: None,
        value: Some(words[i as usize % words.len()].as_bytes().to_vec()),
    });
    let shards = first_app::shards(2).into_iter().map(|s| kshard_runtime::ShardSpec {
        hot_standbys: 1,
        max_txn_duration_ms: 50,
        ..s
    });
    let report = Simulation::new(first_app::WordCount, shards.collect())
        .input(input)
        .outputs(["counts"])
        .schedules(500)
        .run()
        .unwrap_or_else(|failed| panic!("{failed}"));
    assert_eq!(report.outputs, 32 / 4 * (6 + 4 + 2 + 2), "one update per word of every line");
}
