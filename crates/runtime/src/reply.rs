//! Where a turn's events go ([`EventSink`]) and the reply text a specialist
//! streams while the model writes it ([`ReplyOut`]).
//!
//! **Safety invariants:**
//! * only the therapeutic specialist streams; crisis, safety-question,
//!   grounded, exercise and memory-control replies are checked whole and
//!   sent after the commit (a crisis reply is never shown unchecked);
//! * streamed text passes the pseudo-tool-call filter first
//!   ([`opencouch_prompts::PseudoCallFilter`]), which holds back only an
//!   undecided start, so what is shown equals what the whole-text check keeps;
//! * the reply that is saved and returned always starts with what was
//!   shown, or a `reset` event retracts what was shown before the saved
//!   reply is sent (see [`EventSink::deliver_text`]).
//!
//! **Cancellation:** the consumer of a turn (a stream, or the future of
//! `run_turn`) going away cancels the turn's token. A turn below crisis
//! level that is cancelled before its commit stops there: the model request
//! is dropped and nothing of the turn is written. Crisis turns ignore the
//! token and always run to the end.

use std::sync::Mutex;

use opencouch_core::{Stage, StreamEvent};
use opencouch_prompts::PseudoCallFilter;

use crate::tracker::{CrisisTurn, TurnTracker};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

/// Where stream events go (nowhere for the non-streaming call), and the
/// token that says the consumer is gone.
pub(crate) struct EventSink {
    tx: Option<mpsc::Sender<StreamEvent>>,
    cancel: CancellationToken,
    /// Counts the turn as a crisis turn once it is one (a graceful stop
    /// waits for it); `None` outside a tracked task (unit tests).
    tracker: Option<std::sync::Arc<TurnTracker>>,
    crisis: Mutex<Option<CrisisTurn>>,
}

impl EventSink {
    /// A sink with no listener: events are dropped; `cancel` still says
    /// when the caller is gone.
    pub(crate) fn silent(cancel: CancellationToken) -> Self {
        EventSink {
            tx: None,
            cancel,
            tracker: None,
            crisis: Mutex::new(None),
        }
    }

    pub(crate) fn new(tx: mpsc::Sender<StreamEvent>, cancel: CancellationToken) -> Self {
        EventSink {
            tx: Some(tx),
            ..EventSink::silent(cancel)
        }
    }

    /// The sink reports crisis turns to `tracker`.
    pub(crate) fn tracked(mut self, tracker: std::sync::Arc<TurnTracker>) -> Self {
        self.tracker = Some(tracker);
        self
    }

    /// This turn is a crisis turn (level ≥ 2): a graceful stop waits for it
    /// to finish. Idempotent.
    pub(crate) fn mark_crisis(&self) {
        let Some(tracker) = &self.tracker else { return };
        let mut crisis = self.crisis.lock().unwrap_or_else(|e| e.into_inner());
        if crisis.is_none() {
            *crisis = Some(tracker.crisis());
        }
    }

    pub(crate) async fn send(&self, ev: StreamEvent) {
        if let Some(tx) = &self.tx {
            // A client that went away does not stop the send; the token
            // decides whether the turn stops.
            let _ = tx.send(ev).await;
        }
    }

    pub(crate) async fn status(&self, stage: Stage) {
        self.send(StreamEvent::status(stage)).await;
    }

    /// Completes when the turn's consumer has gone away.
    pub(crate) async fn cancelled(&self) {
        self.cancel.cancelled().await;
    }

    pub(crate) fn is_cancelled(&self) -> bool {
        self.cancel.is_cancelled()
    }

    /// The live reply of this turn: streamed to the listener if there is
    /// one, after `prefix` (sent before the first visible text).
    pub(crate) fn reply(&self, prefix: Option<String>) -> ReplyOut {
        ReplyOut {
            tx: self.tx.clone(),
            state: Mutex::new(LiveText {
                filter: PseudoCallFilter::new(),
                prefix,
                sent: String::new(),
            }),
        }
    }

    /// Sends the rest of `text` as chunks: what follows `shown` when `text`
    /// starts with it, else a `reset` and all of `text`.
    pub(crate) async fn deliver_text(&self, text: &str, shown: &str) {
        let rest = match text.strip_prefix(shown) {
            Some(rest) => rest,
            None => {
                self.send(StreamEvent::Reset).await;
                text
            }
        };
        for chunk in chunks(rest) {
            self.send(StreamEvent::Chunk { text: chunk }).await;
        }
    }
}

/// Splits a reply into stream chunks at word boundaries.
fn chunks(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    for piece in text.split_inclusive(' ') {
        cur.push_str(piece);
        if cur.len() >= 24 {
            out.push(std::mem::take(&mut cur));
        }
    }
    if !cur.is_empty() {
        out.push(cur);
    }
    out
}

struct LiveText {
    filter: PseudoCallFilter,
    /// Sent before the first visible text (then `None`).
    prefix: Option<String>,
    /// Everything sent so far.
    sent: String,
}

/// The text of a reply as the model writes it, on its way to the listener.
pub struct ReplyOut {
    tx: Option<mpsc::Sender<StreamEvent>>,
    state: Mutex<LiveText>,
}

impl ReplyOut {
    /// Whether a listener receives the text as it is written.
    pub fn is_live(&self) -> bool {
        self.tx.is_some()
    }

    /// The next piece of model text.
    pub(crate) async fn text(&self, piece: &str) {
        let out = self.shape(|f| f.push(piece));
        self.emit(out).await;
    }

    /// The model's reply is complete: releases what the filter still held.
    pub(crate) async fn finish(&self) {
        let out = self.shape(PseudoCallFilter::finish);
        self.emit(out).await;
    }

    /// Everything sent so far.
    pub(crate) fn sent(&self) -> String {
        self.lock().sent.clone()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, LiveText> {
        // The state is plain data: a panic elsewhere cannot leave it torn.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Runs the filter step and shapes what it released: the prefix goes
    /// before the first visible text, whose leading whitespace then goes
    /// (as when the prefix is joined to the whole reply).
    fn shape(&self, step: impl FnOnce(&mut PseudoCallFilter) -> String) -> String {
        let mut st = self.lock();
        let released = step(&mut st.filter);
        let out = match st.prefix.take() {
            None => released,
            Some(prefix) => {
                let visible = released.trim_start();
                if visible.is_empty() {
                    st.prefix = Some(prefix);
                    return String::new();
                }
                format!("{prefix}{visible}")
            }
        };
        st.sent.push_str(&out);
        out
    }

    async fn emit(&self, text: String) {
        if text.is_empty() {
            return;
        }
        if let Some(tx) = &self.tx {
            let _ = tx.send(StreamEvent::Chunk { text }).await;
        }
    }
}

/// The events of one streamed turn, `done` (or one `error`) last.
///
/// Dropping it, or calling [`TurnStream::cancel`], tells the turn its
/// consumer is gone: a turn below crisis level that has not committed yet
/// stops and writes nothing (its stream then ends with an `error` whose code
/// is `cancelled`); a crisis turn runs to the end. A consumer that wants to
/// know when the turn has finished (a server draining before shutdown) calls
/// `cancel` and keeps reading to the end.
pub struct TurnStream {
    rx: mpsc::Receiver<StreamEvent>,
    cancel: CancellationToken,
    /// The caller's thread id, put in the outputs of `response_ready` and
    /// `done` (the stored id is scoped).
    client_thread: Option<String>,
}

impl TurnStream {
    pub(crate) fn new(rx: mpsc::Receiver<StreamEvent>, cancel: CancellationToken) -> Self {
        TurnStream {
            rx,
            cancel,
            client_thread: None,
        }
    }

    /// Outputs name `thread` (the caller's id).
    pub(crate) fn naming_thread(mut self, thread: String) -> Self {
        self.client_thread = Some(thread);
        self
    }

    /// The consumer is gone: stop the turn if it may stop.
    pub fn cancel(&self) {
        self.cancel.cancel();
    }
}

impl Drop for TurnStream {
    fn drop(&mut self) {
        self.cancel.cancel();
    }
}

impl futures::Stream for TurnStream {
    type Item = StreamEvent;

    fn poll_next(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<StreamEvent>> {
        let this = self.get_mut();
        let mut polled = this.rx.poll_recv(cx);
        if let (
            std::task::Poll::Ready(Some(
                StreamEvent::Done { output } | StreamEvent::ResponseReady { output },
            )),
            Some(thread),
        ) = (&mut polled, &this.client_thread)
        {
            output.thread_id.clone_from(thread);
        }
        polled
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Pushes `pieces` through a live reply with `prefix`; returns the
    /// chunks sent and the recorded `sent`.
    async fn run(prefix: Option<&str>, pieces: &[&str]) -> (String, String) {
        let (tx, mut rx) = mpsc::channel(256);
        let sink = EventSink::new(tx, CancellationToken::new());
        let out = sink.reply(prefix.map(str::to_owned));
        for p in pieces {
            out.text(p).await;
        }
        out.finish().await;
        let sent = out.sent();
        drop(out);
        drop(sink);
        let mut chunks = String::new();
        while let Some(ev) = rx.recv().await {
            match ev {
                StreamEvent::Chunk { text } => chunks.push_str(&text),
                other => panic!("only chunks: {other:?}"),
            }
        }
        (chunks, sent)
    }

    #[tokio::test]
    async fn the_stream_equals_the_checked_whole_reply() {
        // (closing prefix, pieces the model wrote)
        let cases: &[(Option<&str>, &[&str])] = &[
            (None, &["Hello", " there."]),
            (None, &["  \n", "Hello"]),
            (None, &["<tool_call>{}</tool_call>", "\n  Hi."]),
            (
                Some("Glad you are safe.\n\n"),
                &["  ", "\nThat", " is good."],
            ),
            (
                Some("Glad you are safe.\n\n"),
                &[
                    "{\"name\":\"load_therapeutic_response_skill\"}",
                    " ",
                    "Okay.",
                ],
            ),
            (Some("Ack.\n\n"), &[]),
        ];
        for (prefix, pieces) in cases {
            let whole: String = pieces.concat();
            let (checked, _) = opencouch_prompts::strip_pseudo_tool_calls(&whole);
            let want = match prefix {
                // As `steps::with_closing_acknowledgement` joins them, when
                // there is any visible text to join.
                Some(p) if !checked.trim().is_empty() => format!("{p}{}", checked.trim_start()),
                Some(_) => String::new(),
                None => checked,
            };
            let (chunks, sent) = run(*prefix, pieces).await;
            assert_eq!(chunks, want, "{prefix:?} {pieces:?}");
            assert_eq!(sent, want);
        }
    }

    #[test]
    fn chunks_rejoin_exactly() {
        let text = "Thank you for telling me. That sounds like a lot to carry right now, and it makes sense to feel tired.";
        let parts = chunks(text);
        assert!(parts.len() > 2);
        assert_eq!(parts.concat(), text);
    }

    #[tokio::test]
    async fn a_reply_nobody_listens_to_is_not_live() {
        let sink = EventSink::silent(CancellationToken::new());
        assert!(!sink.reply(None).is_live());
    }

    #[tokio::test]
    async fn deliver_text_sends_the_rest_or_resets() {
        for (text, shown, want_reset, want_chunks) in [
            ("Hello there, friend.", "Hello ", false, "there, friend."),
            ("Hello there, friend.", "", false, "Hello there, friend."),
            ("A different reply.", "Hello ", true, "A different reply."),
        ] {
            let (tx, mut rx) = mpsc::channel(64);
            let sink = EventSink::new(tx, CancellationToken::new());
            sink.deliver_text(text, shown).await;
            drop(sink);
            let mut reset = false;
            let mut chunks = String::new();
            while let Some(ev) = rx.recv().await {
                match ev {
                    StreamEvent::Reset => reset = true,
                    StreamEvent::Chunk { text } => chunks.push_str(&text),
                    other => panic!("{other:?}"),
                }
            }
            assert_eq!(
                (reset, chunks.as_str()),
                (want_reset, want_chunks),
                "{text:?}"
            );
        }
    }
}
