//! Samples etcd throughout a fault test: how many replicas of each shard say
//! PRIMARY at each instant. Two at once would be two writers serving.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use kshard_runtime::ReplicaCode;
use kshard_runtime::keyspace::EtcdKeyspace;
use kshard_runtime::keyspace::Keyspace;
use kshard_runtime::{AssignmentValue, Keys};

/// A sampler running until [`Sampler::stop`].
pub(crate) struct Sampler {
    stop: Arc<AtomicBool>,
    thread: JoinHandle<(usize, Vec<String>)>,
}

impl Sampler {
    /// Samples the assignments under `prefix` every 100 ms (while etcd answers).
    pub(crate) fn start(endpoint: &str, prefix: &str) -> Sampler {
        let stop = Arc::new(AtomicBool::new(false));
        let (endpoint, keys, done) = (endpoint.to_owned(), Keys::new(prefix), Arc::clone(&stop));
        let thread = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
            runtime.block_on(async move {
                let (mut samples, mut doubles) = (0, Vec::new());
                let mut ks = None;
                while !done.load(Ordering::SeqCst) {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    if ks.is_none() {
                        ks = EtcdKeyspace::connect(std::slice::from_ref(&endpoint)).await.ok();
                    }
                    let Some(etcd) = &ks else { continue };
                    let prefix = keys.assignments();
                    let read = tokio::time::timeout(Duration::from_secs(1), etcd.get_prefix(&prefix)).await;
                    let Ok(Ok(snapshot)) = read else { continue };
                    samples += 1;
                    let mut primaries: BTreeMap<String, Vec<String>> = BTreeMap::new();
                    for kv in snapshot.kvs {
                        let (Ok(a), Ok(v)) =
                            (keys.parse_assignment(&kv.key), serde_json::from_slice::<AssignmentValue>(&kv.value))
                        else {
                            continue;
                        };
                        if v.status.code == ReplicaCode::Primary {
                            primaries.entry(a.shard).or_default().push(a.member);
                        }
                    }
                    for (shard, members) in primaries.into_iter().filter(|(_, m)| m.len() > 1) {
                        doubles.push(format!("{shard}: PRIMARY on {members:?} at revision {}", snapshot.revision));
                    }
                }
                (samples, doubles)
            })
        });
        Sampler { stop, thread }
    }

    /// Stops sampling; panics if a shard ever had two PRIMARY replicas, or
    /// if etcd was never read.
    pub(crate) fn assert_one_primary_at_a_time(self) {
        self.stop.store(true, Ordering::SeqCst);
        let (samples, doubles) = self.thread.join().expect("the sampler");
        assert!(samples > 10, "etcd was sampled {samples} times only");
        assert!(doubles.is_empty(), "two PRIMARY replicas of a shard at once ({samples} samples): {doubles:#?}");
        eprintln!("{samples} samples of etcd: at most one PRIMARY per shard in each");
    }
}
