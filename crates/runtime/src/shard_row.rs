//! [`ShardRow`]: one replica of a shard as `kshard shards list` shows it,
//! whether its member or the keyspace says it.

/// One row of `kshard shards list`: a replica of a shard.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ShardRow {
    /// The shard.
    pub shard: String,
    /// The member holding the replica (empty: the shard has no replica).
    pub member: String,
    /// Its zone.
    pub zone: String,
    /// Its slot (0: primary).
    pub slot: Option<u32>,
    /// Its status (IDLE … FAILED; NONE when unassigned).
    pub status: String,
    /// Why it failed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub errors: Vec<String>,
    /// Records between the replica's position and its log's end, when its
    /// member says.
    pub behind: Option<i64>,
}

impl ShardRow {
    /// The row of a shard without any replica (status NONE).
    pub fn unassigned(shard: &str) -> Self {
        ShardRow {
            shard: shard.to_owned(),
            member: String::new(),
            zone: String::new(),
            slot: None,
            status: "NONE".into(),
            errors: vec![],
            behind: None,
        }
    }
}
