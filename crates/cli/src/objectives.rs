//! `objectives:` in the configuration file, and `kshard objectives`: the
//! Prometheus rule file of those lag objectives (recording rules and
//! multi-window burn-rate alerts), printed for `rule_files:`.

use std::path::PathBuf;

use anyhow::{Result, bail};

/// `kshard objectives`'s flags.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct ObjectivesArgs {
    /// The configuration file whose `objectives:` (and `metrics_namespace`) to read.
    #[arg(long, env = "KSHARD_CONFIG")]
    pub(crate) config: PathBuf,
}

/// Prints the rule file.
pub(crate) fn run(args: &ObjectivesArgs) -> Result<()> {
    let file = crate::settings_file::read_file(Some(&args.config))?;
    let (settings, _) = crate::settings_file::with_flags(file, crate::settings_file::Layer::default())?;
    let list = crate::serve_objectives::objectives(&settings.objectives)?;
    if list.is_empty() {
        bail!("{} sets no objectives:", args.config.display());
    }
    let namespace = settings.metrics_namespace.as_ref().map_or("kshard", |n| n.as_str());
    print!("{}", kshard_lag::prometheus_rules(&list, namespace));
    Ok(())
}
