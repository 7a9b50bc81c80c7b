//! The intent layer's cost per message on one core:
//! `cargo bench -p opencouch-runtime --bench intent`.
//!
//! A fixed set of short messages (written for this benchmark, not taken from
//! the corpus or the frozen set) is read repeatedly: by the learned layer
//! alone (normalization, features, scoring), and by the whole layered
//! reading (phrase rules first, then the learned layer), in chat and inside
//! an exercise. Printed as microseconds per message.

use std::hint::black_box;
use std::time::Instant;

use opencouch_runtime::intent::{IntentContext, IntentLayer, decide_chat, decide_exercise};

const MESSAGES: &[&str] = &[
    "ok",
    "hmm not sure",
    "i can see my desk, a mug and the window",
    "can we do this another time, my roommate just got home",
    "thanks, i feel a little better, i'll leave it there for tonight",
    "this is too much for me right now, is there a shorter one",
    "what have you got stored on me",
    "please stop bringing up old chats unless i ask",
    "i'd love something to help me slow my breathing down",
    "how many hours of sleep does a teenager need",
    "my sister keeps ignoring my texts and it hurts",
    "alright, night night, talk tomorrow",
    "I've been feeling really overwhelmed with my thesis and I can't seem to start anything, every time I open the document my chest tightens and I just close it again",
];

fn time(label: &str, rounds: usize, mut f: impl FnMut(&str)) {
    // Warm up (decodes the embedded layer, loads phrase tables).
    for m in MESSAGES {
        f(m);
    }
    let started = Instant::now();
    for _ in 0..rounds {
        for m in MESSAGES {
            f(black_box(m));
        }
    }
    let n = (rounds * MESSAGES.len()) as f64;
    println!(
        "{label:<44} {:>8.2} µs/message",
        started.elapsed().as_secs_f64() * 1e6 / n
    );
}

fn main() {
    let started = Instant::now();
    let layer = IntentLayer::from_parts(
        include_bytes!("../data/intent_layer.bin"),
        include_str!("../data/intent_layer.json"),
    )
    .expect("intent layer decodes");
    println!(
        "decode the embedded weights                  {:>8.2} ms",
        started.elapsed().as_secs_f64() * 1e3
    );
    // A long message (about 2,000 characters: a post pasted in whole).
    let long: String = MESSAGES[MESSAGES.len() - 1]
        .chars()
        .chain(std::iter::once(' '))
        .cycle()
        .take(2_000)
        .collect();
    let t = Instant::now();
    let long_rounds = 200;
    for _ in 0..long_rounds {
        black_box(decide_chat(black_box(&long), None));
    }
    println!(
        "layered chat reading, 2,000 characters       {:>8.2} µs/message",
        t.elapsed().as_secs_f64() * 1e6 / f64::from(long_rounds)
    );
    let t = Instant::now();
    for _ in 0..long_rounds {
        black_box(layer.classify(IntentContext::Chat, black_box(&long)));
    }
    println!(
        "learned layer alone, 2,000 characters        {:>8.2} µs/message",
        t.elapsed().as_secs_f64() * 1e6 / f64::from(long_rounds)
    );
    let rounds = 2_000;
    time("learned layer alone (chat heads)", rounds, |m| {
        black_box(layer.classify(IntentContext::Chat, m));
    });
    time("learned layer alone (exercise heads)", rounds, |m| {
        black_box(layer.classify(IntentContext::Exercise, m));
    });
    time(
        "layered reading in chat (rules, then learned)",
        rounds,
        |m| {
            black_box(decide_chat(m, None));
        },
    );
    time("layered reading in an exercise", rounds, |m| {
        black_box(decide_exercise(m, None));
    });
}
