//! A hybrid host against the fake model, a fake collector, and a local
//! subscriber (logs into a buffer at every level of our crates, traces to
//! the collector) for one test.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::io::Write;
use std::sync::{Arc, Mutex};

use opencouch_config::{Secret, Settings};
use opencouch_core::telemetry::ExportHealth;
use opencouch_core::{AgentOutput, RuntimeMode};
use opencouch_runtime::service::{Host, StartOptions, TurnRequest};
use opencouch_telemetry::ExportConfig;
use opencouch_testkit::{FakeCollector, FakeOpenAi};
use opentelemetry_sdk::trace::SdkTracerProvider;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::{EnvFilter, Layer, Registry};

/// Log lines written by the test's subscriber.
#[derive(Clone, Default)]
pub struct LogBuffer(Arc<Mutex<Vec<u8>>>);

impl LogBuffer {
    pub fn text(&self) -> String {
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

pub struct World {
    pub model: FakeOpenAi,
    pub collector: FakeCollector,
    pub host: Host,
    pub provider: SdkTracerProvider,
    pub health: &'static ExportHealth,
    pub logs: LogBuffer,
    _subscriber: tracing::subscriber::DefaultGuard,
    _dir: tempfile::TempDir,
}

pub struct Options {
    pub ratio: f64,
    pub capture: bool,
    /// Export to a port nothing listens on.
    pub dead_endpoint: bool,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            ratio: 1.0,
            capture: false,
            dead_endpoint: false,
        }
    }
}

pub async fn world(opts: Options) -> World {
    let model = FakeOpenAi::start().await;
    let collector = FakeCollector::start().await;
    let dir = tempfile::tempdir().unwrap();
    let settings = Settings {
        mode: RuntimeMode::Hybrid,
        base_url: model.base_url(),
        api_key: Some(Secret::new("test-key")),
        data_dir: Some(dir.path().to_path_buf()),
        ..Settings::default()
    };
    let url = if opts.dead_endpoint {
        // Bind and drop: a loopback port with nothing behind it.
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        drop(l);
        format!("http://127.0.0.1:{port}/v1/traces")
    } else {
        collector.traces_url()
    };
    let cfg = ExportConfig {
        url,
        headers: vec![("authorization".into(), "Bearer collector-secret".into())],
        service_name: "opencouch-test".into(),
        sample_ratio: opts.ratio,
        queue_size: 1024,
        capture_content: opts.capture,
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
    World {
        model,
        collector,
        host,
        provider,
        health,
        logs,
        _subscriber: guard,
        _dir: dir,
    }
}

impl World {
    pub async fn turn(&self, thread: &str, message: &str) -> AgentOutput {
        let input = opencouch_core::AgentInput::new(thread, message);
        self.host
            .service()
            .turn(TurnRequest::from(input))
            .await
            .expect("turn")
    }

    pub async fn incognito_turn(&self, thread: &str, message: &str) -> AgentOutput {
        let mut input = opencouch_core::AgentInput::new(thread, message);
        input.memory_mode = opencouch_core::MemoryMode::Incognito;
        self.host
            .service()
            .turn(TurnRequest::from(input))
            .await
            .expect("turn")
    }

    /// Waits (up to 10 s) until no background memory extraction is
    /// pending. A persistent hybrid turn starts one after its commit, as a
    /// trace of its own: a test that counts traces settles it before it
    /// flushes, or the extraction's trace lands in the export or not
    /// depending on the machine's load.
    pub async fn settle_background(&self) {
        let service = self.host.service();
        let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
        while service.queue_depths().memory_extraction > 0 {
            assert!(
                tokio::time::Instant::now() < deadline,
                "background memory extraction did not finish"
            );
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
    }

    /// Sends everything queued to the collector (off the test's thread:
    /// the fake collector runs on it).
    pub async fn flush(&self) {
        let p = self.provider.clone();
        let _ = tokio::task::spawn_blocking(move || p.force_flush()).await;
    }
}
