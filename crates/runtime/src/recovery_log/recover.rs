//! A shard's state rebuilt from its recovery log, outside any member (`kshard
//! shards recover`): for an operator to read, back up or seed a store. It
//! starts where a new replica would — the newest snapshot the hints name,
//! when the log holds it; else the first snapshot the log holds (a log
//! truncated at its start); else the log's first record — and plays every
//! committed record to the log's end now.

use std::time::Duration;

use super::io::{LogClients, LogError, ends, play_to_head};
use super::lineage::usable_hint;
use super::player::Player;
use crate::model::{Hints, RecoveryLog};
use crate::partitions::Partitions;
use crate::store::Store;

/// Where an operator's prune may cut a log whose records run from `low` to
/// `high`: before the previous snapshot the hints name, as a primary does
/// after each snapshot (the newest stays, and the one before as a backup),
/// when that is past `low` and within the log. `None` with one snapshot
/// only (no backup yet), or hints that point past the log (of another log,
/// deleted and created again).
pub fn prune_before(hints: &Hints, low: i64, high: i64) -> Option<i64> {
    let keep = hints.previous?.offset;
    (keep > low && keep < high && hints.current.offset >= keep).then_some(keep)
}

/// [`prune_before`] for `log` as it is now, with the log's first
/// offset: a cut only where the log holds the previous snapshot the hints
/// name (hints left by an earlier log of the same shard never cut this one).
pub async fn prune_point(
    partitions: &dyn Partitions,
    log: &RecoveryLog,
    hints: &Hints,
    timeout: Duration,
) -> Result<(i64, Option<i64>), LogError> {
    let (low, high) = ends(partitions, &log.topic, log.partition).await?;
    let Some(keep) = prune_before(hints, low, high) else { return Ok((low, None)) };
    let previous = usable_hint(partitions, log, hints.previous, (keep, high), timeout)
        .await
        .map_err(|source| LogError::Kafka { step: "reading the previous snapshot's start", source })?;
    Ok((low, previous.map(|_| keep)))
}

/// How a store was recovered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Recovered {
    /// The log offset playback started at.
    pub from: i64,
    /// Whether that was a snapshot the hints name.
    pub from_snapshot: bool,
    /// The log's end it was played to.
    pub to: i64,
    /// Records played.
    pub records: usize,
}

/// Plays the recovery log `log` into `store` (empty), as the module says
/// says. Refused when what the log holds is not the whole state (truncated
/// with no complete snapshot left): kshard does not write part of a state.
pub async fn recover<S: Store>(
    partitions: &dyn Partitions,
    log: &RecoveryLog,
    hints: Option<&Hints>,
    store: S,
    timeout: Duration,
) -> Result<(Player<S>, Recovered), LogError> {
    let (low, high) = ends(partitions, &log.topic, log.partition).await?;
    let kafka = |step: &'static str| move |source| LogError::Kafka { step, source };
    let hint = usable_hint(partitions, log, hints.map(|h| h.current), (low, high), timeout)
        .await
        .map_err(kafka("reading the newest snapshot's start"))?;
    let mut player = match hint {
        Some(h) => Player::open_at(store, &h),
        None if low > 0 => Player::bootstrap(store, low),
        None => Player::open(store).map_err(LogError::Store)?,
    };
    let from = player.next_offset();
    let reader = partitions
        .reader(&log.topic, &[(log.partition, Some(from))], 1024, kshard_kafka::Isolation::Committed)
        .map_err(kafka("opening a reader"))?;
    let clients =
        LogClients { topic: &log.topic, partition: log.partition, reader: reader.as_ref(), partitions, writer: None };
    let played = play_to_head(&clients, &mut player, timeout).await?;
    if player.bootstrapping()
        || player.store().checkpoint().map_err(LogError::Store)?.is_some_and(|c| c.partial.is_some())
    {
        return Err(LogError::Incomplete(format!(
            "the log {log} holds no complete snapshot from its first offset {low}: its state is not whole"
        )));
    }
    Ok((player, Recovered { from, from_snapshot: hint.is_some(), to: high, records: played.len() }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Hint;

    #[test]
    fn a_prune_keeps_the_newest_snapshot_and_the_one_before() {
        let hint = |offset| Hint { offset, seq: 1, checksum: 2, author: None, bytes: 3 };
        let both = Hints { current: hint(900), previous: Some(hint(400)) };
        assert_eq!(prune_before(&both, 0, 1000), Some(400));
        assert_eq!(prune_before(&both, 400, 1000), None, "cut already");
        assert_eq!(prune_before(&both, 0, 300), None, "hints past the log: another log's");
        let one = Hints { current: hint(900), previous: None };
        assert_eq!(prune_before(&one, 10, 1000), None, "no backup snapshot yet: a primary cuts nothing");
    }
}
