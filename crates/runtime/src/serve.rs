//! [`Member`]: the runtime's front door — a member's whole life in one call.
//! [`Member::serve`] creates the application's shards in the keyspace (or
//! finds them there as they should be), serves the member's HTTP endpoints
//! ([`crate::node_http`]) when given a listener, and runs the member
//! ([`crate::node::run`]) until `shutdown`. `kshard example sum run` and the
//! lag monitor's `serve --data-dir` both start their members through it.

use std::future::Future;
use std::sync::Arc;

use crate::application::Application;
use crate::generator::{self, GenerateError, PartitionShards};
use crate::keyspace::{Keyspace, KeyspaceError};
use crate::model::ShardSpec;
use crate::node::{self, NodeConfig, NodeError};
use crate::node_shared::NodeShared;

/// Why a member stopped other than by its shutdown.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ServeError {
    /// Creating the shards failed.
    #[error("creating the shards")]
    Create(#[source] KeyspaceError),
    /// A shard's id is taken by another application's spec.
    #[error("shard {} is taken: it reads {:?} into {}, not {:?} into {}", .ours.id, .theirs.sources, .theirs.log_name(), .ours.sources, .ours.log_name())]
    Taken {
        /// The spec this member was to run.
        ours: Box<ShardSpec>,
        /// The spec the keyspace holds under the same id.
        theirs: Box<ShardSpec>,
    },
    /// Running the member failed.
    #[error("running the member")]
    Node(#[from] NodeError),
    /// Serving HTTP failed.
    #[error("serving HTTP")]
    Http(#[source] std::io::Error),
    /// The application's routes repeat one of the member's.
    #[error("the application's routes: {0}")]
    Routes(String),
}

/// The member's routes with the application's.
fn routes(member: &str, shared: &NodeShared, application: &dyn Application) -> Result<axum::Router, ServeError> {
    let router = crate::node_http::router(member.to_owned(), shared.clone());
    let Some(own) = application.routes(crate::queries::Queries::new(member.to_owned(), shared.clone())) else {
        return Ok(router);
    };
    // axum panics on a route given twice: that is told at start, not a crash.
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| router.merge(own))).map_err(|panic| {
        let what =
            panic.downcast_ref::<String>().cloned().or_else(|| panic.downcast_ref::<&str>().map(|s| (*s).to_owned()));
        ServeError::Routes(what.unwrap_or_else(|| "they overlap the member's".into()))
    })
}

/// A member of an application, ready to serve: its keyspace, how it runs
/// and the application, with the shards it makes sure exist (given, or one
/// per partition of a topic, followed) and what it shares with HTTP.
pub struct Member<K> {
    keyspace: Arc<K>,
    config: NodeConfig,
    application: Arc<dyn Application>,
    shards: Vec<ShardSpec>,
    generators: Vec<PartitionShards>,
    shared: NodeShared,
}

impl<K: Keyspace> Member<K> {
    /// A member of `application` coordinating through `keyspace`, running
    /// as `config` says, with no shards of its own to create (an operator
    /// applies them: `kshard shards apply`).
    pub fn new(keyspace: Arc<K>, config: NodeConfig, application: Arc<dyn Application>) -> Self {
        Member {
            keyspace,
            config,
            application,
            shards: Vec::new(),
            generators: Vec::new(),
            shared: NodeShared::default(),
        }
    }

    /// Creates `shards` before joining, when missing (a shard whose id
    /// another spec holds stops the member: [`ServeError::Taken`]).
    pub fn with_shards(mut self, shards: Vec<ShardSpec>) -> Self {
        self.shards.extend(shards);
        self
    }

    /// Creates a shard per partition of `generator`'s topic before joining,
    /// and for each partition added while it runs.
    pub fn following(mut self, generator: PartitionShards) -> Self {
        self.generators.push(generator);
        self
    }

    /// Shares `shared` with the caller (its metrics, its replicas' progress,
    /// the cluster's view), for HTTP of the caller's own.
    pub fn with_shared(mut self, shared: NodeShared) -> Self {
        self.shared = shared;
        self
    }

    /// Creates the shards, serves HTTP on `http` (when given: the member's
    /// routes and the application's, [`Application::routes`]) and runs the
    /// member until `shutdown` completes; HTTP stops with the member.
    pub async fn serve(
        self,
        http: Option<tokio::net::TcpListener>,
        shutdown: impl Future<Output = ()>,
    ) -> Result<(), ServeError> {
        let Member { keyspace, config, application, shards, generators, shared } = self;
        for spec in &shards {
            match node::create_shard(&*keyspace, &config.keys, spec).await.map_err(ServeError::Create)? {
                node::Created::Conflict(theirs) => {
                    return Err(ServeError::Taken { ours: Box::new(spec.clone()), theirs });
                }
                node::Created::Created | node::Created::Existed => {}
            }
        }
        let router = match http {
            Some(_) => Some(routes(&config.member.id, &shared, application.as_ref())?),
            None => None,
        };
        // Stops with the member, and when this future is dropped.
        let _following = follow(&keyspace, &config, generators).await?.map(AbortOnDrop);
        let (stop_http, http_stopped) = tokio::sync::oneshot::channel::<()>();
        let http = http.zip(router).map(|(listener, router)| {
            tokio::spawn(async move {
                let limits = crate::http_server::HttpLimits::default().within_descriptors();
                crate::http_server::serve(listener, router, limits, async move {
                    let _ = http_stopped.await;
                })
                .await
            })
        });
        let result = node::run(keyspace, config, application, shared, shutdown).await;
        let _ = stop_http.send(());
        let served = match http {
            Some(task) => task.await.map_err(|e| ServeError::Http(std::io::Error::other(e)))?.map_err(ServeError::Http),
            None => Ok(()),
        };
        result?;
        served
    }
}

/// A task aborted when dropped.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Creates the generators' shards of the partitions there are, then follows
/// their topics in a task (returned) while the member runs.
async fn follow<K: Keyspace>(
    keyspace: &Arc<K>,
    config: &NodeConfig,
    generators: Vec<PartitionShards>,
) -> Result<Option<tokio::task::JoinHandle<()>>, ServeError> {
    if generators.is_empty() {
        return Ok(None);
    }
    let partitions: Arc<dyn crate::partitions::Partitions> = config.partitions.clone().unwrap_or_else(|| {
        Arc::new(crate::partitions::kafka::KafkaPartitions::new(
            config.kafka.clone(),
            crate::recovery_log::replica::KAFKA_TIMEOUT,
        ))
    });
    let mut made = Vec::new();
    for generator in generators {
        // Taken ids and a keyspace that fails stop the member as its given
        // shards do; a topic not counted yet is followed from none.
        let count = match generator::create_new(&**keyspace, &config.keys, partitions.as_ref(), &generator, 0).await {
            Ok(mut round) => match round.taken.pop() {
                Some((ours, theirs)) => return Err(ServeError::Taken { ours: Box::new(ours), theirs }),
                None => round.made,
            },
            Err(GenerateError::Keyspace(e)) => return Err(ServeError::Create(e)),
            Err(e @ GenerateError::Count(..)) => {
                tracing::warn!(topic = generator.topic(), error = %e, "following a topic's partitions; trying again");
                0
            }
        };
        made.push((generator, count));
    }
    let (ks, keys) = (Arc::clone(keyspace), config.keys.clone());
    Ok(Some(tokio::spawn(generator::follow(ks, keys, partitions, made))))
}
