//! What a notifier's templates see, in Burrow's names, so that Burrow's
//! template files work unchanged: `.Cluster`, `.Group`, `.Id`, `.Start`,
//! `.Extras` and `.Result` (Burrow's `ConsumerGroupStatus`: `.Status` as
//! its number, `.Complete`, `.Partitions` with each partition's `.Topic`,
//! `.Partition`, `.Status`, `.Start`, `.End`, `.CurrentLag`…, `.Maxlag`,
//! `.TotalLag`), and Burrow's template functions (`jsonencoder`,
//! `topicsbystatus`, `partitioncounts`, `add`, `minus`, `multiply`,
//! `divide`, `maxlag`, `formattimestamp`). Pure.

use std::collections::BTreeMap;
use std::sync::Arc;

use gotmpl::{Template, TemplateError, Value};
use serde::Serialize;

use super::go_time::{format_layout, go_time_string};
use super::incidents::BurrowStatus;
use crate::burrow::{ConsumerOffset, GroupStatus, PartitionStatus};

/// A notice's data.
#[derive(Debug, Serialize)]
#[serde(rename_all = "PascalCase")]
pub(crate) struct NoticeData {
    pub(crate) cluster: String,
    pub(crate) group: String,
    /// The incident's id (Burrow's templates say `.Id`).
    pub(crate) id: String,
    /// `.ID`, the same.
    #[serde(rename = "ID")]
    pub(crate) id_upper: String,
    /// When the incident opened, as Go prints a time.
    pub(crate) start: String,
    /// The same, in ms since the epoch (what `.Start.Format` reads).
    pub(crate) start_ms: i64,
    pub(crate) extras: BTreeMap<String, String>,
    pub(crate) result: GroupResult,
    /// An email notifier's sender and recipients (empty for HTTP).
    pub(crate) from: String,
    pub(crate) to: String,
}

/// Burrow's `ConsumerGroupStatus`.
#[derive(Debug, Serialize)]
#[serde(rename_all = "PascalCase")]
pub(crate) struct GroupResult {
    pub(crate) cluster: String,
    pub(crate) group: String,
    pub(crate) status: u8,
    pub(crate) complete: f32,
    pub(crate) partitions: Vec<PartitionResult>,
    pub(crate) total_partitions: usize,
    pub(crate) maxlag: Option<PartitionResult>,
    pub(crate) total_lag: i64,
}

/// Burrow's `PartitionStatus`.
#[derive(Debug, Serialize)]
#[serde(rename_all = "PascalCase")]
pub(crate) struct PartitionResult {
    pub(crate) topic: String,
    pub(crate) partition: i32,
    pub(crate) owner: String,
    #[serde(rename = "ClientID")]
    pub(crate) client_id: String,
    pub(crate) status: u8,
    pub(crate) start: Option<OffsetResult>,
    pub(crate) end: Option<OffsetResult>,
    pub(crate) current_lag: i64,
    pub(crate) complete: f32,
}

/// Burrow's `ConsumerOffset`.
#[derive(Debug, Serialize)]
#[serde(rename_all = "PascalCase")]
pub(crate) struct OffsetResult {
    pub(crate) offset: i64,
    pub(crate) timestamp: i64,
    pub(crate) observed_at: i64,
    pub(crate) lag: i64,
}

fn offset(o: Option<ConsumerOffset>) -> Option<OffsetResult> {
    o.map(|o| OffsetResult { offset: o.offset, timestamp: o.timestamp, observed_at: o.timestamp, lag: o.lag })
}

fn partition(p: &PartitionStatus) -> PartitionResult {
    PartitionResult {
        topic: p.topic.clone(),
        partition: p.partition,
        owner: p.owner.clone(),
        client_id: String::new(),
        status: BurrowStatus::from_name(p.status) as u8,
        start: offset(p.start),
        end: offset(p.end),
        current_lag: p.current_lag,
        complete: p.complete,
    }
}

impl GroupResult {
    /// From the group's status as Burrow's API gives it (its partitions
    /// not OK, as Burrow's evaluator gives the notifier).
    pub(crate) fn of(s: &GroupStatus) -> Self {
        GroupResult {
            cluster: s.cluster.clone(),
            group: s.group.clone(),
            status: BurrowStatus::from_name(s.status) as u8,
            complete: s.complete,
            partitions: s.partitions.iter().map(partition).collect(),
            total_partitions: s.partition_count,
            maxlag: s.maxlag.as_ref().map(partition),
            total_lag: s.totallag,
        }
    }
}

impl NoticeData {
    /// The template's data value.
    pub(crate) fn value(&self) -> Result<Value, TemplateError> {
        gotmpl::to_value(self)
    }

    /// `started_ms` (ms since the epoch) as `.Start`.
    pub(crate) fn start_of(started_ms: i64) -> String {
        go_time_string(started_ms)
    }
}

/// A template parsed with Burrow's functions. The two Go methods Burrow's
/// templates call are read as functions first: `X.Status.String` as
/// `(statusname X.Status)` and `X.Start.Format "layout"` as
/// `formattimestamp X.StartMs "layout"`.
pub(crate) fn parse(name: &str, text: &str) -> Result<Template, TemplateError> {
    let mut t = Template::new(name);
    for (f, call) in FUNCTIONS {
        t = t.func(f, call);
    }
    t.parse(&go_methods(text))
}

fn go_methods(text: &str) -> String {
    static STRING: std::sync::LazyLock<regex::Regex> =
        std::sync::LazyLock::new(|| regex::Regex::new(r"(\$?[\w.]*\.Status)\.String\b").expect("a valid regex"));
    static FORMAT: std::sync::LazyLock<regex::Regex> =
        std::sync::LazyLock::new(|| regex::Regex::new(r"(\$?[\w.]*)\.Start\.Format\b").expect("a valid regex"));
    let text = STRING.replace_all(text, "(statusname $1)");
    FORMAT.replace_all(&text, "formattimestamp ${1}.StartMs").into_owned()
}

type Function = fn(&[Value]) -> Result<Value, TemplateError>;

const FUNCTIONS: [(&str, Function); 10] = [
    ("statusname", status_name_of),
    ("jsonencoder", json_encoder),
    ("topicsbystatus", topics_by_status),
    ("partitioncounts", partition_counts),
    ("add", |a| arithmetic("add", a, |x, y| x.checked_add(y))),
    ("minus", |a| arithmetic("minus", a, |x, y| x.checked_sub(y))),
    ("multiply", |a| arithmetic("multiply", a, |x, y| x.checked_mul(y))),
    ("divide", |a| arithmetic("divide", a, |x, y| x.checked_div(y))),
    ("maxlag", max_lag),
    ("formattimestamp", format_timestamp),
];

fn wrong(name: &str, what: &str) -> TemplateError {
    TemplateError::Exec(format!("{name}: {what}"))
}

fn arg<'a>(name: &str, args: &'a [Value], n: usize) -> Result<&'a [Value], TemplateError> {
    if args.len() == n {
        Ok(args)
    } else {
        Err(TemplateError::ArgCount { name: name.to_owned(), expected: n, got: args.len() })
    }
}

fn int(name: &str, v: &Value) -> Result<i64, TemplateError> {
    match v {
        Value::Int(i) => Ok(*i),
        Value::Uint(u) => i64::try_from(*u).map_err(|_| wrong(name, "a number too large")),
        Value::Float(f) if f.fract() == 0.0 && f.abs() < 9.0e15 => Ok(*f as i64),
        _ => Err(wrong(name, "expects whole numbers")),
    }
}

fn arithmetic(name: &str, args: &[Value], op: fn(i64, i64) -> Option<i64>) -> Result<Value, TemplateError> {
    let a = arg(name, args, 2)?;
    let (x, y) = (int(name, &a[0])?, int(name, &a[1])?);
    op(x, y).map(Value::Int).ok_or_else(|| wrong(name, "overflow, or a division by zero"))
}

/// Burrow's JSON names of its structures' fields.
fn json_name(key: &str) -> &str {
    match key {
        "Topic" => "topic",
        "Partition" => "partition",
        "Owner" => "owner",
        "ClientID" => "client_id",
        "Status" => "status",
        "Start" => "start",
        "End" => "end",
        "CurrentLag" => "current_lag",
        "Complete" => "complete",
        "Offset" => "offset",
        "Timestamp" => "timestamp",
        "ObservedAt" => "observedAt",
        "Lag" => "lag",
        "Cluster" => "cluster",
        "Group" => "group",
        "TotalPartitions" => "partition_count",
        "Maxlag" => "maxlag",
        "TotalLag" => "totallag",
        other => other,
    }
}

fn status_name(v: &Value) -> Option<&'static str> {
    let code = match v {
        Value::Int(i) => *i,
        Value::Uint(u) => i64::try_from(*u).ok()?,
        _ => return None,
    };
    let all = [
        BurrowStatus::NotFound,
        BurrowStatus::Ok,
        BurrowStatus::Warn,
        BurrowStatus::Err,
        BurrowStatus::Stop,
        BurrowStatus::Stall,
        BurrowStatus::Rewind,
    ];
    all.into_iter().find(|s| *s as i64 == code).map(BurrowStatus::name)
}

/// A template value as Burrow's `json.Marshal` writes it: its JSON names,
/// statuses by name.
fn to_json(v: &Value) -> serde_json::Value {
    match v {
        Value::Nil => serde_json::Value::Null,
        Value::Bool(b) => (*b).into(),
        Value::Int(i) => (*i).into(),
        Value::Uint(u) => (*u).into(),
        Value::Float(f) => serde_json::Number::from_f64(*f).map_or(serde_json::Value::Null, serde_json::Value::Number),
        Value::String(s) => serde_json::Value::String(s.to_string()),
        Value::List(l) => l.iter().map(to_json).collect(),
        Value::Map(m) => m
            .iter()
            .map(|(k, v)| {
                let value = match (&**k, status_name(v)) {
                    ("Status", Some(name)) => serde_json::Value::String(name.to_owned()),
                    _ => to_json(v),
                };
                (json_name(k).to_owned(), value)
            })
            .collect::<serde_json::Map<_, _>>()
            .into(),
        _ => serde_json::Value::Null,
    }
}

fn status_name_of(args: &[Value]) -> Result<Value, TemplateError> {
    let a = arg("statusname", args, 1)?;
    let name = status_name(&a[0]).ok_or_else(|| wrong("statusname", "expects a status"))?;
    Ok(Value::String(Arc::from(name)))
}

fn json_encoder(args: &[Value]) -> Result<Value, TemplateError> {
    let a = arg("jsonencoder", args, 1)?;
    Ok(Value::String(Arc::from(to_json(&a[0]).to_string())))
}

fn partitions<'a>(name: &str, v: &'a Value) -> Result<Vec<&'a BTreeMap<Arc<str>, Value>>, TemplateError> {
    match v {
        Value::List(l) => l
            .iter()
            .map(|p| match p {
                Value::Map(m) => Ok(&**m),
                _ => Err(wrong(name, "expects .Result.Partitions")),
            })
            .collect(),
        Value::Nil => Ok(Vec::new()),
        _ => Err(wrong(name, "expects .Result.Partitions")),
    }
}

fn topics_by_status(args: &[Value]) -> Result<Value, TemplateError> {
    let a = arg("topicsbystatus", args, 1)?;
    let mut by: BTreeMap<&str, std::collections::BTreeSet<Arc<str>>> = BTreeMap::new();
    for p in partitions("topicsbystatus", &a[0])? {
        let status = p.get("Status").and_then(status_name).unwrap_or("NOTFOUND");
        if let Some(Value::String(topic)) = p.get("Topic") {
            by.entry(status).or_default().insert(Arc::clone(topic));
        }
    }
    let map: BTreeMap<Arc<str>, Value> = by
        .into_iter()
        .map(|(s, topics)| (Arc::from(s), Value::List(topics.into_iter().map(Value::String).collect())))
        .collect();
    Ok(Value::Map(Arc::new(map)))
}

fn partition_counts(args: &[Value]) -> Result<Value, TemplateError> {
    let a = arg("partitioncounts", args, 1)?;
    let mut counts: BTreeMap<Arc<str>, Value> =
        ["warn", "stop", "stall", "rewind", "unknown"].into_iter().map(|k| (Arc::from(k), Value::Int(0))).collect();
    for p in partitions("partitioncounts", &a[0])? {
        let key = match p.get("Status").and_then(status_name) {
            Some("OK") => continue,
            Some("WARN") => "warn",
            Some("STOP") => "stop",
            Some("STALL") => "stall",
            Some("REWIND") => "rewind",
            _ => "unknown",
        };
        if let Some(Value::Int(n)) = counts.get_mut(key) {
            *n += 1;
        }
    }
    Ok(Value::Map(Arc::new(counts)))
}

fn max_lag(args: &[Value]) -> Result<Value, TemplateError> {
    let a = arg("maxlag", args, 1)?;
    Ok(match &a[0] {
        Value::Map(m) => m.get("CurrentLag").cloned().unwrap_or(Value::Int(0)),
        _ => Value::Int(0),
    })
}

fn format_timestamp(args: &[Value]) -> Result<Value, TemplateError> {
    let a = arg("formattimestamp", args, 2)?;
    let ms = int("formattimestamp", &a[0])?;
    let Value::String(layout) = &a[1] else { return Err(wrong("formattimestamp", "expects a layout string")) };
    Ok(Value::String(Arc::from(format_layout(ms, layout))))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status() -> GroupStatus {
        let p = |topic: &str, partition, status, lag| PartitionStatus {
            topic: topic.into(),
            partition,
            owner: "host-1".into(),
            status,
            start: Some(ConsumerOffset { offset: 10, timestamp: 1_700_000_000_000, lag: 5 }),
            end: Some(ConsumerOffset { offset: 20, timestamp: 1_700_000_060_000, lag: lag - 1 }),
            current_lag: lag,
            complete: 1.0,
        };
        let partitions = vec![p("orders", 0, "STOP", 40), p("orders", 1, "WARN", 7), p("audit", 0, "STOP", 3)];
        GroupStatus {
            cluster: "eu".into(),
            group: "billing".into(),
            status: "ERR",
            complete: 1.0,
            maxlag: Some(partitions[0].clone()),
            partitions,
            partition_count: 4,
            totallag: 50,
        }
    }

    fn render(text: &str) -> String {
        let data = NoticeData {
            cluster: "eu".into(),
            group: "billing".into(),
            id: "i-1".into(),
            id_upper: "i-1".into(),
            start: NoticeData::start_of(1_700_000_000_000),
            start_ms: 1_700_000_000_000,
            extras: [("api_key".to_owned(), "k".to_owned())].into(),
            result: GroupResult::of(&status()),
            from: String::new(),
            to: String::new(),
        };
        parse("t", text).expect("parses").execute_to_string(&data.value().expect("a value")).expect("renders")
    }

    /// Burrow's own template files, as its repository has them.
    fn published(name: &str) -> String {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/published").join(name);
        std::fs::read_to_string(path).expect("a published template")
    }

    #[test]
    fn burrows_default_http_templates_render_their_json() {
        let out: serde_json::Value =
            serde_json::from_str(&render(&published("burrow-default-http-post.tmpl"))).expect("JSON");
        let event = &out["events"][0];
        assert_eq!((event["id"].as_str(), event["event"]["severity"].as_str()), (Some("i-1"), Some("ERR")));
        assert_eq!(event["event"]["start"], "Nov 14, 2023 22:13:20 UTC", ".Start.Format");
        let first = &event["event"]["partitions"][0];
        assert_eq!(first["topic"], "orders");
        assert_eq!(first["status"], "STOP", "statuses by name, as Burrow's JSON");
        assert_eq!(first["current_lag"], 40);
        assert_eq!(first["start"]["offset"], 10);
        assert_eq!(out["api_key"], "k");
        let close: serde_json::Value =
            serde_json::from_str(&render(&published("burrow-default-http-delete.tmpl"))).expect("JSON");
        assert_eq!(close["ids"][0], "i-1");
    }

    #[test]
    fn burrows_default_email_template_renders() {
        let mail = render(&published("burrow-default-email.tmpl"));
        assert!(mail.starts_with("Subject: [Burrow] Kafka Consumer Lag Alert\n"), "{mail}");
        assert!(mail.contains("Status:   ERR\n"), ".Status.String: {mail}");
        assert!(mail.contains("          STOP orders:0 (1700000000000, 10, 5) -> (1700000060000, 20, 39)\n"), "{mail}");
        assert!(mail.contains("Errors:   3 partitions have problems"), "{mail}");
    }

    #[test]
    fn burrows_helper_functions() {
        assert_eq!(render("{{with topicsbystatus .Result.Partitions}}{{index . \"STOP\"}}{{end}}"), "[audit orders]");
        assert_eq!(render("{{$c := partitioncounts .Result.Partitions}}{{$c.stop}} {{$c.warn}} {{$c.stall}}"), "2 1 0");
        assert_eq!(
            render("{{maxlag .Result.Maxlag}} {{add 2 3}} {{minus 2 3}} {{multiply 4 5}} {{divide 9 2}}"),
            "40 5 -1 20 4"
        );
        assert_eq!(render("{{formattimestamp 1700000000000 \"2006-01-02T15:04:05Z07:00\"}}"), "2023-11-14T22:13:20Z");
        assert_eq!(render("{{.Start}}"), "2023-11-14 22:13:20 +0000 UTC");
        assert_eq!(render("{{.Result.TotalLag}} {{.Result.TotalPartitions}} {{len .Result.Partitions}}"), "50 4 3");
        let err = parse("t", "{{divide 1 0}}").expect("parses").execute_to_string(&Value::Nil);
        assert!(err.is_err(), "a division by zero is an error, not a panic");
    }
}
