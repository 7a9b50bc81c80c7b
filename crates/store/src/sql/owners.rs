//! Everything of one owner on SQL: the [`OwnerStore`] implementation for
//! every [`SqlBackend`] (export reads, forget-me deletes).
//!
//! Which rows are an owner's, as [`crate::thread_belongs_to`] and the trait
//! say: `$1` is the owner, `$2` the prefix `OWNER:` of the owner's scoped
//! thread ids (`NULL` when the owner itself contains `:`, since
//! [`crate::thread_owner`] ends at the first `:`). The snapshot's user is
//! read from its JSON envelope (`{"schema_version", "state": {"user_id"}}`,
//! or the bare state of a v0 payload); `->` and `->>` mean the same in
//! SQLite (TEXT JSON) and PostgreSQL (`JSONB`).
//!
//! Cost: the owner's threads are found by the `owner_id` index plus a scan
//! of `thread_state` for the user id (one row per thread); transcript rows
//! through their primary key; feedback and crisis-log rows by a scan. These
//! are rare operations a person asks for, never on a turn's path.

use async_trait::async_trait;
use serde_json::Value;

use super::{Arg, SqlBackend, SqlRow, Stmt, to_u64};
use crate::error::{StoreError, StoreResult};
use crate::records::{FeedbackRecord, MemoryKind, OwnerCounts};
use crate::traits::OwnerStore;

/// The snapshot's user id (v1 envelope, else a v0 bare state).
const SNAPSHOT_USER: &str = "COALESCE((value -> 'state' ->> 'user_id'), (value ->> 'user_id'))";

/// `thread_state` rows of the owner.
fn owned_snapshot() -> String {
    format!(
        "(owner_id = $1 OR {SNAPSHOT_USER} = $1 \
         OR (thread_id = $1 AND COALESCE({SNAPSHOT_USER}, '') = ''))"
    )
}

/// Rows keyed by `thread_id` that are the owner's: of an owned thread, or
/// scoped `OWNER:…` even without a snapshot (`$2`). The transcript is read
/// only through owned threads (its rows never outlive their snapshot, and a
/// prefix test would scan the largest table), so its condition has no `$2`.
fn owned_keyed(table: &str) -> String {
    let owned = format!(
        "thread_id IN (SELECT thread_id FROM thread_state WHERE {})",
        owned_snapshot()
    );
    if table == "transcript" {
        owned
    } else {
        format!("({owned} OR substr(thread_id, 1, length($2)) = $2)")
    }
}

/// `sql` with `$1` the owner and, when `with_prefix`, `$2` the owner's
/// scope prefix (`NULL` when the owner contains `:`).
fn owner_stmt<'a>(sql: String, owner: &'a str, with_prefix: bool) -> Stmt<'a> {
    let stmt = Stmt::new(sql).bind(owner);
    if !with_prefix {
        return stmt;
    }
    stmt.bind(if owner.contains(':') {
        Arg::Text(None)
    } else {
        Arg::OwnedText(format!("{owner}:"))
    })
}

fn check_owner(owner: &str) -> StoreResult<()> {
    if owner.is_empty() {
        return Err(StoreError::Invalid("owner must not be empty"));
    }
    Ok(())
}

/// Per-kind deletions and counts, in the order of the delete transaction:
/// thread-keyed tables before `thread_state` (their condition reads it),
/// memory records before their revision counters (the triggers write
/// them).
fn count_sql() -> String {
    let count = |table: &str, cond: &str| format!("(SELECT COUNT(*) FROM {table} WHERE {cond})");
    let memory = |kind: MemoryKind| {
        count(
            "memory_records",
            &format!("owner_id = $1 AND namespace_kind = '{}'", kind.as_str()),
        )
    };
    format!(
        "SELECT {} AS threads, {} AS messages, {} AS open_sessions, {} AS voice_statuses, \
         {} AS facts, {} AS session_summaries, {} AS preferences, {} AS memory_revisions, \
         {} AS feedback, {} AS api_users, {} AS channel_chats, {} AS safety_plans, \
         {} AS crisis_log_unlinked",
        count("thread_state", &owned_snapshot()),
        count("transcript", &owned_keyed("transcript")),
        count("active_sessions", &owned_keyed("active_sessions")),
        count(
            "voice_finalization_status",
            &owned_keyed("voice_finalization_status")
        ),
        memory(MemoryKind::Semantic),
        memory(MemoryKind::Episodic),
        memory(MemoryKind::Procedural),
        count("memory_revisions", "owner_id = $1"),
        count("session_feedback", "user_id_or_null = $1"),
        count("api_users", "name = $1"),
        count("channel_chats", "owner_id = $1"),
        count("safety_plans", "owner_id = $1"),
        count("crisis_log", "user_id_or_null = $1"),
    )
}

fn counts_from_row(row: &impl SqlRow) -> StoreResult<OwnerCounts> {
    let n = |col: &'static str| to_u64(row.int(col)?, "owner counts", col);
    Ok(OwnerCounts {
        threads: n("threads")?,
        messages: n("messages")?,
        open_sessions: n("open_sessions")?,
        voice_statuses: n("voice_statuses")?,
        facts: n("facts")?,
        session_summaries: n("session_summaries")?,
        preferences: n("preferences")?,
        memory_revisions: n("memory_revisions")?,
        feedback: n("feedback")?,
        api_users: n("api_users")?,
        channel_chats: n("channel_chats")?,
        safety_plans: n("safety_plans")?,
        crisis_log_unlinked: n("crisis_log_unlinked")?,
    })
}

#[async_trait]
impl<B: SqlBackend> OwnerStore for B {
    async fn owner_threads(&self, owner: &str) -> StoreResult<Vec<String>> {
        check_owner(owner)?;
        let sql = format!(
            "SELECT thread_id FROM thread_state WHERE {} ORDER BY thread_id{}",
            owned_snapshot(),
            B::BYTE_ORDER
        );
        let rows = self.fetch_all(Stmt::new(sql).bind(owner)).await?;
        rows.iter().map(|r| r.text("thread_id")).collect()
    }

    async fn owner_feedback(&self, owner: &str) -> StoreResult<Vec<FeedbackRecord>> {
        check_owner(owner)?;
        let stmt = Stmt::new(
            "SELECT value FROM session_feedback WHERE user_id_or_null = $1 ORDER BY insertion_order",
        )
        .bind(owner);
        let rows = self.fetch_all(stmt).await?;
        rows.iter()
            .map(|r| r.json("session_feedback", "value"))
            .collect()
    }

    async fn owner_counts(&self, owner: &str) -> StoreResult<OwnerCounts> {
        check_owner(owner)?;
        let row = self.fetch_one(owner_stmt(count_sql(), owner, true)).await?;
        counts_from_row(&row)
    }

    async fn delete_owner_thread(&self, thread_id: &str) -> StoreResult<OwnerCounts> {
        let mut tx = self.begin_write().await?;
        let mut c = OwnerCounts::default();
        // `thread_state` last, as in `delete_owner`.
        for (slot, table) in [
            (&mut c.messages, "transcript"),
            (&mut c.open_sessions, "active_sessions"),
            (&mut c.voice_statuses, "voice_finalization_status"),
            (&mut c.threads, "thread_state"),
        ] {
            let sql = format!("DELETE FROM {table} WHERE thread_id = $1");
            *slot = B::execute_in(&mut tx, Stmt::new(sql).bind(thread_id)).await?;
        }
        tx.commit().await?;
        Ok(c)
    }

    async fn delete_owner(&self, owner: &str) -> StoreResult<OwnerCounts> {
        check_owner(owner)?;
        let mut tx = self.begin_write().await?;
        let mut c = OwnerCounts::default();
        for (slot, table) in [
            (&mut c.messages, "transcript"),
            (&mut c.open_sessions, "active_sessions"),
            (&mut c.voice_statuses, "voice_finalization_status"),
        ] {
            let sql = format!("DELETE FROM {table} WHERE {}", owned_keyed(table));
            let stmt = owner_stmt(sql, owner, table != "transcript");
            *slot = B::execute_in(&mut tx, stmt).await?;
        }
        let sql = format!("DELETE FROM thread_state WHERE {}", owned_snapshot());
        c.threads = B::execute_in(&mut tx, owner_stmt(sql, owner, false)).await?;
        for (slot, kind) in [
            (&mut c.facts, MemoryKind::Semantic),
            (&mut c.session_summaries, MemoryKind::Episodic),
            (&mut c.preferences, MemoryKind::Procedural),
        ] {
            let stmt =
                Stmt::new("DELETE FROM memory_records WHERE owner_id = $1 AND namespace_kind = $2")
                    .bind(owner)
                    .bind(kind.as_str());
            *slot = B::execute_in(&mut tx, stmt).await?;
        }
        for (slot, sql) in [
            (
                &mut c.memory_revisions,
                "DELETE FROM memory_revisions WHERE owner_id = $1",
            ),
            (
                &mut c.feedback,
                "DELETE FROM session_feedback WHERE user_id_or_null = $1",
            ),
            (&mut c.api_users, "DELETE FROM api_users WHERE name = $1"),
            (
                &mut c.channel_chats,
                "DELETE FROM channel_chats WHERE owner_id = $1",
            ),
            (
                &mut c.safety_plans,
                "DELETE FROM safety_plans WHERE owner_id = $1",
            ),
        ] {
            *slot = B::execute_in(&mut tx, Stmt::new(sql).bind(owner)).await?;
        }
        // The crisis log keeps its rows (anonymous audit counts) and loses
        // the link: the user id column and the same field of the record.
        let stmt =
            Stmt::new("SELECT id, value FROM crisis_log WHERE user_id_or_null = $1").bind(owner);
        let rows = B::fetch_all_in(&mut tx, stmt).await?;
        for row in rows {
            let id = row.text("id")?;
            let mut value: Value = row.json("crisis_log", "value")?;
            if let Some(obj) = value.as_object_mut() {
                obj.insert("user_id_or_null".into(), Value::Null);
            }
            let doc = B::document(&value, "crisis record is not JSON")?;
            let stmt =
                Stmt::new("UPDATE crisis_log SET user_id_or_null = NULL, value = $2 WHERE id = $1")
                    .bind(id.as_str())
                    .bind(doc);
            c.crisis_log_unlinked += B::execute_in(&mut tx, stmt).await?;
        }
        tx.commit().await?;
        Ok(c)
    }
}
