//! The lag application's I/O: the workers that feed the state from Kafka
//! (through the traits of [`brokers`]), the shards of the runtime they read
//! through (durable with `data_dir`, in memory without), their supervision,
//! and HTTP.

pub(crate) mod app_state;
pub mod brokers;
pub(crate) mod burrow_http;
pub(crate) mod catch_up_log;
pub(crate) mod cluster_info;
pub(crate) mod cluster_workers;
pub(crate) mod end_to_end;
pub(crate) mod error;
pub(crate) mod http;
pub mod keda_server;
pub(crate) mod local_member;
pub(crate) mod log_app;
pub(crate) mod log_reader;
pub(crate) mod log_shards;
pub(crate) mod memory_shard;
pub(crate) mod notifier;
pub(crate) mod notifier_settings;
pub(crate) mod notifier_status;
pub(crate) mod notify_send;
pub(crate) mod offsets_layout;
pub(crate) mod offsets_reader;
pub(crate) mod otlp_export;
pub(crate) mod otlp_settings;
pub(crate) mod otlp_transport;
pub(crate) mod refresher;
pub(crate) mod serve_options;
pub mod service;
pub(crate) mod shards_reader;
pub(crate) mod share_layout;
pub(crate) mod share_scrape;
pub(crate) mod shutdown;
#[cfg(test)]
mod simulation_tests;
pub(crate) mod supervisor;
#[cfg(test)]
mod transactions_tests;
