use super::*;

/// A snapshot's key and value as Kafka 4.4 lays them out, byte by byte.
fn snapshot_bytes() -> (Vec<u8>, Vec<u8>) {
    let mut key = vec![0, 0, 0, 1, b'g'];
    key.extend_from_slice(&[7; 16]);
    key.extend_from_slice(&3i32.to_be_bytes());
    let mut value = vec![0, 0];
    value.extend_from_slice(&1i32.to_be_bytes()); // snapshot epoch
    value.extend_from_slice(&0i32.to_be_bytes()); // state epoch
    value.extend_from_slice(&5i32.to_be_bytes()); // leader epoch
    value.extend_from_slice(&100i64.to_be_bytes()); // start offset
    value.extend_from_slice(&1_700_000_000_000i64.to_be_bytes()); // created
    value.extend_from_slice(&1_700_000_001_000i64.to_be_bytes()); // written
    value.push(2); // one state batch (compact array: length + 1)
    value.extend_from_slice(&100i64.to_be_bytes());
    value.extend_from_slice(&104i64.to_be_bytes());
    value.push(4); // archived
    value.extend_from_slice(&5i16.to_be_bytes());
    value.push(0); // the batch's tagged fields
    value.extend_from_slice(&[1, 0, 4]); // one tagged field: tag 0, 4 bytes
    value.extend_from_slice(&3i32.to_be_bytes());
    (key, value)
}

#[test]
fn a_snapshot_reads_as_kafka_writes_it() {
    let (key, value) = snapshot_bytes();
    let record = ShareStateRecord::decode(&key, Some(&value)).expect("decodes");
    let partition = SharePartitionKey { group_id: "g".into(), topic_id: Uuid([7; 16]), partition: 3 };
    assert_eq!(record.key, ShareStateKey::Snapshot(partition));
    let Some(ShareStateValue::Snapshot(v)) = &record.value else { panic!("a snapshot: {record:?}") };
    assert_eq!((v.snapshot_epoch, v.state_epoch, v.leader_epoch, v.start_offset), (1, 0, 5, 100));
    assert_eq!((v.create_timestamp, v.write_timestamp), (1_700_000_000_000, 1_700_000_001_000));
    assert_eq!(v.delivery_complete_count, 3);
    let batch =
        StateBatch { first_offset: 100, last_offset: 104, delivery_state: DeliveryState::Archived, delivery_count: 5 };
    assert_eq!(v.state_batches, [batch]);
    assert_eq!(record.encode(), (key, Some(value)), "encodes back to the same bytes");
}

#[test]
fn an_update_without_delivery_complete_count_and_with_an_unknown_tag() {
    let mut key = vec![0, 1, 0, 2, b'g', b'2'];
    key.extend_from_slice(&[9; 16]);
    key.extend_from_slice(&0i32.to_be_bytes());
    let mut value = vec![0, 0];
    value.extend_from_slice(&2i32.to_be_bytes());
    value.extend_from_slice(&6i32.to_be_bytes());
    value.extend_from_slice(&(-1i64).to_be_bytes()); // the start offset stays
    value.push(1); // no batches
    value.extend_from_slice(&[1, 9, 2, 0xab, 0xcd]); // tag 9: a newer writer's
    let record = ShareStateRecord::decode(&key, Some(&value)).expect("decodes");
    assert!(matches!(record.key, ShareStateKey::Update(_)));
    let Some(ShareStateValue::Update(v)) = record.value else { panic!("an update") };
    assert_eq!((v.snapshot_epoch, v.leader_epoch, v.start_offset, v.delivery_complete_count), (2, 6, -1, -1));
    assert!(v.state_batches.is_empty());
}

#[test]
fn malformed_bytes_name_the_part_and_field_and_unknown_types_stay_opaque() {
    let (key, value) = snapshot_bytes();
    for cut in [3, 10, key.len() - 1] {
        let e = ShareStateKey::decode(&key[..cut]).expect_err("short key");
        assert!(e.to_string().contains("key"), "{e}");
    }
    let e = ShareStateRecord::decode(&key, Some(&value[..20])).expect_err("short value");
    assert!(e.to_string().contains("value") && e.to_string().contains("start_offset"), "{e}");
    // A state batch count far past what the bytes hold allocates nothing.
    let mut huge = value[..38].to_vec();
    huge.extend_from_slice(&[0xff, 0xff, 0xff, 0x7f]);
    assert!(ShareStateRecord::decode(&key, Some(&huge)).is_err());
    let opaque = [0, 9, 1, 2, 3];
    let record = ShareStateRecord::decode(&opaque, Some(&[0, 0, 42])).expect("opaque");
    assert_eq!(record.key.key_version(), 9);
    assert!(matches!(record.value, Some(ShareStateValue::Opaque { version: 0, .. })));
    assert_eq!(ShareStateRecord::decode(&key, None).expect("a tombstone").value, None);
}
