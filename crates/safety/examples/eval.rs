//! Developer loop for the deterministic gate without building the CLI:
//! `cargo run --release -p opencouch-safety --example eval -- FILE FORMAT`
//! prints the same report as `opencouch eval crisis` (deterministic mode).
//! `--rules-only` turns the learned layer off; `--show-text` prints each
//! escalated or missed message with its id, layer and signals (for reading
//! kinds of errors on the developer's own machine; never copy the rows).
//! `--weights FILE --settings FILE` scores a trial learned layer (as written
//! by `train_learned` with `LEARN_OUT`) instead of the embedded one.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let all: Vec<String> = std::env::args().skip(1).collect();
    let rules_only = all.iter().any(|a| a == "--rules-only");
    let show_text = all.iter().any(|a| a == "--show-text");
    let value = |flag: &str| {
        all.iter()
            .position(|a| a == flag)
            .and_then(|i| all.get(i + 1))
            .cloned()
    };
    let (weights, settings) = (value("--weights"), value("--settings"));
    let trial = match (&weights, &settings) {
        (Some(w), Some(s)) => Some(opencouch_safety::learned::LearnedGate::from_parts(
            &std::fs::read(w)?,
            &std::fs::read_to_string(s)?,
        )?),
        (None, None) => None,
        _ => return Err("--weights and --settings go together".into()),
    };
    let gate = match &trial {
        Some(g) => g,
        None => opencouch_safety::learned::LearnedGate::embedded().map_err(|e| e.to_string())?,
    };
    let skip: Vec<&String> = [&weights, &settings].into_iter().flatten().collect();
    let args: Vec<&String> = all
        .iter()
        .filter(|a| !a.starts_with("--") && !skip.contains(a))
        .collect();
    let (Some(path), Some(format)) = (args.first(), args.get(1)) else {
        eprintln!(
            "usage: eval FILE jsonl|twitter|kaggle|dreaddit|esconv [--rules-only] [--show-text] [--weights W --settings S]"
        );
        std::process::exit(2);
    };
    let format: opencouch_safety::eval::DataFormat = format.parse()?;
    let input = std::fs::read_to_string(path)?;
    let cases = opencouch_safety::eval::parse_cases(format, &input)?;
    let levels = cases.iter().any(|c| {
        matches!(
            c.gold,
            opencouch_safety::eval::Gold::Level(_) | opencouch_safety::eval::Gold::LevelIn(_)
        )
    });
    let mut report = opencouch_safety::eval::EvalReport::new(levels);
    let mut misses = opencouch_safety::eval::MissReport::default();
    let started = std::time::Instant::now();
    for case in &cases {
        let (rules, learned) =
            opencouch_safety::classify_pair_with(&case.history, &case.message, Some(gate));
        let c = if rules_only { rules } else { learned };
        let level = c.assessment.level.get();
        report.add(case.gold, level);
        let signals: Vec<&str> = c
            .matched_families
            .iter()
            .chain(c.constructs.iter())
            .copied()
            .collect();
        if show_text {
            use opencouch_safety::eval::Gold;
            let (gold_high, gold_low) = match case.gold {
                Gold::Level(g) => (g >= 2, g == 0),
                // Bit l set = level l accepted.
                Gold::LevelIn(bits) => (bits & 0b0011 == 0, bits & 0b1100 == 0),
                Gold::Binary(b) => (b, !b),
                Gold::Unlabeled => (false, false),
            };
            if (gold_low && level >= 2) || (gold_high && level < 2) {
                println!(
                    "{}\t{}\t{}\t{}\t{}",
                    case.id,
                    level,
                    c.layer.as_str(),
                    signals.join(","),
                    case.message.replace('\n', " ")
                );
            }
        }
        misses.record(case, level, c.layer.as_str(), &signals);
    }
    println!(
        "{} cases in {:.1} ms",
        cases.len(),
        started.elapsed().as_secs_f64() * 1e3
    );
    print!("{}", report.render());
    print!("{}", misses.render());
    Ok(())
}
