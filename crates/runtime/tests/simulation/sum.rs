//! The application the simulation runs: each shard sums its source's values
//! by key (8 bytes, big-endian), as `kshard example sum` does, and publishes
//! each key's new sum to [`SUMS`] (the source's partition) with every value
//! it takes: a reader of committed records must see, per key, exactly the
//! running sums of its values in order — none twice, none missing.

use kshard_runtime::ShardSpec;
use kshard_runtime::{AppError, Application, Message, OutRecord, ShardApp, Transaction};

/// The topic each update of a sum is published to.
pub(crate) const SUMS: &str = "sums";

/// Sums each key's values in the store.
pub(crate) struct Sum;

/// A sum as stored.
pub(crate) fn decode(value: &[u8]) -> Option<u64> {
    value.first_chunk::<8>().map(|v| u64::from_be_bytes(*v))
}

impl Application for Sum {
    fn shard(&self, _: &ShardSpec) -> Result<Box<dyn ShardApp>, AppError> {
        Ok(Box::new(Sum))
    }
}

impl ShardApp for Sum {
    fn consume(&mut self, txn: &mut Transaction<'_>, m: &Message<'_>) -> Result<(), AppError> {
        let key = m.key.ok_or("a record without a key")?;
        let value = m.value.and_then(decode).ok_or("no value")?;
        let sum = txn.get(key)?.and_then(|s| decode(&s));
        let sum = (sum.unwrap_or(0) + value).to_be_bytes();
        txn.put(key, sum);
        txn.publish(SUMS, m.partition, OutRecord::new(Some(key), Some(&sum)));
        Ok(())
    }
}
