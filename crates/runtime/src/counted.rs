//! The memory store as every runtime holds it: the configured store with
//! each successful write counted in `opencouch_memory_writes_total` (by
//! memory kind and operation). Counts only, never content. The memory
//! writes of a runtime go through it (the memory-control service, explicit
//! saves, session arcs and promotion, `memory_clear`); forget-me deletes an
//! owner's memory in one transaction through the owner store and is not
//! counted here.

use std::sync::Arc;

use async_trait::async_trait;
use opencouch_core::telemetry::record_memory_write;
use opencouch_store::{MemoryKind, MemoryRecord, MemoryStore, StoreResult};

/// A [`MemoryStore`] that counts its successful writes.
pub(crate) struct CountedMemory {
    inner: Arc<dyn MemoryStore>,
}

impl CountedMemory {
    /// `store`, counted.
    pub(crate) fn wrap(store: Arc<dyn MemoryStore>) -> Arc<dyn MemoryStore> {
        Arc::new(CountedMemory { inner: store })
    }
}

#[async_trait]
impl MemoryStore for CountedMemory {
    async fn put(&self, record: &MemoryRecord) -> StoreResult<()> {
        self.inner.put(record).await?;
        record_memory_write(record.kind.as_str(), "insert");
        Ok(())
    }

    async fn get(
        &self,
        owner_id: &str,
        kind: MemoryKind,
        id: &str,
    ) -> StoreResult<Option<MemoryRecord>> {
        self.inner.get(owner_id, kind, id).await
    }

    async fn list(&self, owner_id: &str, kind: MemoryKind) -> StoreResult<Vec<MemoryRecord>> {
        self.inner.list(owner_id, kind).await
    }

    async fn update(&self, record: &MemoryRecord) -> StoreResult<bool> {
        let existed = self.inner.update(record).await?;
        if existed {
            record_memory_write(record.kind.as_str(), "update");
        }
        Ok(existed)
    }

    async fn delete(&self, owner_id: &str, kind: MemoryKind, id: &str) -> StoreResult<bool> {
        let existed = self.inner.delete(owner_id, kind, id).await?;
        if existed {
            record_memory_write(kind.as_str(), "delete");
        }
        Ok(existed)
    }

    async fn count(&self, owner_id: &str, kind: MemoryKind) -> StoreResult<u64> {
        self.inner.count(owner_id, kind).await
    }

    async fn revision(&self, owner_id: &str, kind: MemoryKind) -> StoreResult<u64> {
        self.inner.revision(owner_id, kind).await
    }
}
