//! [`ShareGroupsAdmin`]: what `scrape_mode: admin_api` and `kshard lag` ask
//! the brokers about share groups (KIP-932), with kshard's own client
//! (librdkafka has no share-group admin calls): the share groups each broker
//! coordinates (ListGroups v5, types `share`), their coordinators
//! (FindCoordinator v4+, batched), each share-partition's start offset and
//! Kafka's lag (DescribeShareGroupOffsets v1) and their members
//! (ShareGroupDescribe v1).
//!
//! The `kafka-protocol` crate (0.18) knows DescribeShareGroupOffsets v0
//! only, which has no lag; v1's request is v0's, and its answer adds the
//! lag after the leader epoch, so the answer is read here with
//! [`kshard_offsets::cursor::Cursor`]: every field checked, nothing a
//! broker sends can make it panic.

use std::collections::BTreeMap;
use std::time::Duration;

use kafka_protocol::messages::describe_share_group_offsets_request::DescribeShareGroupOffsetsRequestGroup;
use kafka_protocol::messages::{
    ApiKey, ApiVersionsRequest, ApiVersionsResponse, DescribeShareGroupOffsetsRequest, FindCoordinatorRequest,
    FindCoordinatorResponse, GroupId, ListGroupsRequest, ListGroupsResponse, ShareGroupDescribeRequest,
    ShareGroupDescribeResponse,
};
use kafka_protocol::protocol::StrBytes;
use kshard_offsets::cursor::{Cursor, CursorError};

use crate::client::Client;
use crate::error::{Error, Result};
use crate::wire::broker_link::broker_address;
use crate::wire::links::Links;

/// A share group a broker listed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShareGroupListing {
    /// The group.
    pub group_id: String,
    /// Its state (`Empty`, `Stable`, `Dead`, …).
    pub state: String,
}

/// One share-partition's offsets as DescribeShareGroupOffsets gives them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShareOffset {
    /// The topic.
    pub topic: String,
    /// Its id.
    pub topic_id: [u8; 16],
    /// The partition.
    pub partition: i32,
    /// The share-partition start offset (-1: not initialized).
    pub start_offset: i64,
    /// Kafka's share lag (-1: unknown).
    pub lag: i64,
}

/// A share group's offsets, or why there are none.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShareGroupOffsets {
    /// The group.
    pub group_id: String,
    /// The error the coordinator answered for the group, if any.
    pub error: Option<String>,
    /// Its share-partitions.
    pub partitions: Vec<ShareOffset>,
}

/// A member of a share group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShareMember {
    /// The member id.
    pub member_id: String,
    /// The client id.
    pub client_id: String,
    /// The client host.
    pub client_host: String,
    /// Its assigned partitions by topic name.
    pub assignment: Vec<(String, Vec<i32>)>,
}

/// A share group as ShareGroupDescribe gives it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShareGroupDescription {
    /// The group.
    pub group_id: String,
    /// The error the coordinator answered, if any.
    pub error: Option<String>,
    /// Its state.
    pub state: String,
    /// Its epoch.
    pub epoch: i32,
    /// The assignor.
    pub assignor: String,
    /// Its members.
    pub members: Vec<ShareMember>,
}

/// ListGroups v5: the first with a types filter.
const LIST_GROUPS_VERSION: i16 = 5;
/// FindCoordinator v4: the first batched one.
const FIND_COORDINATOR_VERSION: i16 = 4;
/// DescribeShareGroupOffsets v1: the first with the lag.
const DESCRIBE_OFFSETS_VERSION: i16 = 1;
/// ShareGroupDescribe v1 (Kafka 4.1+; v0 was early access).
const SHARE_DESCRIBE_VERSION: i16 = 1;

/// Share-group admin calls on one cluster.
pub struct ShareGroupsAdmin {
    links: Links,
    timeout: Duration,
}

impl std::fmt::Debug for ShareGroupsAdmin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ShareGroupsAdmin").finish_non_exhaustive()
    }
}

impl ShareGroupsAdmin {
    /// Calls on `settings`' brokers, each given `timeout`; `None` where only
    /// librdkafka can connect (GSSAPI, OAUTHBEARER, keystores…).
    pub fn new(client: &Client, timeout: Duration) -> Result<Option<Self>> {
        Ok(Links::new(client)?.map(|links| ShareGroupsAdmin { links, timeout }))
    }

    /// Whether the broker at `address` has the calls of share groups
    /// (ApiVersions): brokers before Kafka 4.1 have none, and no share groups.
    fn supported(&self, address: &str) -> Result<bool> {
        let request = ApiVersionsRequest::default()
            .with_client_software_name(StrBytes::from_static_str("kshard"))
            .with_client_software_version(StrBytes::from_static_str(env!("CARGO_PKG_VERSION")));
        let answer: ApiVersionsResponse =
            self.links.on(address, self.timeout, |link| link.call(&request, 3, self.timeout))?;
        refused_unless_ok("asking the API versions", address, answer.error_code)?;
        let max = |key: ApiKey| answer.api_keys.iter().find(|k| k.api_key == key as i16).map(|k| k.max_version);
        let at_least = |key: ApiKey, v: i16| max(key).is_some_and(|m| m >= v);
        Ok(at_least(ApiKey::ListGroups, LIST_GROUPS_VERSION)
            && at_least(ApiKey::DescribeShareGroupOffsets, DESCRIBE_OFFSETS_VERSION)
            && at_least(ApiKey::ShareGroupDescribe, SHARE_DESCRIBE_VERSION))
    }

    /// Every share group, from every broker (each lists the groups it
    /// coordinates); none from brokers that have no share groups.
    pub fn list(&self) -> Result<Vec<ShareGroupListing>> {
        let brokers = Links::brokers(&self.links.metadata(self.timeout)?);
        let request = ListGroupsRequest::default().with_types_filter(vec![StrBytes::from_static_str("share")]);
        let mut out = Vec::new();
        for address in brokers.values() {
            if !self.supported(address)? {
                continue;
            }
            let answer: ListGroupsResponse =
                self.links.on(address, self.timeout, |link| link.call(&request, LIST_GROUPS_VERSION, self.timeout))?;
            refused_unless_ok("listing share groups", address, answer.error_code)?;
            out.extend(
                answer.groups.into_iter().filter(|g| g.group_type.as_str() == "share").map(|g| ShareGroupListing {
                    group_id: g.group_id.0.to_string(),
                    state: g.group_state.to_string(),
                }),
            );
        }
        out.sort_by(|a, b| a.group_id.cmp(&b.group_id));
        out.dedup_by(|a, b| a.group_id == b.group_id);
        Ok(out)
    }

    /// Each group's coordinator address (groups it could not find are left out).
    fn coordinators(&self, groups: &[String]) -> Result<BTreeMap<String, Vec<String>>> {
        let mut by_coordinator: BTreeMap<String, Vec<String>> = BTreeMap::new();
        if groups.is_empty() {
            return Ok(by_coordinator);
        }
        let request = FindCoordinatorRequest::default()
            .with_key_type(0)
            .with_coordinator_keys(groups.iter().map(|g| StrBytes::from_string(g.clone())).collect());
        let metadata = self.links.metadata(self.timeout)?;
        let any = Links::brokers(&metadata).into_values().next().ok_or_else(|| Error::Refused {
            step: "finding share groups' coordinators".into(),
            message: "no broker in the metadata".into(),
        })?;
        let answer: FindCoordinatorResponse =
            self.links.on(&any, self.timeout, |link| link.call(&request, FIND_COORDINATOR_VERSION, self.timeout))?;
        for c in answer.coordinators {
            if c.error_code == 0 {
                by_coordinator.entry(broker_address(c.host.as_str(), c.port)).or_default().push(c.key.to_string());
            }
        }
        Ok(by_coordinator)
    }

    /// Every share-partition's start offset and lag of each of `groups`.
    pub fn offsets(&self, groups: &[String]) -> Result<Vec<ShareGroupOffsets>> {
        let mut out = Vec::new();
        for (address, groups) in self.coordinators(groups)? {
            let request = DescribeShareGroupOffsetsRequest::default().with_groups(
                groups
                    .iter()
                    .map(|g| {
                        // No topics named: every topic-partition of the group.
                        DescribeShareGroupOffsetsRequestGroup::default()
                            .with_group_id(GroupId(g.clone().into()))
                            .with_topics(None)
                    })
                    .collect(),
            );
            let frame = self.links.on(&address, self.timeout, |link| {
                link.send_as(ApiKey::DescribeShareGroupOffsets, &request, DESCRIBE_OFFSETS_VERSION, 0, self.timeout)
            })?;
            let answer = read_offsets(&frame).map_err(|e| Error::Refused {
                step: format!("reading the share groups' offsets from {address}"),
                message: e.to_string(),
            })?;
            out.extend(answer);
        }
        Ok(out)
    }

    /// The state and members of each of `groups`.
    pub fn describe(&self, groups: &[String]) -> Result<Vec<ShareGroupDescription>> {
        let mut out = Vec::new();
        for (address, groups) in self.coordinators(groups)? {
            let request = ShareGroupDescribeRequest::default()
                .with_group_ids(groups.iter().map(|g| GroupId(g.clone().into())).collect());
            let answer: ShareGroupDescribeResponse = self
                .links
                .on(&address, self.timeout, |link| link.call(&request, SHARE_DESCRIBE_VERSION, self.timeout))?;
            out.extend(answer.groups.into_iter().map(|g| {
                ShareGroupDescription {
                    group_id: g.group_id.0.to_string(),
                    error: error_of(g.error_code, g.error_message.as_deref()),
                    state: g.group_state.to_string(),
                    epoch: g.group_epoch,
                    assignor: g.assignor_name.to_string(),
                    members: g
                        .members
                        .into_iter()
                        .map(|m| ShareMember {
                            member_id: m.member_id.to_string(),
                            client_id: m.client_id.to_string(),
                            client_host: m.client_host.to_string(),
                            assignment: m
                                .assignment
                                .topic_partitions
                                .into_iter()
                                .map(|t| (t.topic_name.0.to_string(), t.partitions))
                                .collect(),
                        })
                        .collect(),
                }
            }));
        }
        Ok(out)
    }
}

fn error_of(code: i16, message: Option<&str>) -> Option<String> {
    (code != 0).then(|| match message {
        Some(m) if !m.is_empty() => format!("error {code}: {m}"),
        _ => format!("error {code}"),
    })
}

fn refused_unless_ok(step: &str, address: &str, code: i16) -> Result<()> {
    match code {
        0 => Ok(()),
        code => Err(Error::Kafka { step: format!("{step} on {address}"), code }),
    }
}

/// A DescribeShareGroupOffsets v1 answer, from its response header on.
fn read_offsets(frame: &[u8]) -> std::result::Result<Vec<ShareGroupOffsets>, CursorError> {
    let c = &mut Cursor::new(frame);
    c.i32()?; // the correlation id, checked by the link
    skip_tags(c)?;
    c.i32()?; // throttle time
    let mut groups = Vec::new();
    for _ in 0..compact_count(c, 6)? {
        let group_id = compact_string(c)?;
        let mut partitions = Vec::new();
        for _ in 0..compact_count(c, 22)? {
            let topic = compact_string(c)?;
            let topic_id = c.array::<16>()?;
            for _ in 0..compact_count(c, 28)? {
                let partition = c.i32()?;
                let start_offset = c.i64()?;
                let _leader_epoch = c.i32()?;
                let lag = c.i64()?;
                let error = c.i16()?;
                let _message = c.compact_str()?;
                skip_tags(c)?;
                if error == 0 {
                    partitions.push(ShareOffset { topic: topic.clone(), topic_id, partition, start_offset, lag });
                }
            }
            skip_tags(c)?;
        }
        let code = c.i16()?;
        let message = c.compact_str()?;
        skip_tags(c)?;
        groups.push(ShareGroupOffsets { group_id, error: error_of(code, message), partitions });
    }
    skip_tags(c)?;
    Ok(groups)
}

/// A compact array's length, checked against the bytes left (each element
/// at least `min_size` bytes).
fn compact_count(c: &mut Cursor<'_>, min_size: usize) -> std::result::Result<usize, CursorError> {
    let n = c.compact_length()?.unwrap_or(0);
    c.fits(n, min_size)
}

fn compact_string(c: &mut Cursor<'_>) -> std::result::Result<String, CursorError> {
    Ok(c.compact_str()?.unwrap_or_default().to_owned())
}

/// Skips a tagged-fields section.
fn skip_tags(c: &mut Cursor<'_>) -> std::result::Result<(), CursorError> {
    for _ in 0..c.uvarint()? {
        c.uvarint()?;
        let size = c.uvarint()? as usize;
        c.skip(size)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A v1 answer as Kafka 4.4 writes it: one group, one topic, two
    /// partitions (the second refused), tagged fields empty.
    fn answer() -> Vec<u8> {
        let mut b = Vec::new();
        b.extend(7i32.to_be_bytes()); // correlation id
        b.push(0); // header tags
        b.extend(0i32.to_be_bytes()); // throttle
        b.push(2); // one group
        b.push(3);
        b.extend(b"sg");
        b.push(2); // one topic
        b.push(7);
        b.extend(b"orders");
        b.extend([9u8; 16]);
        b.push(3); // two partitions
        for (p, error) in [(0i32, 0i16), (1, 3)] {
            b.extend(p.to_be_bytes());
            b.extend(16i64.to_be_bytes());
            b.extend(0i32.to_be_bytes());
            b.extend(13i64.to_be_bytes());
            b.extend(error.to_be_bytes());
            b.push(0); // null message
            b.push(0);
        }
        b.push(0); // topic tags
        b.extend(0i16.to_be_bytes());
        b.push(0);
        b.push(0); // group tags
        b.push(0); // body tags
        b
    }

    #[test]
    fn a_v1_answer_is_read_with_its_lag_and_partitions_in_error_left_out() {
        let groups = read_offsets(&answer()).expect("reads");
        let partition =
            ShareOffset { topic: "orders".into(), topic_id: [9; 16], partition: 0, start_offset: 16, lag: 13 };
        assert_eq!(groups, vec![ShareGroupOffsets { group_id: "sg".into(), error: None, partitions: vec![partition] }]);
    }

    #[test]
    fn every_cut_of_an_answer_is_an_error_not_a_panic() {
        let whole = answer();
        for end in 0..whole.len() {
            assert!(read_offsets(&whole[..end]).is_err(), "cut at {end}");
        }
        let mut huge = whole.clone();
        huge[9] = 0xff; // a group count far past the bytes
        assert!(read_offsets(&huge).is_err());
    }
}
