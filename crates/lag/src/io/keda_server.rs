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

/// Serves the scaler over `clusters` on `listener` until `stop`.
pub(crate) fn spawn(
    listener: tokio::net::TcpListener,
    clusters: Vec<AppState>,
    stop: Shutdown,
) -> tokio::task::JoinHandle<Result<(), tonic::transport::Error>> {
    let addr = listener.local_addr().map(|a| a.to_string()).unwrap_or_default();
    tracing::info!(%addr, "serving KEDA's external scaler (gRPC)");
    let scaler = KedaScaler::new(clusters, stop);
    tokio::spawn(async move {
        let served = scaler.serve(listener).await;
        if let Err(e) = &served {
            tracing::error!(error = %e, "KEDA's external scaler stopped serving");
        }
        served
    })
}

/// The scaler over every cluster the process watches.
#[derive(Clone)]
pub(crate) struct KedaScaler {
    clusters: Arc<Vec<AppState>>,
    stop: Shutdown,
}

impl KedaScaler {
    pub(crate) fn new(clusters: Vec<AppState>, stop: Shutdown) -> Self {
        KedaScaler { clusters: Arc::new(clusters), stop }
    }

    /// Serves on `listener` until the process stops.
    pub(crate) async fn serve(self, listener: tokio::net::TcpListener) -> Result<(), tonic::transport::Error> {
        let stop = self.stop.clone();
        let incoming = tokio_stream::wrappers::TcpListenerStream::new(listener);
        tonic::transport::Server::builder()
            .add_service(ExternalScalerServer::new(self))
            .serve_with_incoming_shutdown(incoming, stop.stopped())
            .await
    }

    /// The trigger's query and its value now, or why not.
    fn answer(&self, object: Option<&ScaledObjectRef>) -> Result<(ScalerQuery, f64), Status> {
        let metadata = object.map(|o| &o.scaler_metadata).cloned().unwrap_or_default();
        let query = ScalerQuery::parse(&metadata).map_err(invalid)?;
        let state = self.cluster(query.cluster.as_deref())?;
        let m = &state.monitor;
        if let Some(problem) = m.problem() {
            return Err(Status::unavailable(format!("kshard's lag is not current: {problem}")));
        }
        if !m.is_ready() {
            return Err(Status::unavailable("kshard is not ready: it has not caught up (see /ready)"));
        }
        let (snapshot, derived) = (m.snapshot(), m.derived());
        let group = snapshot.group(&query.group, &derived);
        let v = value(&query, group.as_ref(), m.epoch_ms()).map_err(unanswerable)?;
        Ok((query, v))
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
        let object = request.into_inner();
        let (query, v) = self.answer(Some(&object))?;
        let (scaler, mut last) = (self.clone(), v > query.activation);
        let (tx, rx) = tokio::sync::mpsc::channel(4);
        let _ = tx.send(Ok(IsActiveResponse { result: last })).await;
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    _ = tokio::time::sleep(STREAM_EVERY) => {}
                    _ = tx.closed() => return,
                    _ = scaler.stop.stopped() => return,
                }
                let now = scaler.answer(Some(&object)).map(|(q, v)| v > q.activation);
                match now {
                    Ok(active) if active == last => continue,
                    Ok(active) => last = active,
                    Err(_) => {}
                }
                let done = now.is_err();
                if tx.send(now.map(|result| IsActiveResponse { result })).await.is_err() || done {
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
        let query = ScalerQuery::parse(&request.get_ref().scaler_metadata).map_err(invalid)?;
        self.cluster(query.cluster.as_deref())?;
        let (tx, rx) = tokio::sync::mpsc::channel(1);
        let _ = tx.send(Ok(spec(&query))).await;
        let stop = self.stop.clone();
        tokio::spawn(async move {
            tokio::select! {
                _ = tx.closed() => {}
                _ = stop.stopped() => {}
            }
        });
        Ok(Response::new(Box::pin(tokio_stream::wrappers::ReceiverStream::new(rx))))
    }
}

/// The metadata of a scaled object's trigger, as KEDA sends it.
pub fn scaled_object(name: &str, metadata: &[(&str, &str)]) -> ScaledObjectRef {
    ScaledObjectRef {
        name: name.to_owned(),
        namespace: "default".to_owned(),
        scaler_metadata: metadata.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect::<HashMap<_, _>>(),
    }
}
