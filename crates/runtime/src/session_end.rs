//! Session end as pure steps: whose memory the session belongs to, which
//! transcript entries are this session's, the facts a summary reads, and
//! what the person is told. The session driver (`crate::session`) does the
//! I/O around them in order.

use chrono::{DateTime, Utc};
use opencouch_core::{Approach, Message, ThreadState};
use opencouch_store::{ActiveSession, SessionWrite, TranscriptEntry, TurnCommit};
use serde::{Deserialize, Serialize};

use crate::summary::SessionFacts;

/// The most transcript entries a session summary reads.
pub(crate) const SUMMARY_WINDOW: usize = 400;

/// The public view of a session arc.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SessionSummary {
    pub summary: String,
    pub themes: Vec<String>,
    pub mood_opened: String,
    pub mood_closed: String,
    pub turn_count: u64,
    pub open_loops: Vec<String>,
    pub resolved_threads: Vec<String>,
}

impl From<&opencouch_memory::SessionArc> for SessionSummary {
    fn from(a: &opencouch_memory::SessionArc) -> Self {
        SessionSummary {
            summary: a.summary.clone(),
            themes: a.primary_themes.clone(),
            mood_opened: a.mood_arc.opened.clone(),
            mood_closed: a.mood_arc.closed.clone(),
            turn_count: a.turn_count,
            open_loops: a.open_loops.clone(),
            resolved_threads: a.resolved_threads.clone(),
        }
    }
}

/// What ending a session did.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EndSessionOutcome {
    /// Whether an active session was finalized.
    pub finalized: bool,
    /// The session arc, when one was written.
    pub summary: Option<SessionSummary>,
    /// A sentence for the person.
    pub detail: String,
    /// Whether feedback was recorded.
    pub feedback_recorded: bool,
}

impl EndSessionOutcome {
    /// Nothing was finalized, for the reason `detail` gives.
    pub(crate) fn nothing(detail: &str) -> Self {
        EndSessionOutcome {
            finalized: false,
            summary: None,
            detail: detail.to_owned(),
            feedback_recorded: false,
        }
    }

    /// A finalized session.
    pub(crate) fn finalized(
        summary: Option<SessionSummary>,
        incognito: bool,
        feedback_recorded: bool,
    ) -> Self {
        EndSessionOutcome {
            detail: end_detail(summary.is_some(), incognito).to_owned(),
            finalized: true,
            summary,
            feedback_recorded,
        }
    }
}

/// The sentence the person reads when a session ends.
pub(crate) fn end_detail(summarized: bool, incognito: bool) -> &'static str {
    match (summarized, incognito) {
        (true, _) => "Session ended and summarized.",
        (false, true) => "Session ended. Incognito sessions are not summarized or saved.",
        (false, false) => "Session ended. It was too short to summarize.",
    }
}

/// Whose memory the session belongs to: the user, else the thread.
pub(crate) fn owner_of(state: &ThreadState) -> String {
    state
        .user_id
        .clone()
        .filter(|u| !u.is_empty())
        .unwrap_or_else(|| state.thread_id.clone())
}

/// How many transcript entries the summary asks the store for.
pub(crate) fn transcript_request(state: &ThreadState, active: &ActiveSession) -> usize {
    let count = state
        .message_count
        .saturating_sub(active.transcript_start_index) as usize;
    count.min(SUMMARY_WINDOW)
}

/// This session's messages among the entries read (older sessions' entries
/// are dropped).
pub(crate) fn session_transcript(
    entries: Vec<TranscriptEntry>,
    active: &ActiveSession,
) -> Vec<Message> {
    entries
        .into_iter()
        .filter(|e| e.index >= active.transcript_start_index)
        .map(|e| e.message)
        .collect()
}

/// The approach the session used most, if any.
pub(crate) fn dominant_approach(state: &ThreadState) -> Option<Approach> {
    state
        .session_progress
        .approach_counts
        .iter()
        .max_by_key(|(_, n)| **n)
        .map(|(a, _)| *a)
}

/// What the summary reads about the session.
pub(crate) fn session_facts<'a>(
    state: &ThreadState,
    active: &ActiveSession,
    session_id: &str,
    transcript: &'a [Message],
    now: DateTime<Utc>,
) -> SessionFacts<'a> {
    SessionFacts {
        session_id: session_id.to_owned(),
        started_at: active.started_at,
        ended_at: now,
        transcript,
        crisis_level_max: active
            .max_crisis_level
            .max(state.session_progress.max_crisis_level),
        dominant_approach: dominant_approach(state),
        exercises_done: exercise_names(state.session_progress.exercises_completed.iter()),
        exercises_partial: exercise_names(
            state
                .session_progress
                .extra
                .get(crate::exercise::PARTIAL_KEY)
                .and_then(serde_json::Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(serde_json::Value::as_str),
        ),
    }
}

/// The display names (lower case, each once) of catalog exercise ids.
fn exercise_names<'a>(ids: impl Iterator<Item = impl AsRef<str> + 'a>) -> Vec<String> {
    let catalog = opencouch_exercises::Catalog::builtin();
    let mut out: Vec<String> = Vec::new();
    for id in ids {
        if let Some(e) = catalog.get(id.as_ref()) {
            let name = e.display_name.to_lowercase();
            if !out.contains(&name) {
                out.push(name);
            }
        }
    }
    out
}

/// The commit that ends a session: the state with its session-scoped
/// fields cleared and the active-session row removed.
pub(crate) fn closing_commit(state: &ThreadState, now: DateTime<Utc>) -> TurnCommit {
    TurnCommit {
        state: state.clone(),
        append: Vec::new(),
        session: SessionWrite::Clear,
        at: now,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use opencouch_core::Channel;

    #[test]
    fn end_detail_table() {
        let cases = [
            (true, false, "Session ended and summarized."),
            (true, true, "Session ended and summarized."),
            (
                false,
                true,
                "Session ended. Incognito sessions are not summarized or saved.",
            ),
            (
                false,
                false,
                "Session ended. It was too short to summarize.",
            ),
        ];
        for (summarized, incognito, want) in cases {
            assert_eq!(end_detail(summarized, incognito), want);
        }
    }

    #[test]
    fn owner_is_the_user_else_the_thread() {
        let mut state = ThreadState::new("t1", Channel::Test);
        let cases: [(Option<&str>, &str); 3] = [(Some("u1"), "u1"), (Some(""), "t1"), (None, "t1")];
        for (user, want) in cases {
            state.user_id = user.map(str::to_owned);
            assert_eq!(owner_of(&state), want, "{user:?}");
        }
    }

    #[test]
    fn transcript_keeps_only_this_sessions_entries() {
        let now = Utc::now();
        let active = ActiveSession::start("t1", now, 4);
        let mut state = ThreadState::new("t1", Channel::Test);
        state.message_count = 7;
        assert_eq!(transcript_request(&state, &active), 3);
        state.message_count = 5_000;
        assert_eq!(transcript_request(&state, &active), SUMMARY_WINDOW);
        let entries: Vec<TranscriptEntry> = (2..7)
            .map(|i| TranscriptEntry {
                index: i,
                message: Message::user(format!("m{i}")),
            })
            .collect();
        let kept: Vec<String> = session_transcript(entries, &active)
            .into_iter()
            .map(|m| m.content)
            .collect();
        assert_eq!(kept, ["m4", "m5", "m6"]);
    }

    #[test]
    fn dominant_approach_is_the_most_used() {
        let mut state = ThreadState::new("t1", Channel::Test);
        assert_eq!(dominant_approach(&state), None);
        state
            .session_progress
            .approach_counts
            .insert(Approach::Cbt, 1);
        state
            .session_progress
            .approach_counts
            .insert(Approach::Act, 3);
        assert_eq!(dominant_approach(&state), Some(Approach::Act));
    }
}
