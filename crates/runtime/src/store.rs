//! The replica's local store: the [`Store`] contract, [`RedbStore`], a store
//! in one redb file under the member's data directory, and [`MemoryStore`],
//! one in memory for tests of applications.
//!
//! Contract (what the runtime guarantees and what a store must do):
//! - the runtime calls [`Store::apply`] with one recovery-log transaction at a
//!   time, in log order, from one task; the store applies its mutations and
//!   records its [`Checkpoint`] atomically before returning, and makes them
//!   durable later (with a later transaction, and when closed) — after a
//!   crash, the store holds the state of some prefix of the applied
//!   transactions, with the checkpoint of exactly that prefix. Durability
//!   lives in the recovery log: a store that lost its last transactions in a
//!   crash replays them from the log;
//! - the checkpoint says where playback goes on (log offset and chain) and
//!   which source offsets the state covers, so that state and checkpoint move
//!   together and a restart replays only what follows it;
//! - reads see every applied transaction.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, Weak};

use redb::{Database, ReadableDatabase, TableDefinition};

use crate::recovery_log::record::Mutation;
pub use crate::store_data::{Checkpoint, Entries, LogPosition, Partial, StoreError};
use crate::store_view::{StoreRead, StoreView, StoreViews};

const DATA: TableDefinition<'_, &[u8], &[u8]> = TableDefinition::new("data");
const META: TableDefinition<'_, &str, &[u8]> = TableDefinition::new("meta");
const CHECKPOINT: &str = "checkpoint";

fn err(step: &'static str) -> impl FnOnce(redb::Error) -> StoreError {
    move |e| StoreError { step, message: e.to_string() }
}

/// The replica's store.
pub trait Store: Send + Sync {
    /// Applies one transaction's mutations and its checkpoint, atomically
    /// (durably soon after: see the module's doc).
    fn apply(&mut self, mutations: &[Mutation], checkpoint: &Checkpoint) -> Result<(), StoreError>;

    /// The value of `key`.
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>, StoreError>;

    /// The checkpoint of the last applied transaction (`None` for a new store).
    fn checkpoint(&self) -> Result<Option<Checkpoint>, StoreError>;

    /// Entries in key order after `after` (from the first with `None`), until
    /// about `max_bytes` of keys and values: what a snapshot is written from.
    fn scan(&self, after: Option<&[u8]>, max_bytes: usize) -> Result<Entries, StoreError>;

    /// Removes every key and the checkpoint, atomically: the store is new.
    fn clear(&mut self) -> Result<(), StoreError>;

    /// A handle that opens read-only views of this store from other tasks
    /// while it applies transactions (see [`StoreView`](crate::StoreView)); `None`
    /// for a store that cannot be read beside its writer (its shard's
    /// state is then not served).
    fn views(&self) -> Option<Arc<dyn StoreViews>> {
        None
    }
}

/// A boxed store is a store (a member's disk hands them out boxed).
impl<S: Store + ?Sized> Store for Box<S> {
    fn apply(&mut self, mutations: &[Mutation], checkpoint: &Checkpoint) -> Result<(), StoreError> {
        (**self).apply(mutations, checkpoint)
    }

    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>, StoreError> {
        (**self).get(key)
    }

    fn checkpoint(&self) -> Result<Option<Checkpoint>, StoreError> {
        (**self).checkpoint()
    }

    fn scan(&self, after: Option<&[u8]>, max_bytes: usize) -> Result<Entries, StoreError> {
        (**self).scan(after, max_bytes)
    }

    fn clear(&mut self) -> Result<(), StoreError> {
        (**self).clear()
    }

    fn views(&self) -> Option<Arc<dyn StoreViews>> {
        (**self).views()
    }
}

/// A store in memory: what a process that stops loses (for tests that drive
/// an application without a data directory). A clone is a snapshot that
/// costs nothing until either side applies a transaction (the data is
/// copied on write).
#[derive(Debug, Clone, Default)]
pub struct MemoryStore {
    data: Arc<BTreeMap<Vec<u8>, Vec<u8>>>,
    checkpoint: Option<Checkpoint>,
}

/// A memory store's snapshot, read only (a wrapper: a [`MemoryStore`]
/// implementing both traits would make its users' calls ambiguous).
pub(crate) struct MemorySnapshot(pub(crate) MemoryStore);

impl StoreRead for MemorySnapshot {
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>, StoreError> {
        self.0.get(key)
    }

    fn scan(&self, after: Option<&[u8]>, max_bytes: usize) -> Result<Entries, StoreError> {
        self.0.scan(after, max_bytes)
    }

    fn checkpoint(&self) -> Result<Option<Checkpoint>, StoreError> {
        self.0.checkpoint()
    }
}

impl Store for MemoryStore {
    fn apply(&mut self, mutations: &[Mutation], checkpoint: &Checkpoint) -> Result<(), StoreError> {
        let data = Arc::make_mut(&mut self.data);
        for m in mutations {
            match m {
                Mutation::Put { key, value } => data.insert(key.clone(), value.clone()),
                Mutation::Delete { key } => data.remove(key),
            };
        }
        self.checkpoint = Some(checkpoint.clone());
        Ok(())
    }

    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>, StoreError> {
        Ok(self.data.get(key).cloned())
    }

    fn checkpoint(&self) -> Result<Option<Checkpoint>, StoreError> {
        Ok(self.checkpoint.clone())
    }

    fn scan(&self, after: Option<&[u8]>, max_bytes: usize) -> Result<Entries, StoreError> {
        let from = match after {
            Some(key) => std::ops::Bound::Excluded(key),
            None => std::ops::Bound::Unbounded,
        };
        let (mut out, mut bytes) = (Vec::new(), 0);
        for (k, v) in self.data.range::<[u8], _>((from, std::ops::Bound::Unbounded)) {
            bytes += k.len() + v.len();
            out.push((k.clone(), v.clone()));
            if bytes >= max_bytes {
                break;
            }
        }
        Ok(out)
    }

    fn clear(&mut self) -> Result<(), StoreError> {
        *self = MemoryStore::default();
        Ok(())
    }
}

/// redb's page cache per store. Its default suits one big database; a member
/// holds a store per replica, each applying transactions of at most 512 KiB,
/// so each gets a small cache and a member's memory stays bounded by its
/// number of replicas.
const CACHE_BYTES: usize = 4 << 20;

fn builder() -> redb::Builder {
    let mut builder = Database::builder();
    builder.set_cache_size(CACHE_BYTES);
    builder
}

/// True for errors that say the file holds no readable store (as opposed to
/// a store that cannot be opened now).
fn not_a_store(e: &redb::DatabaseError) -> bool {
    use redb::{DatabaseError as D, StorageError as S};
    match e {
        D::Storage(S::Corrupted(_)) | D::UpgradeRequired(_) | D::RepairAborted => true,
        // A wrong magic number or a truncated header.
        D::Storage(S::Io(io)) => {
            matches!(io.kind(), std::io::ErrorKind::InvalidData | std::io::ErrorKind::UnexpectedEof)
        }
        _ => false,
    }
}

/// How long a [`RedbStore`]'s applied transactions may stay in memory
/// before one of them is made durable (an fsync). Each apply making itself
/// durable cost a cold start of 50 shards most of its time in fsync; a crash
/// now replays at most this much of the recovery log more.
const DURABLE_EVERY: std::time::Duration = std::time::Duration::from_secs(1);

/// A store in one redb file. Transactions are committed without an fsync
/// (redb's `Durability::None`) and made durable by the first commit
/// `DURABLE_EVERY` after the oldest one not yet durable, and when the store is
/// dropped: redb then holds, after a crash, the state of its last durable
/// commit — a prefix of the applied transactions, as the contract asks.
pub struct RedbStore {
    db: Arc<Database>,
    /// When a commit was last made durable; `None`: every commit since the
    /// store was opened was.
    durable_at: Option<std::time::Instant>,
}

impl Drop for RedbStore {
    fn drop(&mut self) {
        if self.durable_at.is_some()
            && let Err(e) = self.make_durable()
        {
            tracing::warn!(error = %e, "closing a store: its last transactions will be replayed from the log");
        }
    }
}

impl std::fmt::Debug for RedbStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedbStore").finish_non_exhaustive()
    }
}

impl RedbStore {
    /// Opens the store at `path`, creating it when missing.
    pub fn open(path: &Path) -> Result<Self, StoreError> {
        let db = builder().create(path).map_err(|e| err("opening")(e.into()))?;
        Ok(RedbStore { db: Arc::new(db), durable_at: None })
    }

    /// Opens the store at `path`; a file that is not a readable store (corrupt,
    /// truncated, of another format) is moved aside to `<path>.corrupt` and a
    /// new store created — the runtime then rebuilds it from the recovery log.
    /// Returns why the old file was set aside, if it was. Other failures (the
    /// file open in another process, I/O errors) are errors: the file is kept.
    pub fn open_or_replace(path: &Path) -> Result<(Self, Option<String>), StoreError> {
        match builder().create(path) {
            Ok(db) => Ok((RedbStore { db: Arc::new(db), durable_at: None }, None)),
            Err(e) if not_a_store(&e) => {
                let why = e.to_string();
                let aside = path.with_extension("redb.corrupt");
                std::fs::rename(path, &aside).map_err(|io| StoreError {
                    step: "setting a corrupt store aside",
                    message: format!("{}: {io} (it could not be opened: {why})", path.display()),
                })?;
                Ok((Self::open(path)?, Some(why)))
            }
            Err(e) => Err(err("opening")(e.into())),
        }
    }

    /// Commits an empty transaction durably: every commit before it is on disk.
    fn make_durable(&mut self) -> Result<(), StoreError> {
        let step = "making transactions durable";
        let txn = self.db.begin_write().map_err(|e| err(step)(e.into()))?;
        txn.commit().map_err(|e| err(step)(e.into()))?;
        self.durable_at = None;
        Ok(())
    }
}

impl Store for RedbStore {
    fn apply(&mut self, mutations: &[Mutation], checkpoint: &Checkpoint) -> Result<(), StoreError> {
        let step = "applying a transaction";
        let mut txn = self.db.begin_write().map_err(|e| err(step)(e.into()))?;
        let now = std::time::Instant::now();
        let durable = self.durable_at.is_some_and(|at| now.duration_since(at) >= DURABLE_EVERY);
        if !durable {
            txn.set_durability(redb::Durability::None).map_err(|e| StoreError { step, message: e.to_string() })?;
        }
        {
            let mut data = txn.open_table(DATA).map_err(|e| err(step)(e.into()))?;
            for m in mutations {
                match m {
                    Mutation::Put { key, value } => {
                        data.insert(key.as_slice(), value.as_slice()).map_err(|e| err(step)(e.into()))?;
                    }
                    Mutation::Delete { key } => {
                        data.remove(key.as_slice()).map_err(|e| err(step)(e.into()))?;
                    }
                }
            }
            let mut meta = txn.open_table(META).map_err(|e| err(step)(e.into()))?;
            let bytes = serde_json::to_vec(checkpoint).map_err(|e| StoreError { step, message: e.to_string() })?;
            meta.insert(CHECKPOINT, bytes.as_slice()).map_err(|e| err(step)(e.into()))?;
        }
        txn.commit().map_err(|e| err(step)(e.into()))?;
        match (durable, self.durable_at) {
            (true, _) => self.durable_at = None,
            // The first commit not made durable: the clock starts.
            (false, None) => self.durable_at = Some(now),
            (false, Some(_)) => {}
        }
        Ok(())
    }

    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>, StoreError> {
        RedbRead::begin(&self.db)?.get(key)
    }

    fn scan(&self, after: Option<&[u8]>, max_bytes: usize) -> Result<Entries, StoreError> {
        RedbRead::begin(&self.db)?.scan(after, max_bytes)
    }

    fn checkpoint(&self) -> Result<Option<Checkpoint>, StoreError> {
        RedbRead::begin(&self.db)?.checkpoint()
    }

    fn views(&self) -> Option<Arc<dyn StoreViews>> {
        Some(Arc::new(RedbViews(Arc::downgrade(&self.db))))
    }

    fn clear(&mut self) -> Result<(), StoreError> {
        let step = "clearing the store";
        let txn = self.db.begin_write().map_err(|e| err(step)(e.into()))?;
        txn.delete_table(DATA).map_err(|e| err(step)(e.into()))?;
        txn.delete_table(META).map_err(|e| err(step)(e.into()))?;
        txn.commit().map_err(|e| err(step)(e.into()))?;
        self.durable_at = None;
        Ok(())
    }
}

/// A redb read transaction: one consistent state of the store.
struct RedbRead(redb::ReadTransaction);

impl RedbRead {
    fn begin(db: &Database) -> Result<Self, StoreError> {
        db.begin_read().map(RedbRead).map_err(|e| err("reading")(e.into()))
    }
}

impl StoreRead for RedbRead {
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>, StoreError> {
        let step = "reading";
        let data = match self.0.open_table(DATA) {
            Ok(t) => t,
            Err(redb::TableError::TableDoesNotExist(_)) => return Ok(None),
            Err(e) => return Err(err(step)(e.into())),
        };
        Ok(data.get(key).map_err(|e| err(step)(e.into()))?.map(|v| v.value().to_vec()))
    }

    fn scan(&self, after: Option<&[u8]>, max_bytes: usize) -> Result<Entries, StoreError> {
        let step = "scanning";
        let data = match self.0.open_table(DATA) {
            Ok(t) => t,
            Err(redb::TableError::TableDoesNotExist(_)) => return Ok(Vec::new()),
            Err(e) => return Err(err(step)(e.into())),
        };
        let range = match after {
            Some(key) => data.range::<&[u8]>((std::ops::Bound::Excluded(key), std::ops::Bound::Unbounded)),
            None => data.range::<&[u8]>(..),
        }
        .map_err(|e| err(step)(e.into()))?;
        let (mut out, mut bytes) = (Vec::new(), 0);
        for entry in range {
            let (k, v) = entry.map_err(|e| err(step)(e.into()))?;
            bytes += k.value().len() + v.value().len();
            out.push((k.value().to_vec(), v.value().to_vec()));
            if bytes >= max_bytes {
                break;
            }
        }
        Ok(out)
    }

    fn checkpoint(&self) -> Result<Option<Checkpoint>, StoreError> {
        let step = "reading the checkpoint";
        let meta = match self.0.open_table(META) {
            Ok(t) => t,
            Err(redb::TableError::TableDoesNotExist(_)) => return Ok(None),
            Err(e) => return Err(err(step)(e.into())),
        };
        let Some(bytes) = meta.get(CHECKPOINT).map_err(|e| err(step)(e.into()))? else { return Ok(None) };
        serde_json::from_slice(bytes.value()).map(Some).map_err(|e| StoreError { step, message: e.to_string() })
    }
}

/// Views of a [`RedbStore`]: read transactions of its database while the
/// store is open (the handle does not keep a closed store's file open).
struct RedbViews(Weak<Database>);

impl StoreViews for RedbViews {
    fn view(&self) -> Result<StoreView, StoreError> {
        let closed = || StoreError { step: "opening a view", message: "the store is closed".into() };
        let db = self.0.upgrade().ok_or_else(closed)?;
        StoreView::new(Box::new(RedbRead::begin(&db)?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::recovery_log::record::SourceOffset;

    fn checkpoint(next_offset: i64, seq: u64, offset: i64) -> Checkpoint {
        Checkpoint {
            log: LogPosition { next_offset, seq, checksum: 42 + seq, author: Some(7) },
            offsets: vec![SourceOffset { topic: "sums".into(), partition: 0, offset }],
            partial: None,
        }
    }

    #[test]
    fn a_corrupt_file_is_set_aside_and_a_new_store_made() {
        let dir = std::env::temp_dir().join(format!("kshard-store-corrupt-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let path = dir.join("s.redb");
        std::fs::write(&path, vec![0x5a; 8192]).expect("garbage");
        let (store, why) = RedbStore::open_or_replace(&path).expect("replaced");
        assert!(why.is_some(), "the garbage was noticed");
        assert_eq!(store.checkpoint().expect("reads"), None, "a new, empty store");
        assert!(dir.join("s.redb.corrupt").exists(), "the old file is kept aside");
        drop(store);
        let (_, why) = RedbStore::open_or_replace(&path).expect("opens");
        assert_eq!(why, None, "a good store opens as it is");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn state_and_checkpoint_survive_a_reopen() {
        let dir =
            std::env::temp_dir().join(format!("kshard-store-{}-{:?}", std::process::id(), std::thread::current().id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let path = dir.join("store.redb");
        let _ = std::fs::remove_file(&path);
        {
            let mut store = RedbStore::open(&path).expect("opens");
            assert_eq!(store.checkpoint().expect("reads"), None);
            assert_eq!(store.get(b"a").expect("reads"), None);
            let put = |k: &str, v: &str| Mutation::Put { key: k.as_bytes().to_vec(), value: v.as_bytes().to_vec() };
            store.apply(&[put("a", "1"), put("b", "2")], &checkpoint(10, 3, 100)).expect("applies");
            store
                .apply(&[Mutation::Delete { key: b"b".to_vec() }, put("a", "3")], &checkpoint(11, 4, 105))
                .expect("applies");
        }
        let store = RedbStore::open(&path).expect("reopens");
        assert_eq!(store.scan(None, 1 << 20).expect("scans"), [(b"a".to_vec(), b"3".to_vec())]);
        assert_eq!(store.scan(Some(b"a"), 1 << 20).expect("scans"), []);
        assert_eq!(store.get(b"a").expect("reads"), Some(b"3".to_vec()));
        assert_eq!(store.get(b"b").expect("reads"), None);
        assert_eq!(store.checkpoint().expect("reads"), Some(checkpoint(11, 4, 105)));
        // Cleared, it is a new store, and stays so when reopened.
        let mut store = store;
        store.clear().expect("clears");
        assert_eq!((store.checkpoint().expect("reads"), store.scan(None, 1 << 20).expect("scans")), (None, vec![]));
        drop(store);
        let mut store = RedbStore::open(&path).expect("reopens");
        assert_eq!((store.checkpoint().expect("reads"), store.get(b"a").expect("reads")), (None, None));
        store.apply(&[], &checkpoint(1, 1, 1)).expect("applies after a clear");
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A view holds the state it was opened on while the store applies
    /// more, for redb and the memory disk's stores alike.
    #[test]
    fn a_view_sees_the_state_it_was_opened_on() {
        let dir = std::env::temp_dir().join(format!("kshard-store-view-{}", std::process::id()));
        use crate::disk::Disk;
        let stores: Vec<(Box<dyn Store>, bool)> = vec![
            (crate::disk::RedbDisk::new(dir.clone()).open("s", true).expect("opens").0, true),
            (crate::disk::MemoryDisk::default().open("s", true).expect("opens").0, false),
        ];
        for (mut store, file) in stores {
            let put = |v: &str| Mutation::Put { key: b"k".to_vec(), value: v.as_bytes().to_vec() };
            let views = store.views().expect("viewable");
            assert_eq!(views.view().expect("a view").checkpoint(), None);
            store.apply(&[put("1")], &checkpoint(1, 1, 10)).expect("applies");
            let before = views.view().expect("a view");
            store.apply(&[put("2")], &checkpoint(2, 2, 11)).expect("applies");
            assert_eq!(before.get(b"k").expect("reads"), Some(b"1".to_vec()));
            assert_eq!((before.offset("sums", 0), before.offset("sums", 1)), (Some(10), None));
            let after = views.view().expect("a view");
            assert_eq!(after.get(b"k").expect("reads"), Some(b"2".to_vec()));
            assert_eq!(after.scan(None, 1 << 20).expect("scans").len(), 1);
            assert_eq!(after.offsets().len(), 1);
            drop(store);
            // A closed file is not held open by its views; a memory disk
            // keeps its stores.
            assert_eq!(views.view().is_err(), file);
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}
