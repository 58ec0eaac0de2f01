//! The replica lifecycle as a pure state machine, after raft-rs: it takes
//! [`Event`]s and returns the [`Action`]s the caller performs (the I/O: playing
//! the recovery log, appending, opening the store, writing status). Nothing here
//! reads a clock or touches the network.
//!
//! The assignment drives the replica. Slot > 0 makes a standby: it plays the
//! recovery log to its head (BACKFILL), then tails it (STANDBY). Slot 0 makes a
//! primary: it plays the log to the head too, then appends a hand-off record
//! with a fresh author and keeps reading until that record comes back (when
//! another writer raced, it hands off again at the new head), then opens its
//! store from what was played and restores the checkpoint, and only then
//! serves (PRIMARY) and reads its sources. A standby whose slot drops to 0 is
//! promoted the same way. A primary is never demoted: its assignment is removed
//! instead. Any error fails the replica (FAILED with the error) and tears it
//! down; FAILED sticks to that assignment until a new one (a new create
//! revision) starts over. Removing the assignment tears the replica down.

pub use crate::replica_failure::{FailureKind, ReplicaFailure};
use crate::status::{ReplicaCode, ReplicaStatus};

/// The identity of one assignment: its key's create revision. A new assignment
/// of the same shard to the same member is a new key, with a new revision.
pub type AssignmentId = i64;

/// Where the replica is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum State {
    /// No assignment.
    Idle,
    /// Playing the log to its head; `promote` once it is there.
    Backfill {
        /// The assignment.
        assignment: AssignmentId,
        /// Slot 0: become primary after playback.
        promote: bool,
    },
    /// At the head, tailing the log.
    Standby {
        /// The assignment.
        assignment: AssignmentId,
    },
    /// Taking the log over: appending a hand-off record and reading it back
    /// (again at the new head when another writer's came after it; the I/O
    /// retries, and fails the replica after a bound).
    HandingOff {
        /// The assignment.
        assignment: AssignmentId,
    },
    /// Opening the store and restoring the checkpoint.
    Recovering {
        /// The assignment.
        assignment: AssignmentId,
    },
    /// Serving.
    Primary {
        /// The assignment.
        assignment: AssignmentId,
    },
    /// Failed under this assignment; stays so until a new assignment.
    Failed {
        /// The assignment.
        assignment: AssignmentId,
        /// True once the tear-down the failure started has finished.
        torn_down: bool,
    },
    /// Stopping readers, waiting for pending appends, closing the store.
    TearingDown {
        /// Where to go once torn down: a new assignment that arrived meanwhile.
        next: Option<(AssignmentId, u32)>,
    },
}

/// What happened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// The member's assignment of this shard, created or updated.
    Assigned {
        /// Its create revision.
        assignment: AssignmentId,
        /// 0 for the primary, > 0 for standbys.
        slot: u32,
    },
    /// The assignment was removed.
    Unassigned,
    /// Playback reached the log's head.
    PlayedToHead,
    /// This replica's hand-off record came back with no other writer's
    /// record after it: it writes the log from here on.
    HandedOff,
    /// The store is open and the checkpoint restored.
    Recovered,
    /// Something failed.
    Failed(ReplicaFailure),
    /// Tear-down finished: readers stopped, appends flushed, store closed.
    TornDown,
}

/// What the caller must do, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Start playing the recovery log from the hints.
    StartPlayback,
    /// Append a hand-off record with a fresh author at the log's head.
    AppendHandOff,
    /// Open the store from what was played and restore the checkpoint.
    OpenStore,
    /// Start reading the sources from the checkpoint and running transactions.
    StartSources,
    /// A standby at its log's head: let the application follow the
    /// transactions it plays (see [`crate::ShardApp::following`]).
    Follow,
    /// Write this status under the assignment (reduced with the stored one,
    /// with a revision-checked transaction, retried with backoff).
    WriteStatus(AssignmentId, ReplicaStatus),
    /// Count the replica's failure, by what it failed of.
    CountFailure(FailureKind),
    /// Stop everything and release the store.
    TearDown,
}

/// The replica.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Replica {
    state: State,
    /// Assignments up to this id were removed or replaced: an event naming one
    /// is stale (create revisions only grow, so a removed assignment never
    /// comes back; a new one has a higher id).
    retired_through: AssignmentId,
}

impl Default for Replica {
    fn default() -> Self {
        Replica { state: State::Idle, retired_through: 0 }
    }
}

fn status(assignment: AssignmentId, code: ReplicaCode) -> Action {
    Action::WriteStatus(assignment, ReplicaStatus::new(code))
}

impl Replica {
    /// Where the replica is.
    pub fn state(&self) -> &State {
        &self.state
    }

    /// The assignment the replica works under, if any.
    pub fn assignment(&self) -> Option<AssignmentId> {
        match &self.state {
            State::Idle | State::TearingDown { .. } => None,
            State::Backfill { assignment, .. }
            | State::Standby { assignment }
            | State::HandingOff { assignment, .. }
            | State::Recovering { assignment }
            | State::Primary { assignment }
            | State::Failed { assignment, .. } => Some(*assignment),
        }
    }

    /// Applies `event`; returns what to do. Events that do not apply in the
    /// current state (a late playback signal after a failure, say) do nothing.
    pub fn step(&mut self, event: Event) -> Vec<Action> {
        match event {
            Event::Assigned { assignment, slot } => self.assigned(assignment, slot),
            Event::Unassigned => {
                self.retire();
                self.unassigned()
            }
            Event::Failed(failure) => self.failed(failure),
            Event::TornDown => self.torn_down(),
            Event::PlayedToHead | Event::HandedOff | Event::Recovered => self.progressed(event),
        }
    }

    /// The member's assignment, new or updated.
    fn assigned(&mut self, assignment: AssignmentId, slot: u32) -> Vec<Action> {
        use State as S;
        if assignment <= self.retired_through {
            return vec![];
        }
        if Some(assignment) != self.assignment() {
            self.retire();
        }
        match self.state.clone() {
            // A new assignment: start from scratch, tearing down first if
            // something of an older one is still running.
            S::Idle => self.begin(assignment, slot),
            S::TearingDown { .. } => {
                self.state = S::TearingDown { next: Some((assignment, slot)) };
                vec![]
            }
            // A failed replica is torn down already, or is being torn down.
            S::Failed { assignment: old, torn_down } if assignment != old => {
                if torn_down {
                    self.begin(assignment, slot)
                } else {
                    self.state = S::TearingDown { next: Some((assignment, slot)) };
                    vec![]
                }
            }
            _ if Some(assignment) != self.assignment() => {
                self.state = S::TearingDown { next: Some((assignment, slot)) };
                vec![Action::TearDown]
            }
            // The same assignment updated: only a slot dropping to 0 matters.
            S::Backfill { assignment, .. } if slot == 0 => {
                self.state = S::Backfill { assignment, promote: true };
                vec![]
            }
            S::Standby { assignment } if slot == 0 => {
                self.state = S::HandingOff { assignment };
                vec![Action::AppendHandOff]
            }
            _ => vec![],
        }
    }

    /// Playback, hand-off or recovery reached its end: the next step, or
    /// nothing for a signal of work that no longer runs.
    fn progressed(&mut self, event: Event) -> Vec<Action> {
        use State as S;
        match (self.state.clone(), event) {
            (S::Backfill { assignment, promote: true }, Event::PlayedToHead) => {
                self.state = S::HandingOff { assignment };
                vec![status(assignment, ReplicaCode::Standby), Action::AppendHandOff]
            }
            (S::Backfill { assignment, promote: false }, Event::PlayedToHead) => {
                self.state = S::Standby { assignment };
                vec![status(assignment, ReplicaCode::Standby), Action::Follow]
            }
            (S::HandingOff { assignment }, Event::HandedOff) => {
                self.state = S::Recovering { assignment };
                vec![Action::OpenStore]
            }
            (S::Recovering { assignment }, Event::Recovered) => {
                self.state = S::Primary { assignment };
                vec![status(assignment, ReplicaCode::Primary), Action::StartSources]
            }
            _ => vec![],
        }
    }

    fn failed(&mut self, failure: ReplicaFailure) -> Vec<Action> {
        match self.state {
            State::Idle | State::Failed { .. } | State::TearingDown { .. } => vec![],
            _ => {
                let assignment = self.assignment().unwrap_or_default();
                self.state = State::Failed { assignment, torn_down: false };
                vec![
                    Action::WriteStatus(assignment, ReplicaStatus::failed(failure.message)),
                    Action::CountFailure(failure.kind),
                    Action::TearDown,
                ]
            }
        }
    }

    fn unassigned(&mut self) -> Vec<Action> {
        use State as S;
        match self.state {
            S::Idle => vec![],
            S::TearingDown { .. } => {
                self.state = S::TearingDown { next: None };
                vec![]
            }
            // A failed replica's tear-down is done, or under way.
            S::Failed { torn_down, .. } => {
                self.state = if torn_down { S::Idle } else { S::TearingDown { next: None } };
                vec![]
            }
            _ => {
                self.state = S::TearingDown { next: None };
                vec![Action::TearDown]
            }
        }
    }

    fn torn_down(&mut self) -> Vec<Action> {
        match self.state.clone() {
            State::Failed { assignment, .. } => {
                self.state = State::Failed { assignment, torn_down: true };
                vec![]
            }
            State::TearingDown { next: Some((assignment, slot)) } => self.begin(assignment, slot),
            State::TearingDown { next: None } => {
                self.state = State::Idle;
                vec![]
            }
            _ => vec![],
        }
    }

    /// The current assignment (if any) will not come back.
    fn retire(&mut self) {
        if let Some(a) = self.assignment() {
            self.retired_through = self.retired_through.max(a);
        }
    }

    fn begin(&mut self, assignment: AssignmentId, slot: u32) -> Vec<Action> {
        self.state = State::Backfill { assignment, promote: slot == 0 };
        vec![status(assignment, ReplicaCode::Backfill), Action::StartPlayback]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn backfill(a: AssignmentId) -> Action {
        status(a, ReplicaCode::Backfill)
    }

    #[test]
    fn a_standby_backfills_then_tails() {
        let mut r = Replica::default();
        assert_eq!(r.step(Event::Assigned { assignment: 7, slot: 1 }), [backfill(7), Action::StartPlayback]);
        assert_eq!(r.state(), &State::Backfill { assignment: 7, promote: false });
        assert_eq!(r.step(Event::PlayedToHead), [status(7, ReplicaCode::Standby), Action::Follow]);
        assert_eq!(r.state(), &State::Standby { assignment: 7 });
    }

    #[test]
    fn a_primary_plays_hands_off_recovers_then_serves() {
        let mut r = Replica::default();
        assert_eq!(r.step(Event::Assigned { assignment: 3, slot: 0 }), [backfill(3), Action::StartPlayback]);
        assert_eq!(r.step(Event::PlayedToHead), [status(3, ReplicaCode::Standby), Action::AppendHandOff]);
        assert_eq!(r.step(Event::Recovered), [], "no store before the hand-off is read back");
        assert_eq!(r.state(), &State::HandingOff { assignment: 3 });
        assert_eq!(r.step(Event::HandedOff), [Action::OpenStore]);
        assert_eq!(r.step(Event::Recovered), [status(3, ReplicaCode::Primary), Action::StartSources]);
        assert_eq!(r.state(), &State::Primary { assignment: 3 });
    }

    #[test]
    fn a_standby_whose_slot_drops_to_zero_is_promoted() {
        let mut r = Replica::default();
        r.step(Event::Assigned { assignment: 5, slot: 2 });
        // Promotion requested mid-backfill waits for the head.
        assert_eq!(r.step(Event::Assigned { assignment: 5, slot: 0 }), []);
        assert_eq!(r.step(Event::PlayedToHead), [status(5, ReplicaCode::Standby), Action::AppendHandOff]);
        let mut s = Replica::default();
        s.step(Event::Assigned { assignment: 6, slot: 1 });
        s.step(Event::PlayedToHead);
        assert_eq!(s.step(Event::Assigned { assignment: 6, slot: 0 }), [Action::AppendHandOff]);
    }

    #[test]
    fn a_primary_is_never_demoted() {
        let mut r = Replica::default();
        for e in [Event::Assigned { assignment: 1, slot: 0 }, Event::PlayedToHead, Event::HandedOff, Event::Recovered] {
            r.step(e);
        }
        assert_eq!(r.step(Event::Assigned { assignment: 1, slot: 1 }), []);
        assert_eq!(r.state(), &State::Primary { assignment: 1 });
    }

    #[test]
    fn failure_sticks_to_its_assignment_until_a_new_one() {
        let mut r = Replica::default();
        r.step(Event::Assigned { assignment: 9, slot: 1 });
        assert_eq!(
            r.step(Event::Failed(ReplicaFailure::new(FailureKind::Kafka, "log: read failed"))),
            [
                Action::WriteStatus(9, ReplicaStatus::failed("log: read failed")),
                Action::CountFailure(FailureKind::Kafka),
                Action::TearDown
            ]
        );
        assert_eq!(r.step(Event::PlayedToHead), [], "late signals are ignored");
        assert_eq!(r.step(Event::Assigned { assignment: 9, slot: 0 }), [], "same assignment: still failed");
        assert_eq!(r.state(), &State::Failed { assignment: 9, torn_down: false });
        // A new assignment (the allocator's retry) starts over once the
        // failure's tear-down has finished.
        assert_eq!(r.step(Event::Assigned { assignment: 10, slot: 1 }), []);
        assert_eq!(r.step(Event::TornDown), [backfill(10), Action::StartPlayback]);
        let mut done = Replica::default();
        done.step(Event::Assigned { assignment: 1, slot: 1 });
        done.step(Event::Failed(ReplicaFailure::new(FailureKind::Store, "x")));
        done.step(Event::TornDown);
        assert_eq!(done.step(Event::Assigned { assignment: 2, slot: 1 }), [backfill(2), Action::StartPlayback]);
    }

    #[test]
    fn removing_the_assignment_tears_down_to_idle() {
        let mut r = Replica::default();
        r.step(Event::Assigned { assignment: 2, slot: 1 });
        r.step(Event::PlayedToHead);
        assert_eq!(r.step(Event::Unassigned), [Action::TearDown]);
        assert_eq!(r.state(), &State::TearingDown { next: None });
        assert_eq!(r.step(Event::TornDown), []);
        assert_eq!(r.state(), &State::Idle);
        // A failed replica's own tear-down ends it.
        let mut f = Replica::default();
        f.step(Event::Assigned { assignment: 4, slot: 1 });
        f.step(Event::Failed(ReplicaFailure::new(FailureKind::Store, "x")));
        assert_eq!(f.step(Event::Unassigned), [], "its tear-down is under way");
        assert_eq!(f.step(Event::TornDown), []);
        assert_eq!(f.state(), &State::Idle);
    }

    #[test]
    fn events_of_a_removed_assignment_are_stale() {
        let mut r = Replica::default();
        r.step(Event::Assigned { assignment: 5, slot: 1 });
        r.step(Event::Unassigned);
        r.step(Event::TornDown);
        assert_eq!(r.step(Event::Assigned { assignment: 5, slot: 0 }), [], "a late event of the removed one");
        assert_eq!(r.step(Event::Assigned { assignment: 4, slot: 0 }), [], "an older one");
        assert_eq!(r.step(Event::Assigned { assignment: 6, slot: 0 }), [backfill(6), Action::StartPlayback]);
    }

    #[test]
    fn an_assignment_arriving_during_tear_down_starts_after_it() {
        let mut r = Replica::default();
        r.step(Event::Assigned { assignment: 2, slot: 1 });
        r.step(Event::Unassigned);
        assert_eq!(r.step(Event::Assigned { assignment: 8, slot: 0 }), []);
        assert_eq!(r.step(Event::TornDown), [backfill(8), Action::StartPlayback]);
        assert_eq!(r.state(), &State::Backfill { assignment: 8, promote: true });
    }
}
