//! The lag application's state and the decisions over it: pure — no I/O, no
//! clock (the time comes in as an argument, or from the monitor's injected
//! [`crate::Clock`]) — so every rule is tested without a broker.

pub(crate) mod catch_up;
pub(crate) mod cluster_view;
pub(crate) mod consumer_status;
pub(crate) mod derived;
pub(crate) mod end_to_end;
pub(crate) mod failure;
pub(crate) mod filter;
pub(crate) mod group;
pub(crate) mod group_offsets;
pub(crate) mod health;
pub(crate) mod invalid_setting;
pub(crate) mod lag_history;
pub(crate) mod lag_time;
pub(crate) mod monitor;
pub(crate) mod monitor_settings;
pub(crate) mod names;
pub(crate) mod notify;
pub(crate) mod objective_budget;
pub(crate) mod objectives;
pub(crate) mod open_transactions;
pub(crate) mod readiness;
pub(crate) mod scaler;
pub(crate) mod shard_store;
pub(crate) mod share_partition;
pub(crate) mod share_rows;
pub(crate) mod share_state;
pub(crate) mod share_store;
pub(crate) mod snapshot;
pub(crate) mod stalls;
pub(crate) mod striped_count;
pub(crate) mod units;
pub(crate) mod velocity;
pub(crate) mod watermarks;
