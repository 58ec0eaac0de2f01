//! The standard `process_*` families every Prometheus client library's
//! process collector exports (client_golang's in kminion, kafka_exporter and
//! Burrow, which their dashboards chart): CPU time, resident and virtual
//! memory, open and allowed file descriptors, start time. Read from `/proc`
//! at each scrape, unprefixed as theirs; left out where `/proc` is not there.

use super::process::family_named;

/// What the process uses now, from `/proc/self`.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Resources {
    cpu_seconds: f64,
    resident_bytes: f64,
    virtual_bytes: f64,
    start_time_seconds: f64,
    open_fds: Option<f64>,
    max_fds: Option<f64>,
}

/// The families, as Prometheus text; empty when `/proc` cannot be read.
pub(crate) fn render() -> String {
    let read = |p: &str| std::fs::read_to_string(p).ok();
    let (Some(stat), Some(system)) = (read("/proc/self/stat"), read("/proc/stat")) else {
        return String::new();
    };
    let ticks = rustix::param::clock_ticks_per_second() as f64;
    let page = rustix::param::page_size() as f64;
    let Some(mut r) = parse(&stat, &system, ticks, page) else {
        return String::new();
    };
    r.open_fds = std::fs::read_dir("/proc/self/fd").ok().map(|d| d.count() as f64);
    r.max_fds = read("/proc/self/limits").as_deref().and_then(max_open_files);
    text(&r)
}

/// `/proc/self/stat` and `/proc/stat` (its boot time) read with the clock's
/// ticks per second and the page size.
fn parse(stat: &str, system: &str, ticks: f64, page: f64) -> Option<Resources> {
    // The command name may hold spaces and parentheses: fields follow the last `)`.
    let fields: Vec<&str> = stat.get(stat.rfind(')')? + 1..)?.split_whitespace().collect();
    // Field n of proc(5) is fields[n - 3] here (pid and comm are before).
    let field = |n: usize| fields.get(n - 3)?.parse::<f64>().ok();
    let boot = system.lines().find_map(|l| l.strip_prefix("btime ")?.trim().parse::<f64>().ok())?;
    Some(Resources {
        cpu_seconds: (field(14)? + field(15)?) / ticks,
        start_time_seconds: boot + field(22)? / ticks,
        virtual_bytes: field(23)?,
        resident_bytes: field(24)? * page,
        open_fds: None,
        max_fds: None,
    })
}

/// The soft limit of `Max open files` in `/proc/self/limits`.
fn max_open_files(limits: &str) -> Option<f64> {
    let line = limits.lines().find(|l| l.starts_with("Max open files"))?;
    line.trim_start_matches("Max open files").split_whitespace().next()?.parse().ok()
}

fn text(r: &Resources) -> String {
    let mut out = String::new();
    let one = |v: f64| [(String::new(), v)];
    family_named(
        &mut out,
        "process_cpu_seconds_total",
        "Total user and system CPU time spent in seconds.",
        "counter",
        &one(r.cpu_seconds),
    );
    family_named(
        &mut out,
        "process_resident_memory_bytes",
        "Resident memory size in bytes.",
        "gauge",
        &one(r.resident_bytes),
    );
    family_named(
        &mut out,
        "process_virtual_memory_bytes",
        "Virtual memory size in bytes.",
        "gauge",
        &one(r.virtual_bytes),
    );
    family_named(
        &mut out,
        "process_start_time_seconds",
        "Start time of the process since unix epoch in seconds.",
        "gauge",
        &one(r.start_time_seconds),
    );
    if let Some(n) = r.open_fds {
        family_named(&mut out, "process_open_fds", "Number of open file descriptors.", "gauge", &one(n));
    }
    if let Some(n) = r.max_fds {
        family_named(&mut out, "process_max_fds", "Maximum number of open file descriptors.", "gauge", &one(n));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proc_fields_are_read_after_the_command_name() {
        // A command name with a space and a parenthesis; utime 250, stime 50,
        // starttime 1000 ticks, vsize 4096000, rss 300 pages.
        let stat =
            "42 (k shard) ) S 1 42 42 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 9 0 1000 4096000 300 18446744073709551615";
        let r = parse(stat, "cpu  1 2 3\nbtime 1700000000\n", 100.0, 4096.0).expect("parsed");
        assert_eq!(r.cpu_seconds, 3.0);
        assert_eq!(r.start_time_seconds, 1_700_000_010.0);
        assert_eq!(r.virtual_bytes, 4_096_000.0);
        assert_eq!(r.resident_bytes, 300.0 * 4096.0);
        assert_eq!(parse("garbage", "btime 1", 100.0, 4096.0), None);
        let limits = "Limit                     Soft Limit           Hard Limit           Units\nMax open files            1024                 524288               files\n";
        assert_eq!(max_open_files(limits), Some(1024.0));
    }

    #[test]
    fn this_process_is_rendered_in_client_librarys_names() {
        let text = render();
        for family in
            ["process_cpu_seconds_total ", "process_resident_memory_bytes ", "process_open_fds ", "process_max_fds "]
        {
            assert!(text.contains(&format!("\n{family}")), "{family}: {text}");
        }
    }
}
