//! Logs and traces for every OpenCouch binary.
//!
//! [`init`] installs the process's `tracing` subscriber once:
//! - the log layer on stderr, filtered by `OPENCOUCH_LOG` (default `warn`),
//!   whose field formatter applies the redaction rules to every field;
//! - when an OTLP endpoint is configured, a `tracing-opentelemetry` layer
//!   over a tracer whose only processor is [`export::TurnProcessor`]:
//!   redaction, one trace per turn kept whole (crisis turns always), a
//!   bounded queue and an export thread, so export never slows or fails a
//!   turn. Spans come from the `opencouch_*` crates at `info` and above.
//!
//! With export off there is no trace layer at all: the spans the runtime
//! opens at `info` are disabled by the log filter and cost a branch.

pub mod export;
pub mod logs;
pub mod redact;

use std::time::Duration;

use opencouch_config::Settings;
use opencouch_core::telemetry::{EXPORT, ExportHealth};
use opentelemetry::KeyValue;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::{Protocol, WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::{Sampler, SdkTracerProvider};
use tracing::{Level, Subscriber};
use tracing_subscriber::filter::{EnvFilter, FilterFn};
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{Layer, Registry};

/// What trace export needs, read from the settings.
#[derive(Clone)]
pub struct ExportConfig {
    /// The full OTLP traces URL.
    pub url: String,
    /// Request headers (credentials: never logged).
    pub headers: Vec<(String, String)>,
    pub service_name: String,
    pub sample_ratio: f64,
    pub queue_size: usize,
    pub capture_content: bool,
}

impl std::fmt::Debug for ExportConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ExportConfig")
            .field("url", &opencouch_config::mask_url(&self.url))
            .field(
                "headers",
                &self.headers.iter().map(|(k, _)| k).collect::<Vec<_>>(),
            )
            .field("service_name", &self.service_name)
            .field("sample_ratio", &self.sample_ratio)
            .field("queue_size", &self.queue_size)
            .field("capture_content", &self.capture_content)
            .finish()
    }
}

impl ExportConfig {
    /// The export settings, or `None` when no endpoint is configured.
    pub fn from_settings(s: &Settings) -> Option<ExportConfig> {
        Some(ExportConfig {
            url: s.trace_url()?,
            headers: s.trace_header_pairs(),
            service_name: s.trace_service_name.clone(),
            sample_ratio: s.trace_sample_ratio,
            queue_size: s.trace_queue_size,
            capture_content: s.trace_capture_content,
        })
    }
}

/// Why export could not be set up (the process runs on without it).
#[derive(Debug, thiserror::Error)]
pub enum TelemetryError {
    #[error("the OTLP exporter could not be built: {0}")]
    Exporter(String),
}

/// The installed telemetry; [`Telemetry::shutdown`] flushes queued spans
/// (bounded) before the process exits.
#[derive(Debug)]
pub struct Telemetry {
    provider: Option<SdkTracerProvider>,
}

impl Telemetry {
    /// Whether trace export is on.
    pub fn exporting(&self) -> bool {
        self.provider.is_some()
    }

    /// Flushes and stops the exporter, waiting at most `timeout`.
    pub fn shutdown(self, timeout: Duration) {
        if let Some(p) = self.provider {
            let _ = p.shutdown_with_timeout(timeout);
        }
    }
}

/// The tracer provider over the OTLP HTTP/protobuf exporter and the turn
/// processor, recording into `health`.
pub fn provider(
    cfg: &ExportConfig,
    health: &'static ExportHealth,
) -> Result<SdkTracerProvider, TelemetryError> {
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_protocol(Protocol::HttpBinary)
        .with_endpoint(cfg.url.clone())
        .with_headers(cfg.headers.iter().cloned().collect())
        .with_timeout(Duration::from_secs(10))
        .build()
        .map_err(|e| TelemetryError::Exporter(e.to_string()))?;
    Ok(provider_with(exporter, cfg, health))
}

/// [`provider`] over any exporter (tests use an in-memory one).
pub fn provider_with<E>(
    mut exporter: E,
    cfg: &ExportConfig,
    health: &'static ExportHealth,
) -> SdkTracerProvider
where
    E: opentelemetry_sdk::trace::SpanExporter + 'static,
{
    let resource = Resource::builder_empty()
        .with_attributes([
            KeyValue::new("service.name", cfg.service_name.clone()),
            KeyValue::new("service.version", env!("CARGO_PKG_VERSION")),
        ])
        .build();
    exporter.set_resource(&resource);
    let processor = export::TurnProcessor::new(exporter, cfg.sample_ratio, cfg.queue_size, health);
    health.set_enabled(true);
    opencouch_core::telemetry::set_capture_content(cfg.capture_content);
    SdkTracerProvider::builder()
        .with_sampler(Sampler::AlwaysOn)
        .with_resource(resource)
        .with_span_processor(processor)
        .build()
}

/// The `tracing` layer that turns the project's spans into OpenTelemetry
/// spans of `provider`: spans and events of the `opencouch_*` crates at
/// `info` and above.
pub fn trace_layer<S>(provider: &SdkTracerProvider) -> impl Layer<S> + Send + Sync + 'static
where
    S: Subscriber + for<'a> LookupSpan<'a> + Send + Sync,
{
    let tracer = provider.tracer("opencouch");
    tracing_opentelemetry::layer()
        .with_tracer(tracer)
        .with_location(false)
        .with_threads(false)
        .with_level(false)
        .with_target(false)
        .with_filter(FilterFn::new(|meta| {
            meta.target().starts_with("opencouch") && *meta.level() <= Level::INFO
        }))
}

/// Installs the process's subscriber: redacted logs on stderr filtered by
/// `OPENCOUCH_LOG` (default `warn`), and trace export when `export` is
/// set. An exporter that cannot be built is reported on stderr and the
/// process runs without export. Calling it twice keeps the first.
pub fn init(export: Option<&ExportConfig>) -> Telemetry {
    let filter =
        EnvFilter::try_from_env("OPENCOUCH_LOG").unwrap_or_else(|_| EnvFilter::new("warn"));
    let logs = logs::layer(std::io::stderr).with_filter(filter);
    let provider = match export.map(|cfg| provider(cfg, &EXPORT)) {
        Some(Ok(p)) => Some(p),
        Some(Err(e)) => {
            EXPORT.set_error(Some(e.to_string()));
            eprintln!("opencouch: trace export is off: {e}");
            None
        }
        None => None,
    };
    let traces = provider.as_ref().map(trace_layer::<_>);
    let installed = Registry::default().with(logs).with(traces).try_init();
    if installed.is_err() {
        return Telemetry { provider: None };
    }
    Telemetry { provider }
}
