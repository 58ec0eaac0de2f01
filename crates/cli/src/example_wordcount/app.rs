//! The word-count application, two stages as Kafka Streams' word count is
//! (its repartition is a topic here too): shard `split-<p>` reads lines from
//! partition p of the lines topic and publishes each word to `<topic>-words`,
//! at the partition the word hashes to; shard `count-<p>` reads partition p
//! of `<topic>-words`, counts each word in its store and publishes every
//! count's update to `<topic>-counts` (the same partition). Both publish in
//! their consumer transactions, so a reader of committed records sees each
//! word once per line it was in, and each count's update once, in order:
//! 1, 2, 3 … for every word. Words and updates carry their line's timestamp,
//! as Kafka Streams' records do. Any member answers `GET /words/{word}`
//! from the count shard's store, the primary's (or a standby's within
//! `?stale=`), after the offsets in `?seen=` (read your writes).

use axum::extract::{Path, Request};
use axum::routing::get;
use kshard_runtime::{AppError, Application, Message, OutRecord, Queries, ShardApp, ShardSpec, Transaction};

/// The application, for lines topic `topic` of `partitions` partitions.
#[derive(Debug, Clone)]
pub(crate) struct WordCount {
    pub(crate) topic: String,
    pub(crate) partitions: i32,
}

/// The topic `topic`'s words are published to, partitioned by word.
pub(crate) fn words_topic(topic: &str) -> String {
    format!("{topic}-words")
}

/// The topic every count's update is published to.
pub(crate) fn counts_topic(topic: &str) -> String {
    format!("{topic}-counts")
}

/// The partition of `word` among `partitions` (Java's `String.hashCode`, as
/// Kafka places a group: stable across processes and versions).
pub(crate) fn partition_of(word: &str, partitions: i32) -> i32 {
    kshard_kafka::offsets_partition_for(word, partitions.max(1))
}

impl Application for WordCount {
    fn shard(&self, shard: &ShardSpec) -> Result<Box<dyn ShardApp>, AppError> {
        let partition = shard.sources.first().map_or(0, |s| s.partition);
        if shard.id.starts_with("split-") {
            Ok(Box::new(Split { words: words_topic(&self.topic), partitions: self.partitions }))
        } else if shard.id.starts_with("count-") {
            Ok(Box::new(Count { counts: counts_topic(&self.topic), partition }))
        } else {
            Err(AppError::new(format!("shard {} is neither split-<p> nor count-<p>", shard.id)))
        }
    }

    fn routes(&self, queries: Queries) -> Option<axum::Router> {
        let (words, partitions) = (words_topic(&self.topic), self.partitions);
        let count = move |Path(word): Path<String>, request: Request| async move {
            let word = word.to_lowercase();
            let partition = partition_of(&word, partitions);
            let read = move |view: &kshard_runtime::StoreView| {
                let count = view.get(word.as_bytes())?.as_deref().and_then(decode_count).unwrap_or(0);
                Ok(axum::Json(serde_json::json!({ "word": word, "count": count })))
            };
            queries.serve_source(&words, partition, request, read).await
        };
        Some(axum::Router::new().route("/words/{word}", get(count)))
    }
}

/// Splits lines into words.
struct Split {
    words: String,
    partitions: i32,
}

impl ShardApp for Split {
    fn consume(&mut self, txn: &mut Transaction<'_>, message: &Message<'_>) -> Result<(), AppError> {
        let line = message.value.ok_or_else(|| AppError::refused("a line that is null"))?;
        let line = std::str::from_utf8(line).map_err(|_| AppError::refused("a line that is not UTF-8"))?;
        for word in line.split_whitespace() {
            let word = word.to_lowercase();
            let record = OutRecord::new(Some(word.as_bytes()), None).at(message.timestamp_ms);
            txn.publish(&self.words, partition_of(&word, self.partitions), record);
        }
        Ok(())
    }
}

/// Counts words, publishing each update.
struct Count {
    counts: String,
    partition: i32,
}

/// A count as stored and published: 8 bytes, big-endian.
pub(crate) fn decode_count(bytes: &[u8]) -> Option<u64> {
    Some(u64::from_be_bytes(bytes.try_into().ok()?))
}

impl ShardApp for Count {
    fn consume(&mut self, txn: &mut Transaction<'_>, message: &Message<'_>) -> Result<(), AppError> {
        let word = message.key.ok_or_else(|| AppError::refused("a word record without a key"))?;
        let count = match txn.get(word)? {
            Some(bytes) => decode_count(&bytes).ok_or("a stored count that is not 8 bytes")?,
            None => 0,
        } + 1;
        txn.put(word, count.to_be_bytes());
        let record = OutRecord::new(Some(word), Some(&count.to_be_bytes())).at(message.timestamp_ms);
        txn.publish(&self.counts, self.partition, record);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kshard_runtime::MemoryStore;

    fn spec(id: &str, partition: i32) -> ShardSpec {
        ShardSpec::new(
            id,
            vec![kshard_runtime::Source { topic: "t".into(), partition, min_offset: 0 }],
            kshard_runtime::RecoveryLog { topic: "l".into(), partition },
        )
    }

    #[test]
    fn a_line_is_split_into_words_each_to_its_partition_and_counted_once_each() {
        let app = WordCount { topic: "lines".into(), partitions: 4 };
        let store = MemoryStore::default();
        let mut txn = Transaction::new(&store);
        let mut split = app.shard(&spec("split-0", 0)).expect("split");
        split.consume(&mut txn, &Message::new("lines", 0, 0, None, Some(b"To be or NOT to be"))).expect("splits");
        assert_eq!(txn.published(), 6);
        let refused = split.consume(&mut txn, &Message::new("lines", 0, 1, None, Some(b"\xff"))).expect_err("refused");
        assert!(refused.is_refusal());

        let mut count = app.shard(&spec("count-1", 1)).expect("count");
        let mut txn = Transaction::new(&store);
        for _ in 0..3 {
            count.consume(&mut txn, &Message::new("lines-words", 1, 0, Some(b"be"), None)).expect("counts");
        }
        assert_eq!(txn.get(b"be").expect("reads").as_deref().and_then(decode_count), Some(3));
        assert_eq!(txn.published(), 3, "every update");
        assert!(app.shard(&spec("other-0", 0)).is_err());
        assert_eq!(partition_of("be", 4), partition_of("be", 4));
    }

    /// The whole application, its query endpoint included, in at most 100
    /// lines of code (comments and blank lines aside; Gazette's word count
    /// is about 270 in `word_count.go` alone).
    #[test]
    fn the_application_is_at_most_a_hundred_lines_of_code() {
        let source = include_str!("app.rs");
        let code = source.split("#[cfg(test)]").next().unwrap_or_default();
        let lines = code.lines().map(str::trim).filter(|l| !l.is_empty() && !l.starts_with("//")).count();
        assert!(lines <= 100, "{lines} lines");
        eprintln!("{lines} lines of code");
    }
}
