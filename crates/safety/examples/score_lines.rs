//! Prints the learned layer's scores for each line of stdin (a development
//! aid: `cargo run -p opencouch-safety --example score_lines < lines.txt`).
use std::io::BufRead;

fn main() {
    let Ok(gate) = opencouch_safety::learned::LearnedGate::embedded() else {
        eprintln!("learned layer failed to load");
        std::process::exit(1);
    };
    for line in std::io::stdin().lock().lines().map_while(Result::ok) {
        let s = gate.score(&opencouch_safety::normalize(&line));
        let c = opencouch_safety::classify(&[], &line);
        println!(
            "{:.3} {:.3} learned={} gate={} [{}] {:?} {:?} {line}",
            s.p_flag,
            s.p_escalate,
            s.level,
            c.assessment.level.get(),
            c.layer.as_str(),
            c.matched_families,
            c.constructs
        );
    }
}
