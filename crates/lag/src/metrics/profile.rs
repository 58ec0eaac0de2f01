//! Whose metric names `/metrics` uses (`metrics_profile`): kshard's own, the
//! richest; kminion's (kshard's families under the `kminion` namespace); or,
//! for a team whose dashboards and alerts were built on another exporter,
//! that exporter's names and labels for what kshard knows.

/// A set of metric names and labels.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Profile {
    /// kshard's families (prefix `kshard` unless `metrics_namespace` says).
    #[default]
    Kshard,
    /// kshard's families under kminion's names (prefix `kminion`).
    Kminion,
    /// danielqsj/kafka_exporter's (`kafka_consumergroup_lag{consumergroup,topic,partition}`, …), as Strimzi bundles it.
    KafkaExporter,
    /// seglo/kafka-lag-exporter's (`kafka_consumergroup_group_lag{cluster_name,group,topic,partition,…}`, …).
    KafkaLagExporter,
    /// linkedin/Burrow's Prometheus names (`burrow_kafka_consumer_partition_lag`, …).
    Burrow,
}

impl Profile {
    /// Every profile, as `metrics_profile` names it.
    pub const ALL: [Profile; 5] =
        [Profile::Kshard, Profile::Kminion, Profile::KafkaExporter, Profile::KafkaLagExporter, Profile::Burrow];

    /// Its name in the configuration.
    pub fn name(self) -> &'static str {
        match self {
            Profile::Kshard => "kshard",
            Profile::Kminion => "kminion",
            Profile::KafkaExporter => "kafka_exporter",
            Profile::KafkaLagExporter => "kafka_lag_exporter",
            Profile::Burrow => "burrow",
        }
    }

    /// kshard's own families (under some namespace).
    pub fn is_native(self) -> bool {
        matches!(self, Profile::Kshard | Profile::Kminion)
    }

    /// The namespace of kshard's own series when none is configured.
    pub fn default_namespace(self) -> &'static str {
        match self {
            Profile::Kminion => "kminion",
            _ => "kshard",
        }
    }

    /// The label naming the cluster of every series, and whether it is there
    /// without `clusters:` too (the tool always had it; its value is then
    /// `local`).
    pub fn cluster_label(self) -> (&'static str, bool) {
        match self {
            Profile::KafkaLagExporter => ("cluster_name", true),
            Profile::Burrow => ("cluster", true),
            _ => ("cluster", false),
        }
    }
}

impl std::str::FromStr for Profile {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Profile::ALL.into_iter().find(|p| p.name() == s).ok_or_else(|| {
            let names: Vec<&str> = Profile::ALL.iter().map(|p| p.name()).collect();
            format!("{s:?} is not one of {}", names.join(", "))
        })
    }
}
