//! The full screen drawn on ratatui's `TestBackend`, compared with plain-text
//! frame snapshots in `tests/snapshots/` (run with `UPDATE_SNAPSHOTS=1` to
//! write them after a deliberate change, then read the diff).
#![allow(clippy::unwrap_used)]

use std::path::PathBuf;

use opencouch_tui::app::{App, CrisisPanel, Entry, Header};
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
    frame_text(&draw_buffer(app, width, height))
}

/// The frame with its styles (to compare whole frames, colours included).
fn draw_buffer(app: &mut App, width: u16, height: u16) -> Buffer {
    let mut terminal = Terminal::new(TestBackend::new(width, height)).unwrap();
    terminal.draw(|f| ui::draw(f, app)).unwrap();
    terminal.backend().buffer().clone()
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
    app.crisis = Some(CrisisPanel {
        resources: resources(),
        plan: Vec::new(),
    });
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
    let at_once = draw_buffer(&mut whole, width, 30);
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
    // The last frame of the stream (every line committed) shows the reply
    // as the whole reply rendered at once does, styles included...
    assert_eq!(streamed.streaming.clone().unwrap().finish(), final_lines);
    // ...and so does the frame once the reply is final.
    streamed.final_reply(reply.into(), false);
    assert_eq!(draw_buffer(&mut streamed, width, 30), at_once);
}

#[test]
fn a_reply_streamed_across_a_resize_ends_as_the_reply_rendered_at_the_new_width() {
    let reply = "Some **steady** words:\n\n- one *small* step, then another small step after it\n- and a [link](https://example.org/x)\n\nThat is all for now, take your time with it.";
    let mut whole = App::new(ThemeName::Calm);
    whole.entries.push(Entry::User("hi".into()));
    whole.entries.push(Entry::Assistant {
        text: reply.into(),
        crisis: false,
    });
    let at_once = draw_buffer(&mut whole, 60, 30);

    let mut streamed = App::new(ThemeName::Calm);
    streamed.start_turn("hi".into());
    let chars: Vec<char> = reply.chars().collect();
    let half = chars.len() / 2;
    for chunk in chars[..half].chunks(5) {
        streamed.text(&chunk.iter().collect::<String>());
        draw(&mut streamed, 100, 30);
    }
    for chunk in chars[half..].chunks(5) {
        streamed.text(&chunk.iter().collect::<String>());
        draw(&mut streamed, 60, 30);
        let committed = streamed.streaming.as_ref().unwrap().committed().to_vec();
        let want = markdown::render(reply, 58, &streamed.theme);
        assert_eq!(committed, want[..committed.len()]);
    }
    streamed.final_reply(reply.into(), false);
    assert_eq!(draw_buffer(&mut streamed, 60, 30), at_once);
}

#[test]
fn the_crisis_panel_at_sixty_columns_keeps_every_line_and_the_persons_plan() {
    let mut app = app();
    app.entries.push(Entry::Assistant {
        text: "I'm here with you. Please reach out to one of these lines now.".into(),
        crisis: true,
    });
    app.crisis = Some(CrisisPanel {
        resources: resources(),
        plan: vec![
            "Your own safety plan:".into(),
            "Things I can do on my own: slow breathing; a cold shower".into(),
            "People I can ask for help: my friend Dolores (your number: +34 600 111 222)".into(),
        ],
    });
    let frame = draw(&mut app, 60, 30);
    for want in [
        "call 988",
        "https://988lifeline.org/chat",
        "text HOME to 741741",
        "If you are in immediate danger, call your local emergency",
        "Your own safety plan:",
        "slow breathing",
        "+34 600 111 222",
    ] {
        assert!(frame.contains(want), "{want}:\n{frame}");
    }
    for line in frame.lines() {
        assert!(unicode_width::UnicodeWidthStr::width(line) <= 60);
    }
    snapshot("crisis_plan_60x30", &frame);

    // A short terminal: the verified lines stay, the plan is one command
    // away.
    let short = draw(&mut app, 60, 16);
    assert!(short.contains("call 988"), "{short}");
    assert!(short.contains("/sos shows all of it"), "{short}");
}

#[test]
fn the_header_keeps_every_field_in_a_narrow_terminal() {
    let mut app = app();
    for width in [120u16, 80, 60, 40] {
        let frame = draw(&mut app, width, 24);
        let header = frame.lines().next().unwrap();
        for field in ["hybrid", "persistent", "sam"] {
            assert!(header.contains(field), "{width}: {header}");
        }
        if width >= 60 {
            assert!(header.contains("cli:default"), "{width}: {header}");
            assert!(header.contains("fast-model"), "{width}: {header}");
        }
        assert!(unicode_width::UnicodeWidthStr::width(header) <= width as usize);
    }
    let h = ui::header_text(&app.header, 48);
    assert!(h.contains('…') && h.contains("sam"), "{h}");
}

#[test]
fn mono_draws_no_colour_and_the_other_themes_do() {
    use ratatui::style::Color;
    let coloured = |theme: ThemeName| {
        let mut app = app();
        app.theme = opencouch_tui::theme::Theme::of(theme);
        app.crisis = Some(CrisisPanel {
            resources: resources(),
            plan: Vec::new(),
        });
        let buffer = draw_buffer(&mut app, 80, 24);
        buffer
            .content()
            .iter()
            .filter(|c| c.fg != Color::Reset || c.bg != Color::Reset)
            .count()
    };
    assert_eq!(coloured(ThemeName::Mono), 0);
    assert!(coloured(ThemeName::Contrast) > 0);
    assert!(coloured(ThemeName::Calm) > 0);
    // NO_COLOR starts in mono; otherwise calm.
    assert_eq!(ThemeName::initial(true), ThemeName::Mono);
    assert_eq!(ThemeName::initial(false), ThemeName::Calm);
}
