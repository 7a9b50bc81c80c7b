//! Prints what the deterministic gate decides for each argument (or each
//! line of stdin): level, layer, phrase families and grammar constructs.
//! `cargo run -p opencouch-safety --example explain -- "message"`
//! With `--asked`, each message is read as the answer to the gate's own
//! safety question ("Are you having thoughts of ending your life?").

use std::io::BufRead;

fn explain(msg: &str, asked: bool) {
    let history = if asked {
        vec![
            opencouch_core::Message::user("everything is too much lately"),
            opencouch_core::Message::assistant(
                "Thank you for telling me. Are you having thoughts of ending your life?",
            ),
        ]
    } else {
        Vec::new()
    };
    let c = opencouch_safety::classify(&history, msg);
    let n = opencouch_safety::normalize(msg);
    let g = opencouch_safety::grammar::analyze(&n);
    println!(
        "{} [{}] families={:?} constructs={:?} cues(time={},resolve={},means={}) anchor={}/{} learned={:?} strip={:?}\n    {}",
        c.assessment.level.get(),
        c.layer.as_str(),
        c.matched_families,
        c.constructs,
        g.time_cue,
        g.resolve_cue,
        g.means_cue,
        g.risk_anchor,
        g.learned_anchor,
        c.learned.map(|s| (s.level, s.p_flag, s.p_escalate)),
        g.strip_spans,
        msg
    );
    if std::env::var_os("EXPLAIN_CLAUSES").is_some() {
        for line in opencouch_safety::grammar::debug_clauses(&n) {
            println!("      {line}");
        }
    }
}

fn main() {
    let all: Vec<String> = std::env::args().skip(1).collect();
    let asked = all.iter().any(|a| a == "--asked");
    let args: Vec<&String> = all.iter().filter(|a| *a != "--asked").collect();
    if args.is_empty() {
        for line in std::io::stdin().lock().lines().map_while(Result::ok) {
            explain(&line, asked);
        }
    } else {
        for a in args {
            explain(a, asked);
        }
    }
}
