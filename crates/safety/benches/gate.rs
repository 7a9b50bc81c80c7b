//! Crisis-gate throughput on one core: `cargo bench -p opencouch-safety --bench gate`.
//!
//! A fixed set of short messages (written for this benchmark) is classified
//! repeatedly; the result is printed as messages per second for
//! normalization alone and for the full deterministic classifier.

use std::hint::black_box;
use std::time::Instant;

const MESSAGES: &[&str] = &[
    "hi, how are you today?",
    "work is killing me this week",
    "i feel so empty and tired lately",
    "i can't do this anymore",
    "i want to kill myself",
    "gonna kms tmrw lol",
    "i have pills and i'm going to take them all tonight",
    "my friend said she wants to die and i don't know what to do",
    "i'm not suicidal, just venting about my exams",
    "i used to want to die but i'm doing better now",
    "can you remind me what we talked about last time?",
    "I’m sooo tired of everything, nobody would even notice if i was gone",
    "my dog died last week and i miss him so much",
    "i planned it all out in my head, the trip is going to be great",
    "honestly i just want to disappear for a while",
    "let's do the breathing exercise again",
];

fn rate(label: &str, iterations: usize, f: impl Fn(&str) -> usize) {
    // Warm up (compiles the rule tables).
    for m in MESSAGES {
        black_box(f(m));
    }
    let start = Instant::now();
    let mut sink = 0usize;
    for _ in 0..iterations {
        for m in MESSAGES {
            sink = sink.wrapping_add(f(black_box(m)));
        }
    }
    let elapsed = start.elapsed();
    let n = iterations * MESSAGES.len();
    black_box(sink);
    println!(
        "{label:<28} {n:>9} messages in {:>8.1} ms = {:>10.0} messages/s ({:.2} µs/message)",
        elapsed.as_secs_f64() * 1e3,
        n as f64 / elapsed.as_secs_f64(),
        elapsed.as_secs_f64() * 1e6 / n as f64
    );
}

fn main() {
    let iterations: usize = std::env::var("GATE_BENCH_ITERATIONS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20_000);
    println!(
        "crisis gate benchmark: {} distinct short messages, one thread",
        MESSAGES.len()
    );
    rate("normalize", iterations, |m| {
        opencouch_safety::normalize(m).len()
    });
    let normalized: Vec<String> = MESSAGES
        .iter()
        .map(|m| opencouch_safety::normalize(m))
        .collect();
    let rules = opencouch_safety::rules::rules().expect("rules load");
    let by_text = |m: &str| {
        MESSAGES
            .iter()
            .position(|x| *x == m)
            .map_or("", |i| normalized[i].as_str())
    };
    rate("phrase families (scan)", iterations, |m| {
        usize::from(rules.scan(by_text(m)).is_empty())
    });
    rate("grammar", iterations, |m| {
        opencouch_safety::grammar::analyze(by_text(m))
            .constructs
            .len()
    });
    rate("classify (no history)", iterations, |m| {
        usize::from(opencouch_safety::classify(&[], m).assessment.level.get())
    });
    let history = vec![
        opencouch_core::Message::user("i had a rough day"),
        opencouch_core::Message::assistant("I'm sorry. Do you want to tell me more?"),
        opencouch_core::Message::user("everything feels heavy"),
    ];
    // As in the runtime: earlier user turns carry the level the gate gave them.
    let mut scored = history.clone();
    for m in scored.iter_mut().filter(|m| m.is_user()) {
        m.crisis_level = Some(0);
    }
    rate(
        "classify (3-turn history, levels stored)",
        iterations,
        |m| {
            usize::from(
                opencouch_safety::classify(&scored, m)
                    .assessment
                    .level
                    .get(),
            )
        },
    );
    rate("classify (3-turn history, unscored)", iterations / 4, |m| {
        usize::from(
            opencouch_safety::classify(&history, m)
                .assessment
                .level
                .get(),
        )
    });
}
