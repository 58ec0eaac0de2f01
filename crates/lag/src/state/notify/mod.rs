//! Burrow's notifiers, pure: when to tell about a group (`incidents`), and
//! what its templates see (`notice_data`, with Go's time formats in
//! `go_time`). The sending is in `io/notifier.rs`.

pub(crate) mod go_time;
pub(crate) mod incidents;
pub(crate) mod notice_data;
