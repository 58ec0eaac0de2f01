//! Prometheus text (0.0.4) as kshard renders it, edited as text: one label
//! added to every sample ([`with_label`]: the `cluster` of a process watching
//! several) and the expositions of several clusters merged into one
//! ([`merge`]), each family's `# HELP` and `# TYPE` once with every cluster's
//! samples under them, as the format requires. Pure.

use std::collections::HashMap;

/// `text` with `name="value"` first among every sample's labels. `value` is
/// escaped as the format asks (`\\`, `\"`, `\n`).
pub(crate) fn with_label(text: &str, name: &str, value: &str) -> String {
    let label = format!("{name}=\"{}\"", escape(value));
    let mut out = String::with_capacity(text.len() + text.len() / 4);
    for line in text.split_inclusive('\n') {
        if line.starts_with('#') || line.trim().is_empty() {
            out.push_str(line);
            continue;
        }
        match line.find(['{', ' ']) {
            Some(i) if line.as_bytes()[i] == b'{' => {
                out.push_str(&line[..=i]);
                out.push_str(&label);
                if !line[i + 1..].starts_with('}') {
                    out.push(',');
                }
                out.push_str(&line[i + 1..]);
            }
            Some(i) => {
                out.push_str(&line[..i]);
                out.push('{');
                out.push_str(&label);
                out.push('}');
                out.push_str(&line[i..]);
            }
            None => out.push_str(line),
        }
    }
    out
}

fn escape(value: &str) -> String {
    value.replace('\\', r"\\").replace('"', r#"\""#).replace('\n', r"\n")
}

/// One exposition of `texts`: each family (from its `# HELP` or `# TYPE`
/// line) once, in the order families first appear, its samples from every
/// text in turn. A `# EOF` line is dropped (kshard serves 0.0.4 text).
pub(crate) fn merge(texts: &[String]) -> String {
    struct Family<'a> {
        header: Vec<&'a str>,
        samples: Vec<&'a str>,
    }
    let mut order: Vec<&str> = Vec::new();
    let mut families: HashMap<&str, Family<'_>> = HashMap::new();
    for text in texts {
        let mut current = "";
        let mut header_of_this_text = false;
        for line in text.split_inclusive('\n') {
            if line.trim_end() == "# EOF" || line.trim().is_empty() {
                continue;
            }
            if let Some(family) = family_of_comment(line) {
                if family != current {
                    current = family;
                    header_of_this_text = !families.contains_key(family);
                }
                let entry = families.entry(family).or_insert_with(|| {
                    order.push(family);
                    Family { header: Vec::new(), samples: Vec::new() }
                });
                if header_of_this_text {
                    entry.header.push(line);
                }
                continue;
            }
            if line.starts_with('#') {
                continue;
            }
            families
                .entry(current)
                .or_insert_with(|| {
                    order.push(current);
                    Family { header: Vec::new(), samples: Vec::new() }
                })
                .samples
                .push(line);
        }
    }
    let mut out = String::with_capacity(texts.iter().map(String::len).sum());
    for name in order {
        let family = &families[name];
        for line in family.header.iter().chain(&family.samples) {
            out.push_str(line);
            if !line.ends_with('\n') {
                out.push('\n');
            }
        }
    }
    out
}

/// The family a `# HELP`, `# TYPE` or `# UNIT` line describes.
fn family_of_comment(line: &str) -> Option<&str> {
    let rest = line
        .strip_prefix("# HELP ")
        .or_else(|| line.strip_prefix("# TYPE "))
        .or_else(|| line.strip_prefix("# UNIT "))?;
    rest.split_whitespace().next()
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: &str = "# HELP k_up Whether up.\n# TYPE k_up gauge\nk_up 1\n\
        # HELP k_lag Lag.\n# TYPE k_lag gauge\nk_lag{group=\"g\",partition=\"0\"} 5\nk_lag{} 1\n# EOF\n";

    #[test]
    fn a_label_goes_first_on_every_sample_and_nowhere_else() {
        let text = with_label(A, "cluster", "prod \"eu\"");
        assert!(text.contains("k_up{cluster=\"prod \\\"eu\\\"\"} 1\n"), "{text}");
        assert!(text.contains("k_lag{cluster=\"prod \\\"eu\\\"\",group=\"g\",partition=\"0\"} 5\n"), "{text}");
        assert!(text.contains("k_lag{cluster=\"prod \\\"eu\\\"\"} 1\n"), "{text}");
        assert!(text.contains("# HELP k_up Whether up.\n# TYPE k_up gauge\n"), "comments untouched: {text}");
    }

    #[test]
    fn merged_families_keep_one_header_and_every_sample() {
        let a = with_label(A, "cluster", "a");
        let b = with_label(
            "# HELP k_lag Lag.\n# TYPE k_lag gauge\nk_lag{group=\"h\"} 7\n# HELP k_only_b B.\n# TYPE k_only_b counter\nk_only_b_total 2\n",
            "cluster",
            "b",
        );
        let merged = merge(&[a, b]);
        assert_eq!(merged.matches("# TYPE k_lag gauge").count(), 1, "{merged}");
        assert!(!merged.contains("# EOF"), "{merged}");
        let lag = merged.find("# TYPE k_lag").expect("k_lag");
        let a_sample = merged.find("k_lag{cluster=\"a\",group=\"g\"").expect("a's sample");
        let b_sample = merged.find("k_lag{cluster=\"b\",group=\"h\"} 7").expect("b's sample");
        let only_b = merged.find("# TYPE k_only_b counter").expect("b's own family");
        assert!(lag < a_sample && a_sample < b_sample && b_sample < only_b, "{merged}");
        assert!(merged.contains("k_only_b_total{cluster=\"b\"} 2\n"), "{merged}");
    }

    #[test]
    fn merging_one_text_changes_nothing_but_eof() {
        assert_eq!(merge(&[A.to_owned()]), A.trim_end_matches("# EOF\n"));
    }
}
