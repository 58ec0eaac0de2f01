//! [`LogApp`]: the lag monitor as an application of the runtime. A replica
//! of a shard with a recovery log is a [`LogShard`]; without one (plain
//! `serve`) a [`MemoryShard`], whose store is the monitor's units.

use std::sync::Arc;

use kshard_runtime::{AppError, Application, Isolation, ShardApp, ShardSpec};

use crate::log_shards::{Layout, LogShard, LogShards};
use crate::memory_shard::MemoryShard;

/// The lag monitor as an application of the runtime: each replica's object
/// ([`LogShard`]) hands its calls to the shared [`LogShards`].
pub(crate) struct LogApp<L: Layout>(pub(crate) Arc<LogShards<L>>);

impl<L: Layout> Application for LogApp<L> {
    fn shard(&self, shard: &ShardSpec) -> Result<Box<dyn ShardApp>, AppError> {
        if self.0.in_memory {
            return Ok(Box::new(MemoryShard::new(Arc::clone(&self.0), shard)?));
        }
        Ok(Box::new(LogShard::new(Arc::clone(&self.0), shard)))
    }

    fn isolation(&self) -> Isolation {
        self.0.layout.isolation()
    }
}
