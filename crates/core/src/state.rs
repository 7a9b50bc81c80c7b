//! The persisted per-thread state and its merge rules.
//!
//! The snapshot is kept small on purpose: the transcript is *not* part of it
//! (stores append transcript entries as rows and hand the runtime only the
//! recent window a turn needs), so a turn's storage cost does not grow with
//! the length of the conversation.
//!
//! Merge rules ([`ThreadState::apply`]):
//! * scalar fields: last write wins (`Some` replaces);
//! * `session_progress`, `diagnostics`: merge by key, new values win;
//! * `exercise_state`: replaced as a whole, or cleared by [`ExerciseUpdate::Clear`];
//! * transcript entries are appended by the store, never rewritten.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::crisis::{CrisisAssessment, CrisisLevel};
use crate::diagnostics::Diagnostics;
use crate::enums::{Approach, Channel, Confidence, ResponseStyle, Route};
use crate::exercise::ExerciseState;
// Owned by `exercise` (the lower module); re-exported so the
// `state::ExerciseUpdate` path still works.
pub use crate::exercise::ExerciseUpdate;
use crate::string_enum;

string_enum! {
    /// What the person is doing in this session.
    pub enum SessionIntent: "session_intent" {
        Vent = "vent", Understand = "understand", Reflect = "reflect", Work = "work",
        Regulate = "regulate", Repair = "repair", Close = "close",
    }
}

string_enum! {
    /// Conversation arc within a session.
    pub enum SessionStage: "session_stage" {
        Opening = "opening", Deepening = "deepening", Stabilizing = "stabilizing", Closing = "closing",
    }
}

string_enum! {
    /// Whether the person has said yes to guidance or techniques.
    pub enum GuidancePermission: "guidance_permission" { Unknown = "unknown", NotYet = "not_yet", Granted = "granted" }
}

string_enum! {
    /// The flow a thread is inside of, across turns.
    pub enum ActiveFlow: "active_flow" {
        None = "none", GuidedExercise = "guided_exercise", PendingMemoryAction = "pending_memory_action",
    }
}

string_enum! {
    /// What triage decided to do with an active flow.
    pub enum FlowAction: "active_flow_action" {
        None = "none", Start = "start", Continue = "continue", Preserve = "preserve", Resume = "resume", Clear = "clear",
    }
}

string_enum! {
    /// Whether triage asked for a clarification, and how strongly.
    pub enum ClarificationKind: "clarification_kind" { None = "none", Blocking = "blocking", Soft = "soft" }
}

/// Session-scoped progress, reset when a session ends.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SessionProgress {
    /// User turns in the current session.
    #[serde(default)]
    pub turn_count: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub intent: Option<SessionIntent>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stage: Option<SessionStage>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub guidance_permission: Option<GuidancePermission>,
    /// Highest crisis level seen in this session.
    #[serde(default)]
    pub max_crisis_level: u8,
    /// How often each approach was used (feeds the session summary).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub approach_counts: BTreeMap<Approach, u32>,
    /// Exercise ids completed in this session, in order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub exercises_completed: Vec<String>,
    /// Whether the "replies are template-based" notice was shown.
    #[serde(default)]
    pub deterministic_notice_shown: bool,
    /// Unknown keys from newer writers are kept.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// Triage bookkeeping kept between turns.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TurnLifecycle {
    #[serde(default = "none_flow")]
    pub active_flow: ActiveFlow,
    #[serde(default = "none_action")]
    pub action: FlowAction,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tentative_route: Option<Route>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secondary_route: Option<Route>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub triage_confidence: Option<Confidence>,
    #[serde(default = "none_clarification")]
    pub clarification_kind: ClarificationKind,
}

fn none_flow() -> ActiveFlow {
    ActiveFlow::None
}
fn none_action() -> FlowAction {
    FlowAction::None
}
fn none_clarification() -> ClarificationKind {
    ClarificationKind::None
}

#[allow(clippy::derivable_impls)] // the enum comes from `string_enum!`
impl Default for ActiveFlow {
    fn default() -> Self {
        ActiveFlow::None
    }
}
#[allow(clippy::derivable_impls)] // the enum comes from `string_enum!`
impl Default for FlowAction {
    fn default() -> Self {
        FlowAction::None
    }
}
#[allow(clippy::derivable_impls)] // the enum comes from `string_enum!`
impl Default for ClarificationKind {
    fn default() -> Self {
        ClarificationKind::None
    }
}

/// An open crisis episode: opened by a level ≥ 2 turn, kept across turns
/// until the person says they are safe or a calm stretch passes (the pure
/// decision is `opencouch_safety::episode`), cleared at session end.
///
/// While it is open every follow-up turn stays on the crisis path, with a
/// floor of level 2 on the gate's verdict.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CrisisEpisode {
    /// When the level ≥ 2 turn that opened it was taken.
    pub opened_at: DateTime<Utc>,
    /// The thread's user-turn index (`ThreadState::turn_count` after that
    /// turn) of the opening turn.
    pub opened_turn: u64,
    /// The highest level the person's own messages reached in the episode.
    pub max_level: CrisisLevel,
    /// ISO 3166 code of the country the person named, once known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub country_code: Option<String>,
    /// Consecutive calm follow-ups (own level 0, not a flat reply).
    #[serde(default)]
    pub calm_turns: u32,
    /// Follow-up turns answered inside the episode so far (rotates the
    /// reviewed follow-up texts so no reply repeats the previous one).
    #[serde(default)]
    pub follow_ups: u32,
}

impl CrisisEpisode {
    /// An episode opened now by a turn at `level`.
    pub fn open(opened_at: DateTime<Utc>, opened_turn: u64, level: CrisisLevel) -> Self {
        CrisisEpisode {
            opened_at,
            opened_turn,
            max_level: level,
            country_code: None,
            calm_turns: 0,
            follow_ups: 0,
        }
    }
}

/// The latest snapshot of one thread.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ThreadState {
    pub thread_id: String,
    pub channel: Channel,
    #[serde(default)]
    pub user_id: Option<String>,
    /// User turns ever taken on this thread.
    #[serde(default)]
    pub turn_count: u64,
    /// Transcript entries ever appended on this thread.
    #[serde(default)]
    pub message_count: u64,
    #[serde(default)]
    pub session_progress: SessionProgress,
    #[serde(default)]
    pub exercise_state: Option<ExerciseState>,
    /// A staged memory deletion awaiting confirm/cancel (shape owned by the
    /// memory-control service).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pending_memory_action: Option<Value>,
    #[serde(default)]
    pub turn_lifecycle: TurnLifecycle,
    #[serde(default)]
    pub route: Option<Route>,
    #[serde(default)]
    pub response_style: Option<ResponseStyle>,
    #[serde(default)]
    pub therapeutic_approach: Option<Approach>,
    /// The last turn's assessment.
    #[serde(default)]
    pub crisis: Option<CrisisAssessment>,
    /// The last turn's diagnostics.
    #[serde(default)]
    pub diagnostics: Diagnostics,
    /// The open crisis episode, if any (absent in snapshots written before
    /// episodes existed, which load as "no episode").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub crisis_episode: Option<CrisisEpisode>,
    /// Fields this version does not know are kept verbatim.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

impl ThreadState {
    pub fn new(thread_id: impl Into<String>, channel: Channel) -> Self {
        ThreadState {
            thread_id: thread_id.into(),
            channel,
            user_id: None,
            turn_count: 0,
            message_count: 0,
            session_progress: SessionProgress::default(),
            exercise_state: None,
            pending_memory_action: None,
            turn_lifecycle: TurnLifecycle::default(),
            route: None,
            response_style: None,
            therapeutic_approach: None,
            crisis: None,
            diagnostics: Diagnostics::default(),
            crisis_episode: None,
            extra: Map::new(),
        }
    }

    /// Applies one stage's delta using the documented merge rules.
    pub fn apply(&mut self, delta: StateDelta) {
        if let Some(route) = delta.route {
            self.route = Some(route);
        }
        if let Some(style) = delta.response_style {
            self.response_style = Some(style);
        }
        if let Some(approach) = delta.therapeutic_approach {
            self.therapeutic_approach = Some(approach);
        }
        if let Some(crisis) = delta.crisis {
            self.crisis = Some(crisis);
        }
        match delta.exercise {
            ExerciseUpdate::Keep => {}
            ExerciseUpdate::Set(state) => self.exercise_state = Some(state),
            ExerciseUpdate::Clear => self.exercise_state = None,
        }
        match delta.pending_memory_action {
            PendingUpdate::Keep => {}
            PendingUpdate::Set(v) => self.pending_memory_action = Some(v),
            PendingUpdate::Clear => self.pending_memory_action = None,
        }
        if let Some(lifecycle) = delta.turn_lifecycle {
            self.turn_lifecycle = lifecycle;
        }
        self.session_progress.extra.extend(delta.progress_extra);
        self.diagnostics.merge(delta.diagnostics);
    }

    /// Clears the session-scoped fields at session end (an open crisis
    /// episode included).
    pub fn clear_session(&mut self) {
        self.session_progress = SessionProgress::default();
        self.crisis_episode = None;
        self.exercise_state = None;
        self.pending_memory_action = None;
        self.turn_lifecycle = TurnLifecycle::default();
    }
}

/// How a stage changes the pending memory action.
#[derive(Debug, Clone, Default, PartialEq)]
pub enum PendingUpdate {
    #[default]
    Keep,
    Set(Value),
    Clear,
}

/// A partial update produced by one pipeline stage.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct StateDelta {
    pub route: Option<Route>,
    pub response_style: Option<ResponseStyle>,
    pub therapeutic_approach: Option<Approach>,
    pub crisis: Option<CrisisAssessment>,
    pub exercise: ExerciseUpdate,
    pub pending_memory_action: PendingUpdate,
    pub turn_lifecycle: Option<TurnLifecycle>,
    pub progress_extra: Map<String, Value>,
    pub diagnostics: Diagnostics,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_fields_survive_round_trip() {
        let raw = serde_json::json!({
            "thread_id": "t", "channel": "web", "future_field": {"a": 1},
            "session_progress": {"turn_count": 2, "future_progress": true}
        });
        let s: ThreadState = serde_json::from_value(raw).unwrap();
        assert_eq!(
            s.extra.get("future_field"),
            Some(&serde_json::json!({"a": 1}))
        );
        let back = serde_json::to_value(&s).unwrap();
        assert_eq!(back["future_field"]["a"], 1);
        assert_eq!(back["session_progress"]["future_progress"], true);
    }

    #[test]
    fn bad_enum_and_negative_count_rejected() {
        let bad_channel = serde_json::json!({"thread_id": "t", "channel": "carrier_pigeon"});
        assert!(serde_json::from_value::<ThreadState>(bad_channel).is_err());
        let negative = serde_json::json!({"thread_id": "t", "channel": "web", "turn_count": -1});
        assert!(serde_json::from_value::<ThreadState>(negative).is_err());
    }

    #[test]
    fn crisis_episode_round_trips_and_old_snapshots_have_none() {
        let old = serde_json::json!({"thread_id": "t", "channel": "web", "turn_count": 3});
        let s: ThreadState = serde_json::from_value(old).unwrap();
        assert_eq!(s.crisis_episode, None);
        assert!(
            serde_json::to_value(&s)
                .unwrap()
                .get("crisis_episode")
                .is_none(),
            "no key written when there is no episode"
        );

        let mut s = ThreadState::new("t", Channel::Web);
        let at = chrono::DateTime::parse_from_rfc3339("2026-01-02T03:04:05Z")
            .unwrap()
            .with_timezone(&Utc);
        let mut ep = CrisisEpisode::open(at, 4, CrisisLevel::IMMINENT);
        ep.country_code = Some("GB".into());
        ep.calm_turns = 1;
        s.crisis_episode = Some(ep.clone());
        let v = serde_json::to_value(&s).unwrap();
        assert_eq!(v["crisis_episode"]["max_level"], 3);
        assert_eq!(v["crisis_episode"]["country_code"], "GB");
        let back: ThreadState = serde_json::from_value(v).unwrap();
        assert_eq!(back.crisis_episode, Some(ep));

        let bad = serde_json::json!({"thread_id": "t", "channel": "web",
            "crisis_episode": {"opened_at": "2026-01-02T03:04:05Z", "opened_turn": 1, "max_level": 7}});
        assert!(
            serde_json::from_value::<ThreadState>(bad).is_err(),
            "level is strict"
        );

        s.clear_session();
        assert_eq!(s.crisis_episode, None, "session end clears the episode");
    }

    #[test]
    fn apply_merges_by_key_and_clears_exercise() {
        let mut s = ThreadState::new("t", Channel::Test);
        s.diagnostics.set("a", 1);
        s.exercise_state = Some(ExerciseState {
            exercise_type: "x".into(),
            exercise_step: 0,
            exercise_step_id: "s".into(),
            exercise_version: 1,
            exercise_therapeutic_approach: Approach::Cbt,
        });
        let mut d = StateDelta {
            exercise: ExerciseUpdate::Clear,
            ..Default::default()
        };
        d.diagnostics.set("b", 2);
        s.apply(d);
        assert!(s.exercise_state.is_none());
        assert_eq!(s.diagnostics.0.len(), 2);
    }
}
