//! How a shard's store keeps the records of open transactions: one entry
//! per (producer, record key), under a key no `__consumer_offsets` key can
//! be (Kafka's keys start with a small version number), holding the record
//! as the store holds any (its offset, then its raw value). So a restart, or
//! a standby taking over, knows what the producer's marker will commit or
//! abort; a transaction committing offsets for many partitions costs an
//! entry each, written once. Pure: bytes in, bytes out.

use kshard_offsets::cursor::Cursor;

/// Keys of open transactions' records start with this.
pub(crate) const PREFIX: &[u8] = b"\xff\xfftxn/";

/// The store key prefix of `producer`'s open transaction.
pub(crate) fn producer_prefix(producer: i64) -> Vec<u8> {
    [PREFIX, &producer.to_be_bytes()[..]].concat()
}

/// The store key of `producer`'s record of `key`.
pub(crate) fn key(producer: i64, key: &[u8]) -> Vec<u8> {
    [PREFIX, &producer.to_be_bytes()[..], key].concat()
}

/// The producer and record key a store key names, if it is an open
/// transaction's.
pub(crate) fn parse(stored: &[u8]) -> Option<(i64, &[u8])> {
    let mut c = Cursor::new(stored.strip_prefix(PREFIX)?);
    Some((c.i64().ok()?, c.rest()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn keys_and_values_read_back() {
        assert_eq!(parse(&key(42, b"\x00\x01group")), Some((42, &b"\x00\x01group"[..])));
        assert_eq!(parse(&key(-1, b"")), Some((-1, &b""[..])));
        assert_eq!(parse(b"\x00\x01group"), None, "a record's own key");
        assert_eq!(parse(&PREFIX[..PREFIX.len()]), None, "no producer");
        assert!(key(7, b"k").starts_with(&producer_prefix(7)));
    }

    proptest! {
        #[test]
        fn any_bytes_parse_or_not_without_panicking(bytes in proptest::collection::vec(any::<u8>(), 0..40)) {
            let _ = parse(&bytes);
        }
    }
}
