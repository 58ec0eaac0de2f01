//! A published Grafana dashboard's queries, as Grafana would send them to
//! Prometheus: its template variables resolved against a [`Prometheus`] in
//! order (`label_values`, `query_result` with the variable's regex, custom
//! and constant values), then every panel target's `expr` with the
//! variables and Grafana's built-in intervals put in.
//!
//! Values are chosen as a user would see them: a variable with "All" or
//! several values takes every value (Grafana's `(a|b)` regex form); a
//! single-valued one takes the first value that `prefer` accepts, else the
//! first (Grafana's default).

use std::collections::BTreeMap;

use serde_json::Value;

use super::{Prometheus, QueryError};

/// `$__rate_interval` as Grafana computes it for a data source scraped
/// every 15 s (its default): four scrape intervals.
pub const RATE_INTERVAL: &str = "1m";
/// `$__interval` for a default dashboard width and a 5-minute range.
pub const INTERVAL: &str = "15s";

/// One panel target's query.
#[derive(Debug, Clone, PartialEq)]
pub struct Target {
    /// The panel's title.
    pub panel: String,
    /// The query as the dashboard has it (variables not put in).
    pub expr: String,
}

/// A template variable.
#[derive(Debug, Clone, PartialEq)]
pub struct Variable {
    /// What queries call it (`$name`).
    pub name: String,
    /// `query`, `custom`, `constant`, `interval`, `datasource`, `textbox`, …
    pub kind: String,
    /// The variable's query (or its options, comma-separated).
    pub query: String,
    /// Grafana's regex over each value, `/…/` (its first group is the value).
    pub regex: Option<String>,
    /// Several values at once, or "All".
    pub multi: bool,
}

/// What a dashboard queries.
#[derive(Debug, Clone, PartialEq)]
pub struct Dashboard {
    /// Its title.
    pub title: String,
    /// Its template variables, in order (later ones may use earlier ones).
    pub variables: Vec<Variable>,
    /// Every panel target with an `expr`, rows' and nested panels' included.
    pub targets: Vec<Target>,
    /// The dashboard's time range, in seconds (`${__range_s}`).
    pub range_seconds: u64,
}

impl Dashboard {
    /// Reads a dashboard's JSON (as exported, or wrapped in `dashboard`).
    pub fn from_json(text: &str) -> Result<Self, QueryError> {
        let root: Value = serde_json::from_str(text).map_err(|e| format!("not JSON: {e}"))?;
        let d = if root.get("dashboard").is_some() { &root["dashboard"] } else { &root };
        let s = |v: &Value| v.as_str().unwrap_or_default().to_owned();
        let variables = d["templating"]["list"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|v| Variable {
                name: s(&v["name"]),
                kind: s(&v["type"]),
                query: match &v["query"] {
                    Value::Object(o) => o.get("query").map(s).unwrap_or_default(),
                    q => s(q),
                },
                regex: v["regex"].as_str().filter(|r| !r.is_empty()).map(str::to_owned),
                multi: v["multi"].as_bool().unwrap_or(false) || v["includeAll"].as_bool().unwrap_or(false),
            })
            .collect();
        let mut targets = Vec::new();
        let rows =
            d["rows"].as_array().into_iter().flatten().flat_map(|r| r["panels"].as_array().into_iter().flatten());
        for panel in d["panels"].as_array().into_iter().flatten().chain(rows) {
            collect_targets(panel, &mut targets);
        }
        let range_seconds = d["time"]["from"].as_str().and_then(relative_seconds).unwrap_or(6 * 3600);
        Ok(Dashboard { title: s(&d["title"]), variables, targets, range_seconds })
    }

    /// Every variable's value as put into queries, resolved in order.
    pub fn resolve(&self, prometheus: &Prometheus, prefer: &dyn Fn(&str) -> bool) -> Result<Values, QueryError> {
        let mut values = Values { range_seconds: self.range_seconds, ..Values::default() };
        for v in &self.variables {
            let options = match v.kind.as_str() {
                "query" => {
                    let query = values.interpolate(&v.query);
                    query_options(prometheus, &query).map_err(|e| format!("variable {}: {e}", v.name))?
                }
                "custom" | "interval" => v.query.split(',').map(|o| o.trim().to_owned()).collect(),
                "constant" | "textbox" => vec![v.query.clone()],
                // A data source, an ad hoc filter: nothing a query names.
                _ => continue,
            };
            let mut options = match &v.regex {
                Some(r) => apply_regex(r, &options)?,
                None => options,
            };
            options.dedup();
            if options.is_empty() {
                return Err(
                    format!("variable {} has no values (its query: {})", v.name, values.interpolate(&v.query)).into()
                );
            }
            let value = if v.multi {
                let escaped: Vec<String> = options.iter().map(|o| regex_escaped(o)).collect();
                if escaped.len() == 1 { escaped[0].clone() } else { format!("({})", escaped.join("|")) }
            } else {
                let chosen = options.iter().find(|o| prefer(o)).unwrap_or(&options[0]);
                chosen.replace('\\', "\\\\").replace('\'', "\\'")
            };
            values.set.insert(v.name.clone(), value);
        }
        Ok(values)
    }
}

fn collect_targets(panel: &Value, out: &mut Vec<Target>) {
    let title = panel["title"].as_str().unwrap_or_default();
    for t in panel["targets"].as_array().into_iter().flatten() {
        if let Some(expr) = t["expr"].as_str().filter(|e| !e.trim().is_empty()) {
            out.push(Target { panel: title.to_owned(), expr: expr.to_owned() });
        }
    }
    for inner in panel["panels"].as_array().into_iter().flatten() {
        collect_targets(inner, out);
    }
}

/// `now-6h` → 21600.
fn relative_seconds(from: &str) -> Option<u64> {
    let span = from.strip_prefix("now-")?;
    let (n, unit) = span.split_at(span.find(|c: char| !c.is_ascii_digit())?);
    let n: u64 = n.parse().ok()?;
    Some(match unit {
        "s" => n,
        "m" => n * 60,
        "h" => n * 3600,
        "d" => n * 86400,
        "w" => n * 7 * 86400,
        _ => return None,
    })
}

/// The values of a variable's query: `label_values(…)` through the labels
/// API, `query_result(…)` as Grafana's text lines (`name{a="1", b="2"} value
/// time`), `metrics(re)` the metric names matching.
fn query_options(prometheus: &Prometheus, query: &str) -> Result<Vec<String>, QueryError> {
    let query = query.trim();
    if let Some(args) = call_args(query, "label_values") {
        let (matcher, label) = match args.rsplit_once(',') {
            Some((m, l)) => (Some(m.trim()), l.trim()),
            None => (None, args.trim()),
        };
        return prometheus.label_values(label, matcher);
    }
    if let Some(expr) = call_args(query, "query_result") {
        return Ok(prometheus.query(expr)?.iter().map(result_line).collect());
    }
    if let Some(re) = call_args(query, "metrics") {
        let re = regex::Regex::new(re.trim()).map_err(|e| format!("metrics({re}): {e}"))?;
        return Ok(prometheus.label_values("__name__", None)?.into_iter().filter(|n| re.is_match(n)).collect());
    }
    Err(format!("a query Grafana's Prometheus data source does not know: {query}").into())
}

/// `f(args)` → `args`.
fn call_args<'a>(query: &'a str, f: &str) -> Option<&'a str> {
    query.strip_prefix(f)?.trim_start().strip_prefix('(')?.strip_suffix(')')
}

/// A sample as Grafana's `query_result` shows it.
fn result_line(sample: &Value) -> String {
    let metric = sample["metric"].as_object().cloned().unwrap_or_default();
    let name = metric.get("__name__").and_then(Value::as_str).unwrap_or_default();
    let labels: Vec<String> = metric
        .iter()
        .filter(|(k, _)| k.as_str() != "__name__")
        .map(|(k, v)| format!("{k}=\"{}\"", v.as_str().unwrap_or_default()))
        .collect();
    let (time, value) = (&sample["value"][0], &sample["value"][1]);
    let millis = (time.as_f64().unwrap_or_default() * 1000.0) as i64;
    format!("{name}{{{}}} {} {millis}", labels.join(", "), value.as_str().unwrap_or_default())
}

/// Grafana's variable regex (`/re/flags`): the first group of each value
/// that matches (the whole match without a group); others are dropped.
fn apply_regex(regex: &str, options: &[String]) -> Result<Vec<String>, QueryError> {
    let body = regex.strip_prefix('/').and_then(|r| r.rsplit_once('/')).map(|(b, _)| b).unwrap_or(regex);
    let re = regex::Regex::new(body).map_err(|e| format!("regex {regex}: {e}"))?;
    Ok(options
        .iter()
        .filter_map(|o| {
            let c = re.captures(o)?;
            Some(c.get(1).or_else(|| c.get(0))?.as_str().to_owned())
        })
        .collect())
}

/// Grafana's escape of a value put into a Prometheus regex.
fn regex_escaped(value: &str) -> String {
    let mut out = String::new();
    for c in value.chars() {
        if "\\^$*+?.()|[]{}'".contains(c) {
            out.push('\\');
            if c == '\\' || c == '\'' {
                out.push('\\');
            }
        }
        out.push(c);
    }
    out
}

/// The resolved variables, and what they are put into.
#[derive(Debug, Clone, Default)]
pub struct Values {
    /// Each variable's value, formatted as put into a query.
    pub set: BTreeMap<String, String>,
    range_seconds: u64,
}

impl Values {
    /// `text` with `$name`, `${name}`, `${name:format}` and `[[name]]` of
    /// every variable and of Grafana's built-ins (`$__rate_interval`,
    /// `$__interval`, `$__range`, `${__range_s}`, …) put in; unknown names
    /// stay.
    pub fn interpolate(&self, text: &str) -> String {
        let range = self.range_seconds.max(1);
        let mut all: BTreeMap<String, String> = self.set.clone();
        all.insert("__rate_interval".into(), RATE_INTERVAL.into());
        all.insert("__interval".into(), INTERVAL.into());
        all.insert("__interval_ms".into(), "15000".into());
        all.insert("__range".into(), format!("{range}s"));
        all.insert("__range_s".into(), range.to_string());
        all.insert("__range_ms".into(), (range * 1000).to_string());
        let re = regex::Regex::new(r"\$\{(\w+)(?::[^}]*)?\}|\[\[(\w+)(?::[^\]]*)?\]\]|\$(\w+)").expect("a regex");
        re.replace_all(text, |c: &regex::Captures<'_>| {
            let name = c.get(1).or_else(|| c.get(2)).or_else(|| c.get(3)).map_or("", |m| m.as_str());
            all.get(name).cloned().unwrap_or_else(|| c[0].to_owned())
        })
        .into_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn variables_and_targets_are_read_from_panels_and_rows() {
        let text = r#"{"title": "t", "time": {"from": "now-1h"},
          "templating": {"list": [
            {"name": "ds", "type": "datasource", "query": "prometheus"},
            {"name": "g", "type": "query", "query": {"query": "label_values(m, g)"}, "includeAll": true, "regex": ""}]},
          "panels": [{"title": "row", "panels": [{"title": "a", "targets": [{"expr": "m{g=~\"$g\"}"}]}]}],
          "rows": [{"panels": [{"title": "b", "targets": [{"expr": "x"}, {"expr": ""}]}]}]}"#;
        let d = Dashboard::from_json(text).expect("a dashboard");
        assert_eq!(d.range_seconds, 3600);
        assert_eq!(d.variables.len(), 2);
        assert!(d.variables[1].multi);
        assert_eq!(d.variables[1].query, "label_values(m, g)");
        let panels: Vec<&str> = d.targets.iter().map(|t| t.panel.as_str()).collect();
        assert_eq!(panels, ["a", "b"]);
    }

    #[test]
    fn values_and_built_ins_are_put_in_every_spelling() {
        let mut v = Values { range_seconds: 300, ..Values::default() };
        v.set.insert("g".into(), "(a|b\\.c)".into());
        assert_eq!(
            v.interpolate(r#"rate(m{g=~"$g",h="${g:regex}",i="[[g]]"}[$__rate_interval]) $unknown ${__range_s}s"#),
            r#"rate(m{g=~"(a|b\.c)",h="(a|b\.c)",i="(a|b\.c)"}[1m]) $unknown 300s"#
        );
    }

    #[test]
    fn a_variable_regex_takes_its_group_from_query_result_lines() {
        let lines = vec![
            r#"kafka_broker_info{address="h:1", namespace="kafka", strimzi_io_cluster="c"} 1 1000"#.to_owned(),
            "other 1 1000".to_owned(),
        ];
        assert_eq!(apply_regex(r#"/.*namespace="([^"]*).*/"#, &lines).expect("regex"), ["kafka"]);
        let sample = serde_json::json!({"metric": {"__name__": "m", "a": "1"}, "value": [1.5, "2"]});
        assert_eq!(result_line(&sample), r#"m{a="1"} 2 1500"#);
        assert_eq!(regex_escaped("a.b-c"), r"a\.b-c");
        assert_eq!(call_args("label_values(m{a=\"x,y\"}, l)", "label_values"), Some("m{a=\"x,y\"}, l"));
    }
}
