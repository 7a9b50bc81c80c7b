//! The vocabulary of memory control: requests ([`MemoryAction`]), staged
//! deletions ([`PendingAction`]), outcomes, errors and what every channel
//! sees of saved memory ([`MemorySnapshot`]).

use chrono::{DateTime, Utc};
use opencouch_core::MemoryMode;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::backend::MemoryError;
use crate::types::{MemoryKind, TypeError};

/// Which visible list an index refers to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum TargetKind {
    /// A semantic fact.
    Fact,
    /// A session summary (episodic arc).
    Session,
    /// A procedural rule.
    Rule,
}

impl TargetKind {
    /// The storage layer of this kind.
    pub fn memory_kind(self) -> MemoryKind {
        match self {
            TargetKind::Fact => MemoryKind::Semantic,
            TargetKind::Session => MemoryKind::Episodic,
            TargetKind::Rule => MemoryKind::Procedural,
        }
    }

    pub(super) fn noun(self) -> &'static str {
        match self {
            TargetKind::Fact => "fact",
            TargetKind::Session => "session summary",
            TargetKind::Rule => "preference",
        }
    }
}

/// A memory-control request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum MemoryAction {
    /// Show saved memory, numbered per kind.
    List,
    /// Counts and the recall flag.
    Status,
    /// Turn proactive recall on or off.
    SetRecall {
        /// The new value.
        enabled: bool,
    },
    /// Save a response preference as a rule.
    SavePreference {
        /// The preference in the user's words.
        preference_text: String,
    },
    /// Save a fact the person explicitly asked to be remembered ("remember
    /// that my sister is called Sarah"), in their own words, at once.
    SaveFact {
        /// The fact in the person's words (the request words removed).
        fact_text: String,
    },
    /// Show the saved items that match a query ("what do you remember
    /// about my sister?").
    Find {
        /// What to look for.
        query: String,
    },
    /// Undo a save made on the turn just before ("forget that"): deletes
    /// exactly that item, without a confirmation step (the person just
    /// saw it saved).
    UndoSave {
        /// The item the save wrote.
        target: DeleteTarget,
    },
    /// Prepare deletion of the n-th (1-based) active item of a kind.
    ForgetByIndex {
        /// Which list.
        target_kind: TargetKind,
        /// 1-based index.
        target_index: usize,
    },
    /// Prepare deletion of the item(s) matching a query.
    ForgetByQuery {
        /// What to forget.
        query: String,
    },
    /// Pick one of the pending delete options (1-based).
    ChooseOption {
        /// 1-based option number.
        option: usize,
    },
    /// Perform the pending deletion.
    ConfirmPending,
    /// Drop the pending deletion.
    CancelPending,
}

impl MemoryAction {
    /// Parses a JSON payload. An invalid payload is an error, never a silent default.
    ///
    /// # Errors
    /// [`ControlError::InvalidAction`].
    pub fn from_json(value: Value) -> Result<Self, ControlError> {
        serde_json::from_value(value).map_err(|_| ControlError::InvalidAction)
    }
}

/// One item a pending deletion points at.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeleteTarget {
    /// Which list.
    pub kind: TargetKind,
    /// `owner:layer`; checked again on confirm.
    pub namespace: String,
    /// Record key (the profile record for rules).
    pub key: String,
    /// Rule id, for rules.
    #[serde(default)]
    pub rule_id: Option<String>,
    /// Text shown to the user.
    pub preview: String,
}

/// A staged deletion, stored between turns as JSON.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum PendingAction {
    /// One target awaiting confirmation.
    Delete {
        /// The target.
        target: DeleteTarget,
    },
    /// Several matches: the user must pick one.
    DeleteOptions {
        /// The options, in the order shown.
        targets: Vec<DeleteTarget>,
    },
}

impl PendingAction {
    /// The JSON form stored in `ThreadState.pending_memory_action`.
    pub fn to_json(&self) -> Value {
        serde_json::to_value(self).unwrap_or(Value::Null)
    }

    /// Reads the stored JSON form.
    ///
    /// # Errors
    /// [`ControlError::InvalidPending`] for anything else.
    pub fn from_json(value: &Value) -> Result<Self, ControlError> {
        serde_json::from_value(value.clone()).map_err(|_| ControlError::InvalidPending)
    }
}

/// What to do with the stored pending action after a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PendingChange {
    /// Leave it as it was.
    Keep,
    /// Replace it.
    Set(PendingAction),
    /// Remove it.
    Clear,
}

impl PendingChange {
    /// The new stored value given the current one.
    pub fn resolve(&self, current: Option<Value>) -> Option<Value> {
        match self {
            PendingChange::Keep => current,
            PendingChange::Set(p) => Some(p.to_json()),
            PendingChange::Clear => None,
        }
    }
}

/// The result of a memory-control request.
#[derive(Debug, Clone, PartialEq)]
pub struct ControlOutcome {
    /// The reply for the user.
    pub reply: String,
    /// What happens to the pending action.
    pub pending: PendingChange,
    /// Whether durable memory changed.
    pub side_effect: bool,
    /// Structured data (lists, counts) for API and tool callers.
    pub data: Value,
    /// The item an explicit save wrote, which a "forget that" right after
    /// may undo ([`MemoryAction::UndoSave`]).
    pub undo: Option<DeleteTarget>,
}

impl ControlOutcome {
    pub(super) fn reply(reply: impl Into<String>, pending: PendingChange) -> Self {
        ControlOutcome {
            reply: reply.into(),
            pending,
            side_effect: false,
            data: Value::Null,
            undo: None,
        }
    }
}

/// A memory-control failure. Never carries memory content.
#[derive(Debug, thiserror::Error)]
pub enum ControlError {
    /// The action payload is invalid (e.g. set_recall without `enabled`).
    #[error("invalid memory action payload")]
    InvalidAction,
    /// The stored pending action does not decode.
    #[error("invalid pending memory action")]
    InvalidPending,
    /// A preference with no text.
    #[error("preference text is empty")]
    BlankPreference,
    /// A query with no text.
    #[error("query is empty")]
    BlankQuery,
    /// A fact to save with no text.
    #[error("fact text is empty")]
    BlankFact,
    /// No user id and no thread id.
    #[error("memory owner missing")]
    OwnerMissing,
    /// An index outside the visible list.
    #[error("no {kind:?} number {index} (there are {available})")]
    IndexOutOfRange {
        /// Which list.
        kind: TargetKind,
        /// The requested 1-based index.
        index: usize,
        /// How many there are.
        available: usize,
    },
    /// The pending action belongs to another namespace.
    #[error("pending action does not belong to this owner")]
    ForeignPending,
    /// An invalid record.
    #[error(transparent)]
    Type(#[from] TypeError),
    /// The store failed.
    #[error(transparent)]
    Backend(#[from] MemoryError),
}

/// Who is asking and in which mode.
#[derive(Debug, Clone, Copy)]
pub struct ControlContext<'a> {
    /// Owner id (user id, else thread id); `None` when neither is known.
    pub owner_id: Option<&'a str>,
    /// Memory mode of the conversation.
    pub memory_mode: MemoryMode,
    /// The current time.
    pub now: DateTime<Utc>,
}

/// The reply given for every memory request in incognito.
pub const GUEST_MODE_REPLY: &str = "You're in guest mode (incognito), so I'm not saving anything from this conversation \
     and there is no saved memory to show or change. Start a regular session if you'd like me to remember things.";

/// The reply to a request to save something in incognito: memory is off,
/// nothing was written.
pub const INCOGNITO_SAVE_REPLY: &str = "Memory is off in this private (incognito) conversation, so I haven't saved that. \
     Start a regular session if you'd like me to remember things.";

/// Everything visible to an owner, in list order.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MemorySnapshot {
    /// Active facts: (key, preview).
    pub facts: Vec<(String, String)>,
    /// Visible session summaries: (key, summary).
    pub sessions: Vec<(String, String)>,
    /// Active rules: (rule id, rule).
    pub rules: Vec<(String, String)>,
    /// Proactive recall flag.
    pub proactive_recall_enabled: bool,
}

impl MemorySnapshot {
    pub(super) fn items(&self, kind: TargetKind) -> &[(String, String)] {
        match kind {
            TargetKind::Fact => &self.facts,
            TargetKind::Session => &self.sessions,
            TargetKind::Rule => &self.rules,
        }
    }
}
