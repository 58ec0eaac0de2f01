//! `kshard bench …`: figures for the README, measured on a real broker, one
//! file per benchmark:
//!
//! - [`drain`]: read `__consumer_offsets` to its end doing nothing else —
//!   the broker's and the client's limit;
//! - [`catch_up`]: in one run on the same broker and data, the raw drain and
//!   `kshard serve` (each its own process): time to done/ready, CPU-seconds and
//!   peak RSS, medians over several runs;
//! - [`idle`]: a caught-up `serve`'s CPU while scraped, and while not;
//! - [`keda`]: KEDA's external scaler under many scaled objects: latency,
//!   and the Kafka requests they cause (none);
//! - [`state`]: memory per tracked group-partition and `/metrics` render time;
//! - [`record_times`]: one refresh's read of record times for lag in seconds;
//! - [`restart`]: `serve --data-dir`'s cold start and restarts (after `kill -9`);
//! - [`runtime`]: the runtime's examples beside Kafka Streams: steady state,
//!   latency, restart and fail-over.
//!
//! CPU and memory come from `/proc/<pid>/stat` (utime + stime, in USER_HZ = 100
//! ticks per second on Linux) and `/proc/<pid>/status` (`VmHWM`, the peak RSS).

pub(crate) mod catch_up;
pub(crate) mod contender;
pub(crate) mod drain;
pub(crate) mod failover;
pub(crate) mod idle;
pub(crate) mod keda;
pub(crate) mod kminion;
pub(crate) mod outputs;
pub(crate) mod record_times;
pub(crate) mod restart;
pub(crate) mod runtime;
pub(crate) mod state;
pub(crate) mod workload;

use std::process::Child;

use anyhow::{Context, Result};

/// One measured run of a child process.
#[derive(Debug, Clone)]
pub(crate) struct Run {
    pub(crate) seconds: f64,
    pub(crate) stats: ProcessStats,
    pub(crate) records: u64,
    /// Where a `kshard serve` run listens (empty for a drain).
    pub(crate) addr: String,
    /// Connections it held to the (first bootstrap) broker when measured.
    pub(crate) connections: usize,
}

/// CPU time and peak memory of a process, from `/proc`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ProcessStats {
    pub(crate) cpu_seconds: f64,
    pub(crate) peak_rss_mb: f64,
}

pub(crate) fn process_stats(pid: u32) -> Result<ProcessStats> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).context("reading /proc/PID/stat")?;
    // Fields after the command name (which is in parentheses and may hold spaces).
    let after = stat.rsplit_once(')').map(|(_, rest)| rest).context("malformed /proc/PID/stat")?;
    let fields: Vec<&str> = after.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of the whole line: 12 and 13 here.
    let ticks: f64 = fields.get(11).and_then(|s| s.parse::<f64>().ok()).unwrap_or(0.0)
        + fields.get(12).and_then(|s| s.parse::<f64>().ok()).unwrap_or(0.0);
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).context("reading /proc/PID/status")?;
    let hwm_kb: f64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0);
    Ok(ProcessStats { cpu_seconds: ticks / 100.0, peak_rss_mb: hwm_kb / 1024.0 })
}

/// This process's CPU time (user, system: every thread, those ended too),
/// to the microsecond.
#[allow(unsafe_code)] // one libc call, with nothing to check
pub(crate) fn own_cpu_seconds() -> (f64, f64) {
    // SAFETY: getrusage writes only into the struct it is given.
    let usage = unsafe {
        let mut usage: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_SELF, &mut usage);
        usage
    };
    let seconds = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    (seconds(usage.ru_utime), seconds(usage.ru_stime))
}

/// The CPU time of a process's live threads, to the nanosecond (the sum of
/// `/proc/<pid>/task/*/schedstat`): for a broker, whose threads live as long
/// as it does.
pub(crate) fn threads_cpu_seconds(pid: u32) -> Result<f64> {
    let mut nanos = 0u64;
    for task in std::fs::read_dir(format!("/proc/{pid}/task")).context("reading /proc/PID/task")? {
        let path = task.context("reading /proc/PID/task")?.path().join("schedstat");
        // A thread that ended meanwhile is skipped.
        if let Ok(stat) = std::fs::read_to_string(path) {
            nanos += stat.split_whitespace().next().and_then(|n| n.parse::<u64>().ok()).unwrap_or(0);
        }
    }
    Ok(nanos as f64 / 1e9)
}

/// The TCP connections `pid` holds open to `port` on loopback (a broker's),
/// from the socket inodes in `/proc/<pid>/fd` and the established
/// connections in `/proc/net/tcp` and `tcp6`.
pub(crate) fn connections_to(pid: u32, port: u16) -> usize {
    let mut inodes = std::collections::HashSet::new();
    if let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) {
        for fd in fds.flatten() {
            if let Ok(link) = std::fs::read_link(fd.path())
                && let Some(inode) = link.to_str().and_then(|l| l.strip_prefix("socket:[")?.strip_suffix(']'))
            {
                inodes.insert(inode.to_owned());
            }
        }
    }
    let mut n = 0;
    for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
        let Ok(text) = std::fs::read_to_string(table) else { continue };
        for line in text.lines().skip(1) {
            let f: Vec<&str> = line.split_whitespace().collect();
            // local, remote (hex ip:port), state (01: established), …, inode (field 9).
            let (Some(remote), Some(state), Some(inode)) = (f.get(2), f.get(3), f.get(9)) else { continue };
            let remote_port = remote.rsplit_once(':').and_then(|(_, p)| u16::from_str_radix(p, 16).ok());
            if *state == "01" && remote_port == Some(port) && inodes.contains(*inode) {
                n += 1;
            }
        }
    }
    n
}

/// Waits (up to 600 s) for a 200 on `addr`'s `/ready` from the child `pid`
/// of `what`, started at `started`: seconds since, the child's stats then,
/// and the answer's body.
pub(crate) fn wait_ready(
    addr: &str,
    pid: u32,
    started: std::time::Instant,
    what: &str,
) -> Result<(f64, ProcessStats, String)> {
    loop {
        if started.elapsed() > std::time::Duration::from_secs(600) {
            anyhow::bail!("{what} was not ready after 600 s");
        }
        if let Ok((200, body)) = http_get(addr, "/ready") {
            return Ok((started.elapsed().as_secs_f64(), process_stats(pid)?, body));
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

/// The readers a bench runs with: the one `--reader` names, else both.
pub(crate) fn readers(kafka: &crate::serve_config::KafkaArgs) -> Vec<String> {
    match &kafka.reader {
        Some(reader) => vec![reader.clone()],
        None => vec!["kshard".into(), "librdkafka".into()],
    }
}

/// The median (the upper one of an even count).
pub(crate) fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    if v.is_empty() { 0.0 } else { v[v.len() / 2] }
}

/// A child process killed (and reaped) when dropped.
pub(crate) struct KillOnDrop(pub(crate) Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A GET from a child process on loopback: the status and the body.
pub(crate) fn http_get(addr: &str, path: &str) -> std::io::Result<(u16, String)> {
    kshard_runtime::MemberClient::new(addr, std::time::Duration::from_secs(60)).get(path)
}

/// A free address on loopback for a child to listen on.
pub(crate) fn free_addr() -> Result<String> {
    Ok(format!("127.0.0.1:{}", std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port()))
}
