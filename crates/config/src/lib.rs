//! Typed settings for every OpenCouch binary and server.
//!
//! Layers, lowest precedence first:
//! 1. built-in defaults ([`Settings::default`]);
//! 2. an optional TOML file (`--config`, `OPENCOUCH_CONFIG`, or
//!    `$XDG_CONFIG_HOME/opencouch/config.toml` when it exists);
//! 3. `OPENCOUCH_*` environment variables (`OPENCOUCH_MODE=hybrid`, …);
//! 4. the standard names `OPENAI_API_KEY`, `OPENAI_BASE_URL`, `OPENAI_MODEL`;
//! 5. command-line flags (passed in as [`Overrides`]).
//!
//! A bad value stops start-up with one [`ConfigError`] naming the setting.

use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use figment::Figment;
use figment::providers::{Format, Serialized, Toml};
use opencouch_core::{MemoryMode, RuntimeMode};
use serde::{Deserialize, Serialize};

/// The default OpenAI-compatible endpoint.
pub const DEFAULT_BASE_URL: &str = "https://api.openai.com/v1";

/// Smallest accepted `model_max_event_bytes` / `model_max_response_bytes`.
const MIN_MODEL_CAP_BYTES: u64 = 4096;
/// Largest accepted `model_max_event_bytes` / `model_max_response_bytes`.
const MAX_MODEL_CAP_BYTES: u64 = 256 * 1024 * 1024;

/// A secret setting (API key, database URL): `Debug` and `Display` never
/// show any of it, so no `{:?}` of the settings, log line or error message
/// can carry it. Read it with [`Secret::expose`] only where it is used.
/// (`Serialize` keeps the value: the layered loading needs it; never
/// serialize settings for output.)
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Secret(String);

impl Secret {
    pub fn new(s: impl Into<String>) -> Self {
        Secret(s.into())
    }
    /// The secret itself; call only where it is sent (e.g. an HTTP header).
    pub fn expose(&self) -> &str {
        &self.0
    }
    /// `****abcd`-style mask for an API key: never more than the last 4
    /// characters, and none of a short key. Not for URLs (see [`mask_url`]).
    pub fn masked(&self) -> String {
        let n = self.0.chars().count();
        if n <= 8 {
            "****".to_owned()
        } else {
            let tail: String = self.0.chars().skip(n - 4).collect();
            format!("****{tail}")
        }
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(****)")
    }
}

impl fmt::Display for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("****")
    }
}

impl std::str::FromStr for Secret {
    type Err = std::convert::Infallible;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(Secret::new(s))
    }
}

/// The settings whose values are secrets: read from the environment as
/// strings as they are, and never quoted in an error message.
const SECRET_SETTINGS: [&str; 5] = [
    "api_key",
    "database_url",
    "trace_headers",
    "telegram_bot_token",
    "telegram_webhook_secret",
];

/// The Telegram Bot API base URL.
pub const DEFAULT_TELEGRAM_API_URL: &str = "https://api.telegram.org";

/// Every setting, flat so each maps to one `OPENCOUCH_<NAME>` variable.
/// `Debug` masks the secrets and the secret parts of `base_url`.
#[derive(Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Settings {
    /// deterministic | hybrid | auto (hybrid when a model is configured).
    pub mode: RuntimeMode,
    /// Default memory mode for new conversations.
    pub memory_mode: MemoryMode,
    /// Where the embedded SQLite database lives (default: XDG data dir).
    pub data_dir: Option<PathBuf>,
    /// `postgres://…` to use PostgreSQL instead of the embedded SQLite file.
    pub database_url: Option<Secret>,
    /// OpenAI-compatible Chat Completions base URL.
    pub base_url: String,
    /// API key; local servers (Ollama, llama.cpp, vLLM) usually need none.
    pub api_key: Option<Secret>,
    /// Model for safety, triage, memory and summaries.
    pub control_model: String,
    /// Model for ordinary replies (fast tier).
    pub fast_model: String,
    /// Model for replies on the quality tier.
    pub quality_model: String,
    /// Per-request model timeout in seconds.
    pub model_timeout_secs: u64,
    /// Attempts per model request (retries only connection errors, 429, 5xx).
    pub model_max_attempts: u32,
    /// Cap on one streamed model line or event, in bytes; a longer one ends
    /// the stream as interrupted (a server that never sends a newline cannot
    /// grow memory without bound).
    pub model_max_event_bytes: u64,
    /// Cap on a whole non-streamed chat-completion response, in bytes.
    pub model_max_response_bytes: u64,
    /// OpenAI-compatible embedding model; unset = none over HTTP.
    pub embedding_model: Option<String>,
    /// Directory with all-MiniLM-L6-v2 files for local embeddings.
    pub embedding_model_dir: Option<PathBuf>,
    /// Inactivity that ends a session, in minutes.
    pub session_timeout_minutes: u64,
    /// How often the session sweeper runs, in seconds.
    pub sweep_interval_seconds: u64,
    /// Transcript length (messages) after which a session rotates.
    pub transcript_soft_limit: u64,
    /// Address `opencouch serve` listens on.
    pub listen: String,
    /// Largest accepted HTTP body in bytes.
    pub body_limit_bytes: usize,
    /// Longest accepted user message in characters.
    pub max_message_chars: usize,
    /// Requests per minute per token.
    pub rate_limit_per_minute: u32,
    /// Per-request timeout of the HTTP server in seconds.
    pub request_timeout_secs: u64,
    /// Extra browser origins (`scheme://host[:port]`) allowed to call the
    /// API besides the server's own; comma-separated in the environment.
    #[serde(deserialize_with = "origin_list")]
    pub allowed_origins: Vec<String>,
    /// Seconds a client has to send a request's headers (slow clients are
    /// disconnected; also closes idle keep-alive connections).
    pub header_read_timeout_secs: u64,
    /// Open connections the server accepts in total.
    pub max_connections: usize,
    /// Open connections per client address (0 = no per-address cap).
    pub max_connections_per_ip: usize,
    /// Requests without a valid token per minute per client address
    /// (0 = unlimited); beyond it the address gets 429 before any token
    /// lookup.
    pub unauthenticated_rate_per_minute: u32,
    /// Reverse proxies (addresses or CIDR networks, comma-separated in the
    /// environment) whose `X-Forwarded-For` names the client for the
    /// per-address limit; empty = the connecting address is the client.
    #[serde(deserialize_with = "origin_list")]
    pub trusted_proxies: Vec<String>,
    /// Separate address serving `/metrics` (unset = metrics are off).
    pub metrics_listen: Option<String>,
    /// OTLP base endpoint for traces (`OTEL_EXPORTER_OTLP_ENDPOINT`; the
    /// signal path `/v1/traces` is appended). Export is off unless this or
    /// `trace_traces_endpoint` is set.
    pub trace_endpoint: Option<String>,
    /// Full OTLP traces URL, used as given (`OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`).
    pub trace_traces_endpoint: Option<String>,
    /// Export headers, `key=value,key=value` (`OTEL_EXPORTER_OTLP_HEADERS`):
    /// usually credentials, so a secret.
    pub trace_headers: Option<Secret>,
    /// `service.name` of the exported resource (`OTEL_SERVICE_NAME`).
    pub trace_service_name: String,
    /// Share of ordinary turns exported, 0.0–1.0 (`OTEL_TRACES_SAMPLER_ARG`).
    /// Crisis turns are always exported.
    pub trace_sample_ratio: f64,
    /// Spans waiting for export before new ones are dropped (and counted).
    pub trace_queue_size: usize,
    /// Export message text and model prompts/outputs (masked e-mail
    /// addresses and phone numbers) on ordinary persistent turns. Off by
    /// default; crisis and incognito turns are never captured.
    pub trace_capture_content: bool,
    /// The Telegram bot's token from BotFather (a secret: never logged or
    /// printed).
    pub telegram_bot_token: Option<Secret>,
    /// The Bot API base URL (a self-hosted Bot API server, or a fake in
    /// tests).
    pub telegram_api_url: String,
    /// Telegram user ids allowed to talk to the bot (comma-separated in the
    /// environment); empty = nobody.
    #[serde(deserialize_with = "id_list")]
    pub telegram_allowed_users: Vec<i64>,
    /// The public HTTPS URL Telegram posts updates to (webhook mode, served
    /// by `opencouch serve`); unset = long polling.
    pub telegram_webhook_url: Option<String>,
    /// The secret Telegram sends with every webhook request
    /// (`X-Telegram-Bot-Api-Secret-Token`).
    pub telegram_webhook_secret: Option<Secret>,
    /// OpenAI-compatible Realtime base URL (`{base}/realtime/client_secrets`,
    /// `{base}/realtime/calls`); unset = `base_url`. Voice is available when
    /// this is set or an API key is.
    pub realtime_base_url: Option<String>,
    /// Realtime (speech-to-speech) model of voice sessions.
    pub realtime_model: String,
    /// Transcription model of the person's speech in voice sessions.
    pub realtime_transcription_model: String,
    /// Default assistant voice (alloy, ash, ballad, coral, echo, sage,
    /// shimmer, verse, marin, cedar).
    pub realtime_voice: String,
    /// Lifetime of a minted voice client secret in seconds (10–7200).
    pub realtime_secret_ttl_secs: u64,
}

/// The assistant voices a Realtime session may use.
pub const REALTIME_VOICES: [&str; 10] = [
    "alloy", "ash", "ballad", "coral", "echo", "sage", "shimmer", "verse", "marin", "cedar",
];

impl Default for Settings {
    fn default() -> Self {
        Settings {
            mode: RuntimeMode::Auto,
            memory_mode: MemoryMode::Persistent,
            data_dir: None,
            database_url: None,
            base_url: DEFAULT_BASE_URL.to_owned(),
            api_key: None,
            control_model: "gpt-5.4-mini".to_owned(),
            fast_model: "gpt-5.4-mini".to_owned(),
            quality_model: "gpt-5.4".to_owned(),
            model_timeout_secs: 30,
            model_max_attempts: 2,
            model_max_event_bytes: 1024 * 1024,
            model_max_response_bytes: 8 * 1024 * 1024,
            embedding_model: None,
            embedding_model_dir: None,
            session_timeout_minutes: 20,
            sweep_interval_seconds: 30,
            transcript_soft_limit: 240,
            listen: "127.0.0.1:8080".to_owned(),
            body_limit_bytes: 64 * 1024,
            max_message_chars: 8000,
            rate_limit_per_minute: 60,
            request_timeout_secs: 60,
            allowed_origins: Vec::new(),
            header_read_timeout_secs: 10,
            max_connections: 512,
            max_connections_per_ip: 64,
            unauthenticated_rate_per_minute: 30,
            trusted_proxies: Vec::new(),
            metrics_listen: None,
            trace_endpoint: None,
            trace_traces_endpoint: None,
            trace_headers: None,
            trace_service_name: "opencouch".to_owned(),
            trace_sample_ratio: 1.0,
            trace_queue_size: 2048,
            trace_capture_content: false,
            telegram_bot_token: None,
            telegram_api_url: DEFAULT_TELEGRAM_API_URL.to_owned(),
            telegram_allowed_users: Vec::new(),
            telegram_webhook_url: None,
            telegram_webhook_secret: None,
            realtime_base_url: None,
            realtime_model: "gpt-realtime".to_owned(),
            realtime_transcription_model: "gpt-4o-mini-transcribe".to_owned(),
            realtime_voice: "cedar".to_owned(),
            realtime_secret_ttl_secs: 600,
        }
    }
}

impl fmt::Debug for Settings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Destructured so a new setting cannot be forgotten here.
        let Settings {
            mode,
            memory_mode,
            data_dir,
            database_url,
            base_url,
            api_key,
            control_model,
            fast_model,
            quality_model,
            model_timeout_secs,
            model_max_attempts,
            model_max_event_bytes,
            model_max_response_bytes,
            embedding_model,
            embedding_model_dir,
            session_timeout_minutes,
            sweep_interval_seconds,
            transcript_soft_limit,
            listen,
            body_limit_bytes,
            max_message_chars,
            rate_limit_per_minute,
            request_timeout_secs,
            allowed_origins,
            header_read_timeout_secs,
            max_connections,
            max_connections_per_ip,
            unauthenticated_rate_per_minute,
            trusted_proxies,
            metrics_listen,
            trace_endpoint,
            trace_traces_endpoint,
            trace_headers,
            trace_service_name,
            trace_sample_ratio,
            trace_queue_size,
            trace_capture_content,
            telegram_bot_token,
            telegram_api_url,
            telegram_allowed_users,
            telegram_webhook_url,
            telegram_webhook_secret,
            realtime_base_url,
            realtime_model,
            realtime_transcription_model,
            realtime_voice,
            realtime_secret_ttl_secs,
        } = self;
        f.debug_struct("Settings")
            .field("mode", mode)
            .field("memory_mode", memory_mode)
            .field("data_dir", data_dir)
            .field("database_url", database_url)
            .field("base_url", &mask_url(base_url))
            .field("api_key", api_key)
            .field("control_model", control_model)
            .field("fast_model", fast_model)
            .field("quality_model", quality_model)
            .field("model_timeout_secs", model_timeout_secs)
            .field("model_max_attempts", model_max_attempts)
            .field("model_max_event_bytes", model_max_event_bytes)
            .field("model_max_response_bytes", model_max_response_bytes)
            .field("embedding_model", embedding_model)
            .field("embedding_model_dir", embedding_model_dir)
            .field("session_timeout_minutes", session_timeout_minutes)
            .field("sweep_interval_seconds", sweep_interval_seconds)
            .field("transcript_soft_limit", transcript_soft_limit)
            .field("listen", listen)
            .field("body_limit_bytes", body_limit_bytes)
            .field("max_message_chars", max_message_chars)
            .field("rate_limit_per_minute", rate_limit_per_minute)
            .field("request_timeout_secs", request_timeout_secs)
            .field("allowed_origins", allowed_origins)
            .field("trusted_proxies", trusted_proxies)
            .field("header_read_timeout_secs", header_read_timeout_secs)
            .field("max_connections", max_connections)
            .field("max_connections_per_ip", max_connections_per_ip)
            .field(
                "unauthenticated_rate_per_minute",
                unauthenticated_rate_per_minute,
            )
            .field("metrics_listen", metrics_listen)
            .field("trace_endpoint", &trace_endpoint.as_deref().map(mask_url))
            .field(
                "trace_traces_endpoint",
                &trace_traces_endpoint.as_deref().map(mask_url),
            )
            .field("trace_headers", trace_headers)
            .field("trace_service_name", trace_service_name)
            .field("trace_sample_ratio", trace_sample_ratio)
            .field("trace_queue_size", trace_queue_size)
            .field("trace_capture_content", trace_capture_content)
            .field("telegram_bot_token", telegram_bot_token)
            .field("telegram_api_url", &mask_url(telegram_api_url))
            .field("telegram_allowed_users", telegram_allowed_users)
            .field(
                "telegram_webhook_url",
                &telegram_webhook_url.as_deref().map(mask_url),
            )
            .field("telegram_webhook_secret", telegram_webhook_secret)
            .field(
                "realtime_base_url",
                &realtime_base_url.as_deref().map(mask_url),
            )
            .field("realtime_model", realtime_model)
            .field("realtime_transcription_model", realtime_transcription_model)
            .field("realtime_voice", realtime_voice)
            .field("realtime_secret_ttl_secs", realtime_secret_ttl_secs)
            .finish()
    }
}

/// Values from command-line flags (highest precedence). `None` = not given.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Overrides {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mode: Option<RuntimeMode>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory_mode: Option<MemoryMode>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub data_dir: Option<PathBuf>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub database_url: Option<Secret>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub listen: Option<String>,
}

/// Why settings could not be loaded. The message names the setting.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("setting `{key}`: {message}")]
    Invalid { key: String, message: String },
    #[error("config file {path}: {message}")]
    File { path: PathBuf, message: String },
}

/// Where the settings came from, for `opencouch config`.
#[derive(Debug, Clone)]
pub struct Loaded {
    pub settings: Settings,
    pub config_file: Option<PathBuf>,
}

impl Settings {
    /// Loads all layers from the real environment.
    pub fn load(config_file: Option<&Path>, overrides: &Overrides) -> Result<Loaded, ConfigError> {
        let vars: Vec<(String, String)> = std::env::vars().collect();
        Self::load_from(config_file, overrides, &vars)
    }

    /// Loads all layers with an explicit environment (for tests).
    pub fn load_from(
        config_file: Option<&Path>,
        overrides: &Overrides,
        env: &[(String, String)],
    ) -> Result<Loaded, ConfigError> {
        let get = |k: &str| {
            env.iter()
                .find(|(name, _)| name == k)
                .map(|(_, v)| v.clone())
        };
        let file = match config_file {
            Some(p) => Some(p.to_path_buf()),
            None => match get("OPENCOUCH_CONFIG") {
                Some(p) if !p.is_empty() => Some(PathBuf::from(p)),
                _ => default_config_file(&get).filter(|p| p.is_file()),
            },
        };
        let mut fig = Figment::from(Serialized::defaults(Settings::default()));
        if let Some(path) = &file {
            let text = std::fs::read_to_string(path).map_err(|e| ConfigError::File {
                path: path.clone(),
                message: e.to_string(),
            })?;
            fig = fig.merge(Serialized::defaults(trace_section(&text)));
            fig = fig.merge(Toml::string(&without_trace_section(&text)));
        }
        // OPENCOUCH_* (except the file pointer itself).
        let ours: Vec<(String, String)> = env
            .iter()
            .filter_map(|(k, v)| {
                let key = k.strip_prefix("OPENCOUCH_")?;
                // The config file pointer, the log filter and the switch of
                // the missing-model hint are not settings.
                if matches!(key, "CONFIG" | "LOG" | "NO_MODEL_HINT") || key.is_empty() {
                    return None;
                }
                Some((key.to_ascii_lowercase(), v.clone()))
            })
            .collect();
        for (key, value) in &ours {
            let value = if SECRET_SETTINGS.contains(&key.as_str()) {
                // A key of digits is still a string (and a type error
                // would quote it).
                toml::Value::String(value.clone())
            } else {
                parse_scalar(value)
            };
            fig = fig.merge(Serialized::default(key, value));
        }
        // The standard names.
        if let Some(v) = get("OPENAI_API_KEY").filter(|v| !v.is_empty()) {
            fig = fig.merge(Serialized::default("api_key", v));
        }
        if let Some(v) = get("OPENAI_BASE_URL").filter(|v| !v.is_empty()) {
            fig = fig.merge(Serialized::default("base_url", v));
        }
        if let Some(v) = get("OPENAI_MODEL").filter(|v| !v.is_empty()) {
            fig = fig.merge(Serialized::default("control_model", v.clone()));
            fig = fig.merge(Serialized::default("fast_model", v));
        }
        for (key, value) in otel_env(&get) {
            fig = fig.merge(Serialized::default(key, value));
        }
        fig = fig.merge(Serialized::defaults(overrides));
        let settings: Settings = fig
            .extract()
            .map_err(|e| from_figment(&e, file.as_deref()))?;
        settings.validate()?;
        Ok(Loaded {
            settings,
            config_file: file,
        })
    }

    /// Checks values serde cannot check on its own.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let bad = |key: &str, message: &str| {
            Err(ConfigError::Invalid {
                key: key.into(),
                message: message.into(),
            })
        };
        if !(self.base_url.starts_with("http://") || self.base_url.starts_with("https://")) {
            return bad("base_url", "must start with http:// or https://");
        }
        if let Some(url) = self.database_url.as_ref().map(Secret::expose)
            && !(url.starts_with("postgres://")
                || url.starts_with("postgresql://")
                || url.starts_with("sqlite:"))
        {
            return bad(
                "database_url",
                "must start with postgres://, postgresql:// or sqlite:",
            );
        }
        if self.listen.parse::<SocketAddr>().is_err() {
            return bad("listen", "must be an address like 127.0.0.1:8080");
        }
        if let Some(m) = &self.metrics_listen {
            match m.parse::<SocketAddr>() {
                Err(_) => return bad("metrics_listen", "must be an address like 127.0.0.1:9090"),
                Ok(addr) if Some(addr) == self.listen.parse().ok() => {
                    return bad("metrics_listen", "must differ from `listen`");
                }
                Ok(_) => {}
            }
        }
        for origin in &self.allowed_origins {
            if normalize_origin(origin).is_none() {
                return bad(
                    "allowed_origins",
                    "each origin must look like https://host or http://host:port (no path, no wildcard)",
                );
            }
        }
        if self.trusted_proxies.iter().any(|p| parse_net(p).is_none()) {
            return bad(
                "trusted_proxies",
                "each entry must be an IP address or a network like 10.0.0.0/8 or fd00::/8",
            );
        }
        for (key, url) in [
            ("trace_endpoint", &self.trace_endpoint),
            ("trace_traces_endpoint", &self.trace_traces_endpoint),
        ] {
            if let Some(url) = url
                && !(url.starts_with("http://") || url.starts_with("https://"))
            {
                return bad(key, "must start with http:// or https://");
            }
        }
        if !(0.0..=1.0).contains(&self.trace_sample_ratio) {
            return bad("trace_sample_ratio", "must be between 0.0 and 1.0");
        }
        if self.trace_queue_size == 0 {
            return bad("trace_queue_size", "must be greater than 0");
        }
        if let Some(h) = &self.trace_headers
            && parse_headers(h.expose()).is_none()
        {
            return bad(
                "trace_headers",
                "must look like key=value,key=value (the value is not shown)",
            );
        }
        if !(self.telegram_api_url.starts_with("http://")
            || self.telegram_api_url.starts_with("https://"))
        {
            return bad("telegram_api_url", "must start with http:// or https://");
        }
        if let Some(token) = &self.telegram_bot_token
            && !valid_bot_token(token.expose())
        {
            return bad(
                "telegram_bot_token",
                "must look like the token BotFather gives (digits, a colon, then letters, digits, - or _; the value is not shown)",
            );
        }
        if let Some(url) = &self.telegram_webhook_url {
            if !(url.starts_with("https://") || url.starts_with("http://")) {
                return bad("telegram_webhook_url", "must start with https://");
            }
            if self.telegram_webhook_secret.is_none() {
                return bad(
                    "telegram_webhook_secret",
                    "must be set when telegram_webhook_url is (Telegram sends it with every update)",
                );
            }
        }
        if let Some(secret) = &self.telegram_webhook_secret {
            let v = secret.expose();
            if !(1..=256).contains(&v.len())
                || !v
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
            {
                return bad(
                    "telegram_webhook_secret",
                    "must be 1-256 characters of A-Z, a-z, 0-9, _ and - (the value is not shown)",
                );
            }
        }
        if self.max_connections == 0 {
            return bad("max_connections", "must be greater than 0");
        }
        for (key, v) in [
            ("model_timeout_secs", self.model_timeout_secs),
            ("session_timeout_minutes", self.session_timeout_minutes),
            ("sweep_interval_seconds", self.sweep_interval_seconds),
            ("transcript_soft_limit", self.transcript_soft_limit),
            ("request_timeout_secs", self.request_timeout_secs),
            ("header_read_timeout_secs", self.header_read_timeout_secs),
        ] {
            if v == 0 {
                return bad(key, "must be greater than 0");
            }
        }
        if !(1..=5).contains(&self.model_max_attempts) {
            return bad("model_max_attempts", "must be between 1 and 5");
        }
        for (key, v) in [
            ("model_max_event_bytes", self.model_max_event_bytes),
            ("model_max_response_bytes", self.model_max_response_bytes),
        ] {
            if !(MIN_MODEL_CAP_BYTES..=MAX_MODEL_CAP_BYTES).contains(&v) {
                return bad(key, "must be between 4096 and 268435456 (256 MiB)");
            }
        }
        if self.body_limit_bytes < 1024 {
            return bad("body_limit_bytes", "must be at least 1024");
        }
        if self.max_message_chars == 0 {
            return bad("max_message_chars", "must be greater than 0");
        }
        if let Some(url) = &self.realtime_base_url
            && !(url.starts_with("http://") || url.starts_with("https://"))
        {
            return bad("realtime_base_url", "must start with http:// or https://");
        }
        if !REALTIME_VOICES.contains(&self.realtime_voice.as_str()) {
            return bad(
                "realtime_voice",
                "must be one of alloy, ash, ballad, coral, echo, sage, shimmer, verse, marin, cedar",
            );
        }
        if !(10..=7200).contains(&self.realtime_secret_ttl_secs) {
            return bad("realtime_secret_ttl_secs", "must be between 10 and 7200");
        }
        for (key, v) in [
            ("control_model", &self.control_model),
            ("fast_model", &self.fast_model),
            ("quality_model", &self.quality_model),
            ("realtime_model", &self.realtime_model),
            (
                "realtime_transcription_model",
                &self.realtime_transcription_model,
            ),
        ] {
            if v.trim().is_empty() {
                return bad(key, "must not be empty");
            }
        }
        Ok(())
    }

    /// Whether a chat model is configured: a key, or a non-default base
    /// URL (local servers need no key).
    pub fn model_configured(&self) -> bool {
        self.api_key.is_some() || self.base_url != DEFAULT_BASE_URL
    }

    /// The Realtime base URL voice sessions use, `None` when voice is not
    /// configured (no `realtime_base_url` and no API key).
    pub fn realtime_base(&self) -> Option<&str> {
        match &self.realtime_base_url {
            Some(url) => Some(url.trim_end_matches('/')),
            None if self.api_key.is_some() => Some(self.base_url.trim_end_matches('/')),
            None => None,
        }
    }

    /// The mode after resolving `auto`.
    pub fn effective_mode(&self) -> RuntimeMode {
        match self.mode {
            RuntimeMode::Auto if self.model_configured() => RuntimeMode::Hybrid,
            RuntimeMode::Auto => RuntimeMode::Deterministic,
            other => other,
        }
    }

    /// Whether the configured database is PostgreSQL.
    pub fn uses_postgres(&self) -> bool {
        self.database_url
            .as_ref()
            .is_some_and(|u| u.expose().starts_with("postgres"))
    }

    /// The data directory: the setting, else `$XDG_DATA_HOME/opencouch`,
    /// else `~/.local/share/opencouch`, else `./.opencouch`.
    pub fn resolved_data_dir(&self) -> PathBuf {
        if let Some(d) = &self.data_dir {
            return d.clone();
        }
        if let Some(x) = std::env::var_os("XDG_DATA_HOME").filter(|v| !v.is_empty()) {
            return PathBuf::from(x).join("opencouch");
        }
        if let Some(h) = std::env::var_os("HOME").filter(|v| !v.is_empty()) {
            return PathBuf::from(h).join(".local/share/opencouch");
        }
        PathBuf::from(".opencouch")
    }

    /// The SQLite file used when no `database_url` is set.
    pub fn sqlite_path(&self) -> PathBuf {
        if let Some(url) = &self.database_url
            && let Some(p) = url.expose().strip_prefix("sqlite:")
        {
            return PathBuf::from(p.trim_start_matches("//"));
        }
        self.resolved_data_dir().join("opencouch.sqlite3")
    }

    /// The OTLP traces URL, when export is on: `trace_traces_endpoint` as
    /// given, else `trace_endpoint` with `/v1/traces` appended.
    pub fn trace_url(&self) -> Option<String> {
        if let Some(url) = self
            .trace_traces_endpoint
            .as_deref()
            .filter(|u| !u.is_empty())
        {
            return Some(url.to_owned());
        }
        let base = self.trace_endpoint.as_deref().filter(|u| !u.is_empty())?;
        Some(format!("{}/v1/traces", base.trim_end_matches('/')))
    }

    /// The export headers as `(name, value)` pairs (empty when unset).
    pub fn trace_header_pairs(&self) -> Vec<(String, String)> {
        self.trace_headers
            .as_ref()
            .and_then(|h| parse_headers(h.expose()))
            .unwrap_or_default()
    }

    /// The settings as `(name, value)` rows with secrets masked.
    pub fn display_rows(&self) -> Vec<(&'static str, String)> {
        let opt = |v: &Option<String>| v.clone().unwrap_or_else(|| "(not set)".into());
        let db = match &self.database_url {
            Some(url) => mask_url(url.expose()),
            None => format!("sqlite (embedded): {}", self.sqlite_path().display()),
        };
        vec![
            (
                "mode",
                format!("{} (effective: {})", self.mode, self.effective_mode()),
            ),
            ("memory_mode", self.memory_mode.to_string()),
            ("data_dir", self.resolved_data_dir().display().to_string()),
            ("database", db),
            ("base_url", mask_url(&self.base_url)),
            (
                "api_key",
                self.api_key
                    .as_ref()
                    .map(Secret::masked)
                    .unwrap_or_else(|| "(not set)".into()),
            ),
            ("control_model", self.control_model.clone()),
            ("fast_model", self.fast_model.clone()),
            ("quality_model", self.quality_model.clone()),
            ("model_timeout_secs", self.model_timeout_secs.to_string()),
            ("model_max_attempts", self.model_max_attempts.to_string()),
            (
                "model_max_event_bytes",
                self.model_max_event_bytes.to_string(),
            ),
            (
                "model_max_response_bytes",
                self.model_max_response_bytes.to_string(),
            ),
            ("embedding_model", opt(&self.embedding_model)),
            (
                "embedding_model_dir",
                self.embedding_model_dir
                    .as_ref()
                    .map(|p| p.display().to_string())
                    .unwrap_or_else(|| "(not set)".into()),
            ),
            (
                "session_timeout_minutes",
                self.session_timeout_minutes.to_string(),
            ),
            (
                "sweep_interval_seconds",
                self.sweep_interval_seconds.to_string(),
            ),
            (
                "transcript_soft_limit",
                self.transcript_soft_limit.to_string(),
            ),
            ("listen", self.listen.clone()),
            ("body_limit_bytes", self.body_limit_bytes.to_string()),
            ("max_message_chars", self.max_message_chars.to_string()),
            (
                "rate_limit_per_minute",
                self.rate_limit_per_minute.to_string(),
            ),
            (
                "request_timeout_secs",
                self.request_timeout_secs.to_string(),
            ),
            (
                "allowed_origins",
                if self.allowed_origins.is_empty() {
                    "(only the server's own)".into()
                } else {
                    self.allowed_origins.join(", ")
                },
            ),
            (
                "header_read_timeout_secs",
                self.header_read_timeout_secs.to_string(),
            ),
            ("max_connections", self.max_connections.to_string()),
            (
                "max_connections_per_ip",
                self.max_connections_per_ip.to_string(),
            ),
            (
                "unauthenticated_rate_per_minute",
                self.unauthenticated_rate_per_minute.to_string(),
            ),
            (
                "trusted_proxies",
                if self.trusted_proxies.is_empty() {
                    "(none: the connecting address is the client)".into()
                } else {
                    self.trusted_proxies.join(", ")
                },
            ),
            (
                "metrics_listen",
                self.metrics_listen
                    .clone()
                    .unwrap_or_else(|| "(off)".into()),
            ),
            (
                "trace_export",
                self.trace_url()
                    .map(|u| mask_url(&u))
                    .unwrap_or_else(|| "(off)".into()),
            ),
            (
                "trace_headers",
                self.trace_headers
                    .as_ref()
                    .map(|h| {
                        let names: Vec<String> = parse_headers(h.expose())
                            .unwrap_or_default()
                            .into_iter()
                            .map(|(k, _)| format!("{k}=****"))
                            .collect();
                        names.join(",")
                    })
                    .unwrap_or_else(|| "(not set)".into()),
            ),
            ("trace_service_name", self.trace_service_name.clone()),
            ("trace_sample_ratio", self.trace_sample_ratio.to_string()),
            ("trace_queue_size", self.trace_queue_size.to_string()),
            (
                "trace_capture_content",
                self.trace_capture_content.to_string(),
            ),
            (
                "telegram_bot_token",
                if self.telegram_bot_token.is_some() {
                    "**** (set)".into()
                } else {
                    "(not set)".into()
                },
            ),
            ("telegram_api_url", mask_url(&self.telegram_api_url)),
            (
                "telegram_allowed_users",
                if self.telegram_allowed_users.is_empty() {
                    "(nobody)".into()
                } else {
                    self.telegram_allowed_users
                        .iter()
                        .map(i64::to_string)
                        .collect::<Vec<_>>()
                        .join(", ")
                },
            ),
            (
                "telegram_webhook_url",
                self.telegram_webhook_url
                    .as_deref()
                    .map(mask_url)
                    .unwrap_or_else(|| "(not set: long polling)".into()),
            ),
            (
                "telegram_webhook_secret",
                if self.telegram_webhook_secret.is_some() {
                    "**** (set)".into()
                } else {
                    "(not set)".into()
                },
            ),
            (
                "realtime_base_url",
                match (&self.realtime_base_url, self.realtime_base()) {
                    (Some(url), _) => mask_url(url),
                    (None, Some(_)) => "(base_url)".into(),
                    (None, None) => "(voice off: set realtime_base_url or api_key)".into(),
                },
            ),
            ("realtime_model", self.realtime_model.clone()),
            (
                "realtime_transcription_model",
                self.realtime_transcription_model.clone(),
            ),
            ("realtime_voice", self.realtime_voice.clone()),
            (
                "realtime_secret_ttl_secs",
                self.realtime_secret_ttl_secs.to_string(),
            ),
        ]
    }
}

/// `key=value,key=value` (the `OTEL_EXPORTER_OTLP_HEADERS` form; values
/// may be percent-encoded) as pairs, or `None` when malformed.
pub fn parse_headers(raw: &str) -> Option<Vec<(String, String)>> {
    let mut out = Vec::new();
    for part in raw.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (k, v) = part.split_once('=')?;
        let k = k.trim();
        if k.is_empty()
            || !k
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
        {
            return None;
        }
        let v = percent_decode(v.trim())?;
        out.push((k.to_owned(), v));
    }
    Some(out)
}

fn percent_decode(s: &str) -> Option<String> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = s.get(i + 1..i + 3)?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

/// The standard OpenTelemetry variables (and the original system's Opik
/// names) as settings. `OPIK_API_KEY` with no OTLP endpoint points export at
/// Opik's cloud endpoint with its three headers.
fn otel_env(get: &dyn Fn(&str) -> Option<String>) -> Vec<(&'static str, toml::Value)> {
    let get = |k: &str| get(k).filter(|v| !v.trim().is_empty());
    let mut out = Vec::new();
    let str_value = |v: String| toml::Value::String(v);
    let endpoint = get("OTEL_EXPORTER_OTLP_ENDPOINT");
    let traces = get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT");
    let mut headers =
        get("OTEL_EXPORTER_OTLP_TRACES_HEADERS").or(get("OTEL_EXPORTER_OTLP_HEADERS"));
    if let Some(key) = get("OPIK_API_KEY") {
        if endpoint.is_none() && traces.is_none() {
            out.push(("trace_endpoint", str_value(OPIK_CLOUD_ENDPOINT.to_owned())));
        }
        if headers.is_none() {
            let mut h = vec![format!("Authorization={key}")];
            if let Some(ws) = get("OPIK_WORKSPACE") {
                h.push(format!("Comet-Workspace={ws}"));
            }
            if let Some(p) = get("OPIK_PROJECT_NAME") {
                h.push(format!("projectName={p}"));
            }
            headers = Some(h.join(","));
        }
    }
    if let Some(v) = endpoint {
        out.push(("trace_endpoint", str_value(v)));
    }
    if let Some(v) = traces {
        out.push(("trace_traces_endpoint", str_value(v)));
    }
    if let Some(v) = headers {
        out.push(("trace_headers", str_value(v)));
    }
    if let Some(v) = get("OTEL_SERVICE_NAME") {
        out.push(("trace_service_name", str_value(v)));
    }
    if let Some(v) = get("OTEL_TRACES_SAMPLER_ARG") {
        let value = match v.trim().parse::<f64>() {
            Ok(f) => toml::Value::Float(f),
            Err(_) => toml::Value::String(v),
        };
        out.push(("trace_sample_ratio", value));
    }
    out
}

/// Opik's cloud OTLP endpoint (its docs: traces over HTTP only).
pub const OPIK_CLOUD_ENDPOINT: &str = "https://www.comet.com/opik/api/v1/private/otel";

/// The config file's `[trace]` table as flat `trace_<key>` settings.
fn trace_section(text: &str) -> toml::Table {
    let mut out = toml::Table::new();
    if let Ok(toml::Value::Table(table)) = text.parse::<toml::Table>().map(toml::Value::Table)
        && let Some(toml::Value::Table(trace)) = table.get("trace")
    {
        for (k, v) in trace {
            out.insert(format!("trace_{k}"), v.clone());
        }
    }
    out
}

/// The config file without its `[trace]` table (lifted by [`trace_section`]).
fn without_trace_section(text: &str) -> String {
    match text.parse::<toml::Table>() {
        Ok(mut table) if table.contains_key("trace") => {
            table.remove("trace");
            toml::to_string(&table).unwrap_or_else(|_| text.to_owned())
        }
        _ => text.to_owned(),
    }
}

/// An origin in its canonical form (`scheme://host[:port]`, lower case,
/// default port dropped), or `None` when `origin` is not one: only `http`
/// and `https`, a host, an optional port, nothing else (no path, query,
/// user info or wildcard).
pub fn normalize_origin(origin: &str) -> Option<String> {
    let origin = origin.trim().to_ascii_lowercase();
    let (scheme, rest) = origin.split_once("://")?;
    let default_port = match scheme {
        "http" => "80",
        "https" => "443",
        _ => return None,
    };
    let rest = rest.strip_suffix('/').unwrap_or(rest);
    if rest.is_empty() || rest.contains(['/', '?', '#', '@', '*', ' ', '\\']) {
        return None;
    }
    let (host, port) = match rest.rsplit_once(':') {
        // An IPv6 literal without a port: the colon is inside the brackets.
        Some((h, p)) if !p.contains(']') => (h, Some(p)),
        _ => (rest, None),
    };
    if host.is_empty() || (host.starts_with('[') != host.ends_with(']')) {
        return None;
    }
    if !host
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'[' | b']' | b':'))
    {
        return None;
    }
    match port {
        None => Some(format!("{scheme}://{host}")),
        Some(p) if p.parse::<u16>().is_ok_and(|n| n > 0) => {
            if p == default_port {
                Some(format!("{scheme}://{host}"))
            } else {
                Some(format!("{scheme}://{host}:{p}"))
            }
        }
        Some(_) => None,
    }
}

/// An IP address or a CIDR network (`10.0.0.0/8`, `fd00::/8`, `127.0.0.1`)
/// as the address and the prefix length.
pub fn parse_net(s: &str) -> Option<(std::net::IpAddr, u8)> {
    let (addr, len) = match s.trim().split_once('/') {
        Some((a, l)) => (a, Some(l)),
        None => (s.trim(), None),
    };
    let ip: std::net::IpAddr = addr.parse().ok()?;
    let max = if ip.is_ipv4() { 32 } else { 128 };
    let len = match len {
        Some(l) => l.parse::<u8>().ok().filter(|l| *l <= max)?,
        None => max,
    };
    Some((ip, len))
}

/// `allowed_origins` (and `trusted_proxies`) from a list (TOML) or one
/// comma-separated string (the environment); empty entries are dropped.
fn origin_list<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Raw {
        One(String),
        Many(Vec<String>),
    }
    let items = match Raw::deserialize(d)? {
        Raw::One(s) => s.split(',').map(str::to_owned).collect(),
        Raw::Many(v) => v,
    };
    Ok(items
        .into_iter()
        .map(|s| s.trim().to_owned())
        .filter(|s| !s.is_empty())
        .collect())
}

/// Whether `token` has the form of a Bot API token (`123456:ABC-def_…`).
/// Checked so a mistyped value fails at start-up, not on the first request.
pub fn valid_bot_token(token: &str) -> bool {
    match token.split_once(':') {
        Some((id, rest)) => {
            !id.is_empty()
                && id.bytes().all(|b| b.is_ascii_digit())
                && !rest.is_empty()
                && rest
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
        }
        None => false,
    }
}

/// `telegram_allowed_users` from a list (TOML) or one comma-separated
/// string or a single number (the environment). A value that is not a
/// user id is an error that names no value.
fn id_list<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<i64>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Item {
        Num(i64),
        Text(String),
    }
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Raw {
        One(Item),
        Many(Vec<Item>),
    }
    let items = match Raw::deserialize(d)? {
        Raw::One(Item::Num(n)) => return Ok(vec![n]),
        Raw::One(Item::Text(s)) => s.split(',').map(|p| Item::Text(p.to_owned())).collect(),
        Raw::Many(v) => v,
    };
    let mut out = Vec::new();
    for item in items {
        match item {
            Item::Num(n) => out.push(n),
            Item::Text(t) if t.trim().is_empty() => {}
            Item::Text(t) => out.push(t.trim().parse::<i64>().map_err(|_| {
                serde::de::Error::custom("each entry must be a numeric Telegram user id")
            })?),
        }
    }
    Ok(out)
}

/// Parses an environment value as a TOML scalar when it looks like a
/// number or boolean, else keeps it as a string.
fn parse_scalar(value: &str) -> toml::Value {
    if let Ok(i) = value.parse::<i64>() {
        return toml::Value::Integer(i);
    }
    if value.contains('.')
        && value.bytes().all(|b| b.is_ascii_digit() || b == b'.')
        && let Ok(f) = value.parse::<f64>()
    {
        return toml::Value::Float(f);
    }
    match value {
        "true" => toml::Value::Boolean(true),
        "false" => toml::Value::Boolean(false),
        _ => toml::Value::String(value.to_owned()),
    }
}

fn default_config_file(get: &dyn Fn(&str) -> Option<String>) -> Option<PathBuf> {
    if let Some(x) = get("XDG_CONFIG_HOME").filter(|v| !v.is_empty()) {
        return Some(PathBuf::from(x).join("opencouch/config.toml"));
    }
    get("HOME")
        .filter(|v| !v.is_empty())
        .map(|h| PathBuf::from(h).join(".config/opencouch/config.toml"))
}

fn from_figment(e: &figment::Error, file: Option<&Path>) -> ConfigError {
    if let figment::error::Kind::UnknownField(name, _) = &e.kind {
        let source = file
            .map(|p| format!(" in {}", p.display()))
            .unwrap_or_default();
        return ConfigError::Invalid {
            key: name.clone(),
            message: format!("unknown setting{source}"),
        };
    }
    let key = e.path.last().cloned().unwrap_or_else(|| "(file)".into());
    let message = if SECRET_SETTINGS.contains(&key.as_str()) {
        // Type errors quote the value.
        "invalid value (a string is expected; the value is not shown)".to_owned()
    } else {
        without_source_lines(&e.kind.to_string())
    };
    ConfigError::Invalid { key, message }
}

/// A TOML parse error without the lines of the file it quotes (`1 | …`,
/// `  |  ^`): the quoted line may hold a secret.
fn without_source_lines(message: &str) -> String {
    message
        .lines()
        .filter(|line| {
            !line
                .trim_start()
                .trim_start_matches(|c: char| c.is_ascii_digit())
                .trim_start()
                .starts_with('|')
        })
        .map(str::trim)
        .filter(|line| !line.is_empty())
        .collect::<Vec<_>>()
        .join(": ")
}

/// A URL for display: the user-info password, every query parameter whose
/// name looks like a secret (password, token, key, secret, …) and any
/// fragment are replaced by `****`. Parsed with a real URL parser, so
/// `postgres://user:se@cret@host/db` hides all of `se@cret`. A value that
/// does not parse as a URL is not shown at all.
pub fn mask_url(raw: &str) -> String {
    const HIDDEN: &str = "****";
    let Ok(mut url) = url::Url::parse(raw.trim()) else {
        return "(not a valid URL; not shown)".to_owned();
    };
    if url.password().is_some() && url.set_password(Some(HIDDEN)).is_err() {
        return "(URL with credentials; not shown)".to_owned();
    }
    if url.query().is_some() {
        let pairs: Vec<(String, String)> = url
            .query_pairs()
            .map(|(k, v)| {
                let v = if secret_name(&k) {
                    HIDDEN.to_owned()
                } else {
                    v.into_owned()
                };
                (k.into_owned(), v)
            })
            .collect();
        url.query_pairs_mut().clear().extend_pairs(pairs);
    }
    if url.fragment().is_some() {
        url.set_fragment(Some(HIDDEN));
    }
    url.to_string()
}

/// Whether a query parameter name looks like it carries a secret.
fn secret_name(name: &str) -> bool {
    const MARKERS: [&str; 12] = [
        "pass",
        "pwd",
        "secret",
        "token",
        "key",
        "auth",
        "credential",
        "sig",
        "session",
        "cookie",
        "jwt",
        "bearer",
    ];
    let name = name.to_ascii_lowercase();
    MARKERS.iter().any(|m| name.contains(m))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn load(pairs: &[(&str, &str)]) -> Result<Settings, ConfigError> {
        Settings::load_from(None, &Overrides::default(), &env(pairs)).map(|l| l.settings)
    }

    #[test]
    fn defaults_are_deterministic_without_model() {
        let s = load(&[]).unwrap();
        assert_eq!(s.mode, RuntimeMode::Auto);
        assert_eq!(s.effective_mode(), RuntimeMode::Deterministic);
        assert!(!s.uses_postgres());
    }

    #[test]
    fn layering_order() {
        let dir = std::env::temp_dir().join(format!("oc-cfg-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("c.toml");
        std::fs::write(&file, "mode = \"deterministic\"\nfast_model = \"from-file\"\ncontrol_model = \"file-control\"\nsession_timeout_minutes = 5\n").unwrap();
        let vars = env(&[
            ("OPENCOUCH_FAST_MODEL", "from-env"),
            ("OPENCOUCH_SESSION_TIMEOUT_MINUTES", "7"),
            ("OPENAI_MODEL", "std-model"),
            ("OPENAI_API_KEY", "sk-abcdefghijklmnop"),
        ]);
        let over = Overrides {
            mode: Some(RuntimeMode::Hybrid),
            ..Default::default()
        };
        let s = Settings::load_from(Some(&file), &over, &vars)
            .unwrap()
            .settings;
        assert_eq!(s.mode, RuntimeMode::Hybrid, "flag beats file");
        assert_eq!(s.fast_model, "std-model", "OPENAI_MODEL beats OPENCOUCH_*");
        assert_eq!(s.control_model, "std-model");
        assert_eq!(s.session_timeout_minutes, 7, "env beats file");
        assert_eq!(s.api_key.as_ref().unwrap().masked(), "****mnop");
        assert!(
            !format!("{s:?}").contains("abcdefgh"),
            "debug output masks the key"
        );
        assert_eq!(s.effective_mode(), RuntimeMode::Hybrid);
    }

    #[test]
    fn model_byte_caps_come_from_the_environment() {
        let s = load(&[
            ("OPENCOUCH_MODEL_MAX_EVENT_BYTES", "65536"),
            ("OPENCOUCH_MODEL_MAX_RESPONSE_BYTES", "2097152"),
        ])
        .unwrap();
        assert_eq!(s.model_max_event_bytes, 65536);
        assert_eq!(s.model_max_response_bytes, 2_097_152);
        let d = Settings::default();
        assert_eq!(d.model_max_event_bytes, 1024 * 1024);
        assert_eq!(d.model_max_response_bytes, 8 * 1024 * 1024);
    }

    #[test]
    fn bad_values_name_the_setting() {
        let cases: &[(&[(&str, &str)], &str)] = &[
            (&[("OPENCOUCH_MODE", "turbo")], "mode"),
            (&[("OPENCOUCH_MEMORY_MODE", "guest")], "memory_mode"),
            (
                &[("OPENCOUCH_SESSION_TIMEOUT_MINUTES", "soon")],
                "session_timeout_minutes",
            ),
            (
                &[("OPENCOUCH_SESSION_TIMEOUT_MINUTES", "0")],
                "session_timeout_minutes",
            ),
            (&[("OPENAI_BASE_URL", "ftp://x")], "base_url"),
            (&[("OPENCOUCH_DATABASE_URL", "mysql://x")], "database_url"),
            (&[("OPENCOUCH_LISTEN", "everywhere")], "listen"),
            (
                &[("OPENCOUCH_MODEL_MAX_ATTEMPTS", "9")],
                "model_max_attempts",
            ),
            (
                &[("OPENCOUCH_MODEL_MAX_EVENT_BYTES", "100")],
                "model_max_event_bytes",
            ),
            (
                &[("OPENCOUCH_MODEL_MAX_RESPONSE_BYTES", "999999999999")],
                "model_max_response_bytes",
            ),
            (&[("OPENCOUCH_NO_SUCH_THING", "1")], "no_such_thing"),
            (
                &[("OPENCOUCH_ALLOWED_ORIGINS", "https://ok.example,*")],
                "allowed_origins",
            ),
            (
                &[("OPENCOUCH_ALLOWED_ORIGINS", "https://x.example/path")],
                "allowed_origins",
            ),
            (&[("OPENCOUCH_METRICS_LISTEN", "nowhere")], "metrics_listen"),
            (
                &[("OPENCOUCH_METRICS_LISTEN", "127.0.0.1:8080")],
                "metrics_listen",
            ),
            (&[("OPENCOUCH_MAX_CONNECTIONS", "0")], "max_connections"),
            (
                &[("OPENCOUCH_HEADER_READ_TIMEOUT_SECS", "0")],
                "header_read_timeout_secs",
            ),
        ];
        for (vars, key) in cases {
            let err = load(vars).unwrap_err();
            assert!(err.to_string().contains(key), "{vars:?}: {err}");
        }
    }

    #[test]
    fn local_server_without_key_counts_as_configured() {
        let s = load(&[("OPENAI_BASE_URL", "http://127.0.0.1:11434/v1")]).unwrap();
        assert!(s.model_configured());
        assert_eq!(s.effective_mode(), RuntimeMode::Hybrid);
        let forced = load(&[
            ("OPENAI_BASE_URL", "http://127.0.0.1:11434/v1"),
            ("OPENCOUCH_MODE", "deterministic"),
        ])
        .unwrap();
        assert_eq!(forced.effective_mode(), RuntimeMode::Deterministic);
    }

    #[test]
    fn trusted_proxies_are_addresses_or_networks() {
        let s = load(&[(
            "OPENCOUCH_TRUSTED_PROXIES",
            "127.0.0.1, 10.0.0.0/8,fd00::/8",
        )])
        .unwrap();
        assert_eq!(s.trusted_proxies, ["127.0.0.1", "10.0.0.0/8", "fd00::/8"]);
        assert!(load(&[]).unwrap().trusted_proxies.is_empty());
        for bad in ["proxy.example", "10.0.0.0/33", "::/129", "10.0.0.1/x"] {
            let err = load(&[("OPENCOUCH_TRUSTED_PROXIES", bad)]).unwrap_err();
            assert!(err.to_string().contains("trusted_proxies"), "{bad}: {err}");
        }
        assert_eq!(
            parse_net("10.1.2.3/8"),
            Some(("10.1.2.3".parse().unwrap(), 8))
        );
        assert_eq!(parse_net("::1"), Some(("::1".parse().unwrap(), 128)));
    }

    #[test]
    fn allowed_origins_from_env_and_file() {
        let s = load(&[(
            "OPENCOUCH_ALLOWED_ORIGINS",
            " http://127.0.0.1:3000 , https://couch.example ,",
        )])
        .unwrap();
        assert_eq!(
            s.allowed_origins,
            ["http://127.0.0.1:3000", "https://couch.example"]
        );
        assert!(load(&[]).unwrap().allowed_origins.is_empty());
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("c.toml");
        std::fs::write(&file, "allowed_origins = [\"https://a.example\"]\n").unwrap();
        let s = Settings::load_from(Some(&file), &Overrides::default(), &[])
            .unwrap()
            .settings;
        assert_eq!(s.allowed_origins, ["https://a.example"]);
        let s = load(&[("OPENCOUCH_METRICS_LISTEN", "127.0.0.1:9090")]).unwrap();
        assert_eq!(s.metrics_listen.as_deref(), Some("127.0.0.1:9090"));
    }

    #[test]
    fn origins_normalize() {
        for (input, want) in [
            ("https://Couch.Example", Some("https://couch.example")),
            ("https://couch.example:443", Some("https://couch.example")),
            ("http://couch.example:80/", Some("http://couch.example")),
            ("http://127.0.0.1:8080", Some("http://127.0.0.1:8080")),
            ("http://[::1]:8080", Some("http://[::1]:8080")),
            ("http://[::1]", Some("http://[::1]")),
            ("ftp://x.example", None),
            ("https://", None),
            ("https://*.example", None),
            ("https://a.example/x", None),
            ("https://u@a.example", None),
            ("https://a.example:0", None),
            ("https://a.example:99999", None),
            ("null", None),
        ] {
            assert_eq!(normalize_origin(input).as_deref(), want, "{input}");
        }
    }

    #[test]
    fn urls_are_masked() {
        for (url, want) in [
            (
                "postgres://u:secret@h:5432/db",
                "postgres://u:****@h:5432/db",
            ),
            // An `@` in the password: the last `@` ends the user info.
            (
                "postgres://user:se@cret@host/db",
                "postgres://user:****@host/db",
            ),
            (
                "postgres://user:se@cret@host/db?password=p2&sslmode=require",
                "postgres://user:****@host/db?password=****&sslmode=require",
            ),
            (
                "postgresql://host/db?user=u&PassWord=x&sslpassword=y&sslkey=/k&application_name=oc",
                "postgresql://host/db?user=u&PassWord=****&sslpassword=****&sslkey=****&application_name=oc",
            ),
            (
                "https://proxy.example/v1?api-key=abc&access_token=t&sig=s&deployment=d#frag",
                "https://proxy.example/v1?api-key=****&access_token=****&sig=****&deployment=d#****",
            ),
            (
                "https://u:p@proxy.example/v1",
                "https://u:****@proxy.example/v1",
            ),
            ("postgres://u@h/db", "postgres://u@h/db"),
            ("https://api.openai.com/v1", "https://api.openai.com/v1"),
            ("sqlite:/var/lib/oc.db", "sqlite:/var/lib/oc.db"),
            ("not a url: pass=x", "(not a valid URL; not shown)"),
            ("postgres://u:p@/db", "(not a valid URL; not shown)"),
        ] {
            assert_eq!(mask_url(url), want, "{url}");
        }
        let s = load(&[("OPENCOUCH_DATABASE_URL", "postgres://u:pw@localhost/db")]).unwrap();
        let rows = s.display_rows();
        assert!(rows.iter().all(|(_, v)| !v.contains("pw@")));
    }

    #[test]
    fn telegram_settings_parse_and_validate() {
        let s = load(&[("OPENCOUCH_TELEGRAM_ALLOWED_USERS", "42")]).unwrap();
        assert_eq!(s.telegram_allowed_users, vec![42]);
        let s = load(&[("OPENCOUCH_TELEGRAM_ALLOWED_USERS", " 42, 7 ,")]).unwrap();
        assert_eq!(s.telegram_allowed_users, vec![42, 7]);
        let s = load(&[]).unwrap();
        assert!(s.telegram_allowed_users.is_empty());
        assert_eq!(s.telegram_api_url, DEFAULT_TELEGRAM_API_URL);
        for (vars, key) in [
            (
                &[("OPENCOUCH_TELEGRAM_ALLOWED_USERS", "42,alice")][..],
                "telegram_allowed_users",
            ),
            (
                &[("OPENCOUCH_TELEGRAM_BOT_TOKEN", "not a token")][..],
                "telegram_bot_token",
            ),
            (
                &[("OPENCOUCH_TELEGRAM_API_URL", "ftp://x")][..],
                "telegram_api_url",
            ),
            (
                &[("OPENCOUCH_TELEGRAM_WEBHOOK_URL", "https://x.example/hook")][..],
                "telegram_webhook_secret",
            ),
            (
                &[("OPENCOUCH_TELEGRAM_WEBHOOK_SECRET", "has space")][..],
                "telegram_webhook_secret",
            ),
        ] {
            let e = load(vars).unwrap_err().to_string();
            assert!(e.contains(key), "{vars:?}: {e}");
            assert!(!e.contains("alice") && !e.contains("not a token"), "{e}");
        }
        assert!(valid_bot_token("123456:AAH-x_9"));
        assert!(!valid_bot_token(":abc") && !valid_bot_token("12:") && !valid_bot_token("abc"));
    }

    /// Every output path of the settings, with a sentinel in every secret
    /// (and in the secret-looking parts of `base_url`): the rows of
    /// `opencouch config`, `Debug` of everything, and the error messages of
    /// bad values, unknown settings and a broken config file.
    #[test]
    fn a_sentinel_secret_never_appears_in_any_output() {
        const SENTINEL: &str = "Sentinel7Pw";
        let leaks = |label: &str, text: &str| {
            for needle in [SENTINEL, "sentinel7pw", "Sentinel7"] {
                assert!(
                    !text
                        .to_ascii_lowercase()
                        .contains(&needle.to_ascii_lowercase()),
                    "{label} shows the secret: {text}"
                );
            }
        };
        let db = format!(
            "postgres://user:se@cret{SENTINEL}@db.example:5432/oc?password={SENTINEL}&sslmode=require"
        );
        let base = format!("https://u:{SENTINEL}@proxy.example/v1?api-key={SENTINEL}");
        let key = format!("sk-{SENTINEL}-abcd");
        let bot_token = format!("123456:{SENTINEL}abcdEFGH");
        let hook_secret = format!("{SENTINEL}_hook");
        let vars = env(&[
            ("OPENCOUCH_DATABASE_URL", db.as_str()),
            ("OPENAI_BASE_URL", base.as_str()),
            ("OPENAI_API_KEY", key.as_str()),
            ("OPENCOUCH_TELEGRAM_BOT_TOKEN", bot_token.as_str()),
            (
                "OPENCOUCH_TELEGRAM_WEBHOOK_URL",
                "https://bot.example/telegram",
            ),
            ("OPENCOUCH_TELEGRAM_WEBHOOK_SECRET", hook_secret.as_str()),
        ]);
        let loaded = Settings::load_from(None, &Overrides::default(), &vars).unwrap();
        assert_eq!(
            loaded
                .settings
                .telegram_bot_token
                .as_ref()
                .unwrap()
                .expose(),
            bot_token
        );
        assert_eq!(
            loaded
                .settings
                .telegram_webhook_secret
                .as_ref()
                .unwrap()
                .expose(),
            hook_secret
        );
        assert_eq!(loaded.settings.database_url.as_ref().unwrap().expose(), db);
        assert_eq!(loaded.settings.api_key.as_ref().unwrap().expose(), key);
        for (name, value) in loaded.settings.display_rows() {
            leaks(name, &value);
        }
        leaks("Debug of Loaded", &format!("{loaded:?}"));
        leaks(
            "pretty Debug of Settings",
            &format!("{:#?}", loaded.settings),
        );
        let secret = loaded.settings.database_url.clone().unwrap();
        leaks("Display of Secret", &format!("{secret} {secret:>40}"));
        let overrides = Overrides {
            database_url: Some(secret),
            ..Default::default()
        };
        leaks("Debug of Overrides", &format!("{overrides:?}"));
        let from_flag = Settings::load_from(None, &overrides, &[]).unwrap();
        leaks("Debug of a flag's settings", &format!("{from_flag:?}"));

        // Errors: a bad scheme, a numeric key, a secret of the wrong type in
        // a file, a file that does not parse on the secret's line, typos.
        let bad_scheme = format!("mysql://u:{SENTINEL}@h/db");
        let numeric = "12345678901234567";
        let dir = tempfile::tempdir().unwrap();
        let wrong_type = dir.path().join("wrong_type.toml");
        std::fs::write(&wrong_type, "api_key = 12345678901234567\n").unwrap();
        let wrong_db = dir.path().join("wrong_db.toml");
        std::fs::write(&wrong_db, format!("database_url = [\"{db}\"]\n")).unwrap();
        let unparsable = dir.path().join("unparsable.toml");
        std::fs::write(&unparsable, format!("database_url = \"{db}\n")).unwrap();
        let mut errors = vec![
            load(&[("OPENCOUCH_DATABASE_URL", bad_scheme.as_str())]).unwrap_err(),
            load(&[("OPENCOUCH_DATABASE_URI", db.as_str())]).unwrap_err(),
            load(&[
                ("OPENCOUCH_DATABASE_URL", db.as_str()),
                ("OPENCOUCH_MODE", "turbo"),
            ])
            .unwrap_err(),
        ];
        for file in [&wrong_type, &wrong_db, &unparsable] {
            errors.push(Settings::load_from(Some(file), &Overrides::default(), &[]).unwrap_err());
        }
        for e in &errors {
            leaks("error", &e.to_string());
            leaks("error Debug", &format!("{e:?}"));
        }
        // The numeric key got through as the string it is.
        let s = load(&[("OPENCOUCH_API_KEY", numeric)]).unwrap();
        assert_eq!(s.api_key.unwrap().expose(), numeric);
        let type_error = errors[3].to_string();
        assert!(!type_error.contains("12345678901234567"), "{type_error}");
        assert!(type_error.contains("api_key"), "{type_error}");
        assert!(errors[5].to_string().contains("line 1"), "{}", errors[5]);
    }

    #[test]
    fn trace_export_is_off_by_default_and_follows_the_standard_variables() {
        let s = load(&[]).unwrap();
        assert_eq!(s.trace_url(), None);
        let s = load(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318/")]).unwrap();
        assert_eq!(
            s.trace_url().as_deref(),
            Some("http://127.0.0.1:4318/v1/traces")
        );
        let s = load(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://a:4318"),
            (
                "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
                "http://b:9999/custom/path",
            ),
            (
                "OTEL_EXPORTER_OTLP_HEADERS",
                "Authorization=Basic%20abc,x-team=care",
            ),
            ("OTEL_SERVICE_NAME", "couch-prod"),
            ("OTEL_TRACES_SAMPLER_ARG", "0.25"),
        ])
        .unwrap();
        assert_eq!(s.trace_url().as_deref(), Some("http://b:9999/custom/path"));
        assert_eq!(
            s.trace_header_pairs(),
            vec![
                ("Authorization".to_owned(), "Basic abc".to_owned()),
                ("x-team".to_owned(), "care".to_owned())
            ]
        );
        assert_eq!(s.trace_service_name, "couch-prod");
        assert!((s.trace_sample_ratio - 0.25).abs() < 1e-9);
        // Header values are secrets: not in Debug, names only in `config`.
        let debug = format!("{s:?}");
        assert!(!debug.contains("Basic"), "{debug}");
        let rows = s.display_rows();
        let headers = rows.iter().find(|(k, _)| *k == "trace_headers").unwrap();
        assert_eq!(headers.1, "Authorization=****,x-team=****");
    }

    #[test]
    fn opik_variables_point_export_at_opik() {
        let s = load(&[
            ("OPIK_API_KEY", "opik-key-123"),
            ("OPIK_WORKSPACE", "care-team"),
            ("OPIK_PROJECT_NAME", "couch"),
        ])
        .unwrap();
        assert_eq!(
            s.trace_url().as_deref(),
            Some("https://www.comet.com/opik/api/v1/private/otel/v1/traces")
        );
        assert_eq!(
            s.trace_header_pairs(),
            vec![
                ("Authorization".to_owned(), "opik-key-123".to_owned()),
                ("Comet-Workspace".to_owned(), "care-team".to_owned()),
                ("projectName".to_owned(), "couch".to_owned()),
            ]
        );
        // A self-hosted Opik: the endpoint given wins.
        let s = load(&[
            ("OPIK_API_KEY", "k"),
            (
                "OTEL_EXPORTER_OTLP_ENDPOINT",
                "http://localhost:5173/api/v1/private/otel",
            ),
        ])
        .unwrap();
        assert_eq!(
            s.trace_url().as_deref(),
            Some("http://localhost:5173/api/v1/private/otel/v1/traces")
        );
    }

    #[test]
    fn the_config_file_trace_table_and_bad_trace_values() {
        let dir = tempfile_dir("trace");
        let file = dir.join("c.toml");
        std::fs::write(
            &file,
            "mode = \"deterministic\"\n[trace]\nendpoint = \"http://collector:4318\"\nsample_ratio = 0.5\ncapture_content = true\n",
        )
        .unwrap();
        let s = Settings::load_from(Some(&file), &Overrides::default(), &[])
            .unwrap()
            .settings;
        assert_eq!(s.mode, RuntimeMode::Deterministic);
        assert_eq!(
            s.trace_url().as_deref(),
            Some("http://collector:4318/v1/traces")
        );
        assert!((s.trace_sample_ratio - 0.5).abs() < 1e-9);
        assert!(s.trace_capture_content);
        std::fs::write(&file, "[trace]\nsample_ratio = 1\n").unwrap();
        let s = Settings::load_from(Some(&file), &Overrides::default(), &[])
            .unwrap()
            .settings;
        assert!((s.trace_sample_ratio - 1.0).abs() < 1e-9);

        for (vars, key) in [
            (vec![("OTEL_TRACES_SAMPLER_ARG", "2")], "trace_sample_ratio"),
            (
                vec![("OTEL_EXPORTER_OTLP_ENDPOINT", "collector:4318")],
                "trace_endpoint",
            ),
            (
                vec![("OTEL_EXPORTER_OTLP_HEADERS", "no-equals-sign")],
                "trace_headers",
            ),
            (
                vec![("OPENCOUCH_TRACE_QUEUE_SIZE", "0")],
                "trace_queue_size",
            ),
        ] {
            let err = load(&vars).unwrap_err().to_string();
            assert!(err.contains(key), "{err}");
        }
        let err = load(&[("OTEL_EXPORTER_OTLP_HEADERS", "Authorization")])
            .unwrap_err()
            .to_string();
        assert!(!err.contains("Authorization"), "{err}");
    }

    fn tempfile_dir(tag: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("oc-cfg-{tag}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }
}
