//! The intent gate: a model-initiated memory change must quote the user's
//! own recent words ([`verify_user_quote`]); why a tool call was refused
//! ([`Refusal`]).

use opencouch_core::Message;
use opencouch_core::message::last_user_turns;
use serde::{Deserialize, Serialize};

use crate::lexicon::fold;

/// Minimum normalized length of a `user_quote`.
pub const MIN_QUOTE_CHARS: usize = 8;
/// How many earlier user turns a quote may come from.
pub const QUOTE_LOOKBACK_TURNS: usize = 3;

/// Why a tool call was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Refusal {
    /// The quote is missing, too short or not something the user said.
    UserIntentNotVerified,
    /// No user id and no thread id.
    OwnerOrSessionMissing,
    /// Persistent-only tool in incognito.
    PersistentMemoryUnavailable,
    /// recall_saved_memory while proactive recall is off.
    ProactiveRecallDisabled,
    /// recall_saved_memory with an empty query.
    EmptyQuery,
    /// Arguments missing or malformed.
    InvalidArguments,
    /// Not one of the memory tools.
    UnknownTool,
    /// The action failed (index out of range, blank text, store error).
    ActionFailed,
}

impl Refusal {
    /// The snake_case code.
    pub fn as_str(self) -> &'static str {
        match self {
            Refusal::UserIntentNotVerified => "user_intent_not_verified",
            Refusal::OwnerOrSessionMissing => "owner_or_session_missing",
            Refusal::PersistentMemoryUnavailable => "persistent_memory_unavailable",
            Refusal::ProactiveRecallDisabled => "proactive_recall_disabled",
            Refusal::EmptyQuery => "empty_query",
            Refusal::InvalidArguments => "invalid_arguments",
            Refusal::UnknownTool => "unknown_tool",
            Refusal::ActionFailed => "action_failed",
        }
    }
}

/// Punctuation → spaces, whitespace collapsed, lowercase.
pub fn normalize_quote(text: &str) -> String {
    let mapped: String = fold(text)
        .chars()
        .map(|c| {
            if c.is_alphanumeric() || c.is_whitespace() {
                c
            } else {
                ' '
            }
        })
        .collect();
    mapped.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Checks that `quote` (≥8 characters normalized) occurs in the current
/// message or the last 3 user turns of `history`.
///
/// # Errors
/// [`Refusal::UserIntentNotVerified`].
pub fn verify_user_quote(
    quote: Option<&str>,
    current_message: &str,
    history: &[Message],
) -> Result<(), Refusal> {
    let q = normalize_quote(quote.unwrap_or_default());
    if q.chars().count() < MIN_QUOTE_CHARS {
        return Err(Refusal::UserIntentNotVerified);
    }
    let mut parts: Vec<&str> = last_user_turns(history, QUOTE_LOOKBACK_TURNS);
    parts.push(current_message);
    let hay = normalize_quote(&parts.join(" \n "));
    if hay.contains(&q) {
        Ok(())
    } else {
        Err(Refusal::UserIntentNotVerified)
    }
}
