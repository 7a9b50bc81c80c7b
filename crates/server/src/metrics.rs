//! Prometheus text-format metrics, hand-written (no metrics crate).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Mutex;
use std::time::Duration;

use opencouch_core::AgentOutput;

/// Counters and latency sums. Labels are closed vocabularies (route,
/// crisis level, error code), never user content.
#[derive(Debug, Default)]
pub struct Metrics {
    inner: Mutex<Counts>,
}

#[derive(Debug, Default)]
struct Counts {
    turns: BTreeMap<(String, u8), u64>,
    turn_errors: BTreeMap<String, u64>,
    rejected: BTreeMap<String, u64>,
    fallbacks: u64,
    model_errors: u64,
    turn_seconds_sum: f64,
    turn_seconds_count: u64,
    stage_ms: BTreeMap<String, (f64, u64)>,
}

/// Diagnostics keys that flag a model failure or a deterministic fallback.
const MODEL_ERROR_KEYS: [&str; 1] = ["llm_failure_occurred"];

impl Metrics {
    /// Records a finished turn.
    pub fn turn(&self, output: &AgentOutput, elapsed: Duration) {
        let Ok(mut c) = self.inner.lock() else { return };
        *c.turns
            .entry((output.route.as_str().to_owned(), output.crisis.level.get()))
            .or_default() += 1;
        c.turn_seconds_sum += elapsed.as_secs_f64();
        c.turn_seconds_count += 1;
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
        for (k, v) in &d.0 {
            if let (Some(stage), Some(ms)) = (k.strip_suffix("_ms"), v.as_f64()) {
                let e = c.stage_ms.entry(stage.to_owned()).or_default();
                e.0 += ms / 1000.0;
                e.1 += 1;
            }
        }
    }

    /// Records a failed turn by error code.
    pub fn turn_error(&self, code: &str) {
        if let Ok(mut c) = self.inner.lock() {
            *c.turn_errors.entry(code.to_owned()).or_default() += 1;
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
            "# HELP opencouch_turns_total Completed turns by route and crisis level."
        );
        let _ = writeln!(s, "# TYPE opencouch_turns_total counter");
        for ((route, level), n) in &c.turns {
            let _ = writeln!(
                s,
                "opencouch_turns_total{{route=\"{route}\",crisis_level=\"{level}\"}} {n}"
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
            "# HELP opencouch_model_errors_total Turns during which a model call failed."
        );
        let _ = writeln!(s, "# TYPE opencouch_model_errors_total counter");
        let _ = writeln!(s, "opencouch_model_errors_total {}", c.model_errors);
        let _ = writeln!(
            s,
            "# HELP opencouch_fallbacks_total Turns that used a deterministic fallback."
        );
        let _ = writeln!(s, "# TYPE opencouch_fallbacks_total counter");
        let _ = writeln!(s, "opencouch_fallbacks_total {}", c.fallbacks);
        let _ = writeln!(
            s,
            "# HELP opencouch_turn_duration_seconds Turn latency as seen by the API."
        );
        let _ = writeln!(s, "# TYPE opencouch_turn_duration_seconds summary");
        let _ = writeln!(
            s,
            "opencouch_turn_duration_seconds_sum {}",
            c.turn_seconds_sum
        );
        let _ = writeln!(
            s,
            "opencouch_turn_duration_seconds_count {}",
            c.turn_seconds_count
        );
        let _ = writeln!(
            s,
            "# HELP opencouch_stage_duration_seconds Stage latency from turn diagnostics."
        );
        let _ = writeln!(s, "# TYPE opencouch_stage_duration_seconds summary");
        for (stage, (sum, n)) in &c.stage_ms {
            if stage
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b == b'_' || b.is_ascii_digit())
            {
                let _ = writeln!(
                    s,
                    "opencouch_stage_duration_seconds_sum{{stage=\"{stage}\"}} {sum}"
                );
                let _ = writeln!(
                    s,
                    "opencouch_stage_duration_seconds_count{{stage=\"{stage}\"}} {n}"
                );
            }
        }
        s
    }
}
