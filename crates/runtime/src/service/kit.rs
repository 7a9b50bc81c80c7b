//! The channel kit: the one fold of a turn's event stream into what a text
//! channel shows, and the one wire form of an event.
//!
//! A turn streams `status`, `chunk`, `reset`, `response_ready`, then `done`
//! (or one `error`). Every text channel shows the same things from it: a
//! status line while the turn works, the reply text as it is written, a
//! retraction when a streamed reply was replaced, and the final reply with
//! its crisis resources and whether it was saved. [`TurnView`] is that fold
//! (SSE and the WebSocket send [`wire_event`]s; the terminal draws
//! [`Show`]s; voice and Telegram take the [`FinalReply`] of [`collect`]).

use futures::StreamExt;
use opencouch_core::{AgentOutput, ResponseType, Stage, StreamEvent};
use serde_json::{Value, json};

use crate::reply::TurnStream;

/// Shown under a reply that could not be saved (storage failed; only a
/// crisis reply is delivered then).
pub const NOT_SAVED_NOTICE: &str = "This conversation couldn't be saved right now.";

/// Shown under a crisis reply whose commit is still running past the
/// crisis bound (storage is slow, not failed: it is saved when it lands).
pub const SAVE_PENDING_NOTICE: &str = "Saving this conversation is taking longer than usual; it will be saved as soon as storage answers.";

/// The notice for an unsaved output: [`SAVE_PENDING_NOTICE`] when its
/// commit is still running, else [`NOT_SAVED_NOTICE`]; `None` when saved.
pub fn unsaved_notice(output: &AgentOutput) -> Option<&'static str> {
    if output.saved {
        return None;
    }
    Some(
        if output.diagnostics.get_str("storage_status") == Some("commit_pending") {
            SAVE_PENDING_NOTICE
        } else {
            NOT_SAVED_NOTICE
        },
    )
}

/// Shown when a streamed reply was replaced (the model failed midway).
pub const RESET_NOTICE: &str = "(that reply was interrupted; here is the full reply)";

/// One thing a text channel shows, in order.
#[derive(Debug, Clone, PartialEq)]
pub enum Show {
    /// A status line, replacing the previous one ("Checking in…").
    Status {
        /// The stage.
        stage: Stage,
        /// Its words for a person.
        line: String,
    },
    /// The reply starts: open a reply line (before the first text).
    ReplyStart,
    /// More reply text to append.
    Text(String),
    /// The reply text shown so far is not the reply: say so and discard
    /// it; the whole reply follows.
    Reset,
    /// The turn's final reply.
    Final(FinalReply),
    /// The turn failed (words for a person; the cause went to the log).
    Failed {
        /// The stable code.
        code: String,
        /// Words for the person.
        message: String,
    },
}

/// The end of a turn as a channel shows it.
#[derive(Debug, Clone, PartialEq)]
pub struct FinalReply {
    /// The whole reply.
    pub text: String,
    /// Whether the reply text already went out as [`Show::Text`] (then a
    /// channel only closes the line).
    pub streamed: bool,
    /// A crisis reply: show it whole and apart (a panel, its own message),
    /// never cut, with its resources.
    pub crisis: bool,
    /// Verified crisis resources (name, contact, …), as the directory
    /// holds them.
    pub resources: Vec<Value>,
    /// Whether the turn was saved; when not, show [`NOT_SAVED_NOTICE`].
    pub saved: bool,
    /// The whole output (for channels that print JSON).
    pub output: Box<AgentOutput>,
}

impl FinalReply {
    fn of(output: Box<AgentOutput>, streamed: bool) -> Self {
        FinalReply {
            text: output.response_text.clone(),
            streamed,
            crisis: output.response_type == ResponseType::Crisis,
            resources: output.resources.clone(),
            saved: output.saved,
            output,
        }
    }

    /// The notice to show under the reply, if any (a commit still running
    /// past the crisis bound says so; a failed one says it was not saved).
    pub fn notice(&self) -> Option<&'static str> {
        unsaved_notice(&self.output)
    }
}

/// The fold of one turn's events into [`Show`]s.
#[derive(Debug, Default)]
pub struct TurnView {
    /// Reply text shown so far (since the last reset).
    shown: String,
    /// Whether a status line is up.
    status_up: bool,
    done: bool,
}

impl TurnView {
    /// A fold at the start of a turn.
    pub fn new() -> Self {
        TurnView::default()
    }

    /// Whether a status line is up (a terminal clears it before text).
    pub fn status_up(&self) -> bool {
        self.status_up
    }

    /// Whether the turn has ended (`done` or `error` seen).
    pub fn is_done(&self) -> bool {
        self.done
    }

    /// What to show for `ev`, in order (often nothing, sometimes two).
    pub fn push(&mut self, ev: StreamEvent) -> Vec<Show> {
        match ev {
            StreamEvent::Status { stage, detail } => {
                self.status_up = true;
                vec![Show::Status {
                    stage,
                    line: format!("{detail}…"),
                }]
            }
            StreamEvent::Chunk { text } => {
                self.status_up = false;
                let mut out = Vec::with_capacity(2);
                if self.shown.is_empty() {
                    out.push(Show::ReplyStart);
                }
                self.shown.push_str(&text);
                out.push(Show::Text(text));
                out
            }
            StreamEvent::Reset => {
                if self.shown.is_empty() {
                    Vec::new()
                } else {
                    self.shown.clear();
                    vec![Show::Reset]
                }
            }
            // The reply is final once `done` says it was committed.
            StreamEvent::ResponseReady { .. } => Vec::new(),
            StreamEvent::Done { output } => {
                self.status_up = false;
                self.done = true;
                // A crisis reply is shown whole and apart even when parts
                // of it went out as text.
                let streamed = !self.shown.is_empty();
                vec![Show::Final(FinalReply::of(output, streamed))]
            }
            StreamEvent::Error { code, message } => {
                self.status_up = false;
                self.done = true;
                vec![Show::Failed { code, message }]
            }
        }
    }
}

/// Reads a turn to its end and returns its final reply (channels that send
/// one message per turn: Telegram, voice tool results).
///
/// # Errors
/// The turn's `error` event as (code, message); a stream that ended
/// without one gives `internal`.
pub async fn collect(mut stream: TurnStream) -> Result<FinalReply, (String, String)> {
    let mut view = TurnView::new();
    while let Some(ev) = stream.next().await {
        for show in view.push(ev) {
            match show {
                Show::Final(reply) => return Ok(reply),
                Show::Failed { code, message } => return Err((code, message)),
                _ => {}
            }
        }
    }
    Err((
        "internal".to_owned(),
        "the turn stopped unexpectedly".to_owned(),
    ))
}

/// A saved crisis reply made whole again for sending (a channel that
/// re-sends what a turn saved, after a crash): the placeholder the
/// transcript keeps where the person's safety plan was shown is replaced by
/// `plan_text` (the person's plan, from [`Service::sos`](super::Service::sos)),
/// or dropped when there is none.
pub fn with_shown_plan(saved: &str, plan_text: Option<&str>) -> String {
    let Ok(texts) = opencouch_safety::personal_plan::texts() else {
        return saved.to_owned();
    };
    let placeholder = texts.labels.shown_placeholder.as_str();
    if !saved.contains(placeholder) {
        return saved.to_owned();
    }
    match plan_text {
        Some(plan) => saved.replacen(placeholder, plan, 1),
        None => saved
            .replacen(&format!("{placeholder}\n\n"), "", 1)
            .replacen(placeholder, "", 1),
    }
}

/// The wire form of an event (`{type, ...}`, the same for SSE and the
/// WebSocket): outputs already name the caller's own thread id.
pub fn wire_event(ev: &StreamEvent) -> Value {
    serde_json::to_value(ev).unwrap_or_else(|_| {
        json!({"type": "error", "code": "internal", "message": "the event could not be encoded"})
    })
}

/// The last event of a stream that ended without `done` or `error`.
pub fn stopped_event() -> StreamEvent {
    StreamEvent::Error {
        code: "internal".to_owned(),
        message: "the turn stopped unexpectedly".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_saved_reply_gets_the_plan_back_or_loses_the_placeholder() {
        let saved = "I'm glad you told me.\n\n[Your own safety plan was shown here.]\n\nSamaritans: call 116 123";
        let whole = with_shown_plan(saved, Some("Your safety plan\n- a walk"));
        assert_eq!(
            whole,
            "I'm glad you told me.\n\nYour safety plan\n- a walk\n\nSamaritans: call 116 123"
        );
        let bare = with_shown_plan(saved, None);
        assert_eq!(bare, "I'm glad you told me.\n\nSamaritans: call 116 123");
        assert_eq!(with_shown_plan("no placeholder", None), "no placeholder");
    }

    use opencouch_core::{CrisisAssessment, Diagnostics, ResponseStyle, Route, SessionAction};

    fn output(kind: ResponseType, text: &str, saved: bool) -> Box<AgentOutput> {
        Box::new(AgentOutput {
            thread_id: "t".into(),
            response_text: text.into(),
            response_type: kind,
            route: Route::Therapeutic,
            response_style: ResponseStyle::default(),
            therapeutic_approach: None,
            session_action: SessionAction::None,
            crisis: CrisisAssessment::none("test"),
            resources: Vec::new(),
            mode: ResponseStyle::default(),
            mode_type: opencouch_core::ModeType::Therapeutic,
            mode_source: opencouch_core::ModeSource::Default,
            should_persist_memory: saved,
            diagnostics: Diagnostics::new(),
            saved,
        })
    }

    #[test]
    fn an_unsaved_reply_says_whether_its_commit_is_still_running() {
        assert_eq!(
            unsaved_notice(&output(ResponseType::Crisis, "x", true)),
            None
        );
        let failed = output(ResponseType::Crisis, "x", false);
        assert_eq!(unsaved_notice(&failed), Some(NOT_SAVED_NOTICE));
        let mut pending = output(ResponseType::Crisis, "x", false);
        pending.diagnostics.set("storage_status", "commit_pending");
        assert_eq!(unsaved_notice(&pending), Some(SAVE_PENDING_NOTICE));
    }

    #[test]
    fn a_streamed_reply_folds_into_start_text_and_final() {
        let mut v = TurnView::new();
        let mut shows = Vec::new();
        for ev in [
            StreamEvent::status(Stage::CrisisGate),
            StreamEvent::Chunk { text: "Hel".into() },
            StreamEvent::Chunk { text: "lo".into() },
            StreamEvent::Done {
                output: output(ResponseType::Therapeutic, "Hello", true),
            },
        ] {
            shows.extend(v.push(ev));
        }
        assert!(matches!(shows[0], Show::Status { .. }));
        assert_eq!(shows[1], Show::ReplyStart);
        assert_eq!(shows[2], Show::Text("Hel".into()));
        assert_eq!(shows[3], Show::Text("lo".into()));
        let Show::Final(f) = &shows[4] else {
            panic!("{shows:?}")
        };
        assert!(f.streamed && !f.crisis && f.saved && f.notice().is_none());
        assert!(v.is_done());
    }

    #[test]
    fn a_reset_retracts_only_what_was_shown() {
        let mut v = TurnView::new();
        assert!(v.push(StreamEvent::Reset).is_empty());
        v.push(StreamEvent::Chunk { text: "x".into() });
        assert_eq!(v.push(StreamEvent::Reset), vec![Show::Reset]);
        // The replacement opens a new reply line.
        assert_eq!(
            v.push(StreamEvent::Chunk { text: "y".into() })[0],
            Show::ReplyStart
        );
    }

    #[test]
    fn an_unsaved_crisis_reply_is_final_with_its_notice() {
        let mut v = TurnView::new();
        let shows = v.push(StreamEvent::Done {
            output: output(ResponseType::Crisis, "Please call", false),
        });
        let Show::Final(f) = &shows[0] else {
            panic!("{shows:?}")
        };
        assert!(f.crisis && !f.streamed);
        assert_eq!(f.notice(), Some(NOT_SAVED_NOTICE));
    }

    #[test]
    fn errors_end_the_turn() {
        let mut v = TurnView::new();
        let shows = v.push(StreamEvent::Error {
            code: "storage_unavailable".into(),
            message: "storage is unavailable".into(),
        });
        assert!(matches!(&shows[0], Show::Failed { code, .. } if code == "storage_unavailable"));
        assert!(v.is_done());
        assert_eq!(wire_event(&stopped_event())["type"], "error");
    }
}
