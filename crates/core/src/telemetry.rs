//! Names shared by the code that makes spans and the code that exports them,
//! and the export's health as one process-wide record.
//!
//! The OpenTelemetry GenAI semantic conventions are defined here as plain
//! strings (the Rust semantic-conventions crate marks its GenAI constants
//! deprecated while the conventions are in development). Span fields named
//! with these constants become span attributes of the same name on export.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// OpenTelemetry GenAI semantic conventions (attribute names).
pub mod genai {
    /// `chat`, `embeddings` or `execute_tool`.
    pub const OPERATION_NAME: &str = "gen_ai.operation.name";
    /// The provider (`openai` for any OpenAI-compatible endpoint).
    pub const PROVIDER_NAME: &str = "gen_ai.provider.name";
    pub const REQUEST_MODEL: &str = "gen_ai.request.model";
    pub const RESPONSE_MODEL: &str = "gen_ai.response.model";
    pub const USAGE_INPUT_TOKENS: &str = "gen_ai.usage.input_tokens";
    pub const USAGE_OUTPUT_TOKENS: &str = "gen_ai.usage.output_tokens";
    pub const RESPONSE_FINISH_REASONS: &str = "gen_ai.response.finish_reasons";
    pub const TOOL_NAME: &str = "gen_ai.tool.name";
    pub const TOOL_CALL_ID: &str = "gen_ai.tool.call.id";
    /// Prompt and output content: only with content capture on.
    pub const INPUT_MESSAGES: &str = "gen_ai.input.messages";
    pub const OUTPUT_MESSAGES: &str = "gen_ai.output.messages";
    /// Operation values.
    pub const OP_CHAT: &str = "chat";
    pub const OP_EMBEDDINGS: &str = "embeddings";
    pub const OP_EXECUTE_TOOL: &str = "execute_tool";
    pub const PROVIDER_OPENAI: &str = "openai";
}

/// The span attribute that marks a crisis turn: the exporter keeps every
/// trace that carries it, whatever the sampling ratio.
pub const CRISIS_ATTRIBUTE: &str = "opencouch.crisis";

/// An id (thread, session, owner) as an opaque 16-hex-digit tag for traces
/// and logs: stable across processes so spans of one thread can be found
/// together, but not the id itself.
pub fn opaque_id(id: &str) -> String {
    // FNV-1a over a fixed prefix and the id.
    let h = crate::fnv::extend(crate::fnv::hash(b"opencouch-trace-id\0"), id.as_bytes());
    format!("{h:016x}")
}

/// Masks e-mail addresses and phone numbers in captured content (only used
/// when the operator turned content capture on).
pub fn mask_contacts(text: &str) -> String {
    let words: Vec<String> = text
        .split(' ')
        .map(|w| {
            if looks_like_email(w) {
                "[email]".to_owned()
            } else {
                w.to_owned()
            }
        })
        .collect();
    mask_phone_runs(&words.join(" "))
}

fn looks_like_email(word: &str) -> bool {
    let w = word.trim_matches(|c: char| !c.is_alphanumeric());
    match w.split_once('@') {
        Some((user, host)) => !user.is_empty() && host.contains('.') && !host.starts_with('.'),
        None => false,
    }
}

/// Replaces runs of digits (with `+ - ( ) .` and spaces inside) holding
/// seven or more digits by `[phone]`.
fn mask_phone_runs(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c.is_ascii_digit() || c == '+' || c == '(' {
            // The run, then back off trailing separators.
            let mut j = i;
            while j < chars.len() && (chars[j].is_ascii_digit() || "+-(). ".contains(chars[j])) {
                j += 1;
            }
            while j > i + 1 && !chars[j - 1].is_ascii_digit() && chars[j - 1] != ')' {
                j -= 1;
            }
            let digits = chars[i..j].iter().filter(|c| c.is_ascii_digit()).count();
            if digits >= 7 {
                out.push_str("[phone]");
            } else {
                out.extend(&chars[i..j]);
            }
            i = j.max(i + 1);
        } else {
            out.push(c);
            i += 1;
        }
    }
    out
}

/// The trace export's health, shared by the exporter (which writes it) and
/// the health reports (`/api/health`, `doctor`, chat `/status`).
#[derive(Debug)]
pub struct ExportHealth {
    enabled: AtomicBool,
    exported: AtomicU64,
    dropped: AtomicU64,
    last_error: Mutex<Option<String>>,
}

/// A copy of [`ExportHealth`] at one moment.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ExportSnapshot {
    /// Whether an OTLP endpoint is configured and the exporter runs.
    pub enabled: bool,
    /// Spans accepted by the collector.
    pub exported: u64,
    /// Spans lost: queue full, buffer full, or an export that failed.
    pub dropped: u64,
    /// The last export error (no content, no credentials), if any.
    pub last_error: Option<String>,
}

impl ExportSnapshot {
    /// One line for a status report.
    pub fn describe(&self) -> String {
        if !self.enabled {
            return "off (no OTLP endpoint configured)".to_owned();
        }
        match &self.last_error {
            None => format!(
                "on, {} spans exported, {} dropped",
                self.exported, self.dropped
            ),
            Some(e) => format!(
                "on, {} spans exported, {} dropped, last error: {e}",
                self.exported, self.dropped
            ),
        }
    }

    /// Whether the export is on and has not lost spans to errors lately.
    pub fn healthy(&self) -> bool {
        !self.enabled || self.last_error.is_none()
    }
}

impl ExportHealth {
    pub const fn new() -> Self {
        ExportHealth {
            enabled: AtomicBool::new(false),
            exported: AtomicU64::new(0),
            dropped: AtomicU64::new(0),
            last_error: Mutex::new(None),
        }
    }

    pub fn set_enabled(&self, on: bool) {
        self.enabled.store(on, Ordering::Relaxed);
    }

    pub fn add_exported(&self, n: u64) {
        self.exported.fetch_add(n, Ordering::Relaxed);
    }

    pub fn add_dropped(&self, n: u64) {
        self.dropped.fetch_add(n, Ordering::Relaxed);
    }

    /// Records the outcome of one export: `None` clears the last error.
    pub fn set_error(&self, error: Option<String>) {
        if let Ok(mut e) = self.last_error.lock() {
            *e = error;
        }
    }

    pub fn snapshot(&self) -> ExportSnapshot {
        ExportSnapshot {
            enabled: self.enabled.load(Ordering::Relaxed),
            exported: self.exported.load(Ordering::Relaxed),
            dropped: self.dropped.load(Ordering::Relaxed),
            last_error: self.last_error.lock().ok().and_then(|e| e.clone()),
        }
    }
}

impl Default for ExportHealth {
    fn default() -> Self {
        Self::new()
    }
}

/// The process's trace export health.
pub static EXPORT: ExportHealth = ExportHealth::new();

static CAPTURE_CONTENT: AtomicBool = AtomicBool::new(false);

/// Turns content capture on or off for the process (set by the exporter
/// from the operator's setting, on only while export is on).
pub fn set_capture_content(on: bool) {
    CAPTURE_CONTENT.store(on, Ordering::Relaxed);
}

/// Whether spans may carry content (e-mails and phone numbers masked):
/// only with the operator's explicit setting; each turn still decides
/// (never a crisis or an incognito turn).
pub fn capture_content() -> bool {
    CAPTURE_CONTENT.load(Ordering::Relaxed)
}

/// Upper bounds (seconds) of the latency histograms' buckets.
pub const LATENCY_BUCKETS: [f64; 12] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
];

/// Upper bounds (seconds) of the stage-duration histogram's buckets: the
/// stages of a turn take from tens of microseconds (the deterministic
/// gate's rules, a plan) to seconds (a model's reply).
pub const STAGE_BUCKETS: [f64; 17] = [
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
    5.0, 10.0, 30.0,
];

/// A Prometheus histogram, by default over [`LATENCY_BUCKETS`].
#[derive(Debug, Clone, PartialEq)]
pub struct Histogram {
    /// Upper bounds of the buckets, ascending.
    bounds: &'static [f64],
    /// Per bucket, not cumulative; the last entry is `+Inf`.
    counts: Vec<u64>,
    sum: f64,
    count: u64,
}

impl Default for Histogram {
    fn default() -> Self {
        Histogram::with_buckets(&LATENCY_BUCKETS)
    }
}

impl Histogram {
    /// An empty histogram over `bounds` (ascending upper bounds, seconds).
    pub const fn with_buckets(bounds: &'static [f64]) -> Self {
        Histogram {
            bounds,
            counts: Vec::new(),
            sum: 0.0,
            count: 0,
        }
    }

    pub fn observe(&mut self, seconds: f64) {
        if self.counts.is_empty() {
            self.counts = vec![0; self.bounds.len() + 1];
        }
        let i = self
            .bounds
            .iter()
            .position(|b| seconds <= *b)
            .unwrap_or(self.bounds.len());
        self.counts[i] += 1;
        self.sum += seconds;
        self.count += 1;
    }

    pub fn count(&self) -> u64 {
        self.count
    }

    /// Appends the histogram's series (`name_bucket`, `_sum`, `_count`)
    /// with `labels` (`key="value",…` or empty).
    pub fn render(&self, out: &mut String, name: &str, labels: &str) {
        use std::fmt::Write as _;
        let sep = if labels.is_empty() { "" } else { "," };
        let mut cumulative = 0;
        for (i, bound) in self.bounds.iter().enumerate() {
            cumulative += self.counts.get(i).copied().unwrap_or(0);
            let _ = writeln!(
                out,
                "{name}_bucket{{{labels}{sep}le=\"{bound}\"}} {cumulative}"
            );
        }
        let _ = writeln!(
            out,
            "{name}_bucket{{{labels}{sep}le=\"+Inf\"}} {}",
            self.count
        );
        let braces = if labels.is_empty() {
            String::new()
        } else {
            format!("{{{labels}}}")
        };
        let _ = writeln!(out, "{name}_sum{braces} {}", self.sum);
        let _ = writeln!(out, "{name}_count{braces} {}", self.count);
    }
}

/// Process-wide counters of work below the turn (model and tool calls),
/// recorded where the work happens and rendered by `/metrics`. Labels are
/// closed vocabularies (tiers, error kinds, registered tool names).
#[derive(Debug, Default)]
pub struct CallMetrics {
    /// (tier, outcome `ok`/`error`) → calls.
    pub model_calls: BTreeMap<(String, &'static str), u64>,
    /// (tier, error kind) → errors.
    pub model_errors: BTreeMap<(String, String), u64>,
    /// tier → latency of whole calls (a stream: until its end).
    pub model_latency: BTreeMap<String, Histogram>,
    /// tier → time to the first streamed token.
    pub first_token: BTreeMap<String, Histogram>,
    /// (tool, ok) → tool calls.
    pub tool_calls: BTreeMap<(String, bool), u64>,

    /// (memory kind, operation `insert`/`update`/`delete`) → records
    /// written to the memory store.
    pub memory_writes: BTreeMap<(&'static str, &'static str), u64>,
    /// (reason `requested`/`expired`, memory mode) → sessions ended.
    pub sessions_ended: BTreeMap<(&'static str, &'static str), u64>,
    /// Crisis-log append outcome (`captured`, `timeout`, `failed`) → appends.
    pub crisis_log_writes: BTreeMap<&'static str, u64>,
}

static CALLS: Mutex<CallMetrics> = Mutex::new(CallMetrics {
    model_calls: BTreeMap::new(),
    model_errors: BTreeMap::new(),
    model_latency: BTreeMap::new(),
    first_token: BTreeMap::new(),
    tool_calls: BTreeMap::new(),
    memory_writes: BTreeMap::new(),
    sessions_ended: BTreeMap::new(),
    crisis_log_writes: BTreeMap::new(),
});

/// Crisis-log appends running now (each is bounded; see the runtime's
/// `audit.rs`).
static CRISIS_LOG_IN_FLIGHT: AtomicU64 = AtomicU64::new(0);

fn with_calls(f: impl FnOnce(&mut CallMetrics)) {
    let mut c = CALLS
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    f(&mut c);
}

/// Records a finished model call.
pub fn record_model_call(tier: &str, seconds: f64, error: Option<&str>) {
    with_calls(|c| {
        let outcome = if error.is_some() { "error" } else { "ok" };
        *c.model_calls.entry((tier.to_owned(), outcome)).or_default() += 1;
        if let Some(kind) = error {
            *c.model_errors
                .entry((tier.to_owned(), kind.to_owned()))
                .or_default() += 1;
        }
        c.model_latency
            .entry(tier.to_owned())
            .or_default()
            .observe(seconds);
    });
}

/// Records the time to a stream's first token.
pub fn record_first_token(tier: &str, seconds: f64) {
    with_calls(|c| {
        c.first_token
            .entry(tier.to_owned())
            .or_default()
            .observe(seconds)
    });
}

/// Records one tool call (`tool` must be a registered tool's name, or
/// `unknown`).
pub fn record_tool_call(tool: &str, ok: bool) {
    with_calls(|c| *c.tool_calls.entry((tool.to_owned(), ok)).or_default() += 1);
}

/// Records one memory record written (`op`: `insert`, `update` or
/// `delete`) of `kind` (the store's memory kind). Static labels: counting
/// allocates nothing (docs/benchmarks.md, "Counters").
pub fn record_memory_write(kind: &'static str, op: &'static str) {
    with_calls(|c| {
        *c.memory_writes.entry((kind, op)).or_default() += 1;
    });
}

/// Records a finalized session: `reason` is `requested` (ended by the
/// person or the channel) or `expired` (the sweeper, or the next turn
/// after the timeout).
pub fn record_session_end(reason: &'static str, memory_mode: &'static str) {
    with_calls(|c| {
        *c.sessions_ended.entry((reason, memory_mode)).or_default() += 1;
    });
}

/// Records a finished crisis-log append (`captured`, `timeout`, `failed`).
pub fn record_crisis_log_write(outcome: &'static str) {
    with_calls(|c| *c.crisis_log_writes.entry(outcome).or_default() += 1);
}

/// Counts one crisis-log append as running until the guard drops.
pub fn crisis_log_write_started() -> InFlight {
    CRISIS_LOG_IN_FLIGHT.fetch_add(1, Ordering::Relaxed);
    InFlight(&CRISIS_LOG_IN_FLIGHT)
}

/// Crisis-log appends running now.
pub fn crisis_log_writes_in_flight() -> u64 {
    CRISIS_LOG_IN_FLIGHT.load(Ordering::Relaxed)
}

/// Holds one unit of an in-flight gauge; gives it back on drop (also when
/// the work is cancelled or times out).
#[derive(Debug)]
pub struct InFlight(&'static AtomicU64);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Appends the call metrics and the trace export's counters in the
/// Prometheus text format.
pub fn render_call_metrics(out: &mut String) {
    use std::fmt::Write as _;
    let c = CALLS
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let _ = writeln!(
        out,
        "# HELP opencouch_model_calls_total Model calls by tier and outcome."
    );
    let _ = writeln!(out, "# TYPE opencouch_model_calls_total counter");
    for ((tier, outcome), n) in &c.model_calls {
        let _ = writeln!(
            out,
            "opencouch_model_calls_total{{tier=\"{tier}\",outcome=\"{outcome}\"}} {n}"
        );
    }
    let _ = writeln!(
        out,
        "# HELP opencouch_model_call_errors_total Failed model calls by tier and error kind."
    );
    let _ = writeln!(out, "# TYPE opencouch_model_call_errors_total counter");
    for ((tier, kind), n) in &c.model_errors {
        let _ = writeln!(
            out,
            "opencouch_model_call_errors_total{{tier=\"{tier}\",kind=\"{kind}\"}} {n}"
        );
    }
    let _ = writeln!(
        out,
        "# HELP opencouch_model_call_duration_seconds Model call latency by tier."
    );
    let _ = writeln!(
        out,
        "# TYPE opencouch_model_call_duration_seconds histogram"
    );
    for (tier, h) in &c.model_latency {
        h.render(
            out,
            "opencouch_model_call_duration_seconds",
            &format!("tier=\"{tier}\""),
        );
    }
    let _ = writeln!(
        out,
        "# HELP opencouch_model_time_to_first_token_seconds Time to the first streamed token by tier."
    );
    let _ = writeln!(
        out,
        "# TYPE opencouch_model_time_to_first_token_seconds histogram"
    );
    for (tier, h) in &c.first_token {
        h.render(
            out,
            "opencouch_model_time_to_first_token_seconds",
            &format!("tier=\"{tier}\""),
        );
    }
    let _ = writeln!(
        out,
        "# HELP opencouch_tool_calls_total Tool calls by tool and outcome."
    );
    let _ = writeln!(out, "# TYPE opencouch_tool_calls_total counter");
    for ((tool, ok), n) in &c.tool_calls {
        let outcome = if *ok { "ok" } else { "error" };
        let _ = writeln!(
            out,
            "opencouch_tool_calls_total{{tool=\"{tool}\",outcome=\"{outcome}\"}} {n}"
        );
    }
    let _ = writeln!(
        out,
        "# HELP opencouch_memory_writes_total Memory records written to the store, by memory kind (semantic facts, episodic session arcs, procedural profile) and operation."
    );
    let _ = writeln!(out, "# TYPE opencouch_memory_writes_total counter");
    for ((kind, op), n) in &c.memory_writes {
        let _ = writeln!(
            out,
            "opencouch_memory_writes_total{{kind=\"{kind}\",operation=\"{op}\"}} {n}"
        );
    }
    let _ = writeln!(
        out,
        "# HELP opencouch_sessions_ended_total Sessions finalized, by reason (requested, expired) and memory mode."
    );
    let _ = writeln!(out, "# TYPE opencouch_sessions_ended_total counter");
    for ((reason, mode), n) in &c.sessions_ended {
        let _ = writeln!(
            out,
            "opencouch_sessions_ended_total{{reason=\"{reason}\",memory_mode=\"{mode}\"}} {n}"
        );
    }
    let _ = writeln!(
        out,
        "# HELP opencouch_crisis_log_writes_total Crisis-log appends by outcome (captured, timeout, failed)."
    );
    let _ = writeln!(out, "# TYPE opencouch_crisis_log_writes_total counter");
    for (outcome, n) in &c.crisis_log_writes {
        let _ = writeln!(
            out,
            "opencouch_crisis_log_writes_total{{outcome=\"{outcome}\"}} {n}"
        );
    }
    drop(c);
    let e = EXPORT.snapshot();
    let _ = writeln!(
        out,
        "# HELP opencouch_trace_export_enabled Whether trace export is on."
    );
    let _ = writeln!(out, "# TYPE opencouch_trace_export_enabled gauge");
    let _ = writeln!(
        out,
        "opencouch_trace_export_enabled {}",
        u8::from(e.enabled)
    );
    let _ = writeln!(
        out,
        "# HELP opencouch_trace_spans_exported_total Spans the collector accepted."
    );
    let _ = writeln!(out, "# TYPE opencouch_trace_spans_exported_total counter");
    let _ = writeln!(out, "opencouch_trace_spans_exported_total {}", e.exported);
    let _ = writeln!(
        out,
        "# HELP opencouch_trace_spans_dropped_total Spans lost to a full queue or a failed export."
    );
    let _ = writeln!(out, "# TYPE opencouch_trace_spans_dropped_total counter");
    let _ = writeln!(out, "opencouch_trace_spans_dropped_total {}", e.dropped);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn opaque_ids_are_stable_and_hide_the_id() {
        let a = opaque_id("thread-123");
        assert_eq!(a, opaque_id("thread-123"));
        assert_ne!(a, opaque_id("thread-124"));
        assert_eq!(a.len(), 16);
        assert!(!a.contains("thread"));
    }

    #[test]
    fn contacts_are_masked() {
        let cases = [
            (
                "write to ana.lee@example.org today",
                "write to [email] today",
            ),
            ("call me on +44 7700 900123.", "call me on [phone]."),
            ("call 555-123-4567 now", "call [phone] now"),
            ("I slept 7 hours", "I slept 7 hours"),
            ("in 2024 it was hard", "in 2024 it was hard"),
        ];
        for (input, want) in cases {
            assert_eq!(mask_contacts(input), want, "{input}");
        }
    }

    #[test]
    fn histograms_render_cumulative_buckets() {
        let mut h = Histogram::default();
        h.observe(0.003);
        h.observe(0.2);
        h.observe(100.0);
        let mut out = String::new();
        h.render(&mut out, "x_seconds", "tier=\"fast\"");
        assert!(out.contains("x_seconds_bucket{tier=\"fast\",le=\"0.005\"} 1\n"));
        assert!(out.contains("x_seconds_bucket{tier=\"fast\",le=\"0.25\"} 2\n"));
        assert!(out.contains("x_seconds_bucket{tier=\"fast\",le=\"30\"} 2\n"));
        assert!(out.contains("x_seconds_bucket{tier=\"fast\",le=\"+Inf\"} 3\n"));
        assert!(out.contains("x_seconds_count{tier=\"fast\"} 3\n"));
    }

    #[test]
    fn stage_histograms_resolve_microseconds() {
        let mut h = Histogram::with_buckets(&STAGE_BUCKETS);
        h.observe(0.000_04);
        h.observe(0.000_3);
        h.observe(1.2);
        let mut out = String::new();
        h.render(&mut out, "s_seconds", "stage=\"plan\"");
        assert!(out.contains("s_seconds_bucket{stage=\"plan\",le=\"0.0001\"} 1\n"));
        assert!(out.contains("s_seconds_bucket{stage=\"plan\",le=\"0.0005\"} 2\n"));
        assert!(out.contains("s_seconds_bucket{stage=\"plan\",le=\"2.5\"} 3\n"));
        assert_eq!(out.matches("_bucket{").count(), STAGE_BUCKETS.len() + 1);
    }

    #[test]
    fn snapshot_describes_the_export() {
        let h = ExportHealth::new();
        assert_eq!(h.snapshot().describe(), "off (no OTLP endpoint configured)");
        assert!(h.snapshot().healthy());
        h.set_enabled(true);
        h.add_exported(3);
        h.add_dropped(2);
        h.set_error(Some("connection refused".into()));
        let s = h.snapshot();
        assert!(!s.healthy());
        assert_eq!(
            s.describe(),
            "on, 3 spans exported, 2 dropped, last error: connection refused"
        );
    }
}
