use super::*;
use crate::keyspace::MemoryKeyspace;
use crate::model::{RecoveryLog, Source};

fn spec(id: &str, log: i32) -> ShardSpec {
    ShardSpec::new(
        id,
        vec![Source { topic: "in".into(), partition: log, min_offset: 0 }],
        RecoveryLog { topic: "log".into(), partition: log },
    )
}

fn put(spec: ShardSpec) -> Desired {
    Desired::Put { spec, revision: None }
}

#[test]
fn a_plan_creates_updates_and_deletes_only_what_differs() {
    let current = vec![
        Current { spec: spec("a", 0), revision: 5 },
        Current { spec: spec("b", 1), revision: 6 },
        Current { spec: spec("c", 2), revision: 7 },
    ];
    let more = ShardSpec { hot_standbys: 2, ..spec("b", 1) };
    let desired = vec![
        put(spec("a", 0)),
        put(more.clone()),
        Desired::Delete { id: "c".into(), revision: None },
        put(spec("d", 3)),
        Desired::Delete { id: "nothing".into(), revision: None },
    ];
    let changes = plan(&current, &desired).expect("a plan");
    assert_eq!(
        changes,
        vec![
            Change::Update { before: Box::new(spec("b", 1)), after: Box::new(more), revision: 6 },
            Change::Delete { before: Box::new(spec("c", 2)), revision: 7 },
            Change::Create(spec("d", 3)),
        ]
    );
    assert_eq!(changes[0].to_string(), "~ b: hot_standbys 0 -> 2;");
    assert_eq!(changes[1].to_string(), "- c: deleted");
    assert!(changes[2].to_string().starts_with("+ d: created {"), "{}", changes[2]);
}

#[test]
fn a_plan_refuses_a_stale_revision_a_moved_log_a_repeat_and_a_bad_spec() {
    let current = vec![Current { spec: spec("a", 0), revision: 5 }];
    let stale = Desired::Put { spec: ShardSpec { hot_standbys: 1, ..spec("a", 0) }, revision: Some(4) };
    assert_eq!(plan(&current, &[stale]), Err(PlanError::Stale { id: "a".into(), given: 4, current: 5 }));
    let gone = Desired::Delete { id: "b".into(), revision: Some(3) };
    assert_eq!(plan(&current, &[gone]), Err(PlanError::Stale { id: "b".into(), given: 3, current: 0 }));
    let moved =
        put(ShardSpec { recovery_log: Some(RecoveryLog { topic: "other".into(), partition: 0 }), ..spec("a", 0) });
    assert!(matches!(plan(&current, &[moved]), Err(PlanError::Invalid { why, .. }) if why.contains("recovery log")));
    assert_eq!(plan(&current, &[put(spec("x", 1)), put(spec("x", 1))]), Err(PlanError::Twice("x".into())));
    let bad = put(ShardSpec { sources: vec![], ..spec("y", 1) });
    assert!(matches!(plan(&current, &[bad]), Err(PlanError::Invalid { why, .. }) if why == "no sources"));
    let at = Desired::Put { spec: ShardSpec { hot_standbys: 1, ..spec("a", 0) }, revision: Some(5) };
    assert_eq!(plan(&current, &[at]).expect("at its revision").len(), 1);
}

#[tokio::test]
async fn two_applies_of_one_read_write_once_and_the_second_is_refused() {
    let (ks, keys) = (MemoryKeyspace::new(), Keys::new("/t"));
    let first = plan(&read(&ks, &keys).await.expect("reads"), &[put(spec("a", 0))]).expect("a plan");
    apply(&ks, &keys, &first).await.expect("applies");
    let read_once = read(&ks, &keys).await.expect("reads");
    let one = plan(&read_once, &[put(ShardSpec { hot_standbys: 1, ..spec("a", 0) })]).expect("a plan");
    let other = plan(&read_once, &[put(ShardSpec { hot_standbys: 2, ..spec("a", 0) })]).expect("a plan");
    assert_eq!(apply(&ks, &keys, &one).await.expect("applies").written, 1);
    assert!(matches!(apply(&ks, &keys, &other).await, Err(ApplyError::Conflict { written: 0, total: 1 })));
    let now = read(&ks, &keys).await.expect("reads");
    assert_eq!(now[0].spec.hot_standbys, 1, "the first apply's");
    let delete = plan(&now, &[Desired::Delete { id: "a".into(), revision: None }]).expect("a plan");
    apply(&ks, &keys, &delete).await.expect("applies");
    assert!(read(&ks, &keys).await.expect("reads").is_empty());
}

#[tokio::test]
async fn more_changes_than_one_transaction_takes_go_in_batches() {
    let (ks, keys) = (MemoryKeyspace::new(), Keys::new("/t"));
    let many: Vec<Desired> = (0..300).map(|i| put(spec(&format!("s{i}"), i))).collect();
    let changes = plan(&[], &many).expect("a plan");
    assert_eq!(apply(&ks, &keys, &changes).await.expect("applies").written, 300);
    assert_eq!(read(&ks, &keys).await.expect("reads").len(), 300);
}

#[tokio::test]
async fn keys_that_hold_no_spec_are_named() {
    let (ks, keys) = (MemoryKeyspace::new(), Keys::new("/t"));
    apply(&ks, &keys, &plan(&[], &[put(spec("a", 0))]).expect("a plan")).await.expect("applies");
    let put_raw = |key: String, value: Vec<u8>| crate::keyspace::Txn {
        compares: vec![],
        success: vec![crate::keyspace::Op::Put { key, value, lease: None }],
        failure: vec![],
    };
    ks.txn(put_raw(keys.shard("b"), b"{not json".to_vec())).await.expect("puts");
    let moved = serde_json::to_vec(&spec("a", 1)).expect("json");
    ks.txn(put_raw(keys.shard("c"), moved)).await.expect("puts");
    let (specs, unreadable) = read_checked(&ks, &keys).await.expect("reads");
    assert_eq!(specs.iter().map(|c| c.spec.id.as_str()).collect::<Vec<_>>(), ["a"]);
    let named: Vec<&str> = unreadable.iter().map(|u| u.key.as_str()).collect();
    assert_eq!(named, [keys.shard("b"), keys.shard("c")]);
    assert!(unreadable[1].reason.contains("shard a"), "{:?}", unreadable[1]);
}
