//! Allow and ignore lists of regular expressions for group and topic names.

use regex::Regex;

/// A name passes when it matches some allow pattern (or the allow list is
/// empty) and no ignore pattern. Patterns must match the whole name.
#[derive(Debug, Clone, Default)]
pub struct NameFilter {
    allow: Vec<Regex>,
    ignore: Vec<Regex>,
}

impl NameFilter {
    /// Compiles the patterns; the error names the pattern that did not compile.
    pub fn new(allow: &[String], ignore: &[String]) -> Result<Self, regex::Error> {
        let compile = |patterns: &[String]| -> Result<Vec<Regex>, regex::Error> {
            patterns.iter().map(|p| Regex::new(&format!("^(?:{p})$"))).collect()
        };
        Ok(NameFilter { allow: compile(allow)?, ignore: compile(ignore)? })
    }

    /// True when `name` passes the filter.
    pub fn allows(&self, name: &str) -> bool {
        (self.allow.is_empty() || self.allow.iter().any(|r| r.is_match(name)))
            && !self.ignore.iter().any(|r| r.is_match(name))
    }
}

#[cfg(test)]
mod tests {
    use super::NameFilter;

    #[test]
    fn allow_then_ignore_whole_names() {
        let f = NameFilter::new(&["orders-.*".into(), "billing".into()], &["orders-test.*".into()]).expect("valid");
        assert!(f.allows("orders-eu"));
        assert!(f.allows("billing"));
        assert!(!f.allows("billing-2"), "patterns match whole names");
        assert!(!f.allows("orders-test-1"));
        assert!(!f.allows("payments"));
        assert!(NameFilter::default().allows("anything"));
        assert!(NameFilter::new(&["(".into()], &[]).is_err());
    }
}
