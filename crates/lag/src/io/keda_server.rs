//! KEDA's external scaler (`proto/externalscaler.proto`), served with
//! tonic on a port of its own (`keda.listen`): each answer is read from the
//! cluster's last lag snapshot, never from a request to Kafka, and refused
//! (`Unavailable`, never a 0) while that lag is not current.

use std::collections::HashMap;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use tokio_stream::Stream;
use tonic::{Request, Response, Status};

use super::app_state::AppState;
use crate::scaler::{MetadataError, ScalerQuery, Unanswerable, value};
use crate::shutdown::Shutdown;
use crate::web::WebConfigFile;
use crate::web::tls::{Alpn, TlsListener};

/// The generated messages, service and client of KEDA's protocol.
pub mod proto {
    #![allow(missing_docs, clippy::all, clippy::pedantic, unreachable_pub)]
    tonic::include_proto!("externalscaler");
}

use proto::external_scaler_server::{ExternalScaler, ExternalScalerServer};
use proto::{
    GetMetricSpecResponse, GetMetricsRequest, GetMetricsResponse, IsActiveResponse, MetricSpec, MetricValue,
    ScaledObjectRef,
};

/// How often a `StreamIsActive` stream looks at the lag again (kshard's
/// refreshes are seconds apart; a change is pushed at the next look).
const STREAM_EVERY: Duration = Duration::from_secs(1);

/// Serves the scaler over `clusters` on `listener` until `stop`: over TLS
/// when the web configuration file (`web`) sets `tls_server_config`, with
/// its certificate and client certificate checks.
pub(crate) fn spawn(
    listener: tokio::net::TcpListener,
    clusters: Vec<AppState>,
    stop: Shutdown,
    web: Option<Arc<WebConfigFile>>,
) -> tokio::task::JoinHandle<Result<(), tonic::transport::Error>> {
    let addr = listener.local_addr().map(|a| a.to_string()).unwrap_or_default();
    let web = web.filter(|w| w.started_with_tls);
    tracing::info!(%addr, tls = web.is_some(), "serving KEDA's external scaler (gRPC)");
    let scaler = KedaScaler::new(clusters, stop);
    tokio::spawn(async move {
        let served = scaler.serve(listener, web).await;
        if let Err(e) = &served {
            tracing::error!(error = %e, "KEDA's external scaler stopped serving");
        }
        served
    })
}

/// Streams open at once, over every client (each a small task that looks
/// at the lag every second): past it, `RESOURCE_EXHAUSTED`.
const MOST_STREAMS: usize = 10_000;

/// The most a request may be: a scaled object's name and metadata are small.
const MOST_REQUEST_BYTES: usize = 64 << 10;

/// The scaler over every cluster the process watches.
#[derive(Clone)]
pub(crate) struct KedaScaler {
    clusters: Arc<Vec<AppState>>,
    stop: Shutdown,
    streams: Arc<tokio::sync::Semaphore>,
}

impl KedaScaler {
    pub(crate) fn new(clusters: Vec<AppState>, stop: Shutdown) -> Self {
        KedaScaler { clusters: Arc::new(clusters), stop, streams: Arc::new(tokio::sync::Semaphore::new(MOST_STREAMS)) }
    }

    fn stream_permit(&self) -> Result<tokio::sync::OwnedSemaphorePermit, Status> {
        Arc::clone(&self.streams)
            .try_acquire_owned()
            .map_err(|_| Status::resource_exhausted(format!("{MOST_STREAMS} streams are open already")))
    }

    /// Serves on `listener` (over TLS as `web` says) until the process stops.
    pub(crate) async fn serve(
        self,
        listener: tokio::net::TcpListener,
        web: Option<Arc<WebConfigFile>>,
    ) -> Result<(), tonic::transport::Error> {
        let stop = self.stop.clone();
        // A client that vanishes (its pod killed) is found out by keepalives,
        // and its streams end.
        let router = tonic::transport::Server::builder()
            .http2_keepalive_interval(Some(Duration::from_secs(30)))
            .http2_keepalive_timeout(Some(Duration::from_secs(20)))
            .max_concurrent_streams(Some(1000))
            .add_service(ExternalScalerServer::new(self).max_decoding_message_size(MOST_REQUEST_BYTES));
        match web {
            None => {
                let incoming = tonic::transport::server::TcpIncoming::from(listener)
                    .with_keepalive(Some(Duration::from_secs(60)))
                    .with_nodelay(Some(true));
                router.serve_with_incoming_shutdown(incoming, stop.stopped()).await
            }
            Some(web) => {
                let incoming = TlsListener::spawn(listener, web, Alpn::H2).incoming();
                router.serve_with_incoming_shutdown(incoming, stop.stopped()).await
            }
        }
    }

    /// The trigger's query and its value now, or why not.
    fn answer(&self, object: Option<&ScaledObjectRef>) -> Result<(ScalerQuery, f64), Status> {
        let query = query_of(object)?;
        let v = self.value_of(&query)?;
        Ok((query, v))
    }

    /// `query`'s value now, or why not.
    fn value_of(&self, query: &ScalerQuery) -> Result<f64, Status> {
        let state = self.cluster(query.cluster.as_deref())?;
        let m = &state.monitor;
        if let Some(problem) = m.problem() {
            return Err(Status::unavailable(format!("kshard's lag is not current: {problem}")));
        }
        if !m.is_ready() {
            return Err(Status::unavailable("kshard is not ready: it has not caught up (see /ready)"));
        }
        if query.share
            && let Some(why) = m.share_unreadable()
        {
            return Err(Status::unavailable(format!("share groups' lag is not known: {why}")));
        }
        let (snapshot, derived) = (m.snapshot(), m.derived());
        let group = snapshot.group(&query.group, &derived);
        drop(derived);
        value(query, group.as_ref(), m.epoch_ms()).map_err(unanswerable)
    }

    fn cluster(&self, name: Option<&str>) -> Result<&AppState, Status> {
        match (name, self.clusters.as_slice()) {
            (None, [one]) => Ok(one),
            (None, _) => Err(Status::invalid_argument(format!(
                "kshard watches several clusters: set cluster to one of {}",
                self.names().join(", ")
            ))),
            (Some(n), all) => {
                all.iter().find(|s| s.name.as_deref() == Some(n) || (s.name.is_none() && n == "local")).ok_or_else(
                    || Status::not_found(format!("no cluster {n:?}: kshard watches {}", self.names().join(", "))),
                )
            }
        }
    }

    fn names(&self) -> Vec<String> {
        self.clusters.iter().map(|s| s.cluster_name().to_owned()).collect()
    }
}

fn query_of(object: Option<&ScaledObjectRef>) -> Result<ScalerQuery, Status> {
    let metadata = object.map(|o| &o.scaler_metadata).cloned().unwrap_or_default();
    ScalerQuery::parse(&metadata).map_err(invalid)
}

fn invalid(e: MetadataError) -> Status {
    Status::invalid_argument(e.to_string())
}

fn unanswerable(e: Unanswerable) -> Status {
    match e {
        Unanswerable::NoGroup(_) | Unanswerable::NoTopic { .. } => Status::not_found(e.to_string()),
        Unanswerable::IsShare(_) | Unanswerable::NotShare(_) => Status::invalid_argument(e.to_string()),
        Unanswerable::NotKnown(why) => Status::unavailable(format!("kshard's lag is not current: {why}")),
    }
}

fn spec(query: &ScalerQuery) -> GetMetricSpecResponse {
    GetMetricSpecResponse {
        metric_specs: vec![MetricSpec {
            metric_name: query.metric_name(),
            target_size: query.target.ceil() as i64,
            target_size_float: query.target,
        }],
    }
}

type Pushed<T> = Pin<Box<dyn Stream<Item = Result<T, Status>> + Send>>;

#[tonic::async_trait]
impl ExternalScaler for KedaScaler {
    async fn is_active(&self, request: Request<ScaledObjectRef>) -> Result<Response<IsActiveResponse>, Status> {
        let (query, v) = self.answer(Some(request.get_ref()))?;
        Ok(Response::new(IsActiveResponse { result: v > query.activation }))
    }

    type StreamIsActiveStream = Pushed<IsActiveResponse>;

    /// The answer now, then each change (an answer that cannot be given
    /// ends the stream with its status; KEDA opens it again).
    async fn stream_is_active(
        &self,
        request: Request<ScaledObjectRef>,
    ) -> Result<Response<Self::StreamIsActiveStream>, Status> {
        let permit = self.stream_permit()?;
        let (query, v) = self.answer(Some(request.get_ref()))?;
        let (scaler, mut last) = (self.clone(), v > query.activation);
        let (tx, rx) = tokio::sync::mpsc::channel(4);
        let _ = tx.send(Ok(IsActiveResponse { result: last })).await;
        tokio::spawn(async move {
            let _permit = permit;
            loop {
                tokio::select! {
                    _ = tokio::time::sleep(STREAM_EVERY) => {}
                    _ = tx.closed() => return,
                    _ = scaler.stop.stopped() => return,
                }
                // While the lag is not current the stream stays open and
                // says nothing: KEDA's polling (IsActive) is refused
                // meanwhile, and an ended stream would back KEDA off.
                let Ok(value) = scaler.value_of(&query) else { continue };
                let active = value > query.activation;
                if active == last {
                    continue;
                }
                last = active;
                if tx.send(Ok(IsActiveResponse { result: active })).await.is_err() {
                    return;
                }
            }
        });
        Ok(Response::new(Box::pin(tokio_stream::wrappers::ReceiverStream::new(rx))))
    }

    async fn get_metric_spec(
        &self,
        request: Request<ScaledObjectRef>,
    ) -> Result<Response<GetMetricSpecResponse>, Status> {
        // The spec needs no lag: only the trigger's metadata.
        let query = ScalerQuery::parse(&request.get_ref().scaler_metadata).map_err(invalid)?;
        self.cluster(query.cluster.as_deref())?;
        Ok(Response::new(spec(&query)))
    }

    async fn get_metrics(&self, request: Request<GetMetricsRequest>) -> Result<Response<GetMetricsResponse>, Status> {
        let request = request.into_inner();
        let (query, v) = self.answer(request.scaled_object_ref.as_ref())?;
        let metric_name = if request.metric_name.is_empty() { query.metric_name() } else { request.metric_name };
        let metric_value = if v >= i64::MAX as f64 { i64::MAX } else { v.ceil() as i64 };
        Ok(Response::new(GetMetricsResponse {
            metric_values: vec![MetricValue { metric_name, metric_value, metric_value_float: v }],
        }))
    }

    type StreamMetricSpecStream = Pushed<GetMetricSpecResponse>;

    /// The spec at once; it never changes while the trigger does not, so
    /// the stream then stays open until the client or kshard goes.
    async fn stream_metric_spec(
        &self,
        request: Request<ScaledObjectRef>,
    ) -> Result<Response<Self::StreamMetricSpecStream>, Status> {
        let permit = self.stream_permit()?;
        let query = ScalerQuery::parse(&request.get_ref().scaler_metadata).map_err(invalid)?;
        self.cluster(query.cluster.as_deref())?;
        let (tx, rx) = tokio::sync::mpsc::channel(1);
        let _ = tx.send(Ok(spec(&query))).await;
        let stop = self.stop.clone();
        tokio::spawn(async move {
            let _permit = permit;
            tokio::select! {
                _ = tx.closed() => {}
                _ = stop.stopped() => {}
            }
        });
        Ok(Response::new(Box::pin(tokio_stream::wrappers::ReceiverStream::new(rx))))
    }
}

/// A scaled object's trigger as KEDA sends it: `metadata`, and KEDA's own
/// `scalerAddress` beside it.
pub fn scaled_object(name: &str, metadata: &[(&str, &str)]) -> ScaledObjectRef {
    let mut scaler_metadata: HashMap<String, String> =
        metadata.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
    scaler_metadata.entry("scalerAddress".into()).or_insert_with(|| "kshard.monitoring.svc:9309".into());
    ScaledObjectRef { name: name.to_owned(), namespace: "default".to_owned(), scaler_metadata }
}
