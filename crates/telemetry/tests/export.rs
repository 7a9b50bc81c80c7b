//! Trace export end to end: a hybrid turn against the fake model, its spans
//! decoded by the fake OTLP collector.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::BTreeSet;
use std::time::Duration;

use common::{Options, world};
use opencouch_testkit::otlp::{AttrValue, ExportedSpan};

const SENTINEL: &str = "ZEBRA-SENTINEL-4417";

fn names(spans: &[ExportedSpan]) -> BTreeSet<String> {
    spans.iter().map(|s| s.name.clone()).collect()
}

fn contains(haystack: &[u8], needle: &str) -> bool {
    haystack
        .windows(needle.len())
        .any(|w| w == needle.as_bytes())
}

#[tokio::test]
async fn a_hybrid_turn_is_one_trace_of_stages_with_genai_attributes_and_no_content() {
    let w = world(Options::default()).await;
    let thread = "thread-export-1";
    let out = w
        .turn(
            thread,
            &format!("{SENTINEL} work was rough today and I keep replaying the meeting"),
        )
        .await;
    assert_eq!(out.crisis.level.get(), 0);
    w.settle_background().await;
    w.flush().await;
    let all = w.collector.spans();
    assert!(!all.is_empty(), "nothing exported");

    // One trace, rooted at the turn. The background memory extraction the
    // turn started after its commit is a trace of its own (it outlives the
    // turn), linked to the turn's root.
    let roots: Vec<&ExportedSpan> = all.iter().filter(|s| s.is_root()).collect();
    let turns: Vec<&&ExportedSpan> = roots.iter().filter(|s| s.name == "turn").collect();
    assert_eq!(turns.len(), 1, "{:?}", names(&all));
    let root = *turns[0];
    assert_eq!(roots.len(), 2, "{:?}", names(&all));
    for other in roots.iter().filter(|s| s.span_id != root.span_id) {
        assert_eq!(other.name, "memory_extraction", "{:?}", names(&all));
        assert_eq!(
            other.links,
            vec![(root.trace_id.clone(), root.span_id.clone())],
            "the extraction's trace is not linked to its turn"
        );
    }
    let spans: Vec<ExportedSpan> = all
        .iter()
        .filter(|s| s.trace_id == root.trace_id)
        .cloned()
        .collect();
    assert!(
        !names(&spans).contains("memory_extraction"),
        "the background extraction is inside the turn's trace"
    );
    assert_eq!(root.str_attr("opencouch.route"), Some(out.route.as_str()));
    assert_eq!(
        root.attr("opencouch.crisis_level"),
        Some(&AttrValue::Int(0))
    );
    assert_eq!(root.attr("opencouch.saved"), Some(&AttrValue::Bool(true)));
    assert_eq!(root.str_attr("opencouch.memory_mode"), Some("persistent"));
    assert_eq!(
        root.resource.get("service.name"),
        Some(&AttrValue::Str("opencouch-test".into()))
    );
    // Ids only as opaque hashes.
    let hashed = opencouch_core::telemetry::opaque_id(thread);
    assert_eq!(root.str_attr("opencouch.thread"), Some(hashed.as_str()));

    // The stage tree.
    let got = names(&spans);
    for stage in [
        "crisis_gate",
        "crisis_gate.rules",
        "triage",
        "plan",
        "specialist",
        "commit",
    ] {
        assert!(got.contains(stage), "no {stage} span in {got:?}");
    }
    let by_id = |id: &str| spans.iter().find(|s| s.span_id == id);
    let gate = spans.iter().find(|s| s.name == "crisis_gate").unwrap();
    assert_eq!(gate.parent_span_id, root.span_id);
    let rules = spans
        .iter()
        .find(|s| s.name == "crisis_gate.rules")
        .unwrap();
    assert_eq!(rules.parent_span_id, gate.span_id);

    // Model calls follow the GenAI conventions and sit under a stage.
    let chats: Vec<&ExportedSpan> = spans
        .iter()
        .filter(|s| s.str_attr("gen_ai.operation.name") == Some("chat"))
        .collect();
    assert!(!chats.is_empty(), "no model call span in {got:?}");
    for chat in &chats {
        let model = chat.str_attr("gen_ai.request.model").unwrap();
        assert_eq!(chat.name, format!("chat {model}"));
        assert_eq!(chat.str_attr("gen_ai.provider.name"), Some("openai"));
        assert!(chat.str_attr("gen_ai.response.model").is_some());
        // Counts survive the redaction of keys holding "token"; the finish
        // reasons are a string array.
        for key in ["gen_ai.usage.input_tokens", "gen_ai.usage.output_tokens"] {
            assert!(
                matches!(chat.attr(key), None | Some(AttrValue::Int(_))),
                "{key}: {:?}",
                chat.attributes
            );
        }
        assert!(
            matches!(
                chat.attr("gen_ai.response.finish_reasons"),
                None | Some(AttrValue::StrArray(_))
            ),
            "{:?}",
            chat.attributes
        );
        let parent = by_id(&chat.parent_span_id).expect("a chat span has a parent");
        assert_ne!(
            parent.span_id, root.span_id,
            "model call directly under the turn"
        );
        assert!(chat.attr("gen_ai.input.messages").is_none());
        assert!(chat.attr("gen_ai.output.messages").is_none());
    }

    assert!(
        chats.iter().any(|c| {
            matches!(c.attr("gen_ai.usage.input_tokens"), Some(AttrValue::Int(n)) if *n > 0)
                && matches!(c.attr("gen_ai.response.finish_reasons"), Some(AttrValue::StrArray(r)) if r.len() == 1)
        }),
        "no model call span with its usage and finish reason"
    );

    // One source of timings: the span's duration is the diagnostics' figure.
    let triage = spans.iter().find(|s| s.name == "triage").unwrap();
    let from_diag = out.diagnostics.get("triage_ms").and_then(|v| v.as_f64());
    assert_eq!(
        triage.attr("duration_ms"),
        from_diag.map(AttrValue::Double).as_ref()
    );

    // No content anywhere: not the message, not the reply, not the raw
    // thread id, not the collector's credentials.
    for body in w.collector.bodies() {
        assert!(!contains(&body, SENTINEL), "the message left the process");
        assert!(
            !contains(&body, thread),
            "the raw thread id left the process"
        );
        assert!(
            !contains(&body, &out.response_text),
            "the reply left the process"
        );
    }
    let logs = w.logs.text();
    assert!(!logs.is_empty(), "the test subscriber logged nothing");
    assert!(!logs.contains(SENTINEL), "the message is in the logs");
    assert!(!logs.contains("collector-secret"));

    // The headers reached the collector, and the export is healthy.
    assert!(
        w.collector
            .headers()
            .iter()
            .flatten()
            .any(|(k, v)| k == "authorization" && v == "Bearer collector-secret")
    );
    let health = w.health.snapshot();
    assert!(health.enabled);
    assert_eq!(health.exported as usize, all.len());
    assert_eq!(health.dropped, 0);
    assert!(health.healthy());
}

#[tokio::test]
async fn ratio_zero_exports_no_ordinary_turn_and_every_crisis_turn() {
    let w = world(Options {
        ratio: 0.0,
        ..Options::default()
    })
    .await;
    w.turn("thread-ratio", "my week was busy, lots of deadlines")
        .await;
    w.flush().await;
    assert!(
        w.collector.spans().is_empty(),
        "an ordinary turn was sampled at ratio 0"
    );

    let out = w
        .turn(
            "thread-ratio",
            "I am going to kill myself tonight, I have the pills here",
        )
        .await;
    assert!(out.crisis.level.needs_crisis_response());
    w.flush().await;
    let spans = w.collector.spans();
    let root = spans
        .iter()
        .find(|s| s.is_root())
        .expect("the crisis turn's root");
    assert_eq!(root.name, "turn");
    assert_eq!(root.attr("opencouch.crisis"), Some(&AttrValue::Bool(true)));
    assert!(names(&spans).contains("crisis_gate"));
    assert!(names(&spans).contains("crisis_log"));
    for body in w.collector.bodies() {
        assert!(!contains(&body, "pills"), "crisis text left the process");
    }
}

#[tokio::test]
async fn a_dead_collector_fails_no_turn_and_counts_dropped_spans() {
    let w = world(Options {
        dead_endpoint: true,
        ..Options::default()
    })
    .await;
    let out = w.turn("thread-dead", "long day, tired").await;
    assert!(!out.response_text.is_empty());
    w.flush().await;
    let health = w.health.snapshot();
    assert!(health.dropped > 0, "{health:?}");
    assert_eq!(health.exported, 0);
    assert!(health.last_error.is_some());
    assert!(!health.healthy());
    // And the next turn still works.
    let again = w.turn("thread-dead", "still here").await;
    assert!(!again.response_text.is_empty());
}

#[tokio::test]
async fn a_collector_that_answers_503_counts_the_batch_dropped_then_recovers() {
    let w = world(Options::default()).await;
    w.collector.fail_with(Some(503));
    w.turn("thread-503", "hello there").await;
    w.flush().await;
    let failed = w.health.snapshot();
    assert!(
        failed.dropped > 0 && failed.last_error.is_some(),
        "{failed:?}"
    );
    w.collector.fail_with(None);
    w.turn("thread-503", "hello again").await;
    w.flush().await;
    let ok = w.health.snapshot();
    assert!(ok.exported > 0);
    assert!(ok.last_error.is_none(), "{ok:?}");
    assert!(w.collector.wait_for_spans(1, Duration::from_secs(1)).await);
}

#[tokio::test]
async fn sensitive_fields_are_redacted_in_spans_and_logs() {
    let w = world(Options::default()).await;
    {
        let span = tracing::info_span!(
            target: "opencouch_test",
            "probe",
            user_message = "I feel terrible",
            api_key = "sk-live-123456",
            note = %"x".repeat(1000),
        );
        let _e = span.enter();
        tracing::warn!(target: "opencouch_test", transcript = "what they said", "probe event");
    }
    w.flush().await;
    let spans = w.collector.spans();
    let probe = spans
        .iter()
        .find(|s| s.name == "probe")
        .expect("probe span");
    assert_eq!(probe.str_attr("user_message"), Some("[redacted]"));
    assert_eq!(probe.str_attr("api_key"), Some("[redacted]"));
    assert_eq!(probe.str_attr("note").map(|s| s.chars().count()), Some(240));
    let (_, event) = probe
        .events
        .iter()
        .find(|(name, _)| name == "probe event")
        .expect("the event");
    assert_eq!(
        event.get("transcript"),
        Some(&AttrValue::Str("[redacted]".into()))
    );
    let logs = w.logs.text();
    assert!(logs.contains("probe event"));
    assert!(logs.contains("transcript=[redacted]"), "{logs}");
    assert!(!logs.contains("what they said"));
    assert!(!logs.contains("I feel terrible"));
    assert!(!logs.contains("sk-live-123456"));
}
