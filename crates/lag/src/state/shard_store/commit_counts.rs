//! The groups' commit counts a transaction of a shard changes, set aside
//! until it ends and then written once each: a count changes with nearly
//! every record, and writing it per record cost a cold start an insert and
//! two allocations per record in the transaction's writes. Pure: what to
//! write comes out as mutations of the store's layout.

use std::collections::BTreeMap;

use super::commits_key;

/// Each group's last count in the transaction (`None`: the count goes, the
/// group's offsets being deleted), in group order.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct CommitCounts {
    groups: BTreeMap<Box<str>, Option<u64>>,
}

impl CommitCounts {
    /// `group` has `count` commits now (`None`: none is kept).
    pub(crate) fn set(&mut self, group: &str, count: Option<u64>) {
        match self.groups.get_mut(group) {
            Some(last) => *last = count,
            None => {
                self.groups.insert(group.into(), count);
            }
        }
    }

    /// What to write, each group's key once, the last count winning:
    /// `(key, Some(count bytes))` to put, `(key, None)` to delete. Empties
    /// the set.
    pub(crate) fn take(&mut self) -> impl Iterator<Item = (Vec<u8>, Option<[u8; 8]>)> + use<> {
        std::mem::take(&mut self.groups)
            .into_iter()
            .map(|(group, count)| (commits_key(&group), count.map(u64::to_be_bytes)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_group_is_written_once_with_its_last_count() {
        let mut counts = CommitCounts::default();
        counts.set("b", Some(1));
        counts.set("a", Some(4));
        counts.set("b", Some(2));
        counts.set("c", Some(9));
        counts.set("c", None);
        counts.set("d", None);
        counts.set("d", Some(1));
        let written: Vec<_> = counts.take().collect();
        let put = |g: &str, n: u64| (commits_key(g), Some(n.to_be_bytes()));
        assert_eq!(written, [put("a", 4), put("b", 2), (commits_key("c"), None), put("d", 1)]);
        assert_eq!(counts.take().count(), 0, "taken: nothing left");
    }
}
