//! Why a schedule of the simulation failed, as [`super::Failed`] reports it:
//! an invariant broken at a step or while the healed cluster settled, a
//! cluster that did not settle to the run without faults ([`Unsettled`]
//! says how it differs), or a run that panicked.

use std::time::Duration;

/// Why a schedule (or the run without faults) failed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ScheduleFailure {
    /// An invariant broke at `step` (while its fault held, or after it);
    /// `done`: the faults so far, as the schedule lists them.
    #[error("step {step} of {done}: {why}")]
    Step { step: usize, done: String, why: String },
    /// An invariant broke while the healed cluster settled.
    #[error("settling after {done}: {why}")]
    Settling { done: String, why: String },
    /// The healed cluster was not the run without faults `within` after
    /// healing.
    #[error("not settled {within:?} after {done} healed: {why}")]
    NotSettled { within: Duration, done: String, why: Unsettled },
    /// The run without faults broke an invariant.
    #[error("without faults: {0}")]
    Reference(String),
    /// The run without faults did not settle `within`.
    #[error("without faults: not settled within {within:?}")]
    ReferenceUnsettled { within: Duration },
    /// The schedule's runtime could not be built.
    #[error("building the schedule's runtime: {0}")]
    Runtime(std::io::Error),
    /// The run panicked, saying this.
    #[error("panicked: {0}")]
    Panicked(String),
}

/// How a cluster is not (yet) what the run without faults ended with.
#[derive(Debug, thiserror::Error)]
pub(crate) enum Unsettled {
    /// A shard without exactly one PRIMARY.
    #[error("{store}: primaries {primaries:?} ({statuses})")]
    Primaries { store: String, primaries: Vec<usize>, statuses: String },
    /// The PRIMARY's store is not there, or does not read.
    #[error("{store}: the primary's store: {why}")]
    Store { store: String, why: String },
    /// A PRIMARY's store holds something else.
    #[error("{store}: the primary holds {difference}")]
    PrimaryHolds { store: String, difference: String },
    /// The recovery log's chain plays to something else.
    #[error("{store}: the log's chain holds {difference}")]
    ChainHolds { store: String, difference: String },
    /// The outputs are not that run's: the first that differs.
    #[error("outputs differ from the run without faults, first at {first}")]
    Outputs { first: String },
}
