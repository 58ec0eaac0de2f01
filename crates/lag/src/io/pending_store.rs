//! How a shard's store keeps the offset commits of open transactions: one
//! entry per producer with a transaction open, under a key no
//! `__consumer_offsets` key can be (Kafka's keys start with a small version
//! number), holding the transaction's records as read — offset, raw key,
//! raw value — so that a restart, or a standby taking over, knows what the
//! producer's marker will commit or abort. Pure: bytes in, bytes out.

/// Keys of open transactions start with this.
pub(crate) const PREFIX: &[u8] = b"\xff\xfftxn/";

/// A transaction's record as kept: its offset, raw key and raw value.
pub(crate) type PendingRecord<'a> = (i64, &'a [u8], &'a [u8]);

/// The store key of `producer`'s open transaction.
pub(crate) fn key(producer: i64) -> Vec<u8> {
    [PREFIX, &producer.to_be_bytes()[..]].concat()
}

/// The producer a store key names, if it is an open transaction's.
pub(crate) fn producer_of(key: &[u8]) -> Option<i64> {
    key.strip_prefix(PREFIX)?.try_into().ok().map(i64::from_be_bytes)
}

/// The stored value of a transaction's records.
pub(crate) fn encode<'a>(records: impl IntoIterator<Item = PendingRecord<'a>>) -> Vec<u8> {
    let mut out = Vec::new();
    for (offset, key, value) in records {
        out.extend_from_slice(&offset.to_be_bytes());
        for bytes in [key, value] {
            out.extend_from_slice(&u32::try_from(bytes.len()).unwrap_or(u32::MAX).to_be_bytes());
            out.extend_from_slice(bytes);
        }
    }
    out
}

/// The records of a stored value, or why it does not read.
pub(crate) fn decode(mut value: &[u8]) -> Result<Vec<PendingRecord<'_>>, String> {
    fn take<'a>(value: &mut &'a [u8], n: usize) -> Result<&'a [u8], String> {
        if value.len() < n {
            return Err(format!("a stored open transaction is cut: {n} bytes wanted, {} left", value.len()));
        }
        let (head, rest) = value.split_at(n);
        *value = rest;
        Ok(head)
    }
    let mut records = Vec::new();
    while !value.is_empty() {
        let offset = i64::from_be_bytes(take(&mut value, 8)?.try_into().unwrap_or_default());
        let mut parts = [&[][..]; 2];
        for part in &mut parts {
            let n = u32::from_be_bytes(take(&mut value, 4)?.try_into().unwrap_or_default());
            *part = take(&mut value, usize::try_from(n).unwrap_or(usize::MAX))?;
        }
        records.push((offset, parts[0], parts[1]));
    }
    Ok(records)
}

/// `records` with the record of `key` replaced by (or, without one, added
/// as) `record`; `None` drops it.
pub(crate) fn replaced<'a>(
    records: &[PendingRecord<'a>],
    key: &[u8],
    record: Option<PendingRecord<'a>>,
) -> Vec<PendingRecord<'a>> {
    let mut out: Vec<PendingRecord<'a>> = records.iter().copied().filter(|(_, k, _)| *k != key).collect();
    out.extend(record);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn records_read_back_and_a_cut_value_is_an_error() {
        let records: Vec<PendingRecord<'_>> = vec![(5, b"k1", b"v1"), (9, b"", b"value")];
        let stored = encode(records.iter().copied());
        assert_eq!(decode(&stored), Ok(records.clone()));
        assert!(decode(&stored[..stored.len() - 1]).is_err());
        assert_eq!(producer_of(&key(42)), Some(42));
        assert_eq!(producer_of(b"\x00\x01group"), None);
        let replaced = replaced(&records, b"k1", Some((12, b"k1", b"v2")));
        assert_eq!(replaced, vec![(9, &b""[..], &b"value"[..]), (12, b"k1", b"v2")]);
    }

    proptest! {
        #[test]
        fn any_bytes_decode_or_fail_without_panicking(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
            let _ = decode(&bytes);
        }
    }
}
