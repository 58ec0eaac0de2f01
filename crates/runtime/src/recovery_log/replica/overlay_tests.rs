//! The mutations a primary's next transaction reads through while Kafka
//! commits the one before ([`InFlight::overlay`]): the very ones its
//! records carry, handed back once encoded.

use super::*;
use crate::recovery_log::chain::Chain;
use crate::recovery_log::io::{Encoded, records_of};

#[test]
fn the_mutations_a_transaction_carried_come_back_in_order_whatever_its_parts() {
    let put = |i: usize, size: usize| Mutation::Put { key: format!("k{i:04}").into_bytes(), value: vec![7; size] };
    let offsets = vec![SourceOffset { topic: "t".into(), partition: 0, offset: 9 }];
    let chain = Chain::resume(3, 4, Some(5));
    for mutations in [
        vec![put(0, 10), Mutation::Delete { key: b"k0001".to_vec() }, put(2, 10)],
        // Past PART_BYTES: parts, then the transaction's last record.
        (0..5).map(|i| put(i, 300 * 1024)).collect(),
    ] {
        let body = Body::Transaction { mutations: mutations.clone(), offsets: offsets.clone() };
        let Encoded { records, seq, mutations: carried } = records_keeping(&chain, 5, body.clone()).expect("encodes");
        assert_eq!(carried, mutations);
        assert_eq!((records.clone(), seq), records_of(&chain, 5, body).expect("encodes"));
        assert_eq!(seq, 3 + records.len() as u64);
    }
    let body = Body::Transaction { mutations: vec![], offsets };
    assert!(matches!(records_keeping(&chain, 6, body), Err(LogError::Fenced { current: Some(5) })));
}
