//! The turn's spans: one root span per turn (its own trace) and one child
//! span per stage, so an exported trace shows the gate, triage, plan,
//! retrieval, specialist (with its model and tool calls), commit and crisis
//! log as a tree.
//!
//! One source of timings: a [`Stage`] measures its own duration once and
//! writes it both into the turn's diagnostics (`<stage>_ms`, what the API,
//! the terminal and `/metrics` show) and onto its span (`duration_ms`).
//!
//! Ids appear only as opaque hashes; no span carries message text, memory
//! content or crisis text. The spans are at `info` level: with trace export
//! off they are disabled by the log filter and cost a branch each.

use std::time::Instant;

use opencouch_core::telemetry::{CRISIS_ATTRIBUTE, opaque_id};
use opencouch_core::{AgentInput, AgentOutput, Diagnostics};
use tracing::Span;
use tracing::field::Empty;

/// The root span of one turn: a new trace, whatever span is current (an
/// HTTP request's span, a Telegram update's), so one trace is one turn. The
/// span that asked for the turn, if any, is linked (`follows_from`), so a
/// collector can go from the request or the update to its turn.
pub(crate) fn turn(input: &AgentInput) -> Span {
    let span = tracing::info_span!(
        parent: None,
        "turn",
        "otel.name" = "turn",
        "opencouch.thread" = %opaque_id(&input.thread_id),
        "opencouch.owner" = %opaque_id(input.owner_id()),
        "opencouch.channel" = input.channel.as_str(),
        "opencouch.memory_mode" = input.memory_mode.as_str(),
        "opencouch.route" = Empty,
        "opencouch.plan" = Empty,
        "opencouch.style" = Empty,
        "opencouch.crisis_level" = Empty,
        "opencouch.crisis_layer" = Empty,
        { CRISIS_ATTRIBUTE } = Empty,
        "opencouch.retrieval_path" = Empty,
        "opencouch.fallbacks" = Empty,
        "opencouch.saved" = Empty,
        "duration_ms" = Empty,
    );
    span.follows_from(Span::current());
    span
}

/// Marks the current turn as a crisis turn (always exported).
pub(crate) fn mark_crisis(level: u8) {
    let span = Span::current();
    span.record(CRISIS_ATTRIBUTE, true);
    span.record("opencouch.crisis_level", i64::from(level));
}

/// Records the turn's outcome on its root span (the current span).
pub(crate) fn finish_turn(output: &AgentOutput) {
    let span = Span::current();
    if span.is_disabled() {
        return;
    }
    let d = &output.diagnostics;
    span.record("opencouch.route", output.route.as_str());
    if let Some(plan) = d.get_str("route_plan") {
        span.record("opencouch.plan", plan);
    }
    span.record("opencouch.style", output.response_style.as_str());
    // Integers as i64: the OpenTelemetry layer exports u64 as text.
    span.record(
        "opencouch.crisis_level",
        i64::from(output.crisis.level.get()),
    );
    if let Some(layer) = d.get_str("crisis_layer") {
        span.record("opencouch.crisis_layer", layer);
    }
    if output.crisis.level.needs_crisis_response() {
        span.record(CRISIS_ATTRIBUTE, true);
    }
    if let Some(path) = d.get_str("retrieval_path") {
        span.record("opencouch.retrieval_path", path);
    }
    let fallbacks: Vec<&str> =
        d.0.iter()
            .filter(|(k, v)| k.ends_with("_fallback") && v.as_bool() == Some(true))
            .map(|(k, _)| k.as_str())
            .collect();
    if !fallbacks.is_empty() {
        span.record("opencouch.fallbacks", fallbacks.join(",").as_str());
    }
    span.record("opencouch.saved", output.saved);
    if let Some(ms) = d.get("turn_total_ms").and_then(|v| v.as_f64()) {
        span.record("duration_ms", ms);
    }
}

/// One stage of a turn: a child span of the current span and a clock.
pub(crate) struct Stage {
    span: Span,
    started: Instant,
    key: &'static str,
}

impl Stage {
    /// Starts stage `name`; its duration goes to the diagnostics as `key`.
    pub(crate) fn start(name: &'static str, key: &'static str) -> Stage {
        let span = tracing::info_span!(
            "stage",
            "otel.name" = name,
            "opencouch.stage" = name,
            "opencouch.outcome" = Empty,
            "duration_ms" = Empty,
        );
        Stage {
            span,
            started: Instant::now(),
            key,
        }
    }

    /// The stage's span, to instrument its future or to record fields.
    pub(crate) fn span(&self) -> Span {
        self.span.clone()
    }

    /// Records a closed-vocabulary outcome (a route, a path, a level).
    pub(crate) fn outcome(&self, value: &str) {
        self.span.record("opencouch.outcome", value);
    }

    /// Ends a stage that measured itself: `ms` goes onto the span (the
    /// stage has already put the same figure into the diagnostics).
    pub(crate) fn end_measured(self, ms: f64) {
        self.span
            .record("duration_ms", (ms * 1000.0).round() / 1000.0);
    }

    /// Ends the stage: one duration, in the diagnostics and on the span.
    pub(crate) fn end(self, diagnostics: &mut Diagnostics) -> f64 {
        let ms = (self.started.elapsed().as_secs_f64() * 1_000_000.0).round() / 1000.0;
        diagnostics.set(self.key, ms);
        self.span.record("duration_ms", ms);
        ms
    }
}

/// An id from outside (a model's tool-call id) bounded for a span.
pub(crate) fn cut(s: &str) -> &str {
    match s.char_indices().nth(64) {
        Some((i, _)) => &s[..i],
        None => s,
    }
}
