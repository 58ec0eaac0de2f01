//! Lag objectives: "lag in seconds under 30 s for 99.9% of 30 days" for the
//! groups a label selector picks, as Prometheus recording rules and
//! multi-window, multi-burn-rate alerts (the SRE workbook's four pairs,
//! their windows scaled to the objective's). The SLI is kshard's
//! `<ns>_kafka_consumer_group_topic_max_lag_seconds` (or, for a share group,
//! `…_share_group_…`), the worst over a group's topics, under the bound or not at each evaluation; while kshard
//! cannot tell current lag it withholds that series, and the time is not
//! counted either way. Pure: text from settings.

use std::fmt::Write;
use std::time::Duration;

/// One objective.
#[derive(Debug, Clone, PartialEq)]
pub struct Objective {
    /// Its name (a label of every series and alert; letters, digits, `-`, `_`).
    pub name: String,
    /// The groups it covers: PromQL matchers on `group_id` and `cluster`
    /// (`group_id=~"billing-.*"`); empty: every group.
    pub selector: Vec<Matcher>,
    /// The bound on lag in seconds.
    pub lag_seconds: f64,
    /// The share of time under it, above 0 and below 1 (0.999).
    pub target: f64,
    /// Over how long (30 days).
    pub window: Duration,
}

/// A label matcher of an objective's selector.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Matcher {
    /// `group_id` or `cluster`.
    pub label: String,
    /// `=`, `!=`, `=~` or `!~`.
    pub op: String,
    /// The value (a regular expression with `=~`, `!~`).
    pub value: String,
}

/// Why an objective is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {why}")]
pub struct ObjectiveError {
    /// The setting.
    pub field: &'static str,
    /// Why.
    pub why: String,
}

/// A matcher compiled, to test label values as Prometheus would.
#[derive(Debug)]
pub(crate) struct Compiled {
    test: Test,
    negated: bool,
}

#[derive(Debug)]
enum Test {
    Exact(String),
    Regex(regex::Regex),
    /// An expression that does not compile (never: selectors are checked
    /// when read): it selects nothing.
    Invalid,
}

impl Compiled {
    fn new(m: &Matcher) -> Self {
        let test = if m.op.contains('~') {
            regex::Regex::new(&format!("^(?:{})$", m.value)).map_or(Test::Invalid, Test::Regex)
        } else {
            Test::Exact(m.value.clone())
        };
        Compiled { test, negated: m.op.starts_with('!') }
    }

    /// Whether a series whose label is `value` is selected.
    pub(crate) fn accepts(&self, value: &str) -> bool {
        let hit = match &self.test {
            Test::Exact(exact) => exact == value,
            Test::Regex(r) => r.is_match(value),
            Test::Invalid => return false,
        };
        hit != self.negated
    }
}

impl Matcher {
    /// Reads `group_id=~"billing-.*", cluster="eu"`.
    pub fn parse_selector(text: &str) -> Result<Vec<Matcher>, ObjectiveError> {
        let bad = |why: String| ObjectiveError { field: "selector", why };
        let mut out = Vec::new();
        let mut rest = text.trim().trim_start_matches('{').trim_end_matches('}').trim();
        while !rest.is_empty() {
            let label_end = rest.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).unwrap_or(rest.len());
            let label = &rest[..label_end];
            if !matches!(label, "group_id" | "cluster") {
                return Err(bad(format!("{label:?}: only group_id and cluster can be matched")));
            }
            rest = rest[label_end..].trim_start();
            let op = ["=~", "!~", "!=", "="]
                .into_iter()
                .find(|op| rest.starts_with(op))
                .ok_or_else(|| bad(format!("after {label}: expected =, !=, =~ or !~")))?;
            rest = rest[op.len()..].trim_start();
            let body = rest.strip_prefix('"').ok_or_else(|| bad(format!("{label}{op}: expected a quoted value")))?;
            let close = body.find('"').ok_or_else(|| bad(format!("{label}{op}: an unterminated value")))?;
            let value = &body[..close];
            if value.contains('\\') {
                return Err(bad(format!("{label}{op}: escapes are not supported")));
            }
            if op.contains('~') {
                regex::Regex::new(&format!("^(?:{value})$"))
                    .map_err(|e| bad(format!("{label}{op}\"{value}\": {e}")))?;
            }
            out.push(Matcher { label: label.into(), op: op.into(), value: value.into() });
            rest = body[close + 1..].trim_start();
            rest = rest.strip_prefix(',').unwrap_or(rest).trim_start();
        }
        Ok(out)
    }
}

impl Objective {
    /// Checks the objective's values.
    pub fn check(&self) -> Result<(), ObjectiveError> {
        let bad = |field, why: &str| Err(ObjectiveError { field, why: why.into() });
        if self.name.is_empty() || !self.name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_') {
            return bad("name", "letters, digits, - and _ only");
        }
        if !(self.lag_seconds.is_finite() && self.lag_seconds > 0.0) {
            return bad("lag_seconds", "a number of seconds above 0");
        }
        if !(self.target > 0.0 && self.target < 1.0) {
            return bad("target_percent", "above 0 and below 100");
        }
        if self.window < Duration::from_secs(3600) || self.window > Duration::from_secs(366 * 86_400) {
            return bad("window_days", "from an hour (1/24) to 366 days");
        }
        if (1.0 - self.target) * self.window.as_secs_f64() < 1.0 {
            return bad(
                "target_percent",
                "leaves less than a second over the bound in the window: no budget to measure",
            );
        }
        Ok(())
    }

    /// Whether its `cluster` matchers accept the cluster named `cluster`
    /// (`""` for a process's one unnamed cluster, whose series carry no
    /// `cluster` label: Prometheus reads a missing label as empty).
    pub fn covers_cluster(&self, cluster: &str) -> bool {
        self.compiled("cluster").iter().all(|m| m.accepts(cluster))
    }

    /// Its matchers on `label`, compiled.
    pub(crate) fn compiled(&self, label: &str) -> Vec<Compiled> {
        self.selector.iter().filter(|m| m.label == label).map(Compiled::new).collect()
    }

    fn matchers(&self, extra: &str) -> String {
        let mut all: Vec<String> =
            self.selector.iter().map(|m| format!("{}{}\"{}\"", m.label, m.op, m.value)).collect();
        if !extra.is_empty() {
            all.push(extra.to_owned());
        }
        format!("{{{}}}", all.join(","))
    }
}

/// The SRE workbook's alerts for a 30-day objective: (burn rate, long
/// window, short window, severity); the windows scale with the objective's.
const BURNS: [(f64, u64, u64, &str); 4] = [
    (14.4, 3600, 300, "critical"),
    (6.0, 21_600, 1800, "critical"),
    (3.0, 86_400, 7200, "warning"),
    (1.0, 259_200, 21_600, "warning"),
];

/// `x` in decimal, to 12 places without trailing zeros: 1 − 0.999 is
/// 0.001, and a budget of 99.99999% is not rounded to 0.
fn decimal(x: f64) -> String {
    let text = format!("{x:.12}");
    text.trim_end_matches('0').trim_end_matches('.').to_owned()
}

/// A duration as PromQL writes it, whole seconds (at least `30s`).
fn promql(d: Duration) -> String {
    let s = d.as_secs().max(30);
    match s {
        s if s % 86_400 == 0 => format!("{}d", s / 86_400),
        s if s % 3600 == 0 => format!("{}h", s / 3600),
        s if s % 60 == 0 => format!("{}m", s / 60),
        s => format!("{s}s"),
    }
}

fn scaled(objective: &Objective, seconds: u64) -> Duration {
    let thirty_days = 30.0 * 86_400.0;
    Duration::from_secs_f64(seconds as f64 * objective.window.as_secs_f64() / thirty_days)
}

/// The rule file (Prometheus's format) for `objectives`, over kshard's
/// series named under `namespace`.
pub fn prometheus_rules(objectives: &[Objective], namespace: &str) -> String {
    let mut out = String::from(
        "# Lag objectives: recording rules and multi-window burn-rate alerts, made by\n\
         # `kshard objectives` from the objectives: of a configuration (docs/objectives.md).\n\
         groups:\n",
    );
    for o in objectives {
        let budget = 1.0 - o.target;
        let good = format!("kshard:objective_lag_good{}", o.matchers(&format!("objective=\"{}\"", o.name)));
        let _ = writeln!(out, "  - name: kshard-objective-{}", o.name);
        let _ = writeln!(out, "    rules:");
        let _ = writeln!(out, "      - record: kshard:objective_lag_good");
        let _ = writeln!(
            out,
            "        expr: max by (cluster, group_id) ({}) <= bool {}",
            o.matchers(&format!("__name__=~\"{namespace}_kafka_(consumer|share)_group_topic_max_lag_seconds\"")),
            o.lag_seconds,
        );
        let _ = writeln!(out, "        labels:\n          objective: {}", o.name);
        let mut windows: Vec<Duration> =
            BURNS.iter().flat_map(|(_, long, short, _)| [scaled(o, *long), scaled(o, *short)]).collect();
        windows.sort();
        windows.dedup_by_key(|w| promql(*w));
        for w in &windows {
            let _ = writeln!(out, "      - record: kshard:objective_error_ratio:{}", promql(*w));
            let _ = writeln!(out, "        expr: 1 - avg_over_time({good}[{}])", promql(*w));
            let _ = writeln!(out, "        labels:\n          objective: {}", o.name);
        }
        let _ = writeln!(out, "      - record: kshard:objective_error_budget_remaining");
        let _ =
            writeln!(out, "        expr: 1 - (1 - avg_over_time({good}[{}])) / {}", promql(o.window), decimal(budget));
        let _ = writeln!(out, "        labels:\n          objective: {}", o.name);
        for (i, (burn, long, short, severity)) in BURNS.iter().enumerate() {
            let (long, short) = (promql(scaled(o, *long)), promql(scaled(o, *short)));
            let ratio = |w: &str| format!("kshard:objective_error_ratio:{w}{{objective=\"{}\"}}", o.name);
            let threshold = burn * budget;
            let _ = writeln!(out, "      - alert: KafkaLagObjectiveBurn{}", ["Fast", "Steady", "Slow", "Creeping"][i]);
            let _ = writeln!(
                out,
                "        expr: {} > {t} and {} > {t}",
                ratio(&long),
                ratio(&short),
                t = decimal(threshold)
            );
            let _ = writeln!(out, "        labels:\n          severity: {severity}\n          objective: {}", o.name);
            let _ = writeln!(out, "        annotations:");
            let _ = writeln!(
                out,
                "          summary: \"{{{{ $labels.group_id }}}} burns its lag objective {} {burn}x as fast as allowed\"",
                o.name
            );
            let _ = writeln!(
                out,
                "          description: \"Lag in seconds of {{{{ $labels.group_id }}}} is over {} s {{{{ $value | humanizePercentage }}}} of the last {long} (and of the last {short}); the objective allows {:.3}% over {}.\"",
                o.lag_seconds,
                budget * 100.0,
                promql(o.window)
            );
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn objective() -> Objective {
        Objective {
            name: "billing".into(),
            selector: Matcher::parse_selector(r#"group_id=~"billing-.*", cluster="eu""#).expect("a selector"),
            lag_seconds: 30.0,
            target: 0.999,
            window: Duration::from_secs(30 * 86_400),
        }
    }

    #[test]
    fn a_selector_is_read_and_checked() {
        let m = &objective().selector;
        assert_eq!(m.len(), 2);
        assert_eq!((m[0].label.as_str(), m[0].op.as_str(), m[0].value.as_str()), ("group_id", "=~", "billing-.*"));
        for bad in [r#"topic_name="x""#, r#"group_id~"x""#, "group_id=x", r#"group_id=~"(""#, r#"group_id="a"#] {
            assert!(Matcher::parse_selector(bad).is_err(), "{bad}");
        }
        assert_eq!(Matcher::parse_selector("").expect("every group"), []);
    }

    #[test]
    fn the_workbooks_windows_scale_with_the_objective() {
        let text = prometheus_rules(&[objective()], "kshard");
        assert!(text.contains(r#"max by (cluster, group_id) ({group_id=~"billing-.*",cluster="eu",__name__=~"kshard_kafka_(consumer|share)_group_topic_max_lag_seconds"}) <= bool 30"#), "{text}");
        assert!(text.contains("kshard:objective_error_ratio:1h{objective=\"billing\"} > 0.0144 and kshard:objective_error_ratio:5m{objective=\"billing\"} > 0.0144"), "{text}");
        assert!(text.contains("[30d])) / 0.001\n"), "{text}");
        let week = Objective { window: Duration::from_secs(7 * 86_400), ..objective() };
        let text = prometheus_rules(&[week], "kshard");
        // 1 h of 30 days is 14 m of 7 days; 5 m is 70 s.
        assert!(
            text.contains(
                "kshard:objective_error_ratio:14m{objective=\"billing\"} > 0.0144 and kshard:objective_error_ratio:70s"
            ),
            "{text}"
        );
        assert!(objective().check().is_ok());
        assert!(Objective { target: 1.0, ..objective() }.check().is_err());
        // 99.99999% of an hour allows 0.36 ms: nothing to measure.
        let e = Objective { target: 0.9999999, window: Duration::from_secs(3600), ..objective() }.check();
        assert_eq!(e.map_err(|e| e.field), Err("target_percent"));
        assert_eq!(decimal(1.0 - 0.999), "0.001");
        assert_eq!(decimal(1.0 - 0.9999999), "0.0000001");
        assert_eq!(decimal(14.4 * (1.0 - 0.99)), "0.144");
        assert!(Objective { name: "a b".into(), ..objective() }.check().is_err());
    }

    #[test]
    fn cluster_matchers_pick_the_clusters_an_objective_covers() {
        assert!(objective().covers_cluster("eu"));
        assert!(!objective().covers_cluster("us"));
        assert!(!objective().covers_cluster(""));
        let not_test =
            |sel: &str| Objective { selector: Matcher::parse_selector(sel).expect("a selector"), ..objective() };
        assert!(not_test(r#"cluster!~"test-.*""#).covers_cluster(""));
        assert!(!not_test(r#"cluster!~"test-.*""#).covers_cluster("test-1"));
        assert!(not_test(r#"group_id="a""#).covers_cluster("anything"));
    }
}
