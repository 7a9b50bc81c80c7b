//! Prometheus text-format metrics, hand-written (no metrics crate).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Mutex;
use std::time::Duration;

use opencouch_core::AgentOutput;
use opencouch_core::telemetry::{Histogram, STAGE_BUCKETS};

/// Counters and latency histograms. Labels are closed vocabularies (route,
/// crisis level, error code), never user content.
#[derive(Debug, Default)]
pub struct Metrics {
    inner: Mutex<Counts>,
}

#[derive(Debug, Default)]
struct Counts {
    /// (route, crisis level, memory mode) → answered turns.
    turns: BTreeMap<(String, u8, String), u64>,
    turn_errors: BTreeMap<String, u64>,
    rejected: BTreeMap<String, u64>,
    fallbacks: u64,
    model_errors: u64,
    turn_latency: Histogram,
    /// Stage (a diagnostics key `<stage>_ms`) → its durations, over
    /// [`STAGE_BUCKETS`] (tens of microseconds to seconds).
    stages: BTreeMap<String, Histogram>,
    /// (level, deciding layer) → turns at crisis level 1 or above.
    crisis: BTreeMap<(u8, String), u64>,
    /// Fallback kind (the diagnostics key) → turns.
    fallback_kinds: BTreeMap<String, u64>,
    /// Retrieval path → turns that loaded memory.
    retrieval_paths: BTreeMap<String, u64>,
    retrieval_latency: Histogram,
    /// HTTP status code → responses.
    http_status: BTreeMap<u16, u64>,
    /// Memory mode → finished turns (answered or failed).
    memory_modes: BTreeMap<String, u64>,
    /// What a turn did with the person's safety plan (the diagnostics'
    /// `safety_plan`: shown, timed_out, read_failed, updated, …) → turns.
    safety_plan: BTreeMap<String, u64>,
}

/// A label value from our own closed vocabularies, kept only when it looks
/// like one (lower-case words).
fn label_ok(v: &str) -> bool {
    !v.is_empty()
        && v.len() <= 64
        && v.bytes()
            .all(|b| b.is_ascii_lowercase() || b == b'_' || b == b'.' || b.is_ascii_digit())
}

/// Diagnostics keys that flag a model failure or a deterministic fallback.
const MODEL_ERROR_KEYS: [&str; 1] = ["llm_failure_occurred"];

impl Metrics {
    /// Counts a finished turn (answered or failed) by its memory mode.
    pub fn turn_mode(&self, mode: &str) {
        if !label_ok(mode) {
            return;
        }
        if let Ok(mut c) = self.inner.lock() {
            *c.memory_modes.entry(mode.to_owned()).or_default() += 1;
        }
    }

    /// Records an answered turn of `memory_mode`.
    pub fn turn(&self, output: &AgentOutput, memory_mode: &str, elapsed: Duration) {
        let Ok(mut c) = self.inner.lock() else { return };
        let mode = if label_ok(memory_mode) {
            memory_mode
        } else {
            "unknown"
        };
        *c.turns
            .entry((
                output.route.as_str().to_owned(),
                output.crisis.level.get(),
                mode.to_owned(),
            ))
            .or_default() += 1;
        c.turn_latency.observe(elapsed.as_secs_f64());
        let d = &output.diagnostics;
        if MODEL_ERROR_KEYS.iter().any(|k| d.get_bool(k) == Some(true)) {
            c.model_errors += 1;
        }
        if d.0
            .iter()
            .any(|(k, v)| k.ends_with("_fallback") && v.as_bool() == Some(true))
        {
            c.fallbacks += 1;
        }
        let level = output.crisis.level.get();
        if level >= 1 {
            let layer = d
                .get_str("crisis_layer")
                .filter(|l| label_ok(l))
                .unwrap_or("unknown");
            *c.crisis.entry((level, layer.to_owned())).or_default() += 1;
        }
        for (k, v) in &d.0 {
            if k.ends_with("_fallback") && v.as_bool() == Some(true) && label_ok(k) {
                *c.fallback_kinds.entry(k.clone()).or_default() += 1;
            }
        }
        if let Some(what) = d.get_str("safety_plan").filter(|p| label_ok(p)) {
            *c.safety_plan.entry(what.to_owned()).or_default() += 1;
        }
        if let Some(path) = d.get_str("retrieval_path").filter(|p| label_ok(p)) {
            *c.retrieval_paths.entry(path.to_owned()).or_default() += 1;
        }
        if let Some(ms) = d.get("retrieval_ms").and_then(|v| v.as_f64()) {
            c.retrieval_latency.observe(ms / 1000.0);
        }
        for (k, v) in &d.0 {
            if let (Some(stage), Some(ms)) = (k.strip_suffix("_ms"), v.as_f64())
                && label_ok(stage)
            {
                c.stages
                    .entry(stage.to_owned())
                    .or_insert_with(|| Histogram::with_buckets(&STAGE_BUCKETS))
                    .observe(ms / 1000.0);
            }
        }
    }

    /// Records a failed turn by error code.
    pub fn turn_error(&self, code: &str) {
        if let Ok(mut c) = self.inner.lock() {
            *c.turn_errors.entry(code.to_owned()).or_default() += 1;
        }
    }

    /// Records an HTTP response's status.
    pub fn http(&self, status: u16) {
        if let Ok(mut c) = self.inner.lock() {
            *c.http_status.entry(status).or_default() += 1;
        }
    }

    /// Records a rejected request by error code.
    pub fn rejected(&self, code: &str) {
        if let Ok(mut c) = self.inner.lock() {
            *c.rejected.entry(code.to_owned()).or_default() += 1;
        }
    }

    /// The Prometheus text exposition.
    pub fn render(&self) -> String {
        let Ok(c) = self.inner.lock() else {
            return String::new();
        };
        let mut s = String::new();
        let _ = writeln!(
            s,
            "# HELP opencouch_turns_total Answered turns by route, crisis level and memory mode."
        );
        let _ = writeln!(s, "# TYPE opencouch_turns_total counter");
        for ((route, level, mode), n) in &c.turns {
            let _ = writeln!(
                s,
                "opencouch_turns_total{{route=\"{route}\",crisis_level=\"{level}\",memory_mode=\"{mode}\"}} {n}"
            );
        }
        let _ = writeln!(
            s,
            "# HELP opencouch_turn_errors_total Failed turns by error code."
        );
        let _ = writeln!(s, "# TYPE opencouch_turn_errors_total counter");
        for (code, n) in &c.turn_errors {
            let _ = writeln!(s, "opencouch_turn_errors_total{{code=\"{code}\"}} {n}");
        }
        let _ = writeln!(
            s,
            "# HELP opencouch_requests_rejected_total Rejected requests by error code."
        );
        let _ = writeln!(s, "# TYPE opencouch_requests_rejected_total counter");
        for (code, n) in &c.rejected {
            let _ = writeln!(
                s,
                "opencouch_requests_rejected_total{{code=\"{code}\"}} {n}"
            );
        }
        let _ = writeln!(
            s,
            "# HELP opencouch_model_failure_turns_total Turns during which a model call failed (each call is in opencouch_model_call_errors_total)."
        );
        let _ = writeln!(s, "# TYPE opencouch_model_failure_turns_total counter");
        let _ = writeln!(s, "opencouch_model_failure_turns_total {}", c.model_errors);
        let _ = writeln!(
            s,
            "# HELP opencouch_fallbacks_total Turns that used any deterministic fallback (by kind: opencouch_fallback_turns_total)."
        );
        let _ = writeln!(s, "# TYPE opencouch_fallbacks_total counter");
        let _ = writeln!(s, "opencouch_fallbacks_total {}", c.fallbacks);
        let _ = writeln!(
            s,
            "# HELP opencouch_turn_duration_seconds Latency of answered turns (the turn task, from its start to its end)."
        );
        let _ = writeln!(s, "# TYPE opencouch_turn_duration_seconds histogram");
        c.turn_latency
            .render(&mut s, "opencouch_turn_duration_seconds", "");
        let _ = writeln!(
            s,
            "# HELP opencouch_stage_duration_seconds Stage latency from turn diagnostics (buckets 100 us to 30 s)."
        );
        let _ = writeln!(s, "# TYPE opencouch_stage_duration_seconds histogram");
        for (stage, h) in &c.stages {
            h.render(
                &mut s,
                "opencouch_stage_duration_seconds",
                &format!("stage=\"{stage}\""),
            );
        }
        let _ = writeln!(
            s,
            "# HELP opencouch_crisis_turns_total Turns at crisis level 1 or above by level and the gate layer that decided."
        );
        let _ = writeln!(s, "# TYPE opencouch_crisis_turns_total counter");
        for ((level, layer), n) in &c.crisis {
            let _ = writeln!(
                s,
                "opencouch_crisis_turns_total{{level=\"{level}\",layer=\"{layer}\"}} {n}"
            );
        }
        let _ = writeln!(
            s,
            "# HELP opencouch_fallback_turns_total Turns that used a deterministic fallback, by kind."
        );
        let _ = writeln!(s, "# TYPE opencouch_fallback_turns_total counter");
        for (kind, n) in &c.fallback_kinds {
            let _ = writeln!(s, "opencouch_fallback_turns_total{{kind=\"{kind}\"}} {n}");
        }
        let _ = writeln!(
            s,
            "# HELP opencouch_retrieval_total Memory retrievals by path."
        );
        let _ = writeln!(s, "# TYPE opencouch_retrieval_total counter");
        for (path, n) in &c.retrieval_paths {
            let _ = writeln!(s, "opencouch_retrieval_total{{path=\"{path}\"}} {n}");
        }
        let _ = writeln!(
            s,
            "# HELP opencouch_turns_by_memory_mode_total Finished turns (answered or failed) by memory mode."
        );
        let _ = writeln!(s, "# TYPE opencouch_turns_by_memory_mode_total counter");
        for (mode, n) in &c.memory_modes {
            let _ = writeln!(
                s,
                "opencouch_turns_by_memory_mode_total{{mode=\"{mode}\"}} {n}"
            );
        }
        let _ = writeln!(
            s,
            "# HELP opencouch_safety_plan_turns_total Turns that used the person's safety plan, by outcome (shown in a crisis reply, timed_out, read_failed, updated by the guided flow, …)."
        );
        let _ = writeln!(s, "# TYPE opencouch_safety_plan_turns_total counter");
        for (what, n) in &c.safety_plan {
            let _ = writeln!(
                s,
                "opencouch_safety_plan_turns_total{{outcome=\"{what}\"}} {n}"
            );
        }
        let _ = writeln!(
            s,
            "# HELP opencouch_retrieval_duration_seconds Memory retrieval latency."
        );
        let _ = writeln!(s, "# TYPE opencouch_retrieval_duration_seconds histogram");
        c.retrieval_latency
            .render(&mut s, "opencouch_retrieval_duration_seconds", "");
        let _ = writeln!(
            s,
            "# HELP opencouch_http_responses_total HTTP responses by status code."
        );
        let _ = writeln!(s, "# TYPE opencouch_http_responses_total counter");
        for (status, n) in &c.http_status {
            let _ = writeln!(s, "opencouch_http_responses_total{{code=\"{status}\"}} {n}");
        }
        drop(c);
        opencouch_core::telemetry::render_call_metrics(&mut s);
        s
    }
}
