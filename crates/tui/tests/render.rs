//! The full screen drawn on ratatui's `TestBackend`, compared with plain-text
//! frame snapshots in `tests/snapshots/` (run with `UPDATE_SNAPSHOTS=1` to
//! write them after a deliberate change, then read the diff).
#![allow(clippy::unwrap_used)]

use std::path::PathBuf;

use opencouch_tui::app::{App, Entry, Header};
use opencouch_tui::markdown;
use opencouch_tui::theme::ThemeName;
use opencouch_tui::ui;
use ratatui::Terminal;
use ratatui::backend::TestBackend;
use ratatui::buffer::Buffer;
use serde_json::json;

fn frame_text(buffer: &Buffer) -> String {
    let width = buffer.area.width as usize;
    let mut rows = Vec::new();
    for chunk in buffer.content().chunks(width) {
        let mut row = String::new();
        let mut skip = 0;
        for cell in chunk {
            if skip > 0 {
                skip -= 1;
                continue;
            }
            let sym = cell.symbol();
            row.push_str(sym);
            skip = unicode_width::UnicodeWidthStr::width(sym).saturating_sub(1);
        }
        rows.push(row.trim_end().to_owned());
    }
    rows.join("\n") + "\n"
}

fn draw(app: &mut App, width: u16, height: u16) -> String {
    let mut terminal = Terminal::new(TestBackend::new(width, height)).unwrap();
    terminal.draw(|f| ui::draw(f, app)).unwrap();
    frame_text(terminal.backend().buffer())
}

fn snapshot(name: &str, got: &str) {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/snapshots")
        .join(format!("{name}.txt"));
    if std::env::var_os("UPDATE_SNAPSHOTS").is_some() {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, got).unwrap();
        return;
    }
    let want = std::fs::read_to_string(&path).unwrap_or_else(|_| {
        panic!(
            "no snapshot {}: run with UPDATE_SNAPSHOTS=1",
            path.display()
        )
    });
    assert_eq!(got, want, "frame {name} differs from its snapshot:\n{got}");
}

fn app() -> App {
    let mut app = App::new(ThemeName::Mono);
    app.header = Header {
        mode: "hybrid".into(),
        memory: "persistent".into(),
        thread: "cli:default".into(),
        owner: "sam".into(),
        model: "fast-model".into(),
    };
    app.entries
        .push(Entry::User("I can't sleep before exams.".into()));
    app.entries.push(Entry::Assistant {
        text: "That sounds **exhausting**. A few things can help:\n\n- keep a *wind-down* hour\n- try `4-7-8` breathing\n\nMore at [Sleep tips](https://example.org/sleep).".into(),
        crisis: false,
    });
    app
}

fn resources() -> Vec<serde_json::Value> {
    vec![
        json!({"name": "988 Suicide & Crisis Lifeline", "phone": "988", "text": "988",
               "url": "https://988lifeline.org", "chat_url": "https://988lifeline.org/chat"}),
        json!({"name": "Crisis Text Line", "text": "741741", "text_keyword": "HOME",
               "url": "https://www.crisistextline.org"}),
    ]
}

#[test]
fn main_layout() {
    let mut app = app();
    app.input.insert_str("thank you");
    snapshot("main_80x24", &draw(&mut app, 80, 24));
}

#[test]
fn crisis_panel_stays_visible_while_an_episode_is_open() {
    let mut app = app();
    app.entries
        .push(Entry::User("I don't want to be here anymore".into()));
    app.entries.push(Entry::Assistant {
        text: "I'm really glad you told me. You deserve support right now.".into(),
        crisis: true,
    });
    app.crisis = Some(resources());
    let frame = draw(&mut app, 100, 30);
    assert!(frame.contains("You deserve support right now"));
    assert!(frame.contains("call 988"));
    assert!(frame.contains("text HOME to 741741"));
    assert!(frame.contains("https://988lifeline.org/chat"));
    snapshot("crisis_100x30", &frame);
}

#[test]
fn diagnostics_panel_under_ui_full() {
    let output: opencouch_core::AgentOutput = serde_json::from_value(json!({
        "thread_id": "cli:default",
        "response_text": "ok",
        "response_type": "therapeutic",
        "route": "therapeutic",
        "response_style": "reflective",
        "session_action": "none",
        "crisis": {"level": 0, "confidence": "high", "reason": "no risk",
                   "needs_crisis_response": false, "needs_clarification": false},
        "diagnostics": {"crisis_gate_ms": 1, "turn_total_ms": 412, "crisis_layer": "rules",
                        "retrieval_path": "hybrid", "retrieval_hits": 3,
                        "openai_triage_route": "therapeutic", "model_tools": ["recall"]},
        "saved": true
    }))
    .unwrap();
    let mut app = app();
    app.ui_full = true;
    app.diagnostics = opencouch_tui::diag::lines(&output);
    let frame = draw(&mut app, 120, 30);
    for want in [
        "last turn",
        "turn_total",
        "412",
        "hybrid",
        "hits 3",
        "triage_route",
    ] {
        assert!(frame.contains(want), "{want}:\n{frame}");
    }
    snapshot("diagnostics_120x30", &frame);
}

#[test]
fn narrow_terminal_of_sixty_columns() {
    let mut app = app();
    app.ui_full = true;
    app.diagnostics = vec!["route therapeutic · style reflective".into()];
    let frame = draw(&mut app, 60, 30);
    for line in frame.lines() {
        assert!(unicode_width::UnicodeWidthStr::width(line) <= 60);
    }
    snapshot("narrow_60x30", &frame);
}

#[test]
fn a_streamed_reply_ends_equal_to_the_reply_rendered_at_once() {
    let reply = "Let's try **box breathing**:\n\n1. breathe in for *four*\n2. hold for four\n3. out for four\n\n```\nin 4 · hold 4 · out 4\n```\nSee [the guide](https://example.org/box) when you like, it is a long line that wraps.";
    let width = 60;
    let mut whole = App::new(ThemeName::Mono);
    whole.entries.push(Entry::User("help".into()));
    whole.entries.push(Entry::Assistant {
        text: reply.into(),
        crisis: false,
    });
    let at_once = draw(&mut whole, width, 30);
    let final_lines = markdown::render(reply, width as usize - 2, &whole.theme);

    let mut streamed = App::new(ThemeName::Mono);
    streamed.start_turn("help".into());
    let chars: Vec<char> = reply.chars().collect();
    let mut frames = 0;
    for chunk in chars.chunks(7) {
        streamed.text(&chunk.iter().collect::<String>());
        let frame = draw(&mut streamed, width, 30);
        frames += 1;
        assert!(frame.contains("writing…"), "{frame}");
        // Every committed line is already what the whole reply shows.
        let stream = streamed.streaming.as_ref().unwrap();
        let committed = stream.committed();
        assert_eq!(committed, &final_lines[..committed.len()]);
    }
    assert!(frames > 10);
    streamed.final_reply(reply.into(), false);
    assert_eq!(draw(&mut streamed, width, 30), at_once);
}
