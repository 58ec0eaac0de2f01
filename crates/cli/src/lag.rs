//! `kshard lag`: every group's lag now, for the terminal — committed offset
//! (a share group's start offset), end offset, lag in records and seconds,
//! records lost to retention, status and the group's kind per partition — as a
//! table or `--json` (the shape of `/api/groups`). It asks the brokers the way
//! `scrape_mode: admin_api` does (ListGroups, OffsetFetch, ListOffsets), so it
//! answers in seconds on any cluster, without a catch-up.

use std::time::Duration;

use anyhow::{Result, anyhow};
use kshard_lag::{GroupView, MonitorSettings, NameFilter};

use crate::serve_config::KafkaArgs;

/// `kshard lag`'s flags.
#[derive(Debug, clap::Args)]
pub(crate) struct LagArgs {
    #[command(flatten)]
    pub(crate) brokers: KafkaArgs,
    /// Only this group (its exact name); repeat for more.
    #[arg(long)]
    pub(crate) group: Vec<String>,
    /// The groups as JSON (the shape of `/api/groups`) instead of a table.
    #[arg(long)]
    pub(crate) json: bool,
    /// Timeout of each broker call, in seconds.
    #[arg(long, default_value_t = 30)]
    pub(crate) timeout_seconds: u64,
}

/// Runs `kshard lag`.
pub(crate) fn run(args: &LagArgs) -> Result<()> {
    let target = args.brokers.target()?;
    let exact: Vec<String> = args.group.iter().map(|g| regex_escape(g)).collect();
    let groups = NameFilter::new(&exact, &[]).map_err(|e| anyhow!("invalid group: {e}"))?;
    let settings = MonitorSettings { groups, ..MonitorSettings::default() };
    let mut views = kshard_lag::service::lag_once(&target.kafka, settings, Duration::from_secs(args.timeout_seconds))
        .map_err(|e| anyhow!("kshard lag: {e}"))?;
    // One OffsetFetch has no commit times and no history: the commit age
    // would count from this very call. Unknown, rather than a made-up 0.
    for p in views.iter_mut().flat_map(|g| g.topics.iter_mut()).flat_map(|t| t.partitions.iter_mut()) {
        p.commit_age_seconds = None;
    }
    let mut out = std::io::stdout().lock();
    if args.json {
        serde_json::to_writer_pretty(&mut out, &views)?;
        use std::io::Write;
        writeln!(out)?;
    } else {
        print_table(&mut out, &views)?;
    }
    Ok(())
}

/// `name` as a regular expression matching exactly it.
fn regex_escape(name: &str) -> String {
    name.chars().fold(String::new(), |mut s, c| {
        if "\\.+*?()|[]{}^$#&-~".contains(c) {
            s.push('\\');
        }
        s.push(c);
        s
    })
}

/// The table's columns.
const COLUMNS: usize = 13;

/// One row per group-partition, aligned.
fn print_table(out: &mut impl std::io::Write, views: &[GroupView]) -> Result<()> {
    let header = [
        "GROUP",
        "TOPIC",
        "PARTITION",
        "COMMITTED",
        "END",
        "LAG",
        "LAG_S",
        "COMMIT_AGE_S",
        "RATE",
        "ETA_S",
        "LOST",
        "STATUS",
        "KIND",
    ]
    .map(str::to_owned);
    let mut rows = vec![header];
    for g in views {
        for t in &g.topics {
            for p in &t.partitions {
                let opt = |v: Option<i64>| v.map_or("-".to_owned(), |v| v.to_string());
                let secs = |v: Option<f64>| v.map_or("-".to_owned(), |s| format!("{s:.1}"));
                // Consumed and produced per second, as `in/out`.
                let rate = match (p.consumed_per_second, p.produced_per_second) {
                    (Some(c), Some(w)) => format!("{c:.1}/{w:.1}"),
                    _ => "-".to_owned(),
                };
                rows.push([
                    g.group_id.clone(),
                    t.topic.clone(),
                    p.partition.to_string(),
                    p.committed_offset.to_string(),
                    opt(p.high_water_mark),
                    opt(p.lag),
                    secs(p.lag_seconds),
                    p.commit_age_seconds.map_or("-".to_owned(), |s| format!("{s:.0}")),
                    rate,
                    secs(p.catch_up_seconds),
                    p.records_lost.to_string(),
                    p.status.to_owned(),
                    // consumer, share, connect…; `-` for groups that only commit.
                    g.protocol_type.clone().filter(|t| !t.is_empty()).unwrap_or_else(|| "-".to_owned()),
                ]);
            }
        }
    }
    let widths: Vec<usize> =
        (0..COLUMNS).map(|i| rows.iter().map(|r| r[i].chars().count()).max().unwrap_or(0)).collect();
    for row in &rows {
        let cells: Vec<String> = row
            .iter()
            .zip(&widths)
            .enumerate()
            // Names left, numbers right.
            .map(
                |(i, (cell, w))| {
                    if !(2..COLUMNS - 2).contains(&i) { format!("{cell:<w$}") } else { format!("{cell:>w$}") }
                },
            )
            .collect();
        writeln!(out, "{}", cells.join("  ").trim_end())?;
    }
    if views.is_empty() {
        writeln!(out, "(no group)")?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_group_name_matches_only_itself() {
        let f = NameFilter::new(&[regex_escape("orders.v1-(eu)")], &[]).expect("valid");
        assert!(f.allows("orders.v1-(eu)"));
        assert!(!f.allows("ordersXv1-(eu)"));
    }
}
