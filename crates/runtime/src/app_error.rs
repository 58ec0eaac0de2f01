//! [`AppError`]: why an application refused a message or could not build
//! its view of a shard's state.

use crate::store_data::StoreError;

/// Why an application refused a message or could not build its view of a
/// shard's state, in its own words or as its own error. It fails the
/// replica, which says where (the message's topic, partition and offset, or
/// the step) around it.
#[derive(Debug, thiserror::Error)]
#[error("{error}")]
pub struct AppError {
    error: Box<dyn std::error::Error + Send + Sync>,
    /// The message is bad, not the application: the shard's
    /// [`Refusals`](crate::Refusals) policy decides.
    refusal: bool,
}

impl AppError {
    /// `error` as the application's: it fails the replica.
    pub fn new(error: impl Into<Box<dyn std::error::Error + Send + Sync>>) -> Self {
        AppError { error: error.into(), refusal: false }
    }

    /// The application refuses the message, for `reason`: the shard's
    /// [`Refusals`](crate::Refusals) policy decides what becomes of it (see the module's doc).
    pub fn refused(reason: impl Into<Box<dyn std::error::Error + Send + Sync>>) -> Self {
        AppError { error: reason.into(), refusal: true }
    }

    /// Whether this is a refusal of the message ([`AppError::refused`]).
    pub fn is_refusal(&self) -> bool {
        self.refusal
    }
}

impl From<String> for AppError {
    fn from(message: String) -> Self {
        AppError::new(message)
    }
}

impl From<&str> for AppError {
    fn from(message: &str) -> Self {
        AppError::new(message)
    }
}

impl From<StoreError> for AppError {
    fn from(error: StoreError) -> Self {
        AppError::new(error)
    }
}
