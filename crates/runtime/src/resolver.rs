//! Where a read of a shard's state is answered — pure decisions, tested on
//! their own; [`crate::queries`] does the I/O.
//!
//! A read names its shard (or the source partition the shard reads) and
//! [`ReadOptions`]: offsets it has seen, which the answering state must have
//! applied (read your writes), the staleness it accepts from a standby, and
//! how long it waits. [`resolve`] picks, from this member's view of the
//! keyspace and of its own replica, one [`Route`]: answer here, forward to
//! the primary's member, or say why neither can be done now.

use std::time::Duration;

use crate::cluster_view::ClusterView;
use crate::recovery_log::record::SourceOffset;
use crate::status::ReplicaCode;

/// How long a read waits, unless it says otherwise.
pub const DEFAULT_WAIT: Duration = Duration::from_secs(5);

/// The longest a read may ask to wait.
pub const MAX_WAIT: Duration = Duration::from_secs(60);

/// At most this many offsets in `seen`.
const MAX_SEEN: usize = 1024;

/// What a read asks of the state that answers it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadOptions {
    /// Records (topic, partition, offset) the answering state must have
    /// applied: `?seen=topic:partition:offset,…`.
    pub seen: Vec<SourceOffset>,
    /// A standby may answer when its state is at most this old:
    /// `?stale=2s` (`ms`, `s` or `m`). `None`: only the primary answers.
    pub stale: Option<Duration>,
    /// How long to wait for a primary, or for `seen` to be applied:
    /// `?wait=10s` (default [`DEFAULT_WAIT`], at most [`MAX_WAIT`]).
    pub wait: Duration,
}

impl Default for ReadOptions {
    fn default() -> Self {
        ReadOptions { seen: Vec::new(), stale: None, wait: DEFAULT_WAIT }
    }
}

impl ReadOptions {
    /// The options of a request's query string (other parameters are the
    /// application's and left alone); the error names the parameter.
    pub fn parse(query: Option<&str>) -> Result<Self, InvalidReadOption> {
        let mut options = ReadOptions::default();
        for (name, value) in form_urlencoded::parse(query.unwrap_or("").as_bytes()) {
            let value = value.as_ref();
            match name.as_ref() {
                "seen" => {
                    for item in value.split(',').filter(|s| !s.is_empty()) {
                        options.seen.push(parse_seen(item).map_err(InvalidReadOption::seen)?);
                        if options.seen.len() > MAX_SEEN {
                            return Err(InvalidReadOption::seen(format!("more than {MAX_SEEN} offsets")));
                        }
                    }
                }
                "stale" => {
                    let stale = parse_duration(value).map_err(|why| InvalidReadOption { parameter: "stale", why })?;
                    options.stale = Some(stale);
                }
                "wait" => {
                    let wait = parse_duration(value).map_err(|why| InvalidReadOption { parameter: "wait", why })?;
                    if wait > MAX_WAIT {
                        let why = format!("at most {}s", MAX_WAIT.as_secs());
                        return Err(InvalidReadOption { parameter: "wait", why });
                    }
                    options.wait = wait;
                }
                _ => {}
            }
        }
        Ok(options)
    }
}

/// A read option of a query string that cannot be used: which, and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid {parameter}: {why}")]
pub struct InvalidReadOption {
    /// The parameter: `seen`, `stale` or `wait`.
    pub parameter: &'static str,
    /// What is wrong with its value.
    pub why: String,
}

impl InvalidReadOption {
    fn seen(why: String) -> Self {
        InvalidReadOption { parameter: "seen", why }
    }
}

/// `topic:partition:offset` (a topic has no `:`).
fn parse_seen(item: &str) -> Result<SourceOffset, String> {
    let bad = || format!("{item:?} is not topic:partition:offset");
    let mut parts = item.rsplitn(3, ':');
    let (offset, partition, topic) = (parts.next(), parts.next(), parts.next());
    let (Some(offset), Some(partition), Some(topic)) = (offset, partition, topic) else { return Err(bad()) };
    let offset: i64 = offset.parse().map_err(|_| bad())?;
    let partition: i32 = partition.parse().map_err(|_| bad())?;
    if topic.is_empty() || offset < 0 || partition < 0 {
        return Err(bad());
    }
    Ok(SourceOffset { topic: topic.to_owned(), partition, offset })
}

/// `250ms`, `2s`, `1m`.
fn parse_duration(text: &str) -> Result<Duration, String> {
    let digits = text.find(|c: char| !c.is_ascii_digit()).unwrap_or(text.len());
    let (number, unit) = text.split_at(digits);
    let n: u64 = number.parse().map_err(|_| format!("{text:?} is not a number and a unit (ms, s, m)"))?;
    match unit {
        "ms" => Ok(Duration::from_millis(n)),
        "s" => Ok(Duration::from_secs(n)),
        "m" => Ok(Duration::from_secs(n.saturating_mul(60))),
        _ => Err(format!("{text:?} is not a number and a unit (ms, s, m)")),
    }
}

/// This member's replica of the shard, as it stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct LocalReplica {
    /// Its status.
    pub(crate) code: ReplicaCode,
    /// How long ago it last applied a record of its log (a primary commits
    /// at least every heartbeat), `None` when unknown.
    pub(crate) applied_ago: Option<Duration>,
    /// Records between it and its log's end, as last known.
    pub(crate) behind: i64,
    /// It has a store readers can view.
    pub(crate) viewable: bool,
}

/// Where a read is answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Route {
    /// Here, from this member's replica (the primary, or a standby within
    /// the staleness the read accepts).
    Local {
        /// The replica is a standby.
        standby: bool,
    },
    /// At the primary's member.
    Forward {
        /// Its id.
        member: String,
        /// Where it serves HTTP.
        endpoint: String,
    },
    /// Nowhere now: why (a read waits and asks again until its wait is
    /// over).
    Unavailable(String),
    /// The keyspace specifies no such shard.
    NoShard,
}

/// Where `shard`'s read with `options` is answered, as member `me` sees it
/// in `view`, with its own replica `local`; `forwarded`: the read came from
/// another member, and is not sent on again (two members whose views
/// disagree must not pass it back and forth).
pub(crate) fn resolve(
    view: &ClusterView,
    me: &str,
    shard: &str,
    local: Option<LocalReplica>,
    options: &ReadOptions,
    forwarded: bool,
) -> Route {
    if !view.has_shard(shard) {
        // A view without this member is not loaded yet (or being loaded
        // again): it does not know that the shard does not exist.
        if view.members().contains_key(me) {
            return Route::NoShard;
        }
        return Route::Unavailable(format!(
            "this member does not know shard {shard}: its view of the keyspace is loading"
        ));
    }
    let primary = view.primary(shard);
    if local.is_some_and(|l| !l.viewable && l.code == ReplicaCode::Primary) && primary == Some(me) {
        return Route::Unavailable(format!("shard {shard}'s store here gives no views (Store::views)"));
    }
    if let Some(local) = local.filter(|l| l.viewable) {
        if local.code == ReplicaCode::Primary && primary == Some(me) {
            return Route::Local { standby: false };
        }
        let fresh = |stale: Duration| local.behind <= 0 && local.applied_ago.is_some_and(|ago| ago <= stale);
        if matches!(local.code, ReplicaCode::Standby | ReplicaCode::Primary) && options.stale.is_some_and(fresh) {
            return Route::Local { standby: true };
        }
    }
    match primary {
        None => Route::Unavailable(format!("shard {shard} has no primary")),
        Some(member) if member == me => Route::Unavailable(format!("shard {shard}'s primary here is not serving yet")),
        Some(_) if forwarded => {
            Route::Unavailable(format!("shard {shard}'s primary is not here, and the read was forwarded here"))
        }
        Some(member) => match view.members().get(member).and_then(|m| m.endpoint.clone()) {
            Some(endpoint) => Route::Forward { member: member.to_owned(), endpoint },
            None => Route::Unavailable(format!("shard {shard}'s primary {member} serves no HTTP endpoint")),
        },
    }
}

/// The first of `seen` that a state with next offsets `offsets` has not
/// applied (a source it has no offset for yet: nothing of it).
pub(crate) fn unapplied<'a>(seen: &'a [SourceOffset], offsets: &[SourceOffset]) -> Option<&'a SourceOffset> {
    seen.iter()
        .find(|s| !offsets.iter().any(|o| o.topic == s.topic && o.partition == s.partition && o.offset > s.offset))
}

/// The first of `seen` that `shard` does not read, as `view` says.
pub(crate) fn not_read<'a>(view: &ClusterView, shard: &str, seen: &'a [SourceOffset]) -> Option<&'a SourceOffset> {
    let sources = view.sources(shard).unwrap_or_default();
    seen.iter().find(|s| !sources.iter().any(|(t, p)| *t == s.topic && *p == s.partition))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::keyspace::{KeyValue, WatchEvent};
    use crate::model::{AssignmentValue, Keys, MemberSpec, RecoveryLog, ShardSpec, Source};
    use crate::status::ReplicaStatus;

    fn put(key: String, value: Vec<u8>) -> WatchEvent {
        WatchEvent::Put(KeyValue { key, value, create_revision: 1, mod_revision: 1, version: 1, lease: None })
    }

    /// Shard s1 reading t:3, member a primary, b standby; both serve HTTP.
    fn view(primary: ReplicaCode) -> ClusterView {
        let keys = Keys::new("/app");
        let mut view = ClusterView::default();
        let spec = ShardSpec::new(
            "s1",
            vec![Source { topic: "t".into(), partition: 3, min_offset: 0 }],
            RecoveryLog { topic: "log".into(), partition: 0 },
        );
        view.apply(&keys, &put(format!("{}s1", keys.shards()), serde_json::to_vec(&spec).expect("json")));
        for (id, slot, code) in [("a", 0, primary), ("b", 1, ReplicaCode::Standby)] {
            let member =
                MemberSpec { id: id.into(), zone: "z".into(), shard_limit: 10, endpoint: Some(format!("{id}:80")) };
            view.apply(&keys, &put(format!("{}z#{id}", keys.members()), serde_json::to_vec(&member).expect("json")));
            let value = AssignmentValue { slot, status: ReplicaStatus::new(code) };
            view.apply(
                &keys,
                &put(format!("{}s1#z#{id}", keys.assignments()), serde_json::to_vec(&value).expect("json")),
            );
        }
        view
    }

    fn replica(code: ReplicaCode, ago_ms: u64, behind: i64) -> Option<LocalReplica> {
        Some(LocalReplica { code, applied_ago: Some(Duration::from_millis(ago_ms)), behind, viewable: true })
    }

    #[test]
    fn the_primary_answers_and_every_other_member_forwards_to_it() {
        let view = view(ReplicaCode::Primary);
        let options = ReadOptions::default();
        assert_eq!(view.shard_reading("t", 3), Some("s1"));
        assert_eq!(view.shard_reading("t", 4), None);
        assert_eq!(
            resolve(&view, "a", "s1", replica(ReplicaCode::Primary, 10, 0), &options, false),
            Route::Local { standby: false }
        );
        let forward = Route::Forward { member: "a".into(), endpoint: "a:80".into() };
        assert_eq!(resolve(&view, "b", "s1", replica(ReplicaCode::Standby, 10, 0), &options, false), forward);
        assert_eq!(resolve(&view, "c", "s1", None, &options, false), forward);
        assert!(matches!(resolve(&view, "c", "s1", None, &options, true), Route::Unavailable(_)), "not sent on twice");
        assert!(matches!(resolve(&view, "c", "s9", None, &options, false), Route::Unavailable(_)), "c is not in it");
        assert_eq!(resolve(&view, "a", "s9", None, &options, false), Route::NoShard);
        let empty = ClusterView::default();
        assert!(matches!(resolve(&empty, "a", "s1", None, &options, false), Route::Unavailable(_)), "not loaded");
    }

    #[test]
    fn a_standby_answers_only_within_the_staleness_the_read_accepts() {
        let view = view(ReplicaCode::Primary);
        let stale = ReadOptions { stale: Some(Duration::from_secs(2)), ..ReadOptions::default() };
        let here = Route::Local { standby: true };
        assert_eq!(resolve(&view, "b", "s1", replica(ReplicaCode::Standby, 500, 0), &stale, true), here);
        assert_ne!(resolve(&view, "b", "s1", replica(ReplicaCode::Standby, 2500, 0), &stale, false), here, "too old");
        assert_ne!(resolve(&view, "b", "s1", replica(ReplicaCode::Standby, 500, 3), &stale, false), here, "behind");
        assert_ne!(resolve(&view, "b", "s1", replica(ReplicaCode::Backfill, 0, 0), &stale, false), here, "backfilling");
        let unviewable = Some(LocalReplica { viewable: false, ..replica(ReplicaCode::Standby, 0, 0).expect("some") });
        assert_ne!(resolve(&view, "b", "s1", unviewable, &stale, false), here, "no store to view");
    }

    #[test]
    fn without_a_serving_primary_a_read_is_unavailable() {
        let view = view(ReplicaCode::Standby);
        let options = ReadOptions::default();
        assert!(matches!(resolve(&view, "b", "s1", None, &options, false), Route::Unavailable(_)));
        // The keyspace says a is primary, a's replica is not yet (or no more).
        let view = super::tests::view(ReplicaCode::Primary);
        let route = resolve(&view, "a", "s1", replica(ReplicaCode::Standby, 0, 0), &options, false);
        assert!(matches!(route, Route::Unavailable(_)), "{route:?}");
    }

    #[test]
    fn options_parse_from_the_query_and_name_what_is_wrong() {
        let parsed = ReadOptions::parse(Some("x=1&seen=a.b-c%3A2%3A40%2Cd:0:0&stale=250ms&wait=1m")).expect("parses");
        assert_eq!(parsed.seen.len(), 2);
        assert_eq!((parsed.seen[0].topic.as_str(), parsed.seen[0].partition, parsed.seen[0].offset), ("a.b-c", 2, 40));
        assert_eq!((parsed.stale, parsed.wait), (Some(Duration::from_millis(250)), Duration::from_secs(60)));
        assert_eq!(ReadOptions::parse(None).expect("parses"), ReadOptions::default());
        for (query, names) in [
            ("seen=t:1", "seen"),
            ("seen=t:x:1", "seen"),
            ("stale=5", "stale"),
            ("wait=2h", "wait"),
            ("wait=61s", "wait"),
        ] {
            let e = ReadOptions::parse(Some(query)).expect_err(query);
            assert_eq!(e.parameter, names, "{query}: {e}");
            assert!(e.to_string().starts_with(&format!("invalid {names}: ")), "{query}: {e}");
        }
        let many = format!("seen={}", vec!["t:0:1"; MAX_SEEN + 1].join(","));
        assert!(ReadOptions::parse(Some(&many)).is_err(), "bounded");
    }

    #[test]
    fn a_seen_offset_is_applied_once_the_next_offset_is_past_it() {
        let at = |topic: &str, partition, offset| SourceOffset { topic: topic.into(), partition, offset };
        let state = [at("t", 0, 10), at("t", 1, 0)];
        assert_eq!(unapplied(&[at("t", 0, 9)], &state), None);
        assert_eq!(unapplied(&[at("t", 0, 9), at("t", 0, 10)], &state), Some(&at("t", 0, 10)));
        assert_eq!(unapplied(&[at("t", 1, 0)], &state), Some(&at("t", 1, 0)));
        assert_eq!(unapplied(&[at("t", 2, 0)], &state), Some(&at("t", 2, 0)), "nothing of it applied yet");
        let view = view(ReplicaCode::Primary);
        assert_eq!(not_read(&view, "s1", &[at("t", 3, 5)]), None);
        assert_eq!(not_read(&view, "s1", &[at("t", 3, 5), at("t", 2, 0)]), Some(&at("t", 2, 0)));
    }
}
