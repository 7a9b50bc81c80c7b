//! App-side overhead of one text turn with the in-memory store.
//!
//! Deterministic mode, and hybrid mode against the fake OpenAI-compatible
//! server answering instantly on loopback (so hybrid numbers include local
//! HTTP round trips, not model latency). 2,000 turns over 50 threads each;
//! prints p50 / p99 / max per mode.
//!
//! Hybrid mode also extracts memory candidates in the background after
//! eligible turns; the bench reports the extra extraction calls per turn
//! and, separately, how long after the reply the background extraction
//! lands in the session buffer.
//!
//! Run: `cargo bench -p opencouch-runtime --bench turn`

use std::sync::Arc;
use std::time::{Duration, Instant};

use opencouch_core::{AgentInput, RuntimeMode};
use opencouch_llm::{LlmConfig, OpenAiCompatClient};
use opencouch_runtime::service::Host;
use opencouch_runtime::{Runtime, RuntimeOptions};
use opencouch_store::Stores;
use opencouch_testkit::{FakeOpenAi, canned};

const TURNS: usize = 2_000;
const THREADS: usize = 50;
const MESSAGES: &[&str] = &[
    "I had a really long day at work and I feel drained",
    "my sister and I keep arguing about small things",
    "I can't stop worrying about my exams next week",
    "memory status",
    "can you find research on anxiety treatment",
    "I feel a bit better after talking, thanks",
];

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let idx = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[idx.min(sorted.len() - 1)]
}

async fn measure(label: &str, rt: &Runtime) {
    measure_with(label, rt, false).await;
}

/// With `settle_between`, each turn's background memory extraction is
/// flushed (untimed) before the next turn starts: the turn times then show
/// the request path alone, without background work competing for the CPU.
async fn measure_with(label: &str, rt: &Runtime, settle_between: bool) {
    // Turns go through the service, as every channel's do.
    let svc = Host::over(rt.clone()).service();
    // Warm-up (lazy data loads, connection pool).
    for i in 0..20 {
        let _ = svc
            .turn(AgentInput::new(format!("warm-{i}"), MESSAGES[i % MESSAGES.len()]).into())
            .await;
    }
    let mut times = Vec::with_capacity(TURNS);
    let started = Instant::now();
    for i in 0..TURNS {
        let input = AgentInput::new(
            format!("{label}-{}", i % THREADS),
            MESSAGES[i % MESSAGES.len()],
        );
        let t = Instant::now();
        match svc.turn(input.into()).await {
            Ok(_) => times.push(t.elapsed()),
            Err(e) => eprintln!("{label}: turn failed: {e}"),
        }
        if settle_between {
            let _ = rt.flush_memory_extraction(Duration::from_secs(30)).await;
        }
    }
    let wall = started.elapsed();
    times.sort_unstable();
    if times.is_empty() {
        println!("{label}: no successful turns");
        return;
    }
    println!(
        "{label:>14}: {} turns / {THREADS} threads  p50 {:>8.3} ms  p99 {:>8.3} ms  max {:>8.3} ms  total {:.2} s",
        times.len(),
        percentile(&times, 0.50).as_secs_f64() * 1e3,
        percentile(&times, 0.99).as_secs_f64() * 1e3,
        times[times.len() - 1].as_secs_f64() * 1e3,
        wall.as_secs_f64()
    );
}

fn main() {
    let tokio_rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("tokio runtime: {e}");
            return;
        }
    };
    tokio_rt.block_on(async {
        let det = Runtime::persistent(Stores::in_memory(), None, RuntimeOptions::default());
        measure("deterministic", &det).await;
        crisis_turns().await;

        // Each hybrid measurement gets a fresh fake server and store.
        let Some((_fake, settled)) = hybrid_setup().await else {
            return;
        };
        measure_with("hybrid settled", &settled, true).await;
        let Some((fake, hybrid)) = hybrid_setup().await else {
            return;
        };
        measure("hybrid (fake)", &hybrid).await;
        let extraction_calls = fake
            .requests()
            .iter()
            .filter(|r| r.raw_body.contains("ExtractionReply"))
            .count();
        println!(
            "{:>14}: {extraction_calls} extraction calls over {} turns ({:.2} per turn)",
            "hybrid (fake)",
            TURNS + 20,
            extraction_calls as f64 / (TURNS + 20) as f64
        );
        background(&hybrid).await;
    });
}

/// Deterministic crisis turns (level ≥ 2, each on a fresh thread) on a
/// SQLite file, without and with a saved safety plan: the cost of reading
/// the person's plan and placing it before the verified lines.
async fn crisis_turns() {
    const CRISIS: &str = "I'm going to kill myself tonight, I'm in the UK";
    const N: usize = 400;
    let Ok(dir) = tempfile::tempdir() else {
        eprintln!("crisis turns: no temporary directory");
        return;
    };
    for with_plan in [false, true] {
        let path = dir.path().join(format!("crisis-{with_plan}.sqlite3"));
        let stores = match opencouch_store::SqliteStores::open(&path).await {
            Ok(s) => s.into_stores(),
            Err(e) => {
                eprintln!("crisis turns: {e}");
                return;
            }
        };
        let rt = Runtime::persistent(stores, None, RuntimeOptions::default());
        let svc = Host::over(rt.clone()).service();
        let mut times = Vec::with_capacity(N);
        for i in 0..N + 20 {
            let user = format!("person-{i}");
            if with_plan {
                let plan = opencouch_core::SafetyPlan {
                    coping: vec!["cold water on my face".into(), "a walk".into()],
                    people: vec![opencouch_core::safety_plan::Contact {
                        name: "my sister".into(),
                        phone: Some("+44 7700 900123".into()),
                    }],
                    reasons_to_live: vec!["my dog".into()],
                    ..Default::default()
                };
                if let Err(e) = svc.put_safety_plan(&user, plan).await {
                    eprintln!("crisis turns: {e}");
                    return;
                }
            }
            let mut input = AgentInput::new(format!("crisis-{i}"), CRISIS);
            input.user_id = Some(user);
            let t = Instant::now();
            match svc.turn(input.into()).await {
                Ok(out) if i >= 20 => {
                    times.push(t.elapsed());
                    if with_plan && out.diagnostics.get_str("safety_plan") != Some("shown") {
                        eprintln!("crisis turns: the plan was not shown");
                    }
                }
                Ok(_) => {}
                Err(e) => eprintln!("crisis turns: {e}"),
            }
        }
        times.sort_unstable();
        if times.is_empty() {
            continue;
        }
        println!(
            "{:>14}: {} turns (sqlite){}  p50 {:>8.3} ms  p99 {:>8.3} ms",
            "crisis",
            times.len(),
            if with_plan {
                " with a safety plan"
            } else {
                " no plan           "
            },
            percentile(&times, 0.50).as_secs_f64() * 1e3,
            percentile(&times, 0.99).as_secs_f64() * 1e3,
        );
    }
}

/// A fake server answering every structured call instantly and a hybrid
/// runtime on a fresh in-memory store talking to it.
async fn hybrid_setup() -> Option<(FakeOpenAi, Runtime)> {
    let fake = FakeOpenAi::start().await;
    canned::script_calm_model(
        &fake,
        "That sounds like a lot to carry. What feels heaviest right now?",
    );
    let client = match OpenAiCompatClient::new(LlmConfig::local(fake.base_url(), "fake-model")) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("client: {e}");
            return None;
        }
    };
    let opts = RuntimeOptions {
        mode: RuntimeMode::Hybrid,
        ..Default::default()
    };
    let rt = Runtime::persistent(Stores::in_memory(), Some(Arc::new(client)), opts);
    Some((fake, rt))
}

/// Time from a hybrid turn's reply until its background extraction is in
/// the session buffer (the turn is not waiting for it).
async fn background(rt: &Runtime) {
    let svc = Host::over(rt.clone()).service();
    let _ = rt.flush_memory_extraction(Duration::from_secs(30)).await;
    let mut times = Vec::new();
    for i in 0..200 {
        let input = AgentInput::new(format!("bg-{}", i % THREADS), MESSAGES[i % 3]);
        if svc.turn(input.into()).await.is_err() {
            continue;
        }
        let t = Instant::now();
        let out = rt.flush_memory_extraction(Duration::from_secs(30)).await;
        if out.finished_in_time {
            times.push(t.elapsed());
        }
    }
    times.sort_unstable();
    if times.is_empty() {
        println!("background extraction: no measurements");
        return;
    }
    println!(
        "{:>14}: {} turns  after-reply p50 {:>8.3} ms  p99 {:>8.3} ms",
        "bg extraction",
        times.len(),
        percentile(&times, 0.50).as_secs_f64() * 1e3,
        percentile(&times, 0.99).as_secs_f64() * 1e3,
    );
}
