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

/// Sentences of an ordinary long post (written for this benchmark).
const LONG_SENTENCES: &[&str] = &[
    "This semester has been a lot and I don't really know who else to tell.",
    "My roommate moved out without paying her share of the rent, so money is tight.",
    "I've been working extra shifts at the cafe and falling asleep in lectures.",
    "My mum keeps calling to ask about grades and I don't have the heart to tell her.",
    "Some nights I lie awake replaying every conversation from the day.",
    "I know it's not the end of the world, it just feels heavy right now.",
    "My friends say I should talk to the student counselling service, maybe I will.",
    "Anyway, thanks for reading this far, I guess I just needed to get it out.",
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
    let learned = opencouch_safety::learned::LearnedGate::embedded().expect("learned layer");
    rate("learned layer (scoring)", iterations, |m| {
        usize::from(learned.score(by_text(m)).level)
    });
    rate("classify, rules only", iterations, |m| {
        let opts = opencouch_safety::GateOptions { learned: false };
        usize::from(
            opencouch_safety::classify_with(&[], m, opts)
                .assessment
                .level
                .get(),
        )
    });
    rate("classify (no history)", iterations, |m| {
        usize::from(opencouch_safety::classify(&[], m).assessment.level.get())
    });
    // A long post (about 2,000 characters, written for this benchmark).
    let long = LONG_SENTENCES.join(" ").repeat(3);
    let long = &long[..long
        .char_indices()
        .nth(2_000)
        .map_or(long.len(), |(i, _)| i)];
    let long_norm = opencouch_safety::normalize(long);
    let reps = (iterations / 50).max(10);
    let started = Instant::now();
    let mut sink = 0usize;
    for _ in 0..reps {
        sink += usize::from(learned.score(black_box(&long_norm)).level);
    }
    let per = started.elapsed().as_secs_f64() * 1e6 / reps as f64;
    println!(
        "{:<28} {reps:>9} long posts ({} chars): {per:.1} µs/post",
        "learned layer (long post)",
        long.chars().count()
    );
    let started = Instant::now();
    for _ in 0..reps {
        sink += usize::from(
            opencouch_safety::classify(&[], black_box(long))
                .assessment
                .level
                .get(),
        );
    }
    let per = started.elapsed().as_secs_f64() * 1e6 / reps as f64;
    println!(
        "{:<28} {reps:>9} long posts: {per:.1} µs/post",
        "classify (long post)"
    );
    black_box(sink);
    // Distinct messages, each classified once: the phrase families' lazy
    // DFAs meet new text as in real traffic (the repeated messages above
    // run on states already built). The paraphrase sets, 1,398 messages.
    let mut distinct: Vec<String> = Vec::new();
    for set in [
        include_str!("../tests/data/paraphrase_dev.jsonl"),
        include_str!("../tests/data/paraphrase_dev_3.jsonl"),
        include_str!("../tests/data/paraphrase_frozen.jsonl"),
        include_str!("../tests/data/paraphrase_frozen_2.jsonl"),
    ] {
        let cases =
            opencouch_safety::eval::parse_cases(opencouch_safety::eval::DataFormat::Jsonl, set)
                .expect("paraphrase sets parse");
        distinct.extend(cases.into_iter().map(|c| c.message));
    }
    for pass in ["first pass", "second pass"] {
        let started = Instant::now();
        for m in &distinct {
            sink += usize::from(
                opencouch_safety::classify(&[], black_box(m))
                    .assessment
                    .level
                    .get(),
            );
        }
        let per = started.elapsed().as_secs_f64() * 1e6 / distinct.len() as f64;
        println!(
            "{:<28} {:>9} distinct messages, {pass}: {per:.1} µs/message",
            "classify (distinct)",
            distinct.len()
        );
    }
    black_box(sink);
    let started = Instant::now();
    let gate = opencouch_safety::learned::LearnedGate::from_parts(
        include_bytes!("../data/learned_gate.bin"),
        include_str!("../data/learned_gate.toml"),
    )
    .expect("decodes");
    println!(
        "learned layer load (decode the embedded weights): {:.2} ms",
        started.elapsed().as_secs_f64() * 1e3
    );
    black_box(gate);
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
