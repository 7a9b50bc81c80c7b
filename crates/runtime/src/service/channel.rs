//! What a chat channel (Telegram) keeps between runs, through the service:
//! the platform's update cursor ([`Service::channel_cursor`],
//! [`Service::set_channel_cursor`]) and the chat → active thread registry
//! ([`Service::chat_thread`], [`Service::put_chat_thread`],
//! [`Service::drop_chat_thread`]). Both live in the durable store, the same
//! database as the conversations (SQLite or PostgreSQL), so a restart, even
//! after `kill -9`, resumes where the last answered update left off.
//!
//! A registry row names its owner, so forget-me deletes it with the rest of
//! the owner's data.

use chrono::Utc;
use opencouch_core::Channel;
use opencouch_store::ChatRecord;

use super::api::Service;
use super::error::{ErrorCode, ServiceError};
use crate::thread_id::{owner_problem, valid_thread_id};

/// One chat of a channel: whose it is and which thread it talks in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChatThread {
    /// The platform's chat id, as text.
    pub chat_id: String,
    /// The account the chat's threads and memory belong to (the channel's
    /// [`super::Caller::Account`]).
    pub owner: String,
    /// The active thread, as the channel names it (the one thread-id rule).
    pub thread_id: String,
    /// Messages stored in the active thread, both sides (the channel
    /// rotates to a new thread at its soft limit).
    pub message_count: u64,
    /// Whether the active thread runs incognito (nothing kept).
    pub incognito: bool,
    /// The last platform update answered in this chat.
    pub last_update_id: Option<i64>,
    /// The update whose turn was started and not yet answered (after a
    /// crash: the turn may or may not have committed).
    pub pending_update_id: Option<i64>,
}

impl Service {
    /// The next platform update `channel` should ask for, once one was
    /// stored.
    ///
    /// # Errors
    /// `storage_unavailable`.
    pub async fn channel_cursor(&self, channel: Channel) -> Result<Option<i64>, ServiceError> {
        Ok(self
            .persistent
            .stores()
            .channels
            .channel_cursor(channel.as_str())
            .await?)
    }

    /// Stores the next platform update `channel` should ask for (call it
    /// only once every update before it was answered).
    ///
    /// # Errors
    /// `storage_unavailable`.
    pub async fn set_channel_cursor(
        &self,
        channel: Channel,
        next: i64,
    ) -> Result<(), ServiceError> {
        self.persistent
            .stores()
            .channels
            .set_channel_cursor(channel.as_str(), next, Utc::now())
            .await?;
        Ok(())
    }

    /// The registry row of `channel`'s chat `chat_id`.
    ///
    /// # Errors
    /// `storage_unavailable`.
    pub async fn chat_thread(
        &self,
        channel: Channel,
        chat_id: &str,
    ) -> Result<Option<ChatThread>, ServiceError> {
        let row = self
            .persistent
            .stores()
            .channels
            .chat(channel.as_str(), chat_id)
            .await?;
        Ok(row.map(|r| ChatThread {
            chat_id: r.chat_id,
            owner: r.owner_id,
            thread_id: r.thread_id,
            message_count: r.message_count,
            incognito: r.incognito,
            last_update_id: r.last_update_id,
            pending_update_id: r.pending_update_id,
        }))
    }

    /// Inserts or replaces the registry row of `channel`'s chat.
    ///
    /// # Errors
    /// `invalid_owner`, `invalid_thread_id`, `invalid_input` (an empty chat
    /// id), `storage_unavailable`.
    pub async fn put_chat_thread(
        &self,
        channel: Channel,
        chat: &ChatThread,
    ) -> Result<(), ServiceError> {
        if let Some(why) = owner_problem(&chat.owner) {
            return Err(ServiceError::new(
                ErrorCode::InvalidOwner,
                format!("invalid owner id: {why}"),
            ));
        }
        if !valid_thread_id(&chat.thread_id) {
            return Err(ServiceError::new(
                ErrorCode::InvalidThreadId,
                crate::thread_id::THREAD_ID_RULE,
            ));
        }
        if chat.chat_id.is_empty() {
            return Err(ServiceError::new(
                ErrorCode::InvalidInput,
                "chat id must not be empty",
            ));
        }
        let record = ChatRecord {
            channel: channel.as_str().to_owned(),
            chat_id: chat.chat_id.clone(),
            owner_id: chat.owner.clone(),
            thread_id: chat.thread_id.clone(),
            message_count: chat.message_count,
            incognito: chat.incognito,
            last_update_id: chat.last_update_id,
            pending_update_id: chat.pending_update_id,
            updated_at: Utc::now(),
        };
        self.persistent.stores().channels.put_chat(&record).await?;
        Ok(())
    }

    /// Deletes the registry row of `channel`'s chat; whether there was one.
    ///
    /// # Errors
    /// `storage_unavailable`.
    pub async fn drop_chat_thread(
        &self,
        channel: Channel,
        chat_id: &str,
    ) -> Result<bool, ServiceError> {
        Ok(self
            .persistent
            .stores()
            .channels
            .delete_chat(channel.as_str(), chat_id)
            .await?)
    }
}

/// A new ULID (26 characters of Crockford base32: 48 bits of milliseconds
/// since the Unix epoch, then 80 random bits), for session thread ids such
/// as `telegram:dm:<chat>:session:<ULID>`: they sort by creation time.
pub fn new_ulid() -> String {
    const ALPHABET: &[u8; 32] = b"0123456789ABCDEFGHJKMNPQRSTVWXYZ";
    let millis = u128::try_from(Utc::now().timestamp_millis().max(0)).unwrap_or(0);
    let random = uuid::Uuid::new_v4().as_u128() & ((1u128 << 80) - 1);
    let value = ((millis & ((1u128 << 48) - 1)) << 80) | random;
    (0..26)
        .rev()
        .map(|i| char::from(ALPHABET[((value >> (i * 5)) & 31) as usize]))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::new_ulid;

    #[test]
    fn ulids_are_26_crockford_characters_in_time_order() {
        let a = new_ulid();
        std::thread::sleep(std::time::Duration::from_millis(2));
        let b = new_ulid();
        assert_eq!(a.len(), 26);
        assert!(
            a.chars()
                .all(|c| c.is_ascii_digit() || (c.is_ascii_uppercase() && !"ILOU".contains(c)))
        );
        assert!(a[..10] < b[..10], "{a} {b}");
    }
}
