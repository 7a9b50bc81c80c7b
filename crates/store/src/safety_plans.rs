//! Personal safety plans: the [`SafetyPlanStore`] implementations, in
//! memory and (once for SQLite and PostgreSQL) in SQL.
//!
//! One table, `safety_plans`: per owner, the plan the person wrote (a JSON
//! document the runtime validates; the store does not read its fields) and
//! when it last changed. Owner data: forget-me deletes the owner's row
//! (`OwnerStore::delete_owner`) and the export carries it. Only the
//! persistent store ever holds one: the incognito runtime never writes it.

use async_trait::async_trait;

use crate::error::{StoreError, StoreResult};
use crate::memory::MemoryBackend;
use crate::records::SafetyPlanRecord;
use crate::sql::{SqlBackend, SqlRow, Stmt};
use crate::traits::SafetyPlanStore;

fn check_owner(owner: &str) -> StoreResult<()> {
    if owner.is_empty() {
        return Err(StoreError::Invalid("a safety plan needs an owner"));
    }
    Ok(())
}

#[async_trait]
impl SafetyPlanStore for MemoryBackend {
    async fn safety_plan(&self, owner: &str) -> StoreResult<Option<SafetyPlanRecord>> {
        check_owner(owner)?;
        Ok(self.with_safety_plans(|p| p.get(owner).cloned()))
    }

    async fn put_safety_plan(&self, record: &SafetyPlanRecord) -> StoreResult<()> {
        check_owner(&record.owner_id)?;
        self.with_safety_plans(|p| p.insert(record.owner_id.clone(), record.clone()));
        Ok(())
    }

    async fn delete_safety_plan(&self, owner: &str) -> StoreResult<bool> {
        check_owner(owner)?;
        Ok(self.with_safety_plans(|p| p.remove(owner).is_some()))
    }
}

#[async_trait]
impl<B: SqlBackend> SafetyPlanStore for B {
    async fn safety_plan(&self, owner: &str) -> StoreResult<Option<SafetyPlanRecord>> {
        check_owner(owner)?;
        let stmt =
            Stmt::new("SELECT owner_id, value, updated_at FROM safety_plans WHERE owner_id = $1")
                .bind(owner);
        let Some(row) = self.fetch_optional(stmt).await? else {
            return Ok(None);
        };
        Ok(Some(SafetyPlanRecord {
            owner_id: row.text("owner_id")?,
            value: row.json("safety_plans", "value")?,
            updated_at: row.ts("safety_plans", "updated_at")?,
        }))
    }

    async fn put_safety_plan(&self, record: &SafetyPlanRecord) -> StoreResult<()> {
        check_owner(&record.owner_id)?;
        let value = B::document(&record.value, "safety plan is not JSON")?;
        let stmt = Stmt::new(
            "INSERT INTO safety_plans (owner_id, value, updated_at) VALUES ($1, $2, $3) \
             ON CONFLICT (owner_id) DO UPDATE SET value = excluded.value, \
             updated_at = excluded.updated_at",
        )
        .bind(record.owner_id.as_str())
        .bind(value)
        .bind(record.updated_at);
        self.execute(stmt).await?;
        Ok(())
    }

    async fn delete_safety_plan(&self, owner: &str) -> StoreResult<bool> {
        check_owner(owner)?;
        let stmt = Stmt::new("DELETE FROM safety_plans WHERE owner_id = $1").bind(owner);
        Ok(self.execute(stmt).await? > 0)
    }
}
