//! Label selectors, in Kubernetes' and Gazette's syntax: terms separated by
//! commas, all of which must hold — `key=value` (or `==`), `key!=value`,
//! `key in (a, b)`, `key notin (a, b)`, `key` (has the label) and `!key`
//! (has not). A shard's id is a label too (`id=sum-000`). Pure.

use std::collections::BTreeMap;

/// One term.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Term {
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
    Exists(String),
    Absent(String),
}

/// A parsed selector (empty: everything matches).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Selector(Vec<Term>);

impl std::str::FromStr for Selector {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let mut terms = Vec::new();
        for term in split_terms(s)? {
            let term = term.trim();
            if term.is_empty() {
                continue;
            }
            terms.push(parse_term(term).map_err(|why| format!("selector term {term:?}: {why}"))?);
        }
        Ok(Selector(terms))
    }
}

impl Selector {
    /// Whether `labels` (and `id`, as the label `id`) satisfy every term.
    pub fn matches(&self, id: &str, labels: &BTreeMap<String, String>) -> bool {
        let get = |key: &str| if key == "id" { Some(id) } else { labels.get(key).map(String::as_str) };
        self.0.iter().all(|term| match term {
            Term::In(key, values) => get(key).is_some_and(|v| values.iter().any(|w| w == v)),
            Term::NotIn(key, values) => get(key).is_none_or(|v| values.iter().all(|w| w != v)),
            Term::Exists(key) => get(key).is_some(),
            Term::Absent(key) => get(key).is_none(),
        })
    }
}

/// `s` cut at the commas outside parentheses.
fn split_terms(s: &str) -> Result<Vec<&str>, String> {
    let (mut terms, mut depth, mut start) = (Vec::new(), 0usize, 0);
    for (i, c) in s.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth = depth.checked_sub(1).ok_or_else(|| format!("a ')' without its '(' in {s:?}"))?,
            ',' if depth == 0 => {
                terms.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    if depth != 0 {
        return Err(format!("a '(' without its ')' in {s:?}"));
    }
    terms.push(&s[start..]);
    Ok(terms)
}

fn parse_term(term: &str) -> Result<Term, String> {
    let key = |k: &str| {
        let k = k.trim();
        if k.is_empty() || k.contains(|c: char| c.is_whitespace() || "=!(),".contains(c)) {
            Err(format!("{k:?} is not a label name"))
        } else {
            Ok(k.to_owned())
        }
    };
    if let Some(rest) = term.strip_prefix('!') {
        return Ok(Term::Absent(key(rest)?));
    }
    if let Some((k, v)) = term.split_once("!=") {
        return Ok(Term::NotIn(key(k)?, vec![v.trim().to_owned()]));
    }
    if let Some((k, v)) = term.split_once('=') {
        let v = v.strip_prefix('=').unwrap_or(v);
        return Ok(Term::In(key(k)?, vec![v.trim().to_owned()]));
    }
    for (word, notin) in [(" notin ", true), (" in ", false)] {
        if let Some((k, set)) = term.split_once(word) {
            let set = set.trim();
            let inner = set
                .strip_prefix('(')
                .and_then(|s| s.strip_suffix(')'))
                .ok_or_else(|| format!("{set:?} is not a set: (a, b)"))?;
            let values = inner.split(',').map(|v| v.trim().to_owned()).filter(|v| !v.is_empty()).collect();
            return Ok(if notin { Term::NotIn(key(k)?, values) } else { Term::In(key(k)?, values) });
        }
    }
    Ok(Term::Exists(key(term)?))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect()
    }

    fn selects(selector: &str, id: &str, pairs: &[(&str, &str)]) -> bool {
        selector.parse::<Selector>().expect("parses").matches(id, &labels(pairs))
    }

    #[test]
    fn every_term_must_hold() {
        let l = [("app", "sum"), ("env", "prod")];
        assert!(selects("", "s", &l));
        assert!(selects("app=sum", "s", &l));
        assert!(selects("app==sum, env != dev", "s", &l));
        assert!(!selects("app=sum,env=dev", "s", &l));
        assert!(selects("env in (dev, prod)", "s", &l));
        assert!(!selects("env notin (dev,prod)", "s", &l));
        assert!(selects("app, !zone", "s", &l));
        assert!(!selects("zone", "s", &l));
        assert!(selects("zone notin (a)", "s", &l), "a missing label is not in any set");
        assert!(selects("id=sum-000", "sum-000", &[]));
        assert!(selects("id in (sum-000, sum-001),app=sum", "sum-001", &l));
    }

    #[test]
    fn a_malformed_selector_is_refused_naming_its_term() {
        for bad in ["app in sum", "(app", "app)", "=x", "a b=c", "env in (a"] {
            let e = bad.parse::<Selector>().expect_err(bad);
            assert!(e.contains("selector") || e.contains('('), "{bad}: {e}");
        }
    }
}
