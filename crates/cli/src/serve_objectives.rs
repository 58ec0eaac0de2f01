//! `objectives:` in the configuration file: lag objectives, checked entry
//! by entry (`kshard objectives` prints their rules; `serve` checks them
//! too). The whole process's: top level only.

use std::time::Duration;

use anyhow::{Context, Result, bail};
use kshard_lag::{Matcher, Objective};
use serde::{Deserialize, Serialize};

/// One entry of `objectives:` as written.
#[derive(Debug, Default, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ObjectiveFile {
    name: Option<String>,
    selector: Option<String>,
    lag_seconds: Option<f64>,
    target_percent: Option<f64>,
    window_days: Option<f64>,
}

/// The objectives of `objectives:`, checked, each error naming its entry.
pub(crate) fn objectives(entries: &[ObjectiveFile]) -> Result<Vec<Objective>> {
    let mut out: Vec<Objective> = Vec::new();
    for (i, e) in entries.iter().enumerate() {
        let at = format!("objectives[{i}]");
        let name = e.name.clone().with_context(|| format!("invalid {at}.name: not set"))?;
        if out.iter().any(|o| o.name == name) {
            bail!("invalid {at}.name: {name:?} names another objective too");
        }
        let selector = Matcher::parse_selector(e.selector.as_deref().unwrap_or_default())
            .map_err(|err| anyhow::anyhow!("invalid {at}.{err}"))?;
        let lag_seconds = e.lag_seconds.with_context(|| format!("invalid {at}.lag_seconds: not set"))?;
        let target = e.target_percent.with_context(|| format!("invalid {at}.target_percent: not set"))? / 100.0;
        let days = e.window_days.unwrap_or(30.0);
        if !(days.is_finite() && days > 0.0 && days <= 366.0) {
            bail!("invalid {at}.window_days: {days} (an hour, 0.0417, to 366)");
        }
        let objective =
            Objective { name, selector, lag_seconds, target, window: Duration::from_secs_f64(days * 86_400.0) };
        objective.check().map_err(|err| anyhow::anyhow!("invalid {at}.{err}"))?;
        out.push(objective);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn objectives_are_read_and_checked_by_entry() {
        let read = |yaml: &str| objectives(&serde_norway::from_str::<Vec<ObjectiveFile>>(yaml).expect("YAML"));
        let o = read(
            "- name: billing\n  selector: 'group_id=~\"billing-.*\"'\n  lag_seconds: 30\n  target_percent: 99.9\n",
        )
        .expect("valid");
        assert!((o[0].target - 0.999).abs() < 1e-12);
        assert_eq!(o[0].window, Duration::from_secs(30 * 86_400));
        let err = |yaml: &str| read(yaml).expect_err("refused").to_string();
        assert!(err("- lag_seconds: 30\n").contains("objectives[0].name"));
        assert!(
            err("- name: a\n  selector: 'topic=\"x\"'\n  lag_seconds: 1\n  target_percent: 99\n")
                .contains("objectives[0].selector")
        );
        assert!(err("- name: a\n  lag_seconds: 1\n  target_percent: 100\n").contains("objectives[0].target_percent"));
        assert!(err("- name: a\n  lag_seconds: 1\n  target_percent: 99\n  window_days: 0\n").contains("window_days"));
    }
}
