//! The last turn's diagnostics as a person reads them: stage timings, route
//! and style, the crisis gate's verdict, the retrieval path and hits, model
//! calls. Diagnostics never hold message text; this shows only their keys'
//! values.

use opencouch_core::AgentOutput;
use serde_json::Value;

fn show(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Array(items) => items.iter().map(show).collect::<Vec<_>>().join(", "),
        Value::Null => "-".to_owned(),
        other => other.to_string(),
    }
}

/// Whether a diagnostics key is about retrieval of memory.
fn is_retrieval(k: &str) -> bool {
    k.starts_with("retrieval") || k.starts_with("memory_retriev") || k.contains("hits")
}

/// Whether a diagnostics key is about a model call.
fn is_model(k: &str) -> bool {
    k.starts_with("openai_")
        || k.starts_with("model")
        || k.contains("llm")
        || k.ends_with("_tool_calls")
}

/// The panel's lines, grouped.
pub fn lines(out: &AgentOutput) -> Vec<String> {
    let d = &out.diagnostics.0;
    let mut lines = Vec::new();
    lines.push(format!(
        "route {} · style {}{}",
        out.route,
        out.response_style,
        out.therapeutic_approach
            .map(|a| format!(" · {a}"))
            .unwrap_or_default()
    ));
    if let Some(stage) = d.get("session_stage") {
        lines.push(format!(
            "stage {}{}",
            show(stage),
            d.get("session_stage_cue")
                .map(|v| format!(" ({})", show(v)))
                .unwrap_or_default()
        ));
    }
    lines.push(format!(
        "crisis level {}{}",
        out.crisis.level.get(),
        d.get("crisis_layer")
            .map(|v| format!(" ({})", show(v)))
            .unwrap_or_default()
    ));
    lines.push("timings (ms):".to_owned());
    let mut timings: Vec<(&String, &Value)> =
        d.iter().filter(|(k, _)| k.ends_with("_ms")).collect();
    timings.sort_by_key(|(k, _)| k.as_str() == "turn_total_ms");
    if timings.is_empty() {
        lines.push("  none recorded".to_owned());
    }
    for (k, v) in timings {
        // Fractional milliseconds to three places: a long float would wrap
        // the panel's line and push the rest of it out of view.
        let value = match v.as_f64() {
            Some(ms) if v.is_f64() => format!("{ms:.3}"),
            _ => show(v),
        };
        lines.push(format!("  {:<18} {value}", k.trim_end_matches("_ms")));
    }
    lines.push("retrieval:".to_owned());
    let retrieval: Vec<_> = d.iter().filter(|(k, _)| is_retrieval(k)).collect();
    if retrieval.is_empty() {
        lines.push("  not used".to_owned());
    }
    for (k, v) in retrieval {
        lines.push(format!(
            "  {} {}",
            k.trim_start_matches("retrieval_"),
            show(v)
        ));
    }
    lines.push("model calls:".to_owned());
    let model: Vec<_> = d.iter().filter(|(k, _)| is_model(k)).collect();
    if model.is_empty() {
        lines.push("  none".to_owned());
    }
    for (k, v) in model {
        lines.push(format!("  {} {}", k.trim_start_matches("openai_"), show(v)));
    }
    if let Some(v) = d.get("storage_status") {
        lines.push(format!("storage {}", show(v)));
    }
    lines
}

/// One line under a reply in verbose mode.
pub fn verbose_line(out: &AgentOutput) -> String {
    format!(
        "· route {} · style {} · crisis level {}{}",
        out.route,
        out.response_style,
        out.crisis.level.get(),
        out.diagnostics
            .get("turn_total_ms")
            .map(|v| format!(" · {} ms", show(v)))
            .unwrap_or_default()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_session_stage_is_shown_with_its_cue_when_the_turn_has_one() {
        let mut out: AgentOutput = serde_json::from_value(serde_json::json!({
            "thread_id": "t",
            "response_text": "ok",
            "response_type": "therapeutic",
            "route": "therapeutic",
            "response_style": "reflective",
            "session_action": "none",
            "crisis": {"level": 0, "confidence": "high", "reason": "no risk",
                       "needs_crisis_response": false, "needs_clarification": false},
            "diagnostics": {},
            "saved": true
        }))
        .expect("an output");
        assert!(!lines(&out).iter().any(|l| l.starts_with("stage ")));
        out.diagnostics.set("session_stage", "deepening");
        out.diagnostics.set("session_stage_cue", "disclosure");
        assert!(
            lines(&out).contains(&"stage deepening (disclosure)".to_owned()),
            "{:?}",
            lines(&out)
        );
    }
}
