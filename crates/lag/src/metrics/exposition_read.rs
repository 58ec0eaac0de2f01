//! Prometheus text (0.0.4), as kshard renders it, read back into families:
//! the `# HELP`, the `# TYPE` and every sample with its labels and value.
//! What the OTLP export sends is exactly what `/metrics` shows, so it is
//! built from the same text. Pure; a malformed line is an error naming its
//! number, never a panic. Names and labels borrow from the text (a value
//! is copied only to undo its escapes): a million series read back without
//! a million allocations.

use std::borrow::Cow;
use std::fmt;

/// A family's type, from its `# TYPE` line (`untyped` without one).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Counter,
    Gauge,
    Histogram,
    Summary,
    Untyped,
}

/// One family: the name in its `# TYPE` line, and its samples in order.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Family<'a> {
    pub(crate) name: &'a str,
    pub(crate) help: Cow<'a, str>,
    pub(crate) kind: Kind,
    pub(crate) samples: Vec<Sample<'a>>,
}

/// A label: its name and its value, unescaped.
pub(crate) type Label<'a> = (&'a str, Cow<'a, str>);

/// One sample line: `name{labels} value`.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Sample<'a> {
    /// The sample's own name (`x_bucket`, `x_sum`, … in a histogram).
    pub(crate) name: &'a str,
    /// The labels, in the order written.
    pub(crate) labels: Vec<Label<'a>>,
    pub(crate) value: f64,
}

/// A line that is not Prometheus text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadError {
    /// The line, 1-based.
    pub line: usize,
    /// What is wrong with it.
    pub why: String,
}

impl fmt::Display for ReadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "line {} of the exposition: {}", self.line, self.why)
    }
}

impl std::error::Error for ReadError {}

/// The families of `text`, in the order they appear. A sample belongs to
/// the family whose `# TYPE` or `# HELP` came last, when its name is that
/// family's or one of its suffixed names; otherwise it starts an untyped
/// family of its own.
pub(crate) fn read(text: &str) -> Result<Vec<Family<'_>>, ReadError> {
    let mut families: Vec<Family<'_>> = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let fail = |why: String| ReadError { line: i + 1, why };
        let line = line.trim_end();
        if line.is_empty() {
            continue;
        }
        if let Some(comment) = line.strip_prefix('#') {
            let mut words = comment.trim_start().splitn(3, ' ');
            let (keyword, name, rest) = (words.next(), words.next(), words.next().unwrap_or(""));
            let (Some(keyword @ ("HELP" | "TYPE")), Some(name)) = (keyword, name) else { continue };
            let family = family_named(&mut families, name);
            if keyword == "HELP" {
                family.help = unescape_help(rest);
            } else {
                family.kind = match rest.trim() {
                    "counter" => Kind::Counter,
                    "gauge" => Kind::Gauge,
                    "histogram" => Kind::Histogram,
                    "summary" => Kind::Summary,
                    "untyped" | "unknown" => Kind::Untyped,
                    other => return Err(fail(format!("unknown type {other:?} of {name}"))),
                };
            }
            continue;
        }
        let sample = sample(line).map_err(fail)?;
        let belongs = families.last().is_some_and(|f| belongs_to(sample.name, f));
        if !belongs {
            families.push(Family {
                name: sample.name,
                help: Cow::Borrowed(""),
                kind: Kind::Untyped,
                samples: Vec::new(),
            });
        }
        if let Some(family) = families.last_mut() {
            family.samples.push(sample);
        }
    }
    Ok(families)
}

/// The last family when it is `name`'s (a `# HELP` then a `# TYPE`), else a new one.
fn family_named<'f, 'a>(families: &'f mut Vec<Family<'a>>, name: &'a str) -> &'f mut Family<'a> {
    let same = families.last().is_some_and(|f| f.name == name && f.samples.is_empty());
    if !same {
        families.push(Family { name, help: Cow::Borrowed(""), kind: Kind::Untyped, samples: Vec::new() });
    }
    let last = families.len() - 1;
    &mut families[last]
}

fn belongs_to(sample: &str, family: &Family<'_>) -> bool {
    let Some(suffix) = sample.strip_prefix(family.name) else { return false };
    match family.kind {
        Kind::Histogram => matches!(suffix, "_bucket" | "_sum" | "_count"),
        Kind::Summary => matches!(suffix, "" | "_sum" | "_count"),
        Kind::Counter => matches!(suffix, "" | "_total"),
        Kind::Gauge | Kind::Untyped => suffix.is_empty(),
    }
}

/// `name{a="x",b="y"} value [timestamp]`.
fn sample(line: &str) -> Result<Sample<'_>, String> {
    let end = line.find(['{', ' ', '\t']).ok_or_else(|| format!("no value in {line:?}"))?;
    let name = &line[..end];
    if !valid_name(name) {
        return Err(format!("{name:?} is not a metric name"));
    }
    let mut rest = &line[end..];
    let mut labels = Vec::new();
    if let Some(body) = rest.strip_prefix('{') {
        rest = read_labels(body, &mut labels)?;
    }
    let mut fields = rest.split_ascii_whitespace();
    let value = fields.next().ok_or_else(|| format!("no value for {name}"))?;
    let value = parse_value(value).ok_or_else(|| format!("{value:?} is not a sample value of {name}"))?;
    if let Some(timestamp) = fields.next()
        && timestamp.parse::<i64>().is_err()
    {
        return Err(format!("{timestamp:?} is not a timestamp of {name}"));
    }
    Ok(Sample { name, labels, value })
}

/// Reads `a="x",b="y"}` into `labels`; returns what follows the `}`.
fn read_labels<'a>(mut body: &'a str, labels: &mut Vec<Label<'a>>) -> Result<&'a str, String> {
    loop {
        body = body.trim_start_matches([' ', ',']);
        if let Some(rest) = body.strip_prefix('}') {
            return Ok(rest);
        }
        let eq = body.find('=').ok_or("a label without a value")?;
        let key = body[..eq].trim();
        if !valid_name(key) {
            return Err(format!("{key:?} is not a label name"));
        }
        let quoted = body[eq + 1..]
            .trim_start()
            .strip_prefix('"')
            .ok_or_else(|| format!("label {key}'s value is not quoted"))?;
        let (value, after) = label_value(quoted).ok_or_else(|| format!("label {key}'s value does not end"))?;
        labels.push((key, value));
        body = &quoted[after..];
    }
}

/// The value at the start of `quoted` (after its opening quote), and where
/// its closing quote ends; borrowed unless it has escapes to undo.
fn label_value(quoted: &str) -> Option<(Cow<'_, str>, usize)> {
    let end = quoted.find(['"', '\\'])?;
    if quoted.as_bytes()[end] == b'"' {
        return Some((Cow::Borrowed(&quoted[..end]), end + 1));
    }
    let mut value = String::from(&quoted[..end]);
    let mut chars = quoted[end..].char_indices().map(|(i, c)| (i + end, c));
    loop {
        match chars.next()? {
            (i, '"') => return Some((Cow::Owned(value), i + 1)),
            (_, '\\') => match chars.next()? {
                (_, 'n') => value.push('\n'),
                (_, c @ ('\\' | '"')) => value.push(c),
                (_, c) => {
                    value.push('\\');
                    value.push(c);
                }
            },
            (_, c) => value.push(c),
        }
    }
}

fn valid_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_' || c == ':')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
}

fn parse_value(text: &str) -> Option<f64> {
    match text {
        "+Inf" | "Inf" => Some(f64::INFINITY),
        "-Inf" => Some(f64::NEG_INFINITY),
        "NaN" => Some(f64::NAN),
        _ => text.parse().ok(),
    }
}

fn unescape_help(text: &str) -> Cow<'_, str> {
    if !text.contains('\\') {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        match (c, chars.clone().next()) {
            ('\\', Some('n')) => {
                out.push('\n');
                chars.next();
            }
            ('\\', Some('\\')) => {
                out.push('\\');
                chars.next();
            }
            _ => out.push(c),
        }
    }
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = r#"# HELP kminion_kafka_consumer_group_topic_lag Lag of a group, per topic
# TYPE kminion_kafka_consumer_group_topic_lag gauge
kminion_kafka_consumer_group_topic_lag{group_id="g",topic_name="t"} 42
kminion_kafka_consumer_group_topic_lag{group_id="a \"quoted\\ \nname",topic_name="t"} NaN
# HELP kshard_records_read_total Records read.\nSecond line
# TYPE kshard_records_read_total counter
kshard_records_read_total{partition="0"} 7 1700000000000
# HELP x_seconds Latency
# TYPE x_seconds histogram
x_seconds_bucket{le="0.005"} 1
x_seconds_bucket{le="+Inf"} 3
x_seconds_sum 0.5
x_seconds_count 3
stray_series 1
"#;

    #[test]
    fn families_samples_and_labels_are_read() {
        let families = read(TEXT).expect("valid");
        let names: Vec<_> = families.iter().map(|f| (f.name, f.kind, f.samples.len())).collect();
        assert_eq!(
            names,
            [
                ("kminion_kafka_consumer_group_topic_lag", Kind::Gauge, 2),
                ("kshard_records_read_total", Kind::Counter, 1),
                ("x_seconds", Kind::Histogram, 4),
                ("stray_series", Kind::Untyped, 1),
            ]
        );
        let lag = &families[0];
        assert_eq!(lag.help, "Lag of a group, per topic");
        assert_eq!(lag.samples[0].labels, [("group_id", "g".into()), ("topic_name", "t".into())]);
        assert!(matches!(lag.samples[0].labels[0].1, Cow::Borrowed(_)), "no copy without escapes");
        assert_eq!(lag.samples[0].value, 42.0);
        assert_eq!(lag.samples[1].labels[0].1, "a \"quoted\\ \nname", "escapes undone");
        assert!(lag.samples[1].value.is_nan());
        assert_eq!(families[1].help, "Records read.\nSecond line");
        assert_eq!(families[2].samples[1].value, 3.0);
        assert_eq!(families[2].samples[1].labels, [("le", "+Inf".into())]);
    }

    #[test]
    fn malformed_lines_name_their_number() {
        let err = |text: &str| read(text).expect_err(text);
        assert_eq!(err("ok 1\nbad{a=1} 2\n").line, 2);
        assert!(err("x{a=\"open} 1").why.contains("does not end"));
        assert!(err("x 1 soon").why.contains("timestamp"));
        assert!(err("x twelve").why.contains("sample value"));
        assert!(err("9x 1").why.contains("metric name"));
        assert!(err("# TYPE x gaugeish\n").why.contains("unknown type"));
    }

    #[test]
    fn what_kshard_renders_reads_back() {
        // The library's own encoder, as `/metrics` uses it.
        use prometheus_client::metrics::{counter::Counter, family::Family as Labelled, histogram::Histogram};
        let mut registry = prometheus_client::registry::Registry::with_prefix("kshard");
        let counter = Labelled::<Vec<(String, String)>, Counter>::default();
        counter.get_or_create(&vec![("topic".to_owned(), "t,\"x\"".to_owned())]).inc_by(5);
        registry.register("reads", "Reads", counter);
        let histogram = Histogram::new([0.1, 1.0]);
        histogram.observe(0.5);
        registry.register("took_seconds", "Took", histogram);
        let mut text = String::new();
        prometheus_client::encoding::prometheus_text::encode(&mut text, &registry).expect("encodes");
        let families = read(&text).expect("reads back");
        assert_eq!(families[0].kind, Kind::Counter);
        assert_eq!(families[0].samples[0].labels[0].1, "t,\"x\"");
        assert_eq!(families[0].samples[0].value, 5.0);
        assert_eq!(families[1].kind, Kind::Histogram);
        assert_eq!(families[1].samples.len(), 5, "3 buckets, sum, count: {text}");
    }
}
