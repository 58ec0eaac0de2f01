//! The lag monitor's settings as types: names and durations that check
//! themselves, and the options of the process as a whole
//! ([`ProcessOptions`]) apart from each cluster's
//! ([`ServeOptions`](crate::service::ServeOptions)).

pub mod names;
pub mod process_options;
pub mod seconds;

pub use names::{ClusterName, InvalidName, LabelName, MetricNamespace, TopicName};
pub use process_options::ProcessOptions;
pub use seconds::{ClusterInfoInterval, LeaseTtl, OutOfRange, Seconds, WatermarkInterval};
