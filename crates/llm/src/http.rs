//! Shared HTTP plumbing: key check, bearer auth, per-attempt timeout and the
//! retry policy (connection errors, 429 and 5xx; never other 4xx or timeouts).

use std::future::Future;
use std::time::{Duration, Instant};

use bytes::Bytes;
use reqwest::header::HeaderMap;
use serde_json::Value;

use crate::LlmError;

/// Retry policy: at most `max_attempts` attempts in total; waits grow
/// exponentially from `backoff_base`, a server's `Retry-After` replaces the
/// computed wait, and every wait is capped at `max_backoff`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Attempts in total (at least 1).
    pub max_attempts: u32,
    /// Wait after the first failed attempt.
    pub backoff_base: Duration,
    /// Cap on any wait.
    pub max_backoff: Duration,
}

impl RetryPolicy {
    /// Wait after failed attempt number `attempt` (1-based).
    pub fn delay(&self, attempt: u32, retry_after: Option<Duration>) -> Duration {
        let exp = self
            .backoff_base
            .saturating_mul(2_u32.saturating_pow(attempt.saturating_sub(1)));
        retry_after.unwrap_or(exp).min(self.max_backoff)
    }
}

/// Reads `retry-after-ms` or `retry-after` (seconds, possibly fractional).
/// HTTP-date values are ignored.
pub(crate) fn retry_after(headers: &HeaderMap) -> Option<Duration> {
    let num = |name: &str| {
        headers
            .get(name)?
            .to_str()
            .ok()?
            .trim()
            .parse::<f64>()
            .ok()
            .filter(|v| v.is_finite() && *v >= 0.0)
    };
    if let Some(ms) = num("retry-after-ms") {
        return Some(Duration::from_secs_f64(ms / 1000.0));
    }
    num("retry-after").map(Duration::from_secs_f64)
}

/// A configured HTTP endpoint family (one base URL, one key).
#[derive(Clone)]
pub(crate) struct HttpCore {
    client: reqwest::Client,
    base_url: String,
    api_key: Option<String>,
    require_key: bool,
    pub(crate) timeout: Duration,
    retry: RetryPolicy,
}

impl HttpCore {
    pub(crate) fn new(
        base_url: &str,
        api_key: Option<String>,
        require_key: bool,
        timeout: Duration,
        retry: RetryPolicy,
    ) -> Result<HttpCore, LlmError> {
        let parsed = reqwest::Url::parse(base_url)
            .map_err(|_| LlmError::Config("base URL is not a valid absolute URL".to_owned()))?;
        if !matches!(parsed.scheme(), "http" | "https") {
            return Err(LlmError::Config(
                "base URL must use http or https".to_owned(),
            ));
        }
        let loopback = matches!(
            parsed.host_str(),
            Some("localhost" | "127.0.0.1" | "[::1]" | "::1")
        );
        let mut builder = reqwest::Client::builder().connect_timeout(timeout);
        if loopback {
            // A local model server must not be routed through a system HTTP proxy.
            builder = builder.no_proxy();
        }
        let client = builder
            .build()
            .map_err(|_| LlmError::Config("HTTP client could not be built".to_owned()))?;
        let api_key = api_key.filter(|k| !k.trim().is_empty());
        Ok(HttpCore {
            client,
            base_url: base_url.trim_end_matches('/').to_owned(),
            api_key,
            require_key,
            timeout,
            retry: RetryPolicy {
                max_attempts: retry.max_attempts.max(1),
                ..retry
            },
        })
    }

    /// Fails fast (no request) when a key is required but missing.
    pub(crate) fn check_key(&self) -> Result<(), LlmError> {
        if self.require_key && self.api_key.is_none() {
            Err(LlmError::MissingApiKey)
        } else {
            Ok(())
        }
    }

    fn request(&self, path: &str, body: &Bytes, sse: bool) -> reqwest::RequestBuilder {
        let url = format!("{}/{}", self.base_url, path.trim_start_matches('/'));
        let mut rb = self
            .client
            .post(url)
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .body(body.clone());
        if let Some(key) = &self.api_key {
            rb = rb.bearer_auth(key);
        }
        if sse {
            rb = rb.header(reqwest::header::ACCEPT, "text/event-stream");
        }
        rb
    }

    /// Runs `attempt` under the retry policy.
    async fn with_retry<T, F, Fut>(&self, path: &str, mut attempt: F) -> Result<T, LlmError>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, LlmError>>,
    {
        self.check_key()?;
        let mut n = 1;
        loop {
            let started = Instant::now();
            let err = match attempt().await {
                Ok(v) => {
                    tracing::debug!(
                        path,
                        attempt = n,
                        elapsed_ms = started.elapsed().as_millis() as u64,
                        "model call ok"
                    );
                    return Ok(v);
                }
                Err(e) => e,
            };
            tracing::warn!(
                path,
                attempt = n,
                error = err.kind(),
                elapsed_ms = started.elapsed().as_millis() as u64,
                "model call failed"
            );
            if !err.is_retryable() || n >= self.retry.max_attempts {
                return Err(err);
            }
            let hint = match &err {
                LlmError::RateLimited { retry_after } => *retry_after,
                _ => None,
            };
            tokio::time::sleep(self.retry.delay(n, hint)).await;
            n += 1;
        }
    }

    /// Maps a non-success status to a typed error (the body is not read: it may echo content).
    fn status_error(resp: &reqwest::Response) -> LlmError {
        let status = resp.status().as_u16();
        if status == 429 {
            LlmError::RateLimited {
                retry_after: retry_after(resp.headers()),
            }
        } else {
            LlmError::Http { status }
        }
    }

    /// POSTs `body` as JSON and returns the whole successful response body.
    pub(crate) async fn post_json(&self, path: &str, body: &Value) -> Result<Vec<u8>, LlmError> {
        self.post_bytes(path, encode(body)?).await
    }

    /// POSTs `body` (already encoded JSON) and returns the whole successful
    /// response body.
    pub(crate) async fn post_bytes(&self, path: &str, body: Vec<u8>) -> Result<Vec<u8>, LlmError> {
        let body = &Bytes::from(body);
        let timeout = self.timeout;
        self.with_retry(path, || async move {
            let work = async {
                let resp = self
                    .request(path, body, false)
                    .send()
                    .await
                    .map_err(|e| LlmError::from_reqwest(&e, timeout))?;
                if !resp.status().is_success() {
                    return Err(HttpCore::status_error(&resp));
                }
                let bytes = resp
                    .bytes()
                    .await
                    .map_err(|e| LlmError::from_reqwest(&e, timeout))?;
                Ok(bytes.to_vec())
            };
            tokio::time::timeout(timeout, work)
                .await
                .unwrap_or(Err(LlmError::Timeout { after: timeout }))
        })
        .await
    }

    /// POSTs `body` asking for SSE; returns the successful response once its
    /// headers arrived (the body is read by the caller).
    pub(crate) async fn post_stream(
        &self,
        path: &str,
        body: Vec<u8>,
    ) -> Result<reqwest::Response, LlmError> {
        let body = &Bytes::from(body);
        let timeout = self.timeout;
        self.with_retry(path, || async move {
            let work = async {
                let resp = self
                    .request(path, body, true)
                    .send()
                    .await
                    .map_err(|e| LlmError::from_reqwest(&e, timeout))?;
                if !resp.status().is_success() {
                    return Err(HttpCore::status_error(&resp));
                }
                Ok(resp)
            };
            tokio::time::timeout(timeout, work)
                .await
                .unwrap_or(Err(LlmError::Timeout { after: timeout }))
        })
        .await
    }
}

/// A request body as JSON bytes.
pub(crate) fn encode(body: &impl serde::Serialize) -> Result<Vec<u8>, LlmError> {
    serde_json::to_vec(body).map_err(|e| LlmError::BadResponse {
        reason: format!("the request could not be encoded: {e}"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use reqwest::header::HeaderValue;

    #[test]
    fn backoff_table() {
        let p = RetryPolicy {
            max_attempts: 3,
            backoff_base: Duration::from_millis(100),
            max_backoff: Duration::from_millis(1000),
        };
        let cases = [
            (1, None, 100),
            (2, None, 200),
            (3, None, 400),
            (5, None, 1000),
            (1, Some(Duration::from_millis(700)), 700),
            (1, Some(Duration::from_secs(30)), 1000),
        ];
        for (attempt, hint, want_ms) in cases {
            assert_eq!(
                p.delay(attempt, hint),
                Duration::from_millis(want_ms),
                "attempt {attempt} hint {hint:?}"
            );
        }
    }

    type HeaderCase = (&'static [(&'static str, &'static str)], Option<u64>);

    #[test]
    fn retry_after_headers() {
        let cases: [HeaderCase; 5] = [
            (&[("retry-after", "2")], Some(2000)),
            (&[("retry-after", "0.5")], Some(500)),
            (
                &[("retry-after-ms", "150"), ("retry-after", "9")],
                Some(150),
            ),
            (&[("retry-after", "Wed, 21 Oct 2015 07:28:00 GMT")], None),
            (&[], None),
        ];
        for (headers, want) in cases {
            let mut map = HeaderMap::new();
            for (k, v) in headers {
                map.insert(*k, HeaderValue::from_static(v));
            }
            assert_eq!(
                retry_after(&map),
                want.map(Duration::from_millis),
                "{headers:?}"
            );
        }
    }

    #[test]
    fn rejects_bad_base_urls() {
        let retry = RetryPolicy {
            max_attempts: 2,
            backoff_base: Duration::ZERO,
            max_backoff: Duration::ZERO,
        };
        for url in ["not a url", "ftp://example.com/v1", ""] {
            let r = HttpCore::new(url, None, false, Duration::from_secs(1), retry);
            assert!(matches!(r, Err(LlmError::Config(_))), "{url}");
        }
    }
}
