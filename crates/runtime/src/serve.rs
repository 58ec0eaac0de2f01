//! [`Member`]: the runtime's front door — a member's whole life in one call.
//! [`Member::serve`] creates the application's shards in the keyspace (or
//! finds them there as they should be), serves the member's HTTP endpoints
//! ([`crate::node_http`]) when given a listener, and runs the member
//! ([`crate::node::run`]) until `shutdown`. `kshard example sum run` and the
//! lag monitor's `serve --data-dir` both start their members through it.

use std::future::Future;
use std::sync::Arc;

use crate::application::Application;
use crate::keyspace::{Keyspace, KeyspaceError};
use crate::model::ShardSpec;
use crate::node::{self, NodeConfig, NodeError, NodeShared};

/// Why a member stopped other than by its shutdown.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// Creating the shards failed.
    #[error("creating the shards")]
    Create(#[source] KeyspaceError),
    /// A shard's id is taken by another application's spec.
    #[error("shard {} is taken: it reads {:?} into {:?}, not {:?} into {:?}", .ours.id, .theirs.sources, .theirs.recovery_log, .ours.sources, .ours.recovery_log)]
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

/// A member of an application, ready to serve.
pub struct Member<K> {
    /// The keyspace it coordinates through.
    pub keyspace: Arc<K>,
    /// How it runs.
    pub config: NodeConfig,
    /// The application its replicas run.
    pub application: Arc<dyn Application>,
    /// The shards it makes sure exist before it joins.
    pub shards: Vec<ShardSpec>,
    /// What it shares with HTTP (its own, or an application's).
    pub shared: NodeShared,
}

impl<K: Keyspace> Member<K> {
    /// Creates the shards, serves HTTP on `http` (when given) and runs the
    /// member until `shutdown` completes; HTTP stops with the member.
    pub async fn serve(
        self,
        http: Option<tokio::net::TcpListener>,
        shutdown: impl Future<Output = ()>,
    ) -> Result<(), ServeError> {
        let Member { keyspace, config, application, shards, shared } = self;
        for spec in &shards {
            match node::create_shard(&*keyspace, &config.keys, spec).await.map_err(ServeError::Create)? {
                node::Created::Conflict(theirs) => {
                    return Err(ServeError::Taken { ours: Box::new(spec.clone()), theirs });
                }
                node::Created::Created | node::Created::Existed => {}
            }
        }
        let (stop_http, http_stopped) = tokio::sync::oneshot::channel::<()>();
        let router = match http {
            Some(_) => Some(routes(&config.member.id, &shared, application.as_ref())?),
            None => None,
        };
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
