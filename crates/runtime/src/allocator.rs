//! The allocator: given the shards, the members and the current assignments
//! with their replicas' status, the changes that move towards every shard having
//! its replicas (the primary and `hot_standbys` standbys) — pure, so that one
//! elected member runs it on what the keyspace holds and writes the changes
//! with revision-checked transactions.
//!
//! Rules (Gazette's, and kshard's retry of FAILED replicas):
//! - a shard wants R = 1 + hot standbys replicas (0 when disabled), at most one
//!   per member, within each member's shard limit, and — when the members span
//!   two zones or more and R ≥ 2 — at most R − 1 in one zone;
//! - a replica that is STANDBY or PRIMARY is consistent; the allocator never
//!   removes a consistent replica while fewer than R consistent ones would
//!   remain (members that leave take theirs with them, which no one can help);
//! - slot 0 is the primary: a shard whose primary is gone gets its most
//!   advanced replica promoted (PRIMARY, then STANDBY, …; FAILED last);
//! - a FAILED replica is removed once its crash-loop backoff has passed (the
//!   caller says which), so that a new assignment — a new start — follows,
//!   instead of staying assigned forever;
//! - work moves when members join: while one member holds two replicas more than
//!   another, a shard with all its replicas consistent gets an extra one on the
//!   less loaded member; once that one is consistent, the surplus goes from the
//!   more loaded member (make before break), and surplus always goes from the
//!   zone holding most of the shard's replicas first;
//! - primaries spread: a promotion picks, among equally advanced replicas, the
//!   one on the member with the fewest primaries; and once everything is quiet,
//!   a member with two primaries more than another gives one up (see
//!   `balance_primaries`; shards with two hot standbys or more only).
//!
//! Each call makes progress; the caller calls again after the keyspace changed.

use std::collections::{BTreeMap, BTreeSet};

use crate::status::ReplicaCode;

/// A shard as the allocator sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Shard {
    /// Its id.
    pub id: String,
    /// Replicas wanted (0 when disabled).
    pub replicas: u32,
}

/// A member as the allocator sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Member {
    /// Its id.
    pub id: String,
    /// Its zone.
    pub zone: String,
    /// The most replicas it takes.
    pub limit: u32,
}

/// A current assignment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Current {
    /// The shard.
    pub shard: String,
    /// The member.
    pub member: String,
    /// 0 for the primary.
    pub slot: u32,
    /// Its replica's status.
    pub code: ReplicaCode,
    /// For a FAILED replica: its backoff has passed, it may be removed.
    pub retry_due: bool,
}

/// A change to make.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum Change {
    /// Remove the assignment of `shard` to `member`.
    Remove {
        /// The shard.
        shard: String,
        /// The member.
        member: String,
    },
    /// Give `member` a new assignment of `shard` in `slot`.
    Add {
        /// The shard.
        shard: String,
        /// The member.
        member: String,
        /// The slot.
        slot: u32,
    },
    /// Move an existing assignment to another slot (0: promote).
    Reslot {
        /// The shard.
        shard: String,
        /// The member.
        member: String,
        /// The new slot.
        slot: u32,
    },
}

/// How advanced a replica is, for choosing a primary (higher is better).
fn rank(code: ReplicaCode) -> u8 {
    match code {
        ReplicaCode::Primary => 4,
        ReplicaCode::Standby => 3,
        ReplicaCode::Backfill => 2,
        ReplicaCode::Idle => 1,
        ReplicaCode::Failed => 0,
    }
}

/// The changes towards the wanted assignments.
pub fn allocate(shards: &[Shard], members: &[Member], current: &[Current]) -> Vec<Change> {
    let member_by_id: BTreeMap<&str, &Member> = members.iter().map(|m| (m.id.as_str(), m)).collect();
    let zones: BTreeSet<&str> = members.iter().map(|m| m.zone.as_str()).collect();
    let mut changes = Vec::new();
    let by_shard = kept(shards, current, &member_by_id, &mut changes);
    let mut tally = Tally::new(members, &by_shard);
    for shard in shards.iter().filter(|s| s.replicas > 0) {
        let r = shard.replicas as usize;
        let mut replicas: Vec<&Current> = by_shard.get(shard.id.as_str()).cloned().unwrap_or_default();
        if replicas.len() > r {
            shed_surplus(shard, &mut replicas, &mut tally, &member_by_id, &mut changes);
        }
        choose_primary(shard, &replicas, &mut tally, &mut changes);
        for (member, slot) in missing(shard, &replicas, members, &mut tally, &zones, &member_by_id) {
            changes.push(Change::Add { shard: shard.id.clone(), member: member.to_owned(), slot });
        }
    }
    // Moving work to members that joined: one extra replica at a time, on a
    // shard whose replicas are all consistent and complete.
    if changes.is_empty()
        && let Some(change) = rebalance(shards, members, &by_shard, &tally.load, &zones, &member_by_id)
    {
        changes.push(change);
    }
    if changes.is_empty()
        && let Some(change) = balance_primaries(shards, &by_shard, &tally.primaries)
    {
        changes.push(change);
    }
    changes
}

/// The assignments that stay, by shard. Those of members that left are
/// going with their lease (neither kept nor removed); those of shards that
/// are gone or disabled, and FAILED ones due a retry, are removed now.
fn kept<'a>(
    shards: &[Shard],
    current: &'a [Current],
    member_by_id: &BTreeMap<&str, &Member>,
    changes: &mut Vec<Change>,
) -> BTreeMap<&'a str, Vec<&'a Current>> {
    let wanted: BTreeMap<&str, u32> = shards.iter().map(|s| (s.id.as_str(), s.replicas)).collect();
    let mut by_shard: BTreeMap<&str, Vec<&Current>> = BTreeMap::new();
    for c in current {
        if !member_by_id.contains_key(c.member.as_str()) {
            continue;
        }
        let remove = match wanted.get(c.shard.as_str()) {
            None | Some(0) => true,
            Some(_) => c.code == ReplicaCode::Failed && c.retry_due,
        };
        if remove {
            changes.push(Change::Remove { shard: c.shard.clone(), member: c.member.clone() });
        } else {
            by_shard.entry(c.shard.as_str()).or_default().push(c);
        }
    }
    by_shard
}

/// How many replicas, and how many primaries, each member holds as the
/// changes so far leave them.
struct Tally<'a> {
    load: BTreeMap<&'a str, u32>,
    primaries: BTreeMap<&'a str, u32>,
}

impl<'a> Tally<'a> {
    fn new(members: &'a [Member], by_shard: &BTreeMap<&'a str, Vec<&'a Current>>) -> Self {
        let mut load: BTreeMap<&str, u32> = members.iter().map(|m| (m.id.as_str(), 0)).collect();
        let mut primaries = load.clone();
        for c in by_shard.values().flatten() {
            *load.entry(c.member.as_str()).or_default() += 1;
            if c.slot == 0 {
                *primaries.entry(c.member.as_str()).or_default() += 1;
            }
        }
        Tally { load, primaries }
    }

    fn primary_gone(&mut self, member: &str) {
        if let Some(n) = self.primaries.get_mut(member) {
            *n = n.saturating_sub(1);
        }
    }

    fn primary_added(&mut self, member: &'a str) {
        *self.primaries.entry(member).or_default() += 1;
    }
}

/// Surplus (hot standbys lowered, or a move's new replica caught up):
/// consistent replicas in the zone holding most of the shard's replicas, on
/// the most loaded members (the primary too, when its member is the most
/// loaded: a standby is promoted — without that a member holding only
/// primaries could never shed work, and moves would churn forever), a
/// standby before the primary among equals, only while more than R
/// consistent remain. A replica still catching up is never removed for
/// surplus: it is what a move waits for, and once it is consistent the
/// surplus is consistent. A FAILED one left here is not due its retry
/// (those went in [`kept`]) and waits it out like any other: removed at
/// once, the move that added it would add it again, and a replica failing
/// at start would fail in a loop.
fn shed_surplus<'a>(
    shard: &Shard,
    replicas: &mut Vec<&'a Current>,
    tally: &mut Tally<'a>,
    member_by_id: &BTreeMap<&str, &Member>,
    changes: &mut Vec<Change>,
) {
    let r = shard.replicas as usize;
    let order = surplus_order(replicas, &tally.load, member_by_id);
    let mut consistent_left = replicas.iter().filter(|c| c.code.is_consistent()).count();
    let mut surplus = replicas.len() - r;
    for c in order {
        if surplus == 0 {
            break;
        }
        if consistent_left <= r {
            continue;
        }
        consistent_left -= 1;
        changes.push(Change::Remove { shard: shard.id.clone(), member: c.member.clone() });
        if let Some(l) = tally.load.get_mut(c.member.as_str()) {
            *l -= 1;
        }
        if c.slot == 0 {
            tally.primary_gone(&c.member);
        }
        replicas.retain(|x| x.member != c.member);
        surplus -= 1;
    }
}

/// The primary: promote the most advanced replica when slot 0 is empty, or
/// held by a FAILED replica waiting for its retry while another can serve.
/// Among equally advanced replicas, the one on the member with the fewest
/// primaries.
fn choose_primary<'a>(shard: &Shard, replicas: &[&'a Current], tally: &mut Tally<'a>, changes: &mut Vec<Change>) {
    let best = replicas
        .iter()
        .max_by_key(|c| {
            let held = tally.primaries.get(c.member.as_str()).copied().unwrap_or(0);
            (rank(c.code), std::cmp::Reverse(held), std::cmp::Reverse(c.member.as_str()))
        })
        .copied();
    let holder = replicas.iter().find(|c| c.slot == 0).copied();
    match (holder, best) {
        (None, Some(best)) => {
            changes.push(Change::Reslot { shard: shard.id.clone(), member: best.member.clone(), slot: 0 });
            tally.primary_added(&best.member);
        }
        (Some(failed), Some(best)) if failed.code == ReplicaCode::Failed && best.code != ReplicaCode::Failed => {
            let free = (1..).find(|s| !replicas.iter().any(|c| c.slot == *s)).unwrap_or(1);
            changes.push(Change::Reslot { shard: shard.id.clone(), member: failed.member.clone(), slot: free });
            changes.push(Change::Reslot { shard: shard.id.clone(), member: best.member.clone(), slot: 0 });
            tally.primary_gone(&failed.member);
            tally.primary_added(&best.member);
        }
        _ => {}
    }
}

/// Missing replicas: (member, slot) on the least loaded members that may
/// take them, counted in `tally`.
fn missing<'a>(
    shard: &Shard,
    replicas: &[&Current],
    members: &'a [Member],
    tally: &mut Tally<'a>,
    zones: &BTreeSet<&str>,
    member_by_id: &BTreeMap<&str, &Member>,
) -> Vec<(&'a str, u32)> {
    let r = shard.replicas as usize;
    let mut holders: BTreeSet<&str> = replicas.iter().map(|c| c.member.as_str()).collect();
    let mut slots: BTreeSet<u32> = replicas.iter().map(|c| c.slot).collect();
    let has_primary = !replicas.is_empty();
    let mut added = Vec::new();
    while replicas.len() + added.len() < r {
        let Some(member) = candidates(members, &tally.load, &holders, zones, r, member_by_id).into_iter().next() else {
            break;
        };
        let first = !has_primary && added.is_empty();
        let slot = if first { 0 } else { (1..).find(|s| !slots.contains(s)).unwrap_or(1) };
        added.push((member, slot));
        holders.insert(member);
        slots.insert(slot);
        *tally.load.entry(member).or_default() += 1;
    }
    added
}

/// Spreading primaries (the replicas that do the work) over the members: when
/// every shard is quiet — all its replicas consistent, its primary PRIMARY —
/// and a member holds two primaries more than another member that holds a
/// STANDBY of one of them, that primary's assignment is removed. The next
/// round promotes a standby on the member with the fewest primaries and gives
/// the shard its replica back. Only shards with two hot standbys or more take
/// part (the lag monitor's: a replica on every member), and only for a
/// standby to take over: the recovery log keeps every committed transaction
/// whatever happens to the replicas, so the move risks a moment of
/// availability, never data.
fn balance_primaries(
    shards: &[Shard],
    by_shard: &BTreeMap<&str, Vec<&Current>>,
    primaries: &BTreeMap<&str, u32>,
) -> Option<Change> {
    let quiet = shards.iter().filter(|s| s.replicas > 0).all(|s| {
        by_shard.get(s.id.as_str()).is_some_and(|replicas| {
            replicas.iter().all(|c| c.code.is_consistent())
                && replicas.iter().any(|c| c.slot == 0 && c.code == ReplicaCode::Primary)
        })
    });
    if !quiet {
        return None;
    }
    let (busiest, most) = primaries.iter().max_by_key(|(m, n)| (**n, std::cmp::Reverse(**m)))?;
    for shard in shards.iter().filter(|s| s.replicas >= 3) {
        let Some(replicas) = by_shard.get(shard.id.as_str()) else { continue };
        if !replicas.iter().any(|c| c.slot == 0 && c.member == *busiest) {
            continue;
        }
        let relief = replicas.iter().any(|c| {
            c.code == ReplicaCode::Standby && primaries.get(c.member.as_str()).is_some_and(|n| n + 2 <= *most)
        });
        if relief {
            return Some(Change::Remove { shard: shard.id.clone(), member: (*busiest).to_owned() });
        }
    }
    None
}

/// The members that may take one more replica of a shard held by `holders`,
/// with R replicas wanted, the least loaded first.
fn candidates<'m>(
    members: &'m [Member],
    load: &BTreeMap<&str, u32>,
    holders: &BTreeSet<&str>,
    zones: &BTreeSet<&str>,
    r: usize,
    member_by_id: &BTreeMap<&str, &Member>,
) -> Vec<&'m str> {
    let zoned = zones.len() >= 2 && r >= 2;
    let mut per_zone: BTreeMap<&str, usize> = BTreeMap::new();
    for h in holders {
        if let Some(m) = member_by_id.get(h) {
            *per_zone.entry(m.zone.as_str()).or_default() += 1;
        }
    }
    let mut out: Vec<&Member> = members
        .iter()
        .filter(|m| !holders.contains(m.id.as_str()))
        .filter(|m| load.get(m.id.as_str()).copied().unwrap_or(0) < m.limit)
        .filter(|m| !zoned || per_zone.get(m.zone.as_str()).copied().unwrap_or(0) < r - 1)
        .collect();
    out.sort_by_key(|m| (load.get(m.id.as_str()).copied().unwrap_or(0), m.id.as_str()));
    out.into_iter().map(|m| m.id.as_str()).collect()
}

/// The order surplus replicas of one shard go in: consistent ones in the
/// zone holding most of the shard's replicas first (so that those left span
/// as many zones as before), on the most loaded members, a standby before the
/// primary among equals. Replicas catching up or FAILED are not surplus.
fn surplus_order<'c>(
    replicas: &[&'c Current],
    load: &BTreeMap<&str, u32>,
    member_by_id: &BTreeMap<&str, &Member>,
) -> Vec<&'c Current> {
    let zone_of = |c: &Current| member_by_id.get(c.member.as_str()).map(|m| m.zone.as_str());
    let in_zone = |c: &Current| replicas.iter().filter(|x| zone_of(x) == zone_of(c)).count();
    let mut order: Vec<&Current> = replicas.iter().filter(|c| c.code.is_consistent()).copied().collect();
    order.sort_by_key(|c| {
        (
            std::cmp::Reverse(in_zone(c)),
            std::cmp::Reverse(load.get(c.member.as_str()).copied().unwrap_or(0)),
            c.slot == 0,
        )
    });
    order
}

fn rebalance(
    shards: &[Shard],
    members: &[Member],
    by_shard: &BTreeMap<&str, Vec<&Current>>,
    load: &BTreeMap<&str, u32>,
    zones: &BTreeSet<&str>,
    member_by_id: &BTreeMap<&str, &Member>,
) -> Option<Change> {
    let busiest = members.iter().max_by_key(|m| (load.get(m.id.as_str()).copied().unwrap_or(0), m.id.as_str()))?;
    let busiest_load = load.get(busiest.id.as_str()).copied().unwrap_or(0);
    for shard in shards.iter().filter(|s| s.replicas > 0) {
        let Some(replicas) = by_shard.get(shard.id.as_str()) else { continue };
        let complete = replicas.len() == shard.replicas as usize && replicas.iter().all(|c| c.code.is_consistent());
        if !complete || !replicas.iter().any(|c| c.member == busiest.id) {
            continue;
        }
        let holders: BTreeSet<&str> = replicas.iter().map(|c| c.member.as_str()).collect();
        let slots: BTreeSet<u32> = replicas.iter().map(|c| c.slot).collect();
        let slot = (1..).find(|s| !slots.contains(s)).unwrap_or(1);
        // The extra replica is one more than R: the zone rule counts it so.
        let r = shard.replicas as usize + 1;
        for target in candidates(members, load, &holders, zones, r, member_by_id) {
            if load.get(target).copied().unwrap_or(0) + 2 > busiest_load {
                break;
            }
            // Only a move whose surplus, once the new replica caught up, is
            // on a member at least two more loaded than the target: another
            // would be undone (zone-aware surplus removal taking the new
            // one), and made again, forever.
            let extra = Current {
                shard: shard.id.clone(),
                member: target.to_owned(),
                slot,
                code: ReplicaCode::Standby,
                retry_due: false,
            };
            let mut after = load.clone();
            *after.entry(target).or_default() += 1;
            let with: Vec<&Current> = replicas.iter().copied().chain(std::iter::once(&extra)).collect();
            let sheds = surplus_order(&with, &after, member_by_id).first().is_some_and(|c| {
                c.member != target
                    && load.get(c.member.as_str()).copied().unwrap_or(0) >= load.get(target).copied().unwrap_or(0) + 2
            });
            if sheds {
                return Some(Change::Add { shard: shard.id.clone(), member: target.to_owned(), slot });
            }
        }
    }
    None
}
