//! Content capture, the operator's explicit opt-in: ordinary persistent
//! turns carry the prompt and reply on their model spans with e-mail
//! addresses and phone numbers masked; crisis and incognito turns never do.
//! (Its own test binary: the capture switch is process-wide.)

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{Options, world};
use opencouch_testkit::otlp::ExportedSpan;

fn content_spans(spans: &[ExportedSpan]) -> Vec<&ExportedSpan> {
    spans
        .iter()
        .filter(|s| s.attr("gen_ai.input.messages").is_some())
        .collect()
}

#[tokio::test]
async fn capture_masks_contacts_and_skips_crisis_and_incognito_turns() {
    let w = world(Options {
        capture: true,
        ..Options::default()
    })
    .await;

    w.turn(
        "thread-capture",
        "my manager ana.lee@example.org keeps calling 555-123-4567 late",
    )
    .await;
    w.flush().await;
    let spans = w.collector.spans();
    let captured = content_spans(&spans);
    assert!(!captured.is_empty(), "no content captured with capture on");
    for s in &captured {
        let text = s.str_attr("gen_ai.input.messages").unwrap();
        assert!(!text.contains("ana.lee@example.org"), "{text}");
        assert!(!text.contains("555-123-4567"), "{text}");
    }
    assert!(captured.iter().any(|s| {
        s.str_attr("gen_ai.input.messages")
            .unwrap()
            .contains("[email]")
    }));
    let ordinary = spans.len();

    w.turn(
        "thread-capture-2",
        "I want to kill myself, I have a rope ready",
    )
    .await;
    w.incognito_turn("thread-capture-3", "nobody should know I said this")
        .await;
    w.flush().await;
    let later: Vec<ExportedSpan> = w.collector.spans().into_iter().skip(ordinary).collect();
    assert!(!later.is_empty());
    assert!(
        content_spans(&later).is_empty(),
        "a crisis or incognito turn carried content"
    );
    for body in w.collector.bodies() {
        let text = String::from_utf8_lossy(&body);
        assert!(!text.contains("rope"), "crisis text left the process");
        assert!(
            !text.contains("nobody should know"),
            "incognito text left the process"
        );
    }
}
