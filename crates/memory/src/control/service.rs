//! [`MemoryControlService`]: lists, status, the recall switch, saved
//! preferences and two-step deletion over the store's [`MemoryStore`], shared by
//! chat commands, the HTTP API and the tools.

use std::collections::HashSet;
use std::sync::Arc;

use chrono::{DateTime, Utc};
use opencouch_core::MemoryMode;
use opencouch_store::MemoryStore;
use serde_json::{Value, json};

use super::action::{
    ControlContext, ControlError, ControlOutcome, DeleteTarget, GUEST_MODE_REPLY,
    INCOGNITO_SAVE_REPLY, MemoryAction, MemorySnapshot, PendingAction, PendingChange, TargetKind,
};
use super::parse::{IMPERATIVE_OPENERS, reads_as_english, second_person};
use crate::assist::{PolicyModel, validate_preference_rule};
use crate::backend::{
    MemoryError, PROFILE_RECORD_ID, active_facts, fact_record, load_profile, save_profile, upsert,
    visible_arcs,
};
use crate::policy::{
    CandidateBody, RuleOutcome, add_rule, clip_quote, extract_candidates, is_fragile_self_belief,
    is_safety_conflict,
};
use crate::retrieval::{haystack, lexical_score};
use crate::text::meaningful_set;
use crate::types::{
    EntityRef, EntityType, FactCategory, MAX_QUOTE_CHARS, NewFact, Predicate, ProceduralRule,
    RuleSource, SemanticFact, TypeError, WriteTiming, normalize_space_lower,
};

fn namespace(owner: &str, kind: TargetKind) -> String {
    format!("{owner}:{}", kind.memory_kind())
}

fn target(owner: &str, kind: TargetKind, id: &str, preview: &str) -> DeleteTarget {
    let (key, rule_id) = match kind {
        TargetKind::Rule => (PROFILE_RECORD_ID.to_owned(), Some(id.to_owned())),
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

pub(super) fn options_prompt(targets: &[DeleteTarget]) -> String {
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

/// The reply when an explicit save states a painful belief about the
/// person ("remember that I'm worthless"): it is not kept as a fact.
pub const FRAGILE_FACT_REPLY: &str = "I'd rather not keep that as a fact about you: it sounds like a painful thing to \
     believe about yourself, and I don't want to hold on to it as if it were simply true. If you'd like, we can talk about it.";

/// The fact an explicit save writes: the person's words as the evidence,
/// with the triple the deterministic extractor reads in them when it reads
/// one ("my sister is called Sarah" → you KNOW Person "Sarah"), else a
/// context fact whose object is the words themselves.
fn explicit_fact(words: &str) -> Result<NewFact, ControlError> {
    let read = extract_candidates(words, 0)
        .into_iter()
        .find_map(|c| match c.body {
            CandidateBody::Semantic(s) => Some(s),
            CandidateBody::Procedural(_) => None,
        });
    let (category, predicate, object) = match read {
        Some(s) if s.predicate != Predicate::MentionedIn => (s.category, s.predicate, s.object),
        _ => (
            FactCategory::Context,
            Predicate::Experienced,
            EntityRef::new(EntityType::Event, words)?,
        ),
    };
    Ok(NewFact {
        category,
        subject: EntityRef::user(),
        predicate,
        object,
        evidence_quote: words.to_owned(),
        confidence: 1.0,
        source_session_id: None,
        source_turn_index: None,
        write_timing: WriteTiming::Immediate,
        write_reason: "explicit_user_request".to_owned(),
    })
}

/// Maximum options offered for one query.
pub const MAX_DELETE_OPTIONS: usize = 5;

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
        let opener = lower.split(' ').next().unwrap_or_default();
        let imperative = IMPERATIVE_OPENERS.contains(&opener);
        // An instruction to me speaks of my answers: "keep your answers
        // short" → "… that I keep my answers short".
        let swapped: Vec<String> = t
            .split(' ')
            .map(|w| match w.to_lowercase().as_str() {
                "my" => "your".to_owned(),
                "me" => "you".to_owned(),
                "myself" => "yourself".to_owned(),
                "i" => "you".to_owned(),
                "i'm" => "you're".to_owned(),
                "your" if imperative => "my".to_owned(),
                "yours" if imperative => "mine".to_owned(),
                "yourself" if imperative => "myself".to_owned(),
                _ => w.to_owned(),
            })
            .collect();
        let body = swapped.join(" ");
        let lead = if imperative {
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
    store: Arc<dyn MemoryStore>,
    policy_model: Option<Arc<dyn PolicyModel>>,
}

impl MemoryControlService {
    /// A service over a memory store (deterministic: no policy model).
    pub fn new(store: Arc<dyn MemoryStore>) -> Self {
        MemoryControlService {
            store,
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

    /// The memory store.
    pub fn store(&self) -> &dyn MemoryStore {
        self.store.as_ref()
    }

    /// Everything visible to an owner.
    ///
    /// # Errors
    /// [`ControlError::Backend`].
    pub async fn snapshot(&self, owner: &str) -> Result<MemorySnapshot, ControlError> {
        let b = self.store.as_ref();
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
            let reply = match action {
                MemoryAction::SaveFact { .. } | MemoryAction::SavePreference { .. } => {
                    INCOGNITO_SAVE_REPLY
                }
                _ => GUEST_MODE_REPLY,
            };
            let mut out = ControlOutcome::reply(reply, PendingChange::Clear);
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
            MemoryAction::SaveFact { fact_text } => {
                self.save_fact(owner, &fact_text, ctx.now).await
            }
            MemoryAction::Find { query } => self.find(owner, &query).await,
            MemoryAction::UndoSave { target } => {
                if target.namespace != namespace(owner, target.kind) {
                    return Err(ControlError::ForeignPending);
                }
                let deleted = self.delete_target(owner, &target, ctx.now).await?;
                let reply = if deleted {
                    format!("Done, I've forgotten that: \"{}\".", target.preview)
                } else {
                    "That was already gone, so there was nothing to undo.".to_owned()
                };
                Ok(ControlOutcome {
                    side_effect: deleted,
                    data: json!({"undone": deleted}),
                    ..ControlOutcome::reply(reply, PendingChange::Keep)
                })
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
        let b = self.store.as_ref();
        let mut profile = load_profile(b, owner).await?;
        let changed = profile.proactive_recall_enabled != enabled;
        if changed {
            profile.proactive_recall_enabled = enabled;
            save_profile(b, owner, &profile, now).await?;
        }
        let reply = if enabled {
            "Proactive recall is on: I may bring up things from earlier sessions when they seem relevant."
        } else {
            "Proactive recall is off: I won't bring up earlier sessions unless you ask. \
             Memory is still kept, and yours to see or delete; to keep nothing from a \
             conversation, use incognito."
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
        if is_safety_conflict(&rule_text) || is_safety_conflict(text) {
            return Ok(ControlOutcome {
                data: json!({"saved": false, "reason": "safety_conflict"}),
                ..ControlOutcome::reply(SAFETY_PREFERENCE_REPLY, PendingChange::Keep)
            });
        }
        let b = self.store.as_ref();
        let mut profile = load_profile(b, owner).await?;
        let quote = clip_quote(text);
        let rule = ProceduralRule::new(
            &rule_text,
            vec![quote],
            RuleSource::ExplicitUser,
            WriteTiming::Immediate,
            "explicit_user_request",
            now,
        )?;
        let rule_id = rule.id.clone();
        let (outcome, _) = add_rule(&mut profile, rule, self.policy_model.as_deref(), now).await;
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
                    undo: Some(target(owner, TargetKind::Rule, &rule_id, &rule_text)),
                    ..ControlOutcome::reply(reply, PendingChange::Keep)
                })
            }
        }
    }

    /// Saves a fact the person asked to be remembered, in their own words,
    /// at once (an explicit request, parsed by the app: not a candidate a
    /// model or the extractor proposed, which wait for session end). A
    /// fragile negative self-belief ("I'm a failure") is not kept as a fact
    /// about them; an exact duplicate is not saved twice.
    async fn save_fact(
        &self,
        owner: &str,
        text: &str,
        now: DateTime<Utc>,
    ) -> Result<ControlOutcome, ControlError> {
        let words = clip_quote(text.trim().trim_end_matches(['.', '!', '?', ' ']));
        if words.is_empty() {
            return Err(ControlError::BlankFact);
        }
        if is_fragile_self_belief(&words) {
            return Ok(ControlOutcome {
                data: json!({"saved": false, "reason": "fragile_self_belief"}),
                ..ControlOutcome::reply(FRAGILE_FACT_REPLY, PendingChange::Keep)
            });
        }
        let b = self.store.as_ref();
        let existing = active_facts(b, owner).await?;
        let norm = normalize_space_lower(&words);
        if let Some(dup) = existing
            .iter()
            .find(|f| normalize_space_lower(&f.evidence_quote) == norm)
        {
            return Ok(ControlOutcome {
                data: json!({"saved": false, "duplicate": true, "fact": dup.preview()}),
                ..ControlOutcome::reply(
                    format!("I already have that saved: \"{}\".", dup.preview()),
                    PendingChange::Keep,
                )
            });
        }
        let fact = SemanticFact::new(explicit_fact(&words)?, now)?;
        upsert(b, &fact_record(owner, &fact, None))
            .await
            .map_err(MemoryError::from)?;
        let preview = fact.preview();
        Ok(ControlOutcome {
            side_effect: true,
            data: json!({"saved": true, "kind": "fact", "fact": preview}),
            undo: Some(target(owner, TargetKind::Fact, &fact.id, &preview)),
            ..ControlOutcome::reply(
                if reads_as_english(&words) {
                    format!("I'll remember that {}.", second_person(&words))
                } else {
                    format!("I'll remember: \"{words}\".")
                },
                PendingChange::Keep,
            )
        })
    }

    /// The saved items that match `query` (facts, session summaries and
    /// preferences; the whole list when the query names only the person).
    async fn find(&self, owner: &str, query: &str) -> Result<ControlOutcome, ControlError> {
        let q = meaningful_set(query);
        if q.is_empty() {
            return self.list(owner).await;
        }
        let snap = self.snapshot(owner).await?;
        let b = self.store.as_ref();
        let mut found: Vec<(f64, TargetKind, String)> = Vec::new();
        let mut consider = |kind: TargetKind, value: &Value, preview: &str| {
            let hay = meaningful_set(&haystack(value));
            let s = lexical_score(&q, &hay, &meaningful_set(preview));
            if s.hit {
                found.push((s.recall, kind, preview.to_owned()));
            }
        };
        for f in active_facts(b, owner).await? {
            let v = serde_json::to_value(&f).unwrap_or(Value::Null);
            consider(TargetKind::Fact, &v, &f.preview());
        }
        for (_, summary) in &snap.sessions {
            consider(TargetKind::Session, &json!({"text": summary}), summary);
        }
        for (_, rule) in &snap.rules {
            consider(TargetKind::Rule, &json!({"text": rule}), rule);
        }
        found.sort_by(|a, b| b.0.total_cmp(&a.0));
        let about = second_person(query.trim().trim_end_matches(['.', '!', '?', ' ']));
        let reply = if found.is_empty() {
            format!(
                "I don't have anything saved about {about}. Say \"what do you remember about me?\" to see everything I've saved."
            )
        } else {
            let mut r = format!("Here is what I have saved about {about}:");
            for (i, (_, kind, text)) in found.iter().enumerate() {
                r.push_str(&format!("\n{}. ({}) {text}", i + 1, kind.noun()));
            }
            r
        };
        let items: Vec<Value> = found
            .iter()
            .map(|(_, k, t)| json!({"kind": k, "text": t}))
            .collect();
        Ok(ControlOutcome {
            data: json!({"items": items}),
            ..ControlOutcome::reply(reply, PendingChange::Keep)
        })
    }

    /// Deletes one saved item (a fact or session record, or a rule of the
    /// profile). Returns whether anything was deleted.
    async fn delete_target(
        &self,
        owner: &str,
        t: &DeleteTarget,
        now: DateTime<Utc>,
    ) -> Result<bool, ControlError> {
        let b = self.store.as_ref();
        Ok(match (t.kind, &t.rule_id) {
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
            (kind, _) => b
                .delete(owner, kind.memory_kind(), &t.key)
                .await
                .map_err(MemoryError::from)?,
        })
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
        let b = self.store.as_ref();
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
        let deleted = self.delete_target(owner, t, now).await?;
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

fn push_match(out: &mut Vec<(f64, DeleteTarget)>, q: &HashSet<String>, v: &Value, t: DeleteTarget) {
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
