//! Where a member keeps its replicas' stores: [`Disk`] opens a store by name.
//! [`RedbDisk`] is a directory of redb files (one per replica);
//! [`MemoryDisk`] keeps stores in memory, shared by its clones, so that a
//! simulated member that crashes and starts again finds its stores as a
//! process finds its files.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};

use crate::recovery_log::record::Mutation;
use crate::store::{Checkpoint, Entries, MemoryStore, RedbStore, Store, StoreError};
use crate::store_view::{StoreView, StoreViews};

/// A member's stores, by name.
pub trait Disk: Send + Sync + std::fmt::Debug {
    /// Opens the store `name`, empty when new; `fresh`: a store of that name
    /// is discarded first. With the store, why an unreadable one was set
    /// aside (and a new one made), if it was.
    fn open(&self, name: &str, fresh: bool) -> Result<(Box<dyn Store>, Option<String>), StoreError>;
}

/// Stores as redb files in a directory, `{name}.redb`.
#[derive(Debug, Clone)]
pub struct RedbDisk {
    dir: PathBuf,
}

impl RedbDisk {
    /// Stores under `dir` (created when first opened).
    pub fn new(dir: PathBuf) -> Self {
        RedbDisk { dir }
    }
}

impl Disk for RedbDisk {
    fn open(&self, name: &str, fresh: bool) -> Result<(Box<dyn Store>, Option<String>), StoreError> {
        std::fs::create_dir_all(&self.dir).map_err(|e| StoreError {
            step: "creating the data directory",
            message: format!("{}: {e}", self.dir.display()),
        })?;
        let path = self.dir.join(format!("{name}.redb"));
        if fresh {
            match std::fs::remove_file(&path) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => {
                    let message = format!("{}: {e}", path.display());
                    return Err(StoreError { step: "discarding an old store", message });
                }
            }
        }
        let (store, replaced) = RedbStore::open_or_replace(&path)?;
        Ok((Box::new(store), replaced))
    }
}

/// Stores in memory, shared by the disk's clones: every applied transaction
/// is kept (a process that crashes loses none of what its stores applied).
#[derive(Debug, Clone, Default)]
pub struct MemoryDisk {
    stores: Arc<Mutex<HashMap<String, MemoryStore>>>,
}

impl MemoryDisk {
    /// A copy of the store `name`, if there is one.
    pub fn store(&self, name: &str) -> Option<MemoryStore> {
        self.stores.lock().unwrap_or_else(PoisonError::into_inner).get(name).cloned()
    }

    /// The names of the stores there are.
    pub fn names(&self) -> Vec<String> {
        let mut names: Vec<String> =
            self.stores.lock().unwrap_or_else(PoisonError::into_inner).keys().cloned().collect();
        names.sort();
        names
    }
}

impl Disk for MemoryDisk {
    fn open(&self, name: &str, fresh: bool) -> Result<(Box<dyn Store>, Option<String>), StoreError> {
        let mut stores = self.stores.lock().unwrap_or_else(PoisonError::into_inner);
        if fresh {
            stores.remove(name);
        }
        stores.entry(name.to_owned()).or_default();
        Ok((Box::new(MemoryDiskStore { stores: Arc::clone(&self.stores), name: name.to_owned() }), None))
    }
}

/// A store of a [`MemoryDisk`].
struct MemoryDiskStore {
    stores: Arc<Mutex<HashMap<String, MemoryStore>>>,
    name: String,
}

impl MemoryDiskStore {
    fn with<T>(&self, f: impl FnOnce(&mut MemoryStore) -> Result<T, StoreError>) -> Result<T, StoreError> {
        let mut stores = self.stores.lock().unwrap_or_else(PoisonError::into_inner);
        match stores.get_mut(&self.name) {
            Some(store) => f(store),
            None => Err(StoreError { step: "using a store", message: format!("{} was discarded", self.name) }),
        }
    }
}

impl Store for MemoryDiskStore {
    fn apply(&mut self, mutations: &[Mutation], checkpoint: &Checkpoint) -> Result<(), StoreError> {
        self.with(|s| s.apply(mutations, checkpoint))
    }

    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>, StoreError> {
        self.with(|s| s.get(key))
    }

    fn checkpoint(&self) -> Result<Option<Checkpoint>, StoreError> {
        self.with(|s| s.checkpoint())
    }

    fn scan(&self, after: Option<&[u8]>, max_bytes: usize) -> Result<Entries, StoreError> {
        self.with(|s| s.scan(after, max_bytes))
    }

    fn clear(&mut self) -> Result<(), StoreError> {
        self.with(MemoryStore::clear)
    }

    fn views(&self) -> Option<Arc<dyn StoreViews>> {
        Some(Arc::new(MemoryDiskStore { stores: Arc::clone(&self.stores), name: self.name.clone() }))
    }
}

/// A view is a snapshot of the store: a clone, its data shared until the
/// store next applies a transaction.
impl StoreViews for MemoryDiskStore {
    fn view(&self) -> Result<StoreView, StoreError> {
        StoreView::new(Box::new(crate::store::MemorySnapshot(self.with(|s| Ok(s.clone()))?)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::LogPosition;

    fn checkpoint(next_offset: i64) -> Checkpoint {
        Checkpoint {
            log: LogPosition { next_offset, seq: 1, checksum: 2, author: None },
            offsets: vec![],
            partial: None,
        }
    }

    #[test]
    fn a_memory_disk_keeps_stores_across_opens_until_opened_fresh() {
        let disk = MemoryDisk::default();
        let (mut store, _) = disk.open("s", false).expect("opens");
        store.apply(&[Mutation::Put { key: b"k".to_vec(), value: b"v".to_vec() }], &checkpoint(3)).expect("applies");
        let (again, _) = disk.clone().open("s", false).expect("reopens");
        assert_eq!(again.get(b"k").expect("reads"), Some(b"v".to_vec()));
        assert_eq!(again.checkpoint().expect("reads"), Some(checkpoint(3)));
        let (fresh, _) = disk.open("s", true).expect("opens fresh");
        assert_eq!(fresh.checkpoint().expect("reads"), None);
        assert_eq!(store.get(b"k").expect("the old handle reads the new store"), None);
    }
}
