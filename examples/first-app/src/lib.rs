//! A word count: each shard reads one partition of `lines`, counts every
//! word in its store and publishes each count's update to `counts`, exactly
//! once (a reader of committed records sees 1, 2, 3 … for every word).
//! `GET /counts/{partition}/{word}` answers a shard's count from any member.

use kshard_runtime::axum::{Router, extract::Path, extract::Request, routing::get};
use kshard_runtime::{AppError, Application, Message, OutRecord, Queries, ShardApp, ShardSpec, Transaction};
use kshard_runtime::{RecoveryLog, Source, StoreView};

/// The application: one object per shard's replica.
pub struct WordCount;

impl Application for WordCount {
    fn shard(&self, spec: &ShardSpec) -> Result<Box<dyn ShardApp>, AppError> {
        let source = spec.sources.first().ok_or("a word-count shard reads one partition of lines")?;
        Ok(Box::new(Counter { partition: source.partition }))
    }

    fn routes(&self, queries: Queries) -> Option<Router> {
        let count = |Path((partition, word)): Path<(i32, String)>, request: Request| async move {
            let read = move |view: &StoreView| {
                let count = view.get(word.to_lowercase().as_bytes())?.map_or(Ok(0), |v| decode(&v))?;
                Ok(count.to_string())
            };
            queries.serve_source("lines", partition, request, read).await
        };
        Some(Router::new().route("/counts/{partition}/{word}", get(count)))
    }
}

/// One shard's counter.
struct Counter {
    partition: i32,
}

impl ShardApp for Counter {
    fn consume(&mut self, txn: &mut Transaction<'_>, message: &Message<'_>) -> Result<(), AppError> {
        let line = message.value.ok_or_else(|| AppError::refused("a null line"))?;
        let line = std::str::from_utf8(line).map_err(|_| AppError::refused("a line that is not UTF-8"))?;
        for word in line.split_whitespace().map(str::to_lowercase) {
            let count = txn.get(word.as_bytes())?.map_or(Ok(0), |v| decode(&v))? + 1;
            txn.put(word.as_bytes(), count.to_be_bytes());
            let update = OutRecord::new(Some(word.as_bytes()), Some(&count.to_be_bytes()));
            txn.publish("counts", self.partition, update.at(message.timestamp_ms));
        }
        Ok(())
    }
}

/// A count as stored and published: 8 bytes, big-endian.
pub fn decode(bytes: &[u8]) -> Result<u64, AppError> {
    Ok(u64::from_be_bytes(bytes.try_into().map_err(|_| "a stored count that is not 8 bytes")?))
}

/// Shard `count-<p>` for each partition p of `lines`, its log partition p of `counts-log`.
pub fn shards(partitions: i32) -> Vec<ShardSpec> {
    (0..partitions)
        .map(|p| {
            let source = Source { topic: "lines".into(), partition: p, min_offset: 0 };
            ShardSpec::new(format!("count-{p}"), vec![source], RecoveryLog { topic: "counts-log".into(), partition: p })
        })
        .collect()
}
