//! Share groups in `scrape_mode: admin_api` (and `kshard lag`): at each
//! scrape, every share group the brokers list, its members
//! (ShareGroupDescribe) and each share-partition's start offset and Kafka's
//! lag (DescribeShareGroupOffsets), into the scrape's unit of groups and a
//! share unit of their own that replaces the last one. Brokers without share
//! groups list none.

use std::collections::HashSet;

use kshard_kafka::ShareGroupListing;
use kshard_offsets::Uuid;
use tracing::{debug, warn};

use crate::brokers::ShareGroupAdmin;
use crate::group_offsets::{DescribedMember, ReportedGroups};
use crate::monitor::Monitor;
use crate::share_state::ShareState;

/// The share groups the settings export.
pub(crate) fn listed(
    share: &dyn ShareGroupAdmin,
    monitor: &Monitor,
) -> Result<Vec<ShareGroupListing>, kshard_kafka::Error> {
    let mut groups = share.list_share_groups()?;
    groups.retain(|g| monitor.settings().groups.allows(&g.group_id));
    Ok(groups)
}

/// The names of `listed` groups, which the consumer-group calls leave out.
pub(crate) fn names(listed: &[ShareGroupListing]) -> HashSet<&str> {
    listed.iter().map(|g| g.group_id.as_str()).collect()
}

/// Describes `listed` and reads their offsets: their metadata goes into
/// `unit`, their share-partitions replace the monitor's share unit.
pub(crate) fn scrape(
    share: &dyn ShareGroupAdmin,
    monitor: &Monitor,
    listed: &[ShareGroupListing],
    unit: &mut ReportedGroups,
) -> Result<(), kshard_kafka::Error> {
    let ids: Vec<String> = listed.iter().map(|g| g.group_id.clone()).collect();
    for g in listed {
        unit.set_reported_state(&g.group_id, crate::group_offsets::SHARE, &g.state);
    }
    let mut state = ShareState::default();
    if !ids.is_empty() {
        for d in share.describe_share_groups(&ids)? {
            if let Some(error) = &d.error {
                warn!(group = %d.group_id, %error, "describing a share group");
                continue;
            }
            let assigned: Vec<Vec<(String, i32)>> = d
                .members
                .iter()
                .map(|m| m.assignment.iter().flat_map(|(t, ps)| ps.iter().map(move |p| (t.clone(), *p))).collect())
                .collect();
            let members: Vec<DescribedMember<'_>> = d
                .members
                .iter()
                .zip(&assigned)
                .map(|(m, assigned)| DescribedMember {
                    member_id: &m.member_id,
                    instance: None,
                    client_id: &m.client_id,
                    host: &m.client_host,
                    assigned,
                })
                .collect();
            unit.set_described(&d.group_id, crate::group_offsets::SHARE, &d.assignor, &d.state, &members);
        }
        for g in share.share_group_offsets(&ids)? {
            if let Some(error) = &g.error {
                warn!(group = %g.group_id, %error, "describing a share group's offsets");
                continue;
            }
            let topics = g.partitions.iter().map(|p| (Uuid(p.topic_id), p.topic.as_str()));
            unit.set_share_topics(&g.group_id, topics);
            for p in &g.partitions {
                state.set_reported(&g.group_id, Uuid(p.topic_id), p.partition, p.start_offset, p.lag);
            }
        }
    }
    debug!(groups = ids.len(), "share groups scraped");
    monitor.share_units().replace(0, state);
    Ok(())
}
