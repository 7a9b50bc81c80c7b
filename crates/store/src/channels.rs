//! Channel state (`opencouch telegram` and later chat channels): the
//! [`ChannelStore`] implementations, in memory and (once for SQLite and
//! PostgreSQL) in SQL.
//!
//! Two small tables, in the same database as the conversations:
//!
//! * `channel_cursors`: per channel, the next update to ask the platform
//!   for (Telegram's `getUpdates` offset). Advanced only after the updates
//!   before it were answered, so a restart neither loses nor repeats one.
//!   No owner data: a number per channel.
//! * `channel_chats`: per (channel, chat), the chat's owner, its active
//!   thread (the channel's own id, before the service scopes it), the
//!   messages stored in that thread (for rotation), whether the active
//!   session is incognito, the last update answered and the update whose
//!   turn is running. Owner data: forget-me deletes the owner's rows
//!   (`OwnerStore::delete_owner`).

use async_trait::async_trait;
use chrono::{DateTime, Utc};

use crate::error::{StoreError, StoreResult};
use crate::memory::MemoryBackend;
use crate::records::ChatRecord;
use crate::sql::{Arg, SqlBackend, SqlRow, Stmt, to_u64};
use crate::traits::ChannelStore;

fn check(record: &ChatRecord) -> StoreResult<()> {
    if record.channel.is_empty() || record.chat_id.is_empty() {
        return Err(StoreError::Invalid("channel and chat id must not be empty"));
    }
    if record.owner_id.is_empty() || record.thread_id.is_empty() {
        return Err(StoreError::Invalid("a chat needs an owner and a thread id"));
    }
    if i64::try_from(record.message_count).is_err() {
        return Err(StoreError::Invalid("message count out of range"));
    }
    Ok(())
}

#[async_trait]
impl ChannelStore for MemoryBackend {
    async fn channel_cursor(&self, channel: &str) -> StoreResult<Option<i64>> {
        Ok(self.with_channels(|c| c.cursors.get(channel).copied()))
    }

    async fn set_channel_cursor(
        &self,
        channel: &str,
        next: i64,
        _at: DateTime<Utc>,
    ) -> StoreResult<()> {
        self.with_channels(|c| c.cursors.insert(channel.to_owned(), next));
        Ok(())
    }

    async fn chat(&self, channel: &str, chat_id: &str) -> StoreResult<Option<ChatRecord>> {
        let key = (channel.to_owned(), chat_id.to_owned());
        Ok(self.with_channels(|c| c.chats.get(&key).cloned()))
    }

    async fn put_chat(&self, record: &ChatRecord) -> StoreResult<()> {
        check(record)?;
        let key = (record.channel.clone(), record.chat_id.clone());
        self.with_channels(|c| c.chats.insert(key, record.clone()));
        Ok(())
    }

    async fn delete_chat(&self, channel: &str, chat_id: &str) -> StoreResult<bool> {
        let key = (channel.to_owned(), chat_id.to_owned());
        Ok(self.with_channels(|c| c.chats.remove(&key).is_some()))
    }
}

const CHAT_COLUMNS: &str = "channel, chat_id, owner_id, thread_id, message_count, incognito, \
     COALESCE(last_update_id, -1) AS last_update_id, \
     COALESCE(pending_update_id, -1) AS pending_update_id, updated_at";

fn chat_from_row(row: &impl SqlRow) -> StoreResult<ChatRecord> {
    const T: &str = "channel_chats";
    let opt = |v: i64| (v >= 0).then_some(v);
    Ok(ChatRecord {
        channel: row.text("channel")?,
        chat_id: row.text("chat_id")?,
        owner_id: row.text("owner_id")?,
        thread_id: row.text("thread_id")?,
        message_count: to_u64(row.int("message_count")?, T, "message_count")?,
        incognito: row.flag("incognito")?,
        last_update_id: opt(row.int("last_update_id")?),
        pending_update_id: opt(row.int("pending_update_id")?),
        updated_at: row.ts(T, "updated_at")?,
    })
}

#[async_trait]
impl<B: SqlBackend> ChannelStore for B {
    async fn channel_cursor(&self, channel: &str) -> StoreResult<Option<i64>> {
        let stmt =
            Stmt::new("SELECT next_offset FROM channel_cursors WHERE channel = $1").bind(channel);
        let row = self.fetch_optional(stmt).await?;
        row.map(|r| r.int("next_offset")).transpose()
    }

    async fn set_channel_cursor(
        &self,
        channel: &str,
        next: i64,
        at: DateTime<Utc>,
    ) -> StoreResult<()> {
        let stmt = Stmt::new(
            "INSERT INTO channel_cursors (channel, next_offset, updated_at) VALUES ($1, $2, $3) \
             ON CONFLICT (channel) DO UPDATE SET next_offset = excluded.next_offset, \
             updated_at = excluded.updated_at",
        )
        .bind(channel)
        .bind(next)
        .bind(at);
        self.execute(stmt).await?;
        Ok(())
    }

    async fn chat(&self, channel: &str, chat_id: &str) -> StoreResult<Option<ChatRecord>> {
        let stmt = Stmt::new(format!(
            "SELECT {CHAT_COLUMNS} FROM channel_chats WHERE channel = $1 AND chat_id = $2"
        ))
        .bind(channel)
        .bind(chat_id);
        let row = self.fetch_optional(stmt).await?;
        row.as_ref().map(chat_from_row).transpose()
    }

    async fn put_chat(&self, record: &ChatRecord) -> StoreResult<()> {
        check(record)?;
        let count = i64::try_from(record.message_count)
            .map_err(|_| StoreError::Invalid("message count out of range"))?;
        let stmt = Stmt::new(
            "INSERT INTO channel_chats (channel, chat_id, owner_id, thread_id, message_count, \
             incognito, last_update_id, pending_update_id, updated_at) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) \
             ON CONFLICT (channel, chat_id) DO UPDATE SET owner_id = excluded.owner_id, \
             thread_id = excluded.thread_id, message_count = excluded.message_count, \
             incognito = excluded.incognito, last_update_id = excluded.last_update_id, \
             pending_update_id = excluded.pending_update_id, updated_at = excluded.updated_at",
        )
        .bind(&record.channel)
        .bind(&record.chat_id)
        .bind(&record.owner_id)
        .bind(&record.thread_id)
        .bind(count)
        .bind(record.incognito)
        .bind(Arg::Int(record.last_update_id))
        .bind(Arg::Int(record.pending_update_id))
        .bind(record.updated_at);
        self.execute(stmt).await?;
        Ok(())
    }

    async fn delete_chat(&self, channel: &str, chat_id: &str) -> StoreResult<bool> {
        let stmt = Stmt::new("DELETE FROM channel_chats WHERE channel = $1 AND chat_id = $2")
            .bind(channel)
            .bind(chat_id);
        Ok(self.execute(stmt).await? > 0)
    }
}
