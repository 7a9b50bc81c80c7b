//! The cost of the process-wide counters behind `/metrics`:
//! `cargo bench -p opencouch-core --bench counters`.
//!
//! A memory write, a session end and a crisis-log append each count
//! themselves with one call into `opencouch_core::telemetry`: a lock of
//! the process's call-metrics mutex and a map update (the crisis-log
//! append also holds an in-flight gauge, two atomic adds). Printed: the
//! time per call on one thread and with two threads calling at once (this
//! machine's cores, the worst case: real calls are far apart), next to an
//! empty loop and a bare atomic add for scale.

use std::hint::black_box;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use opencouch_core::telemetry::{
    crisis_log_write_started, record_crisis_log_write, record_memory_write, record_session_end,
};

const CALLS: u64 = 2_000_000;

/// Nanoseconds per call of `f` over `n` calls on this thread.
fn time(n: u64, f: &(impl Fn(u64) + Sync)) -> f64 {
    let start = Instant::now();
    for i in 0..n {
        f(black_box(i));
    }
    start.elapsed().as_secs_f64() * 1e9 / n as f64
}

/// Best of three runs: one thread, then `threads` threads at once (each
/// making `n` calls; the figure is wall time per call of one thread).
fn bench(label: &str, threads: usize, f: impl Fn(u64) + Sync) {
    // Warm up (the map's entry is created on the first call).
    time(10_000, &f);
    let one = (0..3)
        .map(|_| time(CALLS, &f))
        .fold(f64::INFINITY, f64::min);
    let many = (0..3)
        .map(|_| {
            std::thread::scope(|s| {
                let handles: Vec<_> = (0..threads).map(|_| s.spawn(|| time(CALLS, &f))).collect();
                handles
                    .into_iter()
                    .map(|h| h.join().unwrap_or(f64::NAN))
                    .fold(0.0, f64::max)
            })
        })
        .fold(f64::INFINITY, f64::min);
    println!("{label:<44} {one:>7.1} ns/call   {threads} threads: {many:>7.1} ns/call");
}

fn main() {
    let threads = 2;
    println!("{CALLS} calls per thread, best of 3\n");
    bench("empty loop", threads, |i| {
        black_box(i);
    });
    let atomic = AtomicU64::new(0);
    bench("AtomicU64::fetch_add (for scale)", threads, |i| {
        atomic.fetch_add(black_box(i) & 1, Ordering::Relaxed);
    });
    bench("record_memory_write(semantic, insert)", threads, |_| {
        record_memory_write(black_box("semantic"), "insert");
    });
    bench("record_session_end(requested, persistent)", threads, |_| {
        record_session_end("requested", black_box("persistent"));
    });
    bench("record_crisis_log_write(captured)", threads, |_| {
        record_crisis_log_write(black_box("captured"));
    });
    bench("crisis_log_write_started + drop", threads, |_| {
        black_box(crisis_log_write_started());
    });
}
