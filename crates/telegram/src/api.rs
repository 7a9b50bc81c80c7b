//! A thin Telegram Bot API client over reqwest: one `POST` per method with
//! a JSON body (a hand-built `multipart/form-data` body for
//! `sendDocument`), the `{"ok", "result"}` envelope, and the retry policy.
//!
//! The token is part of every request URL (`/bot<TOKEN>/<method>`), so no
//! error, log line or `Debug` output of this module carries a URL: reqwest
//! errors are stripped of theirs ([`reqwest::Error::without_url`]).
//!
//! Retries ([`BotApi::call`]): a 429 waits the `retry_after` Telegram
//! names (at most [`MAX_RETRY_AFTER`]); connection errors, timeouts and 5xx
//! answers wait with exponential backoff (0.5 s doubling, at most 30 s);
//! other errors (400, 403, …) are not retried.

use std::time::Duration;

use serde_json::{Value, json};
use tracing::Instrument as _;

/// The longest `retry_after` honoured; a larger one is capped.
pub const MAX_RETRY_AFTER: Duration = Duration::from_secs(300);

/// Attempts of one call before its error is returned (callers that must
/// deliver, such as the per-chat worker, retry the whole step again).
pub const MAX_ATTEMPTS: u32 = 5;

/// Timeout of a call that is not a long poll.
const CALL_TIMEOUT: Duration = Duration::from_secs(30);

/// Why a Bot API call failed.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// 429: wait this long before the next call.
    #[error("Telegram asked to wait {0} s before the next request")]
    RetryAfter(u64),
    /// Telegram refused the call.
    #[error("Telegram answered {status}: {description}")]
    Api {
        /// The HTTP status (or `error_code`).
        status: u16,
        /// Telegram's description.
        description: String,
    },
    /// The request did not get an answer (connection, timeout).
    #[error("could not reach the Telegram Bot API: {0}")]
    Network(String),
    /// The answer was not the Bot API's envelope.
    #[error("the Telegram Bot API's answer could not be read")]
    BadResponse,
}

impl ApiError {
    /// Whether trying again later can succeed.
    pub fn retryable(&self) -> bool {
        match self {
            ApiError::RetryAfter(_) | ApiError::Network(_) => true,
            ApiError::Api { status, .. } => *status >= 500,
            ApiError::BadResponse => true,
        }
    }

    /// Whether Telegram refused the message's markup or links (a 400).
    pub fn is_bad_request(&self) -> bool {
        matches!(self, ApiError::Api { status: 400, .. })
    }
}

/// The wait before attempt `attempt + 1` after a network error or a 5xx.
pub fn backoff(attempt: u32) -> Duration {
    let ms = 500u64.saturating_mul(1u64 << attempt.min(10));
    Duration::from_millis(ms.min(30_000))
}

/// Puts a call's outcome on its span: the status Telegram answered, or an
/// error status when it did not answer.
fn record_status<T>(span: &tracing::Span, result: &Result<T, ApiError>) {
    if span.is_none() {
        return;
    }
    let status = match result {
        Ok(_) => Some(200),
        Err(ApiError::RetryAfter(_)) => Some(429),
        Err(ApiError::Api { status, .. }) => Some(*status),
        Err(ApiError::Network(_) | ApiError::BadResponse) => None,
    };
    if let Some(s) = status {
        span.record("http.response.status_code", i64::from(s));
    }
    if result.is_err() {
        span.record("otel.status_code", "ERROR");
    }
}

/// A Bot API client for one bot.
#[derive(Clone)]
pub struct BotApi {
    http: reqwest::Client,
    /// `{api_url}/bot{token}`: holds the token, never shown.
    base: String,
}

impl std::fmt::Debug for BotApi {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("BotApi(****)")
    }
}

impl BotApi {
    /// A client for the bot with `token` at `api_url`
    /// (`https://api.telegram.org`, a self-hosted Bot API server, a fake).
    ///
    /// # Errors
    /// The HTTP client could not be built (TLS set-up).
    pub fn new(api_url: &str, token: &str) -> Result<BotApi, ApiError> {
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(10))
            .build()
            .map_err(|e| ApiError::Network(e.without_url().to_string()))?;
        Ok(BotApi {
            http,
            base: format!("{}/bot{}", api_url.trim_end_matches('/'), token),
        })
    }

    /// One attempt of `method` with JSON `params`, waiting up to `timeout`.
    ///
    /// # Errors
    /// See [`ApiError`].
    pub async fn call_once(
        &self,
        method: &str,
        params: &Value,
        timeout: Duration,
    ) -> Result<Value, ApiError> {
        let req = self
            .http
            .post(format!("{}/{method}", self.base))
            .timeout(timeout)
            .json(params);
        let span = crate::spans::api_call(method);
        let result = async { envelope(req.send().await).await }
            .instrument(span.clone())
            .await;
        record_status(&span, &result);
        result
    }

    /// `method` with retries (see the module documentation).
    ///
    /// # Errors
    /// The last attempt's error, or the first one that is not retried.
    pub async fn call(&self, method: &str, params: &Value) -> Result<Value, ApiError> {
        let mut attempt = 0;
        loop {
            match self.call_once(method, params, CALL_TIMEOUT).await {
                Ok(v) => return Ok(v),
                Err(e) if e.retryable() && attempt + 1 < MAX_ATTEMPTS => {
                    let wait = match &e {
                        ApiError::RetryAfter(s) => Duration::from_secs(*s).min(MAX_RETRY_AFTER),
                        _ => backoff(attempt),
                    };
                    tracing::warn!(method, error = %e, wait_ms = wait.as_millis() as u64, "Telegram call failed; retrying");
                    tokio::time::sleep(wait).await;
                    attempt += 1;
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// `getMe`.
    ///
    /// # Errors
    /// See [`ApiError`].
    pub async fn get_me(&self) -> Result<Value, ApiError> {
        self.call("getMe", &json!({})).await
    }

    /// One `getUpdates` long poll (no retries: the polling loop decides).
    ///
    /// # Errors
    /// See [`ApiError`].
    pub async fn get_updates(
        &self,
        offset: Option<i64>,
        timeout: Duration,
    ) -> Result<Vec<Value>, ApiError> {
        let mut params = json!({
            "timeout": timeout.as_secs(),
            "limit": 100,
            "allowed_updates": ["message", "edited_message", "callback_query"],
        });
        if let Some(o) = offset {
            params["offset"] = json!(o);
        }
        let v = self
            .call_once("getUpdates", &params, timeout + Duration::from_secs(10))
            .await?;
        match v {
            Value::Array(items) => Ok(items),
            _ => Err(ApiError::BadResponse),
        }
    }

    /// `sendMessage` with `parse_mode` HTML (link previews off); the sent
    /// message's id.
    ///
    /// # Errors
    /// See [`ApiError`].
    pub async fn send_html(
        &self,
        chat: i64,
        html: &str,
        keyboard: Option<&Value>,
    ) -> Result<i64, ApiError> {
        let mut params = json!({
            "chat_id": chat,
            "text": html,
            "parse_mode": "HTML",
            "link_preview_options": {"is_disabled": true},
        });
        if let Some(k) = keyboard {
            params["reply_markup"] = json!({"inline_keyboard": k});
        }
        let v = self.call("sendMessage", &params).await?;
        Ok(v["message_id"].as_i64().unwrap_or_default())
    }

    /// `sendMessage` as plain text (no markup).
    ///
    /// # Errors
    /// See [`ApiError`].
    pub async fn send_plain(&self, chat: i64, text: &str) -> Result<i64, ApiError> {
        let v = self
            .call(
                "sendMessage",
                &json!({"chat_id": chat, "text": text, "link_preview_options": {"is_disabled": true}}),
            )
            .await?;
        Ok(v["message_id"].as_i64().unwrap_or_default())
    }

    /// `sendChatAction` typing, one attempt (a lost indicator is harmless).
    ///
    /// # Errors
    /// See [`ApiError`].
    pub async fn typing(&self, chat: i64) -> Result<(), ApiError> {
        self.call_once(
            "sendChatAction",
            &json!({"chat_id": chat, "action": "typing"}),
            Duration::from_secs(10),
        )
        .await
        .map(|_| ())
    }

    /// `answerCallbackQuery`.
    ///
    /// # Errors
    /// See [`ApiError`].
    pub async fn answer_callback(&self, id: &str, text: Option<&str>) -> Result<(), ApiError> {
        let mut params = json!({"callback_query_id": id});
        if let Some(t) = text {
            params["text"] = json!(t);
        }
        self.call("answerCallbackQuery", &params).await.map(|_| ())
    }

    /// Removes the inline keyboard under a message (best effort).
    ///
    /// # Errors
    /// See [`ApiError`].
    pub async fn clear_keyboard(&self, chat: i64, message_id: i64) -> Result<(), ApiError> {
        self.call_once(
            "editMessageReplyMarkup",
            &json!({"chat_id": chat, "message_id": message_id,
                    "reply_markup": {"inline_keyboard": []}}),
            CALL_TIMEOUT,
        )
        .await
        .map(|_| ())
    }

    /// `setMyCommands` with (command, description) pairs.
    ///
    /// # Errors
    /// See [`ApiError`].
    pub async fn set_my_commands(&self, commands: &[(&str, &str)]) -> Result<(), ApiError> {
        let list: Vec<Value> = commands
            .iter()
            .map(|(c, d)| json!({"command": c, "description": d}))
            .collect();
        self.call("setMyCommands", &json!({"commands": list}))
            .await
            .map(|_| ())
    }

    /// `setWebhook` with the secret Telegram sends back on every request.
    ///
    /// # Errors
    /// See [`ApiError`].
    pub async fn set_webhook(&self, url: &str, secret: &str) -> Result<(), ApiError> {
        self.call(
            "setWebhook",
            &json!({
                "url": url,
                "secret_token": secret,
                "allowed_updates": ["message", "edited_message", "callback_query"],
                "drop_pending_updates": false,
            }),
        )
        .await
        .map(|_| ())
    }

    /// `deleteWebhook` (long polling needs none set); pending updates kept.
    ///
    /// # Errors
    /// See [`ApiError`].
    pub async fn delete_webhook(&self) -> Result<(), ApiError> {
        self.call("deleteWebhook", &json!({"drop_pending_updates": false}))
            .await
            .map(|_| ())
    }

    /// `sendDocument`: `bytes` as a file named `filename`, with a caption.
    ///
    /// # Errors
    /// See [`ApiError`].
    pub async fn send_document(
        &self,
        chat: i64,
        filename: &str,
        media_type: &str,
        bytes: &[u8],
        caption: &str,
    ) -> Result<(), ApiError> {
        let boundary = format!(
            "opencouch-{:x}",
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos())
                .unwrap_or(0)
        );
        let body = multipart(&boundary, chat, filename, media_type, bytes, caption);
        let mut attempt = 0;
        loop {
            let req = self
                .http
                .post(format!("{}/sendDocument", self.base))
                .timeout(Duration::from_secs(60))
                .header(
                    reqwest::header::CONTENT_TYPE,
                    format!("multipart/form-data; boundary={boundary}"),
                )
                .body(body.clone());
            let span = crate::spans::api_call("sendDocument");
            let result = async { envelope(req.send().await).await }
                .instrument(span.clone())
                .await;
            record_status(&span, &result);
            match result {
                Ok(_) => return Ok(()),
                Err(e) if e.retryable() && attempt + 1 < MAX_ATTEMPTS => {
                    let wait = match &e {
                        ApiError::RetryAfter(s) => Duration::from_secs(*s).min(MAX_RETRY_AFTER),
                        _ => backoff(attempt),
                    };
                    tokio::time::sleep(wait).await;
                    attempt += 1;
                }
                Err(e) => return Err(e),
            }
        }
    }
}

/// A `multipart/form-data` body with `chat_id`, `caption` and `document`.
fn multipart(
    boundary: &str,
    chat: i64,
    filename: &str,
    media_type: &str,
    bytes: &[u8],
    caption: &str,
) -> Vec<u8> {
    let safe_name: String = filename
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || "-_.".contains(*c))
        .collect();
    let mut body = Vec::with_capacity(bytes.len() + 512);
    for (name, value) in [
        ("chat_id", chat.to_string()),
        ("caption", caption.to_owned()),
    ] {
        body.extend_from_slice(
            format!(
                "--{boundary}\r\nContent-Disposition: form-data; name=\"{name}\"\r\n\r\n{value}\r\n"
            )
            .as_bytes(),
        );
    }
    body.extend_from_slice(
        format!(
            "--{boundary}\r\nContent-Disposition: form-data; name=\"document\"; filename=\"{safe_name}\"\r\nContent-Type: {media_type}\r\n\r\n"
        )
        .as_bytes(),
    );
    body.extend_from_slice(bytes);
    body.extend_from_slice(format!("\r\n--{boundary}--\r\n").as_bytes());
    body
}

/// Reads the Bot API envelope of an answer.
async fn envelope(sent: Result<reqwest::Response, reqwest::Error>) -> Result<Value, ApiError> {
    let resp = sent.map_err(|e| ApiError::Network(e.without_url().to_string()))?;
    let status = resp.status().as_u16();
    let body: Value = match resp.json().await {
        Ok(v) => v,
        Err(_) if status >= 500 => {
            return Err(ApiError::Api {
                status,
                description: "server error".into(),
            });
        }
        Err(_) => return Err(ApiError::BadResponse),
    };
    if body["ok"].as_bool() == Some(true) {
        return Ok(body["result"].clone());
    }
    if let Some(wait) = body["parameters"]["retry_after"].as_u64() {
        return Err(ApiError::RetryAfter(wait));
    }
    let status = body["error_code"]
        .as_u64()
        .and_then(|c| u16::try_from(c).ok())
        .unwrap_or(status);
    let description: String = body["description"]
        .as_str()
        .unwrap_or("no description")
        .chars()
        .take(200)
        .collect();
    Err(ApiError::Api {
        status,
        description,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_to_a_cap() {
        assert_eq!(backoff(0), Duration::from_millis(500));
        assert_eq!(backoff(1), Duration::from_secs(1));
        assert_eq!(backoff(3), Duration::from_secs(4));
        assert_eq!(backoff(20), Duration::from_secs(30));
    }

    #[test]
    fn which_errors_are_retried() {
        assert!(ApiError::RetryAfter(3).retryable());
        assert!(ApiError::Network("x".into()).retryable());
        let api = |status| ApiError::Api {
            status,
            description: String::new(),
        };
        assert!(api(502).retryable());
        assert!(!api(400).retryable() && api(400).is_bad_request());
        assert!(!api(403).retryable());
    }

    #[test]
    fn the_debug_form_hides_the_token() {
        let api = BotApi::new("http://127.0.0.1:1", "123:SECRETTOKEN").unwrap();
        assert!(!format!("{api:?}").contains("SECRET"));
    }
}
