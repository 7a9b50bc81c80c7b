//! Export: everything kept for an owner, as one [`ExportDocument`] (the
//! JSON schema [`EXPORT_SCHEMA`]) or its Markdown rendering.
//!
//! What is left out, on purpose: crisis-log rows (anonymous audit counts
//! with no text), embedding vectors (numbers derived from texts that are
//! exported), revision counters and the memory documents' internal
//! bookkeeping (policy version, write reason). Everything else kept for the
//! owner is in it.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use opencouch_memory::MemoryKind;
use opencouch_memory::backend::{decode_arc, decode_fact};
use opencouch_memory::types::{ProceduralProfile, ProceduralRule};
use opencouch_store::{MemoryRecord, TranscriptEntry};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{OwnerDataError, check_owner};
use crate::service::api::Service;
use crate::service::error::ServiceError;
use crate::thread_id::unscoped_thread_id;

/// The schema name and version of [`ExportDocument`]. A change that could
/// break a reader (a field removed, renamed or given another meaning)
/// bumps the number; new fields may be added within a version.
pub const EXPORT_SCHEMA: &str = "opencouch.export/1";

/// What to export: whose data, in which format.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExportRequest {
    /// The owner id (a channel's authenticated user, the cli's `--user`).
    pub owner: String,
    /// JSON or Markdown.
    pub format: ExportFormat,
}

/// The two export formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ExportFormat {
    /// [`ExportDocument`] as pretty-printed JSON.
    #[default]
    Json,
    /// A readable Markdown rendering of the same document.
    Markdown,
}

impl ExportFormat {
    /// `json`, or `md` / `markdown`; `None` for anything else.
    pub fn parse(name: &str) -> Option<Self> {
        match name {
            "json" => Some(ExportFormat::Json),
            "md" | "markdown" => Some(ExportFormat::Markdown),
            _ => None,
        }
    }

    /// The media type of the body (UTF-8).
    pub fn media_type(self) -> &'static str {
        match self {
            ExportFormat::Json => "application/json",
            ExportFormat::Markdown => "text/markdown; charset=utf-8",
        }
    }

    /// The file name extension.
    pub fn extension(self) -> &'static str {
        match self {
            ExportFormat::Json => "json",
            ExportFormat::Markdown => "md",
        }
    }
}

/// An export ready to hand over: the body, its media type and a file name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExportFile {
    /// The format of the body.
    pub format: ExportFormat,
    /// `application/json` or `text/markdown; charset=utf-8`.
    pub media_type: &'static str,
    /// `opencouch-export-OWNER-YYYY-MM-DD.json` (or `.md`), the owner
    /// reduced to letters, digits, `-` and `_`.
    pub filename: String,
    /// The document.
    pub body: String,
}

/// Everything kept for one owner ([`EXPORT_SCHEMA`]). Times are RFC 3339
/// UTC; lists are oldest first unless said otherwise.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ExportDocument {
    /// Always [`EXPORT_SCHEMA`] for documents of this version.
    pub schema: String,
    /// When the export was made.
    pub exported_at: DateTime<Utc>,
    /// The owner id.
    pub owner: String,
    /// Conversations, by thread id (byte order).
    pub threads: Vec<ExportThread>,
    /// What is remembered across sessions.
    pub memory: ExportMemory,
    /// Mood at the start and end of each past session.
    pub moods: Vec<ExportMood>,
    /// Guided exercises completed.
    pub exercises: ExportExercises,
    /// Thumbs given at the end of sessions.
    pub feedback: Vec<ExportFeedback>,
    /// The personal safety plan, when one is kept (as stored).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub safety_plan: Option<serde_json::Value>,
}

/// One conversation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ExportThread {
    /// The thread id as the owner uses it (without the `OWNER:` scope).
    pub thread_id: String,
    /// The id as stored.
    pub stored_thread_id: String,
    /// Where it was held (`web`, `test` for the terminal, …).
    pub channel: String,
    /// User turns ever taken.
    pub turn_count: u64,
    /// Every message, both sides, oldest first.
    pub messages: Vec<ExportMessage>,
    /// The session still open on the thread, if any.
    pub open_session: Option<ExportOpenSession>,
    /// The guided exercise in progress (catalog id), if any.
    pub exercise_in_progress: Option<String>,
    /// The thread's state snapshot as stored (routing, session progress,
    /// crisis episode, …), for completeness: its shape belongs to the
    /// runtime and is not covered by the schema version.
    pub state: Value,
}

/// One transcript message.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ExportMessage {
    /// Position in the thread, from 0.
    pub index: u64,
    /// `user` or `assistant` (or `system`).
    pub role: String,
    /// The text.
    pub content: String,
    /// When it was written.
    pub at: Option<DateTime<Utc>>,
    /// Assistant messages: the route that answered.
    pub route: Option<String>,
    /// Assistant messages: the reply style.
    pub response_style: Option<String>,
    /// User messages: the crisis level (0–3) the safety check gave.
    pub crisis_level: Option<u8>,
}

/// A session not ended yet.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ExportOpenSession {
    /// When it started.
    pub started_at: DateTime<Utc>,
    /// The last turn.
    pub last_active_at: Option<DateTime<Utc>>,
    /// Memory candidates held until the session ends, as stored.
    pub held_memory: Value,
}

/// The three memory layers.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct ExportMemory {
    /// Facts (semantic memory), retired ones included.
    pub facts: Vec<ExportFact>,
    /// Session summaries (episodic memory), hidden ones included.
    pub sessions: Vec<ExportSession>,
    /// Style preferences (procedural memory).
    pub preferences: ExportPreferences,
    /// Stored memory records that could not be read as their layer, as
    /// stored (normally empty).
    pub other_records: Vec<ExportOtherRecord>,
}

/// One fact.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ExportFact {
    /// Stable id.
    pub id: String,
    /// The person's own words it rests on.
    pub text: String,
    /// Category (`relationship`, `preference`, …).
    pub category: String,
    /// Subject of the triple (`user`, a name).
    pub subject: String,
    /// Predicate (`KNOWS`, `PREFERS`, …).
    pub predicate: String,
    /// Object of the triple.
    pub object: String,
    /// Confidence in [0, 1].
    pub confidence: f32,
    /// When it was saved.
    pub created_at: DateTime<Utc>,
    /// When retrieval last used it.
    pub last_referenced_at: Option<DateTime<Utc>>,
    /// Whether it is in use (visible, not retired, not replaced).
    pub active: bool,
    /// Whether the person sees it in memory listings.
    pub visible: bool,
    /// When it was retired.
    pub dormant_at: Option<DateTime<Utc>>,
    /// The fact that replaced it.
    pub superseded_by: Option<String>,
}

/// One past session's summary.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ExportSession {
    /// Stable id.
    pub id: String,
    /// Session start.
    pub started_at: DateTime<Utc>,
    /// Session end.
    pub ended_at: DateTime<Utc>,
    /// User turns.
    pub turn_count: u64,
    /// The summary.
    pub summary: String,
    /// Up to three themes.
    pub themes: Vec<String>,
    /// Mood at the start.
    pub mood_opened: String,
    /// Mood at the end.
    pub mood_closed: String,
    /// Threads left open.
    pub open_loops: Vec<String>,
    /// Threads resolved.
    pub resolved_threads: Vec<String>,
    /// The dominant approach, if any.
    pub approach: Option<String>,
    /// Guided exercises completed in the session (catalog ids).
    pub exercises_completed: Vec<String>,
    /// Whether the person sees it in memory listings.
    pub visible: bool,
}

/// The style profile.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct ExportPreferences {
    /// Whether past sessions may be brought up unprompted.
    pub proactive_recall: bool,
    /// Current rules.
    pub rules: Vec<ExportRule>,
    /// Retired rules.
    pub archived_rules: Vec<ExportRule>,
}

/// One style rule.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ExportRule {
    /// Stable id.
    pub id: String,
    /// "You prefer …".
    pub rule: String,
    /// The person's words it rests on.
    pub evidence: Vec<String>,
    /// When it was added.
    pub added_at: DateTime<Utc>,
    /// `explicit_user`, `consolidation` or `manual`.
    pub source: String,
    /// Not retired and not replaced.
    pub active: bool,
}

/// A memory record of no known shape.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ExportOtherRecord {
    /// `semantic`, `episodic` or `procedural`.
    pub kind: String,
    /// Record id.
    pub id: String,
    /// When it was written.
    pub created_at: DateTime<Utc>,
    /// The stored document.
    pub value: Value,
}

/// One past session's mood.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ExportMood {
    /// Session start.
    pub started_at: DateTime<Utc>,
    /// Session end.
    pub ended_at: DateTime<Utc>,
    /// Mood at the start.
    pub opened: String,
    /// Mood at the end.
    pub closed: String,
}

/// Guided exercises.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct ExportExercises {
    /// Times each exercise was completed, most often first (ties by id).
    pub completed: Vec<ExportExerciseCount>,
    /// Every completion: ended sessions oldest first, then open sessions.
    pub history: Vec<ExportExerciseEntry>,
}

/// How often one exercise was completed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ExportExerciseCount {
    /// Catalog id.
    pub id: String,
    /// Display name.
    pub name: String,
    /// Completions.
    pub count: u64,
}

/// One completion.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ExportExerciseEntry {
    /// Catalog id.
    pub id: String,
    /// Display name.
    pub name: String,
    /// The end of the session it was completed in; `null` while that
    /// session is still open.
    pub session_ended_at: Option<DateTime<Utc>>,
    /// The thread of a session still open (as in [`ExportThread::thread_id`]).
    pub thread_id: Option<String>,
}

/// Feedback given at the end of a session.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ExportFeedback {
    /// When it was given.
    pub recorded_at: DateTime<Utc>,
    /// `positive`, `negative` or `skip`.
    pub label: String,
    /// User turns in the session.
    pub turn_count_at_end: u64,
    /// Where: `cli_end`, `cli_exit`, `api_end` or `voice_end`.
    pub source: String,
}

/// The display name of an exercise id (its id, spaced, when unknown).
pub(super) fn exercise_name(id: &str) -> String {
    opencouch_exercises::Catalog::builtin()
        .get(id)
        .map_or_else(|| id.replace('_', " "), |e| e.display_name.clone())
}

fn message(e: TranscriptEntry) -> ExportMessage {
    let m = e.message;
    ExportMessage {
        index: e.index,
        role: m.role.as_str().to_owned(),
        content: m.content,
        at: m.at,
        route: m.route.map(|r| r.as_str().to_owned()),
        response_style: m.response_style.map(|s| s.as_str().to_owned()),
        crisis_level: m.crisis_level,
    }
}

fn other(r: &MemoryRecord) -> ExportOtherRecord {
    ExportOtherRecord {
        kind: r.kind.as_str().to_owned(),
        id: r.id.clone(),
        created_at: r.created_at,
        value: r.value.clone(),
    }
}

fn rule(r: &ProceduralRule) -> ExportRule {
    ExportRule {
        id: r.id.clone(),
        rule: r.rule.clone(),
        evidence: r.evidence.clone(),
        added_at: r.added_at,
        source: r.source.as_str().to_owned(),
        active: r.is_active(),
    }
}

/// The memory layers from the owner's records (every record, in insertion
/// order; one that does not decode goes to `other_records`).
fn memory(
    facts: &[MemoryRecord],
    arcs: &[MemoryRecord],
    profiles: &[MemoryRecord],
) -> ExportMemory {
    let mut out = ExportMemory::default();
    for r in facts {
        match decode_fact(r) {
            Ok(f) => out.facts.push(ExportFact {
                active: f.is_active(),
                id: f.id,
                text: f.evidence_quote,
                category: f.category.as_str().to_owned(),
                subject: f.subject.identifier,
                predicate: f.predicate.as_str().to_owned(),
                object: f.object.identifier,
                confidence: f.confidence,
                created_at: f.created_at,
                last_referenced_at: f.last_referenced_at,
                visible: f.user_visible,
                dormant_at: f.dormant_at,
                superseded_by: f.superseded_by,
            }),
            Err(_) => out.other_records.push(other(r)),
        }
    }
    for r in arcs {
        match decode_arc(r) {
            Ok(a) => out.sessions.push(ExportSession {
                id: a.id,
                started_at: a.started_at,
                ended_at: a.ended_at,
                turn_count: a.turn_count,
                summary: a.summary,
                themes: a.primary_themes,
                mood_opened: a.mood_arc.opened,
                mood_closed: a.mood_arc.closed,
                open_loops: a.open_loops,
                resolved_threads: a.resolved_threads,
                approach: a.approach_used.map(|x| x.as_str().to_owned()),
                exercises_completed: a.exercises_completed,
                visible: a.user_visible,
            }),
            Err(_) => out.other_records.push(other(r)),
        }
    }
    out.sessions.sort_by_key(|s| s.started_at);
    for r in profiles {
        match serde_json::from_value::<ProceduralProfile>(r.value.clone()) {
            Ok(p) if r.id == opencouch_memory::backend::PROFILE_RECORD_ID => {
                out.preferences = ExportPreferences {
                    proactive_recall: p.proactive_recall_enabled,
                    rules: p.rules.iter().map(rule).collect(),
                    archived_rules: p.archived_rules.iter().map(rule).collect(),
                };
            }
            _ => out.other_records.push(other(r)),
        }
    }
    out
}

/// Moods and exercises of ended sessions (from the summaries) and of the
/// sessions still open (from the threads' progress).
fn progress(
    sessions: &[ExportSession],
    open: &[(String, Vec<String>)],
) -> (Vec<ExportMood>, ExportExercises) {
    let moods = sessions
        .iter()
        .map(|s| ExportMood {
            started_at: s.started_at,
            ended_at: s.ended_at,
            opened: s.mood_opened.clone(),
            closed: s.mood_closed.clone(),
        })
        .collect();
    let mut history = Vec::new();
    for s in sessions {
        for id in &s.exercises_completed {
            history.push(ExportExerciseEntry {
                id: id.clone(),
                name: exercise_name(id),
                session_ended_at: Some(s.ended_at),
                thread_id: None,
            });
        }
    }
    for (thread, ids) in open {
        for id in ids {
            history.push(ExportExerciseEntry {
                id: id.clone(),
                name: exercise_name(id),
                session_ended_at: None,
                thread_id: Some(thread.clone()),
            });
        }
    }
    let mut counts: BTreeMap<&str, u64> = BTreeMap::new();
    for e in &history {
        *counts.entry(e.id.as_str()).or_default() += 1;
    }
    let mut completed: Vec<ExportExerciseCount> = counts
        .into_iter()
        .map(|(id, count)| ExportExerciseCount {
            id: id.to_owned(),
            name: exercise_name(id),
            count,
        })
        .collect();
    completed.sort_by(|a, b| b.count.cmp(&a.count).then_with(|| a.id.cmp(&b.id)));
    (moods, ExportExercises { completed, history })
}

/// `opencouch-export-OWNER-DAY.EXT` with the owner reduced to a safe name.
pub(super) fn filename(owner: &str, at: DateTime<Utc>, format: ExportFormat) -> String {
    let mut slug: String = owner
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .take(32)
        .collect();
    if slug.trim_matches('_').is_empty() {
        slug = "owner".to_owned();
    }
    format!(
        "opencouch-export-{slug}-{}.{}",
        at.format("%Y-%m-%d"),
        format.extension()
    )
}

impl Service {
    /// Everything kept for `owner`, as one document.
    ///
    /// # Errors
    /// [`OwnerDataError::InvalidOwner`], storage failures.
    pub async fn export_document(&self, owner: &str) -> Result<ExportDocument, ServiceError> {
        check_owner(owner)?;
        let stores = self.persistent.stores();
        let mut threads = Vec::new();
        let mut open_exercises = Vec::new();
        for stored in stores.owners.owner_threads(owner).await? {
            // Deleted between the listing and the read: not exported.
            let Some(snap) = stores.threads.load(&stored, 0).await? else {
                continue;
            };
            let history = stores.threads.history(&stored, usize::MAX, None).await?;
            let open_session = stores
                .sessions
                .get(&stored)
                .await?
                .map(|s| ExportOpenSession {
                    started_at: s.started_at,
                    last_active_at: s.last_active_at,
                    held_memory: s.session_buffer,
                });
            let state = snap.state;
            let thread_id = unscoped_thread_id(owner, &stored)
                .unwrap_or(&stored)
                .to_owned();
            if !state.session_progress.exercises_completed.is_empty() {
                open_exercises.push((
                    thread_id.clone(),
                    state.session_progress.exercises_completed.clone(),
                ));
            }
            threads.push(ExportThread {
                stored_thread_id: stored.clone(),
                channel: state.channel.as_str().to_owned(),
                turn_count: state.turn_count,
                messages: history.into_iter().map(message).collect(),
                open_session,
                exercise_in_progress: state
                    .exercise_state
                    .as_ref()
                    .map(|e| e.exercise_type.clone()),
                state: serde_json::to_value(&state).map_err(|_| OwnerDataError::Encode)?,
                thread_id,
            });
        }
        let memory_store = &stores.memory;
        let memory = memory(
            &memory_store.list(owner, MemoryKind::Semantic).await?,
            &memory_store.list(owner, MemoryKind::Episodic).await?,
            &memory_store.list(owner, MemoryKind::Procedural).await?,
        );
        let (moods, exercises) = progress(&memory.sessions, &open_exercises);
        let feedback = stores
            .owners
            .owner_feedback(owner)
            .await?
            .into_iter()
            .map(|f| ExportFeedback {
                recorded_at: f.recorded_at,
                label: f.label.as_str().to_owned(),
                turn_count_at_end: f.turn_count_at_end,
                source: f.source.as_str().to_owned(),
            })
            .collect();
        let safety_plan = stores
            .safety_plans
            .safety_plan(owner)
            .await?
            .map(|r| r.value);
        Ok(ExportDocument {
            safety_plan,
            schema: EXPORT_SCHEMA.to_owned(),
            exported_at: Utc::now(),
            owner: owner.to_owned(),
            threads,
            memory,
            moods,
            exercises,
            feedback,
        })
    }
}

#[cfg(test)]
mod tests {
    use chrono::TimeZone;

    use super::*;

    #[test]
    fn formats_parse_and_name_their_files() {
        assert_eq!(ExportFormat::parse("json"), Some(ExportFormat::Json));
        assert_eq!(ExportFormat::parse("md"), Some(ExportFormat::Markdown));
        assert_eq!(
            ExportFormat::parse("markdown"),
            Some(ExportFormat::Markdown)
        );
        assert_eq!(ExportFormat::parse("JSON"), None);
        assert_eq!(ExportFormat::parse("pdf"), None);
        let at = Utc
            .with_ymd_and_hms(2026, 5, 4, 3, 2, 1)
            .single()
            .expect("time");
        assert_eq!(
            filename("alice", at, ExportFormat::Json),
            "opencouch-export-alice-2026-05-04.json"
        );
        assert_eq!(
            filename("cli:dé fault\"", at, ExportFormat::Markdown),
            "opencouch-export-cli_d__fault_-2026-05-04.md"
        );
        assert_eq!(
            filename(":::", at, ExportFormat::Json),
            "opencouch-export-owner-2026-05-04.json"
        );
    }

    #[test]
    fn exercises_count_ended_and_open_sessions() {
        let at = Utc
            .with_ymd_and_hms(2026, 1, 1, 0, 0, 0)
            .single()
            .expect("time");
        let session = |ex: &[&str]| ExportSession {
            id: "a".into(),
            started_at: at,
            ended_at: at,
            turn_count: 1,
            summary: "s".into(),
            themes: vec![],
            mood_opened: "low".into(),
            mood_closed: "calmer".into(),
            open_loops: vec![],
            resolved_threads: vec![],
            approach: None,
            exercises_completed: ex.iter().map(|s| (*s).to_owned()).collect(),
            visible: true,
        };
        let (moods, ex) = progress(
            &[
                session(&["box_breathing"]),
                session(&["b", "box_breathing"]),
            ],
            &[("t1".into(), vec!["b".into()])],
        );
        assert_eq!(moods.len(), 2);
        assert_eq!(ex.history.len(), 4);
        let counts: Vec<(&str, u64)> = ex
            .completed
            .iter()
            .map(|c| (c.id.as_str(), c.count))
            .collect();
        assert_eq!(counts, vec![("b", 2), ("box_breathing", 2)]);
        assert_eq!(ex.history[3].thread_id.as_deref(), Some("t1"));
        assert_eq!(ex.history[3].session_ended_at, None);
    }
}
