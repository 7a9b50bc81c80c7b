//! A fake Hugging Face hub on loopback, for testing model downloads offline.
//!
//! [`FakeHub`] serves `GET /{repo}/resolve/{revision}/{file}` (and `HEAD`)
//! from in-memory bytes registered with [`FakeHub::add_file`], the URL form
//! of `https://huggingface.co`. It honours single `Range: bytes=N-` /
//! `bytes=N-M` requests (206 with `Content-Range`, 416 with
//! `Content-Range: bytes */LEN` past the end) and records every request.
//! Faults are set per file name: cut the connection after N body bytes on the
//! next request ([`FakeHub::cut_next_after`]), answer an HTTP status
//! ([`FakeHub::fail_next`], [`FakeHub::fail_always`]), ignore ranges and
//! always answer 200 with the whole file ([`FakeHub::ignore_ranges`]),
//! serve bytes different from the registered ones, same length
//! ([`FakeHub::corrupt`]), or redirect to a "CDN" path first, as the real
//! hub does for large files ([`FakeHub::redirect`]).
//!
//! ```no_run
//! # async fn demo() {
//! use opencouch_testkit::FakeHub;
//! let hub = FakeHub::start().await;
//! hub.add_file("org/model", "0123456789012345678901234567890123456789", "config.json", b"{}".to_vec());
//! hub.cut_next_after("config.json", 1);
//! let endpoint = hub.endpoint(); // http://127.0.0.1:PORT
//! # let _ = endpoint;
//! # }
//! ```

use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use futures::StreamExt;
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// Pause before aborting a cut body, so the part before the cut is flushed.
const CUT_GRACE: Duration = Duration::from_millis(20);
/// Path prefix of the "CDN" that redirected files are served from.
const CDN_PREFIX: &str = "/_cdn";

/// One request as the fake hub received it.
#[derive(Clone, Debug)]
pub struct HubRequest {
    /// HTTP method, e.g. `GET`.
    pub method: String,
    /// Request path, e.g. `/org/model/resolve/REV/config.json`.
    pub path: String,
    /// The `Range` header, when sent.
    pub range: Option<String>,
    /// Headers with lower-cased names, in arrival order.
    pub headers: Vec<(String, String)>,
}

impl HubRequest {
    /// The file name (last path segment).
    pub fn file(&self) -> &str {
        self.path.rsplit('/').next().unwrap_or_default()
    }
}

/// Faults scripted for one file name.
#[derive(Default)]
struct Faults {
    cut_next_after: Option<usize>,
    statuses: VecDeque<u16>,
    always_status: Option<u16>,
    corrupt: bool,
    ignore_ranges: bool,
    redirect: bool,
}

#[derive(Default)]
struct HubState {
    files: HashMap<String, Bytes>,
    faults: HashMap<String, Faults>,
    requests: Vec<HubRequest>,
}

struct HubShared {
    state: Mutex<HubState>,
}

impl HubShared {
    fn lock(&self) -> MutexGuard<'_, HubState> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// A fake Hugging Face hub on a random loopback port. Shuts down on drop.
pub struct FakeHub {
    addr: SocketAddr,
    shared: Arc<HubShared>,
    shutdown: watch::Sender<bool>,
    task: JoinHandle<()>,
}

impl std::fmt::Debug for FakeHub {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FakeHub")
            .field("addr", &self.addr)
            .finish_non_exhaustive()
    }
}

/// The path under which `file` of `repo` at `revision` is served.
pub fn resolve_path(repo: &str, revision: &str, file: &str) -> String {
    format!("/{repo}/resolve/{revision}/{file}")
}

impl FakeHub {
    /// Starts the hub. Panics when no loopback port can be bound (test-only helper).
    pub async fn start() -> FakeHub {
        match FakeHub::try_start().await {
            Ok(hub) => hub,
            Err(e) => panic!("FakeHub could not bind a loopback port: {e}"),
        }
    }

    /// Starts the hub, reporting bind errors.
    pub async fn try_start() -> std::io::Result<FakeHub> {
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0)).await?;
        let addr = listener.local_addr()?;
        let (tx, mut stop) = watch::channel(false);
        let shared = Arc::new(HubShared {
            state: Mutex::new(HubState::default()),
        });
        let app = Router::new().fallback(handle).with_state(shared.clone());
        let task = tokio::spawn(async move {
            let serve = axum::serve(listener, app).with_graceful_shutdown(async move {
                let _ = stop.wait_for(|s| *s).await;
            });
            // The server only ends on shutdown; an accept error has nowhere to go.
            let _ = serve.await;
        });
        Ok(FakeHub {
            addr,
            shared,
            shutdown: tx,
            task,
        })
    }

    /// Socket address the hub listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The endpoint to use instead of `https://huggingface.co`, e.g.
    /// `http://127.0.0.1:PORT` (no trailing slash).
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The full URL of a file.
    pub fn url(&self, repo: &str, revision: &str, file: &str) -> String {
        format!("{}{}", self.endpoint(), resolve_path(repo, revision, file))
    }

    /// Serves `bytes` as `file` of `repo` at `revision` (replacing any earlier bytes).
    pub fn add_file(&self, repo: &str, revision: &str, file: &str, bytes: impl Into<Bytes>) {
        self.shared
            .lock()
            .files
            .insert(resolve_path(repo, revision, file), bytes.into());
    }

    /// Removes a file: it answers 404 afterwards.
    pub fn remove_file(&self, repo: &str, revision: &str, file: &str) {
        self.shared
            .lock()
            .files
            .remove(&resolve_path(repo, revision, file));
    }

    fn faults(&self, file: &str, f: impl FnOnce(&mut Faults)) {
        f(self
            .shared
            .lock()
            .faults
            .entry(file.to_owned())
            .or_default());
    }

    /// The next successful response for a file named `file` sends only
    /// `bytes` body bytes (of the whole or ranged body), then drops the
    /// connection. One-shot.
    pub fn cut_next_after(&self, file: &str, bytes: usize) {
        self.faults(file, |f| f.cut_next_after = Some(bytes));
    }

    /// The next `times` requests for a file named `file` get `status`
    /// (e.g. 404, 500, 503) with a short text body.
    pub fn fail_next(&self, file: &str, status: u16, times: usize) {
        self.faults(file, |f| {
            f.statuses.extend(std::iter::repeat_n(status, times))
        });
    }

    /// Every request for a file named `file` gets `status` (until [`FakeHub::clear_faults`]).
    pub fn fail_always(&self, file: &str, status: u16) {
        self.faults(file, |f| f.always_status = Some(status));
    }

    /// Serves different bytes (every byte's lowest bit flipped, same length)
    /// for a file named `file`.
    pub fn corrupt(&self, file: &str) {
        self.faults(file, |f| f.corrupt = true);
    }

    /// Answers every request for a file named `file` with 200 and the whole
    /// file, ignoring `Range` (as some mirrors and proxies do).
    pub fn ignore_ranges(&self, file: &str) {
        self.faults(file, |f| f.ignore_ranges = true);
    }

    /// Answers requests for a file named `file` with `302 Found` to
    /// `/_cdn/{repo}/resolve/{revision}/{file}` on the same server, which
    /// serves the bytes (as the real hub redirects large files to its CDN).
    /// Scripted statuses answer the first request they meet; a cut or
    /// corruption applies to the request that serves the bytes.
    pub fn redirect(&self, file: &str) {
        self.faults(file, |f| f.redirect = true);
    }

    /// Removes every fault.
    pub fn clear_faults(&self) {
        self.shared.lock().faults.clear();
    }

    /// Every request received so far, in arrival order.
    pub fn requests(&self) -> Vec<HubRequest> {
        self.shared.lock().requests.clone()
    }

    /// Requests for a file named `file`.
    pub fn requests_for(&self, file: &str) -> Vec<HubRequest> {
        self.requests()
            .into_iter()
            .filter(|r| r.file() == file)
            .collect()
    }

    /// Forgets the recorded requests (files and faults are kept).
    pub fn clear_requests(&self) {
        self.shared.lock().requests.clear();
    }
}

impl Drop for FakeHub {
    fn drop(&mut self) {
        let _ = self.shutdown.send(true);
        self.task.abort();
    }
}

fn text(status: StatusCode, body: &'static str) -> Response {
    let mut resp = (status, body).into_response();
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    resp
}

/// Parses a single `bytes=START-[END]` range against a body of `len` bytes:
/// `None` = ignore the header (invalid or multi-range), `Some(Err(()))` =
/// not satisfiable, `Some(Ok((start, end_inclusive)))` otherwise.
fn parse_range(value: &str, len: usize) -> Option<Result<(usize, usize), ()>> {
    let spec = value.trim().strip_prefix("bytes=")?;
    if spec.contains(',') {
        return None;
    }
    let (start, end) = spec.split_once('-')?;
    let start: usize = start.trim().parse().ok()?;
    let end = match end.trim() {
        "" => None,
        e => Some(e.parse::<usize>().ok()?),
    };
    if end.is_some_and(|e| e < start) {
        return None;
    }
    if start >= len {
        return Some(Err(()));
    }
    let end = end.map_or(len - 1, |e| e.min(len - 1));
    Some(Ok((start, end)))
}

/// A body that sends `bytes`, or only its first `cut` bytes and then aborts
/// the connection. `Content-Length` is always the full length.
fn body_of(bytes: Bytes, cut: Option<usize>) -> Body {
    match cut.filter(|&n| n < bytes.len()) {
        None => Body::from(bytes),
        Some(n) => {
            let items: Vec<Result<Bytes, std::io::Error>> = vec![
                Ok(bytes.slice(..n)),
                Err(std::io::Error::new(
                    std::io::ErrorKind::ConnectionAborted,
                    "connection cut by the fake hub",
                )),
            ];
            let stream = futures::stream::iter(items).then(|item| async move {
                if item.is_err() {
                    tokio::time::sleep(CUT_GRACE).await;
                }
                item
            });
            Body::from_stream(stream)
        }
    }
}

async fn handle(
    State(shared): State<Arc<HubShared>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
) -> Response {
    let path = uri.path().to_owned();
    let range = headers
        .get(header::RANGE)
        .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned());
    let request = HubRequest {
        method: method.to_string(),
        path: path.clone(),
        range: range.clone(),
        headers: headers
            .iter()
            .map(|(k, v)| {
                (
                    k.as_str().to_owned(),
                    String::from_utf8_lossy(v.as_bytes()).into_owned(),
                )
            })
            .collect(),
    };
    let file_name = request.file().to_owned();
    // Decide everything under the lock, then build the response without it.
    // `/_cdn/...` is where redirected files are served from.
    let (key, via_cdn) = match path.strip_prefix(CDN_PREFIX) {
        Some(k) => (k.to_owned(), true),
        None => (path.clone(), false),
    };
    let (bytes, status, cut, ignore_ranges) = {
        let mut st = shared.lock();
        st.requests.push(request);
        let bytes = st.files.get(&key).cloned();
        let faults = st.faults.entry(file_name).or_default();
        let status = faults.statuses.pop_front().or(faults.always_status);
        if status.is_none() && bytes.is_some() && faults.redirect && !via_cdn {
            let mut resp = text(StatusCode::FOUND, "Found. Redirecting");
            if let Ok(v) = HeaderValue::from_str(&format!("{CDN_PREFIX}{key}")) {
                resp.headers_mut().insert(header::LOCATION, v);
            }
            return resp;
        }
        let cut = if status.is_none() && bytes.is_some() {
            faults.cut_next_after.take()
        } else {
            None
        };
        let bytes = match bytes {
            Some(b) if faults.corrupt => {
                Some(Bytes::from(b.iter().map(|x| x ^ 1).collect::<Vec<u8>>()))
            }
            other => other,
        };
        (bytes, status, cut, faults.ignore_ranges)
    };
    if method != Method::GET && method != Method::HEAD {
        return text(StatusCode::METHOD_NOT_ALLOWED, "method not allowed");
    }
    if let Some(code) = status {
        let code = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        return text(code, "fault scripted by the fake hub");
    }
    let Some(bytes) = bytes else {
        let mut resp = text(StatusCode::NOT_FOUND, "Entry not found");
        resp.headers_mut()
            .insert("x-error-code", HeaderValue::from_static("EntryNotFound"));
        return resp;
    };
    let len = bytes.len();
    let ranged = range
        .as_deref()
        .filter(|_| !ignore_ranges)
        .and_then(|r| parse_range(r, len));
    let (status, body, content_range) = match ranged {
        None => (StatusCode::OK, bytes, None),
        Some(Err(())) => {
            let mut resp = text(StatusCode::RANGE_NOT_SATISFIABLE, "range not satisfiable");
            if let Ok(v) = HeaderValue::from_str(&format!("bytes */{len}")) {
                resp.headers_mut().insert(header::CONTENT_RANGE, v);
            }
            return resp;
        }
        Some(Ok((start, end))) => (
            StatusCode::PARTIAL_CONTENT,
            bytes.slice(start..=end),
            Some(format!("bytes {start}-{end}/{len}")),
        ),
    };
    let body_len = body.len();
    let body = if method == Method::HEAD {
        Body::empty()
    } else {
        body_of(body, cut)
    };
    let mut resp = Response::new(body);
    *resp.status_mut() = status;
    let h = resp.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/octet-stream"),
    );
    h.insert(header::ACCEPT_RANGES, HeaderValue::from_static("bytes"));
    h.insert(header::CONTENT_LENGTH, HeaderValue::from(body_len));
    if let Some(v) = content_range.and_then(|v| HeaderValue::from_str(&v).ok()) {
        h.insert(header::CONTENT_RANGE, v);
    }
    resp
}

#[cfg(test)]
mod tests {
    use super::parse_range;

    #[test]
    fn ranges_parse_like_a_server() {
        assert_eq!(parse_range("bytes=0-", 10), Some(Ok((0, 9))));
        assert_eq!(parse_range("bytes=4-", 10), Some(Ok((4, 9))));
        assert_eq!(parse_range("bytes=2-5", 10), Some(Ok((2, 5))));
        assert_eq!(parse_range("bytes=2-50", 10), Some(Ok((2, 9))));
        assert_eq!(parse_range("bytes=10-", 10), Some(Err(())));
        assert_eq!(parse_range("bytes=5-2", 10), None);
        assert_eq!(parse_range("bytes=-5", 10), None);
        assert_eq!(parse_range("bytes=0-1,4-5", 10), None);
        assert_eq!(parse_range("items=0-", 10), None);
    }
}
