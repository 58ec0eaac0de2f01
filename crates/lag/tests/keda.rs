//! KEDA's external scaler served by kshard, driven by a client generated
//! from KEDA's own proto over the real broker: a consumer group's lag in
//! records and in seconds, a share group's backlog equal to what
//! `kafka-share-groups --describe` gives, the metric spec a scaled object
//! gets, `IsActive` and its pushed stream turning inactive when the group
//! catches up; refusals (not a 0) while a cluster's lag is not current, for
//! an unknown group and for bad metadata; and thousands of answers that
//! cause no request to Kafka.

mod common;

use std::time::{Duration, Instant};

use common::*;
use kshard_kafka::{Client, OffsetCommitter};
use kshard_lag::keda::proto::external_scaler_client::ExternalScalerClient;
use kshard_lag::keda::proto::{GetMetricsRequest, ScaledObjectRef};
use kshard_lag::keda::scaled_object;
use kshard_lag::service::{ProcessOptions, ServeOptions};
use kshard_testkit::{Broker, kafka_share_groups, share_consume, share_from_earliest, unique_name};
use tonic::Code;
use tonic::transport::Channel;

type Scaler = ExternalScalerClient<Channel>;

/// GetMetrics' value for `object`, or the status refusing it.
async fn metric(scaler: &mut Scaler, object: &ScaledObjectRef) -> Result<f64, tonic::Status> {
    let request = GetMetricsRequest { scaled_object_ref: Some(object.clone()), metric_name: String::new() };
    let values = scaler.get_metrics(request).await?.into_inner().metric_values;
    assert_eq!(values.len(), 1, "one value");
    assert_eq!(values[0].metric_value, values[0].metric_value_float.ceil() as i64, "both spellings");
    Ok(values[0].metric_value_float)
}

/// Asks `f` every 200 ms until it gives `Some`, for at most 60 s.
async fn eventually<T, F: std::future::Future<Output = Option<T>>>(what: &str, mut f: impl FnMut() -> F) -> T {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Some(v) = f().await {
            return v;
        }
        assert!(Instant::now() < deadline, "{what}: not within 60 s");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

fn requests_sent(service: &mut TestService, cluster: &str) -> f64 {
    let m = service.metrics();
    m.get(&format!("kshard_kafka_requests_sent_total{{cluster=\"{cluster}\"}}")).copied().expect("requests sent")
}

#[test]
#[ignore = "needs the real broker or etcd: scripts/test.sh runs it (or cargo test -- --include-ignored)"]
fn the_external_scaler_answers_from_kshards_lag_and_refuses_when_not_current() {
    let broker = Broker::from_env_or_start();
    let client = Client::to_brokers(broker.brokers());
    let p = unique_name("keda");
    let (topic, jobs) = (format!("{p}-orders"), format!("{p}-jobs"));
    create_and_fill(&client, &topic, &[20, 20, 20]);
    create_and_fill(&client, &jobs, &[30]);
    let (group, share) = (format!("{p}-billing"), format!("{p}-workers"));
    let committer = OffsetCommitter::new(&client, &group).expect("committer");
    committer.commit(&[(&topic, 0, 10), (&topic, 1, 10), (&topic, 2, 10)]).expect("commit");
    share_from_earliest(broker.brokers(), &share);
    share_consume(broker.brokers(), &share, &jobs, 5, None);

    // Two clusters: the real one, and one whose broker never answers.
    let options = |name: &str, brokers: &str| ServeOptions {
        name: Some(name.parse().expect("a cluster name")),
        watermark_interval: Duration::from_millis(500),
        monitor: only(&p),
        ..ServeOptions::new(Client::to_brokers(brokers).settings().clone())
    };
    let mut service = TestService::start_serving(
        ProcessOptions::default(),
        vec![options("main", broker.brokers()), options("gone", "127.0.0.1:1")],
        true,
    );
    let keda = service.keda.expect("KEDA's listener");
    let runtime = tokio::runtime::Runtime::new().expect("a runtime");
    runtime.block_on(async {
        let mut scaler =
            eventually("connecting", || async { ExternalScalerClient::connect(format!("http://{keda}")).await.ok() })
                .await;
        let lag = scaled_object("billing", &[("cluster", "main"), ("consumerGroup", &group), ("lagThreshold", "5")]);

        // The spec needs no lag: the metric's name and its target.
        let spec = scaler.get_metric_spec(lag.clone()).await.expect("a spec").into_inner().metric_specs;
        assert_eq!(spec.len(), 1);
        assert!(spec[0].metric_name.starts_with("kshard-lag-main-keda-"), "{}", spec[0].metric_name);
        assert_eq!((spec[0].target_size, spec[0].target_size_float), (5, 5.0));

        // 10 behind on each of 3 partitions, once kshard has read it all.
        let total = eventually("the group's lag", || {
            let (mut scaler, lag) = (scaler.clone(), lag.clone());
            async move { metric(&mut scaler, &lag).await.ok() }
        })
        .await;
        assert_eq!(total, 30.0);
        assert!(scaler.is_active(lag.clone()).await.expect("an answer").into_inner().result);
        let mut quiet = lag.clone();
        quiet.scaler_metadata.insert("activationLagThreshold".into(), "30".into());
        assert!(!scaler.is_active(quiet).await.expect("an answer").into_inner().result, "not above 30");
        let mut one_topic = lag.clone();
        one_topic.scaler_metadata.insert("topic".into(), topic.clone());
        assert_eq!(metric(&mut scaler, &one_topic).await.expect("a value"), 30.0);
        let mut seconds = lag.clone();
        seconds.scaler_metadata.insert("metric".into(), "lagSeconds".into());
        let age = metric(&mut scaler, &seconds).await.expect("lag in seconds");
        assert!(age > 0.0 && age < 600.0, "the oldest record not consumed is seconds old: {age}");

        // The share group's backlog is Kafka's share lag.
        let backlog = scaled_object("workers", &[("cluster", "main"), ("shareGroup", &share), ("metric", "backlog")]);
        let kafkas: i64 = kafka_share_groups(broker.brokers(), &share).iter().filter_map(|r| r.lag).sum();
        assert_eq!(kafkas, 25, "Kafka's own describe");
        let served = eventually("the share group's backlog", || {
            let (mut scaler, backlog) = (scaler.clone(), backlog.clone());
            async move { metric(&mut scaler, &backlog).await.ok().filter(|v| *v == 25.0) }
        })
        .await;
        assert_eq!(served, 25.0);

        // Refusals: a status, never a 0.
        let code = |r: Result<f64, tonic::Status>| r.expect_err("refused").code();
        let gone = scaled_object("x", &[("cluster", "gone"), ("consumerGroup", &group)]);
        assert_eq!(code(metric(&mut scaler, &gone).await), Code::Unavailable, "a cluster not current");
        let err = scaler.is_active(gone).await.expect_err("refused");
        assert!(err.message().contains("not"), "{}", err.message());
        let unknown = scaled_object("x", &[("cluster", "main"), ("consumerGroup", &format!("{p}-nobody"))]);
        assert_eq!(code(metric(&mut scaler, &unknown).await), Code::NotFound);
        let no_cluster = scaled_object("x", &[("consumerGroup", &group)]);
        assert_eq!(code(metric(&mut scaler, &no_cluster).await), Code::InvalidArgument, "two clusters: name one");
        let typo = scaled_object("x", &[("cluster", "main"), ("consumerGroup", &group), ("lagTreshold", "5")]);
        let err = scaler.get_metric_spec(typo).await.expect_err("refused");
        assert_eq!(err.code(), Code::InvalidArgument);
        assert!(err.message().contains("lagTreshold"), "{}", err.message());
        let wrong_kind = scaled_object("x", &[("cluster", "main"), ("consumerGroup", &share)]);
        assert_eq!(code(metric(&mut scaler, &wrong_kind).await), Code::InvalidArgument, "a share group");

        // Thousands of answers, no request to Kafka for any: as many go out
        // meanwhile as in an idle window as long (the refreshes').
        let before = requests_sent(&mut service, "main");
        let (calls, started) = (3000, Instant::now());
        for _ in 0..calls {
            metric(&mut scaler, &lag).await.expect("a value");
        }
        let (busy, took) = (requests_sent(&mut service, "main") - before, started.elapsed());
        let before = requests_sent(&mut service, "main");
        tokio::time::sleep(took).await;
        let idle = requests_sent(&mut service, "main") - before;
        // One refresh more or less either way; one request per answer would be 3,000.
        assert!(busy <= idle * 1.5 + 20.0, "{busy} requests to Kafka during {calls} answers, {idle} idle as long");

        // Pushed: active now; inactive once the group commits the end.
        let mut stream = scaler.stream_is_active(lag.clone()).await.expect("a stream").into_inner();
        assert!(stream.message().await.expect("a message").expect("open").result, "active at once");
        committer.commit(&[(&topic, 0, 20), (&topic, 1, 20), (&topic, 2, 20)]).expect("commit");
        let next = tokio::time::timeout(Duration::from_secs(60), stream.message()).await;
        let next = next.expect("a change within 60 s").expect("a message").expect("open");
        assert!(!next.result, "inactive once caught up");
        assert_eq!(metric(&mut scaler, &lag).await.expect("a value"), 0.0);
    });
}
