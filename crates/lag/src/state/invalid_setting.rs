//! [`InvalidSetting`]: a setting outside what the lag monitor can use, named
//! as the configuration file names it, with its value and what is allowed.

/// A setting outside its range.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid {field}: {value} ({allowed})")]
pub struct InvalidSetting {
    /// The setting, as the configuration file names it (`status.window`).
    pub field: &'static str,
    /// The value given.
    pub value: String,
    /// What is allowed.
    pub allowed: &'static str,
}

impl InvalidSetting {
    /// `field` was given `value`; `allowed` says what it may be.
    pub fn new(field: &'static str, value: impl std::fmt::Display, allowed: &'static str) -> Self {
        InvalidSetting { field, value: value.to_string(), allowed }
    }
}
