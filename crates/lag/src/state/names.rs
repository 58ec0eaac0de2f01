//! Interned names: every group and topic name is stored once per unit of state,
//! however many partitions and commits refer to it.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

/// A hash map with foldhash, several times faster than SipHash on the short
/// group and topic names every record is looked up by. Names come from
/// `__consumer_offsets`, which only brokers write, so HashDoS resistance is not
/// needed; foldhash still seeds per process.
pub(crate) type FastMap<K, V> = HashMap<K, V, foldhash::fast::RandomState>;

/// A set of shared strings; [`Names::intern`] returns the one copy of a name.
#[derive(Debug, Default)]
pub struct Names {
    set: HashSet<Arc<str>, foldhash::fast::RandomState>,
}

impl Names {
    /// The shared copy of `name`, allocating it only the first time it is seen.
    pub fn intern(&mut self, name: &str) -> Arc<str> {
        if let Some(existing) = self.set.get(name) {
            return Arc::clone(existing);
        }
        let shared: Arc<str> = Arc::from(name);
        self.set.insert(Arc::clone(&shared));
        shared
    }

    /// The shared copy of `name`, if it is held.
    pub fn get(&self, name: &str) -> Option<Arc<str>> {
        self.set.get(name).cloned()
    }

    /// Forgets names nothing else refers to any more (after groups or topics
    /// were removed). Returns how many were dropped.
    pub fn sweep(&mut self) -> usize {
        let before = self.set.len();
        self.set.retain(|name| Arc::strong_count(name) > 1);
        before - self.set.len()
    }

    /// Number of distinct names held.
    pub fn len(&self) -> usize {
        self.set.len()
    }

    /// True when no name is held.
    pub fn is_empty(&self) -> bool {
        self.set.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_copy_per_name_and_sweep_drops_unused() {
        let mut names = Names::default();
        let a = names.intern("orders");
        let b = names.intern("orders");
        assert!(Arc::ptr_eq(&a, &b));
        let c = names.intern("payments");
        drop(c);
        assert_eq!(names.sweep(), 1);
        assert_eq!(names.len(), 1);
        drop((a, b));
        assert_eq!(names.sweep(), 1);
        assert!(names.is_empty());
    }
}
