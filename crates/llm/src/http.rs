//! Shared HTTP plumbing: key check, bearer auth, per-attempt timeout and the
//! retry policy (connection errors, 429 and 5xx; never other 4xx or timeouts).

use std::future::Future;
use std::time::{Duration, Instant, SystemTime};

use bytes::Bytes;
use reqwest::header::HeaderMap;
use serde_json::Value;

use crate::LlmError;

/// Retry policy: at most `max_attempts` attempts in total; waits grow
/// exponentially from `backoff_base`, a server's `Retry-After` replaces the
/// computed wait, and every wait is capped at `max_backoff`. The wait
/// actually slept is jittered ([`RetryPolicy::jittered`]) so clients that
/// failed together do not retry together.
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
    /// The longest wait after failed attempt number `attempt` (1-based):
    /// the server's hint or the exponential backoff, capped.
    pub fn delay(&self, attempt: u32, retry_after: Option<Duration>) -> Duration {
        let exp = self
            .backoff_base
            .saturating_mul(2_u32.saturating_pow(attempt.saturating_sub(1)));
        retry_after.unwrap_or(exp).min(self.max_backoff)
    }

    /// The wait with jitter, for `unit` in `[0, 1]` (a random draw; clamped,
    /// NaN counts as 0). A computed backoff `d` becomes `d/2 + unit·d/2`
    /// ("equal jitter": never less than half); a server's hint `h` is never
    /// shortened and gets up to 10 % more, still capped at `max_backoff`.
    pub fn jittered(&self, attempt: u32, retry_after: Option<Duration>, unit: f64) -> Duration {
        let unit = if unit.is_nan() {
            0.0
        } else {
            unit.clamp(0.0, 1.0)
        };
        let d = self.delay(attempt, retry_after);
        match retry_after {
            Some(_) => (d + d.mul_f64(0.1 * unit)).min(self.max_backoff),
            None => d / 2 + (d / 2).mul_f64(unit),
        }
    }
}

/// The longest `Retry-After` honoured; longer hints (and far-future dates)
/// count as this. The retry policy's `max_backoff` caps it further.
pub const MAX_RETRY_AFTER: Duration = Duration::from_secs(60);

/// Reads `retry-after-ms` or `retry-after`: seconds (possibly fractional)
/// or an HTTP date (a past date means "now"). Values are capped at
/// [`MAX_RETRY_AFTER`]; negative, NaN, infinite and unparsable values are
/// ignored. Never panics, whatever the server sends.
pub(crate) fn retry_after(headers: &HeaderMap) -> Option<Duration> {
    retry_after_at(headers, SystemTime::now())
}

fn retry_after_at(headers: &HeaderMap, now: SystemTime) -> Option<Duration> {
    let text = |name: &str| Some(headers.get(name)?.to_str().ok()?.trim());
    if let Some(ms) = text("retry-after-ms").and_then(seconds) {
        return Some(capped(ms / 1000.0));
    }
    let value = text("retry-after")?;
    if let Some(secs) = seconds(value) {
        return Some(capped(secs));
    }
    let at = httpdate::parse_http_date(value).ok()?;
    Some(
        at.duration_since(now)
            .unwrap_or(Duration::ZERO)
            .min(MAX_RETRY_AFTER),
    )
}

/// A finite, non-negative number.
fn seconds(value: &str) -> Option<f64> {
    value
        .parse::<f64>()
        .ok()
        .filter(|v| v.is_finite() && *v >= 0.0)
}

/// `secs` (finite, non-negative) as a duration of at most [`MAX_RETRY_AFTER`]:
/// the cap is applied before the conversion, which panics on huge values.
fn capped(secs: f64) -> Duration {
    Duration::from_secs_f64(secs.min(MAX_RETRY_AFTER.as_secs_f64()))
}

/// The [`HttpCore`] of a client configuration (`LlmConfig` or
/// `EmbeddingsConfig`: both name their connection fields alike), or the
/// configuration error of [`HttpCore::new`].
macro_rules! http_core_for {
    ($config:expr) => {{
        let config = $config;
        $crate::http::HttpCore::new(
            &config.base_url,
            config.api_key.clone(),
            config.require_key,
            config.timeout,
            $crate::http::RetryPolicy {
                max_attempts: config.max_attempts,
                backoff_base: config.backoff_base,
                max_backoff: config.max_backoff,
            },
            config.max_response_bytes,
        )
    }};
}
pub(crate) use http_core_for;

/// A configured HTTP endpoint family (one base URL, one key).
#[derive(Clone)]
pub(crate) struct HttpCore {
    client: reqwest::Client,
    base_url: String,
    api_key: Option<String>,
    require_key: bool,
    pub(crate) timeout: Duration,
    retry: RetryPolicy,
    max_body: usize,
}

impl HttpCore {
    pub(crate) fn new(
        base_url: &str,
        api_key: Option<String>,
        require_key: bool,
        timeout: Duration,
        retry: RetryPolicy,
        max_body: usize,
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
            max_body,
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

    /// One `GET {base}/{path}` with the key when one is set, no retries and
    /// no body read: the status the server answers (a reachability check).
    pub(crate) async fn get_status(&self, path: &str, timeout: Duration) -> Result<u16, LlmError> {
        let url = format!("{}/{}", self.base_url, path.trim_start_matches('/'));
        let mut rb = self.client.get(url).timeout(timeout);
        if let Some(key) = &self.api_key {
            rb = rb.bearer_auth(key);
        }
        match rb.send().await {
            Ok(resp) => Ok(resp.status().as_u16()),
            Err(e) if e.is_timeout() => Err(LlmError::Timeout { after: timeout }),
            Err(e) => Err(LlmError::Connection {
                detail: if e.is_connect() {
                    "cannot connect".to_owned()
                } else {
                    "the request failed".to_owned()
                },
            }),
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
            tokio::time::sleep(self.retry.jittered(n, hint, fastrand::f64())).await;
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
                read_capped(resp, self.max_body, timeout).await
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

/// Reads a whole response body of at most `max` bytes; a longer one fails
/// as soon as it is known to be longer (its `Content-Length`, or the bytes
/// read so far), without reading the rest.
async fn read_capped(
    mut resp: reqwest::Response,
    max: usize,
    timeout: Duration,
) -> Result<Vec<u8>, LlmError> {
    let too_large = || LlmError::BadResponse {
        reason: format!("response body larger than {max} bytes"),
    };
    let announced = resp.content_length().unwrap_or(0);
    if announced > max as u64 {
        return Err(too_large());
    }
    let mut body = Vec::with_capacity(usize::try_from(announced).unwrap_or(0));
    while let Some(chunk) = resp
        .chunk()
        .await
        .map_err(|e| LlmError::from_reqwest(&e, timeout))?
    {
        if body.len() + chunk.len() > max {
            return Err(too_large());
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
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

    #[test]
    fn jitter_stays_within_half_and_full_and_never_shortens_a_hint() {
        let p = RetryPolicy {
            max_attempts: 3,
            backoff_base: Duration::from_millis(100),
            max_backoff: Duration::from_millis(1000),
        };
        let ms = Duration::from_millis;
        let cases = [
            (2, None, 0.0, 100),
            (2, None, 0.5, 150),
            (2, None, 1.0, 200),
            (9, None, 0.0, 500),
            (9, None, 1.0, 1000),
            (1, Some(ms(500)), 0.0, 500),
            (1, Some(ms(500)), 1.0, 550),
            (1, Some(ms(950)), 1.0, 1000),
            (1, Some(ms(5000)), 0.7, 1000),
            (1, Some(Duration::ZERO), 1.0, 0),
            // Out-of-range draws are clamped, NaN counts as 0.
            (2, None, -3.0, 100),
            (2, None, 7.0, 200),
            (2, None, f64::NAN, 100),
            (1, Some(ms(500)), f64::INFINITY, 550),
        ];
        for (attempt, hint, unit, want_ms) in cases {
            assert_eq!(
                p.jittered(attempt, hint, unit),
                ms(want_ms),
                "attempt {attempt} hint {hint:?} unit {unit}"
            );
        }
        for _ in 0..1000 {
            let d = p.jittered(3, None, fastrand::f64());
            assert!(d >= ms(200) && d <= ms(400), "{d:?}");
        }
    }

    type HeaderCase = (&'static [(&'static str, &'static str)], Option<u64>);

    #[test]
    fn retry_after_headers() {
        // 2015-10-21 07:28:00 UTC.
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_445_412_480);
        let cases: [HeaderCase; 20] = [
            (&[("retry-after", "2")], Some(2000)),
            (&[("retry-after", "0.5")], Some(500)),
            (&[("retry-after", " 3 ")], Some(3000)),
            (
                &[("retry-after-ms", "150"), ("retry-after", "9")],
                Some(150),
            ),
            // Huge values are capped, never passed on (a panic before).
            (&[("retry-after", "1e20")], Some(60_000)),
            (&[("retry-after", "1e308")], Some(60_000)),
            (&[("retry-after", "99999999999999999999999")], Some(60_000)),
            (&[("retry-after-ms", "1e20")], Some(60_000)),
            (&[("retry-after", "61")], Some(60_000)),
            // Infinite, NaN, negative and junk values are ignored.
            (&[("retry-after", "inf")], None),
            (&[("retry-after", "-inf")], None),
            (&[("retry-after", "NaN")], None),
            (&[("retry-after", "-1")], None),
            (
                &[("retry-after-ms", "-5"), ("retry-after", "4")],
                Some(4000),
            ),
            (&[("retry-after", "soon")], None),
            // HTTP dates: relative to now; past is 0, far future is capped.
            (
                &[("retry-after", "Wed, 21 Oct 2015 07:28:30 GMT")],
                Some(30_000),
            ),
            (&[("retry-after", "Wed, 21 Oct 2015 07:27:00 GMT")], Some(0)),
            (&[("retry-after", "Thu, 01 Jan 1970 00:00:00 GMT")], Some(0)),
            (
                &[("retry-after", "Fri, 31 Dec 9999 23:59:59 GMT")],
                Some(60_000),
            ),
            (&[], None),
        ];
        for (headers, want) in cases {
            let mut map = HeaderMap::new();
            for (k, v) in headers {
                map.insert(*k, HeaderValue::from_static(v));
            }
            assert_eq!(
                retry_after_at(&map, now),
                want.map(Duration::from_millis),
                "{headers:?}"
            );
        }
        // Bytes that are not text are ignored too.
        let mut map = HeaderMap::new();
        map.insert("retry-after", HeaderValue::from_bytes(b"\xff\xfe").unwrap());
        assert_eq!(retry_after(&map), None);
    }

    #[test]
    fn rejects_bad_base_urls() {
        let retry = RetryPolicy {
            max_attempts: 2,
            backoff_base: Duration::ZERO,
            max_backoff: Duration::ZERO,
        };
        for url in ["not a url", "ftp://example.com/v1", ""] {
            let r = HttpCore::new(url, None, false, Duration::from_secs(1), retry, 1024);
            assert!(matches!(r, Err(LlmError::Config(_))), "{url}");
        }
    }
}
