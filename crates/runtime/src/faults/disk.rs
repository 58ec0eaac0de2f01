//! A disk behind a [`Gate`]: closed, its stores fail every call (a crashed
//! process's stores are nobody's until its next incarnation opens them).

use std::sync::Arc;

use super::{Closed, Gate, Passage};
use crate::disk::Disk;
use crate::recovery_log::record::Mutation;
use crate::store::{Checkpoint, Entries, Store, StoreError};

/// `inner`, as a member's incarnation behind `gate` uses it.
#[derive(Debug, Clone)]
pub struct GatedDisk {
    inner: Arc<dyn Disk>,
    gate: Gate,
}

impl GatedDisk {
    /// `inner`, reached through `gate`.
    pub fn new(inner: Arc<dyn Disk>, gate: Gate) -> Self {
        GatedDisk { inner, gate }
    }
}

fn check(gate: &Gate, step: &'static str) -> Result<(), StoreError> {
    if gate.now() == Passage::Closed {
        return Err(StoreError { step, message: Closed.to_string() });
    }
    Ok(())
}

impl Disk for GatedDisk {
    fn open(&self, name: &str, fresh: bool) -> Result<(Box<dyn Store>, Option<String>), StoreError> {
        check(&self.gate, "opening")?;
        let (inner, replaced) = self.inner.open(name, fresh)?;
        Ok((Box::new(GatedStore { inner, gate: self.gate.clone() }), replaced))
    }
}

struct GatedStore {
    inner: Box<dyn Store>,
    gate: Gate,
}

impl Store for GatedStore {
    fn apply(&mut self, mutations: &[Mutation], checkpoint: &Checkpoint) -> Result<(), StoreError> {
        check(&self.gate, "applying a transaction")?;
        self.inner.apply(mutations, checkpoint)
    }

    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>, StoreError> {
        check(&self.gate, "reading")?;
        self.inner.get(key)
    }

    fn checkpoint(&self) -> Result<Option<Checkpoint>, StoreError> {
        check(&self.gate, "reading the checkpoint")?;
        self.inner.checkpoint()
    }

    fn scan(&self, after: Option<&[u8]>, max_bytes: usize) -> Result<Entries, StoreError> {
        check(&self.gate, "scanning")?;
        self.inner.scan(after, max_bytes)
    }

    fn clear(&mut self) -> Result<(), StoreError> {
        check(&self.gate, "clearing the store")?;
        self.inner.clear()
    }

    fn views(&self) -> Option<std::sync::Arc<dyn crate::StoreViews>> {
        self.inner.views()
    }
}
