//! The channel's spans through the real exporter: the bot polls the fake
//! Bot API, a local subscriber turns its spans (and the runtime's) into
//! OpenTelemetry spans, and the test kit's fake OTLP collector decodes
//! what was exported. One trace per update, with the turn or the command
//! under it and the Bot API calls inside; the runtime's turn a trace of its
//! own, linked to the update's turn span; no message text, no raw chat or
//! thread id, in the export or in the logs at any level; a crisis update's
//! traces kept at sampling ratio 0.
//!
//! Its own test binary, and one test: the subscriber is installed for the
//! test's thread, and a concurrent test of the same binary reaching a
//! callsite first can make it miss spans.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeSet;
use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use opencouch_config::{Secret, Settings};
use opencouch_core::RuntimeMode;
use opencouch_core::telemetry::{ExportHealth, opaque_id};
use opencouch_runtime::service::{Host, StartOptions};
use opencouch_telegram::{Bot, BotApi, BotOptions};
use opencouch_telemetry::ExportConfig;
use opencouch_testkit::otlp::{AttrValue, ExportedSpan};
use opencouch_testkit::{FAKE_BOT_TOKEN, FakeCollector, FakeTelegram};
use opentelemetry_sdk::trace::SdkTracerProvider;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::{EnvFilter, Layer, Registry};

/// A user (and their private chat) with an id long enough to find.
const ALICE: i64 = 731_406_992;
const SENTINEL: &str = "OKAPI-SENTINEL-5821";
const WAIT: Duration = Duration::from_secs(30);

/// Log lines written by the test's subscriber.
#[derive(Clone, Default)]
struct LogBuffer(Arc<Mutex<Vec<u8>>>);

impl LogBuffer {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }
}

impl Write for LogBuffer {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for LogBuffer {
    type Writer = LogBuffer;
    fn make_writer(&'a self) -> Self::Writer {
        self.clone()
    }
}

/// The bot polling the fake Bot API over a deterministic in-memory host,
/// its spans exported to a fake collector at `ratio`.
struct World {
    tg: FakeTelegram,
    collector: FakeCollector,
    provider: SdkTracerProvider,
    health: &'static ExportHealth,
    logs: LogBuffer,
    host: Option<Host>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<()>>,
    _subscriber: tracing::subscriber::DefaultGuard,
    _dir: tempfile::TempDir,
}

async fn world(ratio: f64) -> World {
    let tg = FakeTelegram::start().await;
    let collector = FakeCollector::start().await;
    let dir = tempfile::tempdir().unwrap();
    let mut settings = Settings {
        mode: RuntimeMode::Deterministic,
        data_dir: Some(dir.path().to_path_buf()),
        ..Settings::default()
    };
    settings.telegram_bot_token = Some(Secret::new(FAKE_BOT_TOKEN));
    settings.telegram_api_url = tg.api_url();
    settings.telegram_allowed_users = vec![ALICE];

    let cfg = ExportConfig {
        url: collector.traces_url(),
        headers: Vec::new(),
        service_name: "opencouch-telegram-test".into(),
        sample_ratio: ratio,
        queue_size: 1024,
        capture_content: false,
    };
    let health: &'static ExportHealth = Box::leak(Box::new(ExportHealth::new()));
    let provider = opencouch_telemetry::provider(&cfg, health).unwrap();
    let logs = LogBuffer::default();
    let subscriber = Registry::default()
        .with(
            opencouch_telemetry::logs::layer(logs.clone())
                .with_filter(EnvFilter::new("opencouch=trace")),
        )
        .with(opencouch_telemetry::trace_layer(&provider));
    let guard = tracing::subscriber::set_default(subscriber);

    let host = Host::start_with(
        &settings,
        StartOptions {
            in_memory: true,
            semantic_signal: true,
            background: false,
        },
    )
    .await
    .unwrap();
    let api = BotApi::new(&tg.api_url(), FAKE_BOT_TOKEN).unwrap();
    let bot = Bot::new(
        api,
        host.service(),
        BotOptions {
            allowed_users: vec![ALICE],
            soft_limit: 240,
            poll_timeout: Duration::from_secs(1),
            drain_timeout: Duration::from_secs(10),
        },
    );
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(async move {
        bot.run_polling(async move {
            let _ = stopped.await;
        })
        .await
        .unwrap();
    });
    World {
        tg,
        collector,
        provider,
        health,
        logs,
        host: Some(host),
        stop: Some(stop),
        task: Some(task),
        _subscriber: guard,
        _dir: dir,
    }
}

impl World {
    /// Sends `text` from Alice and waits until the bot confirmed it (the
    /// update's span has ended by then).
    async fn say(&self, text: &str) {
        let id = self.tg.push_text(ALICE, text);
        let deadline = tokio::time::Instant::now() + WAIT;
        while self.tg.confirmed_offset() <= id {
            assert!(
                tokio::time::Instant::now() < deadline,
                "update {id} was not answered"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Sends everything queued to the collector (off the test's thread:
    /// the fake collector runs on it).
    async fn flush(&self) {
        let p = self.provider.clone();
        let _ = tokio::task::spawn_blocking(move || p.force_flush()).await;
    }

    async fn stop(mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(t) = self.task.take() {
            t.await.unwrap();
        }
        if let Some(h) = self.host.take() {
            h.shutdown().await;
        }
        let p = self.provider.clone();
        let _ = tokio::task::spawn_blocking(move || p.shutdown()).await;
    }
}

fn names<'a>(spans: impl IntoIterator<Item = &'a ExportedSpan>) -> BTreeSet<String> {
    spans.into_iter().map(|s| s.name.clone()).collect()
}

fn contains(haystack: &[u8], needle: &str) -> bool {
    haystack
        .windows(needle.len())
        .any(|w| w == needle.as_bytes())
}

/// The spans of `root`'s trace.
fn trace_of<'a>(spans: &'a [ExportedSpan], root: &ExportedSpan) -> Vec<&'a ExportedSpan> {
    spans
        .iter()
        .filter(|s| s.trace_id == root.trace_id)
        .collect()
}

fn child<'a>(spans: &[&'a ExportedSpan], parent: &ExportedSpan, name: &str) -> &'a ExportedSpan {
    let found: Vec<&'a ExportedSpan> = spans
        .iter()
        .copied()
        .filter(|s| s.parent_span_id == parent.span_id && s.name == name)
        .collect();
    assert_eq!(
        found.len(),
        1,
        "{name} under {}: {:?}",
        parent.name,
        spans.iter().map(|s| &s.name).collect::<Vec<_>>()
    );
    found[0]
}

/// No message text, reply text, raw chat id, raw thread id or token in
/// what was exported or logged.
fn assert_no_content(w: &World, words: &[&str]) {
    let sent = w.tg.sent_texts(ALICE);
    assert!(!sent.is_empty());
    let chat = ALICE.to_string();
    let mut forbidden: Vec<&str> = vec![chat.as_str(), "telegram:dm:", FAKE_BOT_TOKEN];
    forbidden.extend_from_slice(words);
    // A stretch of every reply the bot sent.
    let replies: Vec<String> = sent
        .iter()
        .map(|t| t.chars().take(40).collect::<String>())
        .collect();
    forbidden.extend(replies.iter().map(String::as_str));
    let bodies = w.collector.bodies();
    assert!(!bodies.is_empty(), "nothing was exported");
    for body in &bodies {
        for f in &forbidden {
            assert!(!contains(body, f), "{f:?} left the process in a span");
        }
    }
    let logs = w.logs.text();
    assert!(!logs.is_empty(), "the test subscriber logged nothing");
    for f in [SENTINEL, FAKE_BOT_TOKEN].iter().chain(words) {
        assert!(!logs.contains(f), "{f:?} is in the logs");
    }
}

#[tokio::test]
async fn telegram_updates_are_traced_without_content_and_crises_are_kept_at_ratio_zero() {
    every_update_is_one_trace_with_its_turn_or_command_and_its_api_calls().await;
    a_crisis_update_is_exported_at_ratio_zero_and_an_ordinary_one_is_not().await;
}

async fn every_update_is_one_trace_with_its_turn_or_command_and_its_api_calls() {
    let w = world(1.0).await;
    let message = format!("{SENTINEL} my week at work was long and I feel worn out");
    w.say(&message).await;
    w.say("/help").await;
    w.flush().await;
    let spans = w.collector.spans();

    // Two updates, two traces rooted at their update; the runtime's turn is
    // a third trace. Nothing else (polling is not traced).
    let roots: Vec<&ExportedSpan> = spans.iter().filter(|s| s.is_root()).collect();
    let mut root_names: Vec<&str> = roots.iter().map(|s| s.name.as_str()).collect();
    root_names.sort_unstable();
    assert_eq!(
        root_names,
        vec!["telegram update", "telegram update", "turn"],
        "{:?}",
        names(&spans)
    );
    let update = |kind: &str| {
        *roots
            .iter()
            .find(|s| s.str_attr("telegram.update_kind") == Some(kind))
            .unwrap_or_else(|| panic!("no {kind} update"))
    };
    let chat = opaque_id(&format!("telegram:{ALICE}"));
    for root in [update("text"), update("command")] {
        assert_eq!(root.str_attr("opencouch.channel"), Some("telegram"));
        assert_eq!(root.str_attr("opencouch.chat"), Some(chat.as_str()));
        assert_eq!(root.attr("telegram.admitted"), Some(&AttrValue::Bool(true)));
        assert_eq!(root.attr("telegram.attempts"), Some(&AttrValue::Int(1)));
        assert_eq!(root.str_attr("opencouch.outcome"), Some("answered"));
        assert_eq!(
            root.resource.get("service.name"),
            Some(&AttrValue::Str("opencouch-telegram-test".into()))
        );
    }

    // The text update: its turn, and the reply's sendMessage inside it.
    let text = update("text");
    let trace = trace_of(&spans, text);
    let turn = child(&trace, text, "telegram turn");
    assert_eq!(turn.attr("opencouch.saved"), Some(&AttrValue::Bool(true)));
    assert_eq!(turn.attr("telegram.rotated"), Some(&AttrValue::Bool(false)));
    assert_eq!(turn.attr("telegram.messages"), Some(&AttrValue::Int(1)));
    assert!(turn.attr("opencouch.crisis").is_none());
    let send = child(&trace, turn, "telegram sendMessage");
    assert_eq!(send.str_attr("telegram.method"), Some("sendMessage"));
    assert_eq!(
        send.attr("http.response.status_code"),
        Some(&AttrValue::Int(200))
    );
    assert_eq!(
        trace.len(),
        3,
        "{:?}",
        trace.iter().map(|s| &s.name).collect::<Vec<_>>()
    );

    // The runtime's turn: its own trace (gate, triage, …), linked to the
    // update's turn span.
    let runtime_turn = *roots.iter().find(|s| s.name == "turn").unwrap();
    assert_eq!(
        runtime_turn.links,
        vec![(turn.trace_id.clone(), turn.span_id.clone())]
    );
    assert_eq!(runtime_turn.str_attr("opencouch.channel"), Some("telegram"));
    let stages = names(trace_of(&spans, runtime_turn));
    for stage in ["crisis_gate", "plan", "commit"] {
        assert!(stages.contains(stage), "no {stage} in {stages:?}");
    }

    // The command update: the command by name, its sendMessage inside.
    let command = update("command");
    let trace = trace_of(&spans, command);
    let cmd = child(&trace, command, "telegram command");
    assert_eq!(cmd.str_attr("telegram.command"), Some("help"));
    let send = child(&trace, cmd, "telegram sendMessage");
    assert_eq!(
        send.attr("http.response.status_code"),
        Some(&AttrValue::Int(200))
    );
    assert_eq!(trace.len(), 3);

    assert_no_content(&w, &[SENTINEL, "worn out"]);
    let health = w.health.snapshot();
    assert_eq!(health.exported as usize, spans.len());
    assert_eq!(health.dropped, 0);
    w.stop().await;
}

async fn a_crisis_update_is_exported_at_ratio_zero_and_an_ordinary_one_is_not() {
    let w = world(0.0).await;
    w.say("the traffic on the way home was slow today").await;
    w.flush().await;
    assert!(
        w.collector.spans().is_empty(),
        "an ordinary update was sampled at ratio 0: {:?}",
        names(&w.collector.spans())
    );

    w.say("I want to kill myself tonight").await;
    w.flush().await;
    let spans = w.collector.spans();
    let roots: Vec<&ExportedSpan> = spans.iter().filter(|s| s.is_root()).collect();
    assert_eq!(roots.len(), 2, "{:?}", names(&spans));
    let update = *roots
        .iter()
        .find(|s| s.name == "telegram update")
        .expect("the crisis update's trace");
    let trace = trace_of(&spans, update);
    let turn = child(&trace, update, "telegram turn");
    assert_eq!(turn.attr("opencouch.crisis"), Some(&AttrValue::Bool(true)));
    let sends: Vec<&&ExportedSpan> = trace
        .iter()
        .filter(|s| s.name == "telegram sendMessage")
        .collect();
    assert!(!sends.is_empty());
    assert!(sends.iter().all(|s| s.parent_span_id == turn.span_id));

    let runtime_turn = *roots.iter().find(|s| s.name == "turn").unwrap();
    assert_eq!(
        runtime_turn.attr("opencouch.crisis"),
        Some(&AttrValue::Bool(true))
    );
    assert_eq!(
        runtime_turn.links,
        vec![(turn.trace_id.clone(), turn.span_id.clone())]
    );
    let stages = names(trace_of(&spans, runtime_turn));
    assert!(stages.contains("crisis_log"), "{stages:?}");

    assert_no_content(&w, &["kill myself", "traffic"]);
    w.stop().await;
}
