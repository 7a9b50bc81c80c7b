//! What the terminal client's `/doctor` (and `opencouch doctor`) asks the
//! service: checks of the database, the data directory, the embedding
//! model, the model endpoint and the crisis directory, each with a level
//! and, when not ok, the fix. No check reads or shows message text.

use std::time::Duration;

use opencouch_config::Settings;
use opencouch_core::RuntimeMode;

use super::api::Service;
use crate::semantic::SemanticStatus;

/// How a check went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CheckLevel {
    /// Fine.
    Ok,
    /// Works, with a limit worth knowing.
    Warning,
    /// Broken.
    Error,
}

impl CheckLevel {
    /// `ok`, `warning` or `error`.
    pub fn as_str(self) -> &'static str {
        match self {
            CheckLevel::Ok => "ok",
            CheckLevel::Warning => "warning",
            CheckLevel::Error => "error",
        }
    }
}

/// One line of the doctor's report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DoctorCheck {
    /// What was checked.
    pub name: &'static str,
    /// How it went.
    pub level: CheckLevel,
    /// What was found.
    pub detail: String,
    /// What to do, when not ok.
    pub fix: Option<String>,
}

impl DoctorCheck {
    fn new(name: &'static str, level: CheckLevel, detail: impl Into<String>) -> Self {
        DoctorCheck {
            name,
            level,
            detail: detail.into(),
            fix: None,
        }
    }

    fn fix(mut self, fix: impl Into<String>) -> Self {
        self.fix = Some(fix.into());
        self
    }
}

/// How long the model endpoint may take to answer the doctor.
pub const ENDPOINT_TIMEOUT: Duration = Duration::from_secs(3);

impl Service {
    /// The checks of `/doctor` for this service and the settings it was
    /// started with. Makes at most one cheap request to the model endpoint
    /// (bounded by [`ENDPOINT_TIMEOUT`]).
    pub async fn doctor(&self, settings: &Settings) -> Vec<DoctorCheck> {
        let mut checks = Vec::new();
        let label = self.storage_label(opencouch_core::MemoryMode::Persistent);
        checks.push(if self.store_ok().await {
            DoctorCheck::new(
                "database",
                CheckLevel::Ok,
                // The store refuses to start on a database whose applied
                // migrations this build does not know, and applies the
                // missing ones at start-up: a store that answers is at
                // this build's schema version.
                format!(
                    "{label} answers; schema version {} (every migration of this build applied)",
                    opencouch_store::sqlite::schema_version()
                ),
            )
        } else {
            DoctorCheck::new("database", CheckLevel::Error, format!("{label} does not answer"))
                .fix("check --data-dir / --database-url (or OPENCOUCH_DATABASE_URL) and that the server runs")
        });
        if settings.database_url.is_none() {
            checks.push(data_dir_check(settings));
        }
        checks.push(embedding_check(settings).await);
        checks.push(endpoint_check(settings, self.mode()).await);
        checks.push(match self.semantic_status() {
            Some(status @ SemanticStatus::On) => {
                DoctorCheck::new("semantic signal", CheckLevel::Ok, status.describe())
            }
            Some(status) => {
                DoctorCheck::new("semantic signal", CheckLevel::Warning, status.describe())
                    .fix("the deterministic crisis layers still run; see `opencouch config`")
            }
            None => DoctorCheck::new("semantic signal", CheckLevel::Warning, "off")
                .fix("the deterministic crisis layers still run; see `opencouch config`"),
        });
        checks.push(trace_export_check(settings, &self.trace_export()));
        checks.push(match opencouch_safety::resources::directory() {
            Ok(dir) => DoctorCheck::new(
                "crisis directory",
                CheckLevel::Ok,
                format!(
                    "recorded {}: {} resources, {} countries",
                    dir.recorded,
                    dir.resource.len(),
                    dir.country.len()
                ),
            ),
            Err(e) => DoctorCheck::new("crisis directory", CheckLevel::Error, e.to_string())
                .fix("reinstall opencouch: the embedded directory does not load"),
        });
        checks
    }
}

fn data_dir_check(settings: &Settings) -> DoctorCheck {
    let dir = settings.resolved_data_dir();
    let Ok(meta) = std::fs::metadata(&dir) else {
        return DoctorCheck::new(
            "data directory",
            CheckLevel::Warning,
            format!("{} does not exist yet", dir.display()),
        )
        .fix("it is created (private, 0700) by the first `opencouch chat`");
    };
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = meta.permissions().mode() & 0o777;
        if mode & 0o077 != 0 {
            return DoctorCheck::new(
                "data directory",
                CheckLevel::Warning,
                format!("{} is {mode:o}: others can read it", dir.display()),
            )
            .fix(format!("chmod 700 '{}'", dir.display()));
        }
        DoctorCheck::new(
            "data directory",
            CheckLevel::Ok,
            format!("{} is {mode:o} (private)", dir.display()),
        )
    }
    #[cfg(not(unix))]
    {
        let _ = meta;
        DoctorCheck::new("data directory", CheckLevel::Ok, dir.display().to_string())
    }
}

/// The embedding model: the local one is checked and loaded (the weights
/// this process's turns share), a remote one is named (its endpoint is the
/// model endpoint's check), none is a warning.
async fn embedding_check(settings: &Settings) -> DoctorCheck {
    let name = "embedding model";
    let detail = crate::embeddings::describe(settings);
    if let Some(found) = crate::embeddings::local_model(settings) {
        let dir = found.dir.clone();
        let loaded = tokio::task::spawn_blocking(move || {
            let model = crate::embeddings::shared_local(&dir)?;
            model.ensure_loaded().map_err(|e| e.to_string())
        })
        .await
        .map_err(|e| e.to_string())
        .and_then(|r| r);
        return match loaded {
            Ok(()) => DoctorCheck::new(
                name,
                CheckLevel::Ok,
                format!("{detail}: present and loaded"),
            ),
            Err(e) => DoctorCheck::new(name, CheckLevel::Error, format!("{detail}: {e}")).fix(
                "`opencouch models install` installs a fresh copy (or fix embedding_model_dir)",
            ),
        };
    }
    if settings.embedding_model.is_some() {
        DoctorCheck::new(
            name,
            CheckLevel::Ok,
            format!("{detail} (loaded by that server)"),
        )
    } else {
        DoctorCheck::new(name, CheckLevel::Warning, detail)
            .fix("`opencouch models install` adds the local all-MiniLM-L6-v2 model")
    }
}

async fn endpoint_check(settings: &Settings, mode: RuntimeMode) -> DoctorCheck {
    let name = "model endpoint";
    if mode == RuntimeMode::Deterministic {
        return DoctorCheck::new(name, CheckLevel::Ok, "not used (deterministic mode)");
    }
    let url = settings.base_url.trim_end_matches('/');
    let shown = mask(url);
    let client = match opencouch_llm::OpenAiCompatClient::new(crate::runtime::llm_config(settings))
    {
        Ok(c) => c,
        Err(e) => {
            return DoctorCheck::new(name, CheckLevel::Error, format!("{shown}: {e}"))
                .fix("set OPENCOUCH_BASE_URL to an http(s) URL such as http://127.0.0.1:8080/v1");
        }
    };
    let too_slow = || {
        DoctorCheck::new(
            name,
            CheckLevel::Error,
            format!(
                "{shown} did not answer within {} s",
                ENDPOINT_TIMEOUT.as_secs()
            ),
        )
        .fix("check OPENCOUCH_BASE_URL and the network, or use --mode deterministic")
    };
    // One GET /models with the configured key, over HTTP or HTTPS.
    match tokio::time::timeout(ENDPOINT_TIMEOUT, client.probe_models(ENDPOINT_TIMEOUT)).await {
        Ok(Ok(status @ (401 | 403))) => DoctorCheck::new(
            name,
            CheckLevel::Error,
            format!("{shown} refused the API key (HTTP {status} to GET /models)"),
        )
        .fix("check OPENCOUCH_API_KEY (or the key in the config file)"),
        Ok(Ok(status)) if status < 500 => DoctorCheck::new(
            name,
            CheckLevel::Ok,
            format!("{shown} answers (HTTP {status} to GET /models)"),
        ),
        Ok(Ok(status)) => DoctorCheck::new(
            name,
            CheckLevel::Warning,
            format!("{shown} answers HTTP {status}"),
        )
        .fix("the model server reports an error; check its logs"),
        Ok(Err(opencouch_llm::LlmError::Timeout { .. })) | Err(_) => too_slow(),
        Ok(Err(e)) => DoctorCheck::new(name, CheckLevel::Error, format!("{shown}: {e}")).fix(
            "check OPENCOUCH_BASE_URL and that the model server runs, or use --mode deterministic",
        ),
    }
}

/// The trace export line: this process's export (its spans exported and
/// dropped, its last error). `opencouch doctor` is a process of its own
/// that exports nothing; with an endpoint configured it says where the
/// spans of `serve`, `chat` and `telegram` go and where those count them,
/// instead of calling export off.
fn trace_export_check(
    settings: &Settings,
    export: &opencouch_core::telemetry::ExportSnapshot,
) -> DoctorCheck {
    const NAME: &str = "trace export";
    const FIX: &str = "check OTEL_EXPORTER_OTLP_ENDPOINT / OTEL_EXPORTER_OTLP_HEADERS and that the collector runs; turns are not affected";
    if !export.enabled
        && let Some(url) = settings.trace_url()
    {
        let shown = opencouch_config::mask_url(&url);
        return match &export.last_error {
            Some(e) => DoctorCheck::new(
                NAME,
                CheckLevel::Warning,
                format!("configured ({shown}) but off in this process: {e}"),
            )
            .fix(FIX),
            None => DoctorCheck::new(
                NAME,
                CheckLevel::Ok,
                format!(
                    "configured: serve, chat and telegram send spans to {shown} (sampling ratio {}, crisis turns always); each reports exported and dropped spans in GET /api/health or /status",
                    settings.trace_sample_ratio
                ),
            ),
        };
    }
    if export.healthy() {
        DoctorCheck::new(NAME, CheckLevel::Ok, export.describe())
    } else {
        DoctorCheck::new(NAME, CheckLevel::Warning, export.describe()).fix(FIX)
    }
}

/// A URL without its user info (never show a password).
pub(crate) fn mask(url: &str) -> String {
    match (url.find("://"), url.find('@')) {
        (Some(s), Some(at)) if at > s => format!("{}{}", &url[..s + 3], &url[at + 1..]),
        _ => url.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_are_masked() {
        assert_eq!(mask("https://u:p@h/v1"), "https://h/v1");
        assert_eq!(mask("http://127.0.0.1:8080/v1"), "http://127.0.0.1:8080/v1");
    }

    #[test]
    fn a_configured_export_is_not_called_off_by_a_process_that_does_not_export() {
        use opencouch_core::telemetry::ExportSnapshot;
        let off = ExportSnapshot {
            enabled: false,
            exported: 0,
            dropped: 0,
            last_error: None,
        };
        let none = Settings::default();
        let c = trace_export_check(&none, &off);
        assert_eq!(
            (c.level, c.detail.as_str()),
            (CheckLevel::Ok, "off (no OTLP endpoint configured)")
        );
        let configured = Settings {
            trace_endpoint: Some("http://user:pw@127.0.0.1:4318".into()),
            ..Settings::default()
        };
        let c = trace_export_check(&configured, &off);
        assert_eq!(c.level, CheckLevel::Ok);
        assert!(c.detail.starts_with("configured: "), "{}", c.detail);
        assert!(c.detail.contains("/v1/traces"), "{}", c.detail);
        assert!(!c.detail.contains("pw"), "{}", c.detail);
        let failed = ExportSnapshot {
            last_error: Some("the OTLP exporter could not be built".into()),
            ..off.clone()
        };
        let c = trace_export_check(&configured, &failed);
        assert_eq!(c.level, CheckLevel::Warning);
        assert!(c.detail.contains("off in this process"), "{}", c.detail);
        let live = ExportSnapshot {
            enabled: true,
            exported: 12,
            dropped: 3,
            last_error: Some("HTTP 503".into()),
        };
        let c = trace_export_check(&configured, &live);
        assert_eq!(c.level, CheckLevel::Warning);
        assert_eq!(
            c.detail,
            "on, 12 spans exported, 3 dropped, last error: HTTP 503"
        );
    }
}
