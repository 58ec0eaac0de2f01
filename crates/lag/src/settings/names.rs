//! Names that check themselves: a value of one of these types is valid, so
//! whoever holds one need not check it again. Each parses from a string
//! (and deserializes through it), saying what is wrong with a bad one; the
//! configuration's parser adds the setting's path.

use std::fmt;

/// Why a string is not a name of its kind.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{value:?} is not {what} ({rule})")]
pub struct InvalidName {
    /// The string given.
    pub value: String,
    /// The kind of name, with its article (`a Kafka topic name`).
    pub what: &'static str,
    /// What such a name may be.
    pub rule: &'static str,
}

/// Defines a string newtype whose every value passes `$valid`.
macro_rules! checked_name {
    ($(#[$doc:meta])* $name:ident, $what:literal, $rule:literal, $valid:expr) => {
        $(#[$doc])*
        #[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize)]
        #[serde(try_from = "String", into = "String")]
        pub struct $name(String);

        impl $name {
            /// The name as text.
            pub fn as_str(&self) -> &str {
                &self.0
            }

            /// A name written in kshard's code, known to be valid (tested).
            #[allow(dead_code)]
            pub(crate) fn known(name: &'static str) -> Self {
                $name(name.to_owned())
            }
        }

        impl TryFrom<String> for $name {
            type Error = InvalidName;
            fn try_from(value: String) -> Result<Self, InvalidName> {
                let valid: fn(&str) -> bool = $valid;
                if valid(&value) {
                    Ok($name(value))
                } else {
                    Err(InvalidName { value, what: $what, rule: $rule })
                }
            }
        }

        impl std::str::FromStr for $name {
            type Err = InvalidName;
            fn from_str(s: &str) -> Result<Self, InvalidName> {
                Self::try_from(s.to_owned())
            }
        }

        impl From<$name> for String {
            fn from(name: $name) -> String {
                name.0
            }
        }

        impl std::ops::Deref for $name {
            type Target = str;
            fn deref(&self) -> &str {
                &self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }
    };
}

checked_name!(
    /// A watched cluster's name: a label value, a path segment
    /// (`/clusters/{name}/`) and a name in Burrow's API alike.
    ClusterName,
    "a cluster name",
    "letters, digits, '.', '_' and '-', at most 100: it is a label value and a path",
    |s| !s.is_empty() && s.len() <= 100 && s.chars().all(name_char) && s != "." && s != ".."
);

checked_name!(
    /// A legal Kafka topic name.
    TopicName,
    "a Kafka topic name",
    "letters, digits, '.', '_' and '-', at most 249",
    |s| !s.is_empty() && s.len() <= 249 && s.chars().all(name_char) && s != "." && s != ".."
);

checked_name!(
    /// A Prometheus label name that is not reserved (`__…`).
    LabelName,
    "a Prometheus label name",
    "letters, digits and _, not starting with a digit or __",
    |s| metric_word(s) && !s.starts_with("__")
);

checked_name!(
    /// The prefix of every metric name.
    MetricNamespace,
    "a metric namespace",
    "letters, digits and _, not starting with a digit",
    metric_word
);

fn name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')
}

/// Letters, digits and `_`, not starting with a digit.
fn metric_word(s: &str) -> bool {
    !s.is_empty()
        && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        && !s.starts_with(|c: char| c.is_ascii_digit())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_kind_keeps_out_what_it_cannot_be() {
        assert!("eu-west.1_a".parse::<ClusterName>().is_ok());
        for bad in ["", ".", "..", "a/b", "a b", &"x".repeat(101)] {
            assert!(bad.parse::<ClusterName>().is_err(), "{bad:?}");
        }
        assert!("__consumer_offsets".parse::<TopicName>().is_ok());
        assert!("l".repeat(249).parse::<TopicName>().is_ok());
        for bad in ["", "..", "no spaces", &"l".repeat(250)] {
            assert!(bad.parse::<TopicName>().is_err(), "{bad:?}");
        }
        assert!("kafka_cluster".parse::<LabelName>().is_ok());
        for bad in ["", "__name", "1st", "kafka-cluster"] {
            assert!(bad.parse::<LabelName>().is_err(), "{bad:?}");
        }
        assert!("_kminion".parse::<MetricNamespace>().is_ok());
        for bad in ["", "my-ns", "9lives"] {
            assert!(bad.parse::<MetricNamespace>().is_err(), "{bad:?}");
        }
    }

    #[test]
    fn a_bad_name_says_what_it_should_be() {
        let e = "my-ns".parse::<MetricNamespace>().expect_err("a dash");
        assert_eq!(
            e.to_string(),
            "\"my-ns\" is not a metric namespace (letters, digits and _, not starting with a digit)"
        );
        let parsed: Result<TopicName, _> = serde_norway::from_str("'no spaces'");
        assert!(parsed.expect_err("invalid").to_string().contains("is not a Kafka topic name"));
    }
}
