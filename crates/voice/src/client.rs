//! Minting an ephemeral client secret: `POST {base}/realtime/client_secrets`
//! with the server's key, the GA body and `OpenAI-Safety-Identifier`; the
//! GA answer `{value, expires_at, session}` and the older beta answer
//! `{client_secret: {value, expires_at}, …}` are both read. Only the `ek_`
//! secret leaves this module toward a browser; the server's key never does,
//! and no upstream body is ever quoted in an error.

use std::time::Duration;

use serde_json::Value;
use sha2::{Digest, Sha256};

/// Longest accepted answer body (a session object is a few kilobytes).
const MAX_ANSWER_BYTES: usize = 256 * 1024;

/// A minted secret.
#[derive(Debug, Clone, PartialEq)]
pub struct Minted {
    /// The ephemeral secret (`ek_…`).
    pub value: String,
    /// Unix seconds, when the upstream said.
    pub expires_at: Option<u64>,
    /// The session the upstream echoed, if any.
    pub session: Option<Value>,
}

/// Why minting failed (words for logs; the person sees the route's code).
#[derive(Debug, thiserror::Error)]
pub enum MintError {
    #[error("the Realtime endpoint could not be reached")]
    Unreachable(#[source] reqwest::Error),
    #[error("the Realtime endpoint answered HTTP {0}")]
    Status(u16),
    #[error("the Realtime endpoint's answer has no client secret")]
    BadAnswer,
}

impl MintError {
    /// Whether the upstream refused the server's key (401/403).
    pub fn is_auth(&self) -> bool {
        matches!(self, MintError::Status(401 | 403))
    }
}

/// SHA-256 hex of the owner: the `OpenAI-Safety-Identifier` header (the
/// upstream can act on abuse per person without learning who they are).
pub fn safety_identifier(owner: &str) -> String {
    hex::encode(Sha256::digest(owner.as_bytes()))
}

/// Reads a client-secret answer in the GA or the beta shape.
pub fn parse_answer(v: &Value) -> Option<Minted> {
    let as_secs = |x: &Value| x.as_u64().or_else(|| x.as_f64().map(|f| f as u64));
    if let Some(value) = v.get("value").and_then(Value::as_str) {
        return Some(Minted {
            value: value.to_owned(),
            expires_at: v.get("expires_at").and_then(as_secs),
            session: v.get("session").cloned(),
        });
    }
    let beta = v.get("client_secret")?;
    let value = beta.get("value").and_then(Value::as_str)?;
    let session = match v.get("session") {
        Some(s) => Some(s.clone()),
        None => {
            let mut s = v.clone();
            if let Some(o) = s.as_object_mut() {
                o.remove("client_secret");
            }
            Some(s)
        }
    };
    Some(Minted {
        value: value.to_owned(),
        expires_at: beta.get("expires_at").and_then(as_secs),
        session,
    })
}

/// The HTTP client of the Realtime endpoint.
#[derive(Debug, Clone)]
pub struct RealtimeClient {
    http: reqwest::Client,
}

impl RealtimeClient {
    /// A client with `timeout` per request.
    pub fn new(timeout: Duration) -> Self {
        let http = reqwest::Client::builder()
            .timeout(timeout)
            .build()
            .unwrap_or_default();
        RealtimeClient { http }
    }

    /// Mints a client secret at `{base}/realtime/client_secrets`.
    ///
    /// # Errors
    /// [`MintError`].
    pub async fn mint(
        &self,
        base: &str,
        key: Option<&str>,
        safety_id: &str,
        body: &Value,
    ) -> Result<Minted, MintError> {
        let url = format!("{}/realtime/client_secrets", base.trim_end_matches('/'));
        let mut req = self
            .http
            .post(url)
            .header("OpenAI-Safety-Identifier", safety_id)
            .json(body);
        if let Some(k) = key {
            req = req.bearer_auth(k);
        }
        let resp = req.send().await.map_err(MintError::Unreachable)?;
        let status = resp.status();
        if !status.is_success() {
            return Err(MintError::Status(status.as_u16()));
        }
        let bytes = resp.bytes().await.map_err(MintError::Unreachable)?;
        if bytes.len() > MAX_ANSWER_BYTES {
            return Err(MintError::BadAnswer);
        }
        let v: Value = serde_json::from_slice(&bytes).map_err(|_| MintError::BadAnswer)?;
        parse_answer(&v)
            .filter(|m| !m.value.is_empty())
            .ok_or(MintError::BadAnswer)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn both_answer_shapes_are_read() {
        let ga =
            json!({"value": "ek_1", "expires_at": 1700000600, "session": {"type": "realtime"}});
        let m = parse_answer(&ga).expect("ga");
        assert_eq!(m.value, "ek_1");
        assert_eq!(m.expires_at, Some(1_700_000_600));
        assert_eq!(m.session, Some(json!({"type": "realtime"})));
        let beta = json!({"id": "sess_1", "model": "gpt-realtime",
            "client_secret": {"value": "ek_2", "expires_at": 1700000700}});
        let m = parse_answer(&beta).expect("beta");
        assert_eq!(m.value, "ek_2");
        assert_eq!(m.expires_at, Some(1_700_000_700));
        assert_eq!(
            m.session,
            Some(json!({"id": "sess_1", "model": "gpt-realtime"}))
        );
        assert_eq!(parse_answer(&json!({"error": {"message": "no"}})), None);
    }

    #[test]
    fn the_safety_identifier_is_a_sha256_of_the_owner() {
        let id = safety_identifier("alice");
        assert_eq!(id.len(), 64);
        assert!(!id.contains("alice"));
        assert_eq!(id, safety_identifier("alice"));
        assert_ne!(id, safety_identifier("bob"));
    }
}
