//! The span processor between the tracer and the OTLP exporter.
//!
//! - **Redaction** of every attribute and event field (see [`crate::redact`])
//!   before a span is queued; `gen_ai.response.finish_reasons` becomes the
//!   string array the GenAI conventions name.
//! - **Per-turn sampling, crisis always**: the spans of a trace wait until
//!   its root span ends; the whole trace is then kept when any of its spans
//!   carries [`CRISIS_ATTRIBUTE`] (a crisis turn) or when its trace id falls
//!   inside the sampling ratio, else dropped. The decision needs the gate's
//!   verdict, which is only known inside the turn, so it cannot be made when
//!   the root span starts.
//! - **Never in the turn's way**: kept spans go into a bounded queue with
//!   `try_send`; a full queue drops the span and counts it. One worker
//!   thread (with its own small runtime) batches the queue and exports;
//!   a failed export counts its spans as dropped and records the error.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, SyncSender, TrySendError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use opencouch_core::telemetry::{CRISIS_ATTRIBUTE, ExportHealth, genai};
use opentelemetry::trace::{SpanId, TraceId};
use opentelemetry::{Array, Context, Value};
use opentelemetry_sdk::error::{OTelSdkError, OTelSdkResult};
use opentelemetry_sdk::trace::{Span, SpanData, SpanExporter, SpanProcessor};

/// Spans sent to the collector in one request, at most.
const BATCH_MAX: usize = 512;
/// How long the worker waits for more spans before it sends a partial batch.
const BATCH_DELAY: Duration = Duration::from_millis(500);
/// Decisions remembered for spans that end after their trace's root.
const DECISIONS_KEPT: usize = 4096;
/// A trace whose root has not ended after this long is given up (its
/// buffered spans dropped and counted) when the buffer is full.
const STALE_TRACE: Duration = Duration::from_secs(300);

enum Msg {
    Span(Box<SpanData>),
    Flush(SyncSender<()>),
    Shutdown,
}

/// The processor. Built by [`crate::Telemetry`]; public for tests that wire
/// their own exporter.
#[derive(Debug)]
pub struct TurnProcessor {
    ratio: f64,
    max_buffered: usize,
    health: &'static ExportHealth,
    pending: Mutex<Pending>,
    queue: SyncSender<Msg>,
    worker: Mutex<Option<JoinHandle<()>>>,
}

#[derive(Debug, Default)]
struct Pending {
    traces: HashMap<TraceId, Buffered>,
    buffered: usize,
    decided: HashMap<TraceId, bool>,
    order: VecDeque<TraceId>,
}

#[derive(Debug)]
struct Buffered {
    spans: Vec<SpanData>,
    crisis: bool,
    since: Instant,
}

impl TurnProcessor {
    /// A processor exporting through `exporter` on its own thread.
    /// `ratio` is the share of ordinary traces kept; `queue` bounds both
    /// the spans waiting for their root and the spans waiting for export.
    pub fn new<E>(exporter: E, ratio: f64, queue: usize, health: &'static ExportHealth) -> Self
    where
        E: SpanExporter + 'static,
    {
        let queue = queue.max(1);
        let (tx, rx) = mpsc::sync_channel::<Msg>(queue);
        let worker = std::thread::Builder::new()
            .name("otlp-export".into())
            .spawn(move || run_worker(exporter, rx, health))
            .ok();
        if worker.is_none() {
            health.set_error(Some("could not start the export thread".into()));
        }
        TurnProcessor {
            ratio: ratio.clamp(0.0, 1.0),
            max_buffered: queue,
            health,
            pending: Mutex::new(Pending::default()),
            queue: tx,
            worker: Mutex::new(worker),
        }
    }

    fn sampled(&self, trace: TraceId) -> bool {
        if self.ratio >= 1.0 {
            return true;
        }
        if self.ratio <= 0.0 {
            return false;
        }
        // As the SDK's TraceIdRatioBased sampler: the low 64 bits of the
        // trace id against the ratio.
        let bytes = trace.to_bytes();
        let mut low = [0u8; 8];
        low.copy_from_slice(&bytes[8..]);
        let x = u64::from_be_bytes(low) >> 1;
        let bound = (self.ratio * (1u64 << 63) as f64) as u64;
        x < bound
    }

    fn send(&self, span: SpanData) {
        match self.queue.try_send(Msg::Span(Box::new(span))) {
            Ok(()) => {}
            Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) => {
                self.health.add_dropped(1);
            }
        }
    }
}

/// `gen_ai.response.finish_reasons` is a string array in the GenAI
/// conventions; a `tracing` field holds one string, which becomes a
/// one-item array here.
fn finish_reasons_as_array(attributes: &mut [opentelemetry::KeyValue]) {
    for kv in attributes {
        if kv.key.as_str() == genai::RESPONSE_FINISH_REASONS
            && let Value::String(s) = &kv.value
        {
            kv.value = Value::Array(Array::String(vec![s.clone()]));
        }
    }
}

fn is_crisis(span: &SpanData) -> bool {
    span.attributes
        .iter()
        .any(|kv| kv.key.as_str() == CRISIS_ATTRIBUTE && kv.value == Value::Bool(true))
}

impl SpanProcessor for TurnProcessor {
    fn on_start(&self, _span: &mut Span, _cx: &Context) {}

    fn on_end(&self, mut span: SpanData) {
        crate::redact::redact_attributes(&mut span.attributes);
        finish_reasons_as_array(&mut span.attributes);
        for event in span.events.events.iter_mut() {
            crate::redact::redact_attributes(&mut event.attributes);
        }
        let trace = span.span_context.trace_id();
        let crisis = is_crisis(&span);
        let is_root = span.parent_span_id == SpanId::INVALID;
        let out: Vec<SpanData> = {
            let Ok(mut p) = self.pending.lock() else {
                self.health.add_dropped(1);
                return;
            };
            if let Some(&keep) = p.decided.get(&trace) {
                // The root has ended already: a late span (background work
                // of the turn) follows its trace's decision.
                if keep || crisis {
                    vec![span]
                } else {
                    Vec::new()
                }
            } else if is_root {
                let buffered = p.traces.remove(&trace);
                let (mut spans, crisis_before) = match buffered {
                    Some(b) => (b.spans, b.crisis),
                    None => (Vec::new(), false),
                };
                p.buffered -= spans.len();
                let keep = crisis || crisis_before || self.sampled(trace);
                p.decided.insert(trace, keep);
                p.order.push_back(trace);
                while p.order.len() > DECISIONS_KEPT {
                    if let Some(old) = p.order.pop_front() {
                        p.decided.remove(&old);
                    }
                }
                if keep {
                    spans.push(span);
                    spans
                } else {
                    Vec::new()
                }
            } else {
                if p.buffered >= self.max_buffered {
                    evict_stale(&mut p, self.health);
                }
                if p.buffered >= self.max_buffered {
                    self.health.add_dropped(1);
                } else {
                    p.buffered += 1;
                    let entry = p.traces.entry(trace).or_insert_with(|| Buffered {
                        spans: Vec::new(),
                        crisis: false,
                        since: Instant::now(),
                    });
                    entry.crisis |= crisis;
                    entry.spans.push(span);
                }
                Vec::new()
            }
        };
        for s in out {
            self.send(s);
        }
    }

    fn force_flush(&self) -> OTelSdkResult {
        let (tx, rx) = mpsc::sync_channel(1);
        self.queue
            .send(Msg::Flush(tx))
            .map_err(|_| OTelSdkError::AlreadyShutdown)?;
        rx.recv_timeout(Duration::from_secs(10))
            .map_err(|_| OTelSdkError::Timeout(Duration::from_secs(10)))
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        let handle = self.worker.lock().ok().and_then(|mut w| w.take());
        let Some(handle) = handle else {
            return Ok(());
        };
        // Flush what is queued, then stop; a stuck collector does not hold
        // the process longer than `timeout`.
        let (tx, rx) = mpsc::sync_channel(1);
        if self.queue.send(Msg::Flush(tx)).is_ok() {
            let _ = rx.recv_timeout(timeout);
        }
        let _ = self.queue.try_send(Msg::Shutdown);
        let deadline = Instant::now() + timeout;
        while !handle.is_finished() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        if handle.is_finished() {
            let _ = handle.join();
        }
        Ok(())
    }
}

/// Drops the buffered spans of traces whose root never ended.
fn evict_stale(p: &mut Pending, health: &ExportHealth) {
    let stale: Vec<TraceId> = p
        .traces
        .iter()
        .filter(|(_, b)| b.since.elapsed() > STALE_TRACE)
        .map(|(t, _)| *t)
        .collect();
    for t in stale {
        if let Some(b) = p.traces.remove(&t) {
            p.buffered -= b.spans.len();
            health.add_dropped(b.spans.len() as u64);
        }
    }
}

fn run_worker<E: SpanExporter>(exporter: E, rx: Receiver<Msg>, health: &'static ExportHealth) {
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            health.set_error(Some(format!("could not start the export runtime: {e}")));
            return;
        }
    };
    let mut batch: Vec<SpanData> = Vec::with_capacity(BATCH_MAX);
    let export = |batch: &mut Vec<SpanData>| {
        if batch.is_empty() {
            return;
        }
        let spans = std::mem::take(batch);
        let n = spans.len() as u64;
        match runtime.block_on(exporter.export(spans)) {
            Ok(()) => {
                health.add_exported(n);
                health.set_error(None);
            }
            Err(e) => {
                health.add_dropped(n);
                health.set_error(Some(describe_error(&e)));
                tracing::debug!(error = %describe_error(&e), spans = n, "trace export failed");
            }
        }
    };
    loop {
        match rx.recv_timeout(BATCH_DELAY) {
            Ok(Msg::Span(span)) => {
                batch.push(*span);
                if batch.len() >= BATCH_MAX {
                    export(&mut batch);
                }
            }
            Ok(Msg::Flush(done)) => {
                // Everything queued before the flush request is in `batch`.
                export(&mut batch);
                let _ = done.try_send(());
            }
            Ok(Msg::Shutdown) | Err(RecvTimeoutError::Disconnected) => {
                export(&mut batch);
                return;
            }
            Err(RecvTimeoutError::Timeout) => export(&mut batch),
        }
    }
}

/// An export error in one line, without the endpoint's credentials (the
/// SDK's messages name the status and the transport error, not headers).
fn describe_error(e: &OTelSdkError) -> String {
    let text = e.to_string();
    crate::redact::cut(text.lines().next().unwrap_or("export failed")).to_owned()
}
