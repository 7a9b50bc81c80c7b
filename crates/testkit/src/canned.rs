//! Canned model traffic in the shapes OpenCouch's runtime asks for, shared by
//! the runtime and server tests and the benchmarks so each does not carry its
//! own copy of the triage reply.
//!
//! The runtime names every structured-output schema after its Rust type, so
//! a request is recognised by that name in its body: the crisis gate asks for
//! `ModelCrisisOutput`, triage for `TriageDecision`, background memory
//! extraction for `ExtractionReply`. The runtime's own tests check that these
//! replies deserialize into its types, so a renamed field fails there rather
//! than silently turning every scripted turn into a fallback.
//!
//! ```no_run
//! # async fn demo() {
//! use opencouch_testkit::{FakeOpenAi, canned};
//! let fake = FakeOpenAi::start().await;
//! canned::script_calm_model(&fake, "That sounds like a lot to carry.");
//! # }
//! ```

use serde_json::{Value, json};

use crate::{FakeOpenAi, Match, Reply};

/// Requests of the crisis gate (its structured-output schema).
pub fn gate_request() -> Match {
    Match::body_contains("ModelCrisisOutput")
}

/// Requests of triage (its structured-output schema).
pub fn triage_request() -> Match {
    Match::body_contains("TriageDecision")
}

/// Requests of background memory extraction.
pub fn extraction_request() -> Match {
    Match::body_contains("ExtractionReply")
}

/// A crisis-gate answer at `level` with high confidence.
pub fn gate_reply(level: u8) -> Reply {
    Reply::json(json!({"level": level, "confidence": "high", "reason": "scripted"}))
}

/// A triage decision: `route`, the active-flow action, the exercise start
/// basis and the exercise asked for; no memory action, no clarification.
/// Therapeutic turns get the "supportive" response style.
pub fn triage_json(route: &str, flow: &str, basis: &str, exercise: Option<&str>) -> Value {
    json!({
        "route": route,
        "active_flow_action": flow,
        "memory_action_type": "none",
        "memory_enabled": null,
        "memory_target_kind": null,
        "memory_target_index": null,
        "memory_query": null,
        "preference_text": null,
        "exercise_start_basis": basis,
        "exercise_type": exercise,
        "response_style": if route == "therapeutic" { Value::from("supportive") } else { Value::Null },
        "clarification_needed": false,
        "clarification_kind": "none",
        "secondary_route": null,
        "clarification_question": null,
        "confidence": "high",
        "session_stage": null
    })
}

/// A triage reply sending the turn to `route` with no flow or exercise.
pub fn triage_reply(route: &str) -> Reply {
    Reply::json(triage_json(route, "none", "ambiguous_or_none", None))
}

/// An extraction reply proposing nothing.
pub fn empty_extraction_reply() -> Reply {
    Reply::json(json!({"facts": [], "rules": []}))
}

/// Scripts the two structured calls before a reply: the gate says `level`,
/// triage says `route` (every time).
pub fn script_gate_and_triage(fake: &FakeOpenAi, level: u8, route: &str) {
    fake.always_when(gate_request(), gate_reply(level));
    fake.always_when(triage_request(), triage_reply(route));
}

/// Scripts a calm conversation: the gate says level 0, triage says
/// therapeutic, extraction proposes nothing, and every other call (the reply
/// itself) answers `reply` unless a test adds its own rules first.
pub fn script_calm_model(fake: &FakeOpenAi, reply: &str) {
    fake.always_when(gate_request(), gate_reply(0));
    fake.always_when(triage_request(), triage_reply("therapeutic"));
    fake.always_when(extraction_request(), empty_extraction_reply());
    fake.set_default(Reply::text(reply));
}
