//! The group calls of [`WireAdmin`]: ListGroups from every broker,
//! FindCoordinator, OffsetFetch and DescribeGroups (then
//! ConsumerGroupDescribe for KIP-848 groups) of each coordinator, a
//! group's own retriable error retried for a while and then given as its
//! answer.

use std::collections::BTreeMap;
use std::time::Instant;

use kafka_protocol::messages::offset_fetch_request::OffsetFetchRequestGroup;
use kafka_protocol::messages::{
    ConsumerGroupDescribeRequest, ConsumerGroupDescribeResponse, DescribeGroupsRequest, DescribeGroupsResponse,
    FindCoordinatorRequest, FindCoordinatorResponse, GroupId, ListGroupsRequest, ListGroupsResponse,
    OffsetFetchRequest, OffsetFetchResponse,
};
use kafka_protocol::protocol::StrBytes;

use super::{
    Backend, CONSUMER_GROUP_DESCRIBE_VERSION, COORDINATOR_NOT_AVAILABLE, DESCRIBE_GROUPS_VERSION,
    FIND_COORDINATOR_VERSION, LIST_GROUPS_VERSION, OFFSET_FETCH_VERSION, WireAdmin, answered, group_error,
};
use crate::error::{Error, Result};
use crate::librdkafka::groups::{FetchedOffsets, GroupDescription, GroupListing, MemberDescription};
use crate::retry::{PARTITION_RETRY_FOR, Retry, retriable_code, retrying};
use crate::wire::broker_link::broker_address;
use crate::wire::links::Links;

impl WireAdmin {
    /// Every consumer group (classic or KIP-848) and every group that only
    /// commits offsets, from every broker: a broker that does not answer
    /// fails the call (its groups would be missing).
    pub(super) fn wire_list_groups(&self) -> Result<Vec<GroupListing>> {
        retrying(self.timeout, std::thread::sleep, |left| {
            let brokers = Links::brokers(&self.links.metadata_of(None, left)?);
            let request = ListGroupsRequest::default();
            let mut out: BTreeMap<String, GroupListing> = BTreeMap::new();
            for address in brokers.values() {
                let answer: ListGroupsResponse =
                    self.links.on(address, left, |link| link.call(&request, LIST_GROUPS_VERSION, left))?;
                answered(|| format!("listing groups on {address}"), answer.error_code)?;
                for g in answer.groups {
                    let protocol = g.protocol_type.as_str();
                    if protocol.is_empty() || protocol == "consumer" {
                        let group_id = g.group_id.0.to_string();
                        let state =
                            if g.group_state.is_empty() { "Unknown".to_owned() } else { g.group_state.to_string() };
                        out.insert(group_id.clone(), GroupListing { group_id, state, simple: protocol.is_empty() });
                    }
                }
            }
            Ok(out.into_values().collect())
        })
    }

    /// Each of `groups` with its coordinator's address, or the error
    /// FindCoordinator gave it (its own retriable errors asked again for
    /// 3 s at most).
    fn coordinators(&self, groups: &[String]) -> Result<Vec<(String, std::result::Result<String, i16>)>> {
        let until = Instant::now() + self.timeout.min(PARTITION_RETRY_FOR);
        let mut retry = Retry::default();
        let mut wanted: Vec<String> = groups.to_vec();
        let mut out = Vec::with_capacity(groups.len());
        while !wanted.is_empty() {
            let request = FindCoordinatorRequest::default()
                .with_key_type(0)
                .with_coordinator_keys(wanted.iter().map(|g| StrBytes::from_string(g.clone())).collect());
            let answer: FindCoordinatorResponse = retrying(self.timeout, std::thread::sleep, |left| {
                let metadata = self.links.metadata_of(Some(&[]), left)?;
                let any = Links::brokers(&metadata).into_values().next().ok_or_else(|| Error::Unreachable {
                    step: "finding groups' coordinators".into(),
                    message: "no broker in the metadata".into(),
                })?;
                self.links.on(&any, left, |link| link.call(&request, FIND_COORDINATOR_VERSION, left))
            })?;
            let mut again = Vec::new();
            for c in answer.coordinators {
                let group = c.key.to_string();
                match c.error_code {
                    0 => out.push((group, Ok(broker_address(c.host.as_str(), c.port)))),
                    code if retriable_code(code) && Instant::now() < until => again.push(group),
                    code => out.push((group, Err(code))),
                }
            }
            wanted = again;
            if !wanted.is_empty() {
                std::thread::sleep(retry.next_wait().min(until.saturating_duration_since(Instant::now())));
            }
        }
        Ok(out)
    }

    /// `call` on each coordinator with its groups, as `(group, answer)`;
    /// a group whose coordinator moved, loads, or could not be reached is
    /// asked again (3 s at most), then given `failed` with the error code.
    fn per_coordinator<T>(
        &self,
        groups: &[String],
        call: impl Fn(&str, &[String]) -> Result<Vec<(String, std::result::Result<T, i16>)>>,
        failed: impl Fn(String, i16) -> T,
    ) -> Result<Vec<T>> {
        let until = Instant::now() + self.timeout.min(PARTITION_RETRY_FOR);
        let mut retry = Retry::default();
        let mut wanted = groups.to_vec();
        let mut out = Vec::with_capacity(groups.len());
        while !wanted.is_empty() {
            let mut by_coordinator: BTreeMap<String, Vec<String>> = BTreeMap::new();
            for (group, coordinator) in self.coordinators(&wanted)? {
                match coordinator {
                    Ok(address) => by_coordinator.entry(address).or_default().push(group),
                    Err(code) => out.push(failed(group, code)),
                }
            }
            let mut again = Vec::new();
            let late = Instant::now() >= until;
            for (address, groups) in by_coordinator {
                match call(&address, &groups) {
                    Ok(answers) => {
                        for (group, answer) in answers {
                            match answer {
                                Ok(t) => out.push(t),
                                Err(code) if retriable_code(code) && !late => again.push(group),
                                Err(code) => out.push(failed(group, code)),
                            }
                        }
                    }
                    Err(e) if e.is_retriable() && !late => {
                        self.links.drop_link(&address);
                        tracing::debug!(error = %e, coordinator = %address, "asking again");
                        again.extend(groups);
                    }
                    // One coordinator down does not take the other groups
                    // with it: its groups are told COORDINATOR_NOT_AVAILABLE.
                    Err(e) if e.is_retriable() => {
                        self.links.drop_link(&address);
                        tracing::warn!(error = %e, coordinator = %address, groups = groups.len(), "a coordinator did not answer");
                        out.extend(groups.into_iter().map(|g| failed(g, COORDINATOR_NOT_AVAILABLE)));
                    }
                    Err(e) => return Err(e),
                }
            }
            wanted = again;
            if !wanted.is_empty() {
                std::thread::sleep(retry.next_wait().min(until.saturating_duration_since(Instant::now())));
            }
        }
        Ok(out)
    }

    pub(super) fn wire_group_offsets(&self, groups: &[String]) -> Result<Vec<FetchedOffsets>> {
        let failed = |group_id, code| FetchedOffsets { group_id, offsets: Vec::new(), error: group_error(code) };
        self.per_coordinator(
            groups,
            |address, groups| {
                let request = OffsetFetchRequest::default().with_groups(
                    groups
                        .iter()
                        .map(|g| {
                            OffsetFetchRequestGroup::default()
                                .with_group_id(GroupId(g.clone().into()))
                                .with_topics(None)
                        })
                        .collect(),
                );
                let answer: OffsetFetchResponse = self
                    .links
                    .on(address, self.timeout, |link| link.call(&request, OFFSET_FETCH_VERSION, self.timeout))?;
                Ok(answer
                    .groups
                    .into_iter()
                    .map(|g| {
                        let group_id = g.group_id.0.to_string();
                        if g.error_code != 0 {
                            return (group_id, Err(g.error_code));
                        }
                        let offsets = g
                            .topics
                            .iter()
                            .flat_map(|t| {
                                t.partitions
                                    .iter()
                                    // No committed offset: -1.
                                    .filter(|p| p.error_code == 0 && p.committed_offset >= 0)
                                    .map(|p| (t.name.0.to_string(), p.partition_index, p.committed_offset))
                            })
                            .collect();
                        (group_id.clone(), Ok(FetchedOffsets { group_id, offsets, error: None }))
                    })
                    .collect())
            },
            failed,
        )
    }

    /// DescribeGroups: classic groups as they are; a KIP-848 group is dead to it.
    fn classic_descriptions(&self, groups: &[String]) -> Result<Vec<GroupDescription>> {
        let failed = |group_id, code| GroupDescription {
            group_id,
            state: "Unknown".into(),
            assignor: String::new(),
            members: Vec::new(),
            error: group_error(code),
        };
        self.per_coordinator(
            groups,
            |address, groups| {
                let request = DescribeGroupsRequest::default()
                    .with_groups(groups.iter().map(|g| GroupId(g.clone().into())).collect());
                let answer: DescribeGroupsResponse = self
                    .links
                    .on(address, self.timeout, |link| link.call(&request, DESCRIBE_GROUPS_VERSION, self.timeout))?;
                Ok(answer
                    .groups
                    .into_iter()
                    .map(|g| {
                        let group_id = g.group_id.0.to_string();
                        if g.error_code != 0 {
                            return (group_id, Err(g.error_code));
                        }
                        let consumer = g.protocol_type.as_str() == "consumer";
                        let members = g
                            .members
                            .iter()
                            .map(|m| MemberDescription {
                                member_id: m.member_id.to_string(),
                                group_instance_id: m.group_instance_id.as_ref().map(ToString::to_string),
                                client_id: m.client_id.to_string(),
                                host: m.client_host.to_string(),
                                assignment: if consumer { assigned(&m.member_assignment) } else { Vec::new() },
                            })
                            .collect();
                        let description = GroupDescription {
                            group_id: group_id.clone(),
                            state: g.group_state.to_string(),
                            assignor: g.protocol_data.to_string(),
                            members,
                            error: None,
                        };
                        (group_id, Ok(description))
                    })
                    .collect())
            },
            failed,
        )
    }
}

impl WireAdmin {
    /// Each group's state, assignor and members: DescribeGroups, then
    /// ConsumerGroupDescribe for those it calls dead without members (a
    /// KIP-848 group, or none), as librdkafka describes them.
    pub(super) fn wire_describe_groups(&self, groups: &[String]) -> Result<Vec<GroupDescription>> {
        let mut described = self.classic_descriptions(groups)?;
        if !matches!(self.backend.get(), Some(Backend::Wire { kip848: true })) {
            return Ok(described);
        }
        let dead: Vec<String> = described
            .iter()
            .filter(|d| d.error.is_none() && d.state == "Dead" && d.members.is_empty())
            .map(|d| d.group_id.clone())
            .collect();
        if dead.is_empty() {
            return Ok(described);
        }
        let kip848 = self.per_coordinator(
            &dead,
            |address, groups| {
                let request = ConsumerGroupDescribeRequest::default()
                    .with_group_ids(groups.iter().map(|g| GroupId(g.clone().into())).collect());
                let answer: ConsumerGroupDescribeResponse = self.links.on(address, self.timeout, |link| {
                    link.call(&request, CONSUMER_GROUP_DESCRIBE_VERSION, self.timeout)
                })?;
                Ok(answer
                    .groups
                    .into_iter()
                    .map(|g| {
                        let group_id = g.group_id.0.to_string();
                        if g.error_code != 0 {
                            return (group_id, Err(g.error_code));
                        }
                        let members = g
                            .members
                            .iter()
                            .map(|m| MemberDescription {
                                member_id: m.member_id.to_string(),
                                group_instance_id: m.instance_id.as_ref().map(ToString::to_string),
                                client_id: m.client_id.to_string(),
                                host: m.client_host.to_string(),
                                assignment: m
                                    .assignment
                                    .topic_partitions
                                    .iter()
                                    .flat_map(|tp| tp.partitions.iter().map(|p| (tp.topic_name.0.to_string(), *p)))
                                    .collect(),
                            })
                            .collect();
                        let description = GroupDescription {
                            group_id: group_id.clone(),
                            state: g.group_state.to_string(),
                            assignor: g.assignor_name.to_string(),
                            members,
                            error: None,
                        };
                        (group_id, Ok(description))
                    })
                    .collect())
            },
            // Not a KIP-848 group (GROUP_ID_NOT_FOUND): DescribeGroups' answer stands.
            |group_id, _| GroupDescription {
                group_id,
                state: String::new(),
                assignor: String::new(),
                members: Vec::new(),
                error: Some(String::new()),
            },
        )?;
        for found in kip848.into_iter().filter(|d| d.error.is_none()) {
            if let Some(d) = described.iter_mut().find(|d| d.group_id == found.group_id) {
                *d = found;
            }
        }
        Ok(described)
    }
}

/// The partitions a consumer-protocol assignment names; none for bytes
/// that are not one (a client wrote them; the broker does not check).
fn assigned(bytes: &[u8]) -> Vec<(String, i32)> {
    if bytes.is_empty() {
        return Vec::new();
    }
    match kshard_offsets::Assignment::decode(bytes) {
        Ok(a) => a
            .assigned_partitions
            .iter()
            .flat_map(|tp| tp.partitions.iter().map(|p| (tp.topic.to_string(), *p)))
            .collect(),
        Err(_) => Vec::new(),
    }
}
