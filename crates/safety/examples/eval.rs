//! Developer loop for the deterministic gate without building the CLI:
//! `cargo run --release -p opencouch-safety --example eval -- FILE FORMAT`
//! prints the same report as `opencouch eval crisis` (deterministic mode).

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (Some(path), Some(format)) = (args.first(), args.get(1)) else {
        eprintln!("usage: eval FILE jsonl|twitter|kaggle|dreaddit");
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
        let c = opencouch_safety::classify(&case.history, &case.message);
        let level = c.assessment.level.get();
        report.add(case.gold, level);
        let signals: Vec<&str> = c
            .matched_families
            .iter()
            .chain(c.constructs.iter())
            .copied()
            .collect();
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
