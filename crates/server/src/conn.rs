//! Connections: the accept loop with a header-read timeout, a global and a
//! per-address connection cap, and graceful shutdown.
//!
//! "Per address" means per [`client_prefix`]: an IPv4 address, or the /64
//! of an IPv6 address (one host or one network typically gets a whole /64,
//! so its addresses are one client for the caps and the rate limiter).
//!
//! A connection that has not sent a complete request head within the
//! header-read timeout is closed (this also ends idle keep-alive
//! connections), so slow or stalled clients cannot hold descriptors. A
//! connection beyond a cap is answered `503` and closed at once, before
//! anything is read. An upgraded WebSocket keeps its connection slot until
//! the socket closes.

use std::collections::HashMap;
use std::convert::Infallible;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use axum::Router;
use axum::extract::ConnectInfo;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::AppState;

/// Connection limits, from the settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnLimits {
    /// Time a client has to send a complete request head.
    pub header_read_timeout: Duration,
    /// Open connections in total.
    pub max_connections: usize,
    /// Open connections per client address (0 = no per-address cap).
    pub max_per_ip: usize,
}

/// Counts open connections, in total and per client address.
#[derive(Debug, Clone)]
pub struct ConnTracker {
    inner: Arc<TrackerInner>,
}

#[derive(Debug)]
struct TrackerInner {
    limits: ConnLimits,
    counts: Mutex<Counts>,
}

#[derive(Debug, Default)]
struct Counts {
    total: usize,
    /// Keyed by [`client_prefix`].
    per_ip: HashMap<IpAddr, usize>,
    /// Connections that have not yet sent a complete request head, oldest
    /// first (see [`ConnTracker::try_acquire`]).
    pending: std::collections::VecDeque<Arc<SlotState>>,
    next_id: u64,
}

impl Counts {
    fn release(&mut self, ip: IpAddr) {
        self.total = self.total.saturating_sub(1);
        if let Some(n) = self.per_ip.get_mut(&ip) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                self.per_ip.remove(&ip);
            }
        }
    }

    /// Closes the oldest connection still waiting for its request head:
    /// its place is released now and its task is told to drop it.
    fn evict_oldest_pending(&mut self) -> bool {
        let Some(victim) = self.pending.pop_front() else {
            return false;
        };
        if !victim
            .released
            .swap(true, std::sync::atomic::Ordering::SeqCst)
        {
            self.release(victim.ip);
        }
        victim.evict.notify_one();
        true
    }
}

/// One open connection's place under the caps; released when the last
/// clone is dropped (the connection task and, after an upgrade, the
/// WebSocket session each hold one).
#[derive(Debug, Clone)]
pub struct ConnSlot(Arc<SlotInner>);

#[derive(Debug)]
struct SlotInner {
    tracker: ConnTracker,
    state: Arc<SlotState>,
}

/// What the tracker and the slot share about one connection.
#[derive(Debug)]
struct SlotState {
    id: u64,
    ip: IpAddr,
    /// A complete request head arrived (the connection is no longer one a
    /// newcomer may push out).
    established: std::sync::atomic::AtomicBool,
    /// Its place was given back (by eviction or by the drop).
    released: std::sync::atomic::AtomicBool,
    /// Tells the connection's task to close it.
    evict: tokio::sync::Notify,
}

impl Drop for SlotInner {
    fn drop(&mut self) {
        use std::sync::atomic::Ordering::SeqCst;
        let mut c = self.tracker.counts();
        if !self.state.established.load(SeqCst) {
            let id = self.state.id;
            c.pending.retain(|p| p.id != id);
        }
        if !self.state.released.swap(true, SeqCst) {
            c.release(self.state.ip);
        }
    }
}

impl ConnSlot {
    /// Marks the connection as having sent a complete request head: from
    /// now on it is never pushed out for a newcomer.
    pub fn established(&self) {
        use std::sync::atomic::Ordering::SeqCst;
        if !self.0.state.established.swap(true, SeqCst) {
            let id = self.0.state.id;
            self.0.tracker.counts().pending.retain(|p| p.id != id);
        }
    }

    /// Resolves when the tracker pushed this connection out (it was still
    /// waiting for its request head when the slots ran short).
    pub async fn evicted(&self) {
        self.0.state.evict.notified().await;
    }
}

impl ConnTracker {
    /// A tracker enforcing `limits`.
    pub fn new(limits: ConnLimits) -> Self {
        ConnTracker {
            inner: Arc::new(TrackerInner {
                limits,
                counts: Mutex::new(Counts::default()),
            }),
        }
    }

    fn counts(&self) -> MutexGuard<'_, Counts> {
        // Counters only: a poisoned lock still holds consistent numbers.
        self.inner
            .counts
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// A slot for a new connection from `ip`, or `None` when a cap is
    /// reached. The per-address cap counts `ip`'s [`client_prefix`].
    ///
    /// **Reservation**: connections that have not yet sent a complete
    /// request head may hold at most three quarters of the slots; beyond
    /// that, or when every slot is taken, the oldest of them is closed to
    /// make room (a client that sent its head is never pushed out). So
    /// slow-header clients, from however many addresses, cannot take every
    /// slot: a new client always gets in while any of them is waiting.
    pub fn try_acquire(&self, ip: IpAddr) -> Option<ConnSlot> {
        let ip = client_prefix(ip);
        let limits = self.inner.limits;
        let mut c = self.counts();
        let from_ip = c.per_ip.get(&ip).copied().unwrap_or(0);
        if limits.max_per_ip > 0 && from_ip >= limits.max_per_ip {
            return None;
        }
        let max_pending = (limits.max_connections * 3 / 4).max(1);
        if c.pending.len() >= max_pending {
            c.evict_oldest_pending();
        }
        if c.total >= limits.max_connections && !c.evict_oldest_pending() {
            return None;
        }
        c.total += 1;
        *c.per_ip.entry(ip).or_insert(0) += 1;
        c.next_id += 1;
        let state = Arc::new(SlotState {
            id: c.next_id,
            ip,
            established: std::sync::atomic::AtomicBool::new(false),
            released: std::sync::atomic::AtomicBool::new(false),
            evict: tokio::sync::Notify::new(),
        });
        c.pending.push_back(state.clone());
        drop(c);
        Some(ConnSlot(Arc::new(SlotInner {
            tracker: self.clone(),
            state,
        })))
    }

    /// Open connections (upgraded WebSockets included).
    pub fn open(&self) -> usize {
        self.counts().total
    }
}

/// What a connection beyond a cap is sent before it is closed.
const OVER_CAPACITY: &[u8] = b"HTTP/1.1 503 Service Unavailable\r\n\
content-type: application/json\r\nx-content-type-options: nosniff\r\n\
retry-after: 1\r\nconnection: close\r\ncontent-length: 75\r\n\r\n\
{\"code\":\"too_many_connections\",\"message\":\"too many open connections; retry\"}";

/// Accepts connections on `listener` and serves `app` on each until `stop`
/// turns true; then stops accepting, lets every connection finish its
/// request in flight (idle ones close at once) and returns when all
/// connections are closed or `drain` has passed.
pub(crate) async fn accept_loop(
    listener: TcpListener,
    app: Router,
    tracker: ConnTracker,
    state: AppState,
    mut stop: watch::Receiver<bool>,
    drain: Duration,
) {
    let header_timeout = tracker.inner.limits.header_read_timeout;
    loop {
        let accepted = tokio::select! {
            r = listener.accept() => r,
            () = stopped(&mut stop) => break,
        };
        let (stream, peer) = match accepted {
            Ok(v) => v,
            Err(e) => {
                // Out of descriptors or a connection reset before accept:
                // back off briefly instead of spinning.
                tracing::warn!(error = %e, "accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let Some(slot) = tracker.try_acquire(peer.ip()) else {
            state.metrics().rejected("too_many_connections");
            let _ = stream.try_write(OVER_CAPACITY);
            drop(stream);
            continue;
        };
        let _ = stream.set_nodelay(true);
        let app = app.clone();
        let request_slot = slot.clone();
        let service = hyper::service::service_fn(move |mut req: hyper::Request<Incoming>| {
            // A complete request head: this connection keeps its slot.
            request_slot.established();
            req.extensions_mut().insert(ConnectInfo(peer));
            req.extensions_mut().insert(request_slot.clone());
            let app = app.clone();
            async move {
                let resp = tower::ServiceExt::oneshot(app, req.map(axum::body::Body::new)).await;
                Ok::<_, Infallible>(match resp {
                    Ok(r) => r,
                    Err(never) => match never {},
                })
            }
        });
        let mut stop = stop.clone();
        tokio::spawn(async move {
            let slot = slot;
            let conn = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(header_timeout)
                .serve_connection(TokioIo::new(stream), service)
                .with_upgrades();
            let mut conn = std::pin::pin!(conn);
            let result = tokio::select! {
                r = conn.as_mut() => r,
                () = stopped(&mut stop) => {
                    conn.as_mut().graceful_shutdown();
                    conn.await
                }
                // Pushed out while still waiting for its request head.
                () = slot.evicted() => Ok(()),
            };
            drop(slot);
            if let Err(e) = result {
                tracing::debug!(error = %e, "connection ended with an error");
            }
        });
    }
    drop(listener);
    let deadline = tokio::time::Instant::now() + drain;
    while tracker.open() > 0 && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Resolves once `stop` is true (or its sender is gone).
async fn stopped(stop: &mut watch::Receiver<bool>) {
    let _ = stop.wait_for(|s| *s).await;
}

/// The client address of a request served by [`accept_loop`] (`None` when
/// the router runs without it, e.g. in tests).
pub fn client_ip<B>(req: &axum::http::Request<B>) -> Option<IpAddr> {
    req.extensions()
        .get::<ConnectInfo<SocketAddr>>()
        .map(|c| c.0.ip())
}

/// The client an address belongs to, for per-client limits: an IPv4
/// address itself (also when written as an IPv4-mapped IPv6 address), an
/// IPv6 address's /64 (its last 64 bits zeroed).
pub fn client_prefix(ip: IpAddr) -> IpAddr {
    match ip.to_canonical() {
        IpAddr::V6(v6) => {
            let network = u128::from(v6) & !u128::from(u64::MAX);
            IpAddr::V6(network.into())
        }
        v4 => v4,
    }
}

/// Whether `ip` lies in the network `(net, len)`.
pub fn in_network(ip: IpAddr, (net, len): (IpAddr, u8)) -> bool {
    match (ip.to_canonical(), net.to_canonical()) {
        (IpAddr::V4(a), IpAddr::V4(b)) => {
            let len = u32::from(len.min(32));
            let mask = if len == 0 { 0 } else { u32::MAX << (32 - len) };
            u32::from(a) & mask == u32::from(b) & mask
        }
        (IpAddr::V6(a), IpAddr::V6(b)) => {
            let len = u32::from(len.min(128));
            let mask = if len == 0 {
                0
            } else {
                u128::MAX << (128 - len)
            };
            u128::from(a) & mask == u128::from(b) & mask
        }
        _ => false,
    }
}

/// The client's address: the connecting address, unless that is a trusted
/// reverse proxy, in which case the right-most `X-Forwarded-For` address
/// that is not itself a trusted proxy (what the nearest untrusted hop
/// said; addresses to its left can be forged by the client).
pub fn client_addr<B>(req: &axum::http::Request<B>, trusted: &[(IpAddr, u8)]) -> Option<IpAddr> {
    let peer = client_ip(req)?;
    let is_trusted = |ip: IpAddr| trusted.iter().any(|n| in_network(ip, *n));
    if trusted.is_empty() || !is_trusted(peer) {
        return Some(peer);
    }
    let mut hops: Vec<IpAddr> = Vec::new();
    for value in req.headers().get_all("x-forwarded-for") {
        let Ok(text) = value.to_str() else {
            return Some(peer);
        };
        for part in text.split(',') {
            match part.trim().parse::<IpAddr>() {
                Ok(ip) => hops.push(ip),
                Err(_) => return Some(peer),
            }
        }
    }
    Some(
        hops.iter()
            .rev()
            .copied()
            .find(|ip| !is_trusted(*ip))
            .or_else(|| hops.first().copied())
            .unwrap_or(peer),
    )
}

/// The rate-limiter key of a request's client: `"unknown"` without a
/// client address, else [`client_prefix`] (`2001:db8::/64` for IPv6) of
/// [`client_addr`].
pub fn client_key<B>(req: &axum::http::Request<B>, trusted: &[(IpAddr, u8)]) -> String {
    match client_addr(req, trusted).map(client_prefix) {
        None => "unknown".to_owned(),
        Some(ip @ IpAddr::V4(_)) => ip.to_string(),
        Some(ip @ IpAddr::V6(_)) => format!("{ip}/64"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn caps_are_global_and_per_address_and_slots_release() {
        let t = ConnTracker::new(ConnLimits {
            header_read_timeout: Duration::from_secs(1),
            max_connections: 3,
            max_per_ip: 2,
        });
        let a = IpAddr::from([10, 0, 0, 1]);
        let b = IpAddr::from([10, 0, 0, 2]);
        let c = IpAddr::from([10, 0, 0, 3]);
        // Connections that sent their request head (established) are
        // never pushed out, so the caps below are hard.
        let est = |s: Option<ConnSlot>| {
            if let Some(s) = &s {
                s.established();
            }
            s
        };
        let a1 = est(t.try_acquire(a));
        let a2 = est(t.try_acquire(a));
        assert!(a1.is_some() && a2.is_some());
        assert!(t.try_acquire(a).is_none(), "per-address cap");
        let b1 = est(t.try_acquire(b));
        assert!(b1.is_some());
        assert!(t.try_acquire(c).is_none(), "global cap");
        let a1_clone = a1.clone();
        drop(a1);
        assert!(t.try_acquire(c).is_none(), "a clone still holds the slot");
        drop(a1_clone);
        assert_eq!(t.open(), 2);
        assert!(est(t.try_acquire(c)).is_some());
        assert_eq!(t.open(), 2, "the temporary slot was dropped");
        let open = ConnTracker::new(ConnLimits {
            header_read_timeout: Duration::from_secs(1),
            max_connections: 10,
            max_per_ip: 0,
        });
        let held: Vec<_> = (0..10).filter_map(|_| est(open.try_acquire(a))).collect();
        assert_eq!(held.len(), 10, "0 = no per-address cap");
    }

    #[tokio::test]
    async fn slow_header_clients_cannot_take_every_slot() {
        let t = ConnTracker::new(ConnLimits {
            header_read_timeout: Duration::from_secs(10),
            max_connections: 4,
            max_per_ip: 0,
        });
        let slow = |n: u8| IpAddr::from([10, 0, 0, n]);
        // One established client, then slow ones from many addresses.
        let kept = t.try_acquire(slow(1)).unwrap();
        kept.established();
        let s1 = t.try_acquire(slow(2)).unwrap();
        let s2 = t.try_acquire(slow(3)).unwrap();
        let s3 = t.try_acquire(slow(4)).unwrap();
        assert_eq!(t.open(), 4);
        // Full: a newcomer pushes out the oldest waiting one, never `kept`.
        let health = t.try_acquire(IpAddr::from([192, 168, 1, 9])).unwrap();
        assert_eq!(t.open(), 4);
        tokio::time::timeout(Duration::from_secs(1), s1.evicted())
            .await
            .expect("the oldest waiting connection is told to close");
        health.established();
        // Three quarters at most wait for their head: s2, s3 and a fourth
        // newcomer push out s2.
        let s4 = t.try_acquire(slow(5)).unwrap();
        tokio::time::timeout(Duration::from_secs(1), s2.evicted())
            .await
            .expect("pushed out");
        drop((s1, s2, s3, s4));
        assert_eq!(t.open(), 2, "kept and health remain");
        drop((kept, health));
        assert_eq!(t.open(), 0);
    }

    fn v6(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn forwarded_for_names_the_client_only_behind_a_trusted_proxy() {
        let trusted = [
            ("127.0.0.1".parse().unwrap(), 32),
            ("10.0.0.0".parse().unwrap(), 8),
        ];
        let req = |peer: &str, xff: &[&str]| {
            let mut r = axum::http::Request::new(());
            r.extensions_mut()
                .insert(ConnectInfo(SocketAddr::new(peer.parse().unwrap(), 4000)));
            for v in xff {
                r.headers_mut()
                    .append("x-forwarded-for", v.parse().unwrap());
            }
            r
        };
        // Behind the proxy: the right-most untrusted hop.
        assert_eq!(
            client_key(&req("127.0.0.1", &["203.0.113.9"]), &trusted),
            "203.0.113.9"
        );
        assert_eq!(
            client_key(
                &req("127.0.0.1", &["198.51.100.1, 203.0.113.9, 10.1.2.3"]),
                &trusted
            ),
            "203.0.113.9",
            "a forged left-most entry is ignored"
        );
        assert_eq!(
            client_key(
                &req("127.0.0.1", &["198.51.100.1", "203.0.113.9"]),
                &trusted
            ),
            "203.0.113.9"
        );
        assert_eq!(
            client_key(&req("127.0.0.1", &["2001:db8:1:2::5"]), &trusted),
            "2001:db8:1:2::/64"
        );
        // Not behind a trusted proxy, or no settings: the header is ignored.
        assert_eq!(
            client_key(&req("192.0.2.7", &["203.0.113.9"]), &trusted),
            "192.0.2.7"
        );
        assert_eq!(
            client_key(&req("127.0.0.1", &["203.0.113.9"]), &[]),
            "127.0.0.1"
        );
        // Garbage or an empty header: the proxy's own address.
        assert_eq!(
            client_key(&req("127.0.0.1", &["nonsense"]), &trusted),
            "127.0.0.1"
        );
        assert_eq!(client_key(&req("127.0.0.1", &[]), &trusted), "127.0.0.1");
        assert!(in_network("10.200.0.1".parse().unwrap(), trusted[1]));
        assert!(!in_network("11.0.0.1".parse().unwrap(), trusted[1]));
        assert!(in_network("::ffff:10.0.0.1".parse().unwrap(), trusted[1]));
    }

    #[test]
    fn client_prefixes_are_v4_addresses_and_v6_slash_64s() {
        for (ip, want) in [
            ("10.0.0.1", "10.0.0.1"),
            ("::ffff:10.0.0.1", "10.0.0.1"),
            ("2001:db8:1:2::1", "2001:db8:1:2::"),
            ("2001:db8:1:2:ffff:ffff:ffff:ffff", "2001:db8:1:2::"),
            ("2001:db8:1:3::1", "2001:db8:1:3::"),
            ("::1", "::"),
            ("fe80::1:2:3:4", "fe80::"),
        ] {
            assert_eq!(client_prefix(v6(ip)), v6(want), "{ip}");
        }
        let req = |ip: &str| {
            let mut r = axum::http::Request::new(());
            r.extensions_mut()
                .insert(ConnectInfo(SocketAddr::new(v6(ip), 4000)));
            r
        };
        assert_eq!(
            client_key(&req("2001:db8:1:2::7"), &[]),
            "2001:db8:1:2::/64"
        );
        assert_eq!(client_key(&req("::ffff:10.0.0.1"), &[]), "10.0.0.1");
        assert_eq!(client_key(&axum::http::Request::new(()), &[]), "unknown");
    }

    #[test]
    fn addresses_of_one_slash_64_share_the_per_address_cap() {
        let t = ConnTracker::new(ConnLimits {
            header_read_timeout: Duration::from_secs(1),
            max_connections: 1000,
            max_per_ip: 4,
        });
        // 100 different addresses of 2001:db8:1:2::/64: only 4 get in.
        let mut held: Vec<_> = (1..=100u16)
            .filter_map(|i| t.try_acquire(v6(&format!("2001:db8:1:2:{i:x}::{i:x}"))))
            .collect();
        assert_eq!(held.len(), 4);
        // Another /64 and IPv4 clients are not affected.
        assert!(t.try_acquire(v6("2001:db8:1:3::1")).is_some());
        assert!(t.try_acquire(v6("10.0.0.1")).is_some());
        // IPv4 addresses stay separate clients, mapped or not.
        let v4: Vec<_> = (1..=4u8)
            .filter_map(|i| t.try_acquire(IpAddr::from([10, 0, 1, i])))
            .collect();
        assert_eq!(v4.len(), 4);
        let mapped: Vec<_> = (0..4)
            .filter_map(|_| t.try_acquire(v6("::ffff:10.0.0.2")))
            .collect();
        assert_eq!(mapped.len(), 4);
        assert!(t.try_acquire(IpAddr::from([10, 0, 0, 2])).is_none());
        // Releasing one slot of the /64 lets one more address of it in.
        held.pop();
        let again = t.try_acquire(v6("2001:db8:1:2:dead::beef"));
        assert!(again.is_some());
        assert!(t.try_acquire(v6("2001:db8:1:2:dead::beef")).is_none());
    }
}
