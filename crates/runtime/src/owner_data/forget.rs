//! Forget me: prepare (what would be deleted, and a token) → confirm
//! (delete it, say exactly what was deleted).
//!
//! The token (`fm1.ISSUED.OWNER_TAG.CONTENT_TAG`) binds the owner, the time
//! it was given and what prepare counted; confirm refuses a token given to
//! someone else or malformed ([`OwnerDataError::UnknownToken`]), one older
//! than [`FORGET_ME_TOKEN_TTL`] or one whose counts no longer match what is
//! stored ([`OwnerDataError::StaleToken`]: a message arrived in between, say),
//! so what is deleted is what the person was shown. It is not a secret and
//! needs no server state (any instance can confirm): it stops a single
//! accidental request, while who may act for the owner is the channel's
//! authentication.
//!
//! Confirm deletes thread by thread under each thread's lock (so no turn,
//! session end or background memory extraction of the thread runs
//! meanwhile; the thread's pending extraction jobs are dropped), then the
//! rest in one transaction, then drops the owner's cached retrieval index.

use chrono::{DateTime, Duration, Utc};
use opencouch_store::OwnerCounts;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::{OwnerDataError, check_owner};
use crate::error::ErrorCode;
use crate::service::api::Service;
use crate::service::error::ServiceError;

/// How long a forget-me token stays valid.
pub const FORGET_ME_TOKEN_TTL: Duration = Duration::minutes(10);

/// Whose data to forget.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ForgetMeRequest {
    /// The owner id (a channel's authenticated user, the cli's `--user`).
    pub owner: String,
}

/// The confirmation of a prepared forget-me.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ForgetMeConfirm {
    /// The owner id; the same as at prepare.
    pub owner: String,
    /// The token prepare gave.
    pub token: String,
}

/// What is (or was) kept for an owner, by kind.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ForgetMeCounts {
    /// Conversations.
    pub threads: u64,
    /// Messages in them, both sides.
    pub messages: u64,
    /// Sessions still open (with memory candidates held until their end).
    pub open_sessions: u64,
    /// Voice-session statuses.
    pub voice_statuses: u64,
    /// Saved facts.
    pub facts: u64,
    /// Summaries of past sessions (with their moods and exercises).
    pub session_summaries: u64,
    /// Style-preference records (the profile: rules and the recall switch).
    pub preferences: u64,
    /// Feedback given at session ends.
    pub feedback: u64,
    /// Sign-in accounts (API users of that name, revoked ones included).
    pub accounts: u64,
    /// Chat-app links (a Telegram chat and the conversation it talks in).
    #[serde(default)]
    pub chat_links: u64,
    /// The personal safety plan (0 or 1).
    #[serde(default)]
    pub safety_plan: u64,
    /// Crisis-support log entries: kept as anonymous counts, the link to
    /// the owner removed.
    pub crisis_log_unlinked: u64,
}

impl ForgetMeCounts {
    /// Everything deleted (the unlinked crisis-log entries stay).
    pub fn deleted(&self) -> u64 {
        self.threads
            + self.messages
            + self.open_sessions
            + self.voice_statuses
            + self.facts
            + self.session_summaries
            + self.preferences
            + self.feedback
            + self.accounts
            + self.chat_links
            + self.safety_plan
    }

    /// Whether there is nothing to delete or unlink.
    pub fn is_empty(&self) -> bool {
        *self == ForgetMeCounts::default()
    }

    /// The non-zero kinds as words ("3 conversations (8 messages)", …).
    pub fn describe(&self) -> Vec<String> {
        let n = |count: u64, one: &str, many: &str| {
            (count > 0).then(|| format!("{count} {}", if count == 1 { one } else { many }))
        };
        let conversations = n(self.threads, "conversation", "conversations").map(|c| {
            match n(self.messages, "message", "messages") {
                Some(m) => format!("{c} ({m})"),
                None => c,
            }
        });
        let stray_messages = if self.threads == 0 {
            n(self.messages, "message", "messages")
        } else {
            None
        };
        [
            conversations,
            stray_messages,
            n(self.open_sessions, "open session", "open sessions"),
            n(
                self.voice_statuses,
                "voice-session status",
                "voice-session statuses",
            ),
            n(self.facts, "saved fact", "saved facts"),
            n(
                self.session_summaries,
                "session summary",
                "session summaries",
            ),
            n(
                self.preferences,
                "style-preference record",
                "style-preference records",
            ),
            n(self.feedback, "feedback answer", "feedback answers"),
            n(self.accounts, "sign-in account", "sign-in accounts"),
            n(self.chat_links, "chat-app link", "chat-app links"),
            n(self.safety_plan, "safety plan", "safety plans"),
        ]
        .into_iter()
        .flatten()
        .collect()
    }
}

impl From<OwnerCounts> for ForgetMeCounts {
    fn from(c: OwnerCounts) -> Self {
        ForgetMeCounts {
            threads: c.threads,
            messages: c.messages,
            open_sessions: c.open_sessions,
            voice_statuses: c.voice_statuses,
            facts: c.facts,
            session_summaries: c.session_summaries,
            preferences: c.preferences,
            feedback: c.feedback,
            accounts: c.api_users,
            chat_links: c.channel_chats,
            safety_plan: c.safety_plans,
            crisis_log_unlinked: c.crisis_log_unlinked,
        }
    }
}

/// A prepared forget-me: what would go, and the token to confirm it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ForgetMePlan {
    /// The token for [`Service::forget_me_confirm`]; `None` when nothing
    /// is kept (incognito, or nothing stored for the owner).
    pub token: Option<String>,
    /// Until when the token is valid.
    pub expires_at: Option<DateTime<Utc>>,
    /// What confirming deletes (and unlinks) now.
    pub counts: ForgetMeCounts,
    /// What to tell the person.
    pub message: String,
}

/// What a confirmed forget-me did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ForgetMeDone {
    /// Exactly what was deleted (and unlinked).
    pub counts: ForgetMeCounts,
    /// What to tell the person.
    pub message: String,
}

/// Said when an incognito service is asked to forget.
/// Said when nothing is stored for the owner.
const NOTHING_KEPT: &str = "Nothing is kept for you, so there is nothing to delete.";

fn join_words(items: &[String]) -> String {
    match items {
        [] => String::new(),
        [one] => one.clone(),
        [init @ .., last] => format!("{} and {last}", init.join(", ")),
    }
}

fn crisis_note(counts: &ForgetMeCounts, done: bool) -> String {
    if counts.crisis_log_unlinked == 0 {
        return String::new();
    }
    format!(
        " The safety log {} {} crisis-support {} as anonymous counts, no longer linked to you.",
        if done { "keeps" } else { "will keep" },
        counts.crisis_log_unlinked,
        if counts.crisis_log_unlinked == 1 {
            "entry"
        } else {
            "entries"
        }
    )
}

fn plan_message(counts: &ForgetMeCounts) -> String {
    let mut msg = format!(
        "This permanently deletes everything OpenCouch keeps for you: {}.",
        join_words(&counts.describe())
    );
    if counts.deleted() == 0 {
        msg = "Nothing is stored for you except crisis-support log entries.".to_owned();
    }
    if counts.accounts > 0 {
        msg.push_str(" Your sign-in token stops working.");
    }
    msg.push_str(&crisis_note(counts, false));
    msg.push_str(" Confirm to go ahead; nothing is deleted until then.");
    msg
}

fn done_message(counts: &ForgetMeCounts) -> String {
    let mut msg = if counts.deleted() == 0 {
        "Nothing was left to delete.".to_owned()
    } else {
        format!("Deleted {}.", join_words(&counts.describe()))
    };
    msg.push_str(&crisis_note(counts, true));
    msg
}

const TOKEN_VERSION: &str = "fm1";

fn tag(parts: &[&[u8]], bytes: usize) -> String {
    let mut h = Sha256::new();
    for p in parts {
        h.update((p.len() as u64).to_be_bytes());
        h.update(p);
    }
    hex::encode(&h.finalize()[..bytes])
}

fn owner_tag(owner: &str, issued: i64) -> String {
    tag(
        &[
            b"opencouch.forget-me/1",
            owner.as_bytes(),
            &issued.to_be_bytes(),
        ],
        12,
    )
}

fn content_tag(counts: &ForgetMeCounts) -> String {
    // Field order is fixed by the struct; JSON of plain numbers cannot fail.
    let json = serde_json::to_vec(counts).unwrap_or_default();
    tag(&[b"counts", &json], 8)
}

fn token(owner: &str, issued: DateTime<Utc>, counts: &ForgetMeCounts) -> String {
    let at = issued.timestamp();
    format!(
        "{TOKEN_VERSION}.{at}.{}.{}",
        owner_tag(owner, at),
        content_tag(counts)
    )
}

/// Checks a token's form, owner and age; returns its content tag.
fn check_token(owner: &str, token: &str, now: DateTime<Utc>) -> Result<String, OwnerDataError> {
    let parts: Vec<&str> = token.trim().split('.').collect();
    let [version, at, owner_part, content] = parts.as_slice() else {
        return Err(OwnerDataError::UnknownToken);
    };
    let Ok(issued) = at.parse::<i64>() else {
        return Err(OwnerDataError::UnknownToken);
    };
    if *version != TOKEN_VERSION || *owner_part != owner_tag(owner, issued) {
        return Err(OwnerDataError::UnknownToken);
    }
    let age = now.timestamp() - issued;
    // A little clock skew between instances is fine; the future is not.
    if age > FORGET_ME_TOKEN_TTL.num_seconds() || age < -60 {
        return Err(OwnerDataError::StaleToken("it expired"));
    }
    Ok((*content).to_owned())
}

impl Service {
    /// What forgetting `req.owner` would delete, with a token to confirm
    /// it. Deletes nothing. In incognito, or when nothing is stored, there
    /// is no token and the message says so.
    ///
    /// # Errors
    /// [`OwnerDataError::InvalidOwner`], storage failures.
    pub async fn forget_me_prepare(
        &self,
        req: &ForgetMeRequest,
    ) -> Result<ForgetMePlan, ServiceError> {
        check_owner(&req.owner)?;
        let counts: ForgetMeCounts = self
            .persistent
            .stores()
            .owners
            .owner_counts(&req.owner)
            .await?
            .into();
        if counts.is_empty() {
            return Ok(ForgetMePlan {
                token: None,
                expires_at: None,
                counts,
                message: NOTHING_KEPT.to_owned(),
            });
        }
        let now = Utc::now();
        Ok(ForgetMePlan {
            token: Some(token(&req.owner, now, &counts)),
            expires_at: Some(now + FORGET_ME_TOKEN_TTL),
            message: plan_message(&counts),
            counts,
        })
    }

    /// Deletes everything kept for `req.owner` (the crisis log keeps its
    /// entries, unlinked), after checking the token prepare gave, and says
    /// exactly what was deleted.
    ///
    /// # Errors
    /// [`OwnerDataError::InvalidOwner`],
    /// [`OwnerDataError::UnknownToken`], [`OwnerDataError::StaleToken`],
    /// storage failures (part may be deleted then: prepare and confirm
    /// again to finish).
    pub async fn forget_me_confirm(
        &self,
        req: &ForgetMeConfirm,
    ) -> Result<ForgetMeDone, ServiceError> {
        // Its own task, counted like a turn: a caller that goes away never
        // stops a deletion halfway, and a graceful stop waits for it.
        let running = self.turns().start();
        let svc = self.clone();
        let req = req.clone();
        tokio::spawn(async move {
            let _running = running;
            svc.forget_me_confirm_now(&req).await
        })
        .await
        .map_err(|_| ServiceError::new(ErrorCode::Internal, "the deletion stopped unexpectedly"))?
    }

    async fn forget_me_confirm_now(
        &self,
        req: &ForgetMeConfirm,
    ) -> Result<ForgetMeDone, ServiceError> {
        check_owner(&req.owner)?;
        let expected = check_token(&req.owner, &req.token, Utc::now())?;
        let stores = self.persistent.stores();
        let now: ForgetMeCounts = stores.owners.owner_counts(&req.owner).await?.into();
        if content_tag(&now) != expected {
            return Err(
                OwnerDataError::StaleToken("what is stored changed since it was prepared").into(),
            );
        }
        let inner = &self.persistent.inner;
        let mut deleted = OwnerCounts::default();
        for thread in stores.owners.owner_threads(&req.owner).await? {
            let guard = stores.lock_thread(&thread).await?;
            crate::extraction::discard(&inner.extractor.jobs, &thread);
            let result = stores.owners.delete_owner_thread(&thread).await;
            guard.release().await?;
            deleted += result?;
        }
        deleted += stores.owners.delete_owner(&req.owner).await?;
        // The revision check would catch the deletion on the next turn; drop
        // the cached index now rather than keep deleted text in memory.
        inner.ports.memory.index_cache.invalidate(&req.owner);
        let counts = ForgetMeCounts::from(deleted);
        tracing::info!(
            deleted = counts.deleted(),
            threads = counts.threads,
            crisis_log_unlinked = counts.crisis_log_unlinked,
            "forget-me done"
        );
        Ok(ForgetMeDone {
            message: done_message(&counts),
            counts,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counts() -> ForgetMeCounts {
        ForgetMeCounts {
            threads: 2,
            messages: 8,
            facts: 1,
            accounts: 1,
            crisis_log_unlinked: 2,
            ..ForgetMeCounts::default()
        }
    }

    #[test]
    fn tokens_bind_owner_time_and_content() {
        let now = Utc::now();
        let t = token("alice", now, &counts());
        let tag = check_token("alice", &t, now).expect("valid");
        assert_eq!(tag, content_tag(&counts()));
        assert_ne!(tag, content_tag(&ForgetMeCounts::default()));
        for bad in [
            String::new(),
            "nonsense".to_owned(),
            t.replace("fm1", "fm2"),
            format!("{t}.x"),
        ] {
            assert!(matches!(
                check_token("alice", &bad, now),
                Err(OwnerDataError::UnknownToken)
            ));
        }
        assert!(matches!(
            check_token("bob", &t, now),
            Err(OwnerDataError::UnknownToken)
        ));
        let later = now + FORGET_ME_TOKEN_TTL + Duration::seconds(1);
        assert!(matches!(
            check_token("alice", &t, later),
            Err(OwnerDataError::StaleToken(_))
        ));
        let before = now - Duration::minutes(5);
        assert!(matches!(
            check_token("alice", &t, before),
            Err(OwnerDataError::StaleToken(_))
        ));
    }

    #[test]
    fn messages_name_every_kind() {
        let plan = plan_message(&counts());
        assert!(
            plan.contains("2 conversations (8 messages), 1 saved fact and 1 sign-in account"),
            "{plan}"
        );
        assert!(plan.contains("sign-in token stops working"), "{plan}");
        assert!(plan.contains("2 crisis-support entries"), "{plan}");
        let done = done_message(&counts());
        assert!(done.starts_with("Deleted 2 conversations"), "{done}");
        assert_eq!(
            done_message(&ForgetMeCounts::default()),
            "Nothing was left to delete."
        );
        let only_crisis = ForgetMeCounts {
            crisis_log_unlinked: 1,
            ..ForgetMeCounts::default()
        };
        assert!(plan_message(&only_crisis).starts_with("Nothing is stored for you"));
    }
}
