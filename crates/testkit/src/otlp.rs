//! A fake OpenTelemetry collector: `POST /v1/traces` over real HTTP on
//! loopback, bodies decoded with the `opentelemetry-proto` types (OTLP
//! HTTP/protobuf). It keeps every span it accepted, the raw bodies (to
//! search them for a sentinel) and the request headers, and can be told to
//! fail.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU16, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue, any_value};
use prost::Message;
use tokio::task::JoinHandle;

/// An attribute value as the collector saw it.
#[derive(Debug, Clone, PartialEq)]
pub enum AttrValue {
    Str(String),
    Bool(bool),
    Int(i64),
    Double(f64),
    /// An array of strings.
    StrArray(Vec<String>),
    /// Other arrays and maps, rendered as text.
    Other(String),
}

impl AttrValue {
    pub fn as_str(&self) -> Option<&str> {
        match self {
            AttrValue::Str(s) => Some(s),
            _ => None,
        }
    }
}

/// One exported span.
#[derive(Debug, Clone)]
pub struct ExportedSpan {
    pub trace_id: String,
    pub span_id: String,
    /// Empty for a root span.
    pub parent_span_id: String,
    pub name: String,
    pub attributes: BTreeMap<String, AttrValue>,
    /// `(event name, attributes)`.
    pub events: Vec<(String, BTreeMap<String, AttrValue>)>,
    /// Links to spans of other traces, as `(trace id, span id)`.
    pub links: Vec<(String, String)>,
    /// Resource attributes of the batch the span came in.
    pub resource: BTreeMap<String, AttrValue>,
}

impl ExportedSpan {
    pub fn attr(&self, key: &str) -> Option<&AttrValue> {
        self.attributes.get(key)
    }

    pub fn str_attr(&self, key: &str) -> Option<&str> {
        self.attr(key).and_then(AttrValue::as_str)
    }

    pub fn is_root(&self) -> bool {
        self.parent_span_id.is_empty()
    }
}

#[derive(Default)]
struct Received {
    spans: Vec<ExportedSpan>,
    bodies: Vec<Vec<u8>>,
    headers: Vec<Vec<(String, String)>>,
}

#[derive(Clone)]
struct Shared {
    received: Arc<Mutex<Received>>,
    /// 0 = accept; otherwise the status to answer with.
    fail: Arc<AtomicU16>,
}

/// The fake collector (stops when dropped).
pub struct FakeCollector {
    addr: SocketAddr,
    shared: Shared,
    task: JoinHandle<()>,
}

impl Drop for FakeCollector {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl FakeCollector {
    /// Starts on `127.0.0.1` with a random port.
    ///
    /// # Panics
    /// When loopback cannot be bound (a test setup failure).
    pub async fn start() -> FakeCollector {
        let shared = Shared {
            received: Arc::default(),
            fail: Arc::default(),
        };
        let app = Router::new()
            .route("/v1/traces", post(traces))
            .with_state(shared.clone());
        #[allow(clippy::expect_used)]
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind the fake collector on loopback");
        #[allow(clippy::expect_used)]
        let addr = listener.local_addr().expect("local address");
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        FakeCollector { addr, shared, task }
    }

    /// The OTLP base endpoint (`OTEL_EXPORTER_OTLP_ENDPOINT`).
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The traces URL (`OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`).
    pub fn traces_url(&self) -> String {
        format!("http://{}/v1/traces", self.addr)
    }

    /// Answer every export with `status` (e.g. 503); `None` accepts again.
    pub fn fail_with(&self, status: Option<u16>) {
        self.shared
            .fail
            .store(status.unwrap_or(0), Ordering::SeqCst);
    }

    /// Every span accepted so far.
    pub fn spans(&self) -> Vec<ExportedSpan> {
        self.shared
            .received
            .lock()
            .map(|r| r.spans.clone())
            .unwrap_or_default()
    }

    /// Every request body received (accepted or not), raw.
    pub fn bodies(&self) -> Vec<Vec<u8>> {
        self.shared
            .received
            .lock()
            .map(|r| r.bodies.clone())
            .unwrap_or_default()
    }

    /// The headers of every request, lower-case names.
    pub fn headers(&self) -> Vec<Vec<(String, String)>> {
        self.shared
            .received
            .lock()
            .map(|r| r.headers.clone())
            .unwrap_or_default()
    }

    /// Waits until at least `n` spans arrived or `timeout` passed; returns
    /// whether they did.
    pub async fn wait_for_spans(&self, n: usize, timeout: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            if self.spans().len() >= n {
                return true;
            }
            if tokio::time::Instant::now() >= deadline {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

async fn traces(State(shared): State<Shared>, headers: HeaderMap, body: Bytes) -> Response {
    let pairs: Vec<(String, String)> = headers
        .iter()
        .map(|(k, v)| {
            (
                k.as_str().to_ascii_lowercase(),
                String::from_utf8_lossy(v.as_bytes()).into_owned(),
            )
        })
        .collect();
    let fail = shared.fail.load(Ordering::SeqCst);
    let decoded = ExportTraceServiceRequest::decode(body.as_ref());
    if let Ok(mut r) = shared.received.lock() {
        r.bodies.push(body.to_vec());
        r.headers.push(pairs);
        if fail == 0
            && let Ok(req) = &decoded
        {
            r.spans.extend(spans_of(req));
        }
    }
    if fail != 0 {
        let status = StatusCode::from_u16(fail).unwrap_or(StatusCode::SERVICE_UNAVAILABLE);
        return (status, "collector told to fail").into_response();
    }
    match decoded {
        // An empty ExportTraceServiceResponse is zero bytes of protobuf.
        Ok(_) => (
            StatusCode::OK,
            [(header::CONTENT_TYPE, "application/x-protobuf")],
            Vec::<u8>::new(),
        )
            .into_response(),
        Err(_) => (StatusCode::BAD_REQUEST, "not an OTLP protobuf body").into_response(),
    }
}

fn spans_of(req: &ExportTraceServiceRequest) -> Vec<ExportedSpan> {
    let mut out = Vec::new();
    for rs in &req.resource_spans {
        let resource = rs
            .resource
            .as_ref()
            .map(|r| attrs(&r.attributes))
            .unwrap_or_default();
        for ss in &rs.scope_spans {
            for s in &ss.spans {
                out.push(ExportedSpan {
                    trace_id: hex(&s.trace_id),
                    span_id: hex(&s.span_id),
                    parent_span_id: hex(&s.parent_span_id),
                    name: s.name.clone(),
                    attributes: attrs(&s.attributes),
                    events: s
                        .events
                        .iter()
                        .map(|e| (e.name.clone(), attrs(&e.attributes)))
                        .collect(),
                    links: s
                        .links
                        .iter()
                        .map(|l| (hex(&l.trace_id), hex(&l.span_id)))
                        .collect(),
                    resource: resource.clone(),
                });
            }
        }
    }
    out
}

fn attrs(kvs: &[KeyValue]) -> BTreeMap<String, AttrValue> {
    kvs.iter()
        .map(|kv| (kv.key.clone(), value(kv.value.as_ref())))
        .collect()
}

fn value(v: Option<&AnyValue>) -> AttrValue {
    match v.and_then(|v| v.value.as_ref()) {
        Some(any_value::Value::StringValue(s)) => AttrValue::Str(s.clone()),
        Some(any_value::Value::BoolValue(b)) => AttrValue::Bool(*b),
        Some(any_value::Value::IntValue(i)) => AttrValue::Int(*i),
        Some(any_value::Value::DoubleValue(d)) => AttrValue::Double(*d),
        Some(any_value::Value::ArrayValue(a))
            if a.values
                .iter()
                .all(|v| matches!(v.value, Some(any_value::Value::StringValue(_)))) =>
        {
            AttrValue::StrArray(
                a.values
                    .iter()
                    .filter_map(|v| match &v.value {
                        Some(any_value::Value::StringValue(s)) => Some(s.clone()),
                        _ => None,
                    })
                    .collect(),
            )
        }
        Some(other) => AttrValue::Other(format!("{other:?}")),
        None => AttrValue::Other(String::new()),
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
