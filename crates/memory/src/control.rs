//! Memory control: one service behind chat commands, the HTTP API and the
//! voice/text tools.
//!
//! Every deletion takes two steps: *prepare* stores a [`PendingAction`]
//! (JSON in `ThreadState.pending_memory_action`), then *confirm* deletes or
//! *cancel* clears it. Model-initiated mutations must quote the user's own
//! recent words ([`verify_user_quote`]). In incognito nothing is shown or
//! changed.

use std::sync::{Arc, OnceLock};

use chrono::{DateTime, Utc};
use opencouch_core::message::last_user_turns;
use opencouch_core::{MemoryMode, Message};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::assist::{PolicyModel, validate_preference_rule};
use crate::backend::{
    BackendError, MemoryBackend, active_facts, load_profile, save_profile, visible_arcs,
};
use crate::lexicon::{contains_phrase, fold, lexicon};
use crate::policy::RuleOutcome;
use crate::retrieval::{Embedder, RetrievalRequest, haystack, lexical_score, search_layers};
use crate::text::meaningful_set;
use crate::types::{
    MAX_QUOTE_CHARS, MemoryKind, ProceduralRule, RuleSource, TypeError, WriteTiming,
};

/// Which visible list an index refers to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
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

    fn noun(self) -> &'static str {
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
}

impl ControlOutcome {
    fn reply(reply: impl Into<String>, pending: PendingChange) -> Self {
        ControlOutcome {
            reply: reply.into(),
            pending,
            side_effect: false,
            data: Value::Null,
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
    Backend(#[from] BackendError),
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
    fn items(&self, kind: TargetKind) -> &[(String, String)] {
        match kind {
            TargetKind::Fact => &self.facts,
            TargetKind::Session => &self.sessions,
            TargetKind::Rule => &self.rules,
        }
    }
}

fn namespace(owner: &str, kind: TargetKind) -> String {
    format!("{owner}:{}", kind.memory_kind())
}

fn target(owner: &str, kind: TargetKind, id: &str, preview: &str) -> DeleteTarget {
    let (key, rule_id) = match kind {
        TargetKind::Rule => (
            crate::backend::PROFILE_RECORD_ID.to_owned(),
            Some(id.to_owned()),
        ),
        _ => (id.to_owned(), None),
    };
    DeleteTarget {
        kind,
        namespace: namespace(owner, kind),
        key,
        rule_id,
        preview: preview.to_owned(),
    }
}

fn confirm_prompt(t: &DeleteTarget) -> String {
    format!(
        "Delete this saved {}: \"{}\"? Say yes to delete it or no to keep it.",
        t.kind.noun(),
        t.preview
    )
}

fn options_prompt(targets: &[DeleteTarget]) -> String {
    let mut s = String::from("Which one should I delete?");
    for (i, t) in targets.iter().enumerate() {
        s.push_str(&format!("\n{}. {} \"{}\"", i + 1, t.kind.noun(), t.preview));
    }
    s.push_str("\nSay the number, or cancel.");
    s
}

/// The reply when a preference would weaken crisis support (the write
/// policy drops such rules, explicit or not).
pub const SAFETY_PREFERENCE_REPLY: &str = "I can't save that one: if things ever get really hard, I always need to be able to \
     check you're safe and share crisis support. I'm happy to remember other preferences about how I talk with you.";

/// Maximum options offered for one query.
pub const MAX_DELETE_OPTIONS: usize = 5;

/// Words that open a request addressed to the assistant ("keep answers
/// short", "call me Sam"): such a preference reads "You prefer that I …".
const IMPERATIVE_OPENERS: &[&str] = &[
    "always", "answer", "ask", "avoid", "be", "bring", "call", "check", "do", "don't", "dont",
    "explain", "focus", "give", "go", "help", "keep", "let", "mention", "never", "offer", "remind",
    "reply", "respond", "say", "share", "show", "skip", "speak", "stay", "stop", "suggest", "talk",
    "tell", "try", "use", "write",
];

/// Normalizes a preference into a second-person rule, deterministically:
/// "short answers" → "You prefer short answers."; a request to the
/// assistant, "keep answers short" → "You prefer that I keep answers short.".
///
/// # Errors
/// [`ControlError::BlankPreference`] for blank text; a [`TypeError`] when the
/// rule would exceed 280 characters.
pub fn normalize_preference(text: &str) -> Result<String, ControlError> {
    let mut t = text
        .trim()
        .trim_end_matches(['.', '!', '?', ' '])
        .trim()
        .to_owned();
    loop {
        let lower = t.to_lowercase();
        let Some(p) = [
            "that ",
            "please ",
            "i prefer ",
            "i'd prefer ",
            "i would prefer ",
            "i like ",
            "to have ",
            ": ",
        ]
        .iter()
        .find(|p| lower.starts_with(**p) || lower == p.trim_end()) else {
            break;
        };
        t = t.get(p.len()..).unwrap_or_default().trim_start().to_owned();
    }
    if t.is_empty() {
        return Err(ControlError::BlankPreference);
    }
    let lower = t.to_lowercase();
    let rule = if lower.starts_with("you ") {
        let mut c = t.chars();
        c.next()
            .map(|f| f.to_uppercase().chain(c).collect::<String>())
            .unwrap_or_default()
    } else {
        let swapped: Vec<String> = t
            .split(' ')
            .map(|w| match w.to_lowercase().as_str() {
                "my" => "your".to_owned(),
                "me" => "you".to_owned(),
                "myself" => "yourself".to_owned(),
                "i" => "you".to_owned(),
                "i'm" => "you're".to_owned(),
                _ => w.to_owned(),
            })
            .collect();
        let body = swapped.join(" ");
        let opener = lower.split(' ').next().unwrap_or_default();
        let lead = if IMPERATIVE_OPENERS.contains(&opener) {
            "You prefer that I"
        } else {
            "You prefer"
        };
        let mut c = body.chars();
        let first_lower = match (c.next(), c.clone().next()) {
            (Some(f), Some(s)) if !s.is_uppercase() => {
                f.to_lowercase().chain(c).collect::<String>()
            }
            _ => body.clone(),
        };
        format!("{lead} {first_lower}")
    };
    let rule = format!("{rule}.");
    if rule.chars().count() > MAX_QUOTE_CHARS {
        return Err(TypeError::TextLength {
            field: "rule",
            max: MAX_QUOTE_CHARS,
        }
        .into());
    }
    Ok(rule)
}

/// The memory-control service shared by every channel.
#[derive(Clone)]
pub struct MemoryControlService {
    backend: Arc<dyn MemoryBackend>,
    policy_model: Option<Arc<dyn PolicyModel>>,
}

impl MemoryControlService {
    /// A service over a backend (deterministic: no policy model).
    pub fn new(backend: Arc<dyn MemoryBackend>) -> Self {
        MemoryControlService {
            backend,
            policy_model: None,
        }
    }

    /// Uses `model` (hybrid mode) to word saved preferences and to
    /// reconcile them with the active rules; every model failure falls back
    /// to the deterministic path.
    #[must_use]
    pub fn with_policy_model(mut self, model: Arc<dyn PolicyModel>) -> Self {
        self.policy_model = Some(model);
        self
    }

    /// The backend.
    pub fn backend(&self) -> &dyn MemoryBackend {
        self.backend.as_ref()
    }

    /// Everything visible to an owner.
    ///
    /// # Errors
    /// [`ControlError::Backend`].
    pub async fn snapshot(&self, owner: &str) -> Result<MemorySnapshot, ControlError> {
        let b = self.backend.as_ref();
        let (facts, arcs, profile) = tokio::join!(
            active_facts(b, owner),
            visible_arcs(b, owner),
            load_profile(b, owner)
        );
        let profile = profile?;
        Ok(MemorySnapshot {
            facts: facts?
                .into_iter()
                .map(|f| (f.id.clone(), f.preview()))
                .collect(),
            sessions: arcs?.into_iter().map(|a| (a.id, a.summary)).collect(),
            rules: profile
                .active_rules()
                .map(|r| (r.id.clone(), r.rule.clone()))
                .collect(),
            proactive_recall_enabled: profile.proactive_recall_enabled,
        })
    }

    /// Handles one action given the stored pending action.
    ///
    /// # Errors
    /// [`ControlError`] for a missing owner, blank text, an index out of
    /// range, a foreign pending action or a store failure.
    pub async fn handle(
        &self,
        ctx: &ControlContext<'_>,
        action: MemoryAction,
        pending: Option<&PendingAction>,
    ) -> Result<ControlOutcome, ControlError> {
        if ctx.memory_mode == MemoryMode::Incognito {
            let mut out = ControlOutcome::reply(GUEST_MODE_REPLY, PendingChange::Clear);
            if action == MemoryAction::Status {
                out.data = json!({"memory_enabled": false, "memory_mode": "incognito"});
            }
            return Ok(out);
        }
        let owner = ctx
            .owner_id
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .ok_or(ControlError::OwnerMissing)?;
        match action {
            MemoryAction::List => self.list(owner).await,
            MemoryAction::Status => self.status(owner).await,
            MemoryAction::SetRecall { enabled } => self.set_recall(owner, enabled, ctx.now).await,
            MemoryAction::SavePreference { preference_text } => {
                self.save_preference(owner, &preference_text, ctx.now).await
            }
            MemoryAction::ForgetByIndex {
                target_kind,
                target_index,
            } => {
                let snap = self.snapshot(owner).await?;
                let items = snap.items(target_kind);
                let available = items.len();
                let (id, preview) = target_index
                    .checked_sub(1)
                    .and_then(|i| items.get(i))
                    .ok_or(ControlError::IndexOutOfRange {
                        kind: target_kind,
                        index: target_index,
                        available,
                    })?;
                let t = target(owner, target_kind, id, preview);
                Ok(ControlOutcome::reply(
                    confirm_prompt(&t),
                    PendingChange::Set(PendingAction::Delete { target: t }),
                ))
            }
            MemoryAction::ForgetByQuery { query } => self.forget_by_query(owner, &query).await,
            MemoryAction::ChooseOption { option } => Ok(choose_option(pending, option)),
            MemoryAction::ConfirmPending => self.confirm(owner, pending, ctx.now).await,
            MemoryAction::CancelPending => Ok(match pending {
                Some(_) => {
                    ControlOutcome::reply("Okay, I won't delete anything.", PendingChange::Clear)
                }
                None => ControlOutcome::reply(
                    "There's nothing waiting to be deleted.",
                    PendingChange::Keep,
                ),
            }),
        }
    }

    async fn list(&self, owner: &str) -> Result<ControlOutcome, ControlError> {
        let snap = self.snapshot(owner).await?;
        let mut reply = String::new();
        if snap.facts.is_empty() && snap.sessions.is_empty() && snap.rules.is_empty() {
            reply.push_str("I haven't saved anything about you yet.");
        } else {
            reply.push_str("Here is what I have saved:");
            for (title, items) in [
                ("Facts", &snap.facts),
                ("Sessions", &snap.sessions),
                ("Preferences", &snap.rules),
            ] {
                if items.is_empty() {
                    continue;
                }
                reply.push_str(&format!("\n{title}:"));
                for (i, (_, text)) in items.iter().enumerate() {
                    reply.push_str(&format!("\n{}. {text}", i + 1));
                }
            }
        }
        reply.push_str(recall_sentence(snap.proactive_recall_enabled));
        let data = json!({
            "facts": snap.facts.iter().map(|(_, t)| t).collect::<Vec<_>>(),
            "sessions": snap.sessions.iter().map(|(_, t)| t).collect::<Vec<_>>(),
            "rules": snap.rules.iter().map(|(_, t)| t).collect::<Vec<_>>(),
            "proactive_recall_enabled": snap.proactive_recall_enabled,
        });
        Ok(ControlOutcome {
            data,
            ..ControlOutcome::reply(reply, PendingChange::Keep)
        })
    }

    async fn status(&self, owner: &str) -> Result<ControlOutcome, ControlError> {
        let snap = self.snapshot(owner).await?;
        let reply = format!(
            "Memory is on. Saved: {} facts, {} session summaries, {} preferences.{}",
            snap.facts.len(),
            snap.sessions.len(),
            snap.rules.len(),
            recall_sentence(snap.proactive_recall_enabled)
        );
        let data = json!({
            "memory_enabled": true,
            "memory_mode": "persistent",
            "facts": snap.facts.len(),
            "sessions": snap.sessions.len(),
            "rules": snap.rules.len(),
            "proactive_recall_enabled": snap.proactive_recall_enabled,
        });
        Ok(ControlOutcome {
            data,
            ..ControlOutcome::reply(reply, PendingChange::Keep)
        })
    }

    async fn set_recall(
        &self,
        owner: &str,
        enabled: bool,
        now: DateTime<Utc>,
    ) -> Result<ControlOutcome, ControlError> {
        let b = self.backend.as_ref();
        let mut profile = load_profile(b, owner).await?;
        let changed = profile.proactive_recall_enabled != enabled;
        if changed {
            profile.proactive_recall_enabled = enabled;
            save_profile(b, owner, &profile, now).await?;
        }
        let reply = if enabled {
            "Proactive recall is on: I may bring up things from earlier sessions when they seem relevant."
        } else {
            "Proactive recall is off: I won't bring up earlier sessions unless you ask."
        };
        Ok(ControlOutcome {
            side_effect: changed,
            data: json!({"proactive_recall_enabled": enabled}),
            ..ControlOutcome::reply(reply, PendingChange::Keep)
        })
    }

    /// The rule text for an explicit preference: the policy model's
    /// wording when it passes [`validate_preference_rule`], else
    /// [`normalize_preference`]. Returns the rule and how it was written.
    async fn preference_rule(&self, text: &str) -> Result<(String, &'static str), ControlError> {
        let deterministic = normalize_preference(text);
        if matches!(deterministic, Err(ControlError::BlankPreference)) {
            return Err(ControlError::BlankPreference);
        }
        let Some(model) = &self.policy_model else {
            return deterministic.map(|r| (r, "deterministic"));
        };
        match model.normalize_preference(text).await {
            Ok(reply) => {
                if let Some(rule) = validate_preference_rule(&reply.rule, text) {
                    return Ok((rule, "model"));
                }
                tracing::warn!(
                    "model preference rule failed validation; using the deterministic rule"
                );
            }
            Err(e) => {
                tracing::warn!(error = %e, "preference model failed; using the deterministic rule");
            }
        }
        deterministic.map(|r| (r, "fallback"))
    }

    async fn save_preference(
        &self,
        owner: &str,
        text: &str,
        now: DateTime<Utc>,
    ) -> Result<ControlOutcome, ControlError> {
        let (rule_text, path) = self.preference_rule(text).await?;
        if crate::policy::is_safety_conflict(&rule_text) || crate::policy::is_safety_conflict(text)
        {
            return Ok(ControlOutcome {
                data: json!({"saved": false, "reason": "safety_conflict"}),
                ..ControlOutcome::reply(SAFETY_PREFERENCE_REPLY, PendingChange::Keep)
            });
        }
        let b = self.backend.as_ref();
        let mut profile = load_profile(b, owner).await?;
        let quote = crate::policy::clip_quote(text);
        let rule = ProceduralRule::new(
            &rule_text,
            vec![quote],
            RuleSource::ExplicitUser,
            WriteTiming::Immediate,
            "explicit_user_request",
            now,
        )?;
        let (outcome, _) =
            crate::policy::add_rule(&mut profile, rule, self.policy_model.as_deref(), now).await;
        match outcome {
            RuleOutcome::Skipped { existing } => {
                let shown = existing.unwrap_or_else(|| rule_text.clone());
                Ok(ControlOutcome {
                    data: json!({"rule": shown, "duplicate": true, "rule_path": path}),
                    ..ControlOutcome::reply(format!("Already saved: {shown}"), PendingChange::Keep)
                })
            }
            RuleOutcome::Added | RuleOutcome::Replaced { .. } => {
                save_profile(b, owner, &profile, now).await?;
                let mut data = json!({"rule": rule_text, "duplicate": false, "rule_path": path});
                let reply = match outcome {
                    RuleOutcome::Replaced { retired } => {
                        data["replaced"] = Value::from(retired.clone());
                        format!("Saved: {rule_text} (this replaces: {retired})")
                    }
                    _ => format!("Saved: {rule_text}"),
                };
                Ok(ControlOutcome {
                    side_effect: true,
                    data,
                    ..ControlOutcome::reply(reply, PendingChange::Keep)
                })
            }
        }
    }

    async fn forget_by_query(
        &self,
        owner: &str,
        query: &str,
    ) -> Result<ControlOutcome, ControlError> {
        let q = meaningful_set(query);
        if q.is_empty() {
            return Err(ControlError::BlankQuery);
        }
        let b = self.backend.as_ref();
        let mut matches: Vec<(f64, DeleteTarget)> = Vec::new();
        for f in active_facts(b, owner).await? {
            let v = serde_json::to_value(&f).unwrap_or(Value::Null);
            push_match(
                &mut matches,
                &q,
                &v,
                target(owner, TargetKind::Fact, &f.id, &f.preview()),
            );
        }
        for a in visible_arcs(b, owner).await? {
            let v = serde_json::to_value(&a).unwrap_or(Value::Null);
            push_match(
                &mut matches,
                &q,
                &v,
                target(owner, TargetKind::Session, &a.id, &a.summary),
            );
        }
        for r in load_profile(b, owner).await?.active_rules() {
            push_match(
                &mut matches,
                &q,
                &json!({"text": r.rule}),
                target(owner, TargetKind::Rule, &r.id, &r.rule),
            );
        }
        matches.sort_by(|a, b| b.0.total_cmp(&a.0));
        let mut targets: Vec<DeleteTarget> = matches
            .into_iter()
            .map(|(_, t)| t)
            .take(MAX_DELETE_OPTIONS)
            .collect();
        Ok(match targets.len() {
            0 => ControlOutcome::reply(
                "I couldn't find anything saved that matches that.",
                PendingChange::Keep,
            ),
            1 => {
                let t = targets.remove(0);
                ControlOutcome::reply(
                    confirm_prompt(&t),
                    PendingChange::Set(PendingAction::Delete { target: t }),
                )
            }
            _ => ControlOutcome::reply(
                options_prompt(&targets),
                PendingChange::Set(PendingAction::DeleteOptions { targets }),
            ),
        })
    }

    async fn confirm(
        &self,
        owner: &str,
        pending: Option<&PendingAction>,
        now: DateTime<Utc>,
    ) -> Result<ControlOutcome, ControlError> {
        let t = match pending {
            None => {
                return Ok(ControlOutcome::reply(
                    "There's nothing waiting to be deleted.",
                    PendingChange::Keep,
                ));
            }
            Some(PendingAction::DeleteOptions { targets }) => {
                return Ok(ControlOutcome::reply(
                    options_prompt(targets),
                    PendingChange::Keep,
                ));
            }
            Some(PendingAction::Delete { target }) => target,
        };
        if t.namespace != namespace(owner, t.kind) {
            return Err(ControlError::ForeignPending);
        }
        let b = self.backend.as_ref();
        let deleted = match (t.kind, &t.rule_id) {
            (TargetKind::Rule, Some(rule_id)) => {
                let mut profile = load_profile(b, owner).await?;
                let before = profile.rules.len();
                profile.rules.retain(|r| &r.id != rule_id);
                let deleted = profile.rules.len() != before;
                if deleted {
                    save_profile(b, owner, &profile, now).await?;
                }
                deleted
            }
            (TargetKind::Rule, None) => return Err(ControlError::InvalidPending),
            (kind, _) => b.delete(owner, kind.memory_kind(), &t.key).await?,
        };
        let reply = if deleted {
            format!("Deleted the saved {}: \"{}\".", t.kind.noun(), t.preview)
        } else {
            "That item was already gone, so there was nothing to delete.".to_owned()
        };
        Ok(ControlOutcome {
            side_effect: deleted,
            ..ControlOutcome::reply(reply, PendingChange::Clear)
        })
    }
}

fn push_match(
    out: &mut Vec<(f64, DeleteTarget)>,
    q: &std::collections::HashSet<String>,
    v: &Value,
    t: DeleteTarget,
) {
    let hay = meaningful_set(&haystack(v));
    let primary = meaningful_set(&t.preview);
    let s = lexical_score(q, &hay, &primary);
    if s.hit {
        out.push((s.recall, t));
    }
}

fn recall_sentence(enabled: bool) -> &'static str {
    if enabled {
        " Proactive recall is on."
    } else {
        " Proactive recall is off."
    }
}

fn choose_option(pending: Option<&PendingAction>, option: usize) -> ControlOutcome {
    match pending {
        Some(PendingAction::DeleteOptions { targets }) => {
            match option.checked_sub(1).and_then(|i| targets.get(i)) {
                Some(t) => ControlOutcome::reply(
                    confirm_prompt(t),
                    PendingChange::Set(PendingAction::Delete { target: t.clone() }),
                ),
                None => ControlOutcome::reply(
                    format!(
                        "Please pick a number from 1 to {}.\n{}",
                        targets.len(),
                        options_prompt(targets)
                    ),
                    PendingChange::Keep,
                ),
            }
        }
        _ => ControlOutcome::reply(
            "There's nothing to choose from right now.",
            PendingChange::Keep,
        ),
    }
}

// ---------------------------------------------------------------------------
// Deterministic phrase parser
// ---------------------------------------------------------------------------

fn clean(message: &str) -> String {
    let f = fold(message);
    let t = f.trim().trim_end_matches(['.', '!', '?', ' ']).trim();
    t.split_whitespace().collect::<Vec<_>>().join(" ")
}

fn number_after(text: &str) -> Option<usize> {
    static RE: OnceLock<Option<regex::Regex>> = OnceLock::new();
    let re = RE
        .get_or_init(|| {
            regex::Regex::new(r"(?:#\s*|\bnumber\s+|\boption\s+|\bitem\s+)(\d{1,4})\b").ok()
        })
        .as_ref()?;
    re.captures(text)
        .and_then(|c| c.get(1))
        .and_then(|m| m.as_str().parse().ok())
}

fn strip_prefix_any<'a>(text: &'a str, prefixes: &[String]) -> Option<&'a str> {
    let mut sorted: Vec<&String> = prefixes.iter().collect();
    sorted.sort_by_key(|p| std::cmp::Reverse(p.len()));
    sorted.into_iter().find_map(|p| {
        let rest = text.strip_prefix(p.as_str())?;
        (rest.is_empty() || rest.starts_with([' ', ':', ',']))
            .then(|| rest.trim_start_matches([' ', ':', ',']).trim())
    })
}

fn strip_politeness(text: &str) -> &str {
    let mut t = text;
    for p in [
        "please ",
        "can you ",
        "could you ",
        "hey, ",
        "hey ",
        "ok, ",
        "ok ",
        "okay, ",
        "okay ",
    ] {
        if let Some(rest) = t.strip_prefix(p) {
            t = rest;
        }
    }
    t
}

/// Parses a chat message into a memory action, deterministically.
///
/// Confirm and cancel words count only while an action is pending; with
/// pending options a number ("2", "#2", "number 2") picks one.
pub fn parse_command(message: &str, pending: Option<&PendingAction>) -> Option<MemoryAction> {
    let c = &lexicon().control;
    let text = clean(message);
    let words = text.split_whitespace().count();
    if let Some(p) = pending {
        if let PendingAction::DeleteOptions { .. } = p {
            if let Ok(n) = text.trim_start_matches('#').parse::<usize>() {
                return Some(MemoryAction::ChooseOption { option: n });
            }
            if let Some(n) = number_after(&text) {
                return Some(MemoryAction::ChooseOption { option: n });
            }
        }
        if words <= 6 {
            if c.cancel.iter().any(|w| contains_phrase(&text, w)) {
                return Some(MemoryAction::CancelPending);
            }
            if c.confirm.iter().any(|w| contains_phrase(&text, w)) {
                return Some(MemoryAction::ConfirmPending);
            }
        }
    }
    let body = strip_politeness(&text);
    if c.list.iter().any(|p| contains_phrase(body, p)) {
        return Some(MemoryAction::List);
    }
    if c.status.iter().any(|p| contains_phrase(body, p)) {
        return Some(MemoryAction::Status);
    }
    if c.recall_on.iter().any(|p| contains_phrase(body, p)) {
        return Some(MemoryAction::SetRecall { enabled: true });
    }
    if c.recall_off.iter().any(|p| contains_phrase(body, p)) {
        return Some(MemoryAction::SetRecall { enabled: false });
    }
    if let Some(rest) = strip_prefix_any(body, &c.save_prefixes) {
        // Keep the user's original casing for the preference itself.
        let original = message.trim().trim_end_matches(['.', '!', '?', ' ']);
        let tail = original
            .get(original.len().saturating_sub(rest.len())..)
            .unwrap_or(rest);
        return Some(MemoryAction::SavePreference {
            preference_text: tail.trim().to_owned(),
        });
    }
    let starts_forget = body.starts_with("forget") || body.starts_with("delete");
    if starts_forget && let Some(n) = number_after(body) {
        let kind = if c.session_words.iter().any(|w| contains_phrase(body, w)) {
            TargetKind::Session
        } else if c.rule_words.iter().any(|w| contains_phrase(body, w)) {
            TargetKind::Rule
        } else {
            TargetKind::Fact
        };
        return Some(MemoryAction::ForgetByIndex {
            target_kind: kind,
            target_index: n,
        });
    }
    if let Some(rest) = strip_prefix_any(body, &c.forget_prefixes) {
        // "forget this/that/it" refers to the current turn, not a saved item.
        if meaningful_set(rest).is_empty() || matches!(rest, "this" | "that" | "it" | "what i said")
        {
            return None;
        }
        return Some(MemoryAction::ForgetByQuery {
            query: rest.to_owned(),
        });
    }
    None
}

// ---------------------------------------------------------------------------
// Intent gate
// ---------------------------------------------------------------------------

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

// ---------------------------------------------------------------------------
// Tools
// ---------------------------------------------------------------------------

const TOOLS_JSON: &str = include_str!("../data/memory_tools.json");

/// The nine memory tools, in spec order.
pub const TOOL_NAMES: [&str; 9] = [
    "show_saved_memory",
    "show_memory_status",
    "recall_saved_memory",
    "save_response_preference",
    "set_proactive_memory_recall",
    "prepare_memory_deletion_by_index",
    "prepare_memory_deletion_by_query",
    "confirm_memory_deletion",
    "cancel_memory_deletion",
];

/// Tools whose model-initiated calls need a verified `user_quote`.
pub const INTENT_GATED_TOOLS: [&str; 4] = [
    "save_response_preference",
    "set_proactive_memory_recall",
    "prepare_memory_deletion_by_index",
    "prepare_memory_deletion_by_query",
];

/// Tools available in incognito.
pub const INCOGNITO_TOOLS: [&str; 1] = ["show_memory_status"];

/// Default and maximum result count of `recall_saved_memory`.
pub const RECALL_DEFAULT_LIMIT: usize = 5;
/// Upper bound of `recall_saved_memory`'s limit.
pub const RECALL_MAX_LIMIT: usize = 10;

/// The tool specs (OpenAI function-tool JSON) exposed in a memory mode.
pub fn tool_specs(mode: MemoryMode) -> Vec<Value> {
    let all: Vec<Value> = serde_json::from_str(TOOLS_JSON).unwrap_or_else(|e| {
        tracing::error!(error = %e, "memory tool specs failed to parse");
        Vec::new()
    });
    all.into_iter()
        .filter(|t| {
            mode == MemoryMode::Persistent
                || t.get("name")
                    .and_then(Value::as_str)
                    .is_some_and(|n| INCOGNITO_TOOLS.contains(&n))
        })
        .collect()
}

/// What a tool call sees of the turn.
#[derive(Debug, Clone, Copy)]
pub struct ToolContext<'a> {
    /// Owner id (user id, else thread id).
    pub owner_id: Option<&'a str>,
    /// Memory mode.
    pub memory_mode: MemoryMode,
    /// The current user message.
    pub current_message: &'a str,
    /// The transcript so far.
    pub history: &'a [Message],
    /// The stored pending action.
    pub pending: Option<&'a PendingAction>,
    /// The current time.
    pub now: DateTime<Utc>,
}

/// The result of one tool call, returned to the model as `output`.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolResult {
    /// Tool name.
    pub name: String,
    /// Whether the call did what it was asked.
    pub ok: bool,
    /// Whether durable memory changed.
    pub side_effect: bool,
    /// Whether calling again with the same arguments is safe.
    pub retry_safe: bool,
    /// Why it was refused, if it was.
    pub refusal: Option<Refusal>,
    /// The JSON returned to the model (includes `side_effect` and `retry_safe`).
    pub output: Value,
    /// What happens to the pending action.
    pub pending: PendingChange,
}

fn retry_safe(name: &str) -> bool {
    name != "confirm_memory_deletion"
}

fn refused(name: &str, r: Refusal, message: &str) -> ToolResult {
    let retry = retry_safe(name);
    ToolResult {
        name: name.to_owned(),
        ok: false,
        side_effect: false,
        retry_safe: retry,
        refusal: Some(r),
        output: json!({"ok": false, "error": r.as_str(), "message": message, "side_effect": false, "retry_safe": retry}),
        pending: PendingChange::Keep,
    }
}

fn from_outcome(name: &str, o: ControlOutcome) -> ToolResult {
    let retry = retry_safe(name);
    let mut output =
        json!({"ok": true, "message": o.reply, "side_effect": o.side_effect, "retry_safe": retry});
    if !o.data.is_null() {
        output["data"] = o.data;
    }
    if let PendingChange::Set(p) = &o.pending {
        output["pending"] = p.to_json();
    }
    ToolResult {
        name: name.to_owned(),
        ok: true,
        side_effect: o.side_effect,
        retry_safe: retry,
        refusal: None,
        output,
        pending: o.pending,
    }
}

fn tool_action(name: &str, args: &Value) -> Result<MemoryAction, Refusal> {
    let s = |k: &str| {
        args.get(k)
            .and_then(Value::as_str)
            .map(str::to_owned)
            .ok_or(Refusal::InvalidArguments)
    };
    Ok(match name {
        "show_saved_memory" => MemoryAction::List,
        "show_memory_status" => MemoryAction::Status,
        "save_response_preference" => MemoryAction::SavePreference {
            preference_text: s("preference_text")?,
        },
        "set_proactive_memory_recall" => MemoryAction::SetRecall {
            enabled: args
                .get("enabled")
                .and_then(Value::as_bool)
                .ok_or(Refusal::InvalidArguments)?,
        },
        "prepare_memory_deletion_by_index" => MemoryAction::ForgetByIndex {
            target_kind: serde_json::from_value(
                args.get("target_kind").cloned().unwrap_or(Value::Null),
            )
            .map_err(|_| Refusal::InvalidArguments)?,
            target_index: args
                .get("target_index")
                .and_then(Value::as_u64)
                .and_then(|n| usize::try_from(n).ok())
                .ok_or(Refusal::InvalidArguments)?,
        },
        "prepare_memory_deletion_by_query" => MemoryAction::ForgetByQuery { query: s("query")? },
        "confirm_memory_deletion" => MemoryAction::ConfirmPending,
        "cancel_memory_deletion" => MemoryAction::CancelPending,
        _ => return Err(Refusal::UnknownTool),
    })
}

/// Executes one memory tool call. Never fails: problems become a refused
/// result with a code and no side effect.
pub async fn dispatch_tool(
    service: &MemoryControlService,
    embedder: Option<&dyn Embedder>,
    name: &str,
    args: &Value,
    ctx: &ToolContext<'_>,
) -> ToolResult {
    if !TOOL_NAMES.contains(&name) {
        return refused(name, Refusal::UnknownTool, "Unknown memory tool.");
    }
    let control = ControlContext {
        owner_id: ctx.owner_id,
        memory_mode: ctx.memory_mode,
        now: ctx.now,
    };
    if ctx.memory_mode == MemoryMode::Incognito {
        if name == "show_memory_status" {
            return match service
                .handle(&control, MemoryAction::Status, ctx.pending)
                .await
            {
                Ok(o) => from_outcome(name, o),
                Err(_) => refused(name, Refusal::ActionFailed, "Memory status is unavailable."),
            };
        }
        return refused(name, Refusal::PersistentMemoryUnavailable, GUEST_MODE_REPLY);
    }
    let Some(owner) = ctx.owner_id.map(str::trim).filter(|s| !s.is_empty()) else {
        return refused(
            name,
            Refusal::OwnerOrSessionMissing,
            "No user or session to act on.",
        );
    };
    if INTENT_GATED_TOOLS.contains(&name) {
        let quote = args.get("user_quote").and_then(Value::as_str);
        if verify_user_quote(quote, ctx.current_message, ctx.history).is_err() {
            return refused(
                name,
                Refusal::UserIntentNotVerified,
                "Only do this when the user asked for it; quote their own recent words in user_quote.",
            );
        }
    }
    if name == "recall_saved_memory" {
        return recall(service, embedder, owner, args, ctx.now).await;
    }
    let action = match tool_action(name, args) {
        Ok(a) => a,
        Err(r) => return refused(name, r, "Missing or malformed arguments."),
    };
    match service.handle(&control, action, ctx.pending).await {
        Ok(o) => from_outcome(name, o),
        Err(e) => {
            tracing::info!(tool = name, error = %e, "memory tool failed");
            let message = match e {
                ControlError::IndexOutOfRange {
                    kind, available, ..
                } => {
                    format!("There is no such {}; there are {available}.", kind.noun())
                }
                ControlError::BlankPreference => "The preference text is empty.".to_owned(),
                ControlError::BlankQuery => "The query is empty.".to_owned(),
                _ => "The memory action failed.".to_owned(),
            };
            refused(name, Refusal::ActionFailed, &message)
        }
    }
}

async fn recall(
    service: &MemoryControlService,
    embedder: Option<&dyn Embedder>,
    owner: &str,
    args: &Value,
    now: DateTime<Utc>,
) -> ToolResult {
    let name = "recall_saved_memory";
    let query = args
        .get("query")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .trim();
    if query.is_empty() {
        return refused(name, Refusal::EmptyQuery, "Say what to look for.");
    }
    let b = service.backend();
    match load_profile(b, owner).await {
        Ok(p) if !p.proactive_recall_enabled => {
            return refused(
                name,
                Refusal::ProactiveRecallDisabled,
                "Proactive recall is off; the user can turn it on if they want past sessions brought up.",
            );
        }
        Ok(_) => {}
        Err(_) => return refused(name, Refusal::ActionFailed, "Memory is unavailable."),
    }
    let limit = args
        .get("limit")
        .and_then(Value::as_u64)
        .map_or(RECALL_DEFAULT_LIMIT, |n| {
            usize::try_from(n).unwrap_or(RECALL_MAX_LIMIT)
        })
        .clamp(1, RECALL_MAX_LIMIT);
    let req = RetrievalRequest {
        owner_id: owner,
        query,
        first_turn_of_session: false,
        now,
    };
    match search_layers(b, embedder, &req, limit, limit).await {
        Ok(hits) => {
            let items: Vec<Value> = hits
                .semantic
                .iter()
                .chain(&hits.episodic)
                .take(limit)
                .map(|e| json!({"kind": e.kind, "text": e.text}))
                .collect();
            from_outcome(
                name,
                ControlOutcome {
                    reply: format!("Found {} saved item(s).", items.len()),
                    pending: PendingChange::Keep,
                    side_effect: false,
                    data: json!({"items": items, "retrieval_path": hits.path.as_str()}),
                },
            )
        }
        Err(_) => refused(name, Refusal::ActionFailed, "Memory is unavailable."),
    }
}

#[cfg(test)]
mod tests {
    use chrono::Duration;

    use super::*;
    use crate::backend::{InMemoryBackend, MemoryRecord};
    use crate::types::*;

    fn fact(quote: &str, obj: &str) -> SemanticFact {
        SemanticFact::new(
            NewFact {
                category: FactCategory::Relationship,
                subject: EntityRef::user(),
                predicate: Predicate::Knows,
                object: EntityRef::new(EntityType::Person, obj).unwrap(),
                evidence_quote: quote.into(),
                confidence: 0.9,
                source_session_id: None,
                source_turn_index: None,
                write_timing: WriteTiming::Promotion,
                write_reason: "t".into(),
            },
            Utc::now(),
        )
        .unwrap()
    }

    async fn seeded() -> (MemoryControlService, Arc<InMemoryBackend>) {
        let b = Arc::new(InMemoryBackend::new());
        for (q, o) in [
            ("My sister Sarah lives in Leeds", "Sarah"),
            ("My sister Anna is a nurse", "Anna"),
            ("I run to cope", "running"),
        ] {
            b.put(MemoryRecord::from_fact("u", &fact(q, o), None))
                .await
                .unwrap();
        }
        let now = Utc::now();
        let arc = SessionArc::new(
            NewSessionArc {
                session_id: "s1".into(),
                started_at: now - Duration::minutes(5),
                ended_at: now,
                turn_count: 2,
                primary_themes: vec!["work".into()],
                summary: "Talked about a stressful week at work".into(),
                mood_arc: MoodArc::default(),
                open_loops: vec![],
                resolved_threads: vec![],
                approach_used: None,
                approach_context: None,
                crisis_level_max: 0,
            },
            now,
        )
        .unwrap();
        b.put(MemoryRecord::from_arc("u", &arc, None))
            .await
            .unwrap();
        (MemoryControlService::new(b.clone()), b)
    }

    fn ctx(mode: MemoryMode) -> ControlContext<'static> {
        ControlContext {
            owner_id: Some("u"),
            memory_mode: mode,
            now: Utc::now(),
        }
    }

    #[tokio::test]
    async fn incognito_list_is_guest_mode_without_pending() {
        // inventory §13 item 24
        let (svc, _) = seeded().await;
        for action in [
            MemoryAction::List,
            MemoryAction::Status,
            MemoryAction::SetRecall { enabled: true },
        ] {
            let o = svc
                .handle(&ctx(MemoryMode::Incognito), action, None)
                .await
                .unwrap();
            assert!(o.reply.contains("guest mode"));
            assert_eq!(o.pending, PendingChange::Clear);
            assert!(!o.side_effect);
        }
        assert!(
            !load_profile(svc.backend(), "u")
                .await
                .unwrap()
                .proactive_recall_enabled
        );
    }

    #[tokio::test]
    async fn set_recall_without_enabled_is_an_error() {
        // item 25
        let (svc, _) = seeded().await;
        assert!(matches!(
            MemoryAction::from_json(json!({"type": "set_recall"})),
            Err(ControlError::InvalidAction)
        ));
        assert!(MemoryAction::from_json(json!({"type": "explode"})).is_err());
        assert!(
            !load_profile(svc.backend(), "u")
                .await
                .unwrap()
                .proactive_recall_enabled
        );
        let a = MemoryAction::from_json(json!({"type": "set_recall", "enabled": true})).unwrap();
        let o = svc
            .handle(&ctx(MemoryMode::Persistent), a, None)
            .await
            .unwrap();
        assert!(o.side_effect);
        assert!(
            load_profile(svc.backend(), "u")
                .await
                .unwrap()
                .proactive_recall_enabled
        );
    }

    #[tokio::test]
    async fn save_preference_table() {
        // items 26, 27 (deterministic normalization replaces the LLM)
        let (svc, _) = seeded().await;
        for blank in ["", "   ", "I prefer ."] {
            let r = svc
                .handle(
                    &ctx(MemoryMode::Persistent),
                    MemoryAction::SavePreference {
                        preference_text: blank.into(),
                    },
                    None,
                )
                .await;
            assert!(matches!(r, Err(ControlError::BlankPreference)), "{blank:?}");
        }
        assert_eq!(
            load_profile(svc.backend(), "u").await.unwrap().rules.len(),
            0,
            "no blank rule saved"
        );
        let o = svc
            .handle(
                &ctx(MemoryMode::Persistent),
                MemoryAction::SavePreference {
                    preference_text: "short answers".into(),
                },
                None,
            )
            .await
            .unwrap();
        assert_eq!(o.reply, "Saved: You prefer short answers.");
        assert!(o.side_effect);
        let again = svc
            .handle(
                &ctx(MemoryMode::Persistent),
                MemoryAction::SavePreference {
                    preference_text: "Short answers!".into(),
                },
                None,
            )
            .await
            .unwrap();
        assert!(!again.side_effect && again.reply.starts_with("Already saved"));
        let p = load_profile(svc.backend(), "u").await.unwrap();
        assert_eq!(p.rules.len(), 1);
        assert_eq!(p.rules[0].source, RuleSource::ExplicitUser);
    }

    #[tokio::test]
    async fn save_preference_with_model_table() {
        use crate::assist::testing::ScriptedPolicyModel;
        use crate::assist::{PolicyModelError, PreferenceReply, RuleAction, RuleDecision};
        let ok = |r: &str| Ok(PreferenceReply { rule: r.to_owned() });
        // (user text, model answer, saved rule, rule_path)
        type Case = (
            &'static str,
            Result<PreferenceReply, PolicyModelError>,
            &'static str,
            &'static str,
        );
        let cases: Vec<Case> = vec![
            (
                "you call me Sam",
                ok("You prefer to be called Sam."),
                "You prefer to be called Sam.",
                "model",
            ),
            (
                "short answers",
                ok("You prefer short answers"),
                "You prefer short answers.",
                "model",
            ),
            (
                "short answers",
                ok("Keep it short."),
                "You prefer short answers.",
                "fallback",
            ),
            (
                "short answers",
                ok("You prefer no hotlines."),
                "You prefer short answers.",
                "fallback",
            ),
            (
                "short answers",
                Err(PolicyModelError::Timeout),
                "You prefer short answers.",
                "fallback",
            ),
        ];
        for (text, answer, want, path) in cases {
            let b = Arc::new(InMemoryBackend::new());
            let model = Arc::new(ScriptedPolicyModel::default());
            model.prefs.lock().unwrap().push_back(answer);
            let svc = MemoryControlService::new(b.clone()).with_policy_model(model.clone());
            let o = svc
                .handle(
                    &ctx(MemoryMode::Persistent),
                    MemoryAction::SavePreference {
                        preference_text: text.into(),
                    },
                    None,
                )
                .await
                .unwrap();
            assert_eq!(o.reply, format!("Saved: {want}"), "{text}");
            assert_eq!(o.data["rule_path"], path, "{text}");
            let p = load_profile(b.as_ref(), "u").await.unwrap();
            assert_eq!(p.rules.len(), 1);
            assert_eq!(p.rules[0].rule, want);
            assert_eq!(p.rules[0].write_timing, WriteTiming::Immediate);
            assert_eq!(
                model.calls(),
                1,
                "no active rules: no reconciliation question"
            );
        }

        // With an active rule the model reconciles: replace retires it.
        let b = Arc::new(InMemoryBackend::new());
        let model = Arc::new(ScriptedPolicyModel::default());
        model.prefs.lock().unwrap().extend([
            ok("You prefer short answers."),
            ok("You prefer longer answers."),
        ]);
        model.rules.lock().unwrap().push_back(Ok(RuleDecision {
            action: RuleAction::Replace,
            target_index: Some(0),
            confidence: opencouch_core::Confidence::High,
        }));
        let svc = MemoryControlService::new(b.clone()).with_policy_model(model.clone());
        for text in ["short answers", "longer answers"] {
            svc.handle(
                &ctx(MemoryMode::Persistent),
                MemoryAction::SavePreference {
                    preference_text: text.into(),
                },
                None,
            )
            .await
            .unwrap();
        }
        let p = load_profile(b.as_ref(), "u").await.unwrap();
        let active: Vec<&str> = p.active_rules().map(|r| r.rule.as_str()).collect();
        assert_eq!(active, ["You prefer longer answers."]);
        assert_eq!(p.archived_rules.len(), 1);
        assert_eq!(model.calls(), 3);
        // Blank text never reaches the model.
        let r = svc
            .handle(
                &ctx(MemoryMode::Persistent),
                MemoryAction::SavePreference {
                    preference_text: "  ".into(),
                },
                None,
            )
            .await;
        assert!(matches!(r, Err(ControlError::BlankPreference)));
        assert_eq!(model.calls(), 3);
    }

    #[tokio::test]
    async fn safety_weakening_preference_is_not_saved() {
        let (svc, _) = seeded().await;
        for text in ["no hotlines please", "you never give me crisis resources"] {
            let o = svc
                .handle(
                    &ctx(MemoryMode::Persistent),
                    MemoryAction::SavePreference {
                        preference_text: text.into(),
                    },
                    None,
                )
                .await
                .unwrap();
            assert_eq!(o.reply, SAFETY_PREFERENCE_REPLY, "{text}");
            assert!(!o.side_effect);
        }
        assert!(
            load_profile(svc.backend(), "u")
                .await
                .unwrap()
                .rules
                .is_empty()
        );
    }

    #[test]
    fn normalize_preference_table() {
        let cases = [
            ("short answers", "You prefer short answers."),
            ("I prefer short answers.", "You prefer short answers."),
            (
                "that I prefer gentle check-ins",
                "You prefer gentle check-ins.",
            ),
            ("You prefer no emojis", "You prefer no emojis."),
            (
                "Examples from my own life",
                "You prefer examples from your own life.",
            ),
            ("CBT exercises", "You prefer CBT exercises."),
            // Requests addressed to the assistant.
            (
                "keep answers short",
                "You prefer that I keep answers short.",
            ),
            (
                "Please always keep answers short.",
                "You prefer that I always keep answers short.",
            ),
            ("call me Sam", "You prefer that I call you Sam."),
            ("don't use jargon", "You prefer that I don't use jargon."),
            (
                "remind me to breathe when I panic",
                "You prefer that I remind you to breathe when you panic.",
            ),
            ("be direct with me", "You prefer that I be direct with you."),
            // A noun phrase that merely starts like a verb stays as it is.
            ("calm music", "You prefer calm music."),
        ];
        for (input, want) in cases {
            assert_eq!(normalize_preference(input).unwrap(), want, "{input}");
        }
        assert!(normalize_preference(&"x".repeat(300)).is_err());
    }

    #[tokio::test]
    async fn forget_by_query_options_choose_confirm() {
        // items 28, 29, 30, 31
        let (svc, b) = seeded().await;
        let c = ctx(MemoryMode::Persistent);
        let o = svc
            .handle(
                &c,
                MemoryAction::ForgetByQuery {
                    query: "my sister".into(),
                },
                None,
            )
            .await
            .unwrap();
        assert!(o.reply.starts_with("Which one"));
        let PendingChange::Set(options @ PendingAction::DeleteOptions { .. }) = o.pending else {
            panic!("options expected")
        };
        // Stored as JSON between turns.
        let stored = options.to_json();
        let options = PendingAction::from_json(&stored).unwrap();
        // Invalid number keeps the options and asks again.
        let o = svc
            .handle(&c, MemoryAction::ChooseOption { option: 7 }, Some(&options))
            .await
            .unwrap();
        assert_eq!(o.pending, PendingChange::Keep);
        assert!(o.reply.contains("Which one"));
        // Picking 2 stages that item; nothing deleted yet.
        let o = svc
            .handle(&c, MemoryAction::ChooseOption { option: 2 }, Some(&options))
            .await
            .unwrap();
        let PendingChange::Set(single @ PendingAction::Delete { .. }) = o.pending else {
            panic!("delete expected")
        };
        assert!(o.reply.contains("Anna"));
        assert_eq!(
            active_facts(b.as_ref(), "u").await.unwrap().len(),
            3,
            "nothing deleted before confirm"
        );
        // Confirm deletes and clears.
        let o = svc
            .handle(&c, MemoryAction::ConfirmPending, Some(&single))
            .await
            .unwrap();
        assert!(o.side_effect);
        assert_eq!(o.pending, PendingChange::Clear);
        let left: Vec<String> = active_facts(b.as_ref(), "u")
            .await
            .unwrap()
            .iter()
            .map(|f| f.object.identifier.clone())
            .collect();
        assert_eq!(left, vec!["Sarah", "running"]);
    }

    #[tokio::test]
    async fn forget_by_index_and_cancel() {
        let (svc, b) = seeded().await;
        let c = ctx(MemoryMode::Persistent);
        let err = svc
            .handle(
                &c,
                MemoryAction::ForgetByIndex {
                    target_kind: TargetKind::Fact,
                    target_index: 4,
                },
                None,
            )
            .await;
        assert!(matches!(
            err,
            Err(ControlError::IndexOutOfRange { available: 3, .. })
        ));
        let err = svc
            .handle(
                &c,
                MemoryAction::ForgetByIndex {
                    target_kind: TargetKind::Fact,
                    target_index: 0,
                },
                None,
            )
            .await;
        assert!(matches!(err, Err(ControlError::IndexOutOfRange { .. })));
        let o = svc
            .handle(
                &c,
                MemoryAction::ForgetByIndex {
                    target_kind: TargetKind::Session,
                    target_index: 1,
                },
                None,
            )
            .await
            .unwrap();
        let PendingChange::Set(p) = o.pending else {
            panic!()
        };
        let o = svc
            .handle(&c, MemoryAction::CancelPending, Some(&p))
            .await
            .unwrap();
        assert_eq!(o.pending, PendingChange::Clear);
        assert_eq!(visible_arcs(b.as_ref(), "u").await.unwrap().len(), 1);
        let o = svc
            .handle(&c, MemoryAction::ConfirmPending, Some(&p))
            .await
            .unwrap();
        assert!(o.side_effect);
        assert!(visible_arcs(b.as_ref(), "u").await.unwrap().is_empty());
        // A pending action of another owner is refused.
        let other = ControlContext {
            owner_id: Some("intruder"),
            ..c
        };
        assert!(matches!(
            svc.handle(&other, MemoryAction::ConfirmPending, Some(&p))
                .await,
            Err(ControlError::ForeignPending)
        ));
    }

    #[tokio::test]
    async fn rules_can_be_deleted_by_query() {
        let (svc, _) = seeded().await;
        let c = ctx(MemoryMode::Persistent);
        svc.handle(
            &c,
            MemoryAction::SavePreference {
                preference_text: "short answers".into(),
            },
            None,
        )
        .await
        .unwrap();
        let o = svc
            .handle(
                &c,
                MemoryAction::ForgetByQuery {
                    query: "short answers".into(),
                },
                None,
            )
            .await
            .unwrap();
        let PendingChange::Set(p) = o.pending else {
            panic!()
        };
        svc.handle(&c, MemoryAction::ConfirmPending, Some(&p))
            .await
            .unwrap();
        assert!(
            load_profile(svc.backend(), "u")
                .await
                .unwrap()
                .rules
                .is_empty()
        );
        let o = svc.handle(&c, MemoryAction::List, None).await.unwrap();
        assert!(o.reply.contains("1. My sister Sarah"));
        assert!(o.reply.contains("Sessions:"));
        let o = svc.handle(&c, MemoryAction::Status, None).await.unwrap();
        assert!(
            o.reply
                .contains("3 facts, 1 session summaries, 0 preferences")
        );
        let o = svc
            .handle(
                &c,
                MemoryAction::ForgetByQuery {
                    query: "quantum physics".into(),
                },
                None,
            )
            .await
            .unwrap();
        assert_eq!(o.pending, PendingChange::Keep);
    }

    #[test]
    fn parser_table() {
        let options = PendingAction::DeleteOptions { targets: vec![] };
        let single = PendingAction::Delete {
            target: DeleteTarget {
                kind: TargetKind::Fact,
                namespace: "u:semantic".into(),
                key: "k".into(),
                rule_id: None,
                preview: "p".into(),
            },
        };
        use MemoryAction as A;
        let cases: Vec<(&str, Option<&PendingAction>, Option<MemoryAction>)> = vec![
            ("yes", Some(&single), Some(A::ConfirmPending)),
            ("Yeah, delete it.", Some(&single), Some(A::ConfirmPending)),
            ("please do", Some(&single), Some(A::ConfirmPending)),
            ("no", Some(&single), Some(A::CancelPending)),
            ("never mind", Some(&single), Some(A::CancelPending)),
            ("No, don't!", Some(&single), Some(A::CancelPending)),
            ("yes", None, None),
            ("no", None, None),
            ("2", Some(&options), Some(A::ChooseOption { option: 2 })),
            (
                "Delete number 2",
                Some(&options),
                Some(A::ChooseOption { option: 2 }),
            ),
            ("#3", Some(&options), Some(A::ChooseOption { option: 3 })),
            ("What do you remember about me?", None, Some(A::List)),
            ("show my memory", None, Some(A::List)),
            ("memory status", None, Some(A::Status)),
            ("turn recall on", None, Some(A::SetRecall { enabled: true })),
            (
                "please turn recall off",
                None,
                Some(A::SetRecall { enabled: false }),
            ),
            (
                "Remember that I prefer short answers.",
                None,
                Some(A::SavePreference {
                    preference_text: "short answers".into(),
                }),
            ),
            (
                "forget #2",
                None,
                Some(A::ForgetByIndex {
                    target_kind: TargetKind::Fact,
                    target_index: 2,
                }),
            ),
            (
                "Forget session number 1",
                None,
                Some(A::ForgetByIndex {
                    target_kind: TargetKind::Session,
                    target_index: 1,
                }),
            ),
            (
                "delete episode #1",
                None,
                Some(A::ForgetByIndex {
                    target_kind: TargetKind::Session,
                    target_index: 1,
                }),
            ),
            (
                "forget preference number 3",
                None,
                Some(A::ForgetByIndex {
                    target_kind: TargetKind::Rule,
                    target_index: 3,
                }),
            ),
            (
                "forget about my sister",
                None,
                Some(A::ForgetByQuery {
                    query: "my sister".into(),
                }),
            ),
            (
                "Please forget my job stuff",
                None,
                Some(A::ForgetByQuery {
                    query: "job stuff".into(),
                }),
            ),
            ("forget this", None, None),
            ("I had a rough day, no energy", None, None),
            ("I can't forget what she said", None, None),
        ];
        for (msg, pending, want) in cases {
            assert_eq!(parse_command(msg, pending), want, "{msg}");
        }
    }

    #[test]
    fn quote_gate_table() {
        let history = vec![
            Message::user("Please, keep answers SHORT!"),
            Message::user("x"),
            Message::user("y"),
            Message::user("z"),
        ];
        let cases = [
            (Some("keep answers short"), "hello there", false), // 4 user turns back: outside the last 3
            (Some("keep answers short"), "ok, keep answers short.", true),
            (
                Some("turn   recall   ON"),
                "could you turn recall on?",
                true,
            ),
            (Some("short"), "short short short", false), // too short
            (None, "anything at all", false),
            (Some("delete my sister"), "tell me a joke", false),
        ];
        for (quote, current, ok) in cases {
            assert_eq!(
                verify_user_quote(quote, current, &history).is_ok(),
                ok,
                "{quote:?} / {current}"
            );
        }
        let recent = vec![
            Message::user("Please, keep answers SHORT!"),
            Message::assistant("Sure, keep answers short"),
        ];
        assert!(verify_user_quote(Some("keep answers short"), "thanks", &recent).is_ok());
        assert!(
            verify_user_quote(Some("sure keep answers"), "thanks", &recent).is_err(),
            "assistant words don't count"
        );
        assert_eq!(normalize_quote("  Don't—STOP, now! "), "don t stop now");
    }

    fn tctx<'a>(
        mode: MemoryMode,
        owner: Option<&'a str>,
        msg: &'a str,
        history: &'a [Message],
    ) -> ToolContext<'a> {
        ToolContext {
            owner_id: owner,
            memory_mode: mode,
            current_message: msg,
            history,
            pending: None,
            now: Utc::now(),
        }
    }

    #[test]
    fn tool_specs_are_consistent() {
        let all = tool_specs(MemoryMode::Persistent);
        let names: Vec<&str> = all.iter().filter_map(|t| t["name"].as_str()).collect();
        assert_eq!(names, TOOL_NAMES.to_vec());
        for t in &all {
            assert_eq!(t["type"], "function");
            assert!(t["description"].as_str().is_some_and(|d| d.len() > 10));
            let required: Vec<&str> = t["parameters"]["required"]
                .as_array()
                .unwrap()
                .iter()
                .filter_map(Value::as_str)
                .collect();
            let gated = INTENT_GATED_TOOLS.contains(&t["name"].as_str().unwrap());
            assert_eq!(required.contains(&"user_quote"), gated, "{}", t["name"]);
            for r in required {
                assert!(
                    t["parameters"]["properties"].get(r).is_some(),
                    "{} requires unknown {r}",
                    t["name"]
                );
            }
        }
        let inc = tool_specs(MemoryMode::Incognito);
        assert_eq!(inc.len(), 1);
        assert_eq!(inc[0]["name"], "show_memory_status");
    }

    #[tokio::test]
    async fn gated_tool_without_verified_quote_is_refused() {
        // item 32
        let (svc, b) = seeded().await;
        let msg = "could you delete what you know about my sister";
        let cases = [
            (
                "save_response_preference",
                json!({"preference_text": "short answers", "user_quote": "keep it short please"}),
            ),
            (
                "set_proactive_memory_recall",
                json!({"enabled": true, "user_quote": "turn recall on"}),
            ),
            (
                "prepare_memory_deletion_by_index",
                json!({"target_kind": "fact", "target_index": 1}),
            ),
            (
                "prepare_memory_deletion_by_query",
                json!({"query": "sister", "user_quote": "sister"}),
            ),
        ];
        for (name, args) in cases {
            let r = dispatch_tool(
                &svc,
                None,
                name,
                &args,
                &tctx(MemoryMode::Persistent, Some("u"), msg, &[]),
            )
            .await;
            assert_eq!(r.refusal, Some(Refusal::UserIntentNotVerified), "{name}");
            assert!(!r.side_effect && r.pending == PendingChange::Keep);
            assert_eq!(r.output["error"], "user_intent_not_verified");
        }
        assert!(
            !load_profile(b.as_ref(), "u")
                .await
                .unwrap()
                .proactive_recall_enabled
        );
        // With a real quote it proceeds (prepare only stages).
        let args = json!({"query": "sister", "user_quote": "delete what you know about my sister"});
        let r = dispatch_tool(
            &svc,
            None,
            "prepare_memory_deletion_by_query",
            &args,
            &tctx(MemoryMode::Persistent, Some("u"), msg, &[]),
        )
        .await;
        assert!(r.ok && !r.side_effect && r.retry_safe);
        assert!(matches!(
            r.pending,
            PendingChange::Set(PendingAction::DeleteOptions { .. })
        ));
        // Missing owner.
        let r = dispatch_tool(
            &svc,
            None,
            "prepare_memory_deletion_by_query",
            &args,
            &tctx(MemoryMode::Persistent, None, msg, &[]),
        )
        .await;
        assert_eq!(r.refusal, Some(Refusal::OwnerOrSessionMissing));
    }

    #[tokio::test]
    async fn incognito_tools() {
        // item 33
        let (svc, _) = seeded().await;
        let c = tctx(
            MemoryMode::Incognito,
            Some("u"),
            "what do you remember",
            &[],
        );
        for name in TOOL_NAMES.iter().filter(|n| **n != "show_memory_status") {
            let r = dispatch_tool(
                &svc,
                None,
                name,
                &json!({"user_quote": "what do you remember"}),
                &c,
            )
            .await;
            assert_eq!(
                r.refusal,
                Some(Refusal::PersistentMemoryUnavailable),
                "{name}"
            );
        }
        let r = dispatch_tool(&svc, None, "show_memory_status", &json!({}), &c).await;
        assert!(r.ok);
        assert_eq!(r.output["data"]["memory_mode"], "incognito");
        assert_eq!(r.output["side_effect"], false);
    }

    #[tokio::test]
    async fn recall_tool_refusals_and_limit() {
        // item 34
        let (svc, _) = seeded().await;
        let c = tctx(
            MemoryMode::Persistent,
            Some("u"),
            "what about my sister",
            &[],
        );
        let r = dispatch_tool(
            &svc,
            None,
            "recall_saved_memory",
            &json!({"query": "sister"}),
            &c,
        )
        .await;
        assert_eq!(r.refusal, Some(Refusal::ProactiveRecallDisabled));
        svc.handle(
            &ctx(MemoryMode::Persistent),
            MemoryAction::SetRecall { enabled: true },
            None,
        )
        .await
        .unwrap();
        let r = dispatch_tool(
            &svc,
            None,
            "recall_saved_memory",
            &json!({"query": "  "}),
            &c,
        )
        .await;
        assert_eq!(r.refusal, Some(Refusal::EmptyQuery));
        let r = dispatch_tool(
            &svc,
            None,
            "recall_saved_memory",
            &json!({"query": "sister", "limit": 1}),
            &c,
        )
        .await;
        assert!(r.ok && r.retry_safe && !r.side_effect);
        assert_eq!(r.output["data"]["items"].as_array().unwrap().len(), 1);
        let r = dispatch_tool(
            &svc,
            None,
            "recall_saved_memory",
            &json!({"query": "sister", "limit": 999}),
            &c,
        )
        .await;
        assert_eq!(r.output["data"]["items"].as_array().unwrap().len(), 2);
    }

    #[tokio::test]
    async fn confirm_tool_is_not_retry_safe_and_deletes() {
        let (svc, b) = seeded().await;
        let msg = "please forget fact number 3";
        let c = tctx(MemoryMode::Persistent, Some("u"), msg, &[]);
        let args =
            json!({"target_kind": "fact", "target_index": 3, "user_quote": "forget fact number 3"});
        let r = dispatch_tool(&svc, None, "prepare_memory_deletion_by_index", &args, &c).await;
        let PendingChange::Set(p) = r.pending else {
            panic!("pending expected")
        };
        let c2 = ToolContext {
            pending: Some(&p),
            ..c
        };
        let r = dispatch_tool(&svc, None, "confirm_memory_deletion", &json!({}), &c2).await;
        assert!(r.ok && r.side_effect && !r.retry_safe);
        assert_eq!(r.pending, PendingChange::Clear);
        assert_eq!(active_facts(b.as_ref(), "u").await.unwrap().len(), 2);
        let r = dispatch_tool(&svc, None, "prepare_memory_deletion_by_index", &json!({"target_kind": "fact", "target_index": 9, "user_quote": "forget fact number 3"}), &c).await;
        assert_eq!(r.refusal, Some(Refusal::ActionFailed));
        let r = dispatch_tool(&svc, None, "no_such_tool", &json!({}), &c).await;
        assert_eq!(r.refusal, Some(Refusal::UnknownTool));
        assert_eq!(PendingChange::Clear.resolve(Some(json!(1))), None);
        assert_eq!(PendingChange::Keep.resolve(Some(json!(1))), Some(json!(1)));
    }
}
