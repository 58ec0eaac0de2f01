//! [`ReplicaFailure`]: why a replica failed, as its state machine and the
//! member's metrics take it: a [`FailureKind`] from a bounded set (the
//! `kind` label of `kshard_runtime_replica_failures_total`) and the text
//! the shard's status shows. Leaf module: the state machine
//! (`replica.rs`) and the worker that fails (`replica_worker.rs`) both
//! name it.

/// What a replica failed of.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FailureKind {
    /// A Kafka call on the recovery log or a source.
    Kafka,
    /// Another writer took the recovery log over (a new primary, or a
    /// zombie of this one fenced).
    Fenced,
    /// The recovery log itself: a chain that does not hold, a record too
    /// large, a log cut past the replica, no snapshot to start from.
    RecoveryLog,
    /// The replica's store on the member's disk.
    Store,
    /// The application returned an error.
    Application,
    /// The application (or the runtime) panicked.
    Panic,
    /// The shard's hints in the keyspace.
    Keyspace,
    /// The shard's spec cannot be served: no spec here, no sources, no log
    /// where one is needed.
    Spec,
    /// The replica's task ended without saying why (cancelled).
    Runtime,
}

impl FailureKind {
    /// Every kind, in the order of the metric's series.
    pub const ALL: [FailureKind; 9] = [
        FailureKind::Kafka,
        FailureKind::Fenced,
        FailureKind::RecoveryLog,
        FailureKind::Store,
        FailureKind::Application,
        FailureKind::Panic,
        FailureKind::Keyspace,
        FailureKind::Spec,
        FailureKind::Runtime,
    ];

    /// The `kind` label's value.
    pub fn name(self) -> &'static str {
        match self {
            FailureKind::Kafka => "kafka",
            FailureKind::Fenced => "fenced",
            FailureKind::RecoveryLog => "recovery_log",
            FailureKind::Store => "store",
            FailureKind::Application => "application",
            FailureKind::Panic => "panic",
            FailureKind::Keyspace => "keyspace",
            FailureKind::Spec => "spec",
            FailureKind::Runtime => "runtime",
        }
    }
}

/// Why a replica failed: its kind, and what the shard's status says.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct ReplicaFailure {
    /// What it failed of.
    pub kind: FailureKind,
    /// What happened, as the status shows it.
    pub message: String,
}

impl ReplicaFailure {
    /// A failure of `kind`, saying `message`.
    pub fn new(kind: FailureKind, message: impl Into<String>) -> Self {
        ReplicaFailure { kind, message: message.into() }
    }
}
