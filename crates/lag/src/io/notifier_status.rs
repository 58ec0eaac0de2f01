//! What the notifiers sent: each notifier's notices by kind (open, close)
//! and outcome (sent, failed), shown in the process's `/metrics`.

use std::sync::atomic::{AtomicU64, Ordering};

/// Each notifier's notices, by kind and outcome.
#[derive(Debug, Default)]
pub(crate) struct NotifierStatus {
    counts: Vec<(String, [AtomicU64; 4])>,
}

impl NotifierStatus {
    pub(crate) fn new(names: impl Iterator<Item = String>) -> Self {
        NotifierStatus { counts: names.map(|n| (n, Default::default())).collect() }
    }

    pub(crate) fn count(&self, notifier: usize, close: bool, sent: bool) {
        if let Some((_, c)) = self.counts.get(notifier) {
            c[usize::from(close) * 2 + usize::from(!sent)].fetch_add(1, Ordering::Relaxed);
        }
    }

    /// `<namespace>_notifier_notices_total{notifier, kind, outcome}`.
    pub(crate) fn render(&self, namespace: &str) -> String {
        let mut rows = Vec::new();
        for (name, c) in &self.counts {
            for (i, (kind, outcome)) in
                [("open", "sent"), ("open", "failed"), ("close", "sent"), ("close", "failed")].into_iter().enumerate()
            {
                let labels = format!("notifier=\"{name}\",kind=\"{kind}\",outcome=\"{outcome}\"");
                rows.push((labels, c[i].load(Ordering::Relaxed) as f64));
            }
        }
        let mut out = String::new();
        let help = "Notices the notifiers sent, and those that failed (logged with why), by notifier and kind.";
        crate::metrics::process::family(&mut out, namespace, "notifier_notices_total", help, "counter", &rows);
        out
    }
}
