//! The embedded web page and the API reference (Swagger UI): static assets
//! compiled into the binary, served with content types, caching headers and
//! a strict Content-Security-Policy (everything from this origin, nothing
//! from outside).

use std::sync::OnceLock;

use axum::extract::Path;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use sha2::{Digest, Sha256};

use crate::error::ApiError;

/// The vendored `swagger-ui-dist` version (also in `assets/docs.html`).
pub const SWAGGER_UI_VERSION: &str = "5.35.0";

/// The page at `/`.
pub const INDEX_HTML: &str = include_str!("../assets/index.html");
const APP_JS: &str = include_str!("../assets/app.js");
const APP_CSS: &str = include_str!("../assets/app.css");
/// The API reference page at `/api/docs`.
pub const DOCS_HTML: &str = include_str!("../assets/docs.html");
const DOCS_INIT_JS: &str = include_str!("../assets/docs-init.js");
const SWAGGER_JS: &[u8] = include_bytes!("../assets/swagger-ui/swagger-ui-bundle.js");
const SWAGGER_CSS: &[u8] = include_bytes!("../assets/swagger-ui/swagger-ui.css");
const SWAGGER_LICENSE: &[u8] = include_bytes!("../assets/swagger-ui/LICENSE");

/// Every static path served, as (method, path), for docs and tests.
pub const PAGES: &[(&str, &str)] = &[
    ("GET", "/"),
    ("GET", "/assets/app.js"),
    ("GET", "/assets/app.css"),
    ("GET", "/api/docs"),
    ("GET", "/api/docs/init.js"),
    ("GET", "/api/docs/assets/{version}/{file}"),
];

/// The policy of the web page: scripts, styles, images and requests only
/// from this origin; no framing.
pub const PAGE_CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; \
     img-src 'self' data:; connect-src 'self'; form-action 'self'; base-uri 'none'; \
     frame-ancestors 'none'";
/// The policy of the API reference (Swagger UI sets inline styles).
pub const DOCS_CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; \
     img-src 'self' data:; connect-src 'self'; font-src 'self' data:; base-uri 'none'; \
     frame-ancestors 'none'";

const JS: &str = "text/javascript; charset=utf-8";
const CSS: &str = "text/css; charset=utf-8";
const HTML: &str = "text/html; charset=utf-8";

/// A short content hash, used as the ETag of the page assets.
fn etag(bytes: &[u8]) -> String {
    let h = Sha256::digest(bytes);
    format!("\"{}\"", hex::encode(&h[..8]))
}

struct Tags {
    index: String,
    app_js: String,
    app_css: String,
    docs: String,
    docs_init: String,
}

fn tags() -> &'static Tags {
    static TAGS: OnceLock<Tags> = OnceLock::new();
    TAGS.get_or_init(|| Tags {
        index: etag(INDEX_HTML.as_bytes()),
        app_js: etag(APP_JS.as_bytes()),
        app_css: etag(APP_CSS.as_bytes()),
        docs: etag(DOCS_HTML.as_bytes()),
        docs_init: etag(DOCS_INIT_JS.as_bytes()),
    })
}

/// A response that the browser revalidates on every use (ETag, 304).
fn revalidated(
    req: &HeaderMap,
    tag: &str,
    content_type: &'static str,
    body: &'static [u8],
    csp: Option<&'static str>,
) -> Response {
    let not_modified = req
        .get(header::IF_NONE_MATCH)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.split(',').any(|t| t.trim() == tag));
    let mut resp = if not_modified {
        StatusCode::NOT_MODIFIED.into_response()
    } else {
        ([(header::CONTENT_TYPE, content_type)], body).into_response()
    };
    let h = resp.headers_mut();
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    if let Ok(v) = HeaderValue::from_str(tag) {
        h.insert(header::ETAG, v);
    }
    security_headers(h, csp);
    resp
}

fn security_headers(h: &mut HeaderMap, csp: Option<&'static str>) {
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    if let Some(csp) = csp {
        h.insert(
            header::CONTENT_SECURITY_POLICY,
            HeaderValue::from_static(csp),
        );
        h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    }
}

/// `GET /`. With voice configured, the page may also connect to the
/// Realtime endpoint's origin (the SDP exchange of `{base}/realtime/calls`).
pub async fn index(
    axum::extract::State(state): axum::extract::State<crate::AppState>,
    req: HeaderMap,
) -> Response {
    let mut resp = revalidated(
        &req,
        &tags().index,
        HTML,
        INDEX_HTML.as_bytes(),
        Some(PAGE_CSP),
    );
    let origin = state
        .voice()
        .and_then(|v| v.realtime_base())
        .and_then(origin_of);
    if let Some(origin) = origin
        && let Ok(v) = HeaderValue::from_str(&page_csp_with(&origin))
    {
        resp.headers_mut()
            .insert(header::CONTENT_SECURITY_POLICY, v);
    }
    resp
}

/// `scheme://host[:port]` of an `http(s)` URL, `None` for anything else or
/// a value that could break the header.
fn origin_of(url: &str) -> Option<String> {
    let (scheme, rest) = url.split_once("://")?;
    if scheme != "http" && scheme != "https" {
        return None;
    }
    let host = rest.split(['/', '?', '#']).next()?;
    let ok = !host.is_empty()
        && !host.contains('@')
        && host
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | ':' | '[' | ']'));
    ok.then(|| format!("{scheme}://{host}"))
}

/// The page's policy with the Realtime origin added to `connect-src`.
fn page_csp_with(origin: &str) -> String {
    PAGE_CSP.replace(
        "connect-src 'self'",
        &format!("connect-src 'self' {origin}"),
    )
}

/// `GET /assets/app.js`.
pub async fn app_js(req: HeaderMap) -> Response {
    revalidated(&req, &tags().app_js, JS, APP_JS.as_bytes(), None)
}

/// `GET /assets/app.css`.
pub async fn app_css(req: HeaderMap) -> Response {
    revalidated(&req, &tags().app_css, CSS, APP_CSS.as_bytes(), None)
}

/// `GET /api/docs`.
pub async fn docs(req: HeaderMap) -> Response {
    revalidated(
        &req,
        &tags().docs,
        HTML,
        DOCS_HTML.as_bytes(),
        Some(DOCS_CSP),
    )
}

/// `GET /api/docs/init.js`.
pub async fn docs_init(req: HeaderMap) -> Response {
    revalidated(&req, &tags().docs_init, JS, DOCS_INIT_JS.as_bytes(), None)
}

/// `GET /api/docs/assets/{version}/{file}`: the vendored Swagger UI files,
/// immutable under their versioned path.
pub async fn swagger_asset(Path((version, file)): Path<(String, String)>) -> Response {
    if version != SWAGGER_UI_VERSION {
        return ApiError::not_found("asset").into_response();
    }
    let (content_type, body): (&'static str, &'static [u8]) = match file.as_str() {
        "swagger-ui-bundle.js" => (JS, SWAGGER_JS),
        "swagger-ui.css" => (CSS, SWAGGER_CSS),
        "LICENSE" => ("text/plain; charset=utf-8", SWAGGER_LICENSE),
        _ => return ApiError::not_found("asset").into_response(),
    };
    let mut resp = ([(header::CONTENT_TYPE, content_type)], body).into_response();
    let h = resp.headers_mut();
    h.insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static("public, max-age=31536000, immutable"),
    );
    security_headers(h, None);
    resp
}

#[cfg(test)]
mod voice_csp_tests {
    use super::*;

    #[test]
    fn the_realtime_origin_is_added_to_connect_src_only() {
        assert_eq!(
            origin_of("https://api.openai.com/v1").as_deref(),
            Some("https://api.openai.com")
        );
        assert_eq!(
            origin_of("http://127.0.0.1:9000/v1").as_deref(),
            Some("http://127.0.0.1:9000")
        );
        assert_eq!(origin_of("ftp://x/v1"), None);
        assert_eq!(origin_of("https://user:pw@host/v1"), None);
        assert_eq!(origin_of("https://a b/v1"), None);
        let csp = page_csp_with("https://api.openai.com");
        assert!(csp.contains("connect-src 'self' https://api.openai.com;"));
        assert!(csp.contains("script-src 'self';"));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_docs_page_loads_the_vendored_version() {
        assert!(DOCS_HTML.contains(&format!(
            "/api/docs/assets/{SWAGGER_UI_VERSION}/swagger-ui-bundle.js"
        )));
        assert!(DOCS_HTML.contains(&format!(
            "/api/docs/assets/{SWAGGER_UI_VERSION}/swagger-ui.css"
        )));
        assert!(
            DOCS_INIT_JS.contains("validatorUrl: null"),
            "no outside validator"
        );
    }

    #[test]
    fn pages_reference_nothing_outside_this_origin() {
        for (name, text) in [
            ("index.html", INDEX_HTML),
            ("app.js", APP_JS),
            ("app.css", APP_CSS),
            ("docs.html", DOCS_HTML),
            ("docs-init.js", DOCS_INIT_JS),
        ] {
            for bad in [
                "http://",
                "//cdn",
                "@import",
                "fonts.googleapis",
                "<script>",
            ] {
                let hits: Vec<&str> = text
                    .lines()
                    .filter(|l| l.contains(bad) && !l.contains("http://www.w3.org/2000/svg"))
                    .collect();
                assert!(hits.is_empty(), "{name} contains {bad}: {hits:?}");
            }
        }
        assert!(
            !INDEX_HTML.contains(" style="),
            "no inline styles under the CSP"
        );
    }
}
